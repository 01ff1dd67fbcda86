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
