"""ONNX import: real exporter patterns and Marabou-bug cases import exactly, the rest is refused."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from onnx import helper

from conftest import ACAS_1_1, ANCHORS, CARTPOLE, CASES, save_model, tensor
from mi_certify.generator.core.errors import ModelImportError, ModelMismatchError
from mi_certify.generator.core.ir import AffineNode
from mi_certify.generator.frontend.onnx_import import cross_check, evaluate_onnxruntime, import_onnx

BOX = (-np.ones(2), np.ones(2))


def _results(case: str) -> dict:
    return json.loads((CASES / case / "results.json").read_text())


@pytest.mark.parametrize("name", ["fanout_relu_and_add", "fanout_two_adds", "skip_add", "const_minus_linear"])
def test_add_fanout_cases_evaluate_like_onnxruntime(name):
    ir = import_onnx(CASES / "marabou_add_fanout" / f"{name}.onnx")
    want = np.concatenate([np.ravel(o) for o in _results("marabou_add_fanout")[f"{name}.onnx"]["ort_out"]])
    np.testing.assert_allclose(ir.evaluate(np.array([0.6, -1.1])), want, rtol=1e-6, atol=1e-6)
    assert cross_check(ir, CASES / "marabou_add_fanout" / f"{name}.onnx", *BOX) < 1e-6


def test_skip_add_value_and_two_heads_stay_distinct():
    skip = import_onnx(CASES / "marabou_add_fanout" / "skip_add.onnx")
    np.testing.assert_allclose(skip.evaluate(np.array([0.6, -1.1])), [-0.0692045, 0.6822295, 2.5851521], atol=1e-6)
    two = import_onnx(CASES / "marabou_add_fanout" / "fanout_two_adds.onnx").evaluate(np.array([0.6, -1.1]))
    np.testing.assert_allclose(two[:3] - two[3:], np.array([0.5, -1, 2]) - np.array([-3, 0.25, 1]), atol=1e-9)


@pytest.mark.parametrize("name", ["add_self", "add_input_self"])
def test_add_of_a_tensor_with_itself_is_twice_the_tensor(name):
    path = CASES / "marabou_duplicate_addend" / f"{name}.onnx"
    ir = import_onnx(path)
    want = np.ravel(_results("marabou_duplicate_addend")[f"{name}.onnx"]["ort_out"])
    np.testing.assert_allclose(ir.evaluate(np.array([0.8, 0.1])), want, rtol=1e-6, atol=1e-6)
    for node in ir.nodes:  # no repeated variable in one equation
        if isinstance(node, AffineNode):
            srcs = [s for s, _ in node.terms]
            assert len(srcs) == len(set(srcs))


def test_add_input_self_doubles_the_input_weights():
    ir = import_onnx(CASES / "marabou_duplicate_addend" / "add_input_self.onnx")
    (src, w), = ir.nodes[1].terms
    np.testing.assert_allclose(w, 2 * np.array([[1, -2], [0.5, 1]]), atol=1e-7)


@pytest.mark.parametrize("name", ["sub_same_shape", "sub_broadcast", "sub_const_minus_var", "sub_var_minus_var"])
def test_sub_imports_for_every_operand_order(name):
    path = CASES / "marabou_sub_normalize" / f"{name}.onnx"
    ir = import_onnx(path)
    assert cross_check(ir, path, -np.ones(ir.n_inputs), np.ones(ir.n_inputs)) < 1e-5


def test_sub_broadcast_and_same_shape_import_to_the_same_network():
    a = import_onnx(CASES / "marabou_sub_normalize" / "sub_same_shape.onnx")
    b = import_onnx(CASES / "marabou_sub_normalize" / "sub_broadcast.onnx")
    x = np.random.default_rng(3).uniform(-1, 1, (50, 5))
    np.testing.assert_allclose(a.evaluate(x), b.evaluate(x), atol=1e-12)


def test_sub_var_minus_var_is_a_minus_b():
    path = CASES / "marabou_sub_normalize" / "sub_var_minus_var.onnx"
    ir = import_onnx(path)
    x = np.random.default_rng(0).uniform(-1, 1, 10)
    np.testing.assert_allclose(ir.evaluate(x), evaluate_onnxruntime(path, x[None])[0], atol=1e-5)
    assert ir.n_inputs == 10  # two graph inputs of 5, concatenated


PATTERNS = ["flatten_symN_opset11", "reshape_0_minus1", "view_shape_chain", "squeeze_unsqueeze_attr_opset11",
            "squeeze_unsqueeze_input_opset13"]


@pytest.mark.parametrize("name", PATTERNS)
def test_exporter_patterns_import_and_bind_the_batch(name):
    path = CASES / "onnx_exporter_patterns" / f"{name}.onnx"
    ir = import_onnx(path)
    assert (ir.n_inputs, ir.n_outputs, ir.n_relus) == (4, 2, 5)
    assert any("symbolic batch dimension 'N' bound to 1" in n for n in ir.notes)
    assert cross_check(ir, path, -np.ones(4), np.ones(4)) < 1e-6


def test_exporter_patterns_are_the_same_network():
    x = np.random.default_rng(1).uniform(-2, 2, (64, 4))
    ref = import_onnx(CASES / "onnx_exporter_patterns" / f"{PATTERNS[0]}.onnx").evaluate(x)
    want = np.ravel(_results("onnx_exporter_patterns")[f"{PATTERNS[0]}.onnx"]["ort_out"])
    for name in PATTERNS[1:]:
        np.testing.assert_allclose(import_onnx(CASES / "onnx_exporter_patterns" / f"{name}.onnx").evaluate(x), ref,
                                   atol=1e-12)
    assert want.shape == (2,)


@pytest.mark.parametrize("name", ["ir3_opset7", "ir7_opset11", "ir8_opset13", "ir10_opset21", "ir_default_opset_default"])
def test_supported_versions_give_identical_results(name):
    ir = import_onnx(CASES / "onnx_version_compat" / f"{name}.onnx")
    want = _results("onnx_version_compat")[f"{name}.onnx"]["ort"]
    np.testing.assert_allclose(ir.evaluate(np.array([0.5, -0.25])), want, rtol=1e-6, atol=1e-7)


def test_ir3_initializers_listed_as_inputs_are_constants_with_a_note():
    ir = import_onnx(CASES / "onnx_version_compat" / "ir3_opset7.onnx")
    assert ir.n_inputs == 2
    assert any("also listed as graph inputs" in n for n in ir.notes)


@pytest.mark.parametrize("name,needle", [("ir_future", "model IR 15 > supported"),
                                         ("opset_future", "model opset 30 > supported")])
def test_future_versions_are_refused_naming_both_versions(name, needle):
    with pytest.raises(ModelImportError) as exc:
        import_onnx(CASES / "onnx_version_compat" / f"{name}.onnx")
    assert needle in str(exc.value) and f"{name}.onnx" in str(exc.value)


def test_acasxu_and_cartpole_anchors_match_onnxruntime():
    acas = import_onnx(ACAS_1_1)
    assert (acas.n_inputs, acas.n_outputs, acas.n_relus) == (5, 5, 300)
    lo = np.array([-0.3284228772, -0.5, -0.5, -0.5, -0.5])
    assert cross_check(acas, ACAS_1_1, lo, -lo * 0 + 0.5) < 1e-5
    cart = import_onnx(CARTPOLE)
    assert (cart.n_inputs, cart.n_outputs, cart.n_relus) == (4, 2, 128)
    assert cross_check(cart, CARTPOLE, -np.ones(4), np.ones(4)) < 1e-5


def test_every_acasxu_network_imports():
    for path in sorted((ANCHORS / "acasxu" / "onnx").glob("*.onnx")):
        ir = import_onnx(path)
        assert cross_check(ir, path, -0.5 * np.ones(5), 0.5 * np.ones(5)) < 1e-5, path.name


# --- refusals: one message naming file, node and reason ---------------------------------

def test_unsupported_operator_is_refused_naming_the_node(tmp_path):
    path = save_model(tmp_path, "erf", [helper.make_node("Erf", ["x"], ["y"], name="act1")],
                      [tensor("x", [1, 2])], [tensor("y", [1, 2])])
    with pytest.raises(ModelImportError) as exc:
        import_onnx(path)
    msg = str(exc.value)
    assert "erf.onnx" in msg and "node 'act1' (Erf)" in msg and "not supported" in msg


def test_division_by_a_variable_is_refused(tmp_path):
    path = save_model(tmp_path, "div", [helper.make_node("Div", ["c", "x"], ["y"], name="d")],
                      [tensor("x", [1, 2])], [tensor("y", [1, 2])], inits=[("c", [[1.0, 2.0]])])
    with pytest.raises(ModelImportError, match=r"node 'd' \(Div\): division by a variable"):
        import_onnx(path)


def test_product_of_two_variables_is_refused(tmp_path):
    path = save_model(tmp_path, "mul", [helper.make_node("Mul", ["x", "x"], ["y"], name="sq")],
                      [tensor("x", [1, 2])], [tensor("y", [1, 2])])
    with pytest.raises(ModelImportError, match=r"node 'sq' \(Mul\): product of two variable tensors"):
        import_onnx(path)


def test_constant_arithmetic_folds_exactly(tmp_path):
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Div", ["a", "k"], ["b"]),
             helper.make_node("Sub", ["b", "c"], ["d"]), helper.make_node("Add", ["c", "d"], ["e"]),
             helper.make_node("Gemm", ["e", "W"], ["y"], alpha=2.0, transB=1)]
    path = save_model(tmp_path, "fold", nodes, [tensor("x", [1, 2])], [tensor("y", [1, 3])],
                      inits=[("k", [4.0, 0.5]), ("c", [1.0, -2.0]), ("W", np.arange(6).reshape(3, 2))])
    ir = import_onnx(path)
    assert len(ir.nodes) == 2  # input + one affine node: everything folded
    np.testing.assert_allclose(ir.evaluate(np.array([1.0, 2.0])), 2 * np.arange(6).reshape(3, 2) @ [1.0, 2.0])
    assert cross_check(ir, path, -np.ones(2), np.ones(2)) < 1e-5  # float32 rounding of x*4/4 in onnxruntime


def test_empty_or_inverted_input_box_is_refused():
    path = CASES / "marabou_inverted_bounds" / "zero_column.onnx"
    ir = import_onnx(path)
    with pytest.raises(ModelImportError, match=r"empty or inverted input box for input 1: \[1.5, 0.5\]"):
        cross_check(ir, path, np.array([0.0, 1.5]), np.array([1.0, 0.5]))


def test_a_wrong_ir_is_caught_by_the_onnxruntime_cross_check():
    path = CASES / "marabou_add_fanout" / "skip_add.onnx"
    good = import_onnx(path)
    bad_nodes = list(good.nodes)
    last = bad_nodes[-1]
    bad_nodes[-1] = AffineNode(last.terms, last.bias + np.array([0.0, 0.0, 2.0]))  # Marabou's in-place shift
    bad = type(good)(tuple(bad_nodes), good.outputs)
    with pytest.raises(ModelMismatchError, match="differs from onnxruntime"):
        cross_check(bad, path, -np.ones(2), np.ones(2))


def test_garbage_file_is_refused(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x00\x01not a model")
    with pytest.raises(ModelImportError, match="junk.onnx"):
        import_onnx(path)


def _mlp(tmp_path, n_in: int, hidden: int = 16, n_out: int = 3, seed: int = 3):
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["r"]), helper.make_node("MatMul", ["r", "W2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["y"])]
    inits = [("W1", rng.normal(size=(n_in, hidden))), ("b1", rng.normal(size=hidden)),
             ("W2", rng.normal(size=(hidden, n_out))), ("b2", rng.normal(size=n_out))]
    return save_model(tmp_path, f"mlp{n_in}", nodes, [tensor("x", [1, n_in])], [tensor("y", [1, n_out])], inits)


@pytest.mark.parametrize("n_in", [1, 7, 8, 12, 24, 200])
def test_the_cross_check_takes_any_input_count(tmp_path, n_in):
    """8 inputs and more failed with "negative dimensions" (the centre and 2^n corners did not fit
    in 256 points); the corners are now all of them while they fill half the points, else a
    fixed sample: 256 points whatever the input count."""
    path = _mlp(tmp_path, n_in)
    assert cross_check(import_onnx(path), path, np.zeros(n_in), np.ones(n_in)) < 1e-5


def test_corner_sets_are_exhaustive_while_small_and_a_fixed_sample_beyond():
    from mi_certify.generator.core.numerics import MAX_CORNERS, corner_signs
    five = corner_signs(5)
    assert five.shape == (32, 5) and len({tuple(r) for r in five}) == 32
    assert [int("".join("1" if b else "0" for b in reversed(r)), 2) for r in five] == list(range(32))
    big = corner_signs(24)
    assert big.shape == (MAX_CORNERS, 24) and not big[0].any() and big[1].all()
    assert np.array_equal(big, corner_signs(24)) and len({tuple(r) for r in big}) == MAX_CORNERS
    assert corner_signs(0).shape == (1, 0)


def _one_op(tmp_path, name, node, extra_inits=(), n=6, opset=13):
    """x (1, n) → W (n × n affine) → node → y: the idiom after a layer, as exporters emit it."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]), node]
    inits = [("W", rng.normal(size=(n, n)) * 2), ("b", rng.normal(size=n)), *extra_inits]
    return save_model(tmp_path, name, nodes, [tensor("x", [1, n])], [tensor("y", [1, n])], inits, opset=opset)


