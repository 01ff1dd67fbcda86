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
from typing import TYPE_CHECKING

import numpy as np
import z3

if TYPE_CHECKING:  # imported where used: a spawned worker imports this module first, and
    # mi_certify.generator (its __init__ imports the pipeline) imports this module back
    from mi_certify.generator.core.ir import ControllerIR


def _q(v: float) -> z3.RatNumRef:
    f = Fraction(float(v))
    return z3.RealVal(f"{f.numerator}/{f.denominator}")


def _frac(f: Fraction) -> z3.RatNumRef:
    return z3.RealVal(f"{f.numerator}/{f.denominator}")


def _outward(f: Fraction, down: bool) -> Fraction:
    """The nearest float64 at or below (down) / at or above ``f``, as a Fraction."""
    v = float(f)
    if down and Fraction(v) > f:
        v = float(np.nextafter(v, -np.inf))
    elif not down and Fraction(v) < f:
        v = float(np.nextafter(v, np.inf))
    return Fraction(v)


def exact_intervals(ir: ControllerIR, lo, hi) -> list[list[tuple[Fraction, Fraction]]]:
    """Interval bounds of every node in exact rational arithmetic (no rounding at all)."""
    from mi_certify.generator.core.ir import AffineNode, InputNode
    out: list[list[tuple[Fraction, Fraction]]] = []
    for node in ir.nodes:
        if isinstance(node, InputNode):
            out.append([(Fraction(float(a)), Fraction(float(b))) for a, b in zip(lo, hi)])
        elif isinstance(node, AffineNode):
            rows = []
            for r in range(node.size):
                l = u = Fraction(float(node.bias[r]))
                for src, w in node.terms:
                    for c in np.nonzero(w[r])[0]:
                        wq = Fraction(float(w[r, c]))
                        a, b = out[src][int(c)]
                        if wq > 0:
                            l, u = l + wq * a, u + wq * b
                        else:
                            l, u = l + wq * b, u + wq * a
                rows.append((l, u))
            out.append(rows)
        else:
            out.append([(max(a, Fraction(0)), max(b, Fraction(0))) for a, b in out[node.src]])
    return out


class ExactChecker:
    """Exact decision of ``exists x in [lo, hi]: C y(x) <= d`` with Z3 (linear real arithmetic).

    Per box, exact rational interval bounds fix every ReLU whose input sign is known
    (``y = z`` or ``y = 0``); the others are ``If(z > 0, z, 0)``. When Z3 does not answer
    within ``step_s``, the box is bisected along the input whose halves leave the fewest
    ReLUs of undecided sign, and both halves are checked (an independent branch and
    bound in exact arithmetic; it shares no code with the float bounds).
    """

    def __init__(self, ir: ControllerIR, C: np.ndarray, d: np.ndarray, step_s: float = 0.5):
        self.ir, self.C, self.d, self.step_s = ir, C, d, step_s
        self.calls = 0

    def _check_one(self, lo, hi, timeout_s: float) -> tuple[str, np.ndarray | None]:
        from mi_certify.generator.core.ir import AffineNode, InputNode
        ir = self.ir
        iv = exact_intervals(ir, lo, hi)
        s = z3.Solver()
        s.set("timeout", max(1, int(timeout_s * 1000)))
        vals: list[list] = []
        xs: list = []
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
                    a, b = iv[node.src][k]
                    if a >= 0:
                        out.append(z)
                    elif b <= 0:
                        out.append(z3.RealVal(0))
                    else:
                        y = z3.Real(f"n{nid}_{k}")
                        on = z3.Bool(f"p{nid}_{k}")
                        # redundant bounds from the exact interval, rounded outward to floats so
                        # the rationals stay short (a chord bound made Z3 slower, measured)
                        a_, b_ = _outward(a, down=True), _outward(b, down=False)
                        s.add(y >= 0, y >= z, y <= _frac(b_), z >= _frac(a_),
                              z3.Implies(on, y == z), z3.Implies(z3.Not(on), y == 0),
                              z3.Implies(on, z >= 0), z3.Implies(z3.Not(on), z <= 0))
                        out.append(y)
                vals.append(out)
        ys = [v for nid in ir.outputs for v in vals[nid]]
        for r in range(self.C.shape[0]):
            terms = [_q(self.C[r, j]) * ys[j] for j in np.nonzero(self.C[r])[0]]
            s.add(z3.Sum(terms or [z3.RealVal(0)]) <= _q(self.d[r]))
        self.calls += 1
        res = s.check()
        if res == z3.unsat:
            return "unsat", None
        if res == z3.sat:
            m = s.model()
            return "sat", np.array([float(m.eval(v, model_completion=True).as_fraction()) for v in xs])
        return "unknown", None

    def _unstable(self, lo, hi) -> int:
        from mi_certify.generator.core.ir import AffineNode, InputNode
        iv = exact_intervals(self.ir, lo, hi)
        return sum(1 for node in self.ir.nodes if not isinstance(node, (InputNode, AffineNode))
                   for a, b in iv[node.src] if a < 0 < b)

    def _split(self, lo, hi):
        """Bisect along the input that leaves the fewest ReLUs of undecided sign (exact intervals)."""
        best = None
        for i in range(lo.size):
            if not hi[i] > lo[i]:
                continue
            mid = (lo[i] + hi[i]) / 2
            a_hi, b_lo = hi.copy(), lo.copy()
            a_hi[i], b_lo[i] = mid, mid
            cost = self._unstable(lo, a_hi) + self._unstable(b_lo, hi)
            if best is None or cost < best[0]:
                best = (cost, [(lo, a_hi), (b_lo, hi)])
        return None if best is None else best[1]

    def check(self, lo: np.ndarray, hi: np.ndarray, timeout_s: float) -> tuple[str, np.ndarray | None]:
        """("unsat", None), ("sat", x float64) or ("unknown", None) when time runs out."""
        import time

        deadline = time.monotonic() + timeout_s
        stack = [(np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64))]
        while stack:
            left = deadline - time.monotonic()
            if left <= 0:
                return "unknown", None
            blo, bhi = stack.pop()
            res, x = self._check_one(blo, bhi, min(self.step_s, left))
            if res == "sat":
                return res, x
            if res == "unknown":
                halves = self._split(blo, bhi)
                if halves is None:
                    return "unknown", None
                stack.extend(halves)
        return "unsat", None


