"""Exact leaves: branch and bound on ReLU phases with the triangle LP, for the boxes input
splitting leaves open.

Method (Ehlers, "Formal Verification of Piece-Wise Linear Feed-Forward Neural Networks"
(Planet), ATVA 2017; the ReLU-split search of nnenum: Bak et al., CAV 2020, and of
BaBSR: Bunel et al., JMLR 2020): over one input box, the network is relaxed to the
triangle LP (every affine node an equality, every unstable ReLU its convex hull) and

    t* = min t   s.t.  C y - d <= t (every row),  the relaxation,  lo <= x <= hi

is bounded below. ``t* > 0`` proves that no point of the box lies in the region. The LP of a
box (:class:`BoxLP`) has as variables only the inputs and the neurons the box's root bounds leave
unstable: the other neurons are stable over the box, so every node is an affine function of those
variables, composed with a bound on its float64 rounding that widens each row (on ACAS Xu about 130
rows where the whole network's LP, :class:`SplitLP`, has 916; the leaves' LPs 7.3 → ~1 ms each). A box
the LP leaves open is split on one unstable ReLU ``z_j``: ``z_j >= 0`` (then ``h_j = z_j``)
and ``z_j <= 0`` (then ``h_j = 0``); the two subdomains cover the box, and each phase
constraint enters its LP exactly. After a split the node bounds of both subdomains are
computed again by CROWN, in one batched pass, starting from the parent's bounds (sound on
each subdomain, which lies in the parent; no forward bounds) with the phase constraint
applied to ``z_j``'s bounds (:func:`~.bounds.crown_bounds` ``init`` and ``phases``; the nodes
before ``z_j``'s keep the parent's bounds, ``keep``) and intersected with the parent's. A
subdomain whose CROWN output bound already puts some row above its limit everywhere (or whose
bounds cross) is closed without an LP: on ACAS Xu 4_1 / property 3's first 60 leaves, 420 → 349 LPs and 9.2–10.5 → 6.6–6.7 s in one process
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

import hashlib
import math
import pickle
import time

import numpy as np
import scipy.sparse as sp

from mi_certify.generator.core.ir import AffineNode, ControllerIR, InputNode, ReluNode, prepared_terms, weight_memo
from mi_certify.generator.core.numerics import check_gradual_underflow, matmul

from mi_certify.verification.nn.bounds import (UNDERFLOW_ERROR, BoundsTimeout, NodeBounds, crown_bounds,
                                               output_matrix_lower)
from mi_certify.verification.nn.lp_relax import affine_equalities, node_offsets, region_rows

__all__ = ["LeafStream", "SplitLP", "close_leaves", "ends_leaves", "network_key", "split_leaf"]

#: Relative padding of every rounded sum (the float64 error of a sum of k terms is below
#: k · 1.2e-16 of the sum of their absolute values; 1e-9 covers k up to ~8 million).
_PAD = 1e-9
#: LPs one leaf may solve before it is given up (left open).
MAX_LPS = 5000
#: Leaves handed to a worker process at a time.
LEAF_CHUNK = 32


def _highs():
    """A HiGHS instance for one LP at a time: quiet, one thread, presolve on (used on cold starts)."""
    import highspy

    # the compiled class the public highspy.Highs derives from: Highs() turns on its
    # Python callbacks, which print HiGHS's banner on stdout before any option can be set
    h = highspy._core._Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("presolve", "on")
    h.setOptionValue("threads", 1)
    return h


def _pass_model(h, A: sp.csc_matrix, rl: np.ndarray, ru: np.ndarray, cost: np.ndarray) -> bool:
    """Load the LP ``min cost·v  s.t.  rl <= A v <= ru`` (variable bounds set per solve) into ``h``;
    False when HiGHS refuses it (e.g. a coefficient above its ``large_matrix_value``, 1e15)."""
    import highspy

    nv = A.shape[1]
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = nv, A.shape[0]
    lp.col_cost_ = cost
    lp.col_lower_, lp.col_upper_ = np.full(nv, -1e30), np.full(nv, 1e30)
    lp.row_lower_ = np.where(np.isfinite(rl), rl, -highspy.kHighsInf)
    lp.row_upper_ = np.where(np.isfinite(ru), ru, highspy.kHighsInf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr
    lp.a_matrix_.index_ = A.indices
    lp.a_matrix_.value_ = A.data
    return h.passModel(lp) != highspy.HighsStatus.kError


def _hull(l: np.ndarray, u: np.ndarray, ph: np.ndarray | None):
    """One ReLU block's pre-activation bounds with its phases applied (+1: z >= 0, -1: z <= 0) and its
    upper line ``h <= s z + b`` (the hull's when unstable, moved up by its rounding; ``h <= z`` when
    active, ``h <= 0`` when inactive). Returns (l, u, s, b), or None when the bounds cross (no point)."""
    if ph is not None:
        l = np.where(ph > 0, np.maximum(l, 0.0), l)
        u = np.where(ph < 0, np.minimum(u, 0.0), u)
    if np.any(l > u):
        return None
    unstable = (l < 0) & (u > 0)
    den = np.where(unstable, u - l, 1.0)
    s = np.where(unstable, u / den, np.where(l >= 0, 1.0, 0.0))
    b = np.where(unstable, -s * l, 0.0)
    # (plus a few units of 2^-1074: with subnormal l and u the relative part rounds to nothing)
    b = np.where(unstable, b + 4 * _PAD * (np.abs(l) + np.abs(u)) + 4 * UNDERFLOW_ERROR, b)
    return l, u, s, b


class _TriangleLP:
    """What :class:`SplitLP` and :class:`BoxLP` share: one HiGHS instance holding ``rl <= A v <= ru``
    (A (n_rows, nv) CSC) with the objective ``t`` (the last variable), the solve, the safe bound and
    the split choice. A subclass sets ``ir, C, d, nv``, loads its LP with :meth:`_load` and implements
    :meth:`_set` (setting the upper lines with :meth:`_upper_lines`) and :meth:`_blocks`."""

    basis = root_basis = None

    def _load(self, A: sp.csc_matrix, rl: np.ndarray, ru: np.ndarray, h) -> bool:
        """Hold ``rl <= A v <= ru`` with the objective ``t`` and load it into ``h``; False when HiGHS
        refuses it (:func:`_pass_model`)."""
        A.sort_indices()
        self.A, self.rl, self.ru, self.h = A, rl, ru, h
        self.cost = np.zeros(A.shape[1])
        self.cost[-1] = 1.0
        # the column of each stored entry: Aᵀ y as one bincount in the safe bound (the structure is fixed)
        self._cols = np.repeat(np.arange(A.shape[1]), np.diff(A.indptr))
        return _pass_model(h, A, rl, ru, self.cost)

    def _upper_lines(self, rows: np.ndarray, cols: np.ndarray, pos: np.ndarray, s: np.ndarray, b: np.ndarray):
        """Set the upper lines ``h - s z <= b`` of rows ``rows`` (z in columns ``cols``, its coefficient at
        ``pos`` in A's data), here and in HiGHS (only the coefficients that change)."""
        for i in np.nonzero(self.A.data[pos] != -s)[0]:
            self.h.changeCoeff(int(rows[i]), int(cols[i]), float(-s[i]))
        self.A.data[pos] = -s
        self.ru[rows] = b
        if rows.size:
            self.h.changeRowsBounds(rows.size, rows.astype(np.int32), np.full(rows.size, -np.inf), b)

    def _t_bounds(self, yl: np.ndarray, yu: np.ndarray) -> tuple[float, float]:
        """Bounds of ``t`` from the outputs' bounds: at least every row's interval lower bound (t >=
        each row), at most any value >= 0 above the rows' interval upper bound (every point of the
        region keeps t <= 0)."""
        Cp, Cn = np.maximum(self.C, 0.0), np.minimum(self.C, 0.0)
        row_lo = Cp @ yl + Cn @ yu - self.d
        row_hi = Cp @ yu + Cn @ yl - self.d
        # relative rounding, and 2^-1074 per product that may underflow (a helper's attack: 20 products of
        # 0.55 units each rounded up put t's lower bound above the rows' minimum, and a leaf full of points
        # of the region was closed)
        pad = _PAD * (np.abs(self.C) @ np.maximum(np.abs(yl), np.abs(yu)) + np.abs(self.d)) \
            + UNDERFLOW_ERROR * (2 * self.C.shape[1] + 2)
        return float(np.max(row_lo - pad)), max(0.0, float(np.max(row_hi + pad))) + 1.0

    def solve(self, lo: np.ndarray, hi: np.ndarray, nb: NodeBounds, phases: dict[int, np.ndarray],
              time_limit: float = 1.0, basis=None):
        """Bound one subdomain (box ``lo, hi`` (n_inputs,), node bounds ``nb`` of (size_i,)
        arrays, ``phases`` {ReLU node id: (size,) int8, +1 active, -1 inactive, 0 free}).

        Returns:
            (safe lower bound of t* (float; -inf when HiGHS gives no optimum; +inf when the
            phases contradict the bounds), LP input point (n_inputs,) or None,
            split candidate (ReLU node id, neuron) or None when no neuron is unstable).
        """
        import highspy

        check_gradual_underflow()   # (the safe bound's underflow term assumes it)
        self.basis = None
        got = self._set(lo, hi, nb, phases)
        if got is None:
            return math.inf, None, None
        lb, ub = got
        h = self.h
        h.changeColsBounds(self.nv, np.arange(self.nv, dtype=np.int32), lb, ub)
        if basis is None:  # a new box: from scratch, with presolve (stable ReLUs drop out)
            h.clearSolver()
        else:  # a subdomain: from its parent's optimal basis (dual simplex after a bound change)
            h.setBasis(basis)
        # HiGHS's time limit counts the instance's whole run time: extend it by this LP's share
        h.setOptionValue("time_limit", h.getRunTime() + max(0.01, float(time_limit)))
        h.run()
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            # a Farkas ray proves the subdomain empty: the Lagrangian bound of the zero
            # objective is positive (checked with the same outward rounding, either sign)
            _, has_ray, ray = h.getDualRay()
            if has_ray:
                ray = np.asarray(ray, dtype=np.float64)
                if max(self._safe_bound(ray, lb, ub, cost=0.0), self._safe_bound(-ray, lb, ub, cost=0.0)) > 0:
                    return math.inf, None, None
            return -math.inf, None, self._candidate(None)
        if status != highspy.HighsModelStatus.kOptimal:
            return -math.inf, None, self._candidate(None)
        sol = h.getSolution()
        self.basis = h.getBasis()
        y = np.asarray(sol.row_dual, dtype=np.float64)
        x = np.asarray(sol.col_value, dtype=np.float64)[:self.ir.n_inputs]
        return self._safe_bound(y, lb, ub), x, self._candidate(y)

    def _safe_bound(self, y: np.ndarray, lb: np.ndarray, ub: np.ndarray, cost: float = 1.0) -> float:
        """The Lagrangian bound of multipliers ``y`` over the variable bounds, rounded outward
        (of the objective ``t`` scaled by ``cost``: 0 for a Farkas certificate)."""
        rl, ru = self.rl, self.ru
        c = self.cost * cost
        y = np.where((y > 0) & ~np.isfinite(rl), 0.0, y)   # a <= row takes y <= 0
        y = np.where((y < 0) & ~np.isfinite(ru), 0.0, y)
        A, col = self.A, self._cols
        yi = y[A.indices]
        r = c - np.bincount(col, weights=A.data * yi, minlength=A.shape[1])
        e = _PAD * (np.abs(c) + np.bincount(col, weights=np.abs(A.data) * np.abs(yi), minlength=A.shape[1])) + 1e-300
        cand = np.stack([(r - e) * lb, (r - e) * ub, (r + e) * lb, (r + e) * ub])
        col_terms = np.min(cand, axis=0)
        with np.errstate(invalid="ignore"):  # 0 · inf where a row has no lower side
            row_terms = np.where(y < 0, y * ru, np.where(y > 0, y * rl, 0.0))
        if not (np.all(np.isfinite(col_terms)) and np.all(np.isfinite(row_terms))):
            return -math.inf
        total = math.fsum(col_terms) + math.fsum(row_terms)
        # (each term a product that may underflow: up to 2^-1074 absolutely, bounds.UNDERFLOW_ERROR)
        pad = _PAD * (math.fsum(np.abs(col_terms)) + math.fsum(np.abs(row_terms))) \
            + UNDERFLOW_ERROR * (col_terms.size + row_terms.size)
        return total - pad

    def _candidate(self, y: np.ndarray | None):
        """The unstable neuron whose triangle intercept carries the most dual weight (by
        the hull's area when the duals give none); None when no neuron is unstable. Ties go
        to the earlier neuron."""
        by_score, by_area = (None, 0.0), (None, -1.0)
        for nid, neurons, l, u, upper_rows in self._blocks():
            unstable = (l < 0) & (u > 0)
            if not unstable.any():
                continue
            if y is not None:
                score = np.where(unstable, -np.minimum(y[upper_rows], 0.0) * self.ru[upper_rows], 0.0)
                k = int(np.argmax(score))
                if score[k] > by_score[1]:
                    by_score = ((nid, int(neurons[k])), float(score[k]))
            area = np.where(unstable, -l * u / np.where(unstable, u - l, 1.0), -1.0)
            k = int(np.argmax(area))
            if area[k] > by_area[1]:
                by_area = ((nid, int(neurons[k])), float(area[k]))
        return by_score[0] if by_score[0] is not None else by_area[0]


class SplitLP(_TriangleLP):
    """The triangle LP of ``ir`` for the rows ``C y <= d`` (C (m, n_outputs), d (m,)), kept in
    one HiGHS instance whose bounds and triangle coefficients change from box to box.

    Variables: every node's values in node order, then ``t``. Rows: the affine equalities,
    per ReLU ``z - h <= 0`` and ``h - s z <= b`` (``s, b`` set per subdomain: the hull's
    upper line when unstable, ``h <= z`` when active, ``h <= 0`` when inactive), then
    ``C y - t <= d``. The leaves use it for a box whose :class:`BoxLP` would be too large.
    """

    def __init__(self, ir: ControllerIR, C: np.ndarray, d: np.ndarray):
        self.ir = ir
        self.C = np.asarray(C, dtype=np.float64)
        self.d = np.asarray(d, dtype=np.float64)
        self.off, self.nv = node_offsets(ir)
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
        (rr, rc, rv), self.out_cols = region_rows(ir, self.C, self.off, self.nv)
        m = self.C.shape[0]
        rows, cols, vals = rows + [r + rr], cols + [rc], vals + [rv]
        rl.append(np.full(m, -np.inf)), ru.append(self.d)
        self.n_rows = r + m
        A = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                          shape=(self.n_rows, self.nv))
        self._load(A, np.concatenate(rl), np.concatenate(ru), _highs())
        # positions of the s coefficients (column z, row h - s z <= b) in A's data
        self._s_pos = {}
        for nid, src, first, second in self.relus:
            pos = np.empty(second.size, dtype=np.int64)
            for k, (row, col) in enumerate(zip(second, self.off[src] + np.arange(second.size))):
                lo_, hi_ = A.indptr[col], A.indptr[col + 1]
                pos[k] = lo_ + int(np.nonzero(A.indices[lo_:hi_] == row)[0][0])
            self._s_pos[nid] = pos
        self._box_h = None

    def box_highs(self):
        """The HiGHS instance the :class:`BoxLP` of each box is loaded into (one, kept with this LP)."""
        if self._box_h is None:
            self._box_h = _highs()
        return self._box_h

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
        for nid, src, first, second in self.relus:
            o, zs = self.off[nid], self.off[src]
            size = second.size
            got = _hull(lb[zs:zs + size], ub[zs:zs + size], phases.get(nid))
            if got is None:
                return None
            l, u, s, b = got
            lb[zs:zs + size], ub[zs:zs + size] = l, u
            lb[o:o + size], ub[o:o + size] = np.maximum(l, 0.0), np.maximum(u, 0.0)
            self._upper_lines(second, zs + np.arange(size), self._s_pos[nid], s, b)
        lb[-1], ub[-1] = self._t_bounds(lb[self.out_cols], ub[self.out_cols])
        self._lb, self._ub = lb, ub
        return lb, ub

    def _blocks(self):
        for nid, src, first, second in self.relus:
            zs = self.off[src]
            yield nid, np.arange(second.size), self._lb[zs:zs + second.size], self._ub[zs:zs + second.size], second