@pytest.mark.parametrize("name, node, inits, opset", [
    ("leaky", helper.make_node("LeakyRelu", ["a"], ["y"], alpha=0.1), (), 13),
    ("leaky_default", helper.make_node("LeakyRelu", ["a"], ["y"]), (), 13),
    ("prelu", helper.make_node("PRelu", ["a", "slope"], ["y"]), (("slope", [0.25, -0.5, 0.0, 1.0, 2.0, 0.1]),), 13),
    ("abs", helper.make_node("Abs", ["a"], ["y"]), (), 13),
    ("relu6", helper.make_node("Clip", ["a", "lo", "hi"], ["y"]), (("lo", 0.0), ("hi", 6.0)), 13),
    ("hardtanh", helper.make_node("Clip", ["a", "lo", "hi"], ["y"]), (("lo", -1.0), ("hi", 1.0)), 13),
    ("clip_min_only", helper.make_node("Clip", ["a", "lo"], ["y"]), (("lo", 0.5),), 13),
    ("clip_attrs", helper.make_node("Clip", ["a"], ["y"], min=-0.5, max=0.75), (), 10),
    ("max_two", helper.make_node("Max", ["a", "x"], ["y"]), (), 13),
    ("min_two", helper.make_node("Min", ["a", "x"], ["y"]), (), 13),
    ("max_const", helper.make_node("Max", ["a", "c"], ["y"]), (("c", [0.1, -0.2, 0.3, 0.0, 1.0, -1.0]),), 13),
    ("dropout", helper.make_node("Dropout", ["a"], ["y"]), (), 13),
    ("batchnorm", helper.make_node("BatchNormalization", ["a", "s", "bb", "m", "v"], ["y"], epsilon=1e-3),
     (("s", [1.0, 2.0, 0.5, -1.0, 3.0, 1.5]), ("bb", [0.0, 1.0, -1.0, 0.5, 0.2, 0.0]),
      ("m", [0.1, -0.2, 0.3, 0.0, 1.0, 2.0]), ("v", [1.0, 0.5, 2.0, 4.0, 0.25, 1.0])), 13),
])
def test_exporter_idioms_import_exactly(tmp_path, name, node, inits, opset):
    """Each idiom is exact in the affine + ReLU IR (a ReLU combination or a folded constant):
    the IR equals onnxruntime at 256 points of the box, corners included."""
    path = _one_op(tmp_path, name, node, inits, opset=opset)
    ir = import_onnx(path)
    assert cross_check(ir, path, -2 * np.ones(6), 2 * np.ones(6)) < 1e-5
    x = np.linspace(-2, 2, 6)
    np.testing.assert_allclose(ir.evaluate(x[None])[0], evaluate_onnxruntime(path, x[None])[0], atol=1e-5)


