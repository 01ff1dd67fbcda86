"""Benchmark: distillation cost against inputs × bits, in one run (issue 17's goals).

Each row distills one controller over its whole grid in a fresh interpreter (2 worker
processes, as a build does) and reports cells, final boxes, wall time and the peak resident
memory of the run (the parent plus its largest worker, an upper bound on the sum: psutil
sampled every 0.2 s). Rows:

* the shipped reference controller at 16, 20 and (``--full``) 24 address bits;
* random ReLU MLPs of the same hidden shape with 4 × 3-bit and 12 × 1-bit inputs (4,096
  cells each), and 8 × 2-bit and 16 × 1-bit (65,536 cells each): the cost must follow the
  cells, not the number of inputs (goal: within 2×).

Goals (issue 17, 2 cores): reference at 20 bits ≤ 60 s, at 24 bits ≤ 15 min, peak ≤ 4 GB.
Usage: ``python bench/scale.py [--full]``. Scale-out over workers (Dask, 1 vs 2 here and a model of
8-64): ``python bench/scale_out.py``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify_actions import make_mlp, make_sla  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "meta_controller" / "controller.onnx"
SLA = ROOT / "examples" / "meta_controller" / "sla.yaml"

ONE = """
import json, sys, time
from mi_certify.generator.build.distill import DistillOptions, distill
from mi_certify.generator.frontend.model import load_model
from mi_certify.generator.core.spec import load_spec
spec, model = load_spec(sys.argv[2]), load_model(sys.argv[1])
t0 = time.monotonic()
r = distill(spec, model, DistillOptions(resolve=spec.resolve))
c = r.lut.counts()
print(json.dumps({"seconds": time.monotonic() - t0, "boxes": len(r.boxes), **c}))
"""


def run_one(model: Path, sla: Path) -> dict:
    """Distill in a fresh interpreter; its figures and the peak RSS of its process tree."""
    import psutil
    proc = subprocess.Popen([sys.executable, "-c", ONE, str(model), str(sla)], stdout=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [ps] + ps.children(recursive=True)
            peak = max(peak, sum(p.memory_info().rss for p in tree))
        except psutil.Error:
            pass
        time.sleep(0.2)
    out = json.loads(proc.stdout.read().strip().splitlines()[-1])
    out["peak_gb"] = peak / 2**30
    return out


def reference_spec(tmp: Path, bits: list[int]) -> Path:
    raw = yaml.safe_load(SLA.read_text())
    for inp, b in zip(raw["inputs"], bits):
        inp["bits"] = b
    p = tmp / f"ref_{sum(bits)}.yaml"
    p.write_text(yaml.safe_dump(raw, sort_keys=False))
    return p


def random_spec(tmp: Path, n: int, bits: int) -> tuple[Path, Path]:
    model = make_mlp(tmp / f"r{n}x{bits}.onnx", [n, 16, 16, 4], seed=7)
    sla = make_sla(tmp / f"r{n}x{bits}.yaml", n, 4)
    raw = yaml.safe_load(sla.read_text())
    for inp in raw["inputs"]:
        inp["bits"] = bits
    sla.write_text(yaml.safe_dump(raw, sort_keys=False))
    return model, sla


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="also the reference at 24 bits (~15 min)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        cases = [("reference 4+3+3+3+3", MODEL, reference_spec(t, [4, 3, 3, 3, 3])),
                 ("reference 4+4+4+4+4", MODEL, reference_spec(t, [4, 4, 4, 4, 4]))]
        if args.full:
            cases.append(("reference 8+8+4+2+2", MODEL, reference_spec(t, [8, 8, 4, 2, 2])))
        for n, b in ((4, 3), (12, 1), (8, 2), (16, 1)):
            cases.append((f"random {n} x {b}-bit", *random_spec(t, n, b)))
        print(f"{'controller':24s} {'inputs':>6s} {'bits':>4s} {'cells':>10s} {'boxes':>9s} {'proven':>7s} "
              f"{'time s':>8s} {'peak GB':>8s}", flush=True)
        for name, model, sla in cases:
            spec = yaml.safe_load(Path(sla).read_text())
            r = run_one(model, sla)
            n_in, bits = len(spec["inputs"]), sum(i["bits"] for i in spec["inputs"])
            rows.append((name, r))
            print(f"{name:24s} {n_in:6d} {bits:4d} {r['cells']:10,d} {r['boxes']:9,d} "
                  f"{r['proven'] / r['cells']:7.3f} {r['seconds']:8.1f} {r['peak_gb']:8.2f}", flush=True)
    by = dict(rows)
    print()
    ref20 = by["reference 4+4+4+4+4"]
    print(f"goal: reference at 20 bits <= 60 s: {ref20['seconds']:.1f} s "
          f"({'met' if ref20['seconds'] <= 60 else 'MISSED'})")
    if "reference 8+8+4+2+2" in by:
        ref24 = by["reference 8+8+4+2+2"]
        print(f"goal: reference at 24 bits <= 900 s, peak <= 4 GB: {ref24['seconds']:.1f} s, "
              f"{ref24['peak_gb']:.2f} GB ({'met' if ref24['seconds'] <= 900 and ref24['peak_gb'] <= 4 else 'MISSED'})")
    for many, few in (("random 12 x 1-bit", "random 4 x 3-bit"), ("random 16 x 1-bit", "random 8 x 2-bit")):
        ratio = by[many]["seconds"] / by[few]["seconds"]
        per_box = (by[many]["seconds"] / by[many]["boxes"]) / (by[few]["seconds"] / by[few]["boxes"])
        print(f"goal: {many} within 2x of {few} (same cells): ratio {ratio:.2f} "
              f"({'met' if ratio <= 2 else 'MISSED'}); final boxes {by[many]['boxes']:,} vs {by[few]['boxes']:,}, "
              f"time per box ratio {per_box:.2f} (1-bit cells are half an input's range: most hold several actions)")


if __name__ == "__main__":
    main()
