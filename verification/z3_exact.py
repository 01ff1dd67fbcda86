"""Exact second opinion with Z3 over the rationals (real arithmetic, no rounding).

The IR's float64 weights are converted to exact rationals (``fractions.Fraction``);
each ReLU is ``If(z > 0, z, 0)``; the query is ``x in box and C y <= d``. The
encoding shares no code with :mod:`bounds` or :mod:`marabou`, so a wrong PROVED from
either would have to coincide with a wrong ``unsat`` here. Source: de Moura and
Bjørner, "Z3: An Efficient SMT Solver", TACAS 2008 (linear real arithmetic with
case splits).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import z3

from mi_certify.generator.ir import AffineNode, ControllerIR, InputNode


def _q(v: float) -> z3.RatNumRef:
    f = Fraction(float(v))
    return z3.RealVal(f"{f.numerator}/{f.denominator}")


def exact_check(ir: ControllerIR, lo: np.ndarray, hi: np.ndarray, C: np.ndarray, d: np.ndarray,
                timeout_s: float) -> tuple[str, np.ndarray | None]:
    """Decide ``exists x in [lo, hi]: C y(x) <= d`` exactly.

    Returns:
        ("unsat", None), ("sat", x as float64) or ("unknown", None) on timeout.
    """
    s = z3.Solver()
    s.set("timeout", max(1, int(timeout_s * 1000)))
    vals: list[list] = []
    xs = []
    for nid, node in enumerate(ir.nodes):
        if isinstance(node, InputNode):
            xs = [z3.Real(f"x{i}") for i in range(node.size)]
            for i, x in enumerate(xs):
                s.add(x >= _q(lo[i]), x <= _q(hi[i]))
            vals.append(xs)
        elif isinstance(node, AffineNode):
            out = []
            for r in range(node.size):
                acc = _q(node.bias[r])
                for src, w in node.terms:
                    for c in np.nonzero(w[r])[0]:
                        acc = acc + _q(w[r, c]) * vals[src][int(c)]
                y = z3.Real(f"n{nid}_{r}")
                s.add(y == acc)
                out.append(y)
            vals.append(out)
        else:
            out = []
            for k, z in enumerate(vals[node.src]):
                y = z3.Real(f"n{nid}_{k}")
                s.add(y == z3.If(z > 0, z, z3.RealVal(0)))
                out.append(y)
            vals.append(out)
    ys = [v for nid in ir.outputs for v in vals[nid]]
    for r in range(C.shape[0]):
        s.add(z3.Sum([_q(C[r, j]) * ys[j] for j in np.nonzero(C[r])[0]] or [z3.RealVal(0)]) <= _q(d[r]))
    res = s.check()
    if res == z3.unsat:
        return "unsat", None
    if res == z3.sat:
        m = s.model()
        x = np.array([float(Fraction(str(m.eval(v, model_completion=True).as_fraction()))) for v in xs])
        return "sat", x
    return "unknown", None
