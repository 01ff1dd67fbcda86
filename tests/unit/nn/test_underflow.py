"""Float bounds stay sound where products underflow (verification/nn/bounds.py, "Underflow"; the hole
documented on 2026-12-06 and shown reaching the LP leaves on 2026-12-07): every bound the passes compute
holds the network's exact (rational) values at sampled points of the box, on the two reproducers and on
random networks whose weights span 1e-200 … 1e200; and a thread whose FPU flushes subnormals gets an
error, not a bound."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import time
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mi_certify.verification.nn.bounds as B
from mi_certify.generator.core.ir import AffineNode, ControllerIR, InputNode, ReluNode
from mi_certify.generator.core.numerics import check_gradual_underflow
from mi_certify.verification.nn import chain_pass
from mi_certify.verification.nn.input_split import bound_region
from mi_certify.verification.nn.lp_split import split_leaf
from mi_certify.verification.nn.properties import Disjunct


def _exact(ir: ControllerIR, x) -> list[list[Fraction]]:
    """Every node's exact value at x (rationals from the float64 weights)."""
    vals: list[list[Fraction]] = []
    for node in ir.nodes:
        if isinstance(node, InputNode):
            vals.append([Fraction(float(v)) for v in x])
        elif isinstance(node, AffineNode):
            out = [Fraction(float(b)) for b in node.bias]
            for src, w in node.terms:
                for i in range(w.shape[0]):
                    out[i] += sum((Fraction(float(w[i, j])) * vals[src][j] for j in range(w.shape[1]) if w[i, j]),
                                  Fraction(0))
            vals.append(out)
        else:
            vals.append([max(v, Fraction(0)) for v in vals[node.src]])
    return vals


def _points(lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator, n: int) -> list[np.ndarray]:
    corners = [np.where(rng.random(lo.size) < 0.5, lo, hi) for _ in range(n)]
    inner = [lo + rng.random(lo.size) * (hi - lo) for _ in range(n)]
    return [lo, hi] + corners + inner


def _below(bound: float, v: Fraction) -> bool:
    """bound <= v for a float bound (-inf always, +inf never); NaN (an overflow's inf - inf: no bound, which
    every user reads as undecided) passes."""
    return bound == -np.inf or bool(np.isnan(bound)) or (bool(np.isfinite(bound)) and Fraction(bound) <= v)


def _show(v: Fraction) -> str:
    if abs(v) < Fraction(10) ** 300:
        return f"{float(v):.6g}"
    return f"~1e{len(str(abs(v.numerator))) - len(str(v.denominator))}"


def _assert_contains(nb: B.NodeBounds, ir: ControllerIR, pts: list[np.ndarray]) -> None:
    for x in pts:
        for nid, vals in enumerate(_exact(ir, x)):
            lo, hi = np.ravel(nb.lower[nid]), np.ravel(nb.upper[nid])
            for j, v in enumerate(vals):
                assert _below(float(lo[j]), v) and _below(-float(hi[j]), -v), (nid, j, _show(v), lo[j], hi[j])


def _tiny_weights_ir() -> ControllerIR:
    """The 2026-12-07 helper's network: weights 1e-160 and 1e-170 then 1e80 (forward coefficient
    1e-160 · 1e-170 underflows to 0), bias -0.5 on the last neuron."""
    return ControllerIR((InputNode(1), AffineNode(((0, np.array([[1e-160]])),), np.zeros(1)), ReluNode(1, 1),
                         AffineNode(((2, np.array([[1e-170]])),), np.zeros(1)), ReluNode(3, 1),
                         AffineNode(((4, np.array([[1e80]])),), np.array([-0.5])), ReluNode(5, 1),
                         AffineNode(((6, np.array([[1.0]])),), np.zeros(1))), (7,))


