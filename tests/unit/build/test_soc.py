"""Raw fixed-point inputs, the quantizer proved in the RTL, the register map and the bus wrappers
(docs/hdl.md, "Raw inputs", "Bus wrappers")."""

from __future__ import annotations

import re
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from mi_certify.generator.build.emit_quantizer import emit_raw_design, quantizer_module
from mi_certify.generator.build.emit_soc import emit_soc, regs_module
from mi_certify.generator.build.regmap import emit_rdl, peakrdl_outputs, rdl_name, register_map
from mi_certify.generator.core.errors import SpecError
from mi_certify.generator.core.spec import load_spec
from mi_certify.runtime.quantize import FixedPoint, Quantizer, quantize_words, word_level, word_runs

SPEC = """schema: mi-certify/v1
controller: {{name: ctl, decode: argmax}}
inputs:
  - {{name: a, min: -1.5, max: 2.3, bits: 3}}
  - {{name: b, min: 20, max: 110, bits: 2}}
  - {{name: c, min: 0, max: 1, bits: 1}}
actions: [{{name: keep, conservative: true}}, {{name: go}}]
fsm: {{hysteresis: 1, cooldown: 0, violations_to_fallback: 1, recovery: 1}}
hdl: {hdl}
"""
FORMATS = "{input_format: {signed: false, int_bits: 8, frac_bits: 2}, inputs: {a: {signed: true, int_bits: 3, frac_bits: 5}, c: {signed: false, int_bits: 1, frac_bits: 3}}}"


def _spec(tmp_path: Path, hdl: str = FORMATS):
    p = tmp_path / "sla.yaml"
    p.write_text(SPEC.format(hdl=hdl))
    return load_spec(p)


def test_fixed_point_value_is_exact_twos_complement():
    f = FixedPoint(True, 3, 5)
    assert f.width == 8 and f.value(0x7F) == Fraction(127, 32) and f.value(0x80) == Fraction(-4)
    assert FixedPoint(False, 12, 0).value(4095) == 4095
    with pytest.raises(ValueError):
        f.value(256)


def test_word_level_and_quantize_words_follow_the_runtime_quantizer():
    qz, f = Quantizer.from_floats(-1.5, 2.3, 3), FixedPoint(True, 3, 5)
    assert word_level(qz, f, 0xD0) == qz.level(Fraction(-48, 32)) == 0  # -1.5: the envelope's edge
    assert word_level(qz, f, 0xCF) is None  # -1.53125: below the envelope
    assert word_level(qz, f, None) is None  # a missing reading
    runs = word_runs(qz, f)
    assert runs[0] == (-128, -49, None) and runs[-1][2] is None and [r[2] for r in runs[1:-1]] == list(range(8))
    assert quantize_words([0x20, None], [qz, qz], [f, f]) == (0, True, [qz.level(1), None])


@pytest.mark.parametrize("hdl, where", [
    ("{inputs: {z: {signed: false, int_bits: 4, frac_bits: 0}}}", "hdl.inputs.z"),
    ("{inputs: {a: {signed: true, int_bits: 4, frac_bits: 0}}}", "hdl.inputs"),  # b and c have no format
    ("{input_format: {signed: false, int_bits: 10, frac_bits: 8}}", "hdl.input_format"),  # 18 bits
    ("{input_format: {signed: false, int_bits: 4, frac_bits: 0}}", "hdl.input_format"),  # b: 20..110 > 15
])
def test_a_bad_raw_format_is_one_spec_error_naming_the_field(tmp_path, hdl, where):
    with pytest.raises(SpecError) as exc:
        _spec(tmp_path, hdl)
    assert exc.value.where == where


@pytest.fixture(scope="module")
def design(tmp_path_factory):
    if shutil.which("yosys") is None:
        pytest.skip("yosys not installed")
    d = tmp_path_factory.mktemp("soc")
    spec = _spec(d)
    for name, text in emit_raw_design(spec, "test", "0" * 64).items():
        (d / name).write_text(text)
    return spec, d


def test_quantizer_is_proved_equal_to_the_runtime_on_every_word(design):
    from mi_certify.verification.rtl.quantizer_proofs import quantizer_obligations
    spec, d = design
    obs, _ = quantizer_obligations(d / f"{quantizer_module(spec)}.v", spec, quantizer_module(spec))
    assert {o.id: o.verdict for o in obs} == {"quantizer.a": "proved", "quantizer.b": "proved",
                                                "quantizer.c": "proved", "quantizer.address": "proved"}


