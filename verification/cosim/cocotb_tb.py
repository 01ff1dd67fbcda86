"""cocotb tests: the vector-bench orchestrator and the per-cycle Python test bench.

``vector_bench_passes`` is what the build runs (:mod:`mi_certify.verification.cosim.vector_sim`):
the Verilog bench does the per-cycle work. ``cosim_against_reference`` drives and checks
every cycle from Python (about 3,500 cycles/s; kept for bench/cosim.py). It reads the JSON file
named by ``MI_CERTIFY_COSIM``: ``stimulus`` [[rst, addr, probe_fault,
sla_violation], ...], ``expected`` [[token, reason], ...] (from the Python
reference), ``report`` (path to write). Inputs are driven on the falling edge and
outputs checked on the next falling edge, after the rising edge that consumed them.
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge


def _read(signal):
    """Integer value, or the literal bit string when it holds X or Z (always a mismatch)."""
    value = signal.value
    return int(value) if value.is_resolvable else str(value)


@cocotb.test()
async def cosim_against_reference(dut):
    with open(os.environ["MI_CERTIFY_COSIM"], encoding="utf-8") as fh:
        cfg = json.load(fh)
    stimulus, expected = cfg["stimulus"], cfg["expected"]
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    mismatches = 0
    first = None
    await FallingEdge(dut.clk)
    for i, (rst, addr, fault, viol) in enumerate(stimulus):
        dut.rst.value = rst
        dut.addr.value = addr
        dut.probe_fault.value = fault
        dut.sla_violation.value = viol
        if hasattr(dut, "step"):
            dut.step.value = 1   # every row a controller step
        await FallingEdge(dut.clk)
        got = [_read(dut.token), _read(dut.reason)]
        if got != list(expected[i]):
            mismatches += 1
            if first is None:
                first = {"cycle": i, "inputs": {"rst": rst, "addr": addr, "probe_fault": fault,
                                                "sla_violation": viol},
                         "rtl": {"token": got[0], "reason": got[1]},
                         "reference": {"token": expected[i][0], "reason": expected[i][1]}}
    with open(cfg["report"], "w", encoding="utf-8") as fh:
        json.dump({"cycles": len(stimulus), "mismatches": mismatches, "first_mismatch": first}, fh, indent=1,
                  sort_keys=True)
    assert mismatches == 0, f"{mismatches} mismatching cycles; first at cycle {first['cycle']}: {first}"


@cocotb.test()
async def vector_bench_passes(dut):
    """Orchestrate the vector test bench (mi_certify.verification.cosim.vector_sim): the bench drives and
    compares every cycle in Verilog; this test waits for it and fails on any mismatch."""
    from cocotb.triggers import RisingEdge

    if not dut.done.value.is_resolvable or int(dut.done.value) != 1:
        await RisingEdge(dut.done)
    mismatches = int(dut.mismatches.value)
    assert mismatches == 0, f"{mismatches} mismatching cycles; first at cycle {int(dut.first_cycle.value)}"
