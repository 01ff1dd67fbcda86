"""Exact leaves: branch and bound on ReLU phases with the triangle LP, for the boxes input
splitting leaves open.

Method (Ehlers, "Formal Verification of Piece-Wise Linear Feed-Forward Neural Networks"
(Planet), ATVA 2017; the ReLU-split search of nnenum: Bak et al., CAV 2020, and of
BaBSR: Bunel et al., JMLR 2020): over one input box, the network is relaxed to the
triangle LP (every affine node an equality, every unstable ReLU its convex hull) and

    t* = min t   s.t.  C y - d <= t (every row),  the relaxation,  lo <= x <= hi

is bounded below. ``t* > 0`` proves that no point of the box lies in the region. A box
the LP leaves open is split on one unstable ReLU ``z_j``: ``z_j >= 0`` (then ``h_j = z_j``)
and ``z_j <= 0`` (then ``h_j = 0``); the two subdomains cover the box, and each phase
constraint enters its LP exactly. After a split the node bounds of both subdomains are
computed again by CROWN, in one batched pass, starting from the parent's bounds (sound on
each subdomain, which lies in the parent; no forward bounds) with the phase constraint
applied to ``z_j``'s bounds (:func:`~.bounds.crown_bounds` ``init`` and ``phases``) and
intersected with the parent's. A subdomain whose CROWN output bound already puts some row
above its limit everywhere (or whose bounds cross) is closed without an LP: on ACAS Xu 4_1
/ property 3's first 60 leaves, 420 → 349 LPs and 9.2–10.5 → 6.6–6.7 s in one process
(2026-12-07). The neuron split is the one whose triangle intercept carries the largest
share of the LP's dual bound (the LP analogue of BaBSR's score); a subdomain with no
unstable neuron is an exact LP: its optimum is a candidate counterexample.

Soundness in floating point: HiGHS (Huangfu and Hall, Math. Prog. Comp. 2018, through
``highspy``) only *proposes* dual multipliers. The bound that closes a subdomain is the
Lagrangian bound of those multipliers over the LP's finite variable bounds, computed
with outward rounding (Neumaier and Shcherbina, "Safe bounds in linear and mixed-integer
linear programming", Math. Prog. 99, 2004): for any row multipliers ``y`` (sign-clipped
by row type) and ``r = c - Aᵀy``, every feasible point has
``cᵀx >= Σ_i min(y_i·rl_i, y_i·ru_i) + Σ_j min(r_j·lb_j, r_j·ub_j)``. Every variable's
bounds are sound bounds of the network over the subdomain (inputs: the box; hidden
nodes: CROWN; ``t``: the rows' interval lower bound below, any upper bound >= 0 above,
which keeps every point of the region), and the triangle rows are moved outward by
their rounding, so a positive safe bound is a proof whatever HiGHS returned. A solver
failure or time limit leaves the subdomain open (fails closed).
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from mi_certify.generator.core.ir import AffineNode, ControllerIR, ReluNode

from mi_certify.verification.nn.bounds import BoundsTimeout, NodeBounds, crown_bounds, output_matrix_lower
from mi_certify.verification.nn.lp_relax import affine_equalities

__all__ = ["SplitLP", "close_leaves", "split_leaf"]

#: Relative padding of every rounded sum (the float64 error of a sum of k terms is below
#: k · 1.2e-16 of the sum of their absolute values; 1e-9 covers k up to ~8 million).
_PAD = 1e-9
#: LPs one leaf may solve before it is given up (left open).
MAX_LPS = 5000
#: Leaves handed to a worker process at a time.
LEAF_CHUNK = 32


class SplitLP:
    """The triangle LP of ``ir`` for the rows ``C y <= d`` (C (m, n_outputs), d (m,)), kept in
    one HiGHS instance whose bounds and triangle coefficients change from box to box.

    Variables: every node's values in node order, then ``t``. Rows: the affine equalities,
    per ReLU ``z - h <= 0`` and ``h - s z <= b`` (``s, b`` set per subdomain: the hull's
    upper line when unstable, ``h <= z`` when active, ``h <= 0`` when inactive), then
    ``C y - t <= d``.
    """

    def __init__(self, ir: ControllerIR, C: np.ndarray, d: np.ndarray):
        import highspy

        self.ir = ir
        self.C = np.asarray(C, dtype=np.float64)
        self.d = np.asarray(d, dtype=np.float64)
        self.off = np.cumsum([0] + [node.size for node in ir.nodes])
        self.nv = int(self.off[-1]) + 1
        er, ec, ev, erhs, r = affine_equalities(ir, self.off)
        rows, cols, vals, rl, ru = [er], [ec], [ev], [erhs], [erhs]
        self.relus = []  # (node id, pre-activation node id, row of z - h <= 0, row of h - s z <= b)
        for nid, node in enumerate(ir.nodes):
            if isinstance(node, ReluNode):
                o, s, k = self.off[nid], self.off[node.src], np.arange(node.size)
                first, second = r + k, r + node.size + k
                rows += [first, first, second, second]
                cols += [s + k, o + k, o + k, s + k]
                vals += [np.ones(node.size), -np.ones(node.size), np.ones(node.size), -np.ones(node.size)]
                rl += [np.full(node.size, -np.inf)] * 2
                ru += [np.zeros(node.size)] * 2
                self.relus.append((nid, node.src, first, second))
                r += 2 * node.size
        out = np.concatenate([self.off[o] + np.arange(ir.nodes[o].size) for o in ir.outputs])
        m = self.C.shape[0]
        i, j = np.nonzero(self.C)
        rows += [r + i, r + np.arange(m)]
        cols += [out[j], np.full(m, self.nv - 1)]
        vals += [self.C[i, j], -np.ones(m)]
        rl.append(np.full(m, -np.inf)), ru.append(self.d)
        self.n_rows = r + m
        self.out_cols = out
        A = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                          shape=(self.n_rows, self.nv))
        A.sort_indices()
        self.A = A
        self.rl, self.ru = np.concatenate(rl), np.concatenate(ru)
        # positions of the s coefficients (column z, row h - s z <= b) in A's data
        self._s_pos = {}
        for nid, src, first, second in self.relus:
            pos = np.empty(second.size, dtype=np.int64)
            for k, (row, col) in enumerate(zip(second, self.off[src] + np.arange(second.size))):
                lo_, hi_ = A.indptr[col], A.indptr[col + 1]
                pos[k] = lo_ + int(np.nonzero(A.indices[lo_:hi_] == row)[0][0])
            self._s_pos[nid] = pos
        self.cost = np.zeros(self.nv)
        self.cost[-1] = 1.0
        # the compiled class the public highspy.Highs derives from: Highs() turns on its
        # Python callbacks, which print HiGHS's banner on stdout before any option can be set
        h = highspy._core._Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("presolve", "on")
        h.setOptionValue("threads", 1)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = self.nv, self.n_rows
        lp.col_cost_ = self.cost
        lp.col_lower_, lp.col_upper_ = np.full(self.nv, -1e30), np.full(self.nv, 1e30)
        lp.row_lower_ = np.where(np.isfinite(self.rl), self.rl, -highspy.kHighsInf)
        lp.row_upper_ = self.ru
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = A.indptr
        lp.a_matrix_.index_ = A.indices
        lp.a_matrix_.value_ = A.data
        h.passModel(lp)
        self.h = h
        self.basis = self.root_basis = None
        self._inf = highspy.kHighsInf
        self._optimal = highspy.HighsModelStatus.kOptimal
        self._infeasible = highspy.HighsModelStatus.kInfeasible

    def _set(self, lo, hi, nb: NodeBounds, phases: dict[int, np.ndarray]):
        """Load one subdomain: variable bounds, triangle coefficients. Returns (lb, ub) or
        None when a phase contradicts the bounds (the subdomain is empty)."""
        ir = self.ir
        lb = np.empty(self.nv)
        ub = np.empty(self.nv)
        for nid, node in enumerate(ir.nodes):
            o = self.off[nid]
            lb[o:o + node.size], ub[o:o + node.size] = nb.lower[nid], nb.upper[nid]
        lb[:ir.n_inputs], ub[:ir.n_inputs] = lo, hi
        if np.any(lb[:-1] > ub[:-1]):  # sound bounds that cross: no point in the subdomain
            return None
        s_all, b_all = [], []
        for nid, src, first, second in self.relus:
            o, zs = self.off[nid], self.off[src]
            size = second.size
            l, u = lb[zs:zs + size].copy(), ub[zs:zs + size].copy()
            ph = phases.get(nid)
            if ph is not None:
                l = np.where(ph > 0, np.maximum(l, 0.0), l)
                u = np.where(ph < 0, np.minimum(u, 0.0), u)
            if np.any(l > u):
                return None
            lb[zs:zs + size], ub[zs:zs + size] = l, u
            lb[o:o + size], ub[o:o + size] = np.maximum(l, 0.0), np.maximum(u, 0.0)
            unstable = (l < 0) & (u > 0)
            den = np.where(unstable, u - l, 1.0)
            s = np.where(unstable, u / den, np.where(l >= 0, 1.0, 0.0))
            # the hull's upper line h <= s (z - l), moved up by its rounding
            b = np.where(unstable, -s * l, 0.0)
            b = np.where(unstable, b + 4 * _PAD * (np.abs(l) + np.abs(u)), b)
            s_all.append((nid, s))
            b_all.append(b)
        # t: at least every row's interval lower bound (t >= each row), at most any value
        # >= 0 above the rows' interval upper bound (every point of the region keeps t <= 0)
        yl, yu = lb[self.out_cols], ub[self.out_cols]
        Cp, Cn = np.maximum(self.C, 0.0), np.minimum(self.C, 0.0)
        row_lo = Cp @ yl + Cn @ yu - self.d
        row_hi = Cp @ yu + Cn @ yl - self.d
        pad = _PAD * (np.abs(self.C) @ np.maximum(np.abs(yl), np.abs(yu)) + np.abs(self.d))
        lb[-1] = float(np.max(row_lo - pad))
        ub[-1] = max(0.0, float(np.max(row_hi + pad))) + 1.0
        data = self.A.data
        for nid, s in s_all:
            data[self._s_pos[nid]] = -s
        self.ru[np.concatenate([second for _, _, _, second in self.relus])] = np.concatenate(b_all)
        return lb, ub, s_all

    def solve(self, lo: np.ndarray, hi: np.ndarray, nb: NodeBounds, phases: dict[int, np.ndarray],
              time_limit: float = 1.0, basis=None):
        """Bound one subdomain (box ``lo, hi`` (n_inputs,), node bounds ``nb`` of (size_i,)
        arrays, ``phases`` {ReLU node id: (size,) int8, +1 active, -1 inactive, 0 free}).

        Returns:
            (safe lower bound of t* (float; -inf when HiGHS gives no optimum; +inf when the
            phases contradict the bounds), LP input point (n_inputs,) or None,
            split candidate (ReLU node id, neuron) or None when no neuron is unstable).
        """
        self.basis = None
        got = self._set(lo, hi, nb, phases)
        if got is None:
            return math.inf, None, None
        lb, ub, s_all = got
        h = self.h
        h.changeColsBounds(self.nv, np.arange(self.nv, dtype=np.int32), lb, ub)
        for (nid, src, first, second), (_, s) in zip(self.relus, s_all):
            zs = self.off[src]
            for k in range(s.size):
                h.changeCoeff(int(second[k]), int(zs + k), float(-s[k]))
        sec = np.concatenate([second for _, _, _, second in self.relus]).astype(np.int32)
        h.changeRowsBounds(sec.size, sec, np.full(sec.size, -self._inf), self.ru[sec])
        if basis is None:  # a new box: from scratch, with presolve (stable ReLUs drop out)
            h.clearSolver()
        else:  # a subdomain: from its parent's optimal basis (dual simplex after a bound change)
            h.setBasis(basis)
        # HiGHS's time limit counts the instance's whole run time: extend it by this LP's share
        h.setOptionValue("time_limit", h.getRunTime() + max(0.01, float(time_limit)))
        h.run()
        status = h.getModelStatus()
        if status == self._infeasible:
            # a Farkas ray proves the subdomain empty: the Lagrangian bound of the zero
            # objective is positive (checked with the same outward rounding, either sign)
            _, has_ray, ray = h.getDualRay()
            if has_ray:
                ray = np.asarray(ray, dtype=np.float64)
                if max(self._safe_bound(ray, lb, ub, cost=0.0), self._safe_bound(-ray, lb, ub, cost=0.0)) > 0:
                    return math.inf, None, None
            return -math.inf, None, self._candidate(lb, ub, None)
        if status != self._optimal:
            return -math.inf, None, self._candidate(lb, ub, None)
        sol = h.getSolution()
        self.basis = h.getBasis()
        y = np.asarray(sol.row_dual, dtype=np.float64)
        x = np.asarray(sol.col_value, dtype=np.float64)[:self.ir.n_inputs]
        return self._safe_bound(y, lb, ub), x, self._candidate(lb, ub, y)

    def _safe_bound(self, y: np.ndarray, lb: np.ndarray, ub: np.ndarray, cost: float = 1.0) -> float:
        """The Lagrangian bound of multipliers ``y`` over the variable bounds, rounded outward
        (of the objective ``t`` scaled by ``cost``: 0 for a Farkas certificate)."""
        rl, ru = self.rl, self.ru
        c = self.cost * cost
        y = np.where((y > 0) & ~np.isfinite(rl), 0.0, y)   # a <= row takes y <= 0
        y = np.where((y < 0) & ~np.isfinite(ru), 0.0, y)
        r = c - self.A.T @ y
        e = _PAD * (np.abs(c) + abs(self.A).T @ np.abs(y)) + 1e-300
        cand = np.stack([(r - e) * lb, (r - e) * ub, (r + e) * lb, (r + e) * ub])
        col_terms = np.min(cand, axis=0)
        with np.errstate(invalid="ignore"):  # 0 · inf where a row has no lower side
            row_terms = np.where(y < 0, y * ru, np.where(y > 0, y * rl, 0.0))
        if not (np.all(np.isfinite(col_terms)) and np.all(np.isfinite(row_terms))):
            return -math.inf
        total = math.fsum(col_terms) + math.fsum(row_terms)
        pad = _PAD * (math.fsum(np.abs(col_terms)) + math.fsum(np.abs(row_terms)))
        return total - pad

    def _candidate(self, lb: np.ndarray, ub: np.ndarray, y: np.ndarray | None):
        """The unstable neuron whose triangle intercept carries the most dual weight (by
        the hull's area when the duals give none); None when no neuron is unstable. Ties go
        to the earlier neuron."""
        by_score, by_area = (None, 0.0), (None, -1.0)
        for nid, src, first, second in self.relus:
            zs = self.off[src]
            l, u = lb[zs:zs + second.size], ub[zs:zs + second.size]
            unstable = (l < 0) & (u > 0)
            if not unstable.any():
                continue
            if y is not None:
                score = np.where(unstable, -np.minimum(y[second], 0.0) * self.ru[second], 0.0)
                k = int(np.argmax(score))
                if score[k] > by_score[1]:
                    by_score = ((nid, k), float(score[k]))
            area = np.where(unstable, -l * u / np.where(unstable, u - l, 1.0), -1.0)
            k = int(np.argmax(area))
            if area[k] > by_area[1]:
                by_area = ((nid, k), float(area[k]))
        return by_score[0] if by_score[0] is not None else by_area[0]


def split_leaf(ir: ControllerIR, C: np.ndarray, d: np.ndarray, lo: np.ndarray, hi: np.ndarray,
               deadline: float, lp: SplitLP | None = None, max_lps: int = MAX_LPS,
               warm_root: bool = True) -> tuple[str, object]:
    """Decide one box by ReLU-split branch and bound with the triangle LP (depth first).

    Args:
        C, d: the region's rows ``C y <= d``; lo, hi: (n_inputs,) box.
        deadline: ``time.monotonic()`` value; max_lps: LPs before the box is given up.
        lp: the :class:`SplitLP` of these rows (kept between calls: it holds the warm start);
        warm_root: start the box's first LP from the previous box's first optimal basis
            (a neighbouring box when boxes come in the order input splitting made them).
    Returns:
        ("closed", number of LPs) when every subdomain's safe bound (or CROWN output bound) is positive;
        ("candidate", x (n_inputs,)) for a point the network must be evaluated at (an
        exact subdomain's LP optimum, or an LP point the IR puts in the region) — not yet a
        counterexample: the caller replays it; ("open", reason) otherwise.
    """
    lp = lp or SplitLP(ir, C, d)
    relu_src = {nid: ir.nodes[nid].src for nid, _, _, _ in lp.relus}
    try:
        root_nb = crown_bounds(ir, lo, hi, deadline=deadline)
    except BoundsTimeout:
        return "open", "timeout"
    stack = [({}, root_nb, lp.root_basis if warm_root else None)]
    n_lp = 0
    while stack:
        left = deadline - time.monotonic()
        if left <= 0:
            return "open", "timeout"
        if n_lp >= max_lps:
            return "open", f"{n_lp} LPs"
        phases, nb, basis = stack.pop()
        bound, x, cand = lp.solve(lo, hi, nb, phases, time_limit=min(1.0, left), basis=basis)
        if n_lp == 0 and lp.basis is not None:
            lp.root_basis = lp.basis
        n_lp += 1
        if bound > 0:
            continue
        if x is not None:
            y = ir.evaluate(x[None, :])[0]
            if np.all(C @ y - d <= 0):
                return "candidate", x
        if cand is None:
            return ("candidate", x) if x is not None else ("open", "exact subdomain without a solution")
        nid, k = cand
        kids = []
        for sign in (-1, 1):
            ph = {a: b.copy() for a, b in phases.items()}
            ph.setdefault(nid, np.zeros(ir.nodes[nid].size, dtype=np.int8))[k] = sign
            kids.append(ph)
        # both subdomains in one CROWN pass from the parent's bounds (sound on each: it holds them);
        # a subdomain whose CROWN output bound already excludes the region needs no LP
        two_lo, two_hi = np.stack([lo, lo]), np.stack([hi, hi])
        try:
            both = crown_bounds(ir, two_lo, two_hi, deadline=deadline, init=nb,
                                phases={relu_src[a]: np.stack([kids[0][a], kids[1][a]]) for a in kids[0]})
            both = NodeBounds([np.maximum(a, p) for a, p in zip(both.lower, nb.lower)],
                              [np.minimum(a, p) for a, p in zip(both.upper, nb.upper)])
            low, _ = output_matrix_lower(ir, C, two_lo, two_hi, both, deadline=deadline)
        except BoundsTimeout:
            return "open", "timeout"
        for i, ph in enumerate(kids):
            if np.max(low[i] - d) > 0 or any(np.any(a[i] > b[i]) for a, b in zip(both.lower, both.upper)):
                continue   # closed by CROWN (or its bounds cross: no point), no LP
            stack.append((ph, NodeBounds([a[i] for a in both.lower], [b[i] for b in both.upper]), lp.basis))
    return "closed", n_lp


_LPS: dict = {}  # in a worker: the SplitLP of the rows it serves (one disjunct per call)


def _leaf_task(item) -> list:
    """Worker body: ``(ir, C, d, [(lo, hi), ...], wall-clock deadline)`` -> one
    :func:`split_leaf` answer per box (the second element of "closed" is the LP count)."""
    ir, C, d, boxes, wall_deadline = item
    key = (C.tobytes(), d.tobytes())
    lp = _LPS.get(key)
    if lp is None:
        _LPS.clear()
        lp = _LPS[key] = SplitLP(ir, C, d)
    deadline = time.monotonic() + (wall_deadline - time.time())
    out = []
    for lo, hi in boxes:
        kind, what = split_leaf(ir, C, d, lo, hi, deadline, lp)
        out.append((kind, what.tolist() if kind == "candidate" else what))
        if kind != "closed":
            break  # the caller needs no more of this chunk: the query is not proved by it
    return out


def close_leaves(ir: ControllerIR, C: np.ndarray, d: np.ndarray, boxes: list, deadline: float,
                 workers: int = 2) -> list:
    """:func:`split_leaf` on every box, in ``workers`` processes (:mod:`.workers`), in chunks
    of LEAF_CHUNK in box order; stops at the first box that does not close.

    Returns:
        one answer per box in box order: ("closed", LPs), ("candidate", x (n_inputs,)),
        ("open", reason); boxes not reached: ("open", "not reached").
    """
    items = [(ir, C, d, boxes[k:k + LEAF_CHUNK], time.time() + max(0.0, deadline - time.monotonic()))
             for k in range(0, len(boxes), LEAF_CHUNK)]
    got: dict = {}
    if workers > 1 and len(items) > 1:
        from mi_certify.verification.tools.workers import WorkersLost, WorkersTimedOut, exiting, map_in_processes
        try:
            got = dict(enumerate(map_in_processes(_leaf_task, items, workers,
                                                  deadline=deadline if math.isfinite(deadline) else None,
                                                  stop=lambda r: any(k != "closed" for k, _ in r))))
        except WorkersTimedOut as late:
            got = late.done
            got.update({k: [("open", "not reached")] for k in range(len(items)) if k not in got})
        except WorkersLost as lost:  # no worker processes here: the rest in this process
            if exiting():
                raise SystemExit(130) from None
            got = lost.done
    for k, item in enumerate(items):
        if k not in got:
            if any(kind != "closed" for r in got.values() for kind, _ in r):
                got[k] = [("open", "not reached")]
            else:
                got[k] = _leaf_task(item)
    out = []
    for k, item in enumerate(items):
        res = list(got[k])
        res += [("open", "not reached")] * (len(item[3]) - len(res))
        out += [(kind, np.array(what) if kind == "candidate" else what) for kind, what in res]
    return out
