"""Certified training over the LUT cells: interval bound propagation (IBP) with hand-derived gradients.

The LUT-FSM is the network only where the network is constant on a cell; ``build`` proves a
cell when CROWN's lower bounds of the winning margins over the cell's closed box are > 0
(:mod:`mi_certify.generator.build.distill`). Training on points leaves the network rough at
cell scale. Certified training (Gowal et al., "On the Effectiveness of Interval Bound
Propagation for Training Verifiably Robust Models", 2018, arXiv:1810.12715; Zhang et al.,
"Towards Stable and Efficient Training of Verifiably Robust Neural Networks" (CROWN-IBP),
ICLR 2020) trains on a sound bound of the margin over a region instead: here the regions
are the cells, known before training.

**Bound.** For inputs normalised to [0, 1] (the trainer's coordinates) and a box with centre
``c`` and radius ``r`` (B, n): ``m = c W + b``, ``ρ = r |W|`` per affine layer, ReLU on the
interval ``[m - ρ, m + ρ]``; at the output the *margin* rows ``y_j - y_a`` are bounded
directly (``(W_j - W_a)``, ``|W_j - W_a|``), which is tighter than subtracting logit bounds.
:func:`ibp_logit_bounds` gives the logits' bounds (tests check they bound the network).

**Loss** (Gowal et al., eq. 7): per box with target class ``a``, the cross-entropy of the
worst-case logits ``z_a = 0``, ``z_j = ub(y_j - y_a)``: ``log(1 + Σ_{j≠a} e^{z_j})``; it is
small only when every margin is certified positive with room. Gradients are derived by hand
(:func:`ibp_cross_entropy`, backward through the interval arithmetic) and computed in the
fixed-order arithmetic of :mod:`mi_certify.generator.core.numerics`, so the trained network
is the same bits on every machine.

**Which cells, which action** (:func:`plan_cells`). Two neighbouring cells share a face, and a
continuous network takes one value there: two neighbours with different actions cannot both
be proven over their closed boxes. So for every face between different targets one side is
*given up* (not certified): it takes the conservative action (which the LUT gives a cell
``build`` only resolves, so the LUT and the network still agree on most of that cell: the
network is trained to decide the conservative action on the inner half of it) and the decision
boundary is pushed into it. Cells inside a ``require`` property's guard box are never given
up; a cell given up inside a ``forbid`` property's guard box is still trained, over its whole
closed box, to rank every forbidden action below the conservative one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mi_certify.generator.core.numerics import exp, gram, log, matmul, sum_last

__all__ = ["CellPlan", "cell_grid", "ibp_cross_entropy", "ibp_logit_bounds", "plan_cells"]


def cell_grid(bits: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The LUT cells in address order (input 0 most significant), in normalised coordinates.

    Returns:
        (levels (N, n) int64, centres (N, n) in [0, 1], half-widths (n,)), N = 2^sum(bits).
    """
    shape = tuple(1 << b for b in bits)
    levels = np.indices(shape).reshape(len(bits), -1).T.astype(np.int64)
    size = np.array([float(1 << b) for b in bits])
    return levels, (levels + 0.5) / size, 0.5 / size


def _interval_forward(ws, bs, c, r):
    """IBP through the hidden layers: per layer (centre m, radius ρ) before the ReLU, and the
    final hidden interval as (centre, radius)."""
    pre = []
    for w, b in zip(ws[:-1], bs[:-1]):
        m = matmul(c, w) + b
        rho = matmul(r, np.abs(w))
        pre.append((c, r, m, rho))
        lo, hi = np.maximum(m - rho, 0.0), np.maximum(m + rho, 0.0)
        c, r = (hi + lo) * 0.5, (hi - lo) * 0.5
    return pre, c, r


