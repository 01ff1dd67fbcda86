"""Vector co-simulation: one Verilog test bench, two simulators (Icarus via cocotb, Verilator).

The Python reference computes every cycle's expected outputs up front; they are written
with the stimulus to a ``$readmemh`` vector file. A generated Verilog test bench
(``templates/verilog/cosim_tb.v.j2``) drives the design from it, compares every cycle in
Verilog (masked bits: don't care) and writes a report, so the per-cycle work stays in
the simulator (cocotb per-cycle Python managed about 3,500 cycles/s; see bench/cosim.py).

- :func:`run_icarus`: Icarus Verilog, orchestrated by cocotb (build, run, results XML);
  the cocotb test waits for the bench's ``done`` and asserts on its mismatch count.
- :func:`run_verilator_coverage`: the same bench and vectors under Verilator
  ``--coverage`` (line, toggle, branch; Verilator manual, "Coverage Analysis") with a
  small C++ main that writes ``coverage.dat``; built and run by
  :func:`.verilator.coverage_run`, parsed by :func:`.verilator.parse_coverage`.

The simulators are found and started by the tool layer (:mod:`.tools`: ``require_tool``,
``run``); the Icarus run is a child Python process (cocotb's runner calls ``iverilog`` and
``vvp``).

A run that cannot complete (tool missing, crash, timeout, missing report) is a failure.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from mi_certify.verification.tools import verilator
from mi_certify.verification.tools.registry import ToolMissingError, require_tool, run, tool_env
from mi_certify.verification.tools.verilator import parse_coverage  # noqa: F401 - re-exported (tests, bench)

TB_TOP = "mi_certify_tb"


@dataclass(frozen=True)
class Port:
    """A DUT port: name and width in bits."""

    name: str
    width: int


@dataclass
class VectorJob:
    """What to simulate: the DUT and its ports, one row of inputs and expected outputs per cycle.

    ``expected[i][k]`` is None where output k is not compared in cycle i. Row 0 must assert
    the reset (outputs before the first reset are undefined). ``fsm``: port names of a LUT-FSM
    (``rst``, ``addr``, ``token``, ``reason``) and ``reason_bits``/``token_bits``/``addr_bits``
    to sample functional coverage in the bench.
    """

    sources: list[Path]
    dut: str
    inputs: list[Port]
    outputs: list[Port]
    stimulus: list[list[int]]
    expected: list[list[int | None]]
    params: str = ""
    fsm: dict | None = None


@dataclass
class SimReport:
    """The bench's report: cycles run, mismatches, first mismatch (decoded per port), FSM coverage."""

    ok: bool
    cycles: int = 0
    mismatches: int = 0
    first_mismatch: dict | None = None
    seconds: float = 0.0
    error: str | None = None
    reasons: dict = field(default_factory=dict)
    transitions: dict = field(default_factory=dict)
    cells: int = 0


def _fields(ports: list[Port]) -> list[dict]:
    out, hi = [], sum(p.width for p in ports) - 1
    for p in ports:
        out.append({"name": p.name, "width": p.width, "hi": hi, "lo": hi - p.width + 1})
        hi -= p.width
    return out


def _pack(values, ports: list[Port]) -> int:
    word = 0
    for v, p in zip(values, ports):
        if not 0 <= v < (1 << p.width):
            raise ValueError(f"{v} does not fit port {p.name} ({p.width} bits)")
        word = word << p.width | v
    return word


