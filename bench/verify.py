"""Benchmark: our verifier on every handed ACAS Xu row and CartPole rows, beside plain Marabou
(same run) and the published VNN-COMP 2022 times of nnenum and α,β-CROWN (other hardware).

"Plain Marabou" is MarabouCore on the whole input box, built from the same IR (no bound
tightening, no input splitting), in a child process with the same timeout (skip it with
--no-marabou: it takes up to the timeout on every undecided row).
Prints one row per query: expected answer, our verdict and time, Marabou's, the published
ones (bench/vnncomp2022_acasxu.csv), then a summary: decided, wrong, median and
maximum time. A wrong answer (sat vs unsat against the published result) is printed as
WRONG and makes the exit status 1.

Usage: python bench/verify.py [--timeout S] [--no-marabou] [--lp] [--cartpole N] [--only NET/PROP]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

from mi_certify.generator.frontend.model import load_model
from mi_certify.verification.tools import marabou
from mi_certify.verification.nn.nn_verify import VerifyOptions, decide
from mi_certify.verification.nn.vnnlib import parse_vnnlib

ANCHORS = Path(__file__).resolve().parents[2] / "shared" / "anchors"
PUBLISHED = Path(__file__).resolve().parent / "vnncomp2022_acasxu.csv"


def plain_marabou(ir, query, timeout: float) -> tuple[str, float]:
    t0 = time.monotonic()
    verdict = "unsat"
    for dj in query.disjuncts:
        ans = marabou.solve_boxes(ir, [(dj.lo, dj.hi)], dj.C, dj.d, max(1.0, timeout - (time.monotonic() - t0)))[0]
        if ans.status == "sat":
            verdict = "sat"
            break
        if ans.status != "unsat":
            verdict = "unknown"
    return verdict, time.monotonic() - t0


def rows(cartpole: int) -> list[tuple[str, str, str, str, str]]:
    """(label, onnx path, vnnlib path, expected, key into the published table)."""
    out = []
    for r in csv.DictReader((ANCHORS / "acasxu" / "expected_results.csv").open()):
        out.append((f"acasxu {r['network']}/p{r['property']}", str(ANCHORS / "acasxu" / r["onnx"]),
                    str(ANCHORS / "acasxu" / r["vnnlib"]), r["expected"], f"{r['network']},{r['property']}"))
    cp = list(csv.DictReader((ANCHORS / "rl_cartpole" / "expected_results.csv").open()))
    step = max(1, len(cp) // max(1, cartpole)) if cartpole else 0
    for r in (cp[::step][:cartpole] if cartpole else []):
        out.append((f"cartpole {Path(r['vnnlib']).stem.replace('cartpole_case_', '')}",
                    str(ANCHORS / "rl_cartpole" / r["onnx"]), str(ANCHORS / "rl_cartpole" / r["vnnlib"]),
                    r["expected"], ""))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--no-marabou", action="store_true", help="skip the plain-Marabou column")
    ap.add_argument("--cartpole", type=int, default=6, help="CartPole rows, spread over the 100 (default 6)")
    ap.add_argument("--only", default="", help="run rows whose label contains this text")
    ap.add_argument("--lp", action="store_true", help="with the LP-chosen CROWN multipliers (lp_relax)")
    args = ap.parse_args()
    published = {}
    with PUBLISHED.open() as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            published[f"{r['network']},{r['property']}"] = r
    print(f"{'query':24s} {'expected':8s} {'ours':8s} {'t_ours':>7s} {'method':22s} {'marabou':8s} {'t_mar':>6s} "
          f"{'nnenum_s':>8s} {'abcrown_s':>9s}")
    times, decided, wrong, total = [], 0, 0, 0
    models = {}
    for label, onnx, vnnlib, expected, key in rows(args.cartpole):
        if args.only and args.only not in label:
            continue
        total += 1
        model = models.setdefault(onnx, load_model(Path(onnx)))
        query = parse_vnnlib(Path(vnnlib), model.ir.n_inputs, model.ir.n_outputs)
        res = decide(model, query, VerifyOptions(timeout=args.timeout, lp_hints=args.lp))
        ours = res.verdict.vnnlib
        mark = ""
        if ours in ("sat", "unsat"):
            decided += 1
            times.append(res.time_s)
            if ours != expected:
                wrong += 1
                mark = "  WRONG"
        if args.no_marabou:
            mv, mt = "-", float("nan")
        else:
            mv, mt = plain_marabou(model.ir, query, args.timeout)
        pub = published.get(key, {})
        print(f"{label:24s} {expected:8s} {ours:8s} {res.time_s:7.2f} {res.method[:22]:22s} {mv:8s} {mt:6.1f} "
              f"{pub.get('nnenum_s', '-'):>8s} {pub.get('abcrown_s', '-'):>9s}{mark}", flush=True)
    med = statistics.median(times) if times else float("nan")
    print(f"\ndecided {decided} of {total}, wrong {wrong}, median {med:.2f} s, max {max(times, default=float('nan')):.2f} s "
          f"(timeout {args.timeout:g} s; published times are VNN-COMP 2022 hardware)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
