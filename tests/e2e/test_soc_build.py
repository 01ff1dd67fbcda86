"""The reference build's drop-in IP (docs/hdl.md, "Raw inputs", "Bus wrappers"): the soc stage's record,
and a wrapper whose read data is wrong caught by the bus co-simulation."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from mi_certify.generator.core.spec import load_spec
from mi_certify.verification.cosim.bus_cosim import run_bus_cosim


def test_reference_build_proves_the_quantizer_and_cosimulates_both_buses(reference_build):
    soc = json.loads((reference_build / "summary.json").read_text())["stages"]["soc"]
    assert soc["status"] == "ok" and soc["lint"] == {"clean": True}
    assert set(soc["quantizer_proofs"]) == {"quantizer.compute_util", "quantizer.cache_chase_ns",
                                            "quantizer.mem_bw_avail_gbs", "quantizer.free_sram_kb",
                                            "quantizer.temperature_c", "quantizer.address"}
    assert set(soc["quantizer_proofs"].values()) == {"proved"}
    for bus in ("axil", "wb"):
        assert soc["bus_cosim"][bus]["mismatches"] == 0 and soc["bus_cosim"][bus]["transactions"] >= 2000
    for f in ("meta_controller_regs.rdl", "meta_controller_regs.h", "meta_controller_regs.xml",
              "meta_controller_regs_html/index.html", "meta_controller_axil.v", "meta_controller_wb.v"):
        assert f in json.loads((reference_build / "manifest.json").read_text())["files"]


def test_a_wrong_read_multiplexer_is_caught_over_the_bus(reference_build, tmp_path):
    d = tmp_path / "b"
    shutil.copytree(reference_build, d)
    regs = d / "meta_controller_regs.v"
    text = regs.read_text()
    assert "grp0_d = {20'd0, audit_reason, 6'd0, audit_token};" in text
    regs.write_text(text.replace("grp0_d = {20'd0, audit_reason, 6'd0, audit_token};",
                                 "grp0_d = {20'd0, reason, 6'd0, audit_token ^ {1'b0, audit_valid}};"))
    summary = json.loads((d / "summary.json").read_text())
    spec = load_spec(next((d / "inputs" / "spec").glob("*.yaml")))
    spec = dataclasses.replace(spec, hdl=spec.hdl.with_latency(summary["stages"]["emit"]["latency"]))
    rep = run_bus_cosim(spec, d, d / "meta_controller.py", "axil", 300, tmp_path / "work")
    assert not rep["passed"] and rep["mismatches"] > 0 and rep["first_mismatch"]["what"] == "read data"


def test_an_op_register_that_does_not_reach_the_core_is_caught_over_the_bus(reference_build, tmp_path):
    """The reference declares operator: its OP register drives the core's command port; a wrapper whose
    command never reaches the core is caught by the bus co-simulation (the directed commands of the bench)."""
    d = tmp_path / "b"
    shutil.copytree(reference_build, d)
    regs = d / "meta_controller_regs.v"
    text = regs.read_text()
    assert ".op_cmd(op_cmd_q), .op_arg(op_arg_q)," in text
    regs.write_text(text.replace(".op_cmd(op_cmd_q)", ".op_cmd(2'd0)"))
    summary = json.loads((d / "summary.json").read_text())
    assert json.loads((d / "soc.json").read_text())["bus_cosim"]["axil"]["reasons_seen"]["9"] > 0   # LOCKED seen
    spec = load_spec(next((d / "inputs" / "spec").glob("*.yaml")))
    spec = dataclasses.replace(spec, hdl=spec.hdl.with_latency(summary["stages"]["emit"]["latency"]))
    rep = run_bus_cosim(spec, d, d / "meta_controller.py", "wb", 300, tmp_path / "work")
    assert not rep["passed"] and rep["mismatches"] > 0
    assert rep["first_mismatch"]["what"] == "controller outputs (token, reason, audit_valid, audit_addr)"


def _bus_cosim_of_edited(reference_build, tmp_path, name: str, old: str, new: str, bus: str) -> dict:
    """The bus co-simulation (300 transactions after the directed cases) of the reference bundle with ``old``
    replaced by ``new`` in its file ``name``."""
    d = tmp_path / "b"
    shutil.copytree(reference_build, d)
    text = (d / name).read_text()
    assert old in text
    (d / name).write_text(text.replace(old, new, 1))
    summary = json.loads((d / "summary.json").read_text())
    spec = load_spec(next((d / "inputs" / "spec").glob("*.yaml")))
    spec = dataclasses.replace(spec, hdl=spec.hdl.with_latency(summary["stages"]["emit"]["latency"]))
    return run_bus_cosim(spec, d, d / "meta_controller.py", bus, 300, tmp_path / "work")


def test_a_raw_top_that_skips_the_register_on_sla_violation_is_caught_over_the_bus(reference_build, tmp_path):
    """The raw top registers sla_violation with the reading (docs/hdl.md, "SLA requests over the bus"): fed
    straight, the controller of a FREE_RUN machine sees a verdict one cycle early (the bench's directed SLA
    requests: compliant and violating verdicts while the machine steps every cycle)."""
    rep = _bus_cosim_of_edited(reference_build, tmp_path, "meta_controller_raw.v", ".sla_violation(sla_violation_q),",
                               ".sla_violation(sla_violation),", "axil")
    assert not rep["passed"] and rep["mismatches"] > 0
    assert rep["first_mismatch"]["what"] == "controller outputs (token, reason, audit_valid, audit_addr)"


@pytest.mark.parametrize("old, new", [
    ("sla_action <= token;", "sla_action <= 2'd0;"),                  # the request's action lost
    ("sla_unknown <= sla_unknown_w;", "sla_unknown <= 1'b0;"),          # ACC_UNKNOWN lost
    (".req_start(sla_start)", ".req_start(sla_start_w)"),                # START one cycle before DONE's timing
])
def test_an_sla_cmd_that_reaches_the_monitor_wrong_is_caught_over_the_bus(reference_build, tmp_path, old, new):
    """The bench models the SLA monitor from the SLA_CMD writes (CycleSlaMonitor) and compares its outputs
    every cycle: the register core's SLA_CMD stage is checked, not only read back."""
    rep = _bus_cosim_of_edited(reference_build, tmp_path, "meta_controller_regs.v", old, new, "wb")
    assert not rep["passed"] and rep["mismatches"] > 0
    assert rep["first_mismatch"]["what"].startswith("SLA monitor outputs")