#: Largest :class:`BoxLP`: node values × LP variables in its forms (8 bytes each); a box whose
#: LP would be larger is solved by :class:`SplitLP`, whose rows are the network's own weights.
BOX_LP_MAX_ENTRIES = 2_000_000


class BoxLP(_TriangleLP):
    """The triangle LP of one input box over the neurons its root bounds leave unstable: the LP
    :class:`SplitLP` solves, with the stable neurons substituted out.

    Over the box a stable ReLU is the identity or zero, so every node's value is an affine
    function of the LP's variables ``v``: the inputs ``x`` and, per neuron unstable at the root,
    its pre-activation ``z`` and its output ``h``. A node's *form* ``(A, c, e)`` (A (size, nv), c and
    e (size,)) holds ``|value - (A v + c)| <= e`` at every point of the box, where ``e`` bounds the
    rounding of composing the weights in float64: a sum of k products errs by at most ``_PAD`` of
    the sum of their magnitudes (``_PAD`` = 1e-9 covers k up to ~8 million; Higham, *Accuracy and
    Stability of Numerical Algorithms*, §3.1) plus 1e-300 per product for underflow, and each
    variable is bounded by its largest magnitude over the box. Rows: per unstable neuron
    ``c - e <= z - A v <= c + e`` (its pre-activation's form), ``z - h <= 0`` and the hull's upper
    line ``h - s z <= b`` (``s, b`` per subdomain, as in :class:`SplitLP`); per region row ``(C A_out) v - t <= d - C c_out + |C| e_out``
    (rounded outward). The network's values satisfy every row, so a positive safe bound
    (:meth:`_TriangleLP._safe_bound`) proves the subdomain empty as :class:`SplitLP`'s does.

    Layout: variables ``x``, every ``z``, every ``h`` (unstable neurons in node order), ``t``; rows: the
    ``z`` definitions, the ``z - h`` rows, the upper lines, the region's rows. The variables are
    fixed for the box: its subdomains (ReLU splits, tighter bounds) change only variable bounds and
    the upper lines' ``s, b``, so each starts from its parent's optimal basis. On ACAS Xu leaves a
    box has 16-54 unstable neurons of 300: about 130 rows where :class:`SplitLP` has 916.

    ``ok`` is False (and the LP not usable) when the forms would exceed :data:`BOX_LP_MAX_ENTRIES`, are
    not finite or make coefficients HiGHS refuses (above 1e15), or a node bound is NaN.
    """

    def __init__(self, ir: ControllerIR, C: np.ndarray, d: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 nb: NodeBounds, h=None):
        self.ir, self.C, self.d = ir, np.asarray(C, dtype=np.float64), np.asarray(d, dtype=np.float64)
        n_in = ir.n_inputs
        if any(np.isnan(v).any() for v in nb.lower + nb.upper):   # no sign known: not stable, not unstable
            self.ok = False
            return
        # the unstable neurons, per ReLU node: (ReLU node id, its source node id, neuron indices, offset)
        self.blocks, n_u = [], 0
        for nid, node in enumerate(ir.nodes):
            if isinstance(node, ReluNode):
                k = np.nonzero((nb.lower[node.src] < 0) & (nb.upper[node.src] > 0))[0]
                self.blocks.append((nid, node.src, k, n_u))
                n_u += k.size
        self.n_u = n_u
        nv = n_in + 2 * n_u
        self.nv = nv + 1
        self.ok = sum(node.size for node in ir.nodes) * self.nv <= BOX_LP_MAX_ENTRIES
        if not self.ok:
            return
        l_u = self._gather(nb.lower)
        u_u = self._gather(nb.upper)
        vmax = np.concatenate([np.maximum(np.abs(lo), np.abs(hi)), np.maximum(np.abs(l_u), np.abs(u_u)),
                               np.maximum(u_u, 0.0)])
        forms = self._forms(nb.lower, vmax, nv)
        U = np.arange(n_u)
        zc, hc = n_in + U, n_in + n_u + U
        A_z = np.concatenate([forms[src][0][k] for _, src, k, _ in self.blocks]) if n_u else np.zeros((0, nv))
        c_z, e_z = (np.concatenate([forms[src][i][k] for _, src, k, _ in self.blocks]) if n_u else np.zeros(0)
                    for i in (1, 2))
        e_z = e_z * (1 + _PAD) + _PAD * np.abs(c_z) + 1e-300
        zdef = -A_z
        zdef[U, zc] += 1.0                   # z - A v (no z's form reads its own z)
        low = np.zeros((n_u, nv))
        low[U, zc], low[U, hc] = 1.0, -1.0
        up = np.zeros((n_u, nv))
        up[U, hc], up[U, zc] = 1.0, -1.0     # -s: set per subdomain
        out = [forms[o] for o in ir.outputs]
        A_o, c_o, e_o = (np.concatenate([f[i] for f in out]) for i in range(3))
        G = matmul(self.C, A_o)
        g = matmul(self.C, c_o) - self.d
        reach = matmul(np.abs(A_o), vmax)
        E = (matmul(np.abs(self.C), e_o + _PAD * (e_o + reach + np.abs(c_o))) + _PAD * np.abs(self.d)
             + 1e-300 * (1 + A_o.shape[0]) * (1.0 + float(np.sum(vmax))))
        m = G.shape[0]
        M = np.zeros((3 * n_u + m, self.nv))
        M[:, :nv] = np.concatenate([zdef, low, up, G])
        M[3 * n_u:, -1] = -1.0
        self.rl = np.concatenate([c_z - e_z, np.full(2 * n_u + m, -np.inf)])
        self.ru = np.concatenate([c_z + e_z, np.zeros(2 * n_u), -g + E * (1 + _PAD) + _PAD * np.abs(g) + 1e-300])
        if not (np.isfinite(M).all() and np.isfinite(self.ru).all() and np.isfinite(self.rl[:n_u]).all()):
            self.ok = False
            return
        self.upper_rows = 2 * n_u + U
        self.n_rows = M.shape[0]
        # a model HiGHS refuses (a composed coefficient above 1e15) goes to the whole network's LP
        self.ok = self._load(sp.csc_matrix(M), self.rl, self.ru, h or _highs())
        # the upper lines' z coefficients (-s) in A's data: column zc[i] holds rows i, n_u + i, 2 n_u + i
        # (the region's rows have no z), so the third entry of the column
        self._s_pos = self.A.indptr[zc] + 2
        assert np.array_equal(self.A.indices[self._s_pos], self.upper_rows)

    def _gather(self, per_node: list) -> np.ndarray:
        """The unstable neurons' entries of per-node arrays (their source nodes'), in variable order."""
        return np.concatenate([per_node[src][k] for _, src, k, _ in self.blocks]) if self.n_u else np.zeros(0)

    def _forms(self, root_lower: list, vmax: np.ndarray, nv: int) -> list:
        """Every node's form ``(A (size, nv), c (size,), e (size,))`` over the variables (see the class)."""
        ir = self.ir
        n_in = ir.n_inputs
        forms: list = []
        h_of = {nid: (k, n_in + self.n_u + off) for nid, _, k, off in self.blocks}
        # a product below float64's normal range loses up to 2^-1074 absolutely (not covered by _PAD):
        # 1e-300 per term of a row's sums, times the variables' reach in A v
        tiny = 1e-300 * (1.0 + float(np.sum(vmax)))
        for nid, node in enumerate(ir.nodes):
            if isinstance(node, InputNode):
                A = np.zeros((n_in, nv))
                A[np.arange(n_in), np.arange(n_in)] = 1.0
                forms.append((A, np.zeros(n_in), np.zeros(n_in)))
            elif isinstance(node, ReluNode):
                As, cs, es = forms[node.src]
                active = root_lower[node.src] >= 0
                A = np.where(active[:, None], As, 0.0)
                c, e = np.where(active, cs, 0.0), np.where(active, es, 0.0)
                k, h0 = h_of[nid]
                A[k] = 0.0
                A[k, h0 + np.arange(k.size)] = 1.0
                c[k], e[k] = 0.0, 0.0
                forms.append((A, c, e))
            else:
                AT = np.zeros((nv, node.size))
                c = node.bias.copy()
                e = _PAD * np.abs(node.bias) + tiny * (1 + sum(w.shape[1] for _, w in node.terms))
                for (src, wT), (_, absT) in zip(prepared_terms(ir, nid, "wT"), prepared_terms(ir, nid, "absT")):
                    As, cs, es = forms[src]
                    AT += matmul(np.ascontiguousarray(As.T), wT)
                    c += matmul(cs, wT)
                    reach = matmul(np.abs(As), vmax)
                    e += matmul(es + _PAD * (es + reach + np.abs(cs)), absT)
                forms.append((np.ascontiguousarray(AT.T), c, e))
        return forms

    def _set(self, lo, hi, nb: NodeBounds, phases: dict[int, np.ndarray]):
        """Load one subdomain: variable bounds, the upper lines. Returns (lb, ub) or None when the
        bounds cross or a phase contradicts them (the subdomain is empty)."""
        if np.any(lo > hi) or any(np.any(a > b) for a, b in zip(nb.lower, nb.upper)):
            return None
        n_in, n_u = self.ir.n_inputs, self.n_u
        ph = [phases[nid][k] if nid in phases else np.zeros(k.size, dtype=np.int8) for nid, _, k, _ in self.blocks]
        got = _hull(self._gather(nb.lower), self._gather(nb.upper), np.concatenate(ph) if n_u else None)
        if got is None:
            return None
        l, u, s, b = got
        lb, ub = np.empty(self.nv), np.empty(self.nv)
        lb[:n_in], ub[:n_in] = lo, hi
        lb[n_in:n_in + n_u], ub[n_in:n_in + n_u] = l, u
        lb[n_in + n_u:-1], ub[n_in + n_u:-1] = np.maximum(l, 0.0), np.maximum(u, 0.0)
        self._upper_lines(self.upper_rows, n_in + np.arange(n_u), self._s_pos, s, b)
        self._lu = (l, u)
        yl = np.concatenate([nb.lower[o] for o in self.ir.outputs])
        yu = np.concatenate([nb.upper[o] for o in self.ir.outputs])
        lb[-1], ub[-1] = self._t_bounds(yl, yu)
        return lb, ub

    def _blocks(self):
        l, u = self._lu
        for nid, _, k, off in self.blocks:
            yield nid, k, l[off:off + k.size], u[off:off + k.size], self.upper_rows[off:off + k.size]


