"""Sound bound propagation over ControllerIR: interval arithmetic, then linear (CROWN) bounds.

Method: interval bound propagation, then backward linear relaxation of every ReLU
(CROWN: Zhang et al., "Efficient Neural Network Robustness Certification with General
Activation Functions", NeurIPS 2018; equivalently DeepPoly: Singh et al., POPL 2019),
with the adaptive lower relaxation (slope 1 when u > -l, else 0) and the chord as
upper relaxation. Intermediate (pre-ReLU) bounds are the tighter of interval and
CROWN bounds, node by node, so later layers see tight relaxations. The graph may be a
DAG (skip connections, fan-out): coefficients flow back along every term.

Floating point: everything is computed in float64 and every bound is then moved
outward by ``INFLATION * (M + 1e-300)``, where M is the sum of the absolute values of
all terms that contributed (tracked alongside, with the same operations on absolute
values). Accumulated float64 rounding of a sum of n products is at most
``n * 2**-53 * M`` (Higham, "Accuracy and Stability of Numerical Algorithms", §3.1);
with n ≤ 10^4 terms per row and ≤ 64 layers this is below 1e-10 * M, so the inflation
``INFLATION = 1e-9`` covers it with a factor of 10 to spare. The bounds are therefore
sound for the **real-valued** network whose weights are the float64 values in the IR.
The float32 evaluation of onnxruntime differs from it by rounding (checked to 1e-5 at
import); properties are proved about the real-valued network.

Underflow: a product or quotient whose exact value falls below float64's normal range (2^-1022)
errs by up to 2^-1075 absolutely, not relatively, and later weights and the input's magnitude
amplify that error where it sits in a coefficient (a row of Λ, a forward coefficient). Every
bound is therefore also moved outward by ``2 · 2^-1074 · P · Γ · V`` (:func:`_underflow_pad`):
P bounds the number of products and quotients behind one bound, Γ = ∏ over affine nodes of
(1 + Σ over its terms of max(‖W‖₁, ‖W‖∞)) bounds the factor by which the later steps of a pass
can multiply an error in a coefficient, and V bounds the value it finally meets (the box, a
bias, a ReLU's bounds); a backward pass from rows λ (output_matrix_lower's C) scales it by
max(1, ‖λ_r‖₁), since its coefficients scale with the rows (found by a helper's attack: a slope
u/(u − l) that underflows, under a row of -1e4, had moved a bound above the value). On trained
networks this is below 1e-280 and changes no decision; on weights like 1e300 and 5e-324 it makes
the bound as loose as the arithmetic warrants (or infinite). Gradual underflow is assumed of the
FPU and checked at every bound pass and LP
(:func:`~mi_certify.generator.core.numerics.check_gradual_underflow`: a library that sets the
flush-to-zero or denormals-are-zero flags raises an error instead of giving unsound bounds).

Every product and sum is computed in fixed order (:mod:`mi_certify.generator.core.numerics`,
no BLAS), so the bounds, and every decision taken on them, are the same bits on every
machine.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numba
import numpy as np

from mi_certify.generator.core.ir import AffineNode, ControllerIR, InputNode, ReluNode, prepared_terms, weight_memo
from mi_certify.generator.core.numerics import (Sparse, check_gradual_underflow, matmul, operand, pair_rows_product,
                                                rowdot, sum_last)
from mi_certify.verification.nn.chain_pass import chain_lower, chain_plan

#: Relative outward inflation of every computed bound (see module docstring).
INFLATION = 1e-9
#: (box, neuron) pairs bounded in one backward pass of :func:`crown_bounds`.
_INSTANCE_CHUNK = 16384
#: Neurons per pass at most when the backward pass is compacted (:func:`_instance_chunks`; tllverifybench
#: N = 40 4_3, one run each: 8 neurons 26.9 s, 16 28.6 s, 32 28.8-32.2 s, 64 and 128 unknown at 60 s).
_NEURON_GROUP = 8


class BoundsTimeout(TimeoutError):
    """A bound computation passed its ``deadline`` (``time.monotonic()``) between two backward
    passes; nothing it computed is used (the caller answers UNKNOWN)."""


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise BoundsTimeout("bound computation passed the deadline")


@dataclass
class NodeBounds:
    """Per-node bounds: ``lower[i]``, ``upper[i]`` are (size_i,) float64 arrays."""

    lower: list[np.ndarray]
    upper: list[np.ndarray]

    def unstable(self, ir: ControllerIR):
        """Number of ReLUs whose input bounds straddle zero (lower < 0 < upper): an int for (size_i,)
        arrays, per box (B,) int64 for batched (B, size_i) arrays."""
        n = 0
        for node in ir.nodes:
            if isinstance(node, ReluNode):
                n = n + np.count_nonzero((self.lower[node.src] < 0) & (self.upper[node.src] > 0), axis=-1)
        return int(n) if np.ndim(n) == 0 else n


def _inflate(value: np.ndarray, mag: np.ndarray, down: bool, tiny: np.ndarray | float = 0.0) -> np.ndarray:
    """``value`` moved outward by ``INFLATION · (mag + 1e-300)`` plus ``tiny`` (the underflow pad of
    :func:`_underflow_pad`, (B, 1) or a scalar); an infinite or NaN pad gives the weakest bound (∓inf)."""
    pad = INFLATION * (mag + 1e-300)
    moved = (value - pad) - tiny if down else (value + pad) + tiny  # (the chain kernel's order: _chain_passes)
    if np.all(np.isfinite(tiny)):
        return moved
    return np.where(np.isfinite(tiny), moved, -np.inf if down else np.inf)


#: The absolute error of one float64 product or quotient that underflows is at most half the
#: subnormal spacing 2^-1074 (round to nearest, IEEE 754-2019 §4.3 and §7.5); counted as a whole spacing.
UNDERFLOW_ERROR = 2.0 ** -1074


def _underflow_constants(ir: ControllerIR) -> tuple[float, float]:
    """(P, Γ) of :func:`_underflow_pad`, made once per IR.

    P = 8 · (n_inputs + 2) · (Σ nonzero weights + Σ node sizes): every product and quotient one bound's
    computation issues, in the forward pass (its coefficients are (n_inputs, size) per node, lower and
    upper, with magnitudes) and in a backward pass (one row of Λ and its magnitudes), with room.
    Γ = ∏ over affine nodes of (1 + Σ over terms of max(‖W‖₁, ‖W‖∞)), each norm the largest column or
    row sum of |W| (fixed-order sums, :func:`~mi_certify.generator.core.numerics.matmul`, then rounded up
    to a power of two): expanding the product gives a sum over all chains of terms, so it bounds the
    sum over paths of the products of weights' magnitudes between any two nodes of the DAG, forward or
    backward; a ReLU multiplies by a slope in [0, 1].
    """
    memo = weight_memo(ir)
    if "underflow" not in memo:
        count, gamma = 0.0, 1.0
        for nid, node in enumerate(ir.nodes):
            count += node.size
            if not isinstance(node, AffineNode):
                continue
            rho = 0.0
            for (_, aw), (_, awt) in zip(prepared_terms(ir, nid, "abs"), prepared_terms(ir, nid, "absT")):
                count += aw.values.size if isinstance(aw, Sparse) else float(np.count_nonzero(aw))
                cols = matmul(np.ones((1, aw.shape[0])), aw)    # Σ_i |w_ij|, (1, n_src)
                rows = matmul(np.ones((1, awt.shape[0])), awt)  # Σ_j |w_ij|, (1, size)
                rho += max(float(np.max(cols, initial=0.0)), float(np.max(rows, initial=0.0)))
            gamma *= 1.0 + rho
        if np.isfinite(gamma):   # the power of two at or above it (frexp is exact): no last-bit differences
            e = math.frexp(gamma)[1]
            gamma = math.ldexp(1.0, e) if e <= 1023 else math.inf   # (2^1024 is not a float)
        memo["underflow"] = (8.0 * (ir.n_inputs + 2) * count, gamma if not np.isnan(gamma) else np.inf)
    return memo["underflow"]


def _reach(a: np.ndarray) -> np.ndarray:
    """max |a| per row of a (B, n) array (at least 0), NaN counted as infinite (np.max propagates NaN)."""
    if a.shape[1] == 0:
        return np.zeros(a.shape[0])
    m = np.max(np.abs(a), axis=1)
    return np.where(np.isnan(m), np.inf, m)


def _underflow_pad(ir: ControllerIR, lo: np.ndarray, hi: np.ndarray, bounds: NodeBounds | None,
                   below: int, gather: np.ndarray | None = None) -> np.ndarray:
    """The absolute pad ``2 · UNDERFLOW_ERROR · P · Γ · V`` (B, 1) for bounds over the boxes lo/hi
    (B, n_inputs) that sums of underflowed products can miss (module docstring; P, Γ from
    :func:`_underflow_constants`), for unit rows (a backward pass from rows λ scales it by
    max(1, ‖λ_r‖₁)). V per box: the largest of 1, |lo|, |hi|, every |bias| and twice the magnitudes of
    the bounds of every ReLU's source in ``bounds`` (rows ``gather`` of it when given) for the ReLU nodes
    with ids below ``below`` (those a pass to node ``below`` meets): the values an erring coefficient can
    finally be multiplied by (the box, a bias, a relaxation's intercept −l·s, a slope's error times
    x − l). Infinite where any of these is (the bound is then ∓inf)."""
    count, gamma = _underflow_constants(ir)
    memo = weight_memo(ir)
    if "bias_reach" not in memo:
        memo["bias_reach"] = max([1.0] + [float(_reach(n.bias[None, :])[0]) for n in ir.nodes
                                          if isinstance(n, AffineNode)])
    v = np.maximum(np.maximum(_reach(lo), _reach(hi)), memo["bias_reach"])
    if bounds is not None:
        by_rows: dict[int, list] = {}   # the sides by row count (one row: shared by every box), then one max each
        for node in ir.nodes[:below]:
            if isinstance(node, ReluNode):
                for side in (bounds.lower[node.src], bounds.upper[node.src]):
                    side = np.atleast_2d(side)
                    if gather is not None and side.shape[0] > 1:
                        side = side[gather]
                    by_rows.setdefault(side.shape[0], []).append(side)
        for sides in by_rows.values():
            v = np.maximum(v, 2.0 * np.broadcast_to(_reach(np.concatenate(sides, axis=1)), v.shape))
    with np.errstate(over="ignore", invalid="ignore"):
        pad = (2.0 * UNDERFLOW_ERROR) * count * gamma * v
    return np.where(np.isnan(pad), np.inf, pad)[:, None]


def _batch(lo, hi) -> tuple[np.ndarray, np.ndarray, bool]:
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    single = lo.ndim == 1
    return np.atleast_2d(lo), np.atleast_2d(hi), single


def _unbatch(nb: NodeBounds, single: bool) -> NodeBounds:
    return NodeBounds([v[0] for v in nb.lower], [v[0] for v in nb.upper]) if single else nb


def interval_bounds(ir: ControllerIR, lo: np.ndarray, hi: np.ndarray) -> NodeBounds:
    """Interval bounds of every node over the box [lo, hi].

    Args:
        lo, hi: (n_inputs,) for one box, or (B, n_inputs) for B boxes at once.
    Returns:
        NodeBounds with (size_i,) arrays, or (B, size_i) arrays for a batch.
    """
    check_gradual_underflow()
    lo, hi, single = _batch(lo, hi)
    lower, upper = [], []
    for nid, node in enumerate(ir.nodes):
        if isinstance(node, InputNode):
            lower.append(lo.copy())
            upper.append(hi.copy())
        elif isinstance(node, AffineNode):
            c = np.broadcast_to(node.bias, (lo.shape[0], node.size)).copy()
            r = np.zeros_like(c)
            mag = np.broadcast_to(np.abs(node.bias), c.shape).copy()
            for src, _, _, awt, wt in _forward_terms(ir, nid):
                mid = (lower[src] + upper[src]) / 2
                rad = np.maximum(upper[src] - mid, mid - lower[src])
                c += matmul(mid, wt)
                r += matmul(rad, awt)
                mag += matmul(np.abs(mid) + rad, awt)
            lower.append(_inflate(c - r, mag + r, True))
            upper.append(_inflate(c + r, mag + r, False))
        else:
            lower.append(np.maximum(lower[node.src], 0.0))
            upper.append(np.maximum(upper[node.src], 0.0))
    return _unbatch(NodeBounds(lower, upper), single)


def forward_bounds(ir: ControllerIR, lo: np.ndarray, hi: np.ndarray, deadline: float | None = None,
                   clip: NodeBounds | None = None) -> NodeBounds:
    """Bounds of every node over the boxes from linear functions of the input carried
    forward (symbolic intervals with linear relaxations: Wang et al., "Efficient Formal
    Safety Analysis of Neural Networks" (Neurify), NeurIPS 2018; the forward mode of
    Xu et al., "Automatic Perturbation Analysis for Scalable Certified Robustness and
    Beyond" (auto_LiRPA), NeurIPS 2020), each node the tighter of these and interval bounds.

    Every node carries a lower and an upper linear function of x valid over the box;
    an affine node combines its sources' functions by the signs of its weights, a ReLU
    with unstable input [l, u] keeps ``α · lower`` (α = 1 when u > -l, else 0) and
    ``s · (upper − l)`` with s = u / (u − l) rounded up (any larger slope is sound).
    Cost per box is O(width² · n_inputs) per layer instead of CROWN's backward
    O(width³ · depth): the cheap choice for few inputs; looser than CROWN in general.

    Floating point as in the module docstring: absolute values of every coefficient and
    constant are carried alongside and every concretised bound is moved outward by
    ``INFLATION`` times that magnitude.

    Args:
        lo, hi: (B, n_inputs) boxes (or (n_inputs,) for one).
        deadline: ``time.monotonic()`` value, checked once per node.
        clip: sound bounds of every node over each box ((B, size_i) arrays), e.g. the CROWN bounds of
            the box each one was split from (a child lies in its parent, so the parent's bounds hold
            on it): every affine node's bounds are intersected with them as they are computed, so
            the ReLUs after it are relaxed over the tighter interval (any interval that holds the
            node's values gives a sound relaxation). None: the boxes' own bounds alone.
    Returns:
        NodeBounds with (B, size_i) arrays (or (size_i,) for one box).
    Raises:
        BoundsTimeout when ``deadline`` has passed.
    """
    check_gradual_underflow()
    lo, hi, single = _batch(lo, hi)
    if clip is not None and single:
        clip = NodeBounds([np.atleast_2d(v) for v in clip.lower], [np.atleast_2d(v) for v in clip.upper])
    ib = interval_bounds(ir, lo, hi)
    tiny = _underflow_pad(ir, lo, hi, ib, len(ir.nodes))
    B, n = lo.shape
    reach = np.maximum(np.abs(lo), np.abs(hi))  # (B, n)
    lower, upper = [], []
    # per node: lower/upper coefficients (B, n, size) (input axis first: products are x @ w.T),
    # constants (B, size), and the magnitudes of both
    fl, fu, cl, cu, am, cm = [], [], [], [], [], []
    for nid, node in enumerate(ir.nodes):
        _check_deadline(deadline)
        if isinstance(node, InputNode):
            eye = np.broadcast_to(np.eye(n), (B, n, n)).copy()
            fl.append(eye), fu.append(eye), am.append(eye)
            zero = np.zeros((B, n))
            cl.append(zero), cu.append(zero), cm.append(zero)
            lower.append(lo.copy()), upper.append(hi.copy())
            continue
        if isinstance(node, AffineNode):
            Lc = np.zeros((B, n, node.size))
            Uc = np.zeros((B, n, node.size))
            Am = np.zeros((B, n, node.size))
            l0 = np.broadcast_to(node.bias, (B, node.size)).copy()
            u0 = l0.copy()
            c0 = np.broadcast_to(np.abs(node.bias), (B, node.size)).copy()
            for src, wp, wn, wa, _ in _forward_terms(ir, nid):
                Lc += matmul(fl[src], wp) + matmul(fu[src], wn)
                Uc += matmul(fu[src], wp) + matmul(fl[src], wn)
                Am += matmul(am[src], wa)
                l0 += matmul(cl[src], wp) + matmul(cu[src], wn)
                u0 += matmul(cu[src], wp) + matmul(cl[src], wn)
                c0 += matmul(cm[src], wa)
            mag = c0 + sum_last(np.swapaxes(Am, 1, 2) * reach[:, None, :])
            low = l0 + sum_last(np.swapaxes(np.maximum(Lc, 0.0), 1, 2) * lo[:, None, :]) \
                + sum_last(np.swapaxes(np.minimum(Lc, 0.0), 1, 2) * hi[:, None, :])
            up = u0 + sum_last(np.swapaxes(np.maximum(Uc, 0.0), 1, 2) * hi[:, None, :]) \
                + sum_last(np.swapaxes(np.minimum(Uc, 0.0), 1, 2) * lo[:, None, :])
            l_n = np.maximum(ib.lower[nid], _inflate(low, mag, True, tiny))
            u_n = np.minimum(ib.upper[nid], _inflate(up, mag, False, tiny))
            if clip is not None:
                l_n, u_n = np.maximum(l_n, clip.lower[nid]), np.minimum(u_n, clip.upper[nid])
            lower.append(l_n), upper.append(u_n)
            fl.append(Lc), fu.append(Uc), am.append(Am), cl.append(l0), cu.append(u0), cm.append(c0)
            continue
        l, u = lower[node.src], upper[node.src]
        active, inactive = l >= 0, u <= 0
        unstable = ~active & ~inactive
        denom = np.where(unstable, u - l, 1.0)
        s_up = np.where(active, 1.0, np.where(inactive, 0.0, (u / denom) * (1.0 + 1e-15)))
        b_up = np.where(unstable, -l * s_up, 0.0)
        alpha = np.where(active, 1.0, np.where(inactive, 0.0, (u > -l).astype(np.float64)))
        src = node.src
        fl.append(fl[src] * alpha[:, None, :]), cl.append(cl[src] * alpha)
        fu.append(fu[src] * s_up[:, None, :]), cu.append(cu[src] * s_up + b_up)
        am.append(am[src] * np.maximum(alpha, s_up)[:, None, :])
        cm.append(cm[src] * np.maximum(alpha, s_up) + np.abs(b_up))
        lower.append(np.maximum(l, 0.0)), upper.append(np.maximum(u, 0.0))
    return _unbatch(NodeBounds(lower, upper), single)


#: Lower relaxations of an unstable ReLU (any slope in [0, 1] through the origin is sound):
#: "adaptive" (CROWN: 1 when u > -l, else 0), "zero", "one", "chord" (the upper line's slope).
LOWER_SLOPES = ("adaptive", "zero", "one", "chord")


def _relu_relaxation(l: np.ndarray, u: np.ndarray, lower: str | np.ndarray = "adaptive"):
    """(lower slope, upper slope, upper intercept) per neuron; lower intercept is 0. ``lower``
    names a rule of LOWER_SLOPES or gives the unstable neurons' slopes (same shape as ``l``,
    clipped to [0, 1]: every such slope is sound)."""
    active = l >= 0
    inactive = u <= 0
    unstable = ~active & ~inactive
    denom = np.where(unstable, u - l, 1.0)
    s_up = np.where(active, 1.0, np.where(inactive, 0.0, u / denom))
    b_up = np.where(unstable, -l * s_up, 0.0)
    if isinstance(lower, str):
        slope = {"adaptive": (u > -l).astype(np.float64), "zero": 0.0, "one": 1.0, "chord": s_up}[lower]
    else:
        slope = np.clip(lower, 0.0, 1.0)
    s_lo = np.where(active, 1.0, np.where(inactive, 0.0, slope))
    return s_lo, s_up, b_up


def _backward_terms(ir: ControllerIR, nid: int) -> list[tuple[int, np.ndarray | Sparse, np.ndarray | Sparse]]:
    """``(src, w, |w|)`` of affine node ``nid``, each matrix as :class:`Sparse` where it is sparse
    (:func:`~mi_certify.generator.core.ir.prepared_terms`: made once per IR)."""
    return [(src, w, aw) for (src, w), (_, aw) in zip(prepared_terms(ir, nid, "w"), prepared_terms(ir, nid, "abs"))]


def _forward_terms(ir: ControllerIR, nid: int) -> list:
    """``(src, max(w, 0)ᵀ, min(w, 0)ᵀ, |w|ᵀ, wᵀ)`` of affine node ``nid`` for the forward passes, each
    contiguous or :class:`Sparse` (:func:`~mi_certify.generator.core.ir.prepared_terms`: made once per IR)."""
    forms = [prepared_terms(ir, nid, f) for f in ("posT", "negT", "absT", "wT")]
    return [(src, *(m for _, m in ms)) for src, *ms in zip([s for s, _ in forms[0]], *forms)]


def compactable(ir: ControllerIR) -> bool:
    """Whether the backward pass keeps only the columns of Λ it needs (:func:`_backward_lower_batch`):
    every affine node has one term per source and some weight matrix is sparse (a lattice network's
    min/max trees: a neuron depends on its subtree only). Decided once per IR (kept in
    :func:`~mi_certify.generator.core.ir.weight_memo`)."""
    memo = weight_memo(ir)
    if "compactable" not in memo:
        memo["compactable"] = (
            any(isinstance(w, Sparse) for nid, n in enumerate(ir.nodes) if isinstance(n, AffineNode)
                for _, w, _ in _backward_terms(ir, nid))
            and all(len({src for src, _ in n.terms}) == len(n.terms) for n in ir.nodes if isinstance(n, AffineNode)))
    return memo["compactable"]


def _all_finite(cache: dict | None, key, arrays) -> bool:
    """Whether every array is finite (remembered in ``cache`` under ``key`` when both are given)."""
    if cache is not None and key is not None and (key, "finite") in cache:
        return cache[(key, "finite")]
    ok = all(bool(np.isfinite(a).all()) for a in arrays)
    if cache is not None and key is not None:
        cache[(key, "finite")] = ok
    return ok


def _expand(M: np.ndarray, c: np.ndarray | None, size: int) -> np.ndarray:
    """(B, m, size) array holding M's columns at ``c`` and zeros elsewhere (M itself when c is None)."""
    if c is None:
        return M
    out = np.zeros(M.shape[:2] + (size,))
    out[:, :, c] = M
    return out


def _accumulate(coef: dict, acoef: dict, cols: dict, src: int, L: np.ndarray, A: np.ndarray,
                c: np.ndarray | None, size: int) -> None:
    """Add (L, A) on columns ``c`` (None: all ``size``) to node ``src``'s coefficients."""
    if src not in coef:
        coef[src], acoef[src] = L, A
        if c is not None:
            cols[src] = c
        return
    old = cols.pop(src, None)
    if old is not None and c is not None and np.array_equal(old, c):
        coef[src], acoef[src] = coef[src] + L, acoef[src] + A
        cols[src] = c
        return
    coef[src] = _expand(coef[src], old, size) + _expand(L, c, size)
    acoef[src] = _expand(acoef[src], old, size) + _expand(A, c, size)


@numba.njit(cache=True, fastmath=False, nogil=True)
def _relu_back(L, A, s_lo, s_up, b_up, rows, cols):  # pragma: no cover - compiled
    """One ReLU step of the backward pass, fused: for row b of L and A (B, m, n) and column j, with
    s = s_lo[rows[b], cols[j]] where L >= 0 else s_up[...] and Bc = 0 where L >= 0 else b_up[...],
    returns (L·s, A·|s|, Σ_j L·Bc, Σ_j A·|Bc|). The relaxation's entries are read in place (the
    gathered copy ``s_lo[np.ix_(rows, cols)]`` was 15.6 % of a lattice query's line profile); the
    sums run over j in index order from 0, the same IEEE operations as the numpy expressions
    ``np.where``/``sum_last`` (``fastmath=False``: no FMA, no reassociation). The caller checks the
    indices (the kernel does not)."""
    B, m, n = L.shape
    LS = np.empty((B, m, n))
    AS = np.empty((B, m, n))
    dc = np.zeros((B, m))
    dm = np.zeros((B, m))
    for b in range(B):
        rb = rows[b]
        for r in range(m):
            c = 0.0
            g = 0.0
            for j in range(n):
                cj = cols[j]
                lv = L[b, r, j]
                if lv >= 0:
                    sv = s_lo[rb, cj]
                    bc = 0.0
                else:
                    sv = s_up[rb, cj]
                    bc = b_up[rb, cj]
                LS[b, r, j] = lv * sv
                AS[b, r, j] = A[b, r, j] * abs(sv)
                c = c + lv * bc
                g = g + A[b, r, j] * abs(bc)
            dc[b, r] = c
            dm[b, r] = g
    return LS, AS, dc, dm


@numba.njit(cache=True, nogil=True)
def _row_columns(indptr, indices, rows, n):  # pragma: no cover - compiled
    """The columns (ascending) where some row of ``rows`` of a CSR matrix (n columns) has an entry."""
    used = np.zeros(n, dtype=np.bool_)
    for r in rows:
        for t in range(indptr[r], indptr[r + 1]):
            used[indices[t]] = True
    return np.nonzero(used)[0]


def _backward_lower_batch(ir: ControllerIR, target: int, lam: np.ndarray | None, lo: np.ndarray, hi: np.ndarray,
                          bounds: NodeBounds, lower: str | dict[int, np.ndarray] = "adaptive",
                          rows: np.ndarray | None = None, per_box: np.ndarray | None = None,
                          gather: np.ndarray | None = None,
                          cache: dict | None = None, tiny: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Batched CROWN backward pass: lam (B, m, size(target)), lo/hi (B, n), bounds (B, size_i) arrays;
    ``lam=None`` stands for the rows ``[I; -I]`` (both bounds of every neuron of an affine
    target), whose first step is the exact ``[w; -w]`` (no products: a tenth of the work);
    ``rows`` then selects the neurons (default all): the result has ``2 * len(rows)`` rows.
    ``per_box`` (B,) instead gives each box one neuron of its own (rows ``[e_j; -e_j]``, 2 rows).
    ``gather`` (B,): box b of this pass is box ``gather[b]`` of ``bounds`` (lo/hi are this
    pass's). ``cache``: relaxations by (node, rule) of ``bounds``' boxes, reused across calls.
    ``tiny``: this pass's boxes' underflow pads (B, 1) when the caller has them (:func:`crown_bounds`:
    one per call), else :func:`_underflow_pad` of ``bounds``.
    ``lower``: a rule of LOWER_SLOPES, or {ReLU node id: (B, size) lower slopes}.

    On a network where :func:`compactable` holds (sparse layers), each node's coefficient arrays
    hold only the columns some row reaches (``cols``): a neuron of a min/max tree depends on its
    subtree only, so a pass costs its nonzeros instead of width² per layer. The columns left out
    are exact zeros of Λ and of its magnitudes; every sum skips them in the order it would have
    added them (finite operands: ``x + ±0 == x``), so the bounds are bit for bit the dense pass's
    (tests/unit/nn/test_verification.py::test_the_compacted_backward_pass_gives_the_dense_passes_bits).

    Returns (lower (B, m), input coefficients (B, m, n_inputs))."""
    compact = compactable(ir)
    first = target  # the pass meets the ReLU nodes below it (their bounds set the underflow pad)
    cols: dict[int, np.ndarray] = {}  # node -> the columns its coefficient arrays hold (absent: all)
    if lam is None and per_box is not None:  # box b bounds its own neuron per_box[b]: rows [e_j; -e_j]
        node = ir.nodes[target]
        B, m = lo.shape[0], 2
        coef = {}
        acoef = {}
        for (src, w), (_, prepared) in zip(node.terms, prepared_terms(ir, target, "w")):
            # [e_j; -e_j] @ w in fixed order is exactly [w_j; -w_j]
            c = None
            if compact:  # only the columns some row reaches (the others are zeros in every row)
                c = (_row_columns(prepared.indptr, prepared.indices, per_box.astype(np.int64), w.shape[1])
                     if isinstance(prepared, Sparse) else np.nonzero(np.any(w[np.unique(per_box)] != 0, axis=0))[0])
                w = w[np.ix_(per_box, c)]
            else:
                w = w[per_box]
            signed = np.stack([w, -w], axis=1)
            _accumulate(coef, acoef, cols, src, signed, np.abs(signed), c, ir.nodes[src].size)
        bias = node.bias[per_box]
        const = np.stack([bias, -bias], axis=1)
        mag = np.abs(const)
        target -= 1
    elif lam is None:
        node = ir.nodes[target]
        sel = np.arange(node.size) if rows is None else rows
        B, m = lo.shape[0], 2 * len(sel)
        coef: dict[int, np.ndarray] = {}
        acoef: dict[int, np.ndarray] = {}
        for src, w in node.terms:  # [I; -I] @ w in fixed order is exactly [w; -w]
            w = w[sel]
            signed = np.broadcast_to(np.vstack([w, -w]), (B, m, w.shape[1]))
            absw = np.broadcast_to(np.vstack([np.abs(w), np.abs(w)]), (B, m, w.shape[1]))
            coef[src] = coef[src] + signed if src in coef else signed
            acoef[src] = acoef[src] + absw if src in acoef else absw
        bias = node.bias[sel]
        const = np.broadcast_to(np.concatenate([bias, -bias]), (B, m)).copy()
        mag = np.broadcast_to(np.concatenate([np.abs(bias), np.abs(bias)]), (B, m)).copy()
        target -= 1
    else:
        B, m = lam.shape[0], lam.shape[1]
        coef = {target: lam}
        acoef = {target: np.abs(lam)}
        const = np.zeros((B, m))
        mag = np.zeros((B, m))
    for nid in range(target, -1, -1):
        if nid not in coef:
            continue
        L = coef.pop(nid)
        A = acoef.pop(nid)
        c = cols.pop(nid, None)
        node = ir.nodes[nid]
        if isinstance(node, InputNode):
            L, A = _expand(L, c, node.size), _expand(A, c, node.size)
            pos, neg = np.maximum(L, 0), np.minimum(L, 0)
            val = rowdot(pos, lo) + rowdot(neg, hi) + const
            mag = mag + rowdot(A, np.maximum(np.abs(lo), np.abs(hi)))
            if tiny is None:
                tiny = _underflow_pad(ir, lo, hi, bounds, first, gather)
            if lam is not None:   # rows of any size: an error in Λ scales with them (‖λ_r‖₁; Γ: weights only)
                with np.errstate(over="ignore", invalid="ignore"):
                    tiny = tiny * np.maximum(1.0, sum_last(np.abs(lam)))
            return _inflate(val, mag, True, tiny), L
        if isinstance(node, AffineNode):
            if c is not None and not (np.isfinite(node.bias).all() and np.isfinite(L).all()
                                      and np.isfinite(A).all()):
                # a non-finite term: the dense pass's 0 · inf = NaN must happen as it would
                L, A, c = _expand(L, c, node.size), _expand(A, c, node.size), None
            bias = node.bias if c is None else node.bias[c]
            const = const + matmul(L, bias)
            mag = mag + matmul(A, np.abs(bias))
            for src, w, aw in _backward_terms(ir, nid):
                size = ir.nodes[src].size
                if c is not None and c.size == 0 and (w.finite if isinstance(w, Sparse) else np.isfinite(w).all()):
                    # no column left (dead rows): every product is an empty sum, +0 as in the dense pass
                    _accumulate(coef, acoef, cols, src, np.zeros((B, m, 0)), np.zeros((B, m, 0)),
                                np.zeros(0, dtype=np.int64), size)
                elif (compact and isinstance(w, Sparse) and w.finite and aw.finite and np.isfinite(L).all()
                        and np.isfinite(A).all()):
                    k = L.shape[2]
                    o1, o2, nc = pair_rows_product(L.reshape(B * m, k), A.reshape(B * m, k),
                                                   np.arange(node.size) if c is None else c, w, aw)
                    _accumulate(coef, acoef, cols, src, o1.reshape(B, m, nc.size), o2.reshape(B, m, nc.size), nc,
                                size)
                elif c is not None and not isinstance(w, Sparse) and np.isfinite(w).all():
                    # the rows outside c meet only zeros of L and A: skipped terms (finite w), the same bits
                    _accumulate(coef, acoef, cols, src, matmul(L, w[c]), matmul(A, aw[c]), None, size)
                else:
                    Lf, Af = _expand(L, c, node.size), _expand(A, c, node.size)
                    _accumulate(coef, acoef, cols, src, matmul(Lf, w), matmul(Af, aw), None, size)
        else:
            key = (nid, lower) if isinstance(lower, str) else None
            if cache is not None and key in cache:
                s_lo, s_up, b_up = cache[key]
            else:
                l, u = bounds.lower[node.src], bounds.upper[node.src]
                s_lo, s_up, b_up = _relu_relaxation(l, u, lower if isinstance(lower, str) else lower[nid])
                if cache is not None and key is not None:
                    cache[key] = (s_lo, s_up, b_up)
            rows = gather  # this pass's boxes among the relaxation's (None: the same boxes)
            if c is not None and not _all_finite(cache, key, (s_lo, s_up, b_up)):
                if rows is not None:
                    s_lo, s_up, b_up = s_lo[rows], s_up[rows], b_up[rows]
                    rows = None
                if not (np.isfinite(s_lo).all() and np.isfinite(s_up).all() and np.isfinite(b_up).all()):
                    # a NaN or infinite relaxation: the dense pass's 0 · NaN = NaN must happen as it would
                    L, A, c = _expand(L, c, node.size), _expand(A, c, node.size), None
            # the kept columns only (all of them when c is None), of this pass's boxes, read in place
            at = np.arange(s_lo.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
            cc = np.arange(s_lo.shape[1]) if c is None else np.asarray(c, dtype=np.int64)
            if (at.shape[0] != L.shape[0] or (at.size and (at.min() < 0 or at.max() >= s_lo.shape[0]))
                    or (cc.size and (cc.min() < 0 or cc.max() >= s_lo.shape[1])) or cc.size != L.shape[2]):
                # never: a slope row for every row of L, a column for each of its columns
                raise AssertionError("backward pass: relaxation rows do not match the coefficient rows")
            LS, AS, dc, dm = _relu_back(np.ascontiguousarray(L), np.ascontiguousarray(A), np.ascontiguousarray(s_lo),
                                        np.ascontiguousarray(s_up), np.ascontiguousarray(b_up), at, cc)
            const = const + dc
            mag = mag + dm
            _accumulate(coef, acoef, cols, node.src, LS, AS, c, ir.nodes[node.src].size)
    raise AssertionError("the input node was not reached")  # pragma: no cover


def _instance_chunks(bi: np.ndarray, ji: np.ndarray, by_neuron: bool):
    """The (box, neuron) instances of a CROWN pass in chunks of at most ``_INSTANCE_CHUNK``; with
    ``by_neuron`` (a compacted backward pass) ordered by neuron and at most ``_NEURON_GROUP``
    neurons a chunk, so that a chunk's rows reach few columns (neighbouring neurons of a min/max
    tree share their subtree). Every row is computed by the same operations whichever rows share
    its pass, so the grouping changes no bit."""
    if not by_neuron:
        for s in range(0, bi.size, _INSTANCE_CHUNK):
            yield bi[s:s + _INSTANCE_CHUNK], ji[s:s + _INSTANCE_CHUNK]
        return
    order = np.lexsort((bi, ji))
    bi, ji = bi[order], ji[order]
    starts = np.nonzero(np.r_[True, ji[1:] != ji[:-1]])[0]  # first instance of each neuron
    s = 0
    while s < bi.size:
        k = np.searchsorted(starts, s, side="right")  # neurons starting after s
        stop = starts[k + _NEURON_GROUP - 1] if k + _NEURON_GROUP - 1 < starts.size else bi.size
        stop = min(stop, s + _INSTANCE_CHUNK)
        yield bi[s:stop], ji[s:stop]
        s = stop


#: Work per call of the chain kernel (:func:`_chain_passes`), in nonzero weights an instance may meet
#: (``ChainPlan.work``) times instances: the deadline is checked between calls (2e7: at most about 0.1 s;
#: tllverifybench N = 64's last layer, 414 us an instance, 246 instances a call).
_CHAIN_WORK = 20_000_000


def _chain_passes(ir: ControllerIR, nid: int, bi: np.ndarray, ji: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                  nb: NodeBounds, lower_slopes: tuple, cache: dict, deadline: float | None, l_i: np.ndarray,
                  u_i: np.ndarray, tiny: np.ndarray) -> np.ndarray:
    """:func:`crown_bounds`' per-neuron passes of node ``nid`` by the compiled chain kernel
    (:mod:`~mi_certify.verification.nn.chain_pass`: the same bits as :func:`_backward_lower_batch`) where it
    applies: tightens ``l_i``/``u_i`` (B, size) in place at the instances (``bi``, ``ji``) it computed and
    returns a boolean mask of the instances left to the batched pass (all of them when the IR is not a
    sparse chain or a ReLU relaxation below ``nid`` is not finite). ``tiny``: the boxes' underflow pads
    (B, 1), subtracted as the batched pass's :func:`_inflate` does. Raises BoundsTimeout."""
    plan = chain_plan(ir) if compactable(ir) else None
    if plan is None or not all(isinstance(v, str) for v in lower_slopes):
        return np.ones(bi.size, dtype=bool)
    passes = []
    flagged = np.zeros(bi.size, dtype=bool)
    tiny = tiny[bi]
    for v in lower_slopes:
        rel = _chain_relaxations(ir, nid, nb, v, cache)
        if rel is None:
            return np.ones(bi.size, dtype=bool)
        out = np.empty((bi.size, 2))
        step = max(1, _CHAIN_WORK // max(1, int(plan.work[nid]) + int(plan.size[nid])))
        for s in range(0, bi.size, step):
            _check_deadline(deadline)
            o, f = chain_lower(plan, nid, bi[s:s + step], ji[s:s + step], lo, hi, *rel, INFLATION)
            out[s:s + step] = o
            flagged[s:s + step] |= f
        passes.append(np.where(np.isfinite(tiny), out - tiny, -np.inf))
    both = np.max(passes, axis=0)
    done = ~flagged
    b, j = bi[done], ji[done]
    l_i[b, j] = np.maximum(l_i[b, j], both[done, 0])
    u_i[b, j] = np.minimum(u_i[b, j], -both[done, 1])
    return flagged


def _chain_relaxations(ir: ControllerIR, nid: int, nb: NodeBounds, rule: str, cache: dict):
    """(s_lo, s_up, b_up, r_off) for :func:`~.chain_pass.chain_lower`: the relaxations (``rule``) of every
    ReLU node below ``nid``, side by side in (B, R) arrays (one per :func:`crown_bounds` call and rule, filled
    as the nodes' bounds become final; each node's the cached one of the batched pass); None when one of them
    is not finite (the batched pass then keeps NaN's semantics)."""
    key = ("chain", rule)
    if key not in cache:
        relus = [r for r, node in enumerate(ir.nodes) if isinstance(node, ReluNode)]
        r_off = np.zeros(len(ir.nodes), dtype=np.int64)
        at = 0
        for r in relus:
            r_off[r] = at
            at += ir.nodes[r].size
        B = nb.lower[0].shape[0]
        cache[key] = [np.zeros((B, at)), np.zeros((B, at)), np.zeros((B, at)), r_off, set()]
    s_lo, s_up, b_up, r_off, filled = cache[key]
    for r in range(1, nid):
        node = ir.nodes[r]
        if not isinstance(node, ReluNode) or r in filled:
            continue
        rk = (r, rule)
        if rk not in cache:
            cache[rk] = _relu_relaxation(nb.lower[node.src], nb.upper[node.src], rule)
        if not _all_finite(cache, rk, cache[rk]):
            return None
        for whole, part in zip((s_lo, s_up, b_up), cache[rk]):
            whole[:, r_off[r]:r_off[r] + node.size] = part
        filled.add(r)
    return s_lo, s_up, b_up, r_off


def crown_bounds(ir: ControllerIR, lo: np.ndarray, hi: np.ndarray,
                 lower_slopes: tuple[str, ...] = ("adaptive",), deadline: float | None = None,
                 phases: dict[int, np.ndarray] | None = None, init: NodeBounds | None = None,
                 keep: int = -1) -> NodeBounds:
    """Bounds of every node over [lo, hi]: forward linear bounds (:func:`forward_bounds`, never
    looser than interval bounds) everywhere, tightened by CROWN at every pre-ReLU node that is not a direct affine map of the input (outputs keep
    interval bounds; bound output expressions with :func:`output_matrix_lower`).

    Args:
        lo, hi: (n_inputs,) for one box, or (B, n_inputs) for B boxes in one vectorised pass.
        lower_slopes: lower relaxations of unstable ReLUs to try (see LOWER_SLOPES); each
            gives a sound bound, the best per neuron is kept (a cheap stand-in for
            optimising the slopes as alpha-CROWN does: Xu et al., ICLR 2021).
        deadline: ``time.monotonic()`` value; checked before every backward pass (one pass
            costs at most a fraction of a second at width 256, depth 6).
        phases: {pre-ReLU node id: (size,) or (B, size) int8}: +1 clips the node's lower bound to 0,
            -1 its upper bound (a ReLU-split subdomain; :mod:`~.lp_split`).
        init: sound bounds of every node over these boxes ((size,) arrays for all boxes, or (B, size)),
            e.g. a split subdomain's parent's: they replace the forward bounds (:func:`forward_bounds`,
            not computed then) as the bounds CROWN tightens.
        keep: with ``init``, nodes up to this id keep init's bounds (no CROWN pass; ``phases`` still
            clip them): a ReLU split at node ``keep`` leaves the bounds before it as its parent's.
    Raises:
        BoundsTimeout when ``deadline`` has passed.
    """
    _check_deadline(deadline)
    check_gradual_underflow()
    lo, hi, single = _batch(lo, hi)
    if init is None:
        ib = forward_bounds(ir, lo, hi, deadline)  # (tighter than intervals: fewer unstable neurons to bound)
    else:
        ib = NodeBounds([np.array(np.broadcast_to(v, (lo.shape[0], np.shape(v)[-1]))) for v in init.lower],
                        [np.array(np.broadcast_to(v, (lo.shape[0], np.shape(v)[-1]))) for v in init.upper])
    lower, upper = [None] * len(ir.nodes), [None] * len(ir.nodes)
    nb = NodeBounds(lower, upper)
    # CROWN only where it can help: pre-ReLU nodes that are not a direct affine map of the
    # input (for those, interval bounds are already exact up to the inflation)
    cache: dict = {}  # ReLU relaxations of the boxes, by (node, rule): computed once per call
    # the underflow pads (B, 1): from ``ib``, whose every node bound holds the final one (tightened, clipped)
    pads = None
    need = {n.src for n in ir.nodes if isinstance(n, ReluNode)
            if not (isinstance(ir.nodes[n.src], AffineNode) and all(s == 0 for s, _ in ir.nodes[n.src].terms))}
    for nid, node in enumerate(ir.nodes):
        if isinstance(node, InputNode):
            lower[nid], upper[nid] = lo.copy(), hi.copy()
        elif isinstance(node, ReluNode):
            lower[nid] = np.maximum(lower[node.src], 0.0)
            upper[nid] = np.maximum(upper[node.src], 0.0)
        else:
            l_i, u_i = ib.lower[nid], ib.upper[nid]
            if nid in need and nid > keep:
                # only neurons some box leaves unstable need CROWN: a stable one's relaxation
                # is exact whatever its bounds (only its sign is used downstream)
                # (each box's own unstable neurons: a row is computed by the same operations
                # whichever other rows share its pass, so the bits do not depend on the grouping)
                bi, ji = np.nonzero((l_i < 0) & (u_i > 0))
                if bi.size:
                    l_i, u_i = l_i.copy(), u_i.copy()
                    if pads is None:   # once per call, from the bounds every later node's lie in
                        pads = _underflow_pad(ir, lo, hi, ib, len(ir.nodes))
                    rest = _chain_passes(ir, nid, bi, ji, lo, hi, nb, lower_slopes, cache, deadline, l_i, u_i, pads)
                    for b, j in _instance_chunks(bi[rest], ji[rest], compactable(ir)):
                        passes = []
                        for v in lower_slopes:
                            _check_deadline(deadline)
                            passes.append(_backward_lower_batch(ir, nid, None, lo[b], hi[b], nb, v, per_box=j,
                                                                gather=b, cache=cache, tiny=pads[b])[0])
                        both = np.max(passes, axis=0)
                        l_i[b, j] = np.maximum(l_i[b, j], both[:, 0])
                        u_i[b, j] = np.minimum(u_i[b, j], -both[:, 1])
            if phases is not None and nid in phases:
                ph = phases[nid]
                l_i = np.where(ph > 0, np.maximum(l_i, 0.0), l_i)
                u_i = np.where(ph < 0, np.minimum(u_i, 0.0), u_i)
            lower[nid], upper[nid] = l_i, u_i
    return _unbatch(nb, single)


def output_matrix_lower(ir: ControllerIR, C: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                        bounds: NodeBounds | None = None,
                        lower_slopes: tuple[str | dict[int, np.ndarray], ...] = ("adaptive",),
                        deadline: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sound lower bounds of ``C @ y`` over the box (y = the concatenated outputs).

    Args:
        C: (m, n_outputs); or, with lo/hi (B, n_inputs), (m, n_outputs) shared or
            (B, m, n_outputs) per box.
        lower_slopes: lower relaxations of unstable ReLUs to try (see LOWER_SLOPES), or
            {ReLU node id: (B, size) slopes} (any slope in [0, 1] is sound); the best bound per
            row is kept; the coefficients are those of the first.
        deadline: as for :func:`crown_bounds` (raises BoundsTimeout).
    Returns:
        (lower (m,), input coefficients (m, n_inputs)); with a leading B axis for a batch.
    """
    check_gradual_underflow()
    lo, hi, single = _batch(lo, hi)
    bounds = bounds or crown_bounds(ir, lo, hi, deadline=deadline)
    if single:
        bounds = NodeBounds([np.atleast_2d(v) for v in bounds.lower], [np.atleast_2d(v) for v in bounds.upper])
    C = np.asarray(C, dtype=np.float64)
    if C.ndim == 2:
        C = np.broadcast_to(C, (lo.shape[0],) + C.shape)
    total = np.zeros(C.shape[:2])
    coefs = np.zeros(C.shape[:2] + (ir.n_inputs,))
    off = 0
    # several output nodes: bound each block separately and add (sound, possibly looser)
    tiny = _underflow_pad(ir, lo, hi, bounds, len(ir.nodes))   # (every pass's: its ReLUs are among all)
    for nid in ir.outputs:
        size = ir.nodes[nid].size
        best, best_lin = None, None
        for v in lower_slopes:
            _check_deadline(deadline)
            part, lin = _backward_lower_batch(ir, nid, C[:, :, off:off + size], lo, hi, bounds, v, tiny=tiny)
            if best is None:
                best, best_lin = part, lin
            else:
                best = np.maximum(best, part)
        total += best
        coefs += best_lin
        off += size
    return (total[0], coefs[0]) if single else (total, coefs)


def output_bounds(ir: ControllerIR, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sound (lower, upper) of every raw output over the box, each (n_outputs,): CROWN's backward
    bounds intersected with the output node's own bounds in :func:`crown_bounds` (forward linear
    bounds, themselves never looser than interval bounds). All are sound; CROWN is usually, not
    always, the tighter: on the retrained reference network interval arithmetic was tighter on
    one output of a narrow box."""
    n = ir.n_outputs
    eye = np.eye(n)
    bounds = crown_bounds(ir, lo, hi)
    low, _ = output_matrix_lower(ir, eye, lo, hi, bounds)
    neg, _ = output_matrix_lower(ir, -eye, lo, hi, bounds)
    out = ir.outputs[0]
    return np.maximum(low, bounds.lower[out]), np.minimum(-neg, bounds.upper[out])


def combined_row_lower(ir: ControllerIR, C: np.ndarray, d: np.ndarray, lam: np.ndarray, lo: np.ndarray,
                       hi: np.ndarray, bounds: NodeBounds, slopes: dict[int, np.ndarray],
                       deadline: float | None = None) -> np.ndarray:
    """Sound lower bounds, one per box, of ``λᵀ(C y − d)`` for the real-valued λ given, over the
    boxes (the region ``C y <= d`` of a box is empty where it is positive, for any λ >= 0).

    The combined row ``fl(λᵀC)`` and ``fl(λᵀd)`` are rounded; the backward pass bounds the
    rounded row exactly (outward rounding as in the module docstring), and the rounding of the
    combination is charged on top: ``INFLATION · (|λ|ᵀ|C| · max|y| + |λ|ᵀ|d|)`` with max|y|
    from the output nodes' bounds (a sum of m products errs by at most m·2⁻⁵³ of that:
    Higham §3.1).

    Args:
        C: (m, n_outputs); d: (m,); lam: (B, m) >= 0; lo, hi: (B, n_inputs);
        bounds: NodeBounds with (B, size_i) arrays (those the slopes were chosen for);
        slopes: {ReLU node id: (B, size) lower slopes in [0, 1]} (any values are sound).
    Returns:
        (B,) lower bounds.
    Raises:
        BoundsTimeout when ``deadline`` has passed.
    """
    lam = np.maximum(np.asarray(lam, dtype=np.float64), 0.0)
    row = matmul(lam, C)[:, None, :]  # (B, 1, n_outputs)
    low, _ = output_matrix_lower(ir, row, lo, hi, bounds, lower_slopes=(slopes,), deadline=deadline)
    reach = np.concatenate([np.maximum(np.abs(bounds.lower[o]), np.abs(bounds.upper[o])) for o in ir.outputs],
                           axis=1)
    pad = matmul(matmul(lam, np.abs(C)) * reach, np.ones(reach.shape[1])) + matmul(lam, np.abs(d))
    dl = matmul(lam, d)
    # λᵀC and λᵀd: m products an entry, each erring by at most UNDERFLOW_ERROR absolutely (underflow),
    # times |y| (module docstring); counted twice for the magnitudes' own underflow
    with np.errstate(over="ignore", invalid="ignore"):
        tiny = (2.0 * UNDERFLOW_ERROR * C.shape[0]) * (1.0 + sum_last(reach))
    return _inflate(low[:, 0] - dl, pad + np.abs(dl) + np.abs(low[:, 0]), True, np.where(np.isnan(tiny), np.inf, tiny))