def test_a_threshold_off_by_one_word_is_a_violation_with_the_word(design, tmp_path):
    from mi_certify.verification.rtl.quantizer_proofs import quantizer_obligations
    spec, d = design
    text = (d / f"{quantizer_module(spec)}.v").read_text()
    first = re.search(r"\(u_b >= 10'd(\d+)\)", text)
    bad = text.replace(first.group(0), f"(u_b >= 10'd{int(first.group(1)) + 1})", 1)
    (tmp_path / f"{quantizer_module(spec)}.v").write_text(bad)
    obs = {o.id: o for o in quantizer_obligations(tmp_path / f"{quantizer_module(spec)}.v", spec,
                                                  quantizer_module(spec))[0]}
    assert obs["quantizer.b"].verdict == "violated" and obs["quantizer.a"].verdict == "proved"
    assert int(obs["quantizer.b"].counterexample[0]["q_raw_b"]) == int(first.group(1))


def test_rdl_and_wrapper_decode_agree_address_by_address(tmp_path):
    from systemrdl import RDLCompiler
    spec = _spec(tmp_path)
    (tmp_path / "m.rdl").write_text(emit_rdl(spec, "test", "0" * 64))
    rdlc = RDLCompiler()
    rdlc.compile_file(str(tmp_path / "m.rdl"))
    rdl = {r.inst_name: (r.absolute_address, any(f.is_sw_writable for f in r.fields()))
           for r in rdlc.elaborate().top.registers()}
    core = emit_soc(spec, "test", "0" * 64)[f"{regs_module(spec)}.v"]
    params = {m[0]: int(m[1]) * 4 for m in re.findall(r"localparam \[\d+:0\] A_(\w+)\s*= \d+'d(\d+);", core)}
    decode = re.search(r"case \(waddr\)(.*?)wr_bad = 1'b0;", core, re.S).group(1)
    writable = set(re.findall(r"A_(\w+)", decode))
    readable = set(re.findall(r"A_(\w+)", re.search(r"case \(raddr\)(.*?)rd_bad = 1'b0;", core, re.S).group(1)))
    # the first read stage: group g, slot k (g * 8 + k the word address) -> the register named in its comment
    slots = {name: (int(g) * 8 + int(k)) * 4
             for k, g, name in re.findall(r"^\s+\d+'d(\d+):\s+grp(\d+)_d = .*;  // (\w+)$", core, re.M)}
    assert params == {name: addr for name, (addr, _) in rdl.items()}
    assert writable == {name for name, (_, w) in rdl.items() if w} and readable == set(rdl)
    assert slots == {name: addr for name, (addr, _) in rdl.items()}
    assert [r.name for r in register_map(spec)] == list(rdl)


def test_compiler_directives_stand_on_lines_of_their_own(tmp_path):
    """`default_nettype none was once glued to the end of a comment in <module>_regs.v (a Jinja if ate the
    newline), so it never applied; with and without operator:, every generated bus file opens with it
    and closes with `default_nettype wire, each on a line of its own."""
    reference = load_spec(Path(__file__).resolve().parents[3] / "examples" / "meta_controller" / "sla.yaml")
    for spec, operator in ((reference, True), (_spec(tmp_path), False)):
        assert (spec.operator is not None) == operator
        for name, text in emit_soc(spec, "test", "0" * 64).items():
            lines = text.splitlines()
            directive_lines = [ln for ln in lines if "`default_nettype" in ln or "`timescale" in ln]
            assert directive_lines and all(ln.startswith("`") for ln in directive_lines), (name, directive_lines)
            assert [ln for ln in lines if ln.startswith("`default_nettype")] == ["`default_nettype none",
                                                                              "`default_nettype wire"], name