def test_the_forward_and_crown_bounds_hold_the_value_a_product_underflow_hid():
    ir = _tiny_weights_ir()
    lo, hi = np.array([0.0]), np.array([1e250])
    top = _exact(ir, hi)[5][0]
    assert float(top) == pytest.approx(0.5)   # the neuron reaches +0.5 at x = 1e250
    for nb in (B.forward_bounds(ir, lo, hi), B.crown_bounds(ir, lo, hi)):
        assert nb.upper[5][0] >= 0.5          # without the underflow pad: -0.5 (stably negative)
        _assert_contains(nb, ir, _points(lo, hi, np.random.default_rng(0), 4))


def test_the_documented_reproducer_row_is_bounded_below_its_value():
    """docs/verification.md's reproducer: weights 1e300 then 5e-324, row -0.4·y over x in [0, 1]: the
    bound was -1e-309 where the value at x = 1 is -1.98e-24."""
    ir = ControllerIR((InputNode(1), AffineNode(((0, np.array([[1e300]])),), np.zeros(1)), ReluNode(1, 1),
                       AffineNode(((2, np.array([[5e-324]])),), np.zeros(1))), (3,))
    low, _ = B.output_matrix_lower(ir, np.array([[-0.4]]), np.array([0.0]), np.array([1.0]))
    exact = Fraction(-4, 10) * _exact(ir, np.array([1.0]))[3][0]
    assert float(exact) == pytest.approx(-1.976e-24, rel=1e-3)
    assert Fraction(float(low[0])) <= exact


def test_the_leaf_lp_does_not_close_the_reproducers_box():
    """The helper's second finding: split_leaf started from node bounds that called the last neuron
    stably negative and closed the box of y >= 0.25, which x = 1e250 reaches (y = 0.5)."""
    ir = _tiny_weights_ir()
    lo, hi = np.array([0.0]), np.array([1e250])
    C, d = np.array([[-1.0]]), np.array([-0.25])  # unsafe: y >= 0.25
    nb = B.crown_bounds(ir, lo, hi)
    got = split_leaf(ir, C, d, lo, hi, time.monotonic() + 30, nb=nb)
    assert got[0] in ("candidate", "open"), got   # never "closed" (the pad makes the LP's rows as loose as
    if got[0] == "candidate":                        # the arithmetic warrants: HiGHS may find no point)
        assert float(_exact(ir, got[1])[-1][0]) >= 0.25


def test_trained_scale_networks_get_a_pad_far_below_the_relative_one():
    """On ordinary weights the underflow pad is below 1e-280: no bound moves by a visible amount."""
    rng = np.random.default_rng(3)
    nodes = [InputNode(5)]
    for k in range(4):
        nodes.append(AffineNode(((len(nodes) - 1, rng.standard_normal((50, 5 if k == 0 else 50))),),
                                rng.standard_normal(50)))
        nodes.append(ReluNode(len(nodes) - 1, 50))
    nodes.append(AffineNode(((len(nodes) - 1, rng.standard_normal((3, 50))),), np.zeros(3)))
    ir = ControllerIR(tuple(nodes), (len(nodes) - 1,))
    lo, hi = -np.ones((2, 5)), np.ones((2, 5))
    nb = B.forward_bounds(ir, lo, hi)
    pad = B._underflow_pad(ir, lo, hi, nb, len(ir.nodes))
    assert pad.shape == (2, 1) and np.all(pad > 0) and np.all(pad < 1e-280)


