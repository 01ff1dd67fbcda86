"""Benchmark (issue 21): distillation on Dask, 1 vs 2 workers here, and a model of 8-64 workers.

Workload (default): ACAS Xu network 1_1 over the input box of property 3
(examples/acasxu/sla_prop3_box.yaml) at ``--bits`` bits per input (default 2: 1,024 cells in 64
slices, the distillation's tasks). One run:

1. this process, no Dask (the reference bytes and each slice's time), and our own 2 worker
   processes (the default backend);
2. a Dask LocalCluster of 1 worker, then of 2 workers (processes, one thread each; each cluster is
   started and warmed up with a small distillation first, so start-up is reported apart): wall time of
   ``distill`` and the worker-side seconds of every task; the bytes (partition, witnesses, LUT) must
   equal the reference's;
3. speed-up T1/T2 and efficiency (speed-up / 2), and a **model** of N = 1..64 workers from the
   measured task times: serial part S = T1 - sum(task seconds on 1 worker) (slicing, pickling, the
   scheduler's round trips, the merge), then T(N) = S + makespan of the tasks, each costing its CPU
   seconds on the 1-worker run (what it needs from a free core; the wall clock on this shared machine
   is also printed), handed out in slice order to N workers (list scheduling, what the Dask
   scheduler does with equal priorities), with Amdahl's S + sum/N and the critical path
   S + max(task) as bounds. The model is checked against the
   measured T2 and says so in its output; it assumes workers as fast as these and a network as fast
   as loopback.

The machine has 2 cores shared with other work: ``uptime``'s load is printed with the figures.
Usage: ``python bench/scale_out.py [--bits 2] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLA = ROOT / "examples" / "acasxu" / "sla_prop3_box.yaml"
MODEL = ROOT.parent / "shared" / "anchors" / "acasxu" / "onnx" / "ACASXU_run2a_1_1_batch_2000.onnx"
PROJECT = (1, 2, 4, 8, 16, 32, 64)


def spec_at(bits: list[int], folder: Path):
    from mi_certify.generator.core.spec import load_spec

    text = SLA.read_text()
    for b in bits:
        text = text.replace("bits: 3}", f"bits: {b}}}", 1)
    p = folder / f"sla_{''.join(map(str, bits))}.yaml"
    p.write_text(text)
    return load_spec(p)


def fingerprint(r) -> tuple:
    from mi_certify.generator.core.lut import table_bytes
    return r.boxes.tobytes(), r.witnesses.tobytes(), table_bytes(r.lut.tokens, r.lut.confident), r.lut.status.tolist()


class OtherLoad:
    """CPU seconds the rest of the machine used while a block ran: system-wide busy time minus this
    process tree's (psutil), so a run on shared cores can be read (2 cores x wall = all there was)."""

    def __enter__(self):
        import psutil
        self._t0, self._sys0, self._mine0 = time.monotonic(), self._busy(psutil.cpu_times()), self._tree()
        return self

    def __exit__(self, *exc):
        import psutil
        self.wall = time.monotonic() - self._t0
        self.other = max(0.0, (self._busy(psutil.cpu_times()) - self._sys0) - (self._tree() - self._mine0))

    @staticmethod
    def _busy(t) -> float:
        return t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)

    @staticmethod
    def _tree() -> float:
        import psutil
        total = 0.0
        me = psutil.Process()
        for p in [me, *me.children(recursive=True)]:
            try:
                c = p.cpu_times()   # the reaped children's too (our own workers end inside the block)
                total += c.user + c.system + c.children_user + c.children_system
            except psutil.Error:
                pass
        return total

    def note(self) -> str:
        cores = max(0.0, 2 * self.wall - self.other) / self.wall if self.wall else 0.0
        return (f"other processes used {self.other:.1f} of the {2 * self.wall:.1f} core-seconds (this run had "
                f"{cores:.2f} of the 2 cores)")


