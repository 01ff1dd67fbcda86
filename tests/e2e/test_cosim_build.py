"""Whole builds. Hardware SLA monitor, vector co-simulation, coverage: values asserted, and failures that must happen."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import ROOT, REFERENCE_MODEL, REFERENCE_SLA
from mi_certify.generator.pipeline.runner import BuildOptions, build
from mi_certify.generator.core.spec import load_spec
from mi_certify.runtime.sla import SlaLimits
from mi_certify.generator.core.lut import LutFsmArtefact
from mi_certify.verification.cosim.cocotb_sim import run_cosim

MONITOR = ROOT / "hdl" / "sla_monitor.v"
REF_LIMITS = [SlaLimits(a.latency_ms, a.accuracy_loss_pct) for a in load_spec(REFERENCE_SLA).actions]


# --- the monitor's units ------------------------------------------------------------------------


def test_fsm_cosimulation_fails_when_the_reference_expectation_is_altered(reference_build, tmp_path):
    from mi_certify.generator.core.lut import property_masks
    lut = bytes.fromhex((reference_build / "lut.hex").read_text().replace("\n", ""))

    def alter(stimulus, expected):
        expected[5000] = [expected[5000][0], expected[5000][1] ^ 1] + expected[5000][2:]   # one reason code
        return expected
    spec = load_spec(REFERENCE_SLA)
    res = run_cosim(reference_build / "meta_controller.v", "meta_controller",
                    LutFsmArtefact.from_table(spec, lut, property_masks(spec)), tmp_path, reference=alter,
                    latency=spec.hdl.latency_cycles)
    assert not res.passed and res.mismatches == 1 and res.first_mismatch["cycle"] == 5000
    assert res.first_mismatch["rtl"]["reason"] ^ 1 == res.first_mismatch["reference"]["reason"]


def test_reference_build_reports_deep_cosimulation_and_coverage(reference_build):
    s = json.loads((reference_build / "summary.json").read_text())
    assert s["cosim"]["cycles"] >= 100_000 and s["cosim"]["mismatches"] == 0
    cov = s["coverage"]
    assert cov["passed"] is True and cov["reasons"] == 1.0
    # every reason code is possible for the reference (MASKED: property P2 forbids merge_conv at low utilisation;
    # LOCKED and FORCED: the reference declares an operator, and the co-simulation drives its commands)
    reasons = json.loads((reference_build / "coverage.json").read_text())["functional"]["reasons"]
    assert (reasons["seen"], reasons["total"], reasons["impossible"]) == (11, 11, [])
    assert reasons["counts"]["LOCKED"] > 0 and reasons["counts"]["FORCED"] > 0
    assert set(cov["thresholds"]) == {"lut_cells", "reasons", "transitions", "line", "toggle", "branch"}
    for kind, minimum in cov["thresholds"].items():
        assert cov[kind] >= minimum, kind
    mon = json.loads((reference_build / "monitor_cosim.json").read_text())
    assert mon["passed"] and all(c["mismatches"] == 0 for c in mon["configs"])
    assert (reference_build / "sla_monitor.v").read_bytes() == MONITOR.read_bytes()
    assert "2500000" in (reference_build / "meta_controller_sla_monitor.v").read_text()   # 50 ms at hdl.clock_mhz 50


@pytest.mark.skipif(shutil.which("verilator") is None, reason="verilator is installed by make setup")
def test_small_build_measures_code_coverage_and_fails_below_a_threshold(tmp_path):
    text = REFERENCE_SLA.read_text().split("\ncosim:")[0]
    text = re.sub(r"bits: \d\}", "bits: 1}", text)
    sla = tmp_path / "sla.yaml"
    sla.write_text(text + "\ncosim: {cycles: 10000, monitor_requests: 100, coverage: {reasons: 1.0, line: 0.5, "
                          "toggle: 0.99, branch: 0.5}}\n")
    res = build(REFERENCE_MODEL, sla, tmp_path / "out", BuildOptions(verify=False, distill=False, skip_rtl_proofs=True,
                                                                     skip_synth=True))
    cov = res.summary["coverage"]
    assert 0.5 < cov["toggle"] < 0.99 and cov["line"] == 1.0 and cov["branch"] == 1.0
    assert res.status == "failed" and res.summary["failed_stages"] == ["cosim"]
    assert "toggle coverage" in res.summary["stages"]["cosim"]["error"] and "cosim.coverage.toggle" in \
        res.summary["stages"]["cosim"]["error"]
    replay = json.loads((tmp_path / "out" / "coverage.json").read_text())["verilator_replay"]
    assert replay["mismatches"] == 0 and replay["cycles"] == res.summary["cosim"]["cycles"]


def test_audit_port_is_compared_every_cycle_and_a_wrong_audit_expectation_fails(tmp_path):
    text = REFERENCE_SLA.read_text().split("\ncosim:")[0]
    text = re.sub(r"bits: \d\}", "bits: 1}", text)
    assert re.search(r"latency: \d,", text)
    sla = tmp_path / "sla.yaml"
    sla.write_text(re.sub(r"latency: \d,", "latency: 1,", text))  # the audit timing below is the one-cycle one
    out = tmp_path / "out"
    build(REFERENCE_MODEL, sla, out, BuildOptions(verify=False, distill=False, skip_rtl_proofs=True, skip_cosim=True,
                                                  skip_lint=True, skip_synth=True))
    spec = load_spec(sla)
    from mi_certify.generator.core.lut import property_masks
    from mi_certify.verification.cosim.cocotb_sim import AUDIT_PORTS, fsm_ports
    _, outs, _ = fsm_ports(out / "meta_controller.v", "meta_controller")
    assert [p.name for p in outs] == ["token", "reason", *AUDIT_PORTS]
    lut = bytes.fromhex((out / "lut.hex").read_text().replace("\n", ""))
    args = (out / "meta_controller.v", "meta_controller", LutFsmArtefact.from_table(spec, lut, property_masks(spec)))
    good = run_cosim(*args, tmp_path / "w1", latency=spec.hdl.latency_cycles)
    assert good.passed and good.cycles > 10_000
    assert all(e[2] == 1 - r[0] for e, r in zip(good.job.expected, good.job.stimulus))   # audit_valid after steps

    def alter(stimulus, expected):
        i = next(k for k, r in enumerate(stimulus) if r[0] == 0 and k > 100)
        expected[i] = expected[i][:5] + [expected[i][5] ^ 1]                              # audit_addr
        expected[i + 1] = expected[i + 1][:2] + [expected[i + 1][2] ^ 1] + expected[i + 1][3:]  # audit_valid
        return expected
    bad = run_cosim(*args, tmp_path / "w2", reference=alter, latency=spec.hdl.latency_cycles)
    assert not bad.passed and bad.mismatches == 2
    assert bad.first_mismatch["rtl"]["audit_addr"] ^ 1 == bad.first_mismatch["reference"]["audit_addr"]
