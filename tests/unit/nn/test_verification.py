"""Network verification: answers on the Marabou-bug cases and the public anchors, every answer checked."""

from __future__ import annotations

import csv
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ANCHORS, CASES, REFERENCE_MODEL, REFERENCE_SLA, running, spawned_workers
from mi_certify.generator.frontend.model import load_model
from mi_certify.generator.frontend.onnx_import import evaluate_onnxruntime, import_onnx
from mi_certify.generator.core.spec import load_spec
from mi_certify.generator.core.ir import AffineNode, ControllerIR, InputNode, ReluNode
from mi_certify.verification.nn.bounds import (LOWER_SLOPES, NodeBounds, crown_bounds, forward_bounds,
                                             interval_bounds, output_bounds, output_matrix_lower)
from mi_certify.verification.nn.falsify import pgd_search
from mi_certify.verification.nn.nn_verify import Verdict, VerifyOptions, decide
from mi_certify.verification.nn.properties import Disjunct, Query
from mi_certify.verification.nn.vnnlib import parse_vnnlib, read_counterexample

FAST = VerifyOptions(timeout=30)
MARABOU_ONLY = VerifyOptions(timeout=30, max_boxes=0)  # every box goes straight to Marabou


def q(lo, hi, C, d, name="q") -> Query:
    return Query(name, "test", (Disjunct(np.array(lo, float), np.array(hi, float), np.array(C, float),
                                         np.array(d, float)),))


@pytest.mark.parametrize("opts", [FAST, MARABOU_ONLY], ids=["bounds", "marabou"])
def test_skip_add_fixed_input_cannot_reach_3(opts):
    path = CASES / "marabou_add_fanout" / "skip_add.onnx"
    x0 = [0.6, -1.1]
    res = decide(load_model(path), q(x0, x0, [[0, 0, -1]], [-3.0]), opts)  # y[2] >= 3 (true y[2] = 2.585)
    assert res.verdict == Verdict.PROVED, res


@pytest.mark.parametrize("opts", [FAST, MARABOU_ONLY], ids=["bounds", "marabou"])
@pytest.mark.parametrize("path", sorted(CASES.glob("marabou_*/*.onnx")), ids=lambda p: p.name)
def test_fixed_input_without_output_constraint_is_sat_with_the_onnxruntime_output(path, opts):
    ir = import_onnx(path)
    x0 = np.linspace(0.3, -0.2, ir.n_inputs)
    res = decide(load_model(path), Query("fixed", "test", (Disjunct(x0, x0, np.zeros((1, ir.n_outputs)), np.zeros(1)),)),
                 opts)
    assert res.verdict == Verdict.VIOLATED
    np.testing.assert_allclose(res.witness["y_onnxruntime"], evaluate_onnxruntime(path, x0[None])[0], rtol=1e-6)


@pytest.mark.parametrize("opts", [FAST, MARABOU_ONLY], ids=["bounds", "marabou"])
@pytest.mark.parametrize("name", ["add_self", "add_input_self"])
def test_duplicate_addend_query_is_sat(name, opts):
    path = CASES / "marabou_duplicate_addend" / f"{name}.onnx"
    res = decide(load_model(path), q([0, 0], [1, 1], [[0, -1]], [-1.2]), opts)  # y[1] >= 1.2
    assert res.verdict == Verdict.VIOLATED
    assert res.witness["y_onnxruntime"][1] >= 1.2 - 1e-4
    assert all(0 <= v <= 1 for v in res.witness["x"])


def test_inverted_input_bounds_are_unsat_without_a_solver_and_named():
    path = CASES / "marabou_inverted_bounds" / "zero_column.onnx"
    res = decide(load_model(path), q([0, 1.5], [1, 0.5], np.zeros((1, 2)), [0.0]), FAST)
    assert res.verdict == Verdict.PROVED and "empty input region for X_1: [1.5, 0.5]" in res.detail
    ok = decide(load_model(path), q([0.5, 0], [1.5, 1], np.zeros((1, 2)), [0.0]), MARABOU_ONLY)
    assert ok.verdict == Verdict.VIOLATED and 0 <= ok.witness["x"][1] <= 1  # never a witness outside the box


@pytest.mark.parametrize("name", ["sub_same_shape", "sub_broadcast", "sub_const_minus_var"])
def test_sub_models_decide_tight_queries_both_ways(name):
    path = CASES / "marabou_sub_normalize" / f"{name}.onnx"
    x0 = np.array([0.1, -0.2, 0.3, 0.05, -0.4])
    y0 = evaluate_onnxruntime(path, x0[None])[0][0]
    above = decide(load_model(path), q(x0, x0, [[-1, 0, 0]], [-(y0 + 0.04)]), MARABOU_ONLY)
    below = decide(load_model(path), q(x0, x0, [[-1, 0, 0]], [-(y0 - 0.04)]), MARABOU_ONLY)
    assert (above.verdict, below.verdict) == (Verdict.PROVED, Verdict.VIOLATED)


def test_crown_and_interval_bounds_contain_every_sampled_output():
    rng = np.random.default_rng(11)
    for path in (ANCHORS / "acasxu" / "onnx" / "ACASXU_run2a_1_1_batch_2000.onnx", REFERENCE_MODEL):
        ir = import_onnx(path)
        for w in (0.01, 0.2):
            c = rng.uniform(0, 0.5, ir.n_inputs)
            lo, hi = c - w, c + w
            low, up = output_bounds(ir, lo, hi)
            ib = interval_bounds(ir, lo, hi)
            ys = ir.evaluate(lo + (hi - lo) * rng.random((5000, ir.n_inputs)))
            assert np.all(ys >= low) and np.all(ys <= up)
            # never looser than intervals (CROWN is intersected with them: it is not always the tighter)
            assert np.all(low >= ib.lower[ir.outputs[0]]) and np.all(up <= ib.upper[ir.outputs[0]])
            assert crown_bounds(ir, lo, hi).unstable(ir) <= ib.unstable(ir)