def split_leaf(ir: ControllerIR, C: np.ndarray, d: np.ndarray, lo: np.ndarray, hi: np.ndarray,
               deadline: float, lp: SplitLP | None = None, max_lps: int = MAX_LPS,
               warm_root: bool = True, nb: NodeBounds | None = None, give_back: bool = False) -> tuple[str, object]:
    """Decide one box by ReLU-split branch and bound with the triangle LP (depth first).

    Args:
        C, d: the region's rows ``C y <= d``; lo, hi: (n_inputs,) box.
        deadline: ``time.monotonic()`` value; max_lps: LPs before the box is given up.
        lp: the :class:`SplitLP` of these rows (kept between calls: it holds the warm start);
        warm_root: start the box's first LP from the previous box's first optimal basis
            (a neighbouring box when boxes come in the order input splitting made them; with
            :class:`SplitLP` only);
        nb: sound node bounds over the box ((size_i,) arrays; input splitting's), or None: CROWN's
            (:func:`~.bounds.crown_bounds`).
        give_back: when ``max_lps`` runs out, answer ("split", LPs) instead of ("open", ...): the
            caller (input splitting's LP probe) splits the box further.
    Returns:
        ("closed", number of LPs) when every subdomain's safe bound (or CROWN output bound) is positive;
        ("candidate", x (n_inputs,)) for a point the network must be evaluated at (an
        exact subdomain's LP optimum, or an LP point the IR puts in the region) — not yet a
        counterexample: the caller replays it; ("open", reason) otherwise.
    """
    if np.shape(C)[0] == 0 or np.all(np.asarray(d) == np.inf):   # no row that binds: the whole box
        return "candidate", (np.asarray(lo, dtype=np.float64) + np.asarray(hi, dtype=np.float64)) / 2
    lp = lp or SplitLP(ir, C, d)
    relu_src = {nid: ir.nodes[nid].src for nid, _, _, _ in lp.relus}
    try:
        root_nb = nb if nb is not None else crown_bounds(ir, lo, hi, deadline=deadline)
    except BoundsTimeout:
        return "open", "timeout"
    box = BoxLP(ir, C, d, lo, hi, root_nb, h=lp.box_highs())
    solver = box if box.ok else lp
    stack = [({}, root_nb, lp.root_basis if warm_root and solver is lp else None)]
    n_lp = 0
    while stack:
        left = deadline - time.monotonic()
        if left <= 0:
            return "open", "timeout"
        if n_lp >= max_lps:
            return ("split", n_lp) if give_back else ("open", f"{n_lp} LPs")
        phases, nb, basis = stack.pop()
        bound, x, cand = solver.solve(lo, hi, nb, phases, time_limit=min(1.0, left), basis=basis)
        if n_lp == 0 and solver is lp and lp.basis is not None:
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
            both = crown_bounds(ir, two_lo, two_hi, deadline=deadline, init=nb, keep=relu_src[nid],
                                phases=_source_phases(kids, relu_src))
            both = NodeBounds([np.maximum(a, p) for a, p in zip(both.lower, nb.lower)],
                              [np.minimum(a, p) for a, p in zip(both.upper, nb.upper)])
            low, _ = output_matrix_lower(ir, C, two_lo, two_hi, both, deadline=deadline)
        except BoundsTimeout:
            return "open", "timeout"
        for i, ph in enumerate(kids):
            if np.max(low[i] - d) > 0 or any(np.any(a[i] > b[i]) for a, b in zip(both.lower, both.upper)):
                continue   # closed by CROWN (or its bounds cross: no point), no LP
            stack.append((ph, NodeBounds([a[i] for a in both.lower], [b[i] for b in both.upper]), solver.basis))
    return "closed", n_lp