def ibp_logit_bounds(ws, bs, c, r) -> tuple[np.ndarray, np.ndarray]:
    """Sound (up to float rounding) interval bounds of the logits over the boxes [c - r, c + r].

    Args:
        ws, bs: the MLP's weights [(in, h1), (h1, h2), (h2, K)] and biases.
        c, r: (B, in) centres and radii (r >= 0).
    Returns:
        (lower, upper), each (B, K).
    """
    _, hc, hr = _interval_forward(ws, bs, np.asarray(c, float), np.asarray(r, float))
    m = matmul(hc, ws[-1]) + bs[-1]
    rho = matmul(hr, np.abs(ws[-1]))
    return m - rho, m + rho


def ibp_margin_upper(ws, bs, c, r, targets) -> np.ndarray:
    """Upper bounds (B, K) of ``y_j - y_{targets}`` over each box (column ``targets`` is 0)."""
    _, hc, hr = _interval_forward(ws, bs, np.asarray(c, float), np.asarray(r, float))
    return _margins(ws[-1], bs[-1], hc, hr, np.asarray(targets))[0]


def _margins(w3, b3, hc, hr, targets):
    K = w3.shape[1]
    ub = np.zeros((len(targets), K))
    rows = []
    for a in range(K):
        idx = np.nonzero(targets == a)[0]
        rows.append(idx)
        if not len(idx):
            continue
        wd = w3 - w3[:, a:a + 1]
        ub[idx] = matmul(hc[idx], wd) + (b3 - b3[a]) + matmul(hr[idx], np.abs(wd))
    return ub, rows


def ibp_cross_entropy(ws, bs, c, r, targets, columns=None, weights=None):
    """Sum over boxes of ``weight · log(1 + Σ_{j≠a, columns} e^{ub(y_j - y_a)})`` and its gradients.

    Args:
        ws, bs: weights and biases (the last layer gives the K class logits).
        c, r: (B, in) box centres and radii, normalised coordinates.
        targets: (B,) class index a per box.
        columns: (B, K) bool, the competitors counted (default: all); a box with none adds 0.
        weights: (B,) per-box weights (default 1).
    Returns:
        (loss, [dL/dW per layer], [dL/db per layer]); fixed-order arithmetic throughout.
    """
    c = np.asarray(c, float)
    r = np.asarray(r, float)
    targets = np.asarray(targets, dtype=np.int64)
    B = len(targets)
    K = ws[-1].shape[1]
    pre, hc, hr = _interval_forward(ws, bs, c, r)
    ub, rows = _margins(ws[-1], bs[-1], hc, hr, targets)
    mask = np.ones((B, K), dtype=bool) if columns is None else np.asarray(columns, dtype=bool).copy()
    mask[np.arange(B), targets] = False
    wts = np.ones(B) if weights is None else np.asarray(weights, float)
    top = np.maximum(np.max(np.where(mask, ub, -np.inf), axis=1, initial=-np.inf), 0.0)
    e = np.where(mask, exp(np.where(mask, ub, 0.0) - top[:, None]), 0.0)
    s = exp(-top) + sum_last(e)
    per = top + log(s)
    loss = float(np.add.reduce(per * wts))
    g = e / s[:, None] * wts[:, None]  # dL/dub (B, K); zero outside the mask
    # output layer: ub_j = hc·(w_j - w_a) + (b_j - b_a) + hr·|w_j - w_a|
    w3 = ws[-1]
    gw3 = np.zeros_like(w3)
    gb3 = np.zeros(K)
    dhc = np.zeros_like(hc)
    dhr = np.zeros_like(hr)
    for a in range(K):
        idx = rows[a]
        if not len(idx):
            continue
        wd = w3 - w3[:, a:a + 1]
        ga = g[idx]
        gwd = gram(hc[idx], ga) + gram(hr[idx], ga) * np.sign(wd)
        gw3 = gw3 + gwd
        gw3[:, a] = gw3[:, a] - sum_last(gwd)
        colsum = gram(np.ones((len(idx), 1)), ga)[0]
        gb3 = gb3 + colsum
        gb3[a] = gb3[a] - float(np.add.reduce(colsum))
        dhc[idx] = matmul(ga, wd.T)
        dhr[idx] = matmul(ga, np.abs(wd).T)
    gws, gbs = [None] * len(ws), [None] * len(ws)
    gws[-1], gbs[-1] = gw3, gb3
    dc, dr = dhc, dhr
    for k in range(len(ws) - 2, -1, -1):
        cin, rin, m, rho = pre[k]
        # c' = (relu(m + ρ) + relu(m - ρ)) / 2, r' = (relu(m + ρ) - relu(m - ρ)) / 2
        dhi = (dc + dr) * 0.5 * (m + rho > 0)
        dlo = (dc - dr) * 0.5 * (m - rho > 0)
        dm, drho = dhi + dlo, dhi - dlo
        gws[k] = gram(cin, dm) + gram(rin, drho) * np.sign(ws[k])
        gbs[k] = gram(np.ones((len(cin), 1)), dm)[0]
        if k:
            dc, dr = matmul(dm, ws[k].T), matmul(drho, np.abs(ws[k]).T)
    return loss, gws, gbs


