"""Certified training's interval bounds, gradients and cell plan (generator/frontend/certified.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from mi_certify.generator.frontend.certified import (cell_grid, ibp_cross_entropy, ibp_logit_bounds, ibp_margin_upper,
                                                     plan_cells)


def _net(rng, sizes):
    ws = [rng.normal(size=(a, b)) for a, b in zip(sizes[:-1], sizes[1:])]
    bs = [rng.normal(size=b) for b in sizes[1:]]
    return ws, bs


def _forward(ws, bs, x):
    a = x
    for k, (w, b) in enumerate(zip(ws, bs)):
        a = a @ w + b
        if k < len(ws) - 1:
            a = np.maximum(a, 0.0)
    return a


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_in=st.integers(1, 6), h1=st.integers(1, 12), h2=st.integers(1, 12),
       k=st.integers(2, 5), scale=st.floats(0.0, 0.6))
def test_ibp_bounds_bound_the_network_on_random_boxes(seed, n_in, h1, h2, k, scale):
    rng = np.random.default_rng(seed)
    ws, bs = _net(rng, [n_in, h1, h2, k])
    c = rng.random((8, n_in))
    r = rng.random((8, n_in)) * scale
    lo, hi = ibp_logit_bounds(ws, bs, c, r)
    t = rng.integers(0, k, 8)
    mub = ibp_margin_upper(ws, bs, c, r, t)
    pts = c[:, None, :] + r[:, None, :] * rng.uniform(-1, 1, (8, 200, n_in))
    pts[:, :2] = c[:, None, :] + r[:, None, :] * np.sign(rng.uniform(-1, 1, (8, 2, n_in)))  # corners too
    y = _forward(ws, bs, pts)
    tol = 1e-9 * (1 + np.abs(y))
    assert np.all(y >= lo[:, None] - tol) and np.all(y <= hi[:, None] + tol)
    marg = y - np.take_along_axis(y, t[:, None, None].repeat(y.shape[1], 1), axis=2)
    assert np.all(marg <= mub[:, None] + 1e-9 * (1 + np.abs(marg)))
    # the margin bound is never looser than the difference of the logit bounds
    assert np.all(mub <= hi - lo[np.arange(8), t][:, None] + 1e-9)


def test_ibp_cross_entropy_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    ws, bs = _net(rng, [5, 7, 6, 4])
    c, r = rng.random((30, 5)), rng.random((30, 5)) * 0.1
    t = rng.integers(0, 4, 30)
    cols = rng.random((30, 4)) < 0.7
    w = rng.random(30)
    loss, gw, gb = ibp_cross_entropy(ws, bs, c, r, t, cols, w)
    h, worst = 1e-6, 0.0
    for k in range(3):
        for params, grads in ((ws, gw), (bs, gb)):
            for idx in np.ndindex(params[k].shape):
                p2 = [p.copy() for p in params]
                p2[k][idx] += h
                args = (p2, bs) if params is ws else (ws, p2)
                num = (ibp_cross_entropy(*args, c, r, t, cols, w)[0] - loss) / h
                worst = max(worst, abs(num - grads[k][idx]))
    assert 0 < loss < 1e4 and worst < 1e-4


def test_cell_grid_is_in_address_order():
    levels, centres, half = cell_grid([2, 1])
    assert levels.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0], [3, 1]]
    np.testing.assert_array_equal(centres[5], [0.625, 0.75])
    np.testing.assert_array_equal(half, [0.125, 0.25])


def test_plan_gives_up_one_side_of_every_face_between_different_actions():
    # one input, 8 levels: class 1 wins on levels 0-3, class 2 on 4-7, conservative class 0
    logits = np.zeros((8, 3))
    logits[:4, 1] = 1.0
    logits[4:, 2] = 1.0
    counts = np.zeros((8, 3), dtype=np.int64)
    counts[6, 1] = 2  # data in cell 6 says class 1
    allowed = np.ones((8, 3), dtype=bool)
    plan = plan_cells([3], logits, counts, allowed, np.zeros(8, dtype=bool), 0)
    # targets 1 1 1 1 2 2 1 2: faces 3|4, 5|6, 6|7; 3|4 gives up cell 4 (no rows, higher address),
    # 5|6 gives up 5 (fewer rows), 6|7 gives up 7
    assert plan.target.tolist() == [1, 1, 1, 1, 0, 0, 1, 0]
    assert plan.certify.tolist() == [True, True, True, True, False, False, True, False]
    assert plan.conflicts == 0
    # a require box is never given up; a forbid box removes the forbidden class from the targets
    required = np.zeros(8, dtype=bool)
    required[4] = True
    allowed[4] = [True, False, False]
    allowed[0] = [True, True, False]
    plan = plan_cells([3], logits, counts, allowed, required, 0)
    assert plan.target[4] == 0 and plan.certify[4] and not plan.certify[3]
    assert plan.forbidden[0].tolist() == [False, False, True]