def _source_phases(kids: list, relu_src: dict) -> dict:
    """The two subdomains' phases per pre-activation node ((2, size) int8), as crown_bounds takes them.
    Two ReLU nodes reading one source both constrain it: where the first has no phase the second's
    applies (where they disagree, z = 0 in that subdomain and one clip of the two is kept: sound)."""
    out: dict = {}
    for a in kids[0]:
        ph = np.stack([kids[0][a], kids[1][a]])
        src = relu_src[a]
        out[src] = np.where(out[src] != 0, out[src], ph) if src in out else ph
    return out


_LPS: dict = {}  # the SplitLP of the network and rows last served here (one disjunct at a time)


def network_key(ir: ControllerIR) -> bytes:
    """A SHA-256 of the network (every node's kind, sources, sizes, weights and biases, and the outputs),
    memoized per IR: what :func:`_leaf_task`'s LP cache is keyed by beside the rows, computed once in the
    caller and sent with every chunk.

    Why: the cache was keyed by the rows ``C, d`` alone, so a second network with the same rows and layer
    sizes decided in the same process reused the first one's LP, and a leaf whose box LP was not usable
    (too large, a coefficient above 1e15) could be closed by the other network's relaxation (a helper's
    reproducer, 2026-12-07: PROVED on a network with a point of the region after another network's query)."""
    memo = weight_memo(ir)
    key = memo.get("network_key")
    if key is None:
        h = hashlib.sha256(repr(ir.outputs).encode())
        for node in ir.nodes:
            if isinstance(node, AffineNode):
                h.update(b"affine")
                for src, w in node.terms:
                    w = np.ascontiguousarray(w, dtype=np.float64)
                    h.update(repr((src, w.shape)).encode())
                    h.update(w.data)
                h.update(np.ascontiguousarray(node.bias, dtype=np.float64).data)
            else:   # InputNode, ReluNode (and any other kind: pickled whole, arrays included; its repr could
                h.update(pickle.dumps(node, protocol=5))   # abbreviate an array and hide a difference)
        key = memo["network_key"] = h.digest()
    return key


