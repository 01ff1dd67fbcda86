"""Where the live loop's per-request time goes, part by part (docs/runtime.md, "Where the live loop's
per-request time goes"): the parts of ``ControlLoop.decide`` and ``ControlLoop.complete`` (sampled
probes, fsync never), each timed with ``time.perf_counter_ns``, in the loop after the workload's
inference ("loop") and without inference between requests ("warm"); and the floor every audit record
pays, ``write(2)`` of one line and its SHA-256, timed alone after the inference.

    python bench/live_loop_parts.py [--build DIR] [--workload MODEL.onnx] [--requests N]

The parts are the steps of ``ControlLoop.decide`` / ``complete`` written out here (for a build with
sla.yaml ``operator:`` and no command intake, as the reference controller runs under ``bench/runtime.py``):
keep them in step with runtime/live.py. The whole calls are timed too, as bench/runtime.py times them.
Inputs no probe of this machine gives are mapped to the middle of their envelope (as bench/runtime.py).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PARTS = ["probe.read", "feature values (kept per sample)", "monitor.violation, policy", "operator_state before",
         "step_record", "operator dict", "Decision", "monitor.observe", "_probes_json (kept per sample)",
         "extra JSON", "operator JSON", "record (append_decision: compose, write(2), SHA-256)"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(ROOT / "certs/meta_controller"))
    ap.add_argument("--workload", default=str(ROOT / "examples/workload/convgemm.onnx"))
    ap.add_argument("--requests", type=int, default=400)
    args = ap.parse_args(argv)

    from mi_certify.runtime import live as L
    from mi_certify.runtime.audit import AuditLog
    from mi_certify.runtime.engine import DEFAULT_PLANS, Workload
    from mi_certify.runtime.probes import FeatureMap, LinuxProbe, MicrobenchProbe, SampledProbe

    b = L.load_build(args.build)
    w = Workload(args.workload, [DEFAULT_PLANS[a] for a in b.actions])
    probe = SampledProbe([LinuxProbe(), MicrobenchProbe()], period_s=0.5, max_age_s=2.0)
    probe.wait_first(30.0)
    _, errors = FeatureMap.build(b.inputs)(probe.read())
    mapped = {k: repr((float(i[2]) + float(i[3])) / 2) for k, i, e in zip(b.inputs, b.module.INPUTS, errors)
              if e is not None}
    loop = L.ControlLoop(b, probe, FeatureMap.build(b.inputs, mapped))
    if loop.policy is None:
        sys.exit(f"{b.dir}: this bench writes out the steps of a build with sla.yaml operator: (the reference "
                 "controller's)")
    tmp = tempfile.TemporaryDirectory(prefix="mi-certify-parts-")
    log = AuditLog(Path(tmp.name) / "parts.log", fsync="never", header=loop.audit_header())
    loop.audit = log
    pc = time.perf_counter_ns
    ctl, reasons, actions = loop.ctl, b.module.REASONS, b.actions
    out = {}
    try:
        for mode in ("loop", "warm"):
            times = {k: [] for k in PARTS + ["whole decide()", "whole complete()"]}
            n = args.requests if mode == "loop" else 10 * args.requests
            for i in range(n):
                t0 = pc()
                d = loop.decide()
                t1 = pc()
                lat, acc = w.run(0, i) if mode == "loop" else (2.0, 0.0)
                t2 = pc()
                loop.complete(d, lat, acc, extra={"request": i})
                t3 = pc()
                times["whole decide()"].append(t1 - t0)
                times["whole complete()"].append(t3 - t2)
                if mode == "loop":
                    w.run(0, i)
                t = [pc()]
                sample = loop.probe.read()
                t.append(pc())
                cached = loop._features_of
                if sample.readings is cached[0]:
                    values, readings, errs = cached[1], cached[2], cached[3]
                else:
                    values, errs = loop.features(sample)
                    readings, errs = tuple(values), tuple(errs)
                    loop._features_of = (sample.readings, values, readings, errs)
                t.append(pc())
                sla = loop.monitor.violation
                _ = loop.policy is not None and loop.intake is None
                t.append(pc())
                op_before = list(ctl.operator_state)
                t.append(pc())
                addr, fault, proposal, confident, before, after, token, reason = ctl.step_record(values, sla, 0, 0)
                t.append(pc())
                op = {"cmd": 0, "arg": 0, "before": op_before, "after": list(ctl.operator_state)}
                t.append(pc())
                d = L._decision(sample, readings, errs, addr, fault, proposal, confident, sla, before, after,
                                token, reasons[reason], op)
                t.append(pc())
                lat, acc = w.run(0, i) if mode == "loop" else (2.0, 0.0)
                u = [pc()]
                verdict = loop.monitor.observe(d.token, lat, acc)
                u.append(pc())
                pj = loop._probes_json(d)
                u.append(pc())
                ej = L._extra_json({"request": i})
                u.append(pc())
                oj = L._operator_json(d.operator)
                u.append(pc())
                log.append_decision(d.readings, d.addr, d.probe_fault, d.proposal, d.confident, d.sla_violation,
                                    d.before, d.after, d.token, actions[d.token], d.reason, lat, acc, verdict, pj, ej,
                                    oj)
                u.append(pc())
                for k, x in zip(PARTS, [t[j + 1] - t[j] for j in range(len(t) - 1)]
                                + [u[j + 1] - u[j] for j in range(len(u) - 1)]):
                    times[k].append(x)
            out[mode] = {k: statistics.median(v) / 1e3 for k, v in times.items()}
        # the floor of a record: one write(2) of a line of this log's length and its SHA-256, after the inference
        line = Path(log.path).read_bytes().splitlines()[-1] + b"\n"
        fd = os.open(Path(tmp.name) / "floor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        floor = {"timer pair alone": [], "write(2)": [], "SHA-256 (hashlib)": []}
        for i in range(args.requests):
            for k, v in floor.items():
                w.run(0, i)
                t0 = pc()
                if k == "write(2)":
                    os.write(fd, line)
                elif k != "timer pair alone":
                    hashlib.sha256(line[:-1]).hexdigest()
                v.append(pc() - t0)
        os.close(fd)
    finally:
        log.close()
        probe.close()
        w.close()
    print(f"build {b.dir}, workload {Path(args.workload).name}, {args.requests} requests (warm: 10x as many); "
          "medians per request, us")
    print(f"  {'part':52s} {'loop':>8s} {'warm':>8s}")
    for k in PARTS + ["whole decide()", "whole complete()"]:
        print(f"  {k:52s} {out['loop'][k]:8.2f} {out['warm'][k]:8.2f}")
    print(f"  {'sum of the parts':52s} {sum(out['loop'][k] for k in PARTS):8.2f} "
          f"{sum(out['warm'][k] for k in PARTS):8.2f}")
    print(f"floor of one record after the inference ({len(line)}-byte line):")
    for k, v in floor.items():
        print(f"  {k:52s} {statistics.median(v) / 1e3:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