def makespan(durations: list[float], workers: int) -> float:
    """Tasks handed out in order, each to the worker that is free first."""
    free = [0.0] * workers
    heapq.heapify(free)
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def on_cluster(n: int, spec, warm_spec, model) -> dict:
    from mi_certify.generator.build.distill import DistillOptions, distill
    from mi_certify.verification.tools.backends import BackendSpec, open_backend

    t0 = time.monotonic()
    with open_backend(BackendSpec(scheduler="local", workers=n)) as backend:   # what --scheduler local starts
        started = time.monotonic() - t0
        t0 = time.monotonic()
        distill(warm_spec, model, DistillOptions(workers=1), backend=backend)   # imports, numba cache loads
        warm = time.monotonic() - t0
        with OtherLoad() as load:
            r = distill(spec, model, DistillOptions(workers=1), backend=backend)
        wall = load.wall
        tasks = [t.seconds for t in backend.tasks]
        cpu = [t.cpu_seconds for t in backend.tasks]
        per_worker = {}
        for t in backend.tasks:
            per_worker[t.worker] = per_worker.get(t.worker, 0) + 1
    return {"workers": n, "start_s": started, "warmup_s": warm, "wall_s": wall, "task_s": tasks, "task_cpu_s": cpu,
            "tasks_per_worker": sorted(per_worker.values()), "result": r, "other_cpu_s": load.other,
            "load": load.note()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bits", type=int, default=2, help="bits per input of the ACAS Xu box (default 2)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)

    from mi_certify.generator.build.distill import DistillOptions, distill
    from mi_certify.generator.frontend.model import load_model
    from mi_certify.verification.tools.backends import InlineBackend

    model = load_model(MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        spec = spec_at([args.bits] * 5, Path(tmp))
        warm_spec = spec_at([1] * 5, Path(tmp))
    print(f"workload: ACAS Xu 1_1 over property 3's box, {args.bits} bits x 5 inputs = {1 << spec.address_bits:,} "
          f"cells; load average before: {os.getloadavg()[0]:.2f} (2 cores, shared)")
    inline = InlineBackend()
    distill(warm_spec, model, DistillOptions(workers=1), backend=inline)
    with OtherLoad() as load:
        ref = distill(spec, model, DistillOptions(workers=1), backend=inline)
    t_inline = load.wall
    print(f"in this process (no Dask): {t_inline:.2f} s, {len(inline.tasks)} slices "
          f"(largest {max(t.seconds for t in inline.tasks):.2f} s, sum {sum(t.seconds for t in inline.tasks):.2f} s); "
          f"{load.note()}")
    from mi_certify.verification.tools.backends import ProcessBackend
    with OtherLoad() as load:
        own = distill(spec, model, DistillOptions(workers=2), backend=ProcessBackend(2))
    t_own = load.wall
    print(f"our own 2 worker processes (the default, no Dask): {t_own:.2f} s; bytes identical: "
          f"{fingerprint(own) == fingerprint(ref)}; {load.note()}")
    runs = {}
    for n in (1, 2):
        runs[n] = on_cluster(n, spec, warm_spec, model)
        same = fingerprint(runs[n].pop("result")) == fingerprint(ref)
        runs[n]["identical_to_in_process"] = same
        print(f"Dask LocalCluster, {n} worker{'s' if n > 1 else ''}: {runs[n]['wall_s']:.2f} s "
              f"(start {runs[n]['start_s']:.1f} s, warm-up {runs[n]['warmup_s']:.1f} s, not counted); tasks per "
              f"worker {runs[n]['tasks_per_worker']}; bytes identical to the in-process run: {same}; {runs[n]['load']}")
        if not same:
            print("ERROR: the bytes differ", file=sys.stderr)
            return 1
    t1, t2 = runs[1]["wall_s"], runs[2]["wall_s"]
    speedup = t1 / t2
    print(f"measured: speed-up 1 -> 2 workers {speedup:.2f}x, efficiency {speedup / 2:.0%}; vs no Dask "
          f"{t_inline / t2:.2f}x")

    wall1, cpu1 = runs[1]["task_s"], runs[1]["task_cpu_s"]
    serial = max(0.0, t1 - sum(wall1))
    print(f"\nMODEL (not measured): T(N) = S + makespan of the {len(wall1)} tasks handed out in slice order to N "
          f"workers, each task costing its CPU seconds on 1 worker (what it needs from a free core: {sum(cpu1):.2f} s "
          f"in all, wall {sum(wall1):.2f} s on this shared machine); S = T1 - sum(task wall) = {serial:.2f} s "
          f"(slicing, pickling, scheduler round trips, merge); the largest task, {max(cpu1):.2f} s, is the "
          f"critical path: no run is shorter than S + {max(cpu1):.2f} s")
    d = cpu1
    pred2 = serial + makespan(d, 2)
    print(f"model check: predicts {pred2:.2f} s for 2 workers on 2 free cores, measured {t2:.2f} s on this machine "
          f"({(pred2 - t2) / t2:+.0%}; load average now {os.getloadavg()[0]:.2f}: the cores are shared with other work)")
    base = serial + makespan(d, 1)
    print(f"{'workers':>8} {'T model (s)':>12} {'speed-up':>9} {'efficiency':>10} {'Amdahl/critical-path bound (s)':>31}")
    model_rows = []
    for n in PROJECT:
        t = serial + makespan(d, n)
        bound = serial + max(sum(d) / n, max(d))
        model_rows.append({"workers": n, "seconds": t, "speedup": base / t, "efficiency": base / t / n,
                           "bound_seconds": bound})
        print(f"{n:>8} {t:>12.2f} {base / t:>8.2f}x {base / t / n:>10.0%} {bound:>31.2f}")
    print(f"beyond {len(d)} workers nothing is gained: the grid is cut into {len(d)} slices (distill.MAX_SLICES), "
          "and the slice cut fixes the partition's bytes")
    if args.json:
        Path(args.json).write_text(json.dumps({"inline_s": t_inline, "own_processes_2_s": t_own, "runs": runs,
                                               "serial_s": serial,
                                               "model": model_rows, "model_check_2": pred2}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