def _header_offsets(tmp_path: Path, spec, rdl_text: str) -> dict[str, int]:
    """{register: byte offset} as a C99 program compiled by gcc (-Wall -Wextra -Werror) against the
    PeakRDL header of ``rdl_text`` prints them (offsetof of each register of :func:`register_map`)."""
    stem = rdl_name(spec)
    (tmp_path / f"{stem}.h").write_bytes(peakrdl_outputs(rdl_text, stem)[f"{stem}.h"])
    body = "\n".join(f'    printf("{r.name} %zu\\n", offsetof({stem}_t, {r.name}));' for r in register_map(spec))
    (tmp_path / "main.c").write_text(f'#include <stddef.h>\n#include <stdio.h>\n#include "{stem}.h"\n'
                                     f"int main(void) {{\n{body}\n    return 0;\n}}\n")
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "main"),
                    str(tmp_path / "main.c")], check=True, cwd=tmp_path)
    out = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True).stdout
    return {ln.split()[0]: int(ln.split()[1]) for ln in out.splitlines()}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_c99_program_reads_the_offsets_the_wrapper_decodes(tmp_path):
    spec = _spec(tmp_path)
    regs = register_map(spec)
    assert _header_offsets(tmp_path, spec, emit_rdl(spec, "test", "0" * 64)) == {r.name: r.offset for r in regs}


def test_peakrdl_outputs_are_deterministic(tmp_path):
    spec = _spec(tmp_path)
    rdl = emit_rdl(spec, "test", "0" * 64)
    a, b = peakrdl_outputs(rdl, rdl_name(spec)), peakrdl_outputs(rdl, rdl_name(spec))
    assert a == b and f"{rdl_name(spec)}.xml" in a and f"{rdl_name(spec)}_html/index.html" in a
    assert not any("/fonts/" in k for k in a)


#: The held-out 8-input spec (examples/lunarlander/sla.yaml: the VNN-COMP LunarLander controller's
#: envelope, signed Q2.14 / Q4.12 / Q3.13 words and two 1-bit leg contacts). Its quantizer, register map
#: and C header depend on the spec alone, so they are checked here without the (unshipped) network.
HELD_OUT = Path(__file__).resolve().parents[3] / "examples" / "lunarlander" / "sla.yaml"


def test_held_out_8_input_spec_quantizer_is_proved_on_every_word(tmp_path):
    if shutil.which("yosys") is None:
        pytest.skip("yosys not installed")
    from mi_certify.verification.rtl.quantizer_proofs import quantizer_obligations
    spec = load_spec(HELD_OUT)
    assert len(spec.inputs) == 8
    for name, text in emit_raw_design(spec, "test", "0" * 64).items():
        (tmp_path / name).write_text(text)
    obs, _ = quantizer_obligations(tmp_path / f"{quantizer_module(spec)}.v", spec, quantizer_module(spec))
    assert {o.id: o.verdict for o in obs} == {**{f"quantizer.{i.name}": "proved" for i in spec.inputs},
                                                "quantizer.address": "proved"}
    # the legs: one unsigned bit each, 0 -> level 0, 1 -> level 1 (the cell edge at 0.5), never a fault
    leg = next(i for i in spec.inputs if i.name == "left_leg")
    qz = Quantizer.from_floats(leg.min, leg.max, leg.bits)
    assert [word_level(qz, FixedPoint(False, 1, 0), w) for w in (0, 1)] == [0, 1]
    # a signed Q2.14 position: -1.5 (word 0xA000) is the envelope's edge, one word below it a fault
    x = spec.inputs[0]
    qx, fx = Quantizer.from_floats(x.min, x.max, x.bits), FixedPoint(True, 2, 14)
    assert word_level(qx, fx, 0xA000) == 0 and word_level(qx, fx, 0x9FFF) is None


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_held_out_8_input_spec_register_map_header_and_wrapper_agree(tmp_path):
    from systemrdl import RDLCompiler
    spec = load_spec(HELD_OUT)
    rdl_text = emit_rdl(spec, "test", "0" * 64)
    (tmp_path / "m.rdl").write_text(rdl_text)
    rdlc = RDLCompiler()
    rdlc.compile_file(str(tmp_path / "m.rdl"))
    rdl = {r.inst_name: r.absolute_address for r in rdlc.elaborate().top.registers()}
    core = emit_soc(spec, "test", "0" * 64)[f"{regs_module(spec)}.v"]
    params = {m[0]: int(m[1]) * 4 for m in re.findall(r"localparam \[\d+:0\] A_(\w+)\s*= \d+'d(\d+);", core)}
    assert params == rdl and sum(1 for n in rdl if n.startswith("RAW")) == 8
    regs = register_map(spec)
    assert _header_offsets(tmp_path, spec, rdl_text) == {r.name: r.offset for r in regs}