def write_bench(job: VectorJob, workdir: Path) -> tuple[Path, Path]:
    """Write the vector file and the bench into ``workdir``; returns (bench, report path)."""
    if len(job.stimulus) != len(job.expected) or not job.stimulus:
        raise ValueError("stimulus and expected must be non-empty and of equal length")
    workdir.mkdir(parents=True, exist_ok=True)
    iw = sum(p.width for p in job.inputs)
    ow = sum(p.width for p in job.outputs)
    ones = [(1 << p.width) - 1 for p in job.outputs]
    digits = (iw + 2 * ow + 3) // 4
    vec = workdir / "vectors.hex"
    with open(vec, "w", encoding="ascii") as fh:
        for stim, exp in zip(job.stimulus, job.expected):
            e = _pack([0 if x is None else x for x in exp], job.outputs)
            m = _pack([0 if x is None else o for x, o in zip(exp, ones)], job.outputs)
            fh.write(f"{(_pack(stim, job.inputs) << 2 * ow) | (e << ow) | m:0{digits}x}\n")
    fsm = None
    if job.fsm:
        fin = {f["name"]: f for f in _fields(job.inputs)}
        fout = {f["name"]: f for f in _fields(job.outputs)}
        f = job.fsm
        fsm = {**f, "rst_bit": fin[f["rst"]]["lo"], "addr_hi": fin[f["addr"]]["hi"], "addr_lo": fin[f["addr"]]["lo"],
               "token_hi": fout[f["token"]]["hi"], "token_lo": fout[f["token"]]["lo"],
               "reason_hi": fout[f["reason"]]["hi"], "reason_lo": fout[f["reason"]]["lo"]}
    report = workdir / "tb_report.txt"
    from mi_certify.templates import environment

    text = environment().get_template("verilog/cosim_tb.v.j2").render(
        n=len(job.stimulus), iw=iw, ow=ow, vector_file=vec.name, report_file=report.name, dut=job.dut,
        params=f"{job.params} " if job.params else "", clk_expr="clk", inputs=_fields(job.inputs),
        outputs=_fields(job.outputs), fsm=fsm)
    bench = workdir / "mi_certify_tb.v"
    bench.write_text(text, encoding="ascii")
    return bench, report


def _read_report(job: VectorJob, report: Path, seconds: float) -> SimReport:
    if not report.exists():
        return SimReport(False, seconds=seconds, error="the test bench wrote no report (simulation did not finish)")
    kv: dict[str, str] = {}
    reasons, transitions = {}, {}
    for line in report.read_text(encoding="ascii").splitlines():
        parts = line.split()
        if parts[0] == "reason":
            reasons[int(parts[1])] = int(parts[2])
        elif parts[0] == "transition":
            transitions[int(parts[1])] = int(parts[2])
        else:
            kv[parts[0]] = parts[1]
    cycles, mism, first_cycle = int(kv["cycles"]), int(kv["mismatches"]), int(kv["first_cycle"])
    first = None
    if first_cycle >= 0:
        def unpack(hexs, ports):
            if any(c in hexs.lower() for c in "xz"):
                return {p.name: hexs for p in ports}
            word, out = int(hexs, 16), {}
            for p in reversed(ports):
                out[p.name] = word & ((1 << p.width) - 1)
                word >>= p.width
            return dict(reversed(list(out.items())))
        first = {"cycle": first_cycle, "inputs": unpack(kv["first_stim"], job.inputs),
                 "rtl": unpack(kv["first_got"], job.outputs),
                 "reference": {p.name: v for p, v in zip(job.outputs, job.expected[first_cycle])}}
    ok = mism == 0 and cycles == len(job.stimulus)
    return SimReport(ok, cycles, mism, first, seconds, None if ok else f"{mism} mismatching cycles",
                     reasons, transitions, int(kv.get("cells", 0)))


