"""HDL tools group of ``mi-certify check``: lint, co-simulation and synthesis made again.

Re-derives with the tools the build used (same code, skipped with ``--quick`` or
without the tool): Verilator's lint of the emitted Verilog against lint.json; the
co-simulation of the Verilog against the Python reference runtime (same seed, same
cycles, the recorded without-rule-3a traces) against cosim.json, field by field; the
``hdl`` stage (YoWASP Yosys + nextpnr-ice40 / -ecp5, same seed) against summary.json's cell
counts, Fmax per device and verdicts, when the tool versions are the manifest's (docs/hdl.md).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from mi_certify.verification.check.common import SKIP, Checker, CheckContext, require


def check_tools(c: Checker, ev: CheckContext) -> None:
    """Items ``rtl.lint: re-run Verilator`` (with lint.json) and ``cosim: re-run co-simulation``
    (with cosim.json), each a SKIP with ``--quick`` or without verilator / iverilog; and, --quick
    included, monitor_cosim.json re-derived as a passing run gives it (with monitor_cosim.json)."""
    if (c.d / "lint.json").exists():
        _tool_item(c, "rtl.lint: re-run Verilator", "verilator", lambda: _lint(c, ev))
    if (c.d / "cosim.json").exists():
        _tool_item(c, "cosim: re-run co-simulation", ("iverilog", "vvp"), lambda: _cosim(c, ev))
    if (c.d / "c_runtime.json").exists():
        _tool_item(c, "c_runtime: recompile, MISRA and co-simulate the C again",
                   ("gcc", "clang", "cppcheck", "arm-none-eabi-gcc", "arm-none-eabi-size"), lambda: _c_runtime(c, ev))
    if (c.d / "sva.json").exists():
        from mi_certify.verification.rtl.sby import REQUIRED_TOOLS as SBY_TOOLS
        c.run("sva.json: the harness' assertions and depth re-derived", "same code", lambda: _sva_records(c, ev))
        _tool_item(c, "sva: re-run the SymbiYosys job (second proof path)", SBY_TOOLS, lambda: _sva(c, ev))
    if (c.d / "monitor_cosim.json").exists():   # --quick too: no simulator needed
        c.run("monitor_cosim.json: configurations, stimuli and expected verdicts re-derived", "same code",
              lambda: _monitor_records(c, ev))


def _sva_records(c: Checker, ev: CheckContext) -> str:
    """sva.json names the job and harness the emitter makes, the assertions it writes into the harness
    (label, source, claim) and the depth of its job (:mod:`mi_certify.generator.build.emit_sva`)."""
    from mi_certify.generator.build.emit_sva import harness_document
    spec, stored = ev.spec, c.read_json("sva.json")
    want = harness_document(spec, ev.machine(), spec.hdl.latency_cycles)
    bad = [k for k, v in want.items() if stored.get(k) != v]
    require(not bad, f"sva.json differs from the emitter's harness in {', '.join(bad)}")
    return f"{len(want['assertions'])} assertions, depth {want['depth']}, verdict {stored['verdict']}"


def _sva(c: Checker, ev: CheckContext) -> str:
    """The bundle's SymbiYosys job run again on the bundle's files: its verdict and failed assertions
    equal sva.json's."""
    from mi_certify.generator.build.emit_sva import job_files
    from mi_certify.verification.rtl.sby import run_sby
    spec, stored = ev.spec, c.read_json("sva.json")
    again = run_sby(c.d / stored["job"], job_files(spec, c.d))
    require(again.verdict == stored["verdict"] and list(again.failed) == list(stored["failed"]),
            f"SymbiYosys now says {again.detail}; sva.json says {stored['detail']}")
    return again.detail


def _monitor_records(c: Checker, ev: CheckContext) -> str:
    """monitor_cosim.json equals the file of a passing monitor co-simulation made again from sla.yaml
    and cosim.json's seed (:func:`~mi_certify.verification.cosim.monitor_cosim.passing_records`)."""
    from mi_certify.runtime.sla import SlaLimits
    from mi_certify.verification.cosim.monitor_cosim import passing_records

    from mi_certify.verification.check.bundle_documents import differences
    spec = ev.spec
    want = passing_records([SlaLimits(a.latency_ms, a.accuracy_loss_pct) for a in spec.actions], spec.monitor,
                           spec.cosim.monitor_requests, int(c.read_json("cosim.json")["seed"]))
    diff = differences(c.read_json("monitor_cosim.json"), want)
    require(not diff, "monitor_cosim.json differs from a passing run made again in " + "; ".join(diff[:3]))
    return f"{len(want['configs'])} configurations, {sum(k['verdicts'] for k in want['configs'])} verdicts as a " \
           "passing run gives them"


