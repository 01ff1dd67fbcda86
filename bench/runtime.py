"""Decisions per second of the generated Python runtime, with and without audit logging,
against onnxruntime inference of the same controller network, in one run.

    python bench/runtime.py [--build DIR] [--steps N]

Without --build, a quick build of the reference controller (--sample-lut, no
verification, lint or co-simulation; the runtime code is the same) is made in a
temporary directory. Inputs: N random probe readings inside the envelope (seed 0),
the same for every variant. Printed as ratios measured in this run:

- bare step: ``Controller.step(readings, sla_violation)`` (exact quantization + FSM)
- step from an address: ``Controller.step_addr`` (FSM only)
- ``Controller.step_record`` (the step and what its audit record needs, one call) and
  ``encode_step`` on top of it (no write): the parts of an audited step
- step + audit record (fsync never / every:64 / always): ``step_record`` and
  ``AuditLog.append_step`` (the whole line one byte template, numbers by orjson; one
  ``write(2)``, SHA-256 chain); with fsync never also as two log calls
  (``append_fields(encode_step(...))``, the same bytes) and through the keyword API
  (``quantize``, ``lut_entry``, ``state``, ``step_addr``, ``encode_decision``)
- onnxruntime: ``InferenceSession.run`` of controller.onnx on one reading (the network
  the LUT-FSM replaces), one intra-op thread, optimisation all

- Python's ``logging``: the same record's fields as one JSON line (``json.dumps``) through a
  ``logging.FileHandler`` (one ``write(2)`` per record, no hash chain, no fsync), after the
  same ``step_record``: against the audited step with fsync never
- per request of the live loop (``--workload``, default examples/workload/convnet.onnx):
  ``ControlLoop.decide`` (probe read on this machine, ``LinuxProbe``, + step) and
  ``ControlLoop.complete`` (SLA monitor + audit record, fsync always as ``mi-certify run``
  defaults to, and never) as a share of the request's inference time (``Workload.run`` of
  the keep plan: onnxruntime on the workload); the same request part by part, and the floor of a
  record (its ``write(2)`` and SHA-256 after the inference): bench/live_loop_parts.py

- the C step (issue 36, docs/c-runtime.md): the build's ``<name>.c`` compiled by gcc -O2; its
  decision time natively (``<name>_bench`` of the co-simulation harness: a C loop of ``<name>_step``
  over the same readings, one ctypes call for a million steps) and per call through ctypes
  (``CController.step`` / ``step_record``), against the Python step, in the same run; and the
  sampled live-loop rows again with the C step (``ControlLoop(controller=CController)``)

Goals (issue 13): LUT-FSM step >= 20x faster than the network; audit logging with fsync
off <= 3x a bare step. Goals (issue 20): probe read + step + audit record <= 1 % of the
request's inference time; the audited decision not slower than ``logging`` writing the
same record.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _best_of(fn, n: int, repeats: int = 5) -> float:
    """Seconds per call: best of ``repeats`` runs of ``n`` calls."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=None, help="a build directory (default: quick build in a temp dir)")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved measurement rounds (best of)")
    ap.add_argument("--workload", default=str(ROOT / "examples/workload/convnet.onnx"),
                    help="the model of the live-loop rows (default examples/workload/convnet.onnx)")
    ap.add_argument("--requests", type=int, default=300, help="requests of the live-loop rows")
    args = ap.parse_args(argv)

    import onnxruntime as ort

    from mi_certify.runtime.audit import AuditLog, encode_decision, encode_step
    from mi_certify.runtime.live import load_build

    tmp = tempfile.TemporaryDirectory(prefix="mi-certify-bench-")
    if args.build is None:
        from mi_certify.generator.pipeline.runner import BuildOptions, build
        out = Path(tmp.name) / "meta_controller"
        build(ROOT / "examples/meta_controller/controller.onnx", ROOT / "examples/meta_controller/sla.yaml", out,
              BuildOptions(skip_lint=True, skip_cosim=True, verify=False, distill=False))
        args.build = out
    b = load_build(args.build)
    m = b.module
    if not hasattr(m.Controller, "step_record"):
        sys.exit(f"{b.dir}: {b.name}.py was generated before Controller.step_record existed; rebuild it "
                 "(or run without --build)")
    model = b.dir / "inputs" / "model" / "controller.onnx"
    rng = np.random.default_rng(0)
    lo = np.array([float(i[2]) for i in m.INPUTS])
    hi = np.array([float(i[3]) for i in m.INPUTS])
    pts = lo + rng.random((args.steps, len(lo))) * (hi - lo)
    readings = [list(map(float, p)) for p in pts]
    addrs = [m.quantize(r)[0] for r in readings]
    n = len(readings)

    def bare(k):
        ctl = m.Controller()
        for i in range(k):
            ctl.step(readings[i % n], False)

    def from_addr(k):
        ctl = m.Controller()
        for i in range(k):
            ctl.step_addr(addrs[i % n], False, False)

    def with_audit(policy, api="step_record"):
        path = Path(tmp.name) / f"bench-{policy.replace(':', '_')}-{api}.log"

        def run(k):
            path.unlink(missing_ok=True)
            ctl = m.Controller()
            log = AuditLog(path, fsync=policy, header=b.identity())
            actions, reasons, append, append_step = m.ACTIONS, m.REASONS, log.append_fields, log.append_step
            if api == "step_record":  # the fast path: one runtime call, one log call
                for i in range(k):
                    r = readings[i % n]
                    rec = ctl.step_record(r, False)
                    append_step(rec, r, False, actions[rec[6]], reasons[rec[7]], 5.0, 0.0)
            elif api == "two calls":  # step_record, encode_step, append_fields
                for i in range(k):
                    r = readings[i % n]
                    rec = ctl.step_record(r, False)
                    append("decision", encode_step(rec, r, False, actions[rec[6]], reasons[rec[7]], 5.0, 0.0))
            else:  # the keyword API, separate runtime calls (what callers wrote before step_record)
                for i in range(k):
                    r = readings[i % n]
                    before = ctl.state
                    addr, fault = m.quantize(r)
                    p, c = m.lut_entry(addr)
                    t, why = ctl.step_addr(addr, fault, False)
                    append("decision", encode_decision(
                        readings=r, addr=addr, probe_fault=fault, proposal=p, confident=bool(c), sla_violation=False,
                        before=before, after=ctl.state, token=t, action=actions[t], reason=reasons[why],
                        latency_ms=5.0, accuracy_loss_pct=0.0))
            log.close()
        return run

    def encode_only(k):
        ctl = m.Controller()
        actions, reasons = m.ACTIONS, m.REASONS
        for i in range(k):
            r = readings[i % n]
            rec = ctl.step_record(r, False)
            encode_step(rec, r, False, actions[rec[6]], reasons[rec[7]], 5.0, 0.0)

    def record_only(k):
        ctl = m.Controller()
        for i in range(k):
            ctl.step_record(readings[i % n], False)

    def python_logging(k):
        import json
        import logging
        path = Path(tmp.name) / "bench-logging.jsonl"
        path.unlink(missing_ok=True)
        logger = logging.getLogger("mi-certify-bench")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        ctl = m.Controller()
        actions, reasons, info, dumps = m.ACTIONS, m.REASONS, logger.info, json.dumps
        try:
            for i in range(k):
                r = readings[i % n]
                addr, fault, p, c, before, after, t, why = ctl.step_record(r, False)
                info(dumps({"kind": "decision", "seq": i, "readings": r, "addr": addr, "probe_fault": fault,
                            "proposal": p, "confident": c, "sla_violation": False, "before": list(before),
                            "after": list(after), "token": t, "action": actions[t], "reason": reasons[why],
                            "latency_ms": 5.0, "accuracy_loss_pct": 0.0}, separators=(",", ":")))
        finally:
            logger.removeHandler(handler)
            handler.close()

    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    o.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model), o, providers=["CPUExecutionProvider"])
    in_name = sess.get_inputs()[0].name
    shape = [d if isinstance(d, int) else 1 for d in sess.get_inputs()[0].shape]
    feeds = [pts[i].astype(np.float32).reshape(shape) for i in range(min(n, 4096))]

    def onnx(k):
        for i in range(k):
            sess.run(None, {in_name: feeds[i % len(feeds)]})

    k = args.steps
    variants = {"bare": (bare, k), "addr": (from_addr, k), "record": (record_only, k), "encode": (encode_only, k),
                "never": (with_audit("never"), k), "never_2": (with_audit("never", "two calls"), k),
                "never_kw": (with_audit("never", "keywords"), k),
                "every": (with_audit("every:64"), k), "always": (with_audit("always"), min(k, 1000)),
                "ort": (onnx, min(k, 10000)), "logging": (python_logging, k)}
    # interleaved rounds, best per variant: the machine is shared, so load drifts between variants
    best = {name: float("inf") for name in variants}
    for _ in range(args.rounds):
        for name, (fn, steps) in variants.items():
            best[name] = min(best[name], _best_of(fn, steps, repeats=1))
    (t_bare, t_addr, t_rec, t_enc, t_never, t_never_2, t_never_kw, t_every, t_always, t_ort,
     t_logging) = (best[x] for x in variants)
    c_rows = _c_step(b, readings, k, args.rounds, Path(tmp.name))
    live = _live_loop(b, args.workload, args.requests, Path(tmp.name))
    live_c = (_live_loop(b, args.workload, args.requests, Path(tmp.name), c_rows["controller"], ("sampled",))
              if c_rows else None)

    def row(label, t):
        if t < 1e-6:   # the C step: nanoseconds, so that two digits still say something
            print(f"{label:58s} {t * 1e9:9.1f} ns   {1 / t:12,.0f} decisions/s")
        else:
            print(f"{label:58s} {t * 1e6:9.2f} us   {1 / t:12,.0f} decisions/s")

    print(f"build: {b.dir} ({b.name}, {len(b.lut)} LUT cells); {k} steps; best of {args.rounds} interleaved rounds")
    row("LUT-FSM step (quantize + FSM), no audit", t_bare)
    row("LUT-FSM step_addr (FSM only)", t_addr)
    row("step_record (step + what the record needs)", t_rec)
    row("step_record + encode_step (no write)", t_enc)
    row("step + audit record, fsync never (step_record, append_step)", t_never)
    row("  the same, append_fields(encode_step(...))", t_never_2)
    row("  the same, keyword API (quantize ... encode_decision)", t_never_kw)
    row("step + audit record, fsync every:64", t_every)
    row("step + audit record, fsync always", t_always)
    row("onnxruntime run of controller.onnx", t_ort)
    row("step_record + logging.FileHandler, the record as a JSON line", t_logging)
    print()
    print("where an audit record's time goes (fsync never):")
    print(f"  step_record - step (states, LUT entry)  {(t_rec - t_bare) * 1e6:6.2f} us")
    print(f"  encode_step (the record's fields)       {(t_enc - t_rec) * 1e6:6.2f} us")
    print(f"  the rest of append_step (seq/prev, write(2), SHA-256) {(t_never - t_enc) * 1e6:6.2f} us")
    print()
    print(f"network / LUT-FSM step            = {t_ort / t_bare:6.1f}x   (goal >= 20x)")
    print(f"network / LUT-FSM step_addr       = {t_ort / t_addr:6.1f}x")
    print(f"step+audit (fsync never) / step   = {t_never / t_bare:6.2f}x   (goal <= 3x, read as the whole audited step)")
    print(f"audit record alone (never) / step = {(t_never - t_bare) / t_bare:6.2f}x   (goal <= 3x, read as the added cost)")
    print(f"  two calls (encode_step, append_fields) = {t_never_2 / t_bare:6.2f}x whole, "
          f"{(t_never_2 - t_bare) / t_bare:.2f}x added")
    print(f"  keyword API                     = {t_never_kw / t_bare:6.2f}x whole, "
          f"{(t_never_kw - t_bare) / t_bare:.2f}x added")
    print(f"step+audit (every:64) / step      = {t_every / t_bare:6.2f}x")
    print(f"step+audit (fsync always) / step  = {t_always / t_bare:6.1f}x   (one fsync per decision)")
    print(f"step+audit (fsync never) / step+logging = {t_never / t_logging:6.2f}x   (goal <= 1: not slower; "
          "ours also chains SHA-256)")
    if c_rows:
        row("C step, native (<name>_bench: a C loop of <name>_step)", c_rows["native"])
        row("C step through ctypes (CController.step)", c_rows["ctypes_step"])
        row("C step_record through ctypes (CController.step_record)", c_rows["ctypes_record"])
        print(f"Python step / C step (native)      = {t_bare / c_rows['native']:8.1f}x   (goal >= 50x)")
        print(f"Python step / C step (ctypes call) = {t_bare / c_rows['ctypes_step']:8.2f}x")
    else:
        print("C step: not measured (no <name>.c in the build, or gcc missing)")
    print()
    inf = live["infer"]
    print(f"live loop, {live['requests']} requests of {Path(args.workload).name} (keep plan), medians per request; "
          f"inputs no probe here gives, set to their envelope's middle: {live['mapped']}")
    print(f"  inference (Workload.run)                     {inf * 1e3:9.3f} ms")
    for label, key in (("probe read + step (ControlLoop.decide)", "decide"),
                       ("SLA monitor + audit record, fsync always", "complete_always"),
                       ("SLA monitor + audit record, fsync never", "complete_never")):
        print(f"  {label:44s} {live[key] * 1e6:9.1f} us   {live[key] / inf:7.2%} of the inference")
    for policy in ("always", "never"):
        share = (live["decide"] + live[f"complete_{policy}"]) / inf
        print(f"probe + step + audit (fsync {policy}) / inference = {share:7.2%}   (goal <= 1 %)")
    print(f"  sampled probes (LinuxProbe + MicrobenchProbe in a thread at 2 Hz): read + step "
          f"{live['decide_sampled'] * 1e6:.1f} us, monitor + audit (never) {live['complete_sampled'] * 1e6:.1f} us; "
          f"one sampling round {live['sampler_round'] * 1e3:.1f} ms "
          f"({live['sampler_round'] / 0.5:.1%} of a core at 2 Hz)")
    share = (live["decide_sampled"] + live["complete_sampled"]) / live["infer_sampled"]
    print(f"  inference beside the sampler: {live['infer_sampled'] * 1e3:.3f} ms")
    print(f"sampled probe + step + audit (fsync never) / inference = {share:7.2%}   (goal <= 1 %)")
    if live_c:
        share = (live_c["decide_sampled"] + live_c["complete_sampled"]) / live_c["infer_sampled"]
        print(f"  the same on the C step: read + step {live_c['decide_sampled'] * 1e6:.1f} us, monitor + audit (never) "
              f"{live_c['complete_sampled'] * 1e6:.1f} us, inference {live_c['infer_sampled'] * 1e3:.3f} ms: "
              f"{share:7.2%}   (goal <= 1 %)")
    tmp.cleanup()
    return 0