def test_dropout_in_training_mode_is_refused_by_name(tmp_path):
    path = _one_op(tmp_path, "dropout_train", helper.make_node("Dropout", ["a", "r", "t"], ["y"]),
                   (("r", 0.5),), opset=13)
    import onnx
    m = onnx.load(str(path))
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array(True), "t"))
    onnx.save(m, str(path))
    with pytest.raises(ModelImportError, match="training mode"):
        import_onnx(path)


def test_concat_of_two_graph_inputs_and_split_of_a_layer_import_exactly(tmp_path):
    """Two inputs concatenated (sensor groups), a layer split and re-joined around a ReLU."""
    rng = np.random.default_rng(11)
    nodes = [helper.make_node("Concat", ["u", "v"], ["x"], axis=1),
             helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("Split", ["h", "sizes"], ["h1", "h2"], axis=1),
             helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("Concat", ["h2", "r1", "c"], ["j"], axis=1),
             helper.make_node("MatMul", ["j", "W2"], ["y"])]
    inits = [("W", rng.normal(size=(5, 6))), ("W2", rng.normal(size=(7, 3))), ("c", [[0.5]])]
    path = save_model(tmp_path, "concat_split", nodes, [tensor("u", [1, 2]), tensor("v", [1, 3])],
                      [tensor("y", [1, 3])], inits)
    import onnx
    m = onnx.load(str(path))
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([4, 2], dtype=np.int64), "sizes"))
    onnx.save(m, str(path))
    ir = import_onnx(path)
    assert ir.n_inputs == 5 and ir.n_relus == 4
    assert cross_check(ir, path, -2 * np.ones(5), 2 * np.ones(5)) < 1e-5


