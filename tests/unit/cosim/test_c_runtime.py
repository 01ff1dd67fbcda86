"""The emitted C runtime (docs/c-runtime.md): the emitter's text, the compile flags, MISRA, the
co-simulation against the reference and the Python runtime, a flipped table entry caught, and random
small controllers (hypothesis)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mi_certify.generator.build.emit_c import MISRA_DEVIATIONS, c_literal, emit_c
from mi_certify.generator.build.emit_common import SourceHashes
from mi_certify.generator.build.emit_python import emit_python, level_thresholds
from mi_certify.generator.core.lut import LutFsmArtefact, property_masks
from mi_certify.generator.core.spec import load_spec
from mi_certify.verification.cosim import c_cosim
from mi_certify.verification.tools import c_tools
from mi_certify.verification.tools.registry import available

needs_cc = pytest.mark.skipif(not all(available(t) for t in ("gcc", "clang", "cppcheck", "arm-none-eabi-gcc",
                                                              "arm-none-eabi-size")),
                              reason="gcc, clang, cppcheck or arm-none-eabi-gcc not installed (make setup installs them)")

SPEC = """schema: mi-certify/v1
controller: {{name: tiny_ctl, decode: argmax}}
inputs:
{inputs}
actions:
{actions}
fsm: {{hysteresis: {H}, cooldown: {D}, violations_to_fallback: {W}, recovery: {R}}}
{properties}
"""


def tiny_ctl_controller(tmp: Path, seed: int, bits=(2, 1), n_actions=3, fsm=(2, 1, 2, 2), mask=True):
    """(spec, machine, python runtime path, C source path) of a random controller: inputs of ``bits``,
    envelopes with awkward decimal edges, a random table, one forbid property when ``mask``."""
    rng = random.Random(seed)
    inputs = "\n".join(f"  - {{name: x{i}, min: {-0.3 * (i + 1)}, max: {0.7 + i * 1.1}, bits: {b}}}"
                       for i, b in enumerate(bits))
    actions = "\n".join(f"  - {{name: a{k}{', conservative: true' if k == 0 else ''}}}" for k in range(n_actions))
    props = (f"properties:\n  - {{id: P1, when: {{x0: [0.0, 0.7]}}, forbid: [a{n_actions - 1}]}}"
             if mask and n_actions > 1 else "")
    H, D, W, R = fsm
    (tmp / "sla.yaml").write_text(SPEC.format(inputs=inputs, actions=actions, H=H, D=D, W=W, R=R, properties=props))
    spec = load_spec(tmp / "sla.yaml")
    cells = 1 << sum(bits)
    table = np.array([rng.randrange(n_actions) | (0x80 if rng.random() < 0.8 else 0) for _ in range(cells)],
                     dtype=np.uint8)
    machine = LutFsmArtefact.from_table(spec, table, property_masks(spec))
    hashes = SourceHashes("0" * 64, "1" * 64, machine.sha256)
    py = tmp / "tiny_ctl.py"
    py.write_text(emit_python(spec, machine, hashes, "test"))
    h, c = emit_c(spec, machine, hashes, "test")
    (tmp / "tiny_ctl.h").write_text(h)
    (tmp / "tiny_ctl.c").write_text(c)
    return spec, machine, py, tmp / "tiny_ctl.c"


def test_c_literals_read_back_as_the_same_double():
    assert c_literal(0.1) == "0.1" and c_literal(1024) == "1024.0" and c_literal(1e-300) == "1e-300"
    with pytest.raises(ValueError):
        c_literal(float("nan"))


def test_emitted_c_has_the_provenance_header_const_tables_and_no_heap_or_float_arithmetic(tmp_path):
    spec, machine, _, src = tiny_ctl_controller(tmp_path, 0)
    c, h = src.read_text(), src.with_suffix(".h").read_text()
    assert f"LUT    {machine.sha256}" in h and "model  " + "0" * 64 in h and "spec   " + "1" * 64 in c
    assert "void tiny_ctl_step(tiny_ctl_state_t *state, const double readings[], bool sla_violation" in h
    assert not re.search(r"\b(malloc|free|calloc|realloc|float)\b", c)
    thresholds = [*level_thresholds(-0.3, 0.7, 2), *level_thresholds(-0.6, 1.8, 1)]
    assert len(thresholds) == 4 and thresholds == sorted(thresholds[:3]) + thresholds[3:]
    # doubles appear only in comparisons and const tables: no + - * / on a double anywhere
    assert [ln.strip() for ln in c.splitlines() if "double" in ln] == [
        "static const double tiny_ctl_min[TINY_CTL_N_INPUTS] = { -0.3, -0.6 };",
        "static const double tiny_ctl_max[TINY_CTL_N_INPUTS] = { 0.7, 1.8 };",
        "static const double tiny_ctl_thresholds[4] = {",
        "static uint32_t tiny_ctl_level(uint32_t first, uint32_t low_bits, uint32_t groups, double x)",
        "bool tiny_ctl_quantize(const double readings[], uint32_t *addr)",
        "const double x = readings[0u];",
        "const double x = readings[1u];",
        "void tiny_ctl_step(tiny_ctl_state_t *state, const double readings[], bool sla_violation, tiny_ctl_record_t *record)"]
    assert ", ".join(map(c_literal, thresholds)) + "," in c
    # x (the one double variable) is only compared: with the envelope and with the thresholds
    assert [ln.strip() for ln in c.splitlines() if re.search(r"\bx\b", ln) and "double" not in ln
                                                 and not ln.strip().startswith(("/*", "*"))] == [
        "g += (x >= tiny_ctl_thresholds[first + (k * size) - 1u]) ? 1u : 0u;",
        "level += (x >= tiny_ctl_thresholds[first + (g * size) + k]) ? 1u : 0u;",
        "const bool in = (x >= tiny_ctl_min[0u]) && (x <= tiny_ctl_max[0u]);",
        "a |= tiny_ctl_level(0u, 1u, 2u, x) << 1u;",
        "const bool in = (x >= tiny_ctl_min[1u]) && (x <= tiny_ctl_max[1u]);",
        "a |= tiny_ctl_level(3u, 0u, 2u, x) << 0u;"]
    assert "static const uint32_t tiny_ctl_lut[2]" in c       # 8 entries, four a word
    # deterministic: the same inputs give the same text
    assert emit_c(spec, machine, SourceHashes("0" * 64, "1" * 64, machine.sha256), "test") == (h, c)


@needs_cc
def test_compilers_misra_and_cortex_m4_on_a_tiny_ctl_controller(tmp_path):
    spec, machine, py, src = tiny_ctl_controller(tmp_path, 1)
    for cc in ("gcc", "clang"):
        res = c_tools.compile_check(cc, src, tmp_path / "o")
        assert res["clean"] and res["messages"] == [] and res["flags"] == list(c_tools.WARN_FLAGS)
    verdict = c_cosim.misra_verdict(c_tools.misra(src))
    assert verdict["unexplained"] == [] and {d["rule"] for d in verdict["deviations"]} <= set(MISRA_DEVIATIONS)
    m4 = c_tools.cortex_m4(src, tmp_path / "m4", ["tiny_ctl_step"])
    assert m4["ram_bytes"] == 0 and m4["const_bytes"] > 0 and 0 < m4["code_bytes"] < 4096
    assert m4["worst_stack"]["tiny_ctl_step"]["path"][0] == "tiny_ctl_step" and m4["worst_stack"]["tiny_ctl_step"]["bytes"] > 0


@needs_cc
def test_relative_paths_compile_as_absolute_ones(tmp_path, monkeypatch):
    """`check certs/meta_controller` hands the tools paths relative to the caller's folder, while the
    compilers run in another one: the Cortex-M4 figures and the compile check must not depend on it."""
    spec, machine, py, src = tiny_ctl_controller(tmp_path, 1)
    absolute = c_tools.cortex_m4(src, tmp_path / "m4a", ["tiny_ctl_step"])
    monkeypatch.chdir(tmp_path)
    rel = src.relative_to(tmp_path)
    assert c_tools.cortex_m4(rel, Path("m4r"), ["tiny_ctl_step"])["code_bytes"] == absolute["code_bytes"]
    assert c_tools.compile_check("gcc", rel, Path("o"))["clean"] and (tmp_path / "o" / "tiny_ctl.gcc.o").exists()


@needs_cc
def test_a_warning_fails_the_compile_check_and_a_new_misra_rule_is_unexplained(tmp_path):
    _, _, _, src = tiny_ctl_controller(tmp_path, 2)
    src.write_text(src.read_text() + "\nint tiny_ctl_extra(int x);\nint tiny_ctl_extra(int x) { unsigned char c = x; return c; }\n")
    res = c_tools.compile_check("gcc", src, tmp_path / "o")
    assert not res["clean"] and any("[-Werror=conversion]" in m for m in res["messages"])
    verdict = c_cosim.misra_verdict(c_tools.misra(src))
    assert verdict["unexplained"], "a finding outside the deviation list must be unexplained"


@needs_cc
def test_c_equals_reference_and_python_and_a_flipped_table_entry_is_caught(tmp_path):
    spec, machine, py, src = tiny_ctl_controller(tmp_path, 3)
    lib = c_cosim.build_harness(src, tmp_path / "h")
    res = c_cosim.cosim_c(lib, spec, machine, 10_000, 1, (), py)
    assert (res["mismatches"], res["lut_mismatches"], res["quantizer_mismatches"], res["address_mismatches"]) == (0,) * 4
    assert res["cycles"] > 10_000 and res["lut_entries"] == 8 and res["address_points"] == 8 + 2
    assert res["python_runtime_compared"] and res["quantizer_points"] == 2 * 7 + 2 * (3 + 1)
    # one LUT entry's confident bit flipped in the C text: caught by the table read at every address
    text = src.read_text()
    i = text.index("tiny_ctl_lut[")
    m = re.search(r"0x([0-9a-f]{8})u", text[i:])
    a, b = i + m.start(1), i + m.end(1)
    src.write_text(text[:a] + f"{int(text[a:b], 16) ^ 0x80:08x}" + text[b:])
    bad = c_cosim.cosim_c(c_cosim.build_harness(src, tmp_path / "h2"), spec, machine, 10_000, 1, (), py)
    assert bad["lut_mismatches"] == 1 and bad["first_lut_mismatch"] == 0


@needs_cc
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), bits=st.lists(st.integers(1, 3), min_size=1, max_size=3),
       n_actions=st.integers(2, 9), fsm=st.tuples(st.integers(1, 3), st.integers(0, 3), st.integers(1, 3),
                                                 st.integers(1, 3)))
def test_random_tiny_ctl_controllers_c_equals_python_and_reference(tmp_path_factory, seed, bits, n_actions, fsm):
    tmp = tmp_path_factory.mktemp("rand")
    spec, machine, py, src = tiny_ctl_controller(tmp, seed, tuple(bits), n_actions, fsm, mask=len(bits) > 0)
    res = c_cosim.cosim_c(c_cosim.build_harness(src, tmp / "h"), spec, machine, 100_000, seed, (), py)
    assert (res["mismatches"], res["lut_mismatches"], res["quantizer_mismatches"], res["address_mismatches"]) == (0,) * 4


@needs_cc
def test_the_c_step_through_ctypes_returns_the_python_steps_values_and_types(tmp_path):
    from fractions import Fraction

    from mi_certify.runtime.c_step import CController, load_c_library
    from mi_certify.verification.cosim.cocotb_sim import load_runtime_module
    spec, machine, py, src = tiny_ctl_controller(tmp_path, 5, fsm=(1, 0, 1, 1))
    mod = load_runtime_module(py)
    c = CController(load_c_library(c_tools.shared_library([src], tmp_path / "lib.so"), "tiny_ctl"), "tiny_ctl", mod)
    p = mod.Controller()
    rng = random.Random(5)
    odd = [None, float("nan"), float("inf"), 1, Fraction(1, 3), np.float32(0.25), np.int64(0), -5.0, 0.7]
    for i in range(3000):
        values = [rng.choice(odd) if rng.random() < 0.2 else rng.uniform(-1.0, 2.0) for _ in range(2)]
        if rng.random() < 0.5:
            values = tuple(values)
        viol = rng.random() < 0.3
        want, got = p.step_record(values, viol), c.step_record(values, viol)
        assert got == want and [type(x) for x in got] == [type(x) for x in want], (i, values)
        assert c.state == p.state and type(c.state[5]) is int
    with pytest.raises(ValueError):
        c.step_record([0.1], False)
    with pytest.raises(ValueError):
        c.step_addr(8, False, False)