def _c_step(b, readings: list, k: int, rounds: int, tmp: Path) -> dict | None:
    """Seconds per decision of the C step: ``native`` (the harness's C loop), ``ctypes_step`` and
    ``ctypes_record`` (per call through ctypes), best of ``rounds``; and ``controller`` (a
    CController for the live loop). None without <name>.c or gcc."""
    import ctypes

    from mi_certify.runtime.c_step import CController, load_c_library
    from mi_certify.verification.cosim.c_cosim import build_harness
    from mi_certify.verification.tools.registry import ToolMissingError, ToolRunError
    src = b.dir / f"{b.name}.c"
    if not src.is_file():
        return None
    try:
        lib = build_harness(src, tmp / "c-step")
    except (ToolMissingError, ToolRunError):
        return None
    n = len(readings)
    flat = (ctypes.c_double * (n * len(readings[0])))(*(x for r in readings for x in r))
    bench = getattr(lib, f"{b.name}_bench")
    steps = 1_000_000

    def native(_k):
        bench(steps, flat, n)
    ctl = CController(load_c_library(tmp / "c-step" / f"lib{b.name}_cosim.so", b.name), b.name, b.module)

    def via_step(m):
        ctl.reset()
        for i in range(m):
            ctl.step(readings[i % n], False)

    def via_record(m):
        ctl.reset()
        for i in range(m):
            ctl.step_record(readings[i % n], False)
    best = {"native": float("inf"), "ctypes_step": float("inf"), "ctypes_record": float("inf")}
    for _ in range(rounds):
        best["native"] = min(best["native"], _best_of(native, 1, repeats=1) / steps)
        best["ctypes_step"] = min(best["ctypes_step"], _best_of(via_step, k, repeats=1))
        best["ctypes_record"] = min(best["ctypes_record"], _best_of(via_record, k, repeats=1))
    return {**best, "controller": ctl}