def test_a_final_tanh_is_refused_with_why(tmp_path):
    path = _one_op(tmp_path, "tanh", helper.make_node("Tanh", ["a"], ["y"]))
    with pytest.raises(ModelImportError, match="not piecewise linear.*no exact solver") as err:
        import_onnx(path)
    assert "operator Tanh is not supported" in str(err.value) and "tanh.onnx" in str(err.value)


# --- trailing monotone heads: the IR keeps the logits, onnxruntime is read before the head --------

def _mlp_head(tmp_path, name, head_nodes, in_shape=(1, 4), out_shape=(1, 3), opset=13, hidden_head=None, n_out=None):
    """x → MatMul+Add → Relu → MatMul+Add (logits 'z') → head_nodes → y."""
    rng = np.random.default_rng(5)
    n_in, n_out = in_shape[-1], n_out or out_shape[-1]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["h1"]),
             helper.make_node(hidden_head or "Relu", ["h1"], ["r"]),
             helper.make_node("MatMul", ["r", "W2"], ["o"]), helper.make_node("Add", ["o", "b2"], ["z"]), *head_nodes]
    inits = [("W1", rng.normal(size=(n_in, 8))), ("b1", rng.normal(size=8)),
             ("W2", rng.normal(size=(8, n_out)) * 3), ("b2", rng.normal(size=n_out))]
    return save_model(tmp_path, name, nodes, [tensor("x", in_shape)], [tensor("y", out_shape)], inits, opset=opset)