def ends_leaves(kind: str) -> bool:
    """Whether an answer of :func:`split_leaf` ends the leaf phase (the query is not proved by the leaves):
    "candidate" and "open"; not "closed" nor "split" (an LP probe gives its box back to input splitting)."""
    return kind not in ("closed", "split")


def _leaf_task(item) -> list:
    """Worker body: ``(ir, C, d, [(lo, hi, node bounds or None, LP budget or None), ...], wall-clock
    deadline, network_key(ir))`` -> one :func:`split_leaf` answer per box (the second element of "closed"
    is the LP count); a box with a budget is an LP probe (:func:`split_leaf` ``give_back``)."""
    ir, C, d, boxes, wall_deadline, net = item
    key = (net, C.tobytes(), d.tobytes())
    lp = _LPS.get(key)
    if lp is None:
        _LPS.clear()
        lp = _LPS[key] = SplitLP(ir, C, d)
    deadline = time.monotonic() + (wall_deadline - time.time())
    out = []
    for lo, hi, nb, budget in boxes:
        kind, what = split_leaf(ir, C, d, lo, hi, deadline, lp, nb=nb, max_lps=MAX_LPS if budget is None else budget,
                                give_back=budget is not None)
        out.append((kind, what.tolist() if kind == "candidate" else what))
        if ends_leaves(kind):
            break  # the caller needs no more of this chunk: the query is not proved by it
    return out