def _live_loop(b, workload_path: str, requests: int, tmp: Path, controller=None,
               policies=("always", "never", "sampled")) -> dict:
    """Medians (s) per request of the live loop's parts (module docstring): ``decide``,
    ``complete_always``, ``complete_never`` and ``infer``, over ``requests`` requests, for
    ``policies``; ``controller``: the step (default the generated Python Controller)."""
    import math
    import statistics

    from mi_certify.runtime.audit import AuditLog
    from mi_certify.runtime.engine import DEFAULT_PLANS, Workload
    from mi_certify.runtime.live import ControlLoop
    from mi_certify.runtime.probes import FeatureMap, LinuxProbe, MicrobenchProbe, SampledProbe

    workload = Workload(workload_path, [DEFAULT_PLANS[a] for a in b.actions])
    out: dict = {"requests": requests}
    times: dict[str, list[float]] = {"decide": [], "infer": [], "complete_always": [], "complete_never": [],
                                     "decide_sampled": [], "complete_sampled": [], "infer_sampled": []}
    try:
        for policy in policies:
            if policy == "sampled":   # the probes in a background thread at 2 Hz, the request reads the latest
                probe = SampledProbe([LinuxProbe(), MicrobenchProbe()], period_s=0.5, max_age_s=2.0)
                probe.wait_first(30.0)
            else:
                probe = LinuxProbe()
            if controller is not None:
                controller.reset()
            # an input this machine's probes cannot give (free_sram_kb; temperature_c in a VM) is mapped
            # to a constant, the middle of its envelope (mi-certify run --map INPUT=NUMBER), so that the
            # requests take the controller's ordinary step, not a probe fault every time
            probe.read()   # LinuxProbe's utilisation needs a previous read: the second read is what a request sees
            values, errors = FeatureMap.build(b.inputs)(probe.read())
            mapped = {n: repr((float(i[2]) + float(i[3])) / 2) for n, i, e in zip(b.inputs, b.module.INPUTS, errors)
                      if e is not None}
            out.setdefault("mapped", {})[policy] = sorted(mapped)
            loop = ControlLoop(b, probe, FeatureMap.build(b.inputs, mapped), controller=controller)
            log = AuditLog(tmp / f"live-{policy}{'-c' if controller is not None else ''}.log", fsync="never" if policy == "sampled" else policy,
                           header=loop.audit_header())
            loop.audit = log
            try:
                for i in range(requests):
                    t0 = time.perf_counter()
                    d = loop.decide()
                    t1 = time.perf_counter()
                    lat, acc = workload.run(0, i)   # the keep plan: the same inference every request
                    t2 = time.perf_counter()
                    loop.complete(d, lat, acc, extra={"request": i})
                    t3 = time.perf_counter()
                    times["decide_sampled" if policy == "sampled" else "decide"].append(t1 - t0)
                    times["infer_sampled" if policy == "sampled" else "infer"].append(t2 - t1)
                    times[f"complete_{policy}"].append(t3 - t2)
            finally:
                log.close()
                if policy == "sampled":
                    out["sampler_round"] = statistics.median(probe.cost_ns) / 1e9 if probe.cost_ns else math.nan
                probe.close()
    finally:
        workload.close()
    out.update({k: statistics.median(v) for k, v in times.items() if v})
    return out


if __name__ == "__main__":
    sys.exit(main())
