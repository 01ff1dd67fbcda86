"""Benchmark: our verifier on every handed ACAS Xu row, CartPole rows and the twelve handed
tllverifybench instances (two-level-lattice networks), beside plain Marabou (same run) and the
published VNN-COMP 2022 times of nnenum and α,β-CROWN (other hardware).

Each query runs with ``verify --timeout`` semantics (VerifyOptions.whole_query: the timeout bounds
the whole query, search and exact confirmation); the table gives its wall time and its CPU time
(this process and its reaped worker processes). ``--busy`` keeps one core busy with another
process (``yes > /dev/null``) for the whole run, as issue 38 asks ("robust under load").

"Plain Marabou" is MarabouCore on the whole input box, built from the same IR (no bound
tightening, no input splitting), in a child process with the same timeout (skip it with
--no-marabou: it takes up to the timeout on every undecided row).
Prints one row per query: expected answer, our verdict and time, Marabou's, the published
ones (bench/vnncomp2022_acasxu.csv), then a summary: decided, wrong, median and
maximum time. A wrong answer (sat vs unsat against the published result) is printed as
WRONG and makes the exit status 1.

Usage: python bench/verify.py [--timeout S] [--no-marabou] [--lp] [--cartpole N] [--no-tll] [--busy]
                              [--only NET/PROP] [--tll-dir DIR]
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
TLL_PUBLISHED = Path(__file__).resolve().parent / "vnncomp2022_tllverifybench.csv"


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


def rows(cartpole: int, tll: bool = True, tll_dir: Path | None = None) -> list[tuple[str, str, str, str, str]]:
    """(label, onnx path, vnnlib path, expected, key into the published table; for tllverifybench
    the published α,β-CROWN time itself, prefixed "tll:"). ``tll_dir``: the whole 2022
    tllverifybench (its onnx/ and vnnlib/ gunzipped there; answers from TLL_PUBLISHED) instead
    of the twelve handed instances."""
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
    if tll:
        root = tll_dir or ANCHORS / "tllverifybench"
        table = TLL_PUBLISHED if tll_dir else root / "expected_results.csv"
        for r in csv.DictReader(line for line in table.open() if not line.startswith("#")):
            net = Path(r["onnx"]).stem.replace("tllBench_n=2_N=M=", "N").replace("_m=1_instance_", " ")
            out.append((f"tll {net}", str(root / r["onnx"]), str(root / r["vnnlib"]), r["expected"],
                        f"tll:{float(r['alpha_beta_crown_s']):.3f}"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--no-marabou", action="store_true", help="skip the plain-Marabou column")
    ap.add_argument("--cartpole", type=int, default=6, help="CartPole rows, spread over the 100 (default 6)")
    ap.add_argument("--only", default="", help="run rows whose label contains this text")
    ap.add_argument("--lp", action="store_true", help="with the LP-chosen CROWN multipliers (lp_relax)")
    ap.add_argument("--no-tll", action="store_true", help="skip the twelve tllverifybench instances")
    ap.add_argument("--tll-dir", type=Path, default=None,
                    help="the whole 2022 tllverifybench (32 instances): a folder holding its onnx/ and vnnlib/ "
                         "gunzipped (ChristopherBrix/vnncomp2022_benchmarks, benchmarks/tllverifybench)")
    ap.add_argument("--busy", action="store_true", help="keep one core busy (yes > /dev/null) during the run")
    args = ap.parse_args()
    busy = None
    if args.busy:
        import subprocess
        busy = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
    try:
        return _run(args)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


def _run(args) -> int:
    published = {}
    with PUBLISHED.open() as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            published[f"{r['network']},{r['property']}"] = r
    print(f"{'query':24s} {'expected':8s} {'ours':8s} {'t_ours':>7s} {'cpu_s':>7s} {'method':22s} {'marabou':8s} "
          f"{'t_mar':>6s} {'nnenum_s':>8s} {'abcrown_s':>9s}" + ("   (one core busy: yes > /dev/null)" if args.busy else ""))
    times, decided, wrong, total = [], 0, 0, 0
    models = {}
    for label, onnx, vnnlib, expected, key in rows(args.cartpole, not args.no_tll, args.tll_dir):
        if args.only and args.only not in label:
            continue
        total += 1
        model = models.setdefault(onnx, load_model(Path(onnx)))
        query = parse_vnnlib(Path(vnnlib), model.ir.n_inputs, model.ir.n_outputs)
        res = decide(model, query, VerifyOptions(timeout=args.timeout, confirm_timeout=args.timeout, lp_hints=args.lp,
                                                 whole_query=True))
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
        pub = {"abcrown_s": key[4:]} if key.startswith("tll:") else published.get(key, {})
        print(f"{label:24s} {expected:8s} {ours:8s} {res.time_s:7.2f} {res.stats.get('cpu_s', float('nan')):7.2f} "
              f"{res.method[:22]:22s} {mv:8s} {mt:6.1f} "
              f"{pub.get('nnenum_s', '-'):>8s} {pub.get('abcrown_s', '-'):>9s}{mark}", flush=True)
    med = statistics.median(times) if times else float("nan")
    print(f"\ndecided {decided} of {total}, wrong {wrong}, median {med:.2f} s, max {max(times, default=float('nan')):.2f} s "
          f"(timeout {args.timeout:g} s; published times are VNN-COMP 2022 hardware)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