def _tool_item(c: Checker, name: str, tools: str | tuple[str, ...], fn) -> None:
    """One re-run item: a SKIP with ``--quick`` or without one of ``tools`` (verification/tools/registry.py),
    else ``fn`` run."""
    from mi_certify.verification.tools.registry import why_unavailable
    missing = [(t, why) for t in ((tools,) if isinstance(tools, str) else tools) if (why := why_unavailable(t))]
    if not c.opts.rerun_tools:
        c.add(name, SKIP, "same code", "--quick")
    elif missing:
        c.add(name, SKIP, "same code", "; ".join(f"{t} is {why}" for t, why in missing))
    else:
        c.run(name, "same code", fn)


def _lint(c: Checker, ev: CheckContext) -> str:
    from mi_certify.verification.tools.verilator import lint as run_lint
    spec = ev.spec
    res = run_lint(c.d / f"{spec.module_name}.v", spec.module_name).to_json()
    stored = c.read_json("lint.json")
    require(res["clean"] == stored["clean"] and res["messages"] == stored["messages"],
            f"lint now {'clean' if res['clean'] else res['messages'][:2]}, lint.json says "
            f"{'clean' if stored['clean'] else 'not clean'}")
    return "clean" if res["clean"] else "same messages as lint.json"


def _cosim(c: Checker, ev: CheckContext) -> str:
    from mi_certify.verification.cosim.cocotb_sim import run_cosim
    from mi_certify.verification.rtl.hdl_adapter import prepare

    from mi_certify.verification.check.bundle_documents import differences
    spec = ev.spec
    stored = c.read_json("cosim.json")
    machine = ev.machine()
    traces = ()
    if (c.d / "proofs" / "fsm" / "without_rule_3a.json").exists():
        traces = tuple(c.read_json("proofs/fsm/without_rule_3a.json")["traces"].values())
    with tempfile.TemporaryDirectory(prefix="mi-certify-check-") as work:
        operator = spec.operator.config() if spec.operator else None   # the command port driven too
        sim_v, sim_top = prepare(c.d / f"{spec.module_name}.v", spec.module_name, spec.hdl.reset_port,
                                 machine, Path(work), operator is not None)
        res = run_cosim(sim_v, sim_top, machine, Path(work), runtime_py=c.d / f"{spec.name}.py", traces=traces,
                        random_cycles=stored["cycles"] - stored["directed_cycles"], seed=stored["seed"],
                        latency=spec.hdl.latency_cycles, operator=operator)
    again = res.to_json()
    diff = differences(stored, again)
    require(not diff, f"re-run gives passed={again['passed']}, {again['mismatches']} mismatches; "
                      "cosim.json differs in " + "; ".join(diff[:3]))
    return f"{again['cycles']} cycles, {again['mismatches']} mismatches, identical to cosim.json"


def _c_runtime(c: Checker, ev: CheckContext) -> str:
    """The bundle's <name>.c compiled, MISRA-checked, cross-compiled and co-simulated again (same seed,
    cycles and traces) and compared with c_runtime.json field by field; where a tool's version differs
    from the one recorded, that tool's figures (messages, findings, sizes) are not compared, its verdict is."""
    from mi_certify.verification.cosim.c_cosim import check_c_runtime

    from mi_certify.verification.check.bundle_documents import differences
    spec, stored = ev.spec, c.read_json("c_runtime.json")
    co = stored.get("cosim", {})
    traces = ()
    if (c.d / "proofs" / "fsm" / "without_rule_3a.json").exists():
        traces = tuple(c.read_json("proofs/fsm/without_rule_3a.json")["traces"].values())
    again = check_c_runtime(spec, ev.machine(), c.d / f"{spec.name}.c", co["cycles"] - co["directed_cycles"],
                            co["seed"], traces, c.d / f"{spec.name}.py")
    mine, theirs = dict(again), dict(stored)
    for key, version in (("misra", "tool"), ("cortex_m4", "compiler")):
        if mine.get(key, {}).get(version) != theirs.get(key, {}).get(version):
            mine[key] = {k: v for k, v in mine.get(key, {}).items() if k == "unexplained"}
            theirs[key] = {k: v for k, v in theirs.get(key, {}).items() if k == "unexplained"}
    diff = differences(theirs, mine)
    require(again["status"] == "ok" and not diff, f"re-run gives status {again['status']}"
            + (f" ({again['error']})" if "error" in again else "") + "; c_runtime.json differs in " + "; ".join(diff[:3]))
    return (f"gcc, clang clean; MISRA {again['misra']['findings']} findings, all deviations listed; "
            f"{again['cosim']['cycles']} cycles, 0 mismatches; identical to c_runtime.json")


