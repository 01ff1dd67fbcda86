"""The triangle LP relaxation of one box, solved by HiGHS, as an oracle for CROWN's slopes.

Method: the network over a box with fixed pre-activation bounds ``[l, u]`` is relaxed to a
linear program (Ehlers, "Formal Verification of Piece-Wise Linear Feed-Forward Neural
Networks" (Planet), ATVA 2017): every affine node is an equality, a stable ReLU is the
identity or zero, an unstable one is its convex hull ``h >= 0, h >= z,
h <= u (z - l) / (u - l)``. For the rows of an unsafe region ``C y <= d`` the LP

    t* = min t   s.t.  C y - d <= t (every row),  the relaxation,  lo <= x <= hi

is positive iff no point of the relaxation satisfies every row, and ``t* > 0`` proves
the box empty. With fixed intermediate bounds, the LP's dual is CROWN's backward pass
with the objective ``λᵀ(C y - d)`` and one lower slope ``α_j ∈ [0, 1]`` per unstable
ReLU (Salman et al., "A Convex Relaxation Barrier to Tight Robustness Verification of
Neural Networks", NeurIPS 2019, §4; the slopes are those α-CROWN optimises by gradient:
Xu et al., ICLR 2021): λ are the multipliers of the row constraints, α_j the share of
``h >= z`` in the multipliers of ReLU j's two lower constraints.

Nothing here is evidence. The LP is solved in floating point (HiGHS: Huangfu and Hall,
"Parallelizing the dual revised simplex method", Math. Prog. Comp. 2018, through
``scipy.optimize.linprog``); its answer only *chooses* λ and α. The bound that closes a
box is then computed by :func:`~.bounds.output_matrix_lower` with those slopes, in fixed
order with outward rounding: sound for any λ >= 0 and any α in [0, 1], whatever the LP
returned, and the same bits on every machine for the same λ and α.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from mi_certify.generator.core.ir import AffineNode, ControllerIR, InputNode, ReluNode

from mi_certify.verification.nn.bounds import NodeBounds

#: Multiplier sums below this leave a ReLU's slope at CROWN's adaptive choice (the LP does
#: not care about it).
_TINY = 1e-12


def affine_equalities(ir: ControllerIR, off: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Every affine node as equality rows ``Σ_src W x_src - y = -bias`` over variables laid
    out by node (node i's values start at ``off[i]``). Returns (row, column, value) triplets,
    the right-hand sides and the number of rows."""
    rows, cols, vals, rhs = [], [], [], []
    r = 0
    for nid, node in enumerate(ir.nodes):
        if not isinstance(node, AffineNode):
            continue
        o = off[nid]
        eye = np.arange(node.size)
        rows.append(r + eye), cols.append(o + eye), vals.append(-np.ones(node.size))
        for src, w in node.terms:
            i, j = np.nonzero(w)
            rows.append(r + i), cols.append(off[src] + j), vals.append(w[i, j])
        rhs.append(-node.bias)
        r += node.size
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), np.concatenate(rhs), r


def node_offsets(ir: ControllerIR) -> tuple[np.ndarray, int]:
    """The LP layout of every node's values in node order, then ``t``: (first variable of each node
    (n_nodes + 1,), the number of variables)."""
    off = np.cumsum([0] + [node.size for node in ir.nodes])
    return off, int(off[-1]) + 1


def region_rows(ir: ControllerIR, C: np.ndarray, off: np.ndarray, nv: int):
    """The rows ``C y - t`` over that layout (``t`` the last variable) as (row, column, value)
    triplets, rows from 0, and the output nodes' variables (n_outputs,)."""
    out = np.concatenate([off[o] + np.arange(ir.nodes[o].size) for o in ir.outputs])
    m = C.shape[0]
    i, j = np.nonzero(C)
    return (np.concatenate([i, np.arange(m)]), np.concatenate([out[j], np.full(m, nv - 1)]),
            np.concatenate([C[i, j], -np.ones(m)])), out


