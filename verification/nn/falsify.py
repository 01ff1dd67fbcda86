"""Gradient-based counterexample search on the IR (projected gradient descent).

Method: projected gradient descent in the L∞ geometry of the input box (Madry et al.,
"Towards Deep Learning Models Resistant to Adversarial Attacks", ICLR 2018, §2.1), used
as a falsifier as in the VNN-COMP attack phase (α,β-CROWN's PGD front end; Brix et al.,
"The Fourth International Verification of Neural Networks Competition", 2023, §4). For
an unsafe region ``x ∈ [lo, hi], C y(x) ≤ d`` it minimises the hinge loss

    f(x) = Σ_r max(0, (C y(x) − d)_r + κ)

(κ = 1e-6 · (1 + |d|): a point that satisfies every row with that slack replays within
the 1e-4 tolerance on float32 too) by signed-gradient steps ``x ← clip(x − η_t ·
sign(∇f) · (hi − lo))`` with η_t falling geometrically from ``STEP0`` to ``STEP0 / 100``,
from several starts at once (the box centre, the corners that minimise CROWN's linear
bounds when given, and seeded uniform points).

The IR is affine + ReLU, so ∇f is exact: back-propagation through the active pattern
at x (the derivative of ReLU at 0 is taken as 0). Every product is a fixed-order sum
(:mod:`mi_certify.generator.core.numerics`), so the same starts give the same points on every
machine. Nothing here is evidence: a point is reported only after the caller replays it
on onnxruntime and the IR (:func:`mi_certify.verification.nn.nn_verify.replay_many`).
"""

from __future__ import annotations

import time

import numpy as np

from mi_certify.generator.core.ir import AffineNode, ControllerIR, prepared_terms
from mi_certify.generator.core.numerics import matmul

#: First step as a share of each input's width; the last is a hundredth of it.
STEP0 = 0.25
#: Seeded uniform starts added to the given ones.
RANDOM_STARTS = 32
#: Steps per run.
STEPS = 60


def _input_gradient(ir: ControllerIR, vals: list[np.ndarray], g_out: np.ndarray) -> np.ndarray:
    """∂(g_out · y)/∂x per start: g_out (S, n_outputs) → (S, n_inputs)."""
    grads: dict[int, np.ndarray] = {}
    off = 0
    for nid in ir.outputs:
        size = ir.nodes[nid].size
        part = g_out[:, off:off + size]
        grads[nid] = grads[nid] + part if nid in grads else part.copy()
        off += size
    for nid in range(len(ir.nodes) - 1, 0, -1):
        g = grads.pop(nid, None)
        if g is None:
            continue
        node = ir.nodes[nid]
        if isinstance(node, AffineNode):
            for src, w in prepared_terms(ir, nid, "w"):   # made once per IR, shared with the bound passes
                back = matmul(g, w)
                grads[src] = grads[src] + back if src in grads else back
        else:
            back = np.where(vals[node.src] > 0, g, 0.0)
            grads[node.src] = grads[node.src] + back if node.src in grads else back
    return grads.get(0, np.zeros_like(vals[0]))


def pgd_search(ir: ControllerIR, lo: np.ndarray, hi: np.ndarray, C: np.ndarray, d: np.ndarray,
               starts: np.ndarray | None = None, seed: int = 0, steps: int = STEPS,
               random_starts: int = RANDOM_STARTS, deadline: float | None = None) -> np.ndarray:
    """Candidate points of the region ``x ∈ [lo, hi], C y ≤ d``, best first.

    Args:
        lo, hi: (n_inputs,) box; C (m, n_outputs), d (m,): the region's rows.
        starts: (S, n_inputs) extra starting points (clipped into the box), or None.
        seed: seed of the uniform starts (numpy PCG64; fixed seeds give fixed points).
        deadline: ``time.monotonic()`` value; the run stops at the first step after it.
    Returns:
        (K, n_inputs) float64 points, in the box, whose IR outputs satisfy every row
        with the slack κ, in order of their loss at the end (K may be 0). Candidates
        only: replay decides.
    """
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    width = hi - lo
    rng = np.random.default_rng(seed)
    pts = [((lo + hi) / 2)[None, :], lo + width * rng.random((random_starts, lo.size))]
    if starts is not None and len(starts):
        pts.append(np.clip(np.asarray(starts, dtype=np.float64), lo, hi))
    x = np.concatenate(pts)
    kappa = 1e-6 * (1.0 + np.abs(d))
    found: dict[bytes, tuple[float, np.ndarray]] = {}
    decay = 0.01 ** (1.0 / max(1, steps - 1))
    eta = STEP0
    for _ in range(steps + 1):
        vals = ir.node_values(x)
        y = np.concatenate([vals[i] for i in ir.outputs], axis=1)
        slack = matmul(y, C.T) - d + kappa  # (S, m)
        inside = np.all(slack <= 0, axis=1)
        for k in np.nonzero(inside)[0]:
            found.setdefault(x[k].tobytes(), (float(np.max(slack[k])), x[k].copy()))
        if len(found) >= 4 or (deadline is not None and time.monotonic() > deadline):
            break
        active = slack > 0  # rows still violated pull; satisfied rows do not
        g = _input_gradient(ir, vals, matmul(active.astype(np.float64), C))
        x = np.clip(x - eta * np.sign(g) * width, lo, hi)
        eta *= decay
    return np.array([p for _, p in sorted(found.values(), key=lambda t: t[0])]).reshape(-1, lo.size)
