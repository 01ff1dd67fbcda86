"""Certified distillation: proven cells, resolved cells with witnesses, the confident bit, determinism."""

from __future__ import annotations

import pytest
from onnx import helper

from conftest import save_model, tensor, two_action_model, two_action_spec
from mi_certify.generator.build.distill import DistillOptions, distill, fidelity
from mi_certify.generator.core.lut import PROVEN, RESOLVED
from mi_certify.generator.frontend.model import load_model


@pytest.mark.parametrize("workers", [1, 2])
def test_cells_are_proven_where_one_action_wins_and_resolved_where_the_boundary_cuts(tmp_path, workers):
    model = two_action_model(tmp_path)
    spec = two_action_spec(tmp_path)
    # an explicit backend: distill itself decides an 8-cell grid in this process (INLINE_BELOW_S)
    from mi_certify.verification.tools.backends import BackendSpec, open_backend
    backend = open_backend(BackendSpec(workers=workers))
    try:
        res = distill(spec, load_model(model), DistillOptions(workers=workers), backend=backend)
    finally:
        backend.close()
    assert backend.name == ("inline" if workers == 1 else "processes")
    # address = x level (2 bits) << 1 | z level; x cells [-1,-.5) [-.5,0) [0,.5) [.5,1]
    assert res.lut.tokens.tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    assert res.lut.status.tolist() == [PROVEN] * 4 + [RESOLVED] * 2 + [PROVEN] * 2
    assert [r["address"] for r in res.resolved(spec)] == [4, 5]
    for r in res.resolved(spec):
        assert sorted(r["actions"]) == ["a0", "a1"] and r["resolved_to"] == "a0" and not r["undecided"]
        assert 0 <= r["witnesses"][1]["x"][0] <= 0.5  # the witness lies in the cell
    f, diag = fidelity(two_action_spec(tmp_path), load_model(model), res.lut, n_points=2000)
    assert f["proven_agree"] == f["proven_points"] > 1000
    assert f["network"] == "IR float64 (fixed-order arithmetic)" and diag["points"] == 2000
    assert diag["lut_agree_onnxruntime"] >= f["proven_points"] and diag["ir_vs_onnxruntime_decisions_differ"] == 0


def test_centre_policy_keeps_the_centre_action_without_confidence(tmp_path):
    model = two_action_model(tmp_path)
    spec = two_action_spec(tmp_path, distill_section="distill: {resolve: centre}")
    res = distill(spec, load_model(model), DistillOptions(resolve=spec.resolve, workers=1))
    assert res.lut.tokens[4] == 0 and not res.lut.confident[4]  # centre x=0.25 -> a0


def test_confident_bit_is_a_certified_lower_bound(tmp_path):
    model = two_action_model(tmp_path)
    spec = two_action_spec(tmp_path, confidence="confidence: {kind: softmax, threshold: 0.99}")
    res = distill(spec, load_model(model), DistillOptions(workers=1))
    # in cell [-0.5, 0): margin y1 - y0 = -8 (x - 0.1) >= 0.8 -> p >= 1/(1+e^-0.8) = 0.69 < 0.99: not confident
    # in cell [-1, -0.5): margin >= 4.8 -> p >= 0.9918: confident
    assert res.lut.confident.tolist()[:4] == [True, True, False, False]


def test_an_island_inside_a_cell_whose_vertices_agree_is_found_and_resolved(tmp_path):
    # y0 = 4 |x - 0.25| (two ReLUs), y1 = 0.4: a1 wins only for 0.15 < x < 0.35, strictly
    # inside the cell [0, 0.5) whose vertices both decode a0
    nodes = [helper.make_node("Gemm", ["in", "W1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "W2", "b2"], ["y"], transB=1)]
    model = save_model(tmp_path, "island", nodes, [tensor("in", [1, 2])], [tensor("y", [1, 2])],
                       inits=[("W1", [[1.0, 0.0], [-1.0, 0.0]]), ("b1", [-0.25, 0.25]),
                              ("W2", [[4.0, 4.0], [0.0, 0.0]]), ("b2", [0.0, 0.4])])
    spec = two_action_spec(tmp_path)
    res = distill(spec, load_model(model), DistillOptions(workers=1))
    assert res.lut.tokens.tolist() == [0] * 8
    assert res.lut.status.tolist() == [PROVEN] * 4 + [RESOLVED] * 2 + [PROVEN] * 2
    for r in res.resolved(spec):
        assert sorted(r["actions"]) == ["a0", "a1"] and not r["undecided"]
        a1 = next(w for w in r["witnesses"] if w["action"] == "a1")
        assert 0.15 < a1["x"][0] < 0.35
    assert res.stats["bound_calls"] > 0 and res.stats["sampled_cells"] == 2
