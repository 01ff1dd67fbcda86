"""onnxruntime before the import (issue 38 item 6): ``load_model(path, boxes)`` runs onnxruntime on the
cross-check's points of the announced boxes with nothing else in memory and drops its session before
the IR is made; the cross-check then gives the same answer (every bit of onnxruntime's outputs, the same
errors), and anything it cannot use is made as before."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from conftest import save_model, tensor
from mi_certify.generator.core.errors import ModelImportError, ModelMismatchError
from mi_certify.generator.frontend import model as model_mod
from mi_certify.generator.frontend.model import load_model
from mi_certify.verification.nn.vnnlib import announced_boxes


def _chain(tmp_path, name="chain", seed=7, head=False):
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["m0"]), helper.make_node("Add", ["m0", "b0"], ["a0"]),
             helper.make_node("Relu", ["a0"], ["r0"]), helper.make_node("MatMul", ["r0", "W1"], ["m1"]),
             helper.make_node("Add", ["m1", "b1"], ["z"])]
    inits = [("W0", rng.normal(size=(3, 20))), ("b0", rng.normal(size=20)), ("W1", rng.normal(size=(20, 2))),
             ("b1", rng.normal(size=2))]
    out = "z"
    if head:
        nodes.append(helper.make_node("Softmax", ["z"], ["y"]))
        out = "y"
    return save_model(tmp_path, name, nodes, [tensor("x", (1, 3))], [tensor(out, (1, 2))], inits)


BOX = (-np.ones(3), np.array([1.0, 2.0, 0.5]))


def _sessions(monkeypatch, order):
    """Record each onnxruntime session and the import, in order."""
    from mi_certify.generator.frontend import onnx_import
    made = model_mod.onnxruntime_session
    monkeypatch.setattr(model_mod, "onnxruntime_session", lambda *a: order.append("session") or made(*a))
    made_late = onnx_import.onnxruntime_session
    monkeypatch.setattr(onnx_import, "onnxruntime_session", lambda *a: order.append("session") or made_late(*a))
    imp = model_mod.read_and_import
    monkeypatch.setattr(model_mod, "read_and_import", lambda p: order.append("import") or imp(p))


def test_onnxruntime_runs_before_the_import_and_the_cross_check_is_the_same(monkeypatch, tmp_path):
    path = _chain(tmp_path)
    late = load_model(path)
    worst_late = late.cross_check(*BOX)
    pts = model_mod.cross_check_points(3, late.feeds, path, *BOX)
    want = late.evaluate_onnxruntime(pts)
    order = []
    _sessions(monkeypatch, order)
    asked = []
    early = load_model(path, lambda n_in, n_out: asked.append((n_in, n_out)) or [BOX])
    assert order == ["session", "import"] and asked == [(3, 2)]
    assert early._session is None and len(early._early.runs) == 1
    got = []
    real = model_mod._EarlyReadout.take
    monkeypatch.setattr(model_mod._EarlyReadout, "take", lambda self, m, p: (lambda y: got.append(y) or y)(real(self, m, p)))
    assert early.cross_check(*BOX) == worst_late                         # the same answer
    assert got[0].tobytes() == want.tobytes()                            # every bit of onnxruntime's outputs
    assert order == ["session", "import"] and early._session is None    # no second session for it
    early.cross_check(*BOX)                                              # used once: a session as before
    assert order == ["session", "import", "session"]


def test_what_the_early_readout_cannot_answer_is_made_as_before(monkeypatch, tmp_path):
    path = _chain(tmp_path)
    m = load_model(path, lambda n_in, n_out: [BOX])
    other = (-np.ones(3), np.ones(3))                                     # another box: a session
    assert m.cross_check(*other) == load_model(path).cross_check(*other)
    assert m._session is not None
    # a head: the readout fetches the logits from a changed copy of the model, not the file's outputs
    hp = _chain(tmp_path, "head", head=True)
    h = load_model(hp, lambda n_in, n_out: [BOX])
    assert h.ir.head is not None and h._early.take(h, model_mod.cross_check_points(3, h.feeds, hp, *BOX)) is None
    assert h.cross_check(*BOX) == load_model(hp).cross_check(*BOX)


def test_a_file_changed_between_the_readout_and_the_import_is_not_mixed_up(monkeypatch, tmp_path):
    path = _chain(tmp_path)
    other = _chain(tmp_path, "other", seed=8).read_bytes()
    imp = model_mod.read_and_import

    def swapped(p):
        p.write_bytes(other)                                              # the import reads another model
        return imp(p)
    monkeypatch.setattr(model_mod, "read_and_import", swapped)
    m = load_model(path, lambda n_in, n_out: [BOX])
    assert m._early.sha256 != m.sha256
    assert m._early.take(m, model_mod.cross_check_points(3, m.feeds, path, *BOX)) is None
    assert m.cross_check(*BOX) < 1e-5                                     # the imported model's own session


def test_errors_stay_where_they_were(monkeypatch, tmp_path):
    """A box the caller's parse refuses, a model onnxruntime or the importer refuses: load_model
    raises only what it raised before, and the cross-check what it raised before."""
    path = _chain(tmp_path)

    def refused(n_in, n_out):
        raise ValueError("no box")
    m = load_model(path, refused)
    assert m._early is None and m.cross_check(*BOX) < 1e-5
    bad = save_model(tmp_path, "bad", [helper.make_node("Erf", ["x"], ["y"])], [tensor("x", (1, 3))],
                     [tensor("y", (1, 3))])
    with pytest.raises(ModelImportError) as without:
        load_model(bad)
    with pytest.raises(ModelImportError) as early:
        load_model(bad, lambda n_in, n_out: [BOX])
    assert str(early.value) == str(without.value)
    with pytest.raises(ModelImportError, match="empty or inverted input box"):
        load_model(path, lambda n_in, n_out: [BOX]).cross_check(np.ones(3), -np.ones(3))
    missing = tmp_path / "missing.onnx"
    with pytest.raises(ModelImportError, match="no such file"):
        load_model(missing, lambda n_in, n_out: [BOX])


def test_a_mismatch_found_on_early_outputs_is_the_same_error(monkeypatch, tmp_path):
    path = _chain(tmp_path)
    m = load_model(path, lambda n_in, n_out: [BOX])
    pts, out = m._early.runs[0]
    m._early.runs[0] = (pts, out + 1.0)                                   # as if the IR differed
    with pytest.raises(ModelMismatchError, match="imported network differs from onnxruntime"):
        m.cross_check(*BOX)


def test_the_vnnlib_boxes_are_the_cross_checks_boxes(tmp_path):
    from mi_certify.verification.nn.vnnlib import parse_vnnlib, query_box
    good = tmp_path / "p.vnnlib"
    good.write_text("(declare-const X_0 Real)\n(declare-const X_1 Real)\n(declare-const X_2 Real)\n"
                    "(declare-const Y_0 Real)\n(declare-const Y_1 Real)\n"
                    "(assert (>= X_0 -1))\n(assert (<= X_0 1))\n(assert (>= X_1 -1))\n(assert (<= X_1 2))\n"
                    "(assert (>= X_2 -1))\n(assert (<= X_2 0.5))\n(assert (<= Y_0 Y_1))\n")
    broken = tmp_path / "q.vnnlib"
    broken.write_text("(assert (<= X_0 1)")
    boxes = announced_boxes([good, broken])(3, 2)                          # the broken one: left out
    lo, hi = query_box(parse_vnnlib(good, 3, 2), good)
    assert len(boxes) == 1 and boxes[0][0].tobytes() == lo.tobytes() and boxes[0][1].tobytes() == hi.tobytes()
    path = _chain(tmp_path)
    m = load_model(path, announced_boxes([good]))
    assert m.cross_check(lo, hi) == load_model(path).cross_check(lo, hi) and m._session is None


def test_the_early_outputs_stay_in_this_process(tmp_path):
    import pickle
    m = load_model(_chain(tmp_path), lambda n_in, n_out: [BOX])
    assert m._early is not None and pickle.loads(pickle.dumps(m))._early is None
