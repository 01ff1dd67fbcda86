"""The import holds as little as it can (issue 38 item 6): the bytes are not kept, the parsed model is
dropped once its initializers are taken, each weight is released once consumed, and a large constant
is multiplied block by block; every result is bit for bit the one before."""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import onnx
import pytest
from onnx import helper

from conftest import save_model, tensor
from mi_certify.generator.core.errors import ModelImportError
from mi_certify.generator.frontend.onnx import values
from mi_certify.generator.frontend.onnx.importer import Importer
from mi_certify.generator.frontend.onnx_import import import_model, parse_model_file


def _chain(tmp_path, name="chain", width=(3, 40, 30, 20, 2), seed=7):
    """x → (MatMul → Add → Relu)* → MatMul → Add → y."""
    rng = np.random.default_rng(seed)
    nodes, inits, cur = [], [], "x"
    for k in range(len(width) - 1):
        nodes += [helper.make_node("MatMul", [cur, f"W{k}"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"])]
        inits += [(f"W{k}", rng.normal(size=(width[k], width[k + 1]))), (f"b{k}", rng.normal(size=width[k + 1]))]
        cur = f"a{k}"
        if k < len(width) - 2:
            nodes.append(helper.make_node("Relu", [cur], [f"r{k}"]))
            cur = f"r{k}"
    return save_model(tmp_path, name, nodes, [tensor("x", (1, width[0]))], [tensor(cur, (1, width[-1]))], inits)


def _same_ir(a, b) -> None:
    assert len(a.nodes) == len(b.nodes) and a.outputs == b.outputs and a.notes == b.notes
    for p, q in zip(a.nodes, b.nodes):
        assert p.kind == q.kind
        if p.kind == "affine":
            assert [s for s, _ in p.terms] == [s for s, _ in q.terms]
            for (_, u), (_, v) in zip(p.terms, q.terms):
                assert u.dtype == v.dtype and u.shape == v.shape and u.tobytes() == v.tobytes()
            assert p.bias.tobytes() == q.bias.tobytes()


def test_the_importer_releases_each_initializer_after_its_last_use(tmp_path):
    path = _chain(tmp_path)
    seen = []
    imp = Importer(path, parse_model_file(path))
    imp.take_initializers()
    assert all(not t.raw_data and not t.float_data for t in imp.model.graph.initializer)  # the copy holds no data
    assert sorted(imp.arrays) == ["W0", "W1", "W2", "W3", "b0", "b1", "b2", "b3"]
    apply = imp.apply

    def spy(i, node):
        apply(i, node)
        seen.append((node.op_type, sorted(k for k in imp.env if k[0] in "Wb")))
    imp.apply = spy
    ir = imp.run()
    # (seen just after each node, before the importer drops what that node read last:) W0 is gone
    # once the first MatMul is done, b0 once the first Add is; none is left at the end
    assert seen[0] == ("MatMul", ["W0", "W1", "W2", "W3", "b0", "b1", "b2", "b3"])
    assert seen[1] == ("Add", ["W1", "W2", "W3", "b0", "b1", "b2", "b3"])
    assert seen[2] == ("Relu", ["W1", "W2", "W3", "b1", "b2", "b3"])
    assert not [k for k in imp.env if k[0] in "Wb"] and imp.arrays is None
    _same_ir(ir, import_model(parse_model_file(path), path))   # the same IR as the plain import


def test_a_shared_initializer_lives_until_its_last_reader(tmp_path):
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "W"], ["y"])]
    path = save_model(tmp_path, "shared", nodes, [tensor("x", (1, 4))], [tensor("y", (1, 4))],
                      [("W", rng.normal(size=(4, 4)))])
    imp = Importer(path, parse_model_file(path))
    imp.take_initializers()
    apply, seen = imp.apply, []
    imp.apply = lambda i, node: (apply(i, node), seen.append("W" in imp.env))
    ir = imp.run()
    assert seen == [True, True, True] and "W" not in imp.env   # read twice: kept until after the second
    x = rng.uniform(-1, 1, (5, 4))
    w = parse_model_file(path).graph.initializer[0]
    w = onnx.numpy_helper.to_array(w).astype(np.float64)
    np.testing.assert_allclose(ir.evaluate(x), np.maximum(x @ w, 0) @ w, rtol=1e-12)


