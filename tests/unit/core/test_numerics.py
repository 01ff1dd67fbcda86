"""Fixed-order float64 arithmetic (generator/core/numerics.py) and the deterministic trainer (generator/frontend/mlp.py)."""

from __future__ import annotations

import math
from decimal import Decimal, getcontext

import numpy as np
import pytest

from mi_certify.generator.core import numerics as N
from mi_certify.generator.frontend.mlp import DeterministicMLP


def _sequential(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The definition: each entry summed left to right in Python floats (IEEE binary64)."""
    out = np.zeros((a.shape[0], b.shape[1]))
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            s = 0.0
            for k in range(a.shape[1]):
                s += float(a[i, k]) * float(b[k, j])
            out[i, j] = s
    return out


@pytest.mark.parametrize("seed", range(6))
def test_matmul_is_the_left_to_right_sum_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    n, k, m = rng.integers(1, 9, size=3)
    a = rng.standard_normal((n, k)) * 10.0 ** rng.integers(-8, 9, size=(n, k))
    b = rng.standard_normal((k, m)) * 10.0 ** rng.integers(-8, 9, size=(k, m))
    got = N.matmul(a, b)
    assert got.tobytes() == _sequential(a, b).tobytes()
    # batched, vector and transposed forms agree with the same definition
    assert N.matmul(np.stack([a, a]), b)[1].tobytes() == got.tobytes()
    assert N.matmul(a, b[:, 0]).tobytes() == got[:, 0].tobytes()
    assert N.matmul(a[0], b).tobytes() == got[0].tobytes()
    x = rng.standard_normal((3, k))
    lam = rng.standard_normal((3, 2, k))
    ref = np.array([[sum((float(lam[i, r, q]) * float(x[i, q]) for q in range(k)), 0.0) for r in range(2)]
                    for i in range(3)])
    assert np.allclose(N.rowdot(lam, x), ref, rtol=1e-12, atol=0)


def _same_bits(x, y) -> bool:
    x, y = np.asarray(x), np.asarray(y)
    return x.shape == y.shape and bool(np.all((x.view(np.int64) == y.view(np.int64)) | (np.isnan(x) & np.isnan(y))))


@pytest.mark.parametrize("seed", range(4))
def test_compiled_kernels_give_the_numpy_loops_bits(seed):
    """The numba kernels (matmul, rowdot, sum_last) issue the same IEEE operations in the
    same order as the one-ufunc-at-a-time numpy loops: bit for bit on this CPU, whatever
    SIMD it has (an FMA or a reassociated sum would show in these magnitudes at once)."""
    rng = np.random.default_rng(100 + seed)
    B, m, k, n = (int(v) for v in rng.integers(1, 40, size=4))
    scale = lambda shape: rng.standard_normal(shape) * 10.0 ** rng.integers(-12, 13, size=shape)  # noqa: E731
    a, w, x = scale((B, m, k)), scale((k, n)), scale((B, k))
    a.flat[:3] = [np.inf, -0.0, 5e-324]  # IEEE corner values travel the same way
    assert _same_bits(N.matmul(a, w), N._matmul_numpy(a, w))
    assert _same_bits(N.matmul(a, w[:, 0]), N._matmul_numpy(a, w[:, 0]))
    assert _same_bits(N.matmul(x[0], w), N._matmul_numpy(x[0], w))
    at, v = np.swapaxes(a, 1, 2), scale((m, n))  # a strided operand
    assert _same_bits(N.matmul(at, v), N._matmul_numpy(at, v))
    stack = scale((3, k, n))  # a matrix times a stack of matrices (the importer composing MatMul chains)
    stack.flat[:2] = [np.inf, 0.0]
    assert _same_bits(N.matmul(a[0], stack), N._matmul_numpy(a[0], stack))
    assert _same_bits(N.matmul(a[0], stack[:, :, :0]), N._matmul_numpy(a[0], stack[:, :, :0]))
    assert _same_bits(N.matmul(a[0], stack[:0]), N._matmul_numpy(a[0], stack[:0]))
    assert _same_bits(N.rowdot(a, x), N._rowdot_numpy(a, x))
    assert _same_bits(N.sum_last(a), N._sum_last_numpy(a))
    assert _same_bits(N.sum_last(a[:, :, :0]), np.zeros((B, m)))


def test_matmul_refuses_misaligned_shapes():
    with pytest.raises(ValueError, match="do not align"):
        N.matmul(np.ones((2, 3)), np.ones((2, 3)))


def test_exp_is_within_three_ulp_and_exp_upper_is_a_sound_upper_bound():
    getcontext().prec = 50
    xs = np.concatenate([np.linspace(-745, 709, 4001), np.linspace(-1, 1, 2001), [0.0, -0.0, 1e-300, -1e-300]])
    e = N.exp(xs)
    ref = np.array([math.exp(v) for v in xs])
    normal = ref > 1e-300
    assert np.all(np.abs(e[normal] - ref[normal]) <= 3 * np.spacing(ref[normal]))
    up = N.exp_upper(xs)
    for v, u in zip(xs[::37], up[::37]):
        assert Decimal(float(u)) >= Decimal(float(v)).exp()
    assert N.exp(np.array([710.0]))[0] == math.inf and N.exp(np.array([0.0]))[0] == 1.0


def test_log_is_within_four_ulp():
    xs = np.concatenate([np.geomspace(1e-300, 1e300, 3001), np.linspace(0.5, 2.0, 3001)])
    ref = np.array([math.log(v) for v in xs])
    assert np.all(np.abs(N.log(xs) - ref) <= 4 * np.spacing(np.maximum(np.abs(ref), 1e-300)) + 1e-300)


def test_softmax_lower_never_exceeds_the_true_probability():
    getcontext().prec = 50
    rng = np.random.default_rng(5)
    margins = np.vstack([rng.uniform(-30, 30, (200, 3)), np.zeros((1, 3)), np.full((1, 3), 800.0),
                         np.full((1, 3), -800.0)])
    low = N.softmax_lower(margins)
    for m, p in zip(margins, low):
        true = 1 / (1 + sum(Decimal(-float(v)).exp() for v in m))
        assert Decimal(float(p)) <= true
        assert float(true) - p < 1e-12 or float(true) < 1e-300
    assert low[-3] == pytest.approx(0.25, abs=1e-12)


def test_the_trainer_learns_a_separable_problem_and_repeats_itself_bit_for_bit():
    rng = np.random.default_rng(0)
    x = rng.random((300, 3))
    y = (x[:, 0] + x[:, 1] > 1.0).astype(int) + 2 * (x[:, 2] > 0.7)
    a = DeterministicMLP((8, 8), alpha=1e-3, max_iter=400, random_state=1).fit(x, y)
    b = DeterministicMLP((8, 8), alpha=1e-3, max_iter=400, random_state=1).fit(x, y)
    assert (a.predict(x) == y).mean() >= 0.97
    assert all(p.tobytes() == q.tobytes() for p, q in zip(a.coefs_ + a.intercepts_, b.coefs_ + b.intercepts_))
    assert list(a.classes_) == [0, 1, 2, 3] and a.predict_proba(x).shape == (300, 4)
    np.testing.assert_allclose(a.predict_proba(x).sum(axis=1), 1.0, atol=1e-12)
    c = DeterministicMLP((8, 8), alpha=1e-3, max_iter=400, random_state=2).fit(x, y)
    assert c.coefs_[0].tobytes() != a.coefs_[0].tobytes()


@pytest.mark.parametrize("seed", range(4))
def test_sparse_operands_give_the_plain_loops_bits(seed):
    """matmul skips zero terms of finite operands (sparse lattice layers cost their nonzeros):
    the skipped ``+ ±0`` never changes a sum, also where sums cancel to zero, products underflow
    to ±0 or factors are -0.0; an infinity in either operand takes the plain loop (0 · inf = NaN)."""
    rng = np.random.default_rng(200 + seed)
    P, k, n = (int(v) for v in rng.integers(2, 30, size=3))
    a = rng.choice([0.0, -0.0, 1.0, -1.0, 1e-300, -2.5, 5e-324], size=(P, k))
    b = rng.choice([0.0, -0.0, 1.0, -1.0, 1e-300, 3.0, -5e-324], size=(k, n), p=[.5, .2, .1, .1, .04, .04, .02])
    assert _same_bits(N.matmul(a, b), N._matmul_numpy(a, b))
    assert _same_bits(N.matmul(b.T, a.T), N._matmul_numpy(b.T, a.T))
    a[0, 0], b[-1, -1] = np.inf, np.nan
    got = N.matmul(a, b)
    assert _same_bits(got, N._matmul_numpy(a, b)) and np.isnan(got).any()


@pytest.mark.parametrize("seed", range(4))
def test_a_finite_sparse_operand_meets_an_infinity_with_the_plain_loops_bits(seed):
    """A finite :class:`Sparse` keeps no dense copy: an operand with an infinity or a NaN gets the
    plain loop over the matrix made again from the nonzeros, the same bits as the original matrix
    (its -0.0 entries dropped: a sum starts at +0, and inf · ±0 is NaN either way)."""
    rng = np.random.default_rng(300 + seed)
    P, k, n = (int(v) for v in rng.integers(2, 30, size=3))
    b = rng.choice([0.0, -0.0, 1.0, -1.0, 1e-300, 3.0, -5e-324], size=(k, n), p=[.5, .2, .1, .1, .04, .04, .02])
    sp = N.sparse(b)
    assert sp.finite and sp.kept is None and sp.shape == b.shape
    assert np.array_equal(sp.dense, b) and not np.signbit(sp.dense[b == 0]).any()
    a = rng.choice([0.0, -0.0, 1.0, -1.0, 1e-300, -2.5, 5e-324], size=(P, k))
    assert _same_bits(N.matmul(a, sp), N._matmul_numpy(a, b))
    a[rng.integers(P), rng.integers(k)] = rng.choice([np.inf, -np.inf, np.nan])
    got = N.matmul(a, sp)
    assert _same_bits(got, N._matmul_numpy(a, b)) and not np.isfinite(got).all()
    b[0, 0] = np.inf   # a matrix that is not finite is kept whole
    assert N.sparse(b).kept is not None and not N.sparse(b).finite


@pytest.mark.parametrize("seed", range(4))
def test_every_prepared_weight_form_is_the_operand_of_the_dense_form(seed):
    """ir.prepared_terms makes a sparse finite w's forms from its nonzeros alone (never a dense
    array): each is field for field, bit for bit, what numerics.operand gives for the dense form
    (signed zeros, subnormals, a row or column of zeros); a dense or non-finite w takes operand itself."""
    from mi_certify.generator.core.ir import _FORMS, AffineNode, ControllerIR, InputNode, ReluNode, prepared_terms
    rng = np.random.default_rng(500 + seed)
    k, n = (int(v) for v in rng.integers(2, 40, size=2))
    sparse_w = rng.choice([0.0, -0.0, 1.5, -2.0, 5e-324, -1e-300], size=(k, n), p=[.7, .12, .06, .06, .03, .03])
    sparse_w[rng.integers(k)] = 0.0
    dense_w = rng.standard_normal((3, k))
    bad_w = np.where(rng.random((3, k)) < 0.9, 0.0, 1.0)
    bad_w[0, 0] = -np.inf
    ir = ControllerIR((InputNode(n), AffineNode(((0, sparse_w),), np.zeros(k)), ReluNode(1, k),
                       AffineNode(((2, dense_w), (0, np.zeros((3, n)))), np.zeros(3)),
                       AffineNode(((2, bad_w),), np.zeros(3))), (3, 4))
    for nid in (1, 3, 4):
        for form, make in _FORMS.items():
            for (src, got), (want_src, w) in zip(prepared_terms(ir, nid, form), ir.nodes[nid].terms):
                want = N.operand(make(w))
                assert src == want_src and type(got) is type(want), (nid, form)
                if isinstance(want, N.Sparse):
                    assert got.shape == want.shape and got.finite == want.finite, (nid, form)
                    for f in ("indptr", "indices", "values"):
                        assert getattr(got, f).tobytes() == getattr(want, f).tobytes(), (nid, form, f)
                    assert (got.kept is None) == (want.kept is None)
                else:
                    assert got.tobytes() == want.tobytes(), (nid, form)
            assert prepared_terms(ir, nid, form) is prepared_terms(ir, nid, form)   # made once
    assert isinstance(prepared_terms(ir, 1, "w")[0][1], N.Sparse) and not isinstance(prepared_terms(ir, 3, "w")[0][1],
                                                                                     N.Sparse)


@pytest.mark.parametrize("seed", range(4))
def test_pair_rows_product_is_the_full_products_bits_on_the_columns_it_keeps(seed):
    """pair_rows_product (CROWN's compacted backward pass): a1 @ w[rows] and a2 @ |w|[rows] on the
    columns reached, bit for bit the full sparse products with zeros outside ``rows``; every other
    column of the full products is exactly zero."""
    rng = np.random.default_rng(400 + seed)
    K, n, P = (int(v) for v in rng.integers(3, 40, size=3))
    w = rng.choice([0.0, 0.0, 0.0, 1.5, -2.0, 1e-300, -0.0], size=(K, n))
    rows = np.sort(rng.choice(K, size=int(rng.integers(1, K + 1)), replace=False))
    a1 = rng.choice([0.0, 1.0, -3.0, 1e-200, -0.0], size=(P, rows.size))
    a2 = rng.choice([0.0, 0.0, 2.0, 1e-3], size=a1.shape)  # its own zeros (CROWN's magnitudes outlive cancellations)
    a1[:, rng.random(rows.size) < 0.5] = 0.0  # rows that only a2 reaches
    o1, o2, cols = N.pair_rows_product(a1, a2, rows, N.sparse(w), N.sparse(np.abs(w)))
    full1, full2 = np.zeros((P, K)), np.zeros((P, K))
    full1[:, rows], full2[:, rows] = a1, a2
    r1, r2 = N.matmul(full1, N.sparse(w)), N.matmul(full2, N.sparse(np.abs(w)))
    assert _same_bits(o1, r1[:, cols]) and _same_bits(o2, r2[:, cols])
    rest = np.setdiff1d(np.arange(n), cols)
    assert not r1[:, rest].any() and not r2[:, rest].any()
    assert np.all(np.diff(cols) > 0)
