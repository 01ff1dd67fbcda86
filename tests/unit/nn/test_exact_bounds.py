"""Exact symbolic bounds (verification/nn/exact_bounds.py): the confirmation's first pass."""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REFERENCE_MODEL, REFERENCE_SLA
from mi_certify.generator.core.ir import AffineNode, ControllerIR, InputNode, ReluNode
from mi_certify.generator.core.spec import load_spec
from mi_certify.generator.frontend.model import load_model
from mi_certify.verification.nn.exact_bounds import ExactBounds
from mi_certify.verification.nn.nn_verify import Verdict, VerifyOptions, decide
from mi_certify.verification.nn.properties import Disjunct, Query, spec_queries
from mi_certify.verification.nn.z3_exact import ExactChecker
from test_verification import _random_dag


def test_an_unstable_relu_whose_slope_is_not_dyadic_gets_a_bound_at_or_below_the_true_minimum():
    """-relu(x) on [-1, 2]: the minimum is -2 at x = 2. The upper line's slope is 2/3, not a
    dyadic: rounded up, the bound is at most -2 (exactly); rounded down it would be above -2."""
    ir = ControllerIR((InputNode(1), AffineNode(((0, np.array([[1.0]])),), np.array([0.0])), ReluNode(1, 1),
                       AffineNode(((2, np.array([[-1.0]])),), np.array([0.0]))), (3,))
    (low,), _ = ExactBounds(ir).lower_bounds(np.array([[1.0]]), np.array([-1.0]), np.array([2.0]))
    assert Fraction(-2) - Fraction(1, 2 ** 36) < low <= Fraction(-2)


def test_stable_relus_give_the_exact_affine_minimum():
    """All ReLUs active over the box: the network is affine there and the bound is its minimum."""
    w1, b1, w2 = np.array([[1.0, 2.0], [0.5, -1.0]]), np.array([10.0, 10.0]), np.array([[3.0, -0.25]])
    ir = ControllerIR((InputNode(2), AffineNode(((0, w1),), b1), ReluNode(1, 2), AffineNode(((2, w2),), np.zeros(1))),
                      (3,))
    lo, hi = np.array([0.0, 0.0]), np.array([1.0, 1.0])
    (low,), _ = ExactBounds(ir).lower_bounds(np.array([[1.0]]), lo, hi)
    # y = 3 (x0 + 2 x1 + 10) - 0.25 (0.5 x0 - x1 + 10) = 2.875 x0 + 6.25 x1 + 27.5: minimum at (0, 0)
    assert low == Fraction(55, 2)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10 ** 6), n_in=st.integers(1, 5), widths=st.lists(st.integers(1, 4), min_size=1, max_size=2),
       n_out=st.integers(1, 3))
def test_each_bound_holds_over_the_rationals_by_z3(seed, n_in, widths, n_out):
    """For random networks (with a skip connection from the input to the outputs), boxes and rows: no point of the box has ``C_r y`` below the bound
    (Z3 over the rationals: ``C_r y <= bound - 2**-20`` is unsat), and the bound is not above the
    minimum of 500 sampled points. ``closes`` is never True where Z3 finds a point."""
    rng = np.random.default_rng(seed)
    ir = _random_dag(rng, n_in, widths, n_out)
    lo = rng.uniform(-2, 1, n_in)
    hi = lo + rng.uniform(0, 2, n_in)
    C = rng.standard_normal((2, n_out))
    lows, _ = ExactBounds(ir).lower_bounds(C, lo, hi)
    ys = ir.evaluate(lo + (hi - lo) * rng.random((500, n_in))) @ C.T
    for r in range(2):
        assert float(lows[r]) <= ys[:, r].min() + 1e-9
        below = float(lows[r] - Fraction(1, 2 ** 20))
        assert ExactChecker(ir, C[r:r + 1], np.array([below])).check(lo, hi, 60.0)[0] == "unsat"
    d = np.quantile(ys, 0.02, axis=0)   # most such regions are not empty
    closed, score = ExactBounds(ir).closes(C, d, lo, hi)
    res, _ = ExactChecker(ir, C, d).check(lo, hi, 60.0)
    assert res in ("sat", "unsat")
    assert not (closed and res == "sat")
    assert score.shape == (n_in,) and np.all(score >= 0)