def test_a_large_constant_is_multiplied_by_blocks_with_the_same_bits(monkeypatch, tmp_path):
    path = _chain(tmp_path, width=(3, 64, 48, 2))
    whole = import_model(parse_model_file(path), path)
    monkeypatch.setattr(values, "_BLOCK_ENTRIES", 100)   # blocks of 2 rows (48 entries per row) or fewer
    called = []
    blocked = values._blocked_product
    monkeypatch.setattr(values, "_blocked_product", lambda a, b: called.append(1) or blocked(a, b))
    parts = import_model(parse_model_file(path), path)
    assert called
    _same_ir(whole, parts)
    # a non-finite constant is left to the whole product (its NaN pattern), and refused as before
    w = np.ones((64, 48))
    w[3, 5] = np.inf
    lin = values.Lin((64,), {0: np.ones((64, 3))}, np.zeros(64))
    assert values._blocked_product(lin, w) is None


def test_the_loaded_model_holds_no_bytes_and_gives_the_hashed_bytes_again(tmp_path):
    from mi_certify.generator.frontend.model import load_model
    path = _chain(tmp_path)
    raw = path.read_bytes()
    m = load_model(path)
    assert "_data" in m.__dict__ and m._data is None                 # not held
    assert m.sha256 == hashlib.sha256(raw).hexdigest() and m.data == raw
    again = pickle.loads(pickle.dumps(m))                             # a worker gets the bytes with it
    assert again._data == raw and again.sha256 == m.sha256
    path.write_bytes(b"")                                              # the worker does not read the file
    assert again.data == raw
    x = np.random.default_rng(0).uniform(-1, 1, (4, 3))
    np.testing.assert_array_equal(again.evaluate_onnxruntime(x), again.evaluate_onnxruntime(x))


def test_a_file_changed_on_disk_after_the_import_is_refused(tmp_path):
    from mi_certify.generator.frontend.model import load_model
    path = _chain(tmp_path)
    m = load_model(path)
    other = _chain(tmp_path, "other", seed=8)
    path.write_bytes(other.read_bytes())
    with pytest.raises(ModelImportError, match="changed on disk since it was read") as err:
        _ = m.data
    assert str(path) in str(err.value)
    with pytest.raises(ModelImportError, match="changed on disk since it was read"):
        m.cross_check(-np.ones(3), np.ones(3))                        # onnxruntime would read the other file
    path.unlink()
    with pytest.raises(ModelImportError, match="no such file"):
        _ = m.data


def test_a_model_for_a_worker_of_this_machine_carries_no_bytes_and_reads_the_file_once_there(tmp_path, monkeypatch):
    """map_in_processes pickles one item at a time (a campaign's instance, a distillation's slice):
    the parent must not read and hash the file again for each (0.3 s and 257 MB of payload at
    tllverifybench N = 64); the worker reads the file itself, checked against the same hash."""
    from mi_certify.generator.frontend import onnx_import
    from mi_certify.generator.frontend.model import load_model
    from mi_certify.verification.tools import workers
    path = _chain(tmp_path)
    raw = path.read_bytes()
    m = load_model(path)
    reads = []
    real = onnx_import.read_model_file
    monkeypatch.setattr(onnx_import, "read_model_file", lambda p: reads.append(p) or real(p))
    payloads = [workers._pickled((k, m)) for k in range(3)]           # three items, one model
    assert reads == [] and not workers.pickling_for_local_worker()
    assert all(raw not in p for p in payloads)
    got = pickle.loads(payloads[0])[1]
    assert got._data is None and got._file == path.absolute() and got.sha256 == m.sha256
    assert got.data == raw and len(reads) == 1                        # read there, when needed
    x = np.random.default_rng(0).uniform(-1, 1, (4, 3))
    np.testing.assert_array_equal(got.evaluate_onnxruntime(x), m.evaluate_onnxruntime(x))
    path.write_bytes(_chain(tmp_path, "other", seed=8).read_bytes())  # changed since the parent read it
    with pytest.raises(ModelImportError, match="changed on disk since it was read") as err:
        _ = pickle.loads(payloads[1])[1].data
    assert str(path.absolute()) in str(err.value)