def close_leaves(ir: ControllerIR, C: np.ndarray, d: np.ndarray, boxes: list, deadline: float,
                 workers: int = 2, bounds: list | None = None, budgets: list | None = None) -> list:
    """:func:`split_leaf` on every box, in ``workers`` processes (:mod:`.workers`), in chunks
    of LEAF_CHUNK in box order; stops at the first box that does not close (:func:`ends_leaves`).
    ``bounds``: per box its sound node bounds or None (then CROWN's), or None for all; ``budgets``:
    per box None (a leaf) or the LPs an LP probe may take, or None for all.

    Returns:
        one answer per box in box order: ("closed", LPs), ("candidate", x (n_inputs,)),
        ("open", reason), ("split", LPs) (a probe's budget ran out); boxes not reached: ("open", "not reached").
    """
    bounds = bounds if bounds is not None else [None] * len(boxes)
    budgets = budgets if budgets is not None else [None] * len(boxes)
    triples = [(lo, hi, nb, b) for (lo, hi), nb, b in zip(boxes, bounds, budgets)]
    net = network_key(ir)
    items = [(ir, C, d, triples[k:k + LEAF_CHUNK], time.time() + max(0.0, deadline - time.monotonic()), net)
             for k in range(0, len(boxes), LEAF_CHUNK)]
    got: dict = {}
    if workers > 1 and len(items) > 1:
        from mi_certify.verification.tools.workers import WorkersLost, WorkersTimedOut, exiting, map_in_processes
        try:
            got = dict(enumerate(map_in_processes(_leaf_task, items, workers,
                                                  deadline=deadline if math.isfinite(deadline) else None,
                                                  stop=lambda r: any(ends_leaves(k) for k, _ in r))))
        except WorkersTimedOut as late:
            got = late.done
            got.update({k: [("open", "not reached")] for k in range(len(items)) if k not in got})
        except WorkersLost as lost:  # no worker processes here: the rest in this process
            if exiting():
                raise SystemExit(130) from None
            got = lost.done
    for k, item in enumerate(items):
        if k not in got:
            if any(ends_leaves(kind) for r in got.values() for kind, _ in r):
                got[k] = [("open", "not reached")]
            else:
                got[k] = _leaf_task(item)
    out = []
    for k, item in enumerate(items):
        res = list(got[k])
        res += [("open", "not reached")] * (len(item[3]) - len(res))
        out += [(kind, np.array(what) if kind == "candidate" else what) for kind, what in res]
    return out