def run_icarus(job: VectorJob, workdir: Path, timeout_s: float = 3600.0) -> SimReport:
    """Simulate ``job`` with Icarus Verilog under cocotb; the verdict needs the bench's report
    *and* a passing cocotb results XML."""
    try:
        require_tool("iverilog")
        require_tool("vvp")
    except ToolMissingError as exc:
        return SimReport(False, error=str(exc))
    workdir = workdir.resolve()
    bench, report = write_bench(job, workdir)
    report.unlink(missing_ok=True)
    results = workdir / "results.xml"
    results.unlink(missing_ok=True)
    child = {"sources": [str(Path(s).resolve()) for s in job.sources] + [str(bench)],
             "build_dir": str(workdir / "sim_build"), "results": str(results), "workdir": str(workdir)}
    t0 = time.perf_counter()
    with open(workdir / "icarus.log", "w", encoding="utf-8") as fh:
        try:
            proc = run([sys.executable, "-m", "mi_certify.verification.cosim.vector_sim", json.dumps(child)],
                       stdout=fh, stderr=subprocess.STDOUT, cwd=workdir, timeout=timeout_s,
                       env=tool_env("iverilog", "vvp"))
        except subprocess.TimeoutExpired:
            return SimReport(False, error=f"simulation did not finish within {timeout_s:.0f} s")
    seconds = time.perf_counter() - t0
    rep = _read_report(job, report, seconds)
    if rep.error is None and not results.exists():
        rep.ok, rep.error = False, "cocotb wrote no results.xml"
    elif rep.error is None:
        from cocotb_tools.runner import get_results
        n_tests, n_failed = get_results(results)
        if proc.returncode != 0 or n_tests != 1 or n_failed != 0:
            rep.ok, rep.error = False, f"results.xml: {n_tests} test(s), {n_failed} failed"
    if rep.error and rep.mismatches == 0 and not report.exists():
        tail = (workdir / "icarus.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
        rep.error += ": " + " | ".join(tail)
    return rep


#: A case statement with more items than this is a table (the LUT): left out of line coverage.
TABLE_CASE_ITEMS = 64


def table_case_lines(verilog: Path) -> list[tuple[int, int]]:
    """Line ranges (1-based, inclusive) of the items of case statements with more than
    TABLE_CASE_ITEMS lines: the LUT of a case-encoded FSM. Their cells are covered by the
    functional ``lut_cells`` share and proved entry by entry (``rtl.lut_table``); as line
    coverage points they would only multiply the Verilator build time (one counter per cell).
    The generated FSM marks its LUT logic (any encoding: case table, ROM read, box tree)
    between the comments ``// LUT logic begin`` and ``// LUT logic end``; those lines are
    left out too.
    """
    ranges, start, lut_start = [], None, None
    for no, line in enumerate(verilog.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        text = line.strip()
        if text.startswith("// LUT logic begin"):
            lut_start = no + 1
        elif text.startswith("// LUT logic end") and lut_start is not None:
            if no - 1 >= lut_start:
                ranges.append((lut_start, no - 1))
            lut_start = None
        elif lut_start is not None:
            continue
        elif re.match(r"case[zx]?\s*\(", text):
            start = no + 1
        elif text.startswith("endcase") and start is not None:
            if no - start > TABLE_CASE_ITEMS:
                ranges.append((start, no - 1))
            start = None
    return ranges


def run_verilator_coverage(job: VectorJob, workdir: Path, timeout_s: float = 1800.0) -> tuple[SimReport, dict]:
    """Replay ``job`` under Verilator with ``--coverage``; returns (report, coverage of the DUT).

    Coverage: {"line": {"points", "hit", "share"}, "toggle": ..., "branch": ..., "excluded_lines":
    [[file, first, last], ...]} over the DUT hierarchy (the bench is excluded with
    ``coverage_off``; LUT case tables with a Verilator control file, see :func:`table_case_lines`)."""
    try:
        require_tool("verilator")
    except ToolMissingError as exc:
        return SimReport(False, error=str(exc)), {}
    workdir = workdir.resolve()
    bench, report = write_bench(job, workdir)
    report.unlink(missing_ok=True)
    excluded = [[Path(src).name, a, b] for src in job.sources for a, b in table_case_lines(Path(src))]
    (workdir / "coverage.vlt").write_text("`verilator_config\n" + "".join(
        f'coverage_off -file "*{name}" -lines {a}-{b}\n' for name, a, b in excluded), encoding="ascii")
    with open(workdir / "verilator.log", "w", encoding="utf-8") as fh:
        got = verilator.coverage_run([*job.sources, bench], TB_TOP, workdir, fh, timeout_s,
                                     defines=("MI_CERTIFY_STANDALONE",), control=("coverage.vlt",))
    if got.model_exit is None:   # not built, or timed out
        return SimReport(False, error=got.error), {}
    rep = _read_report(job, report, got.run_seconds)
    rep.build_seconds = got.build_seconds  # type: ignore[attr-defined]
    if got.model_exit != 0 and rep.error is None:
        rep.ok, rep.error = False, got.error
    cov = parse_coverage(got.coverage, f"TOP.{TB_TOP}.dut") if got.coverage is not None else {}
    if cov:
        cov["excluded_lines"] = excluded
    return rep, cov


def _child(job: dict) -> int:
    """Child process: build the bench with Icarus and run the cocotb orchestrator test."""
    from cocotb_tools.runner import get_runner

    runner = get_runner("icarus")
    runner.build(sources=job["sources"], hdl_toplevel=TB_TOP, build_dir=job["build_dir"], always=True,
                 timescale=("1ns", "1ps"))
    runner.test(hdl_toplevel=TB_TOP, test_module="mi_certify.verification.cosim.cocotb_tb",
                testcase="vector_bench_passes", build_dir=job["build_dir"], results_xml=job["results"],
                test_dir=job["workdir"], timescale=("1ns", "1ps"))
    return 0


if __name__ == "__main__":
    sys.exit(_child(json.loads(sys.argv[1])))