def test_a_model_pickled_for_elsewhere_still_carries_its_bytes(tmp_path):
    """Dask (another machine): the bytes travel with the model, as before."""
    from mi_certify.generator.frontend.model import load_model
    from mi_certify.verification.tools import workers
    path = _chain(tmp_path)
    raw = path.read_bytes()
    m = load_model(path)
    assert raw in pickle.dumps(m)
    local = pickle.loads(workers._pickled(m))
    assert local._data is None
    path.unlink()
    with pytest.raises(ModelImportError, match="no such file"):
        pickle.dumps(local)                                            # nothing to send: refused, named


def test_the_checker_runs_before_the_model_is_parsed(monkeypatch, tmp_path):
    """Both copies at once were the import's peak (901 MB at tllverifybench N = 64): the checker's own
    parse of the bytes is freed before the Python model is made."""
    from mi_certify.generator.frontend import onnx_import
    path = _chain(tmp_path)
    order = []
    check, load = onnx.checker.check_model, onnx.load_from_string
    monkeypatch.setattr(onnx.checker, "check_model", lambda *a, **k: order.append("check") or check(*a, **k))
    monkeypatch.setattr(onnx, "load_from_string", lambda *a, **k: order.append("parse") or load(*a, **k))
    onnx_import.parse_model(path.read_bytes(), path)
    assert order == ["check", "parse"]


def test_a_refused_model_gives_the_same_error_in_the_same_order(tmp_path):
    """Parse errors first, then versions, then the checker, as when the checker ran last."""
    from mi_certify.generator.frontend import onnx_import
    path = _chain(tmp_path)
    with pytest.raises(ModelImportError, match="not a readable ONNX model"):
        onnx_import.parse_model(b"\x08\x07garbage\xff", path)
    m = onnx.load(path)
    m.ir_version = onnx.IR_VERSION + 5                       # refused by the checker too
    with pytest.raises(ModelImportError, match="ir_version: model IR") as err:
        onnx_import.parse_model(m.SerializeToString(), path)
    assert "onnx.checker" not in str(err.value)
    m = onnx.load(path)
    m.graph.node[0].input[1] = "nowhere"                      # the checker only
    with pytest.raises(ModelImportError, match="onnx.checker rejects the model"):
        onnx_import.parse_model(m.SerializeToString(), path)


def test_each_block_of_a_large_product_is_small_too(monkeypatch, tmp_path):
    """The block's product (rows × the expression's columns) is at most _BLOCK_ENTRIES entries, not
    rows × columns with rows chosen from the constant alone (a 134 MB temporary beside the 268 MB
    result at tllverifybench N = 64); the bits are the whole product's."""
    rng = np.random.default_rng(3)
    w = rng.normal(size=(32, 100)).astype(np.float32)
    lin = values.Lin((32,), {0: rng.normal(size=(32, 64))}, rng.normal(size=32))
    whole = values.lin_matmul(lin, w, ValueError)                      # w.size > 1000: not blocked
    monkeypatch.setattr(values, "_BLOCK_ENTRIES", 1024)
    sizes = []
    mm = values.matmul
    monkeypatch.setattr(values, "matmul", lambda a, b: (lambda r: sizes.append(r.size) or r)(mm(a, b)))
    parts = values._blocked_product(lin, w)
    assert sizes and max(sizes) <= 1024
    assert parts.terms[0].tobytes() == whole.terms[0].tobytes() and parts.bias.tobytes() == whole.bias.tobytes()


def test_the_import_returns_the_freed_heap(monkeypatch, tmp_path):
    """After the parse (bytes, checker, parser) and after the composition, malloc's free memory goes
    back to the kernel: not kept under the cross-check's onnxruntime session."""
    from mi_certify.generator.frontend import onnx_import
    from mi_certify.verification.tools import registry
    calls = []
    monkeypatch.setattr(onnx_import, "release_freed_heap", lambda: calls.append(1) or True)
    onnx_import.read_and_import(_chain(tmp_path))
    assert len(calls) == 2
    assert registry.release_freed_heap() is True                      # glibc (this machine)


def test_a_file_gone_before_the_session_is_named_not_a_traceback(tmp_path):
    """The bytes are not held: a replay after the file was removed (a temporary folder left) is one
    ModelImportError naming the file, not a FileNotFoundError from os.stat."""
    from mi_certify.generator.frontend.model import load_model
    path = _chain(tmp_path)
    m = load_model(path)
    path.unlink()
    with pytest.raises(ModelImportError, match="no such file") as err:
        m.evaluate_onnxruntime(np.zeros((1, 3)))
    assert str(path) in str(err.value)