@dataclass(frozen=True)
class CellPlan:
    """Per cell (address order): ``target`` class index, ``certify`` (True: the whole closed cell
    is trained to the target; False: given up, the target is the conservative class on the inner
    half of the cell), ``forbidden`` (N, K) classes that a property forbids in the cell,
    ``conflicts`` faces between different targets that neither side could give up."""

    target: np.ndarray
    certify: np.ndarray
    forbidden: np.ndarray
    conflicts: int


def plan_cells(bits: list[int], centre_logits: np.ndarray, data_counts: np.ndarray, allowed: np.ndarray,
               required: np.ndarray, conservative: int) -> CellPlan:
    """Targets and which cells to certify (module docstring, "Which cells, which action").

    Args:
        bits: address bits per input.
        centre_logits: (N, K) the network's logits at each cell's centre.
        data_counts: (N, K) training rows of each label in each cell.
        allowed: (N, K) bool, the classes the properties allow in each cell (guard boxes).
        required: (N,) bool, the cell lies in a ``require`` property's guard box (never given up).
        conservative: class index of the conservative action (the target of a cell given up).
    Returns:
        :class:`CellPlan`. Deterministic: faces are visited input by input, in address order.
    """
    N, K = centre_logits.shape
    # a cell with data: its majority label among the allowed ones (ties: the lower class);
    # without: the allowed class of largest centre logit (ties: the lower class)
    counts = np.where(allowed, data_counts, -1)
    has = np.where(allowed, data_counts, 0).sum(axis=1) > 0
    target = np.where(has, np.argmax(counts, axis=1), np.argmax(np.where(allowed, centre_logits, -np.inf), axis=1))
    can_give_up = ~required & allowed[:, conservative]
    rows = data_counts.sum(axis=1)
    given_up = np.zeros(N, dtype=bool)
    conflicts = 0
    stride = 1
    strides = []
    for b in reversed(bits):
        strides.append(stride)
        stride <<= b
    strides = strides[::-1]
    levels = cell_grid(bits)[0]
    for k, b in enumerate(bits):
        lo = np.nonzero(levels[:, k] < (1 << b) - 1)[0]
        for i in lo:
            j = i + strides[k]
            if given_up[i] or given_up[j] or target[i] == target[j]:
                continue
            cand = [t for t in (i, j) if can_give_up[t]]
            if not cand:
                conflicts += 1
                continue
            # prefer a cell whose target is already the conservative action, then the one with fewer rows
            victim = min(cand, key=lambda t: (target[t] != conservative, rows[t], -t))
            given_up[victim] = True
            target[victim] = conservative
    return CellPlan(target.astype(np.int64), ~given_up, ~allowed, conflicts)