def test_the_reference_properties_are_confirmed_by_exact_bounds_without_z3():
    """The reference's P1-P3: every box of the proof partitions closed by exact bounds (they took
    Z3 21 s on 2 cores for P2, and ran out of time on one core)."""
    model = load_model(REFERENCE_MODEL)
    for query in spec_queries(load_spec(REFERENCE_SLA)):
        r = decide(model, query, VerifyOptions(timeout=60.0))
        assert r.verdict == Verdict.PROVED, (query.id, r.detail, r.errors)
        assert r.method.endswith("; confirmed by exact bounds"), r.method
        assert r.stats["z3_calls"] == 0 and r.stats["exact_closed"] >= 1


def test_a_box_that_holds_a_point_of_the_region_is_left_to_z3_and_reported():
    """A wrong PROVED (a partition box that holds a point of the region) is never closed by the
    exact bounds: Z3 gets what they leave open and finds the point; the message names box and point."""
    from mi_certify.verification.nn import nn_verify
    ir = ControllerIR((InputNode(1), AffineNode(((0, np.array([[1.0]])),), np.array([0.0])), ReluNode(1, 1),
                       AffineNode(((2, np.array([[1.0]])),), np.array([0.0]))), (3,))
    dj = Disjunct(np.array([0.0]), np.array([1.0]), np.array([[1.0]]), np.array([0.5]))  # relu(x) <= 0.5: x <= 0.5
    query = Query("Q", "property", (dj,))
    stats = {"z3_calls": 0}
    msg = nn_verify._confirm_partitions(ir, query, [[(np.array([0.0]), np.array([1.0]))]],
                                        time.monotonic() + 60.0, stats)
    # the exact pass bisects (8 times at most) before it gives up; Z3 finds a point in what is left
    assert msg is not None and msg.startswith("Z3 does not confirm PROVED on box lo=["), msg
    x = float(msg.split("sat at x=[")[1].rstrip("]"))
    assert 0.0 <= x <= 0.5
    assert stats["z3_calls"] >= 1


@pytest.mark.parametrize("boxes, spike", [
    ([(0.0, 0.5 - 1e-10), (0.5 + 1e-10, 1.0)], 0.5),   # a sliver missing: relative volume 2e-10
    ([(0.0, 0.6), (0.4, 0.8)], 0.9),                   # overlapping boxes whose volumes sum to 1
])
def test_a_proof_partition_that_misses_part_of_the_region_is_not_confirmed(boxes, spike):
    """The confirmation partitions the region itself; the search's boxes only guide its cuts. A
    network with a spike of width 2e-12 where the region's property fails, and a "proof" partition
    that misses the spike: Z3 finds it (a volume check alone accepted both partitions)."""
    from mi_certify.verification.nn import nn_verify
    w1, b1 = np.array([[1.0], [-1.0]]), np.array([-spike, spike])
    w2, b2 = np.array([[-1e12, -1e12], [0.0, 0.0]]), np.array([1.0, 0.0])   # y0 = 1 - 1e12 |x - spike|
    ir = ControllerIR((InputNode(1), AffineNode(((0, w1),), b1), ReluNode(1, 2), AffineNode(((2, w2),), b2)), (3,))
    dj = Disjunct(np.array([0.0]), np.array([1.0]), np.array([[-1.0, 0.0]]), np.array([-0.5]))   # y0 >= 0.5
    stats = {"z3_calls": 0}
    msg = nn_verify._confirm_partitions(ir, Query("GAP", "output", (dj,)),
                                        [[(np.array([a]), np.array([b])) for a, b in boxes]],
                                        time.monotonic() + 60.0, stats)
    assert msg is not None and msg.startswith("Z3 does not confirm PROVED on box"), msg
    assert msg.endswith(f"sat at x=[{spike}]"), msg


