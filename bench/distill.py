"""Benchmark: certified distillation vs the naive method, and a scaling table, in one run.

Naive method: one Marabou query per cell and action ("can action a be decoded in this
cell?"), built from the same IR. Its time is measured on a seeded sample of cells and
extrapolated to the whole grid (the call count is exact). Usage:

    python bench/distill.py [--naive-sample 48] [--scaling 8,12,16]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from mi_certify.generator.build.distill import DistillOptions, cell_edges, box_of_cells, distill
from mi_certify.generator.frontend.model import load_model
from mi_certify.generator.frontend.onnx_import import import_onnx
from mi_certify.generator.core.spec import load_spec
from mi_certify.runtime.quantize import split_address
from mi_certify.verification.tools import marabou
from mi_certify.verification.nn.properties import decoded_rows

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "meta_controller" / "controller.onnx"
SLA = ROOT / "examples" / "meta_controller" / "sla.yaml"
BITS = {8: [2, 2, 2, 1, 1], 12: [3, 3, 2, 2, 2], 16: [4, 3, 3, 3, 3], 20: [4, 4, 4, 4, 4]}


def spec_with_bits(bits, tmp: Path):
    raw = yaml.safe_load(SLA.read_text())
    for inp, b in zip(raw["inputs"], bits):
        inp["bits"] = b
    p = tmp / f"sla_{sum(bits)}.yaml"
    p.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_spec(p)


def naive(spec, ir, sample: int) -> tuple[int, float]:
    """(exact naive query count, extrapolated seconds) from ``sample`` cells."""
    n_cells = 1 << spec.address_bits
    n_act = len(spec.actions)
    rng = np.random.default_rng(0)
    cells = rng.choice(n_cells, size=min(sample, n_cells), replace=False)
    bits = [i.bits for i in spec.inputs]
    edges = cell_edges(spec)
    t0 = time.monotonic()
    for addr in cells:
        q = np.array(split_address(int(addr), bits))
        lo, hi = box_of_cells(edges, q, q)
        for a in range(n_act):
            C, d = decoded_rows(n_act, a, spec.decode)
            marabou.solve_boxes(ir, [(lo, hi)], C, d, 60.0)
    per_query = (time.monotonic() - t0) / (len(cells) * n_act)
    return n_cells * n_act, per_query * n_cells * n_act


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--naive-sample", type=int, default=48, help="cells timed for the naive method")
    ap.add_argument("--scaling", default="8,12,16", help="address widths for the scaling table (8,12,16,20)")
    args = ap.parse_args()
    ir = import_onnx(MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        spec12 = spec_with_bits(BITS[12], Path(tmp))
        t0 = time.monotonic()
        res = distill(spec12, load_model(MODEL), DistillOptions())
        ours_t = time.monotonic() - t0
        # every box bounded counts as one call (a CROWN pass over one box; they run batched)
        ours_calls = res.stats["bound_calls"] + res.stats["cell_split_boxes"]
        n_calls, n_t = naive(spec12, ir, args.naive_sample)
        print("12-bit reference controller (4096 cells, 4 actions)")
        print(f"  ours : {ours_calls:8d} box bound evaluations (CROWN)       {ours_t:9.1f} s   "
              f"proven {res.lut.counts()['proven']}, resolved {res.lut.counts()['resolved']}")
        print(f"         {res.stats['boxes']} boxes bounded in the partition, "
              f"{res.stats['sampled_cells']} cells resolved by replayed witnesses, "
              f"{res.stats['undecided_cells']} undecided")
        print(f"  naive: {n_calls:8d} Marabou queries                      {n_t:9.1f} s (extrapolated from "
              f"{args.naive_sample} cells)")
        print(f"  ratio: {n_calls / ours_calls:8.1f}x fewer calls                    {n_t / ours_t:9.1f}x less time")
        print()
        print(f"{'address bits':>12s} {'cells':>9s} {'time (s)':>9s} {'proven share':>13s}")
        for b in (int(v) for v in args.scaling.split(",")):
            spec = spec_with_bits(BITS[b], Path(tmp))
            t0 = time.monotonic()
            r = distill(spec, load_model(MODEL), DistillOptions())
            c = r.lut.counts()
            print(f"{b:12d} {c['cells']:9d} {time.monotonic() - t0:9.1f} {c['proven'] / c['cells']:13.3f}", flush=True)


if __name__ == "__main__":
    main()
