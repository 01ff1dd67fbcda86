"""Benchmark: our verifier vs plain Marabou on the same anchor queries, in one run.

"Plain Marabou" is MarabouCore on the whole input box, built from the same IR (no
bound tightening, no input splitting), in a child process with the same timeout.
Prints one row per query: published answer, our verdict and time, Marabou's verdict and
time, and the ratio Marabou/ours. Usage: python bench/verify.py [--timeout S]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mi_certify.generator.model import load_model
from mi_certify.generator.onnx_import import import_onnx
from mi_certify.verification import marabou
from mi_certify.verification.nn_verify import VerifyOptions, decide
from mi_certify.verification.vnnlib import parse_vnnlib

ANCHORS = Path(__file__).resolve().parents[2] / "shared" / "anchors"
QUERIES = [("acasxu", "ACASXU_run2a_4_1_batch_2000.onnx", "prop_4.vnnlib", "unsat"),
           ("acasxu", "ACASXU_run2a_1_7_batch_2000.onnx", "prop_3.vnnlib", "sat"),
           ("acasxu", "ACASXU_run2a_1_9_batch_2000.onnx", "prop_4.vnnlib", "sat"),
           ("acasxu", "ACASXU_run2a_1_1_batch_2000.onnx", "prop_1.vnnlib", "unsat"),
           ("acasxu", "ACASXU_run2a_3_3_batch_2000.onnx", "prop_3.vnnlib", "unsat"),
           ("rl_cartpole", "cartpole.onnx", "cartpole_case_unsafe_29.vnnlib", "sat"),
           ("rl_cartpole", "cartpole.onnx", "cartpole_case_safe_14.vnnlib", "unsat")]


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args()
    print(f"{'network':34s} {'property':32s} {'expected':8s} {'ours':8s} {'t_ours':>8s} {'marabou':8s} "
          f"{'t_marabou':>9s} {'ratio':>7s}")
    for family, net, prop, expected in QUERIES:
        root = ANCHORS / family
        ir = import_onnx(root / "onnx" / net)
        query = parse_vnnlib(root / "vnnlib" / prop, ir.n_inputs, ir.n_outputs)
        res = decide(load_model(root / "onnx" / net), query, VerifyOptions(timeout=args.timeout))
        mv, mt = plain_marabou(ir, query, args.timeout)
        print(f"{net:34s} {prop:32s} {expected:8s} {res.verdict.vnnlib:8s} {res.time_s:8.2f} {mv:8s} {mt:9.2f} "
              f"{mt / max(res.time_s, 1e-3):7.1f}x", flush=True)


if __name__ == "__main__":
    main()