@settings(max_examples=200, deadline=None)
@given(v=st.integers(-(1 << 200), 1 << 200), e=st.integers(0, 300))
def test_node_bounds_are_rounded_down_to_their_grid(v, e):
    """A node's lower bound ``v * 2**-e`` becomes floor(v * 2**-e * 2**NODE_BITS): never above
    the exact value (upper bounds are rounded through the same floor of their negation)."""
    import math
    from mi_certify.verification.nn.exact_bounds import NODE_BITS, _floor_scaled
    assert _floor_scaled(v, e) == math.floor(Fraction(v, 1 << e) * (1 << NODE_BITS))


def test_a_disjunct_without_hints_is_still_checked():
    """The search's boxes are hints only: a query whose hint lists are missing (none at all, or
    one for the first of two disjuncts) is not confirmed when a disjunct's region holds a point
    (relu(x) <= 0.5 on [0, 1]); zip() over the hints used to skip that disjunct."""
    from mi_certify.verification.nn import nn_verify
    ir = ControllerIR((InputNode(1), AffineNode(((0, np.array([[1.0]])),), np.array([0.0])), ReluNode(1, 1),
                       AffineNode(((2, np.array([[1.0]])),), np.array([0.0]))), (3,))
    bad = Disjunct(np.array([0.0]), np.array([1.0]), np.array([[1.0]]), np.array([0.5]))
    empty = Disjunct(np.array([0.0]), np.array([1.0]), np.array([[1.0]]), np.array([-1.0]))
    for query, hints in ((Query("Q", "property", (bad,)), []),
                         (Query("Q2", "property", (empty, bad)), [[(np.array([0.0]), np.array([1.0]))]])):
        msg = nn_verify._confirm_partitions(ir, query, hints, time.monotonic() + 60.0, {"z3_calls": 0})
        assert msg is not None and "sat at x=[" in msg, (query.id, msg)


@pytest.mark.parametrize("d", [-1.0, 1.0])
def test_coefficients_beyond_float64_range_still_rank_and_bound(d):
    """y = 1e200 relu(1e200 x) on [-1e-250, 1e-250]: every value is a finite float64, but the input
    coefficient 1e400 is not (converting it for the bisection's ranking raised OverflowError). y <= 1
    holds at x = 0, so that region is never closed; y <= -1 is empty, but the ReLU's bounds on their
    2**-64 grid are symmetric, so the relaxation may not show it: then Z3 takes the piece."""
    ir = ControllerIR((InputNode(1), AffineNode(((0, np.array([[1e200]])),), np.array([0.0])), ReluNode(1, 1),
                       AffineNode(((2, np.array([[1e200]])),), np.array([0.0]))), (3,))
    shut, score = ExactBounds(ir).closes(np.array([[1.0]]), np.array([d]), np.array([-1e-250]), np.array([1e-250]))
    assert (shut and d < 0) or (not shut and score[0] == np.inf)


def test_a_confirmation_that_raises_makes_the_verdict_unknown(monkeypatch):
    """An exception inside the confirmation (inputs beyond float64's range raised OverflowError
    there) is no confirmation: the query is UNKNOWN, naming the error, never PROVED."""
    from mi_certify.verification.nn import nn_verify

    def boom(*args, **kwargs):
        raise OverflowError("int too large to convert to float")
    monkeypatch.setattr(nn_verify, "_confirm_partitions", boom)
    query = next(q for q in spec_queries(load_spec(REFERENCE_SLA)) if q.id == "P3")
    r = decide(load_model(REFERENCE_MODEL), query, VerifyOptions(timeout=60.0))
    assert r.verdict == Verdict.UNKNOWN
    assert r.errors == ["confirmation failed: OverflowError: int too large to convert to float"], r.errors