def _raw_outputs(path, x):
    """The shipped file's own graph outputs on onnxruntime (no readout), one point per run."""
    import onnxruntime as ort
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in inp.shape]
    return [sess.run(None, {inp.name: row.reshape(shape).astype(np.float32)}) for row in x]


def _assert_logits_match(ir, path, n_in, lo=-2.0, hi=2.0):
    assert cross_check(ir, path, lo * np.ones(n_in), hi * np.ones(n_in)) < 1e-5
    x = np.random.default_rng(9).uniform(lo, hi, (300, n_in)).astype(np.float32).astype(np.float64)
    mine, ort = ir.evaluate(x), evaluate_onnxruntime(path, x)
    assert mine.shape == ort.shape and np.max(np.abs(mine - ort)) < 1e-5
    assert np.array_equal(np.argmax(mine, axis=1), np.argmax(ort, axis=1))
    assert np.array_equal(np.argmin(mine, axis=1), np.argmin(ort, axis=1))
    return x, mine


@pytest.mark.parametrize("name, head, kind, in_shape, out_shape, opset", [
    ("softmax13", helper.make_node("Softmax", ["z"], ["y"]), "softmax", (1, 4), (1, 3), 13),
    ("softmax11_axis1", helper.make_node("Softmax", ["z"], ["y"], axis=1), "softmax", (1, 4), (1, 3), 11),
    ("softmax_batch", helper.make_node("Softmax", ["z"], ["y"], axis=-1), "softmax", ("N", 4), ("N", 3), 13),
    ("softmax_rank3", helper.make_node("Softmax", ["z"], ["y"], axis=2), "softmax", (1, 1, 4), (1, 1, 3), 13),
    ("logsoftmax", helper.make_node("LogSoftmax", ["z"], ["y"]), "logsoftmax", (1, 4), (1, 3), 13),
    ("sigmoid", helper.make_node("Sigmoid", ["z"], ["y"]), "sigmoid", (1, 4), (1, 3), 13),
])
def test_a_trailing_monotone_head_is_stripped_and_recorded(tmp_path, name, head, kind, in_shape, out_shape, opset):
    path = _mlp_head(tmp_path, name, [head], in_shape, out_shape, opset)
    ir = import_onnx(path)
    assert ir.head is not None and ir.head.kind == kind and ir.head.readout == (("z", 1),) and ir.head.output == "y"
    assert any(f"head {kind} stripped" in line for line in ir.describe())
    assert any(f"head {kind} stripped" in n for n in ir.notes)
    x, mine = _assert_logits_match(ir, path, 4)
    # the decode on the IR logits is the decode on the network's own head output
    probs = np.array([r[0].reshape(-1) for r in _raw_outputs(path, x[:100])])
    assert np.array_equal(np.argmax(mine[:100], axis=1), np.argmax(probs, axis=1))
    if kind == "softmax":   # confidence: softmax of the logits = the network's own probabilities
        e = np.exp(mine[:100] - mine[:100].max(axis=1, keepdims=True))
        np.testing.assert_allclose(e / e.sum(axis=1, keepdims=True), probs, atol=1e-6)