class LeafStream:
    """The exact-leaf phase, started while the caller goes on: input splitting files its leaves long before
    it ends (on ACAS Xu 3_3 / property 2 from 7.5 of its 12 s on). ``add`` collects them; every LEAF_CHUNK
    of them becomes one :func:`_leaf_task` item, and a thread hands the items, as they come, to ``workers``
    worker processes, started once with the first item
    (:func:`~mi_certify.verification.tools.workers.map_in_processes` with ``more``; the thread only waits on
    pipes). :meth:`finish` adds the last leaves and the caller's other boxes, waits for every item (bounded
    by ``deadline``) and returns one answer per box in the order added: what :func:`close_leaves` with the
    same workers returns for the same boxes (the same chunks, handed out in order; it stops at the first
    chunk with a leaf that does not close, and the chunks not done then are "not reached": which ones, as
    with close_leaves' workers, depends on the order the workers finish). :meth:`cancel` kills the workers.
    """

    def __init__(self, ir: ControllerIR, C: np.ndarray, d: np.ndarray, deadline: float, workers: int = 2):
        import threading

        self._ir, self._C, self._d, self._deadline, self._workers = ir, C, d, deadline, max(1, workers)
        self._wall = time.time() + max(0.0, deadline - time.monotonic())
        self._boxes: list = []      # (box, bounds) in the order added
        self._items: list = []      # one _leaf_task item per LEAF_CHUNK boxes (grows while the thread runs)
        self._results: dict = {}    # item index -> its answers
        self._thread = None
        self._open = True           # items may still come
        self._cancel = threading.Event()
        self._error: BaseException | None = None
        self._lost = False          # no worker process could run (WorkersLost): finish() decides the rest here

    def add(self, box: tuple, nb: NodeBounds | None, budget: int | None = None) -> None:
        """File one leaf ``(lo, hi)`` with its node bounds (or None); with ``budget``, an LP probe of at most
        that many LPs (answered "split" when they run out)."""
        self._boxes.append((box, nb, budget))
        if len(self._boxes) % LEAF_CHUNK == 0:
            self._chunk(len(self._boxes) - LEAF_CHUNK)

    def _chunk(self, start: int) -> None:
        part = self._boxes[start:start + LEAF_CHUNK]
        self._items.append((self._ir, self._C, self._d, [(lo, hi, b, n) for (lo, hi), b, n in part], self._wall,
                            network_key(self._ir)))
        if self._thread is None and not self._cancel.is_set():
            import threading
            self._thread = threading.Thread(target=self._run, name="mi-certify-leaf-stream", daemon=True)
            self._thread.start()

    def _more(self) -> bool:
        return self._open and not self._cancel.is_set()

    def _run(self) -> None:
        from mi_certify.verification.tools.workers import WorkersLost, WorkersTimedOut, map_in_processes

        def keep(k, _n, res):
            self._results[k] = res
        try:
            map_in_processes(_leaf_task, self._items, self._workers, on_result=keep,
                             deadline=self._deadline if math.isfinite(self._deadline) else None,
                             stop=lambda r: any(ends_leaves(kind) for kind, _ in r), cancel=self._cancel.is_set,
                             more=self._more)
        except WorkersTimedOut:   # timed out, stopped or cancelled: the chunks not done are "not reached"
            pass
        except WorkersLost:       # no worker process (or one died): finish() decides the rest in this process
            self._lost = True
        except BaseException as exc:  # noqa: BLE001 - a worker's exception or an interrupt: finish() raises it
            self._error = exc

    def cancel(self) -> None:
        """Stop: the workers are killed within 0.1 s."""
        self._open = False
        self._cancel.set()
        if self._thread is not None:
            self._thread.join()

    def finish(self, boxes: list = (), bounds: list | None = None) -> list:
        """The answers of every box added, then of ``boxes`` ((lo, hi) pairs, with ``bounds`` per box or None):
        ("closed", LPs), ("candidate", x) or ("open", reason), as :func:`close_leaves`. Raises what a worker
        raised."""
        for k, box in enumerate(boxes):
            self._boxes.append((box, None if bounds is None else bounds[k], None))
        if self._thread is None:   # no chunk was filed before: close_leaves itself (one chunk stays here)
            return close_leaves(self._ir, self._C, self._d, [b for b, _, _ in self._boxes], self._deadline,
                                workers=self._workers, bounds=[nb for _, nb, _ in self._boxes],
                                budgets=[n for _, _, n in self._boxes])
        done = len(self._items) * LEAF_CHUNK
        for start in range(done, len(self._boxes), LEAF_CHUNK):
            self._chunk(start)
        self._open = False
        if self._thread is not None:
            try:
                self._thread.join()
            except BaseException:   # (Ctrl-C while waiting: the thread stops its workers within 0.1 s)
                self._cancel.set()
                raise
        if self._error is not None:
            raise self._error
        out = []
        for k, item in enumerate(self._items):   # as close_leaves assembles its chunks' answers
            if k not in self._results and self._lost and time.monotonic() < self._deadline \
                    and not any(ends_leaves(kind) for r in self._results.values() for kind, _ in r):
                self._results[k] = _leaf_task(item)   # no worker process (WorkersLost): in this process
            res = [(kind, np.array(what) if kind == "candidate" else what) for kind, what in self._results.get(k, [])]
            out += res + [("open", "not reached")] * (len(item[3]) - len(res))
        return out