def _wild_ir(rng: np.random.Generator, n_in: int, widths: list[int], sparse: bool) -> tuple[ControllerIR, int]:
    """Layers of magnitudes 10^e_k (e_k in [-200, 200], entries within 10^±1 of it, a few 5e-324), so that the
    passes' products of consecutive layers (forward: a prefix, backward: a suffix) can underflow; the input
    scale 10^s with s = -Σ e_k (clipped to ±300), and every layer's biases at the scale its values have
    (10^(s + e_1 + … + e_k)), so that what an underflow loses is not drowned by a bias of 1."""
    exps = rng.integers(-200, 201, len(widths) + 1)
    scale = int(np.clip(-exps.sum(), -300, 300))
    nodes = [InputNode(n_in)]
    prev, level = n_in, scale
    for k, w in enumerate(widths + [2]):
        level += int(exps[k])
        W = rng.choice([-1.0, 1.0], (w, prev)) * 10.0 ** (exps[k] + rng.uniform(-1, 1, (w, prev)))
        if sparse:
            W[rng.random((w, prev)) < 0.5] = 0.0
        W[rng.random((w, prev)) < 0.05] = 5e-324
        bias = rng.choice([-1.0, 1.0], w) * 10.0 ** (float(np.clip(level, -300, 300)) + rng.uniform(-1, 0.5, w))
        nodes.append(AffineNode(((len(nodes) - 1, W),), bias))
        if k < len(widths):
            nodes.append(ReluNode(len(nodes) - 1, w))
        prev = w
    return ControllerIR(tuple(nodes), (len(nodes) - 1,)), scale


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**31), n_in=st.integers(1, 3), depth=st.integers(1, 4), sparse=st.booleans())
def test_every_bound_holds_the_exact_values_on_networks_with_weights_from_1e_200_to_1e200(seed, n_in, depth,
                                                                                       sparse):
    rng = np.random.default_rng(seed)
    ir, scale = _wild_ir(rng, n_in, [int(rng.integers(1, 4)) for _ in range(depth)], sparse)
    lo = np.where(rng.random(n_in) < 0.5, 0.0, -rng.uniform(0, 1, n_in) * 10.0 ** scale)
    hi = rng.uniform(0.5, 1, n_in) * 10.0 ** scale
    pts = _points(lo, hi, rng, 3)
    with np.errstate(all="ignore"):
        nbs = [B.forward_bounds(ir, lo, hi), B.crown_bounds(ir, lo, hi, B.LOWER_SLOPES)]
        C = rng.standard_normal((2, 2))
        low, _ = B.output_matrix_lower(ir, C, lo, hi, nbs[1])
    for nb in nbs:
        _assert_contains(nb, ir, pts)
    for x in pts:
        y = _exact(ir, x)[-1]
        for r in range(2):
            value = sum((Fraction(float(C[r, j])) * y[j] for j in range(2)), Fraction(0))
            assert _below(float(low[r]), value), (r, low[r], _show(value))


def test_the_chain_kernel_adds_the_same_underflow_pad_as_the_batched_pass(monkeypatch):
    """A sparse chain (the compiled kernel's path) with a coefficient that underflows: the same bits with and
    without the kernel, and the exact value inside."""
    W1 = np.zeros((16, 2)); W1[:8, 0] = 1e-160; W1[8:12, 1] = 1.0
    W2 = np.zeros((8, 16)); W2[np.arange(8), np.arange(8)] = 1e-170; W2[np.arange(8), np.arange(8, 16)] = 1e-3
    W3 = np.zeros((4, 8)); W3[np.arange(4), np.arange(4)] = 1e80; W3[np.arange(4), np.arange(4, 8)] = -1.0
    W4 = np.zeros((1, 4)); W4[0, 0] = 1.0
    ir = ControllerIR((InputNode(2), AffineNode(((0, W1),), np.zeros(16)), ReluNode(1, 16),
                       AffineNode(((2, W2),), np.zeros(8)), ReluNode(3, 8),
                       AffineNode(((4, W3),), np.full(4, -0.5)), ReluNode(5, 4),
                       AffineNode(((6, W4),), np.zeros(1))), (7,))
    assert chain_pass.chain_plan(ir) is not None and B.compactable(ir)
    lo, hi = np.array([[0.0, -1.0]]), np.array([[1e250, 1.0]])
    used = {"n": 0}
    real = B.chain_lower

    def counted(*args):
        used["n"] += 1
        return real(*args)

    monkeypatch.setattr(B, "chain_lower", counted)
    got = B.crown_bounds(ir, lo, hi)
    assert used["n"] > 0
    monkeypatch.setattr(B, "chain_plan", lambda ir: None)
    ref = B.crown_bounds(ir, lo, hi)
    monkeypatch.undo()
    assert [a.tobytes() for a in got.lower + got.upper] == [a.tobytes() for a in ref.lower + ref.upper]
    _assert_contains(got, ir, _points(lo[0], hi[0], np.random.default_rng(1), 4))