def test_the_loaded_model_reads_the_logits_and_keeps_the_file_bytes(tmp_path):
    import hashlib
    import pickle

    from mi_certify.generator.frontend.model import load_model
    path = _mlp_head(tmp_path, "sm", [helper.make_node("Softmax", ["z"], ["y"])])
    m = load_model(path)
    assert m.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and m.data == path.read_bytes()
    x = np.random.default_rng(2).uniform(-2, 2, (50, 4)).astype(np.float32).astype(np.float64)
    assert np.max(np.abs(m.evaluate_onnxruntime(x) - m.ir.evaluate(x))) < 1e-5
    assert m.cross_check(-2 * np.ones(4), 2 * np.ones(4)) < 1e-5
    again = pickle.loads(pickle.dumps(m))           # worker processes build their own readout
    np.testing.assert_array_equal(again.evaluate_onnxruntime(x), m.evaluate_onnxruntime(x))


def test_a_head_that_disagrees_with_its_logits_is_caught():
    from mi_certify.generator.frontend.onnx_import import OnnxruntimeReadout
    r = OnnxruntimeReadout.__new__(OnnxruntimeReadout)
    r.head = type("H", (), {"kind": "softmax", "output": "y"})()
    r.name = "m.onnx"
    r.confirm_order(np.zeros((1, 2)), np.array([[0.1, 0.9, 0.5]]), np.array([[0.2, 0.5, 0.3]]))  # same order
    with pytest.raises(ModelMismatchError, match="orders the actions differently"):
        r.confirm_order(np.zeros((1, 2)), np.array([[0.1, 0.9, 0.5]]), np.array([[0.2, 0.3, 0.5]]))


@pytest.mark.parametrize("op", ["Softmax", "Sigmoid", "Tanh"])
def test_a_hidden_softmax_sigmoid_or_tanh_is_refused_with_why(tmp_path, op):
    path = _mlp_head(tmp_path, f"hidden_{op.lower()}", [helper.make_node("Identity", ["z"], ["y"])], hidden_head=op)
    with pytest.raises(ModelImportError) as err:
        import_onnx(path)
    msg = str(err.value)
    assert f"hidden_{op.lower()}.onnx" in msg and "not piecewise linear" in msg and "no exact solver" in msg
    assert len(msg.splitlines()) == 1
    if op != "Tanh":
        assert "feeds a hidden layer" in msg and "only a Softmax (last axis), LogSoftmax or Sigmoid" in msg


def test_a_softmax_over_several_rows_or_beside_another_output_is_refused(tmp_path):
    path = _mlp_head(tmp_path, "rows", [helper.make_node("Reshape", ["z", "shp"], ["z2"]),
                                        helper.make_node("Softmax", ["z2"], ["y"])], out_shape=(2, 2), n_out=4)
    import onnx
    m = onnx.load(str(path))
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([2, 2], dtype=np.int64), "shp"))
    onnx.save(m, str(path))
    with pytest.raises(ModelImportError, match="several rows separately"):
        import_onnx(path)
    path = _mlp_head(tmp_path, "two", [helper.make_node("Softmax", ["z"], ["y"])])
    m = onnx.load(str(path))
    m.graph.output.append(tensor("z", [1, 3]))
    onnx.save(m, str(path))
    with pytest.raises(ModelImportError, match="beside other outputs"):
        import_onnx(path)


