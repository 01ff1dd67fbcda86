"""The compiled per-neuron CROWN passes on sparse chain networks (verification/nn/chain_pass.py, issue 38):
bit for bit the batched pass's bounds, on the handed tllverifybench networks and on random chains."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mi_certify.verification.nn.bounds as B
from conftest import ANCHORS
from mi_certify.generator.core.ir import AffineNode, ControllerIR, InputNode, ReluNode
from mi_certify.generator.frontend.model import load_model
from mi_certify.verification.nn import chain_pass
from mi_certify.verification.nn.bounds import LOWER_SLOPES, crown_bounds

TLL = sorted((ANCHORS / "tllverifybench" / "onnx").glob("*.onnx"))


def _both_ways(ir, lo, hi, slopes, monkeypatch) -> tuple[list[bytes], list[bytes], dict]:
    """Every node bound of ``crown_bounds`` with the chain kernel and with the batched pass alone (bytes),
    and how many instances the kernel computed and flagged."""
    seen = {"computed": 0, "flagged": 0}
    real = B.chain_lower

    def counted(*args):
        out, flagged = real(*args)
        seen["computed"] += int((~flagged).sum())
        seen["flagged"] += int(flagged.sum())
        return out, flagged

    monkeypatch.setattr(B, "chain_lower", counted)
    got = crown_bounds(ir, lo, hi, slopes)
    monkeypatch.setattr(B, "chain_plan", lambda ir: None)
    ref = crown_bounds(ir, lo, hi, slopes)
    monkeypatch.undo()
    return ([a.tobytes() for a in got.lower + got.upper], [b.tobytes() for b in ref.lower + ref.upper], seen)


@pytest.mark.parametrize("path", TLL[::3], ids=lambda p: p.stem.replace("tllBench_n=2_N=M=", "N"))
def test_the_chain_kernel_gives_the_batched_passes_bits_on_tllverifybench(path, monkeypatch):
    ir = load_model(path).ir
    assert chain_pass.chain_plan(ir) is not None
    rng = np.random.default_rng(7)
    mid = rng.uniform(-1, 1, (6, ir.n_inputs))
    rad = rng.uniform(0.01, 0.5, mid.shape)
    got, ref, seen = _both_ways(ir, mid - rad, mid + rad, LOWER_SLOPES, monkeypatch)
    assert got == ref
    assert seen["computed"] > 100 and seen["flagged"] == 0, seen


def _chain(draw_rng: np.random.Generator, n_in: int, widths: list[int], fan: int, dense_first: bool) -> ControllerIR:
    """A random chain: input, then affine / ReLU pairs whose rows read ``fan`` scattered neurons of the layer
    below (exact zeros, -0.0 biases and weights of many magnitudes among them), then an affine output."""
    nodes = [InputNode(n_in)]
    prev = n_in
    for k, w in enumerate(widths + [3]):
        W = np.zeros((w, prev))
        for j in range(w):
            cols = draw_rng.choice(prev, size=min(fan, prev), replace=False)
            W[j, cols] = draw_rng.standard_normal(cols.size) * 10.0 ** draw_rng.integers(-3, 3, cols.size)
        if k == 0 and dense_first:
            W = draw_rng.standard_normal((w, prev))
        bias = draw_rng.standard_normal(w)
        bias[draw_rng.random(w) < 0.2] = -0.0
        nodes.append(AffineNode(((len(nodes) - 1, W),), bias))
        if k < len(widths):
            nodes.append(ReluNode(len(nodes) - 1, w))
        prev = w
    return ControllerIR(tuple(nodes), (len(nodes) - 1,))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), n_in=st.integers(1, 6), depth=st.integers(1, 4), fan=st.integers(1, 4),
       dense_first=st.booleans(), slopes=st.sampled_from([("adaptive",), LOWER_SLOPES, ("zero", "one")]))
def test_the_chain_kernel_gives_the_batched_passes_bits_on_random_chains(seed, n_in, depth, fan, dense_first,
                                                                        slopes, monkeypatch):
    rng = np.random.default_rng(seed)
    ir = _chain(rng, n_in, [int(rng.integers(12, 40)) for _ in range(depth)], fan, dense_first)
    if not B.compactable(ir):   # every layer too dense to be held sparse: the kernel is not used
        return
    mid = rng.uniform(-2, 2, (4, n_in))
    lo, hi = mid - rng.uniform(0, 1, mid.shape), mid + rng.uniform(0, 1, mid.shape)
    got, ref, seen = _both_ways(ir, lo, hi, slopes, monkeypatch)
    assert got == ref
    assert seen["flagged"] == 0


def test_an_instance_whose_coefficients_overflow_is_left_to_the_batched_pass(monkeypatch):
    """Weights of 1e200 in two layers over inputs of 1e-300: every bound is finite, but the pass's product of
    the two layers overflows to inf. The kernel flags those instances and the batched pass computes them,
    with its NaN semantics: the same bits either way."""
    W1 = np.zeros((16, 2)); W1[:8, 0] = 1e-300; W1[:4, 1] = -1e-300   # (sparse enough for the kernel)
    W2 = np.zeros((6, 16)); W2[np.arange(6), np.arange(6)] = 1e200; W2[np.arange(6), np.arange(2, 8)] = -1e200
    W3 = np.zeros((5, 6)); W3[np.arange(5), np.arange(5)] = 1e200; W3[np.arange(5), np.arange(1, 6)] = -1e200
    W4 = np.zeros((1, 5)); W4[0, :2] = 1.0
    ir = ControllerIR((InputNode(2), AffineNode(((0, W1),), np.zeros(16)), ReluNode(1, 16),
                       AffineNode(((2, W2),), np.zeros(6)), ReluNode(3, 6),
                       AffineNode(((4, W3),), np.zeros(5)), ReluNode(5, 5),
                       AffineNode(((6, W4),), np.zeros(1))), (7,))
    assert chain_pass.chain_plan(ir) is not None and B.compactable(ir)
    lo, hi = np.array([[-1.0, -1.0], [0.0, -0.5]]), np.array([[1.0, 1.0], [0.5, 0.5]])
    got, ref, seen = _both_ways(ir, lo, hi, ("adaptive",), monkeypatch)
    assert got == ref
    assert seen["flagged"] > 0, seen


def test_the_kernel_is_not_used_off_a_sparse_finite_chain():
    """A skip connection (two terms), a jump over a node, a non-finite weight, mostly nonzero weights: no
    plan, the batched pass runs. A plan's work per node counts the nonzero weights before it."""
    W = np.zeros((4, 4)); W[0, 0] = 1.0
    base = [InputNode(4), AffineNode(((0, np.eye(4)),), np.zeros(4)), ReluNode(1, 4)]
    skip = ControllerIR(tuple(base + [AffineNode(((0, W), (2, W)), np.zeros(4))]), (3,))
    inf = ControllerIR(tuple(base + [AffineNode(((2, W * np.inf),), np.zeros(4))]), (3,))
    jump = ControllerIR(tuple(base + [AffineNode(((0, W),), np.zeros(4))]), (3,))
    chain = ControllerIR(tuple(base + [AffineNode(((2, W),), np.zeros(4))]), (3,))
    # a chain whose weights are mostly nonzero (a fresh helper: the kernel was 3x slower there, and late
    # for its deadline): the batched pass
    dense = ControllerIR(tuple([InputNode(4), AffineNode(((0, np.ones((4, 4))),), np.zeros(4)), ReluNode(1, 4),
                                AffineNode(((2, W),), np.zeros(4))]), (3,))
    assert B.compactable(dense)
    assert ([chain_pass.chain_plan(ir) is None for ir in (skip, inf, jump, chain, dense)]
            == [True, True, True, False, True])
    assert chain_pass.chain_plan(chain).work.tolist() == [0, 0, 4, 4]