def exact_check(ir: ControllerIR, lo: np.ndarray, hi: np.ndarray, C: np.ndarray, d: np.ndarray,
                timeout_s: float) -> tuple[str, np.ndarray | None]:
    """Decide ``exists x in [lo, hi]: C y(x) <= d`` exactly (see :class:`ExactChecker`)."""
    return ExactChecker(ir, C, d).check(lo, hi, timeout_s)


def _confirm_task(args) -> tuple[str, list | None]:
    import time

    ir, C, d, lo, hi, wall_deadline = args  # time.time(): the one clock every process reads alike
    left = wall_deadline - time.time()
    if left <= 0:
        return "unknown", None
    res, x = ExactChecker(ir, C, d).check(lo, hi, left)
    return res, None if x is None else x.tolist()


def confirm_boxes(ir: ControllerIR, tasks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
                  timeout_s: float, workers: int = 2,
                  first_failure: bool = False) -> list[tuple[str, np.ndarray | None]]:
    """Run :meth:`ExactChecker.check` on (C, d, lo, hi) tasks in ``workers`` processes.

    ``timeout_s`` bounds the wall time of all tasks together (they share one deadline: a
    task started late gets what is left; tasks not decided by then are "unknown"). With
    ``first_failure`` the tasks stop at the first answer that is not "unsat" (the rest are
    "unknown"). Results come back in task order. With one task or one worker everything
    runs in this process, and so do the tasks left when a worker process cannot start or
    dies. Ctrl-C (or any exception) stops the worker processes at once.
    """
    import time

    deadline = time.monotonic() + timeout_s
    if workers <= 1 or len(tasks) <= 1:
        out = []
        for C, d, lo, hi in tasks:
            left = deadline - time.monotonic()
            if left <= 0 or (first_failure and out and out[-1][0] != "unsat"):
                out.append(("unknown", None))
                continue
            out.append(ExactChecker(ir, C, d).check(lo, hi, left))
        return out
    from mi_certify.verification.tools.workers import WorkersLost, WorkersTimedOut, exiting, map_in_processes

    wall_deadline = time.time() + max(0.0, deadline - time.monotonic())
    try:
        got = dict(enumerate(map_in_processes(_confirm_task, [(ir, C, d, lo, hi, wall_deadline)
                                                              for C, d, lo, hi in tasks], workers,
                                              deadline=deadline,
                                              stop=(lambda r: r[0] != "unsat") if first_failure else None)))
    except WorkersTimedOut as late:  # out of time (or a failure found): the rest stay unknown
        return [(late.done[k][0], None if late.done[k][1] is None else np.array(late.done[k][1]))
                if k in late.done else ("unknown", None) for k in range(len(tasks))]
    except WorkersLost as lost:  # no worker processes here: check the rest in this process
        if exiting():
            raise SystemExit(130) from None
        got = lost.done
    rest = iter(confirm_boxes(ir, [t for k, t in enumerate(tasks) if k not in got],
                              max(0.0, deadline - time.monotonic()), workers=1, first_failure=first_failure))
    return [(got[k][0], None if got[k][1] is None else np.array(got[k][1])) if k in got else next(rest)
            for k in range(len(tasks))]