def test_a_rank3_input_with_matmul_add_imports_and_cross_checks(tmp_path):
    rng = np.random.default_rng(4)
    path = save_model(tmp_path, "r3", [helper.make_node("MatMul", ["x", "W"], ["h"]),
                                       helper.make_node("Add", ["h", "b"], ["y"])],
                      [tensor("x", [1, 1, 5])], [tensor("y", [1, 1, 3])],
                      [("W", rng.normal(size=(5, 3))), ("b", rng.normal(size=3))])
    ir = import_onnx(path)
    assert (ir.n_inputs, ir.n_outputs) == (5, 3)
    _assert_logits_match(ir, path, 5, 0.0, 1.0)


# --- scikit-learn through skl2onnx -------------------------------------------------------

def _sk_data(n_in=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (400, n_in)).astype(np.float32)
    y3 = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.3).astype(int)
    return x, y3, (x[:, 0] + x[:, 1] > 0).astype(int)


def _sk_export(tmp_path, name, est, n_in, zipmap, batch):
    skl2onnx = pytest.importorskip("skl2onnx")
    from skl2onnx.common.data_types import FloatTensorType
    opts = None if zipmap else {id(est): {"zipmap": False}}
    onx = skl2onnx.convert_sklearn(est, initial_types=[("input", FloatTensorType([batch, n_in]))], options=opts,
                                   target_opset={"": 17, "ai.onnx.ml": 3})
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(onx.SerializeToString())
    return path


@functools.lru_cache(maxsize=1)
def _classifiers():
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    x, y3, y2 = _sk_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return {"mlp3": MLPClassifier(hidden_layer_sizes=(8,), max_iter=300, random_state=0).fit(x, y3),
                "mlp2": MLPClassifier(hidden_layer_sizes=(8,), max_iter=300, random_state=0).fit(x, y2),
                "logreg3": LogisticRegression().fit(x, y3), "logreg2": LogisticRegression().fit(x, y2)}


@pytest.mark.parametrize("zipmap", [True, False], ids=["zipmap", "nozipmap"])
@pytest.mark.parametrize("batch", [None, 1], ids=["batchN", "batch1"])
@pytest.mark.parametrize("which, kind", [("mlp3", "softmax"), ("mlp2", "softmax"), ("logreg3", "softmax"),
                                         ("logreg2", "sigmoid")])
def test_skl2onnx_classifiers_import_their_logits(tmp_path, which, kind, zipmap, batch):
    pytest.importorskip("skl2onnx")
    est = _classifiers()[which]
    path = _sk_export(tmp_path, f"{which}_{zipmap}_{batch}", est, 3, zipmap, batch)
    ir = import_onnx(path)
    assert ir.n_inputs == 3 and ir.n_outputs == len(est.classes_) and ir.head.kind == kind
    assert any("class label" in n and "ignored" in n for n in ir.notes)
    if zipmap:
        assert any("ZipMap" in n for n in ir.notes)
    x, mine = _assert_logits_match(ir, path, 3, -1.0, 1.0)
    # decode = scikit-learn's prediction = the export's own label output
    assert np.array_equal(np.argmax(mine, axis=1), est.predict(x.astype(np.float32)))
    labels = np.array([np.ravel(r[0])[0] for r in _raw_outputs(path, x[:100])])
    assert np.array_equal(np.argmax(mine[:100], axis=1), labels)
    if which == "mlp2":       # [1 − sigmoid(z), sigmoid(z)] = softmax([0, z]): the logits give the probabilities
        assert ir.head.readout[0][1] == 0
        e = np.exp(mine - mine.max(axis=1, keepdims=True))
        np.testing.assert_allclose(e / e.sum(axis=1, keepdims=True), est.predict_proba(x), atol=1e-5)