def check_hdl_numbers(c: Checker, ev: CheckContext) -> None:
    """Item ``hdl: synthesis and place and route made again``: the ``hdl`` stage made again
    (YoWASP Yosys + nextpnr-ice40 / -ecp5 / -machxo2, same seed); cell counts, Fmax per device (bare and
    AXI4-Lite-wrapped), the declared
    target's verdict and the stage status it gives must equal summary.json
    (``ev.spec``, ``ev.summary`` are read). Nothing when the stage measured nothing; a SKIP with
    ``--quick``, without the tools, or when the tool versions differ from the manifest's
    (the numbers depend on them; docs/hdl.md)."""
    name = "hdl: synthesis and place and route made again"
    stage = ev.summary.get("stages", {}).get("hdl", {})
    if "place_and_route" not in stage:  # skipped, or failed before measuring (a missed target has figures)
        return
    skip = _why_not_again(c)
    if skip:
        c.add(name, SKIP, "same code", skip)
        return
    from mi_certify.verification.rtl import synth
    c.run(name, "same code", lambda: _hdl_again(c, ev, stage, synth))


def _why_not_again(c: Checker) -> str | None:
    """Why the hdl stage is not made again (a SKIP's detail), or None: it is."""
    if not c.opts.rerun_tools:
        return "--quick"
    from mi_certify.verification.rtl import synth
    from mi_certify.verification.tools.registry import tool_version
    if synth.tools_missing():
        return f"not installed: {', '.join(synth.tools_missing())}"
    recorded = c.read_json("manifest.json").get("versions", {}).get("tools", {})
    changed = [t for t in synth.REQUIRED_TOOLS if recorded.get(t) != tool_version(t)]
    if changed:
        return f"{', '.join(changed)} differ from the build's (manifest.json versions.tools)"
    return None


def start_hdl_numbers(c: Checker, ev: CheckContext) -> None:
    """Start :func:`check_hdl_numbers`'s synthesis and place and route in the background when that
    item will make them (``ev.hdl_job``), so that they run beside the groups between (distillation,
    tables, proofs, co-simulations). Started after the network group: its queries have wall-clock
    budgets, and Yosys and nextpnr would take cores from them. Never raises: anything that stops it
    here happens again, inside the item."""
    try:
        if "place_and_route" not in ev.summary.get("stages", {}).get("hdl", {}) or _why_not_again(c):
            return
        from mi_certify.verification.rtl import synth
        spec, v = ev.spec, c.d / f"{ev.spec.module_name}.v"
        from mi_certify.verification.tools.registry import Background
        ev.hdl_job = Background(lambda: synth.hdl_numbers(spec, v), name="mi-certify-check-hdl")
    except Exception:  # noqa: BLE001 - the item runs it again and reports it
        ev.hdl_job = None


def _hdl_again(c: Checker, ev: CheckContext, stage: dict, synth) -> str:
    from mi_certify.generator.bundle.stage_records import hdl_record
    from mi_certify.generator.bundle.summary import HDL_SUMMARY_KEYS
    spec = ev.spec
    job, ev.hdl_job = ev.hdl_job, None
    numbers = job.result() if job is not None else synth.hdl_numbers(spec, c.d / f"{spec.module_name}.v")
    fresh = hdl_record(numbers, synth.SEED,
                       header=ev.summary.get("stages", {}).get("emit", {}).get("target_header"))
    stored = {k: ev.summary["hdl"].get(k) for k in HDL_SUMMARY_KEYS}
    mine = {k: fresh.get(k) for k in stored}
    differ = sorted(k for k in stored if mine[k] != stored[k])
    require(not differ, "summary.json hdl differs from the numbers made again in "
            + "; ".join(f"{k}: stored {stored[k]!r}, made again {mine[k]!r}" for k in differ))
    # the whole stage record: counts, Fmax, goals, the declared target's verdict and the status it gives
    differ = sorted(k for k in set(fresh) | set(stage) if fresh.get(k) != stage.get(k))
    require(not differ, f"summary.json stages.hdl differs from the numbers made again in: {', '.join(differ)}")
    fmax = ", ".join(f"{dev.upper()} {fresh[synth.fmax_key(dev)]}" for dev in fresh["place_and_route"])
    target = fresh.get("target")
    return (f"Fmax {fmax} MHz, {mine['lut4']} LUT4, {mine['dff']} DFF, {mine['bram']} BRAM"
            + (f"; {target['detail']}" if target else "") + ": equal to summary.json")