# y = relu(x): a ReLU reading the input directly, then an identity affine output
RELU_IN = ControllerIR((InputNode(1), ReluNode(0, 1), AffineNode(((1, np.array([[1.0]])),), np.zeros(1))), (2,))
RELU_LO, RELU_HI = np.array([-3e100]), np.array([1e100 * 2.0 ** -1060])   # HI = 8.094771541462983e-220


def test_a_row_of_1e4_scales_the_pad_of_a_slope_that_underflows():
    """A helper's attack on the first version (2026-12-07): the pad did not scale with the rows C."""
    # s = HI/(HI-LO) = 5461.33 ulps of 2^-1074, rounded down to 5461: the upper line misses relu(HI) by
    # (1/3)·2^-1074·3e100 = 4.9e-224, times |C| = 1e4: 4.9e-220 against a pad of 1.1e-220
    C = np.array([[-1e4]])
    low, _ = B.output_matrix_lower(RELU_IN, C, RELU_LO, RELU_HI)
    exact = Fraction(-1e4) * Fraction(float(RELU_HI[0]))           # -1e4 * y at x = HI: -8.094771541462983e-216
    assert Fraction(float(low[0])) <= exact, (float(low[0]), float(exact))   # (was -8.0947677e-216 > exact)


def test_bound_region_and_split_leaf_leave_open_a_box_that_holds_a_point_of_the_region():
    C = np.array([[-1e17]]); d = np.array([-7.5e-306])
    lo, hi = np.array([-3.0]), np.array([2.0 ** -1070])   # y(hi) = 16·2^-1074; -1e17·y(hi) = -7.905e-306 <= d
    assert Fraction(-1e17) * Fraction(float(hi[0])) <= Fraction(float(d[0]))
    low, _, _ = bound_region(RELU_IN, Disjunct(lo, hi, C, d), lo[None], hi[None], time.monotonic() + 30)
    assert not (np.max(low - d, axis=1)[0] > 0), low      # (was -7.41e-306 > d: closed)
    got = split_leaf(RELU_IN, C, d, lo, hi, time.monotonic() + 30)
    assert got[0] != "closed", got                        # (was ('closed', 1))


