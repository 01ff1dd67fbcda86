"""Co-simulation of the bus wrappers over the bus (cocotb + Icarus; the bench is
:mod:`mi_certify.verification.cosim.bus_tb`): random raw inputs, strobes and reads through
cocotbext-axi (AXI4-Lite) or cocotbext-wishbone (Wishbone B4), every read and response compared
with a model whose controller is the emitted Python runtime (docs/hdl.md, "Bus wrappers")."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from mi_certify.generator.build.emit_soc import address_width, axil_module, regs_module, wb_module
from mi_certify.generator.build.emit_monitor import monitor_config
from mi_certify.generator.build.regmap import monitor_widths, register_map
from mi_certify.generator.core.spec import Spec
from mi_certify.runtime.quantize import Quantizer

from mi_certify.verification.tools.registry import memory_limit_mb, run, tool_env


def bench_config(spec: Spec) -> dict:
    """The bench's view of the register map and the raw inputs (JSON-ready)."""
    regs = register_map(spec)
    mon = monitor_config(spec)[0]
    inputs = []
    for inp, fmt in zip(spec.inputs, spec.hdl.input_formats):
        qz = Quantizer.from_floats(inp.min, inp.max, inp.bits)
        scale = 1 << fmt.frac_bits
        import math
        inputs.append({"name": inp.name, "reg": f"RAW_{inp.name.upper()}", "width": fmt.width,
                       "offset": next(r.offset for r in regs if r.name == f"RAW_{inp.name.upper()}"),
                       "lo_word": max(math.ceil(qz.lo * scale), -(fmt.words >> 1) if fmt.signed else 0),
                       "hi_word": min(math.floor(qz.hi * scale), (fmt.words >> 1) - 1 if fmt.signed else fmt.words - 1)})
    return {"regs": [{"name": r.name, "offset": r.offset,
                      "fields": [{"name": f.name, "lsb": f.lsb, "width": f.width, "sw": f.sw, "reset": f.reset}
                                 for f in r.fields]} for r in regs],
            "inputs": inputs, "aw": address_width(regs), "acc_w": monitor_widths(spec)[0],
            # the raw top's decision latency: the controller's, plus its register stage
            "latency": spec.hdl.latency_cycles + 1, "conservative": spec.conservative,
            "operator": spec.operator is not None, "token_bits": spec.token_bits,
            "reset_port": spec.hdl.reset_port, "reset_active_low": spec.hdl.reset_polarity == "low",
            # the SLA monitor's cycle configuration (the wrapper's parameters): the bench models it
            "monitor": {"lat_limits": list(mon.lat_limits), "acc_limits": list(mon.acc_limits),
                        "window": mon.monitor.window, "latency_statistic": mon.monitor.latency_statistic,
                        "accuracy_statistic": mon.monitor.accuracy_statistic, "cyc_width": mon.cyc_width,
                        "acc_width": mon.acc_width, "action_width": mon.action_width}}


def run_bus_cosim(spec: Spec, bundle: Path, runtime_py: Path, bus: str, transactions: int, workdir: Path,
                  seed: int = 1, timeout_s: float = 3600.0) -> dict:
    """Run the bench on ``bus`` ("axil" | "wb") with ``transactions`` random transactions (after the
    directed protocol cases) against the Verilog in ``bundle``. Returns the bench's report: bus,
    transactions, cycles, mismatches, first_mismatch, seconds (wall), passed; ``error`` when the
    simulation did not finish."""
    workdir.mkdir(parents=True, exist_ok=True)
    top = axil_module(spec) if bus == "axil" else wb_module(spec)
    names = [top, regs_module(spec), f"{spec.module_name}_raw", f"{spec.module_name}_quantizer", spec.module_name,
             f"{spec.module_name}_sla_monitor", "sla_monitor"]
    report = workdir / "bus_report.json"
    report.unlink(missing_ok=True)
    cfg = {**bench_config(spec), "bus": bus, "transactions": transactions, "seed": seed,
           "runtime_py": str(runtime_py.resolve()), "report": str(report)}
    (workdir / "bus.json").write_text(json.dumps(cfg))
    job = {"sources": [str((bundle / f"{n}.v").resolve()) for n in names], "toplevel": top,
           "build_dir": str((workdir / "sim_build").resolve()), "config": str((workdir / "bus.json").resolve()),
           "results": str((workdir / "results.xml").resolve())}
    t = time.monotonic()
    with open(workdir / "bus.log", "w", encoding="utf-8") as fh:
        try:
            run([sys.executable, "-m", "mi_certify.verification.cosim.bus_cosim", json.dumps(job)], stdout=fh,
                stderr=subprocess.STDOUT, cwd=workdir, timeout=timeout_s, env=tool_env("iverilog", "vvp"),
                memory_mb=memory_limit_mb())
        except subprocess.TimeoutExpired:
            return {"bus": bus, "passed": False, "transactions": 0, "mismatches": None,
                    "error": f"cocotb + Icarus did not finish within {timeout_s:.0f} s (killed)"}
    seconds = round(time.monotonic() - t, 1)
    if not report.exists():
        log = (workdir / "bus.log").read_text(encoding="utf-8", errors="replace")
        return {"bus": bus, "passed": False, "transactions": 0, "mismatches": None,
                "error": "the bench wrote no report: " + log[-600:]}
    rep = json.loads(report.read_text())
    rep["passed"] = rep["mismatches"] == 0 and rep["transactions"] == rep["issued"]
    rep["seconds"] = seconds
    return rep


def _child(job: dict) -> int:
    from cocotb_tools.runner import get_runner
    runner = get_runner("icarus")
    runner.build(sources=job["sources"], hdl_toplevel=job["toplevel"], build_dir=job["build_dir"], always=True,
                 timescale=("1ns", "1ps"))
    runner.test(hdl_toplevel=job["toplevel"], test_module="mi_certify.verification.cosim.bus_tb",
                testcase="bus_against_reference", build_dir=job["build_dir"], results_xml=job["results"],
                extra_env={"MI_CERTIFY_BUS": job["config"]}, timescale=("1ns", "1ps"))
    return 0


if __name__ == "__main__":
    sys.exit(_child(json.loads(sys.argv[1])))
