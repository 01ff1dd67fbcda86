"""Issue 37: a whole build with sla.yaml ``operator:`` (the reference network on a 10-bit grid, lock of
int4 and merge_conv, forced conservative): every FSM and RTL obligation proved (the fsm.operator.*
ones listed in proofs/index.json), the co-simulation drives random commands with 0 mismatches, and
``check`` re-derives all of it."""

from __future__ import annotations

import json
import re

import pytest

from conftest import REFERENCE_MODEL, REFERENCE_SLA
from mi_certify.generator.pipeline.runner import BuildOptions, build
from mi_certify.verification.check.bundle_check import CheckOptions, check_bundle

OPERATOR = "operator: {lock: [int4, merge_conv], force_conservative: true, max_lock_steps: 50, keys: [ops-1]}\n"


@pytest.fixture(scope="module")
def operator_build(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("operator")
    text = re.sub(r"bits: \d\}", "bits: 2}", re.sub(r"\noperator: \{.*\}", "", REFERENCE_SLA.read_text()))
    text = text.replace("encoding: sliced_rom", "encoding: case")
    text = re.sub(r"\ncosim:.*", "\n", text, flags=re.S) + OPERATOR   # no coverage thresholds: a 10-bit grid
    (tmp / "sla.yaml").write_text(text)
    out = tmp / "out"
    res = build(REFERENCE_MODEL, tmp / "sla.yaml", out, BuildOptions(verify=False, distill=False, skip_synth=True,
                                                                       cosim_cycles=100_000))
    return res, out


def test_operator_obligations_are_proved_and_indexed(operator_build):
    res, out = operator_build
    index = {o["id"]: o for o in json.loads((out / "proofs" / "index.json").read_text())["obligations"]}
    for oid in ("fsm.operator.lock_safe", "fsm.operator.expiry", "fsm.operator.release"):
        assert index[oid]["verdict"] == "proved" and index[oid]["group"] == "fsm"
        assert (out / index[oid]["evidence"]).read_text().startswith("; mi-certify proof obligation")
    assert set(res.summary["fsm_proofs"].values()) == {"proved"} and len(res.summary["fsm_proofs"]) == 10
    assert set(res.summary["rtl_proofs"].values()) == {"proved"}
    v = (out / "meta_controller.v").read_text()
    assert "input  wire [1:0]   op_cmd," in v and "OP_STEPS" in v


def test_cosim_drives_random_commands_with_no_mismatch(operator_build):
    _res, out = operator_build
    cosim = json.loads((out / "cosim.json").read_text())
    assert cosim["passed"] and cosim["mismatches"] == 0 and cosim["cycles"] - cosim["directed_cycles"] == 100_000
    assert cosim["reasons_seen"]["LOCKED"] > 1000 and cosim["reasons_seen"]["FORCED"] > 1000


def test_check_re_derives_the_operator_bundle(operator_build):
    _res, out = operator_build
    items = check_bundle(out, CheckOptions(rerun_network=False))
    failed = [(i.name, i.detail) for i in items if i.status == "FAIL"]
    assert not failed, failed
    names = [i.name for i in items]
    assert any(n.startswith("fsm.operator.lock_safe") for n in names)


def test_operator_manual_ties_every_line_to_an_obligation_of_the_bundle(operator_build):
    """operator.md (and report.html's "Operator manual"): every action says whether and how it may be
    overridden; every line names a proof obligation of proofs/index.json (with its verdict) or says it
    is checked by test / assumed."""
    _res, out = operator_build
    index = {o["id"]: o["verdict"] for o in json.loads((out / "proofs" / "index.json").read_text())["obligations"]}
    text = (out / "operator.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| ---")]
    actions = {ln.split(" | ")[0][2:].split(" ")[0]: ln for ln in rows[1:5]}
    assert set(actions) == {"keep", "merge_conv", "int4", "offload_cpu"}
    assert "lock (`lock int4`): the lock is in force for at most 50 steps" in actions["int4"] and "P1 (temperature_c" in \
        actions["int4"]
    assert actions["offload_cpu"].split(" | ")[1] == "never: only the automatic machine puts it in force"
    assert "force (`force`" in actions["keep"]
    for ln in rows[1:]:
        if ln.startswith("| # ") or ln.startswith("| action "):
            continue
        ids = re.findall(r"`([a-z]+\.[A-Za-z0-9_.]+)` \((\w[\w ]*)\)", ln)
        assert ids or "checked by test" in ln, ln
        for oid, verdict in ids:
            assert index[oid] == verdict == "proved", (oid, verdict)
    html = (out / "report.html").read_text()
    assert 'id="operator-actions"' in html and 'id="operator-rules"' in html
    manifest = json.loads((out / "manifest.json").read_text())
    assert "operator.md" in manifest["files"]


def test_the_bus_wrappers_carry_the_command_and_the_bus_cosim_drives_it(operator_build):
    """The OP register (AXI4-Lite and Wishbone, SystemRDL, C header): writes reach the core's command port;
    the bus co-simulation sees LOCKED (9) and FORCED (10) steps with 0 mismatches."""
    _res, out = operator_build
    rdl = (out / "meta_controller_regs.rdl").read_text()
    assert "} OP @ 0x030;" in rdl and "CMD[1:0]" in rdl
    assert "#define META_CONTROLLER_REGS__OP__CMD_bm 0x3" in (out / "meta_controller_regs.h").read_text()
    assert ".op_cmd(op_cmd_q), .op_arg(op_arg_q)," in (out / "meta_controller_regs.v").read_text()
    soc = json.loads((out / "soc.json").read_text())["bus_cosim"]
    for bus in ("axil", "wb"):
        rep = soc[bus]
        assert rep["passed"] and rep["mismatches"] == 0
        assert rep["reasons_seen"].get("9", 0) > 10 and rep["reasons_seen"].get("10", 0) > 5, rep["reasons_seen"]