@pytest.mark.parametrize("batch", [None, 1], ids=["batchN", "batch1"])
@pytest.mark.parametrize("which", ["mlp1", "mlp2", "linear"])
def test_skl2onnx_regressors_import_their_values(tmp_path, which, batch):
    pytest.importorskip("skl2onnx")
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LinearRegression
    from sklearn.neural_network import MLPRegressor
    x, _, _ = _sk_data()
    t = np.c_[x @ [1.0, 2.0, -1.0], x[:, 0] - x[:, 2]] if which == "mlp2" else x @ [1.0, 2.0, -1.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = (LinearRegression() if which == "linear" else
               MLPRegressor(hidden_layer_sizes=(8,), max_iter=300, random_state=0)).fit(x, t)
    path = _sk_export(tmp_path, f"reg_{which}_{batch}", est, 3, True, batch)
    ir = import_onnx(path)
    assert ir.head is None and ir.n_outputs == (2 if which == "mlp2" else 1)
    pts, mine = _assert_logits_match(ir, path, 3, -1.0, 1.0)
    np.testing.assert_allclose(mine, est.predict(pts.astype(np.float32)).reshape(len(pts), -1), atol=1e-4)


def test_skl2onnx_exports_that_are_not_exact_are_refused_by_name(tmp_path):
    pytest.importorskip("skl2onnx")
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.tree import DecisionTreeClassifier
    x, y3, _ = _sk_data()
    tree = _sk_export(tmp_path, "tree", DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y3), 3, True, None)
    with pytest.raises(ModelImportError) as err:
        import_onnx(tree)
    msg = str(err.value)
    assert "tree.onnx" in msg and "TreeEnsembleClassifier" in msg and "options={'zipmap': False}" in msg
    assert len(msg.splitlines()) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        tanh = MLPClassifier(hidden_layer_sizes=(4,), activation="tanh", max_iter=50, random_state=0).fit(x, y3)
    path = _sk_export(tmp_path, "tanh_mlp", tanh, 3, False, None)
    with pytest.raises(ModelImportError, match="tanh_mlp.onnx.*Tanh.*not piecewise linear"):
        import_onnx(path)


@pytest.mark.parametrize("seed", range(3))
def test_an_unmade_identity_term_gives_the_bits_of_np_eye_in_every_expression_op(seed):
    """Importer.node_lin's term is values.Eye (no np.eye: 537 MB at width 8,192): every expression
    operation on it gives the bits the made identity gives; a product with a finite constant skips the
    product (-0.0 weights come out +0.0, as the fixed-order sum from +0 gives them), and one with an
    infinity or a NaN makes it (inf · 0 = NaN where the sum meets it)."""
    from mi_certify.generator.frontend.onnx import values as V
    rng = np.random.default_rng(700 + seed)
    n, m = (int(v) for v in rng.integers(2, 9, size=2))
    lazy, made = (V.Lin((n,), {3: t}, rng.standard_normal(n)) for t in (V.Eye(n), np.eye(n)))
    made = V.Lin(made.shape, made.terms, lazy.bias)
    w = rng.choice([0.0, -0.0, 1.5, -2.0, 5e-324], size=(n, m))
    w_bad = w.copy()
    w_bad[0, 0] = rng.choice([np.inf, np.nan])
    fail = ValueError

    def bits(lin):
        return {s: np.asarray(t).tobytes() for s, t in lin.terms.items()}, lin.bias.tobytes(), lin.shape
    idx = rng.integers(0, n, size=(2, n))
    def column(x):   # the same expression as an (n, 1) tensor, its identity term kept as it is
        return V.Lin((n, 1), x.terms, x.bias)
    ops = [lambda x: V.lin_matmul(x, w, fail), lambda x: V.lin_matmul(x, w_bad, fail),
           lambda x: V.lin_matmul(w.T, column(x), fail), lambda x: V.lin_matmul(w_bad.T, column(x), fail),
           lambda x: V.lin_matmul(w.T, V.lin_reshape(x, (n, 1)), fail), lambda x: V.lin_take(x, idx), lambda x: V.lin_scale(x, rng.standard_normal(n)),
           lambda x: V.lin_add(x, x, -1.0), lambda x: V.lin_add(x, np.ones(n)), lambda x: V.lin_stack([x, x])[0],
           lambda x: V.lin_transpose(V.lin_reshape(x, (1, n)))]
    for k, op in enumerate(ops):
        state = rng.bit_generator.state
        got = op(lazy)
        rng.bit_generator.state = state
        want = op(made)
        assert bits(got) == bits(want), k
    direct = V.lin_matmul(lazy, w, fail).terms[3]
    assert isinstance(direct, np.ndarray) and not np.signbit(direct[w.T == 0]).any()
    assert np.isnan(V.lin_matmul(lazy, w_bad, fail).terms[3]).any()
    assert not np.signbit(V.lin_matmul(w.T, column(lazy), fail).terms[3][w.T == 0]).any()