def test_decide_does_not_prove_a_query_the_real_valued_network_violates(tmp_path):
    """End to end: ONNX graph Y = Relu(X)·[1, 0]ᵀ + Σ Relu(X_1 - 10) (65 dead ReLUs: 67 > 64, no Z3
    confirmation), X_0 in [-3e100, 8.09e-220], X_1 in [0, 1], unsafe region -1e12·Y <= d. At X = (HI, 0)
    the real-valued network gives -1e12·Y = -8.0948e-208 <= d; decide answered PROVED before the fix."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from mi_certify.generator.frontend.model import load_model
    from mi_certify.generator.core.results import Verdict
    from mi_certify.verification.nn.nn_verify import VerifyOptions, decide
    from mi_certify.verification.nn.properties import Query
    W1 = np.zeros((2, 65)); W1[1] = 1.0
    arrs = {"W1": W1, "b1": -10 * np.ones(65), "W2": np.ones((65, 1)), "W0": np.array([[1.0], [0.0]])}
    g = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["R"]), helper.make_node("MatMul", ["X", "W1"], ["M1"]),
         helper.make_node("Add", ["M1", "b1"], ["A1"]), helper.make_node("Relu", ["A1"], ["R2"]),
         helper.make_node("MatMul", ["R2", "W2"], ["M2"]), helper.make_node("MatMul", ["R", "W0"], ["R0"]),
         helper.make_node("Add", ["M2", "R0"], ["Y"])],
        "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 1])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in arrs.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]); m.ir_version = 8
    onnx.save(m, str(tmp_path / "relu_in.onnx"))
    model = load_model(tmp_path / "relu_in.onnx")
    lo, hi = np.array([-3e100, 0.0]), np.array([1e100 * 2.0 ** -1060, 1.0])
    C, d = np.array([[-1e12]]), np.array([-8.094524723442426e-208])
    # x = (hi_0, 0) is in the unsafe region (exactly)
    assert Fraction(-1e12) * Fraction(float(hi[0])) <= Fraction(float(d[0]))
    res = decide(model, Query("q", "custom", (Disjunct(lo, hi, C, d),)),
                 VerifyOptions(timeout=20, confirm_timeout=10, use_marabou=False, workers=1))
    assert res.verdict != Verdict.PROVED, res.verdict       # (was PROVED: "1 box closed by CROWN bounds")


def test_the_leaf_lp_bound_of_t_covers_products_that_underflow():
    """A second helper's attack (2026-12-07): 20 products C_j·y_j of 0.55 units of 2^-1074 each, rounded up,
    put the LP's lower bound of t above the rows' minimum; split_leaf closed a box all of whose points are
    in the region (C·y - d is -1 unit everywhere)."""
    k, unit = 20, 2.0 ** -1074
    ir = ControllerIR((InputNode(1), AffineNode(((0, np.zeros((k, 1))),), np.full(k, 1e-30))), (1,))
    C = np.full((1, k), float(Fraction(55, 100) * Fraction(2) ** -1074 / Fraction(1e-30)))
    d = np.array([12 * unit])
    lo, hi = np.array([0.0]), np.array([1e-40])
    assert sum(Fraction(float(C[0, j])) * Fraction(1e-30) for j in range(k)) <= Fraction(float(d[0]))
    for nb in (B.crown_bounds(ir, lo, hi), None):
        got = split_leaf(ir, C, d, lo, hi, time.monotonic() + 30, nb=nb)
        assert got[0] != "closed", got   # (was ('closed', 1))


def test_a_network_whose_gamma_passes_the_largest_float_gets_an_infinite_pad_not_an_error():
    """Γ finite but above 2^1023 (a weight of 1.5e308): the power of two above it is not a float; the pad is
    infinite (the linear bounds -inf/+inf, the interval bounds stand), not an OverflowError."""
    ir = ControllerIR((InputNode(1), AffineNode(((0, np.array([[1.5e308]])),), np.zeros(1))), (1,))
    nb = B.forward_bounds(ir, np.array([0.0]), np.array([1.0]))
    assert nb.lower[1][0] <= 0.0 and nb.upper[1][0] >= 1.5e308


_FTZ_C = r"""
#include <xmmintrin.h>
unsigned int set_ftz_daz(void) { unsigned int old = _mm_getcsr(); _mm_setcsr(old | 0x8040u); return old; }
void restore(unsigned int old) { _mm_setcsr(old); }
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc (installed by make setup) builds the MXCSR helper")
def test_a_thread_whose_fpu_flushes_subnormals_gets_an_error_not_a_bound(tmp_path):
    """A library built with -ffast-math sets FTZ/DAZ in MXCSR; then 5e-324 · 1e300 is 0 and the underflow pad
    is not sound: the bound passes refuse (FloatingPointError) and work again once the flags are cleared."""
    src = tmp_path / "ftz.c"
    src.write_text(_FTZ_C)
    lib = tmp_path / "libftz.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True)
    ftz = ctypes.CDLL(str(lib))
    ftz.set_ftz_daz.restype = ctypes.c_uint
    ir = _tiny_weights_ir()
    check_gradual_underflow()
    old = ftz.set_ftz_daz()
    try:
        assert float(np.float64(5e-324) * np.float64(1e300)) == 0.0   # the flags are on in this thread
        with pytest.raises(FloatingPointError, match="FTZ/DAZ"):
            check_gradual_underflow()
        with pytest.raises(FloatingPointError):
            B.crown_bounds(ir, np.array([0.0]), np.array([1.0]))
        with pytest.raises(FloatingPointError):
            B.forward_bounds(ir, np.array([0.0]), np.array([1.0]))
    finally:
        ftz.restore(ctypes.c_uint(old))
    check_gradual_underflow()
    assert float(np.float64(5e-324) * np.float64(1e300)) > 0.0