class TriangleLP:
    """The LP relaxation of ``ir`` for the rows ``C y <= d`` (C (m, n_outputs), d (m,)).

    The affine equalities are built once; :meth:`hint` adds the ReLU part of one box.
    Variables: every node's values in node order, then ``t``.
    """

    def __init__(self, ir: ControllerIR, C: np.ndarray, d: np.ndarray):
        self.ir = ir
        self.C = np.asarray(C, dtype=np.float64)
        self.d = np.asarray(d, dtype=np.float64)
        self.off, self.nv = node_offsets(ir)
        self._affine = affine_equalities(ir, self.off)
        self._rows, _ = region_rows(ir, self.C, self.off, self.nv)

    def hint(self, lo: np.ndarray, hi: np.ndarray, bounds: NodeBounds,
             time_limit: float = 1.0) -> tuple[float, np.ndarray, dict[int, np.ndarray]] | None:
        """Solve the LP of one box and read CROWN's multipliers off its dual.

        Args:
            lo, hi: (n_inputs,) box.
            bounds: the box's node bounds (``lower[i]``, ``upper[i]`` of shape (size_i,)), the
                same the sound pass will use.
            time_limit: seconds HiGHS may take.
        Returns:
            (LP value t* (float, not evidence), λ (m,) >= 0 summing to 1, slopes {ReLU node
            id: (size,) α in [0, 1]}), or None when HiGHS gives no optimum.
        """
        ir = self.ir
        er, ec, ev, erhs, n_eq = self._affine
        lb = np.full(self.nv, -np.inf)
        ub = np.full(self.nv, np.inf)
        lb[:ir.n_inputs], ub[:ir.n_inputs] = lo, hi
        e_rows, e_cols, e_vals, e_rhs = [er], [ec], [ev], [erhs]
        u_rows, u_cols, u_vals, u_rhs = [], [], [], []
        n_ub = 0
        lower_rows = {}
        for nid, node in enumerate(ir.nodes):
            if not isinstance(node, ReluNode):
                continue
            o, s = self.off[nid], self.off[node.src]
            l, u = bounds.lower[node.src], bounds.upper[node.src]
            active, inactive = l >= 0, u <= 0
            unstable = ~active & ~inactive
            a = np.nonzero(active)[0]  # h = z
            e_rows += [n_eq + np.arange(a.size)] * 2
            e_cols += [o + a, s + a]
            e_vals += [np.ones(a.size), -np.ones(a.size)]
            e_rhs.append(np.zeros(a.size))
            n_eq += a.size
            z = np.nonzero(inactive)[0]
            lb[o + z] = ub[o + z] = 0.0
            k = np.nonzero(unstable)[0]
            lb[o + k] = 0.0
            slope = u[k] / (u[k] - l[k])
            first = n_ub + np.arange(k.size)  # z - h <= 0
            second = first + k.size            # h - slope z <= -slope l
            u_rows += [first, first, second, second]
            u_cols += [s + k, o + k, o + k, s + k]
            u_vals += [np.ones(k.size), -np.ones(k.size), np.ones(k.size), -slope]
            u_rhs += [np.zeros(k.size), -slope * l[k]]
            lower_rows[nid] = (k, first)
            n_ub += 2 * k.size
        rr, rc, rv = self._rows
        u_rows.append(n_ub + rr), u_cols.append(rc), u_vals.append(rv), u_rhs.append(self.d)
        first_row = n_ub
        n_ub += self.C.shape[0]
        A_ub = sp.csr_matrix((np.concatenate(u_vals), (np.concatenate(u_rows), np.concatenate(u_cols))),
                             shape=(n_ub, self.nv))
        A_eq = sp.csr_matrix((np.concatenate(e_vals), (np.concatenate(e_rows), np.concatenate(e_cols))),
                             shape=(n_eq, self.nv))
        c = np.zeros(self.nv)
        c[-1] = 1.0
        # imported here: scipy.optimize takes ~0.2 s to import, and every leaf worker process imports this
        # module (for node_offsets and region_rows) without ever calling linprog (issue 38, 2026-12-08)
        from scipy.optimize import linprog
        try:
            res = linprog(c, A_ub=A_ub, b_ub=np.concatenate(u_rhs), A_eq=A_eq, b_eq=np.concatenate(e_rhs),
                          bounds=np.stack([lb, ub], axis=1), method="highs",
                          options={"time_limit": max(0.01, float(time_limit)), "presolve": True})
        except ValueError:
            return None
        if res.status != 0 or res.ineqlin is None:
            return None
        mu = -np.asarray(res.ineqlin.marginals)
        lam = np.maximum(mu[first_row:], 0.0)
        if not lam.sum() > 0:
            return None
        lam = lam / lam.sum()
        low_m = np.maximum(np.asarray(res.lower.marginals), 0.0)
        slopes = {}
        for nid, node in enumerate(ir.nodes):
            if not isinstance(node, ReluNode):
                continue
            l, u = bounds.lower[node.src], bounds.upper[node.src]
            alpha = (u > -l).astype(np.float64)  # CROWN's adaptive choice where the LP is indifferent
            k, first = lower_rows[nid]
            a = np.maximum(mu[first], 0.0)
            b = low_m[self.off[nid] + k]
            tot = a + b
            alpha[k] = np.where(tot > _TINY, a / np.where(tot > _TINY, tot, 1.0), alpha[k])
            slopes[nid] = np.clip(alpha, 0.0, 1.0)
        return float(res.fun), lam, slopes


def is_lp_ready(ir: ControllerIR) -> bool:
    """True when every node is an input, affine or ReLU node (what :class:`TriangleLP` encodes)."""
    return all(isinstance(n, (InputNode, AffineNode, ReluNode)) for n in ir.nodes)