def test_batched_crown_equals_one_box_at_a_time_and_every_lower_relaxation_is_sound():
    rng = np.random.default_rng(5)
    for path in (ANCHORS / "acasxu" / "onnx" / "ACASXU_run2a_1_1_batch_2000.onnx", REFERENCE_MODEL):
        ir = import_onnx(path)
        lo = rng.uniform(0, 0.5, (6, ir.n_inputs))
        hi = lo + rng.uniform(0, 0.2, lo.shape)
        if path == REFERENCE_MODEL:  # physical units: the same boxes as shares of its envelope
            env = load_spec(REFERENCE_SLA).inputs
            base, span = np.array([i.min for i in env]), np.array([i.max - i.min for i in env])
            lo, hi = base + lo * span, base + hi * span
        C = rng.standard_normal((3, ir.n_outputs))
        low_b, lin_b = output_matrix_lower(ir, C, lo, hi)
        for k in range(len(lo)):
            low_1, lin_1 = output_matrix_lower(ir, C, lo[k], hi[k])
            np.testing.assert_allclose(low_b[k], low_1, rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(lin_b[k], lin_1, rtol=1e-9, atol=1e-9)
        best, _ = output_matrix_lower(ir, C, lo, hi, crown_bounds(ir, lo, hi, LOWER_SLOPES), LOWER_SLOPES)
        assert np.all(best >= low_b - 1e-9)
        if path != REFERENCE_MODEL:  # ACAS Xu's many unstable ReLUs: some other slope beats the adaptive one
            assert np.any(best > low_b + 1e-6)
        for k in range(len(lo)):
            ys = ir.evaluate(lo[k] + (hi[k] - lo[k]) * rng.random((4000, ir.n_inputs)))
            assert np.all(ys @ C.T >= best[k])


def _random_dag(rng, n_in: int, widths: list[int], n_out: int) -> ControllerIR:
    """An affine + ReLU network with a skip connection from the input to the output layer."""
    nodes = [InputNode(n_in)]
    prev, prev_size = 0, n_in
    for w in widths:
        nodes.append(AffineNode(((prev, rng.standard_normal((w, prev_size))),), rng.standard_normal(w)))
        nodes.append(ReluNode(len(nodes) - 1, w))
        prev, prev_size = len(nodes) - 1, w
    terms = ((0, rng.standard_normal((n_out, n_in))), (prev, rng.standard_normal((n_out, prev_size))))
    nodes.append(AffineNode(terms if prev else terms[:1], rng.standard_normal(n_out)))
    return ControllerIR(tuple(nodes), (len(nodes) - 1,))


@pytest.mark.parametrize("seed", range(6))
def test_forward_bounds_contain_every_node_value_and_are_never_looser_than_intervals(seed):
    rng = np.random.default_rng(seed)
    ir = _random_dag(rng, int(rng.integers(1, 8)), [int(v) for v in rng.integers(1, 12, size=rng.integers(1, 4))],
                     int(rng.integers(1, 5)))
    lo = rng.uniform(-1, 1, (5, ir.n_inputs))
    hi = lo + rng.uniform(0, 0.5, lo.shape) * (rng.random(lo.shape) > 0.2)  # some zero widths
    fb, ib = forward_bounds(ir, lo, hi), interval_bounds(ir, lo, hi)
    for k in range(5):
        x = lo[k] + (hi[k] - lo[k]) * rng.random((3000, ir.n_inputs))
        vals = [x]
        for node in ir.nodes[1:]:  # every node's value, by the IR's own arithmetic
            if isinstance(node, AffineNode):
                vals.append(sum(vals[s] @ w.T for s, w in node.terms) + node.bias)
            else:
                vals.append(np.maximum(vals[node.src], 0))
        for nid, v in enumerate(vals):
            assert np.all(v >= fb.lower[nid][k] - 1e-9) and np.all(v <= fb.upper[nid][k] + 1e-9), (nid, k)
            assert np.all(fb.lower[nid][k] >= ib.lower[nid][k]) and np.all(fb.upper[nid][k] <= ib.upper[nid][k])
    C = rng.standard_normal((2, ir.n_outputs))
    low, _ = output_matrix_lower(ir, C, lo, hi, fb)
    for k in range(5):
        ys = ir.evaluate(lo[k] + (hi[k] - lo[k]) * rng.random((3000, ir.n_inputs)))
        assert np.all(ys @ C.T >= low[k] - 1e-9)


def _node_values(ir: ControllerIR, x: np.ndarray) -> list:
    """Every node's value at the points x (P, n_inputs), by the IR's own arithmetic."""
    vals = [x]
    for node in ir.nodes[1:]:
        if isinstance(node, AffineNode):
            vals.append(sum(vals[s] @ w.T for s, w in node.terms) + node.bias)
        else:
            vals.append(np.maximum(vals[node.src], 0))
    return vals


@pytest.mark.parametrize("seed", range(8))
def test_bounds_clipped_to_a_parents_hold_every_node_value_and_are_never_looser(seed):
    """Input splitting clips a child box's bounds to its parent's CROWN bounds (forward_bounds ``clip``,
    bound_region ``clip``): each node's bounds must still hold every value over the child and lie within the
    clip. (Not within the unclipped bounds node by node: a tighter interval can switch a ReLU's adaptive
    lower slope, and a later node's linear bound may then come out a little looser; seed 6 shows it.)
    Fails if the clip is not applied (the containment) or is applied on the wrong side (the values)."""
    from mi_certify.verification.nn.input_split import bound_region
    rng = np.random.default_rng(100 + seed)
    ir = _random_dag(rng, int(rng.integers(1, 6)), [int(v) for v in rng.integers(6, 14, size=3)], int(rng.integers(1, 4)))
    plo = rng.uniform(-1, 1, ir.n_inputs)
    phi = plo + rng.uniform(0.2, 1.5, ir.n_inputs)
    parent = crown_bounds(ir, plo[None], phi[None])
    # children: both halves of the parent along every input (as input splitting makes them), and random
    # sub-boxes of it
    B = 2 * ir.n_inputs + 4
    lo, hi = np.repeat(plo[None], B, axis=0), np.repeat(phi[None], B, axis=0)
    mid = (plo + phi) / 2
    for i in range(ir.n_inputs):
        hi[2 * i, i], lo[2 * i + 1, i] = mid[i], mid[i]
    a, b = rng.random((4, ir.n_inputs)), rng.random((4, ir.n_inputs))
    lo[-4:], hi[-4:] = plo + (phi - plo) * np.minimum(a, b), plo + (phi - plo) * np.maximum(a, b)
    clip = NodeBounds([np.repeat(v, B, axis=0) for v in parent.lower], [np.repeat(v, B, axis=0) for v in parent.upper])
    own, clipped = forward_bounds(ir, lo, hi), forward_bounds(ir, lo, hi, clip=clip)
    Cm = rng.standard_normal((2, ir.n_outputs))
    dj = Disjunct(plo, phi, Cm, np.full(2, -1e9))   # a region no box closes: every child gets CROWN too
    _, _, tight = bound_region(ir, dj, lo, hi, deadline=float("inf"), clip=clip)
    tighter = 0
    for k in range(B):
        vals = _node_values(ir, lo[k] + (hi[k] - lo[k]) * rng.random((4000, ir.n_inputs)))
        for nid, v in enumerate(vals):
            for nb in (clipped, tight):
                assert np.all(v >= nb.lower[nid][k] - 1e-9) and np.all(v <= nb.upper[nid][k] + 1e-9), (nid, k)
            if nid:   # (the input node is the box itself)
                assert np.all(clipped.lower[nid][k] >= parent.lower[nid][0]), (nid, k)
                assert np.all(clipped.upper[nid][k] <= parent.upper[nid][0]), (nid, k)
            tighter += int(np.sum(clipped.lower[nid][k] > own.lower[nid][k]) + np.sum(clipped.upper[nid][k] < own.upper[nid][k]))
    # any sound bounds may clip: each child's own CROWN bounds (tighter than its forward bounds in these
    # three-layer networks) make a non-vacuous check that the clip is applied
    ccb = crown_bounds(ir, lo, hi)
    clipped2 = forward_bounds(ir, lo, hi, clip=ccb)
    for k in range(B):
        vals = _node_values(ir, lo[k] + (hi[k] - lo[k]) * rng.random((4000, ir.n_inputs)))
        for nid, v in enumerate(vals):
            assert np.all(v >= clipped2.lower[nid][k] - 1e-9) and np.all(v <= clipped2.upper[nid][k] + 1e-9), (nid, k)
            assert np.all(clipped2.lower[nid][k] >= ccb.lower[nid][k]) and np.all(clipped2.upper[nid][k] <= ccb.upper[nid][k])
            tighter += int(np.sum(clipped2.lower[nid][k] > own.lower[nid][k]) + np.sum(clipped2.upper[nid][k] < own.upper[nid][k]))
    assert tighter > 0


@pytest.mark.parametrize("seed", range(4))
def test_children_bounded_from_the_smart_picks_cheap_pass_get_the_same_bits(seed):
    """bound_children starts from the smart pick's pass over every half (Split.cheap) instead of computing
    the chosen halves' forward bounds and rows again: the children's bounds, rows and node bounds must be
    the bits of bounding them afresh (with their parents' bounds as the clip), boxes with and without
    kept parent bounds alike."""
    import dataclasses
    from mi_certify.verification.nn.input_split import Box, Frontier, bound_children, bound_region, choose_splits
    rng = np.random.default_rng(700 + seed)
    n_in = int(rng.integers(2, 5))
    ir = _random_dag(rng, n_in, [int(v) for v in rng.integers(6, 14, size=3)], 3)
    lo0, hi0 = -np.ones(n_in), np.ones(n_in)
    C = rng.standard_normal((2, 3))
    dj = Disjunct(lo0, hi0, C, np.array([-0.5, -0.5]))
    boxes = []
    for k in range(6):   # sub-boxes of the region, half of them with their own node bounds kept
        a, b = rng.random(n_in), rng.random(n_in)
        lo, hi = lo0 + 2 * np.minimum(a, b), lo0 + 2 * np.maximum(a, b)
        low, lin, nb = bound_region(ir, dj, lo[None], hi[None], float("inf"))
        flat = np.concatenate([v[0] for v in nb.lower] + [v[0] for v in nb.upper]) if seed % 2 or k % 2 else None
        boxes.append(Box(float(np.max(low[0] - dj.d)), k, lo, hi, lin[0], int(np.argmax(low[0] - dj.d)), None,
                         False, flat))
    batch = Frontier(boxes).pop_batch(6)
    split = choose_splits(ir, dj, batch, "smart", float("inf"), {"boxes": 0})
    assert split.cheap is not None
    got = bound_children(ir, dj, batch, split, None, float("inf"), {"boxes": 0})
    ref = bound_children(ir, dj, batch, dataclasses.replace(split, cheap=None), None, float("inf"), {"boxes": 0})
    for a, b in [(got.lo, ref.lo), (got.bound, ref.bound), (got.lin, ref.lin), (got.row, ref.row)] + \
            list(zip(got.nb.lower + got.nb.upper, ref.nb.lower + ref.nb.upper)):
        assert a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("seed", range(5))
def test_lp_chosen_slopes_give_the_lp_value_soundly_and_never_less_than_crown(seed):
    """The triangle LP only chooses λ and the slopes; the bound is our CROWN pass with them:
    it must hold at every sampled point, equal the LP's value (the LP dual is CROWN with
    those slopes, Salman et al. 2019) and not fall below CROWN's adaptive slopes for the same λ."""
    from mi_certify.verification.nn.bounds import combined_row_lower
    from mi_certify.verification.nn.lp_relax import TriangleLP
    rng = np.random.default_rng(seed)
    ir = _random_dag(rng, int(rng.integers(2, 6)), [int(v) for v in rng.integers(4, 16, size=rng.integers(1, 4))],
                     int(rng.integers(2, 5)))
    C = rng.standard_normal((3, ir.n_outputs))
    lo = rng.uniform(-1, 0, ir.n_inputs)
    hi = lo + rng.uniform(0.2, 1.0, ir.n_inputs)
    nb = crown_bounds(ir, lo[None], hi[None])
    ys = ir.evaluate(lo + (hi - lo) * rng.random((4000, ir.n_inputs)))
    d = np.min(ys @ C.T, axis=0) + 0.3  # a region that is not empty: the LP value is negative
    lp = TriangleLP(ir, C, d)
    value, lam, slopes = lp.hint(lo, hi, NodeBounds([v[0] for v in nb.lower], [v[0] for v in nb.upper]))
    assert lam.shape == (3,) and np.all(lam >= 0) and abs(lam.sum() - 1) < 1e-12
    assert all(np.all((s >= 0) & (s <= 1)) for s in slopes.values())
    got = combined_row_lower(ir, C, d, lam[None], lo[None], hi[None], nb, {k: v[None] for k, v in slopes.items()})[0]
    assert np.all((ys @ C.T - d) @ lam >= got - 1e-9)  # sound at every sampled point
    assert abs(got - value) <= 1e-6 * (1 + abs(value))  # the LP's optimum, reached by the sound pass
    adaptive = combined_row_lower(ir, C, d, lam[None], lo[None], hi[None], nb,
                                  {k: (nb.upper[ir.nodes[k].src] > -nb.lower[ir.nodes[k].src]).astype(float)
                                   for k in slopes})[0]
    assert got >= adaptive - 1e-9
    # any λ and slopes are sound, however bad: random ones too
    lam_w = rng.random(3)
    wild = combined_row_lower(ir, C, d, lam_w[None], lo[None], hi[None], nb,
                              {k: rng.random(v[None].shape) for k, v in slopes.items()})[0]
    assert np.isfinite(wild) and np.all((ys @ C.T - d) @ lam_w >= wild - 1e-9)


def test_fused_relu_step_gives_the_numpy_expressions_bits():
    from mi_certify.generator.core.numerics import sum_last
    from mi_certify.verification.nn.bounds import _relu_back, _relu_relaxation
    rng = np.random.default_rng(3)
    L = rng.standard_normal((4, 6, 9)) * 10.0 ** rng.integers(-9, 9, size=(4, 6, 9))
    L[0, 0, :3] = [-0.0, 0.0, 1e300]
    A = np.abs(L) + rng.random(L.shape)
    l = rng.standard_normal((4, 9))
    u = l + rng.random((4, 9)) * 3
    for lower in LOWER_SLOPES:
        s_lo, s_up, b_up = _relu_relaxation(l, u, lower)
        use_lo = L >= 0
        S = np.where(use_lo, s_lo[:, None, :], s_up[:, None, :])
        Bc = np.where(use_lo, 0.0, b_up[:, None, :])
        want = (L * S, A * np.abs(S), sum_last(L * Bc), sum_last(A * np.abs(Bc)))
        for got, ref in zip(_relu_back(L, A, s_lo, s_up, b_up, np.arange(4), np.arange(9)), want):
            assert got.tobytes() == ref.tobytes()
        # read in place at other boxes' rows and a subset of columns: the bits of the gathered copy
        rows, cols = np.array([2, 0, 2, 3]), np.array([1, 4, 5, 8])
        Lc, Ac = L[:, :, cols], A[:, :, cols]
        g_lo, g_up, g_b = (x[np.ix_(rows, cols)] for x in (s_lo, s_up, b_up))
        use_lo = Lc >= 0
        S = np.where(use_lo, g_lo[:, None, :], g_up[:, None, :])
        Bc = np.where(use_lo, 0.0, g_b[:, None, :])
        want = (Lc * S, Ac * np.abs(S), sum_last(Lc * Bc), sum_last(Ac * np.abs(Bc)))
        for got, ref in zip(_relu_back(np.ascontiguousarray(Lc), np.ascontiguousarray(Ac), s_lo, s_up, b_up, rows, cols),
                            want):
            assert got.tobytes() == ref.tobytes()


def test_pgd_finds_a_point_of_a_region_random_points_miss_and_only_points_inside_it():
    # y = sum(x) over [0, 1]^8; region y >= 7.9: 1e-8 of the box's volume, one corner
    ir = ControllerIR((InputNode(8), AffineNode(((0, np.ones((1, 8))),), np.zeros(1))), (1,))
    lo, hi, C, d = np.zeros(8), np.ones(8), -np.ones((1, 1)), np.array([-7.9])
    pts = pgd_search(ir, lo, hi, C, d, random_starts=4, steps=20)
    assert pts.shape[0] >= 1 and pts.shape[1] == 8
    assert np.all(ir.evaluate(pts)[:, 0] >= 7.9) and np.all((pts >= lo) & (pts <= hi))
    assert pgd_search(ir, lo, hi, C, np.array([-8.5])).shape == (0, 8)  # empty region: no candidate
    again = pgd_search(ir, lo, hi, C, d, random_starts=4, steps=20)
    assert again.tobytes() == pts.tobytes()  # the same seed gives the same points


@pytest.mark.parametrize("net,prop", [("1_1", 2), ("2_1", 1), ("2_1", 3), ("1_1", 4)])
def test_acasxu_rows_the_input_split_alone_left_open_are_proved(net, prop):
    """Undecided at 60 s before the batched smart-branching search (bench/verify.py: 0.5–7 s now). Since the
    LP probes (2026-12-07) the ReLU-split LP may close some boxes (1_1/p2: 12 of 14 probes)."""
    root = ANCHORS / "acasxu"
    model = load_model(root / "onnx" / f"ACASXU_run2a_{net}_batch_2000.onnx")
    res = decide(model, parse_vnnlib(root / "vnnlib" / f"prop_{prop}.vnnlib", 5, 5),
                 VerifyOptions(timeout=120, use_marabou=False))
    assert res.verdict == Verdict.PROVED, res
    assert res.method in ("bounds", "bounds+lp") and res.stats["boxes"] > 1


def _expected(root):
    rows = list(csv.reader(open(root / "expected_results.csv")))[1:]
    return {(r[-3].split("/")[-1], r[-2].split("/")[-1]): r[-1] for r in rows}


@pytest.mark.parametrize("net,prop", [("1_7", 3), ("1_9", 4), ("4_1", 4), ("1_1", 1), ("2_1", 2), ("3_3", 4)])
def test_acasxu_anchor_answers_match_the_published_results(net, prop, tmp_path):
    root = ANCHORS / "acasxu"
    onnx_name, prop_name = f"ACASXU_run2a_{net}_batch_2000.onnx", f"prop_{prop}.vnnlib"
    res = decide(load_model(root / "onnx" / onnx_name), parse_vnnlib(root / "vnnlib" / prop_name, 5, 5), FAST)
    assert res.verdict.vnnlib == _expected(root)[(onnx_name, prop_name)], res


@pytest.mark.parametrize("case", ["unsafe_29", "unsafe_36", "safe_99", "safe_14", "unsafe_0", "safe_50"])
def test_cartpole_anchor_answers_match_the_published_results(case):
    root = ANCHORS / "rl_cartpole"
    res = decide(load_model(root / "onnx" / "cartpole.onnx"),
                 parse_vnnlib(root / "vnnlib" / f"cartpole_case_{case}.vnnlib", 4, 2), FAST)
    assert res.verdict.vnnlib == _expected(root)[("cartpole.onnx", f"cartpole_case_{case}.vnnlib")], res


def test_vnnlib_parser_reads_dnf_comments_and_negative_zero(tmp_path):
    f = tmp_path / "p.vnnlib"
    f.write_text("; comment\n(declare-const X_0 Real)\n(declare-const X_1 Real)\n(declare-const Y_0 Real)\n"
                 "(declare-const Y_1 Real)\n(assert (<= X_0 1.0))\n(assert (>= X_0 -0.0)) ; trailing\n"
                 "(assert (and (<= X_1 2) (>= X_1 -2e-1)))\n"
                 "(assert (or (and (>= Y_0 Y_1)) (and (<= Y_1 -3.5) (>= (+ Y_0 (* 2 Y_1)) 1))))\n")
    query = parse_vnnlib(f, 2, 2)
    assert len(query.disjuncts) == 2
    d0, d1 = query.disjuncts
    np.testing.assert_array_equal(d0.lo, [0.0, -0.2]) and np.testing.assert_array_equal(d0.hi, [1.0, 2.0])
    np.testing.assert_array_equal(d0.C, [[-1, 1]]) and np.testing.assert_array_equal(d0.d, [0])
    np.testing.assert_array_equal(d1.C, [[0, 1], [-1, -2]]) and np.testing.assert_array_equal(d1.d, [-3.5, -1])


def test_cli_verify_vnnlib_prints_the_verdict_last_and_writes_a_replayable_witness(tmp_path):
    root = ANCHORS / "acasxu"
    wit = tmp_path / "cex.txt"
    proc = subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "verify",
                           str(root / "onnx" / "ACASXU_run2a_1_7_batch_2000.onnx"), "--vnnlib",
                           str(root / "vnnlib" / "prop_3.vnnlib"), "--witness", str(wit), "--timeout", "30"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stdout.strip().splitlines()[-1] == "sat"
    x, y = read_counterexample(wit)
    np.testing.assert_allclose(evaluate_onnxruntime(root / "onnx" / "ACASXU_run2a_1_7_batch_2000.onnx", x[None])[0],
                               y, rtol=1e-6)
    assert np.all(y[0] <= y[1:] + 1e-4)  # COC minimal: the unsafe region of property 3


HEAD = "".join(f"(declare-const X_{i} Real)" for i in range(4)) + "(declare-const Y_0 Real)(declare-const Y_1 Real)"
BOX = "".join(f"(assert (>= X_{i} -0.1))(assert (<= X_{i} 0.1))" for i in range(4))


@pytest.mark.parametrize("body,message", [
    ("(assert (<= Y_0 Y_1) (<= Y_1 -1000))", "assert takes exactly one formula"),
    ("(assert (>= X_0 nan))", "'nan' is not a finite decimal number"),
    ("(assert (<= Y_0 inf))", "'inf' is not a finite decimal number"),
    ("(assert)", "assert takes exactly one formula"),
    ("(declare-const (X_0) Real)", "expected (declare-const NAME Real)"),
    ("(assert (<= (-) Y_0))", "malformed term"),
    ("(declare-const X_01 Real)", "neither X_i nor Y_j"),
    ("(assert (or))", "'or' without arguments"),
])
def test_malformed_vnnlib_is_refused_with_one_located_error(tmp_path, body, message):
    from mi_certify.verification.nn.vnnlib import VnnlibError
    f = tmp_path / "p.vnnlib"
    f.write_text(HEAD + BOX + body)
    with pytest.raises(VnnlibError, match=re.escape(message)):
        parse_vnnlib(f, 4, 2)


def test_a_property_of_another_network_names_the_input_count():
    """A 4-input property (CartPole) against a 5-input network (ACAS Xu): the cause, not a symptom."""
    from mi_certify.verification.nn.vnnlib import VnnlibError
    with pytest.raises(VnnlibError, match=r"cartpole_case_unsafe_31\.vnnlib: declares 4 inputs \(X_\*\) but the "
                                          r"network has 5$"):
        parse_vnnlib(ANCHORS / "rl_cartpole" / "vnnlib" / "cartpole_case_unsafe_31.vnnlib", 5, 5)


@pytest.mark.parametrize("body", ["(assert (< 0 0))", "(assert (< Y_0 Y_0))", "(assert (> Y_1 Y_1))"])
def test_strict_comparisons_that_are_constant_false_give_unsat(tmp_path, body):
    f = tmp_path / "p.vnnlib"
    f.write_text(HEAD + BOX + body)
    path = ANCHORS / "rl_cartpole" / "onnx" / "cartpole.onnx"
    res = decide(load_model(path), parse_vnnlib(f, 4, 2), FAST)
    assert res.verdict == Verdict.PROVED


_SLOW_Z3 = """
import sys, threading, time
import numpy as np
from mi_certify.generator.frontend.onnx_import import import_onnx
from mi_certify.verification.nn.z3_exact import confirm_boxes
ir = import_onnx(sys.argv[2])
C = np.zeros((1, ir.n_outputs)); C[0, 0] = 1.0
tasks = [(C, np.array([-1e9]), np.full(ir.n_inputs, -0.3 + 0.01 * k), np.full(ir.n_inputs, 0.3)) for k in range(6)]
work = lambda: confirm_boxes(ir, tasks, 600, workers=2)   # 300 ReLUs: every task runs for minutes
try:
    if sys.argv[1] == "thread":   # as in a build: the network is verified in a daemon thread
        t = threading.Thread(target=work, daemon=True)
        t.start()
        while t.is_alive():
            time.sleep(0.05)
    else:
        work()
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    sys.exit(130)
"""


@pytest.mark.parametrize("where", ["main", "thread"])
def test_ctrl_c_stops_the_z3_worker_processes_at_once(where):
    """Ctrl-C (SIGINT to the process group) during the Z3 confirmation: the program exits at once,
    its worker processes are gone and nothing but its own line is printed (the process pool
    used to finish its queued tasks first: minutes, then tracebacks and leaked-semaphore warnings)."""
    import os
    import signal
    import time
    p = subprocess.Popen([sys.executable, "-c", _SLOW_Z3, where, str(ANCHORS / "acasxu" / "onnx" /
                                                                   "ACASXU_run2a_1_1_batch_2000.onnx")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None and len(spawned_workers(p.pid)) < 2:
            time.sleep(0.05)
        workers = spawned_workers(p.pid)
        assert len(workers) == 2 and p.poll() is None
        time.sleep(1.0)   # the workers are deciding their first boxes
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130 and err == "interrupted\n", err
    assert took < 10, took
    assert not any(running(w) for w in workers)


def test_z3_confirmation_in_worker_processes_equals_the_one_in_this_process():
    from mi_certify.verification.nn.z3_exact import confirm_boxes
    ir = import_onnx(REFERENCE_MODEL)
    C = np.zeros((1, ir.n_outputs))
    C[0, 0] = 1.0
    lo = np.array([i.min for i in load_spec(REFERENCE_SLA).inputs])
    hi = np.array([i.max for i in load_spec(REFERENCE_SLA).inputs])
    tasks = [(C, np.array([d]), lo, lo + (hi - lo) * f) for d, f in [(1e9, 0.5), (-1e9, 0.25), (1e9, 1.0),
                                                                       (-1e9, 0.5), (1e9, 0.1)]]
    par, seq = confirm_boxes(ir, tasks, 120, workers=2), confirm_boxes(ir, tasks, 120, workers=1)
    assert [r for r, _ in par] == [r for r, _ in seq] == ["sat", "unsat", "sat", "unsat", "sat"]
    for (_, a), (_, b) in zip(par, seq):
        assert (a is None and b is None) or np.array_equal(a, b)


# --- many actions, wide and deep networks: every timeout bounds the wall time it names (issue 17) ---

def _random_mlp(tmp_path, sizes, seed=0, dead_action=None, name="mlp"):
    """A seeded random ReLU MLP ``sizes[0] -> ... -> sizes[-1]`` (conftest.save_model). With
    ``dead_action``, that output's bias is -1000: it is never the argmax (by construction)."""
    from conftest import save_model, tensor
    from onnx import helper
    rng = np.random.default_rng(seed)
    nodes, inits, cur = [], [], "x"
    for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = rng.standard_normal((a, b)) * np.sqrt(2.0 / a)
        bias = 0.1 * rng.standard_normal(b)
        last = k == len(sizes) - 2
        if last and dead_action is not None:
            bias[dead_action] = -1000.0
        inits += [(f"W{k}", w), (f"B{k}", bias)]
        nodes += [helper.make_node("MatMul", [cur, f"W{k}"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", f"B{k}"], ["y" if last else f"a{k}"])]
        cur = f"a{k}"
        if not last:
            nodes.append(helper.make_node("Relu", [cur], [f"r{k}"]))
            cur = f"r{k}"
    return save_model(tmp_path, name, nodes, [tensor("x", [1, sizes[0]])], [tensor("y", [1, sizes[-1]])], inits)


def _sla(tmp_path, n_in, n_act, properties, name="sla"):
    bits = max(1, min(8, 24 // n_in))
    text = ("schema: mi-certify/v1\ncontroller: {name: many, decode: argmax}\ninputs:\n"
            + "".join(f"  - {{name: x{i}, min: 0, max: 1, bits: {bits}}}\n" for i in range(n_in))
            + "actions:\n" + "".join(f"  - {{name: a{j}, conservative: {str(j == 0).lower()}, "
                                     "sla: {latency_ms: 50, accuracy_loss_pct: 0.0}}\n" for j in range(n_act))
            + "fsm: {hysteresis: 1, cooldown: 0, violations_to_fallback: 1, recovery: 1}\nproperties:\n"
            + properties)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("n_act", [8, 16])
def test_many_actions_verify_within_the_timeouts_with_the_known_verdicts(tmp_path, n_act):
    """8 and 16 actions, 32 ReLUs (Z3-confirmed): the whole spec within queries x (timeout +
    confirm timeout) + slack (it ran past 600 s: the Z3 confirmation gave every box the whole
    budget); a property true by construction is PROVED, a false one VIOLATED with a replayed witness."""
    import time
    from mi_certify.verification.nn.network import verify_spec
    dead = n_act - 1
    model = load_model(_random_mlp(tmp_path, [5, 32, n_act], seed=n_act, dead_action=dead))
    spec = load_spec(_sla(tmp_path, 5, n_act, f"  - {{id: DEAD, when: {{}}, forbid: [a{dead}]}}\n"
                                               "  - {id: ONLY0, when: {}, require: [a0]}\n"
                                               "  - {id: BOUND, when: {x0: [0, 0.5]}, output: {a0: {max: 10000}}}\n"))
    timeout, confirm = 2.0, 2.0
    seen = []
    t0 = time.monotonic()
    res = verify_spec(model, spec, VerifyOptions(timeout=timeout, confirm_timeout=confirm),
                      on_result=lambda r, done, total: seen.append((r.id, done, total)))
    took = time.monotonic() - t0
    n_q = len(spec.properties) + n_act
    assert [d for _, d, _ in seen] == list(range(1, n_q + 1)) and {t for _, _, t in seen} == {n_q}
    assert took <= 1.5 * n_q * (timeout + confirm) + 20, took
    for r in res.properties + res.reachability:
        assert r.time_s <= timeout + confirm + 3, (r.id, r.time_s, r.detail)
    by_id = {r.id: r for r in res.properties}
    assert by_id["DEAD"].verdict == Verdict.PROVED, by_id["DEAD"]
    assert by_id["BOUND"].verdict == Verdict.PROVED, by_id["BOUND"]
    only0 = by_id["ONLY0"]
    assert only0.verdict == Verdict.VIOLATED
    x = np.array(only0.witness["x"])
    assert np.all((0 <= x) & (x <= 1))
    y = evaluate_onnxruntime(model.path, np.array(only0.witness["x_float32"])[None])[0]
    assert np.argmax(y) != 0 and np.max(y) >= y[0]  # a witness: some other action beats a0 there
    dead_reach = {r.id: r for r in res.reachability}[f"reach:a{dead}"]
    assert dead_reach.verdict == Verdict.PROVED  # the dead action is unreachable
    for k, r in enumerate(res.reachability):
        if r.verdict == Verdict.VIOLATED:  # reachable: the witness decodes that action (ties within 1e-4)
            assert max(r.witness["y_ir"]) - r.witness["y_ir"][k] <= 1e-4, r.id


def test_cli_verify_16_actions_shows_progress_and_keeps_within_its_timeouts(tmp_path):
    """`verify --timeout T --confirm-timeout T` on 16 actions prints one line per query as it
    goes and ends within queries x 2T + slack (it ran past 120 s printing nothing)."""
    import time
    model = _random_mlp(tmp_path, [5, 32, 16], seed=3)
    sla = _sla(tmp_path, 5, 16, "  - {id: P1, when: {x0: [0.9, 1]}, forbid: [a1]}\n")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "verify", str(model), "--sla", str(sla),
                           "--timeout", "2", "--confirm-timeout", "2"], capture_output=True, text=True, timeout=600)
    took = time.monotonic() - t0
    assert proc.returncode in (0, 1, 3), proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if re.match(r"\s+\[\d+/17\] ", ln)]
    assert len(lines) == 17 and "[17/17] reach:a15:" in lines[-1], proc.stderr
    assert "each at most 2 s, search and exact confirmation together" in proc.stderr
    assert took <= 17 * (2 + 2) + 30, took  # --timeout bounds each query as a whole (+2 s slack each)


def test_z3_confirmation_tasks_share_one_deadline():
    """8 tasks that each run for minutes on 2 workers: confirm_boxes(timeout 3) ends in about 3 s
    with every task unknown and no worker left (each task used to get the whole 3 s: 12 s)."""
    import os
    import time
    from mi_certify.verification.nn.z3_exact import confirm_boxes
    ir = import_onnx(ANCHORS / "acasxu" / "onnx" / "ACASXU_run2a_1_1_batch_2000.onnx")
    C = np.zeros((1, ir.n_outputs))
    C[0, 0] = 1.0
    tasks = [(C, np.array([-1e9]), np.full(ir.n_inputs, -0.3 + 0.01 * k), np.full(ir.n_inputs, 0.3))
             for k in range(8)]
    t0 = time.monotonic()
    out = confirm_boxes(ir, tasks, 3.0, workers=2)
    took = time.monotonic() - t0
    assert [r for r, _ in out] == ["unknown"] * 8
    assert took < 3.0 + 4.0, took
    assert spawned_workers(os.getpid()) == []


def test_wide_deep_network_query_ends_at_its_timeout_as_unknown_or_decided(tmp_path):
    """24 inputs, 6 x 256 ReLUs, 32 actions: one CROWN pass over a box takes seconds here, so
    the deadline is checked inside the bound computation too; the query ends within its timeout
    plus slack, and a timeout is UNKNOWN (never PROVED)."""
    import time
    from mi_certify.verification.nn.properties import reachability_queries
    model = load_model(_random_mlp(tmp_path, [24] + [256] * 6 + [32], seed=1))
    spec = load_spec(_sla(tmp_path, 24, 32, "  - {id: B, when: {}, output: {a0: {max: 1000000}}}\n"))
    for query in reachability_queries(spec)[:4]:
        t0 = time.monotonic()
        r = decide(model, query, VerifyOptions(timeout=3.0))
        took = time.monotonic() - t0
        assert took <= 3.0 + 4.0, (query.id, took, r.detail)
        if r.verdict == Verdict.VIOLATED:
            assert np.argmax(r.witness["y_ir"]) == int(query.id.split(":a")[1]) or \
                np.max(r.witness["y_ir"]) - r.witness["y_ir"][int(query.id.split(":a")[1])] <= 1e-4
        elif r.verdict == Verdict.UNKNOWN:
            # out of time in the search, or in Marabou on the boxes it left ("deadline reached")
            assert any(w in r.detail for w in ("timeout", "open", "deadline reached")), r.detail


def test_ctrl_c_inside_a_compiled_kernel_stops_the_query_instead_of_becoming_its_error():
    """numba reports a KeyboardInterrupt raised in a kernel as SystemError with the interrupt as
    context: decide() must stop (exit 130), not record an error and go on with the next region."""
    from mi_certify.verification.nn import nn_verify
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemError("<built-in function x> returned a result with an exception set")
    except SystemError as exc:
        wrapped = exc
    assert nn_verify._interrupted(wrapped) and nn_verify._interrupted(KeyboardInterrupt())
    assert not nn_verify._interrupted(SystemError("other")) and not nn_verify._interrupted(ValueError("x"))


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "abc"])
def test_verify_refuses_a_timeout_that_is_not_a_positive_finite_number(value):
    proc = subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "verify", "m.onnx", "--vnnlib", "p",
                           "--timeout", value], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"argument --timeout: {value!r} is not a" in proc.stderr


def _near_max_property(model, n_in: int, seed: int) -> str:
    """A two-output property just beyond what a seeded local search reaches (a0 below its
    maximum found + 2 % of its range, a1 above its minimum found - 2 %; 20,000 uniform points,
    then 30 rounds of shrinking random steps from the best 64): the falsifiers rarely find a
    counterexample, so the search (and on small networks the Z3 confirmation) has to decide it."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (20_000, n_in)).astype(np.float32)
    y = model.evaluate_onnxruntime(x)
    span = y.max(axis=0) - y.min(axis=0)
    ends = []
    for col, sign in ((0, 1.0), (1, -1.0)):
        best = x[np.argsort(-sign * y[:, col])[:64]]
        for k in range(30):
            cand = np.clip(best[rng.integers(0, 64, 2048)] + rng.normal(0, 0.2 * 0.85 ** k, (2048, n_in)), 0, 1)
            both = np.concatenate([best, cand.astype(np.float32)])
            best = both[np.argsort(-sign * model.evaluate_onnxruntime(both)[:, col])[:64]]
        ends.append(float(model.evaluate_onnxruntime(best[:1])[0, col]))
    return ("  - {id: NEAR, when: {}, output: {a0: {max: %r}, a1: {min: %r}}}\n"
            % (ends[0] + 0.02 * float(span[0]), ends[1] - 0.02 * float(span[1])))


@pytest.mark.parametrize("n_in,hidden,seed", [(2, [16, 16], 0), (6, [32, 32], 1), (11, [64, 64, 32], 2),
                                              (16, [64, 64, 64], 3), (3, [8, 8], 4)])
def test_verify_timeout_bounds_the_whole_query_search_and_confirmation(tmp_path, n_in, hidden, seed):
    """``verify --timeout T`` (VerifyOptions.whole_query): every query returns within T + 2 s,
    Z3 confirmation and LP-leaf workers included, on random networks of 2-16 inputs with a
    two-output property close to the network's range (issue 38: a query with --timeout 60
    returned after 309 s, the confirmation adding its own 300 s). Small networks (<= 64 ReLUs)
    take the confirmation path, larger ones the LP leaves; UNKNOWN is never PROVED."""
    import time
    from mi_certify.verification.nn.network import verify_spec
    n_act = 3
    model = load_model(_random_mlp(tmp_path, [n_in, *hidden, n_act], seed=seed))
    spec = load_spec(_sla(tmp_path, n_in, n_act, _near_max_property(model, n_in, seed)))
    T = 3.0
    stamps, seen = [time.monotonic()], []

    def on(r, done, total):
        stamps.append(time.monotonic())
        seen.append((r.id, stamps[-1] - stamps[-2], r.verdict, r.detail))
    verify_spec(model, spec, VerifyOptions(timeout=T, confirm_timeout=T, whole_query=True), on_result=on)
    assert len(seen) == 1 + n_act
    for qid, took, verdict, detail in seen:
        assert took <= T + 2.0, (qid, took, detail)
    near = seen[0]
    assert near[0] == "NEAR" and near[2] in (Verdict.PROVED, Verdict.UNKNOWN), near  # the seeds give no violation


def test_verify_timeout_bounds_a_hard_acas_xu_row(tmp_path):
    """ACAS Xu 3_3 property 2 (46 s to decide here on an idle machine): ``verify --timeout 4``
    returns within 4 + 2 s (the whole query: falsifiers, search, Marabou or LP leaves), unknown or
    proved (published: unsat)."""
    import time
    root = ANCHORS / "acasxu"
    model = load_model(root / "onnx" / "ACASXU_run2a_3_3_batch_2000.onnx")
    query = parse_vnnlib(root / "vnnlib" / "prop_2.vnnlib", model.ir.n_inputs, model.ir.n_outputs)
    t0 = time.monotonic()
    r = decide(model, query, VerifyOptions(timeout=4.0, confirm_timeout=4.0, whole_query=True))
    took = time.monotonic() - t0
    assert took <= 4.0 + 2.0, (took, r.detail)
    assert r.verdict in (Verdict.UNKNOWN, Verdict.PROVED), r
    assert 0.5 < r.stats["cpu_s"] <= 3 * took, (r.stats, took)  # the CPU time: this process and its workers
    assert spawned_workers(__import__("os").getpid()) == []


def test_a_box_budget_that_runs_out_hands_the_open_boxes_to_the_lp_leaves():
    """Issue 38, "phases that hand over": input splitting that stops on its box budget (50 boxes
    here) with boxes open used to end the query UNKNOWN ("3 boxes open"), though the ReLU-split LP
    had all the time left; now the open boxes (and the leaves) go to the LP, which closes them."""
    import dataclasses
    from mi_certify.verification.nn.properties import spec_queries
    from mi_certify.verification.nn.settings import DEFAULT_SEARCH
    model, spec = load_model(REFERENCE_MODEL), load_spec(REFERENCE_SLA)
    p2 = next(q for q in spec_queries(spec) if q.id == "P2")
    opts = VerifyOptions(timeout=60, max_boxes=50, use_marabou=False, z3_confirm=False,
                         search=dataclasses.replace(DEFAULT_SEARCH, leaf_depth=4))
    r = decide(model, p2, opts)
    assert r.verdict == Verdict.PROVED, r.detail
    assert r.stats["boxes"] == 67 and r.stats["lp_leaves"] == 5, r.stats  # 50 boxes budget (+ the last batch)
    assert "by ReLU-split LP" in r.detail


def _sparse_tree(rng, n_in: int, widths: list[int], fan: int, skip: bool) -> ControllerIR:
    """A lattice-like network: every neuron reads ``fan`` neighbouring neurons of the layer below
    (sparse weights, as tllverifybench's min/max trees); with ``skip`` the output also reads the
    first hidden ReLU layer (a node reached by two paths whose kept columns differ)."""
    nodes = [InputNode(n_in)]
    nodes.append(AffineNode(((0, rng.standard_normal((widths[0], n_in))),), rng.standard_normal(widths[0])))
    nodes.append(ReluNode(1, widths[0]))
    prev, prev_size = 2, widths[0]
    for w in widths[1:]:
        W = np.zeros((w, prev_size))
        for j in range(w):
            start = (j * prev_size) // w
            W[j, start:start + fan] = rng.standard_normal(min(fan, prev_size - start))
        nodes.append(AffineNode(((prev, W),), rng.standard_normal(w)))
        nodes.append(ReluNode(len(nodes) - 1, w))
        prev, prev_size = len(nodes) - 1, w
    W = np.zeros((2, prev_size))
    W[:, :fan] = rng.standard_normal((2, min(fan, prev_size)))
    terms = [(prev, W)]
    if skip:
        S = np.zeros((2, widths[0]))
        S[:, -fan:] = rng.standard_normal((2, fan))
        terms.append((2, S))
    nodes.append(AffineNode(tuple(terms), rng.standard_normal(2)))
    return ControllerIR(tuple(nodes), (len(nodes) - 1,))


@pytest.mark.parametrize("seed", range(6))
def test_the_compacted_backward_pass_gives_the_dense_passes_bits(seed, monkeypatch):
    """On a sparse network the backward pass keeps only the columns of Λ it reaches and groups the
    (box, neuron) instances by neuron (issue 38: tllverifybench N >= 32); the skipped terms are exact
    zeros, so every node bound and every output bound is bit for bit the dense pass's, and sound."""
    import mi_certify.verification.nn.bounds as B
    rng = np.random.default_rng(300 + seed)
    ir = _sparse_tree(rng, 2, [int(rng.integers(40, 80)), 32, 16, 8], fan=int(rng.integers(2, 5)), skip=seed % 2 == 1)
    assert B.compactable(ir)
    lo = rng.uniform(-1, 1, (5, 2))
    hi = lo + rng.uniform(0, 0.5, lo.shape)
    C = rng.standard_normal((3, 2))
    got = crown_bounds(ir, lo, hi, LOWER_SLOPES)
    low, lin = output_matrix_lower(ir, C, lo, hi, got, LOWER_SLOPES)
    monkeypatch.setattr(B, "compactable", lambda ir: False)
    ref = crown_bounds(ir, lo, hi, LOWER_SLOPES)
    low_ref, lin_ref = output_matrix_lower(ir, C, lo, hi, ref, LOWER_SLOPES)
    for a, b in zip(got.lower + got.upper, ref.lower + ref.upper):
        assert a.tobytes() == b.tobytes()
    assert low.tobytes() == low_ref.tobytes() and np.array_equal(lin, lin_ref)
    for k in range(len(lo)):  # and sound: no sampled output below the bound
        ys = ir.evaluate(lo[k] + (hi[k] - lo[k]) * rng.random((3000, 2)))
        assert np.all(ys @ C.T >= low[k])


def test_the_compacted_pass_survives_rows_that_reach_no_column_and_keeps_the_dense_nans(monkeypatch):
    """A fresh helper's findings on the compacted backward pass: (1) a pass whose rows all die at
    some node (a dead ReLU subtree) kept no column and raised (ValueError / ZeroDivisionError, so a
    query came out UNKNOWN); (2) where a relaxation is NaN (non-finite bounds) the dense pass gives
    NaN (0 · NaN) and the compacted one gave a finite number. Both now give the dense pass's bits."""
    import mi_certify.verification.nn.bounds as B
    W1 = np.zeros((4, 2)); W1[0, 0] = 1; W1[1, 1] = 1
    W2 = np.zeros((4, 4)); W2[0, 0] = 1; W2[1, 1] = 1
    W3 = np.zeros((4, 4)); W3[0, 0] = 1
    dead = ControllerIR((InputNode(2), AffineNode(((0, W1),), np.zeros(4)), ReluNode(1, 4),
                         AffineNode(((2, W2),), np.array([-.75, 0, 0, 0])), ReluNode(3, 4),
                         AffineNode(((4, W3),), np.zeros(4))), (5,))
    V1 = np.zeros((8, 2)); V1[0, 0] = 1e300; V1[1, 1] = 1; V1[2, 1] = -1
    V2 = np.zeros((1, 8)); V2[0, 1] = 1; V2[0, 2] = 1
    huge = ControllerIR((InputNode(2), AffineNode(((0, V1),), np.zeros(8)), ReluNode(1, 8),
                         AffineNode(((2, V2),), np.zeros(1))), (3,))
    cases = [(dead, np.array([[1.0, 0, 0, 0]]), -np.ones(2), np.ones(2), ("adaptive",)),
             (huge, np.eye(1), np.array([-1e10, -1.0]), np.array([1e10, 1.0]), ("chord",))]
    results = []
    for compact in (True, False):
        out = []
        for ir, C, lo, hi, slopes in cases:
            if not compact:
                monkeypatch.setattr(B, "compactable", lambda ir: False)
            else:
                assert B.compactable(ir)
            nb = crown_bounds(ir, lo, hi, LOWER_SLOPES)
            fb = forward_bounds(ir, lo, hi)
            out.append([output_matrix_lower(ir, C, lo, hi, b, slopes)[0].tobytes() for b in (nb, fb)]
                       + [v.tobytes() for v in nb.lower + nb.upper])
        results.append(out)
        monkeypatch.undo()
    assert results[0] == results[1]
    low = np.frombuffer(results[0][1][0])
    # the dense pass's NaN, kept until 2026-12-07; since then the underflow pad of 1e300 weights over a box of
    # 1e10 is infinite (bounds.py, "Underflow") and every such bound is -inf, the weakest, in both passes
    assert (low == -np.inf).all()


def test_a_non_finite_relaxation_in_a_gathered_pass_keeps_every_later_relu_on_its_boxes(monkeypatch):
    """Found on reading the fix above: where the compacted pass fell back to full columns at a ReLU
    with a NaN relaxation, it also dropped the pass's box gather for every ReLU after it, so the fused
    ReLU step (which does not check indices) read slopes of other boxes or past the array: a wrong,
    possibly too high, lower bound. The pass must give the dense pass's bits."""
    import mi_certify.verification.nn.bounds as B
    rng = np.random.default_rng(1)
    W1 = np.zeros((8, 2)); W1[:, 0] = rng.standard_normal(8); W1[:, 1] = rng.standard_normal(8) * (rng.random(8) < 0.3)
    W2 = np.zeros((8, 8))
    for j in range(8):
        W2[j, j], W2[j, (j + 1) % 8] = rng.standard_normal(2)
    W3 = np.zeros((4, 8))
    for j in range(4):
        W3[j, 2 * j:2 * j + 2] = rng.standard_normal(2)
    ir = ControllerIR((InputNode(2), AffineNode(((0, W1),), rng.standard_normal(8)), ReluNode(1, 8),
                       AffineNode(((2, W2),), rng.standard_normal(8)), ReluNode(3, 8),
                       AffineNode(((4, W3),), rng.standard_normal(4))), (5,))
    assert B.compactable(ir)
    lo = np.array([[-1.0, -1.0], [-0.5, -0.2], [0.1, 0.0]])
    hi = lo + 0.8
    nb = forward_bounds(ir, lo, hi)
    nb.lower[3][:, 7] = np.nan  # a NaN relaxation at the ReLU nearest the target
    nb.upper[3][:, 7] = np.nan
    per_box, gather = np.array([1, 2, 3, 1, 2]), np.array([0, 0, 1, 2, 2])  # 5 rows over 3 boxes

    def run():
        return B._backward_lower_batch(ir, 5, None, lo[gather], hi[gather], nb, "adaptive", per_box=per_box,
                                       gather=gather, cache={})[0]
    got = run()
    monkeypatch.setattr(B, "compactable", lambda ir: False)
    assert got.tobytes() == run().tobytes()


def test_marabou_takes_the_open_boxes_only_when_each_gets_its_time():
    """Branch and bound hands its open boxes to Marabou only when each would get max(1 s, 1 ms per ReLU)
    of what is left after the node bounds' 20 %: ACAS Xu's 300 ReLUs ask 1 s a box, tllverifybench
    N = 64's 16,380 ReLUs 16.38 s."""
    from types import SimpleNamespace

    from mi_certify.verification.nn.nn_verify import _marabou_can_take
    from mi_certify.verification.nn.settings import DEFAULT_SEARCH as S
    acas, tll = SimpleNamespace(n_relus=300), SimpleNamespace(n_relus=16380)
    assert _marabou_can_take(acas, 19, 24.0, S) and not _marabou_can_take(acas, 20, 24.0, S)   # 0.8 · 24 = 19.2 s
    assert not _marabou_can_take(tll, 62, 24.0, S) and not _marabou_can_take(tll, 1, 20.4, S)
    assert _marabou_can_take(tll, 1, 20.5, S) and _marabou_can_take(acas, 0, 0.0, S)


@pytest.mark.parametrize("net,prop,depth,given_back", [("4_1", 3, 4, 0), ("1_1", 2, 8, 2)])
def test_lp_probes_close_what_input_splitting_cannot_and_give_the_rest_back(net, prop, depth, given_back):
    """ACAS Xu 4_1 / property 3: input splitting alone took 13,229 boxes and 760 leaves (10.8 s; the
    boxes' ReLUs stay unstable however small they get); the LP probes at 4 halvings close it in under
    1,000 boxes. 1_1 / property 2 with probes at 8 halvings too (``probe_max_depth``: not the default): two
    probes run out of LPs, their boxes are split again (the second round) and the query is still proved.
    Every probe is either closed or given back."""
    import dataclasses
    from mi_certify.verification.nn.settings import DEFAULT_SEARCH
    root = ANCHORS / "acasxu"
    model = load_model(root / "onnx" / f"ACASXU_run2a_{net}_batch_2000.onnx")
    res = decide(model, parse_vnnlib(root / "vnnlib" / f"prop_{prop}.vnnlib", 5, 5),
                 VerifyOptions(timeout=60, use_marabou=False,
                               search=dataclasses.replace(DEFAULT_SEARCH, probe_max_depth=depth)))
    s = res.stats
    assert res.verdict == Verdict.PROVED and res.method == "bounds+lp", res
    assert s["lp_probe_closed"] >= 1 and s["lp_probes"] == s["lp_probe_closed"] + s.get("lp_given_back", 0)
    assert s.get("lp_given_back", 0) == given_back
    assert f"{s['lp_probe_closed']} by LP probes ({s['lp_probes']} tried, {given_back} given back" in res.detail
    assert s["boxes"] < (1000 if net == "4_1" else 5000)


def _gate_on_two_networks(gate, seed: int, lo: np.ndarray, hi: np.ndarray, depth: np.ndarray):
    """``gate(sr, kids, depth)`` (nn_verify's _probes or _few_unstable) on the boxes lo/hi (B, 3) of a 20-ReLU
    and a 100-ReLU random network with the default settings: yields (ir, widths, its answer (B,) bool, the
    boxes' unstable ReLU counts)."""
    from types import SimpleNamespace
    from mi_certify.verification.nn.settings import DEFAULT_SEARCH
    rng = np.random.default_rng(seed)
    for widths in ([10, 10], [50, 50]):
        ir = _random_dag(rng, 3, widths, 2)
        nb = crown_bounds(ir, lo, hi)
        sr = SimpleNamespace(opts=SimpleNamespace(search=DEFAULT_SEARCH), model=SimpleNamespace(ir=ir))
        yield ir, widths, gate(sr, SimpleNamespace(nb=nb), depth), nb.unstable(ir)


def test_lp_probes_only_where_no_exact_confirmation_follows():
    """A box is an LP probe at 4 halvings (not 6, 8 or 12) with at most 64 unstable ReLUs, and only on a
    network of more than z3_confirm_max_relus ReLUs: on smaller ones the exact confirmation re-proves every
    closed box, and a probe's large boxes cost it far more (the reference's P2: 0.29 s, with probes 1.35 s)."""
    from mi_certify.verification.nn.nn_verify import _probes
    lo = np.array([[0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0], [-9, -9, -9]], dtype=float)
    hi = lo + np.array([[0.01], [0.01], [0.01], [0.01], [0.01], [18.0]])
    for ir, widths, got, unstable in _gate_on_two_networks(_probes, 5, lo, hi, np.array([4.0, 8.0, 6.0, 12.0, 0.0, 4.0])):
        # the small boxes: at most 64 unstable (all of them for the 20-ReLU network); the wide one: more
        assert unstable[0] <= 64 and (unstable[5] > 64 or ir.n_relus <= 64)
        want = [False] * 6 if ir.n_relus <= 64 else [True, False, False, False, False, False]
        assert got.tolist() == want, (widths, unstable)


def test_boxes_with_few_unstable_relus_are_leaves_from_12_halvings_where_no_exact_confirmation_follows():
    """A child is a leaf before ``leaf_depth`` (14) halvings when it is at least ``leaf_unstable_depth`` (12)
    deep and its node bounds leave at most ``leaf_unstable`` (30) ReLUs unstable; never on a network of at
    most z3_confirm_max_relus ReLUs (the reference controller's verification keeps its partition)."""
    from mi_certify.verification.nn.nn_verify import _few_unstable
    lo = np.array([[0, 0, 0], [0, 0, 0], [0, 0, 0], [-9, -9, -9], [0, 0, 0]], dtype=float)
    hi = lo + np.array([[0.01], [0.01], [0.01], [18.0], [0.01]])
    for ir, widths, got, unstable in _gate_on_two_networks(_few_unstable, 7, lo, hi,
                                                           np.array([12.0, 11.0, 13.5, 12.0, 16.0])):
        assert unstable[0] <= 30 and unstable[2] <= 30 and unstable[4] <= 30 and (unstable[3] > 30 or ir.n_relus <= 64)
        want = [False] * 5 if ir.n_relus <= 64 else [True, False, True, False, True]
        assert got.tolist() == want, (widths, unstable)


@pytest.mark.parametrize("seed", range(6))
def test_lp_probes_change_no_verdict_on_random_networks(tmp_path, seed):
    """Random ReLU networks of 3–4 inputs and 80–120 ReLUs, two output rows at once, limits just beyond the
    sampled outputs' corner (some regions empty, some not), the probes forced onto every box of 4 halvings
    with 4 LPs each (most run out and give their box back to input splitting): the verdict equals the
    verdict without probes, a PROVED region holds none of 20,000 sampled points, and a VIOLATED one comes
    with a witness in it. Every probe is closed or given back."""
    import dataclasses
    from mi_certify.verification.nn.settings import DEFAULT_SEARCH
    rng = np.random.default_rng(300 + seed)
    n_in = int(rng.integers(3, 5))
    sizes = [n_in] + [int(v) for v in rng.integers(40, 61, size=2)] + [3]
    model = load_model(_random_mlp(tmp_path, sizes, seed=300 + seed))
    lo, hi = -np.ones(n_in), np.ones(n_in)
    x = lo + (hi - lo) * rng.random((20000, n_in))
    C = np.array([[1.0, -1.0, 0.0], [0.0, 1.0, -1.0]])
    rows = model.ir.evaluate(x) @ C.T
    score = np.max((rows - rows.min(axis=0)) / (rows.max(axis=0) - rows.min(axis=0)), axis=1)
    d = rows[int(np.argmin(score))] - [0.05, 0.03, 0.1, 0.02][seed % 4]
    query = Query("q", "custom", (Disjunct(lo, hi, C, d),))
    forced = dataclasses.replace(DEFAULT_SEARCH, probe_unstable=10_000, probe_max_depth=8, probe_max_lps=4)
    off = dataclasses.replace(DEFAULT_SEARCH, probe_max_lps=0)
    got = decide(model, query, VerifyOptions(timeout=60, use_marabou=False, search=forced))
    ref = decide(model, query, VerifyOptions(timeout=60, use_marabou=False, search=off))
    assert got.verdict == ref.verdict != Verdict.UNKNOWN, (got.detail, ref.detail)
    if got.verdict == Verdict.PROVED:
        assert not np.all(rows - d <= 0, axis=1).any()
        assert got.stats["lp_probes"] == 16 == got.stats.get("lp_probe_closed", 0) + got.stats.get("lp_given_back", 0)
    else:
        assert np.all(C @ np.asarray(got.witness["y_ir"]) - d <= 1e-6)
    assert "lp_probes" not in ref.stats


def test_the_method_says_lp_when_leaves_closed_boxes_before_a_second_round(tmp_path):
    """A helper's reproducer (2026-12-07): the first round's leaves close by the LP, both probes give their
    boxes back, the second round closes those by bounds alone; the answer said "bounds" and "N boxes closed by
    CROWN bounds". It says "bounds+lp" with the LP's part, whichever round closed what."""
    rng = np.random.default_rng(5002)
    n_in = int(rng.integers(2, 4))
    sizes = [n_in] + [int(v) for v in rng.integers(35, 50, size=2)] + [2]
    model = load_model(_random_mlp(tmp_path, sizes, seed=5002))
    lo, hi = -np.ones(n_in), np.ones(n_in)
    C = np.array([[1.0, -1.0]])
    rows = model.ir.evaluate(lo + (hi - lo) * rng.random((20000, n_in))) @ C.T
    d = np.array([rows.min() - rng.choice([0.005, 0.02, 0.05])])
    r = decide(model, Query("q", "custom", (Disjunct(lo, hi, C, d),)), VerifyOptions(timeout=30, workers=1))
    s = r.stats
    assert r.verdict == Verdict.PROVED and s["lp_leaves"] > 0 and s["lp_given_back"] == s["lp_probes"] == 2, s
    assert r.method == "bounds+lp"
    assert f"0 by LP probes (2 tried, 2 given back to input splitting), {s['lp_leaves']} by ReLU-split LP; " \
        f"{s['lp_calls']} LPs in all" in r.detail
