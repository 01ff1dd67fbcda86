"""ONNX → ControllerIR, exact and checked: the public entry of the import layer.

Reading (:func:`read_model_file`, :func:`parse_model`, :func:`parse_model_file`: bytes, onnx.checker,
IR and opset versions), importing (:func:`import_model`, :func:`import_onnx`) and the onnxruntime
cross-check (:class:`OnnxruntimeReadout`, :func:`cross_check`).

The importer (:mod:`mi_certify.generator.frontend.onnx`) interprets the ONNX graph symbolically.
Every tensor is either a constant (numpy array) or a *linear expression*: a tensor of known shape
whose row-major flattened value is ``sum_k M_k @ node_k + bias``. Affine operators
(MatMul, Gemm, Add/Sub/Mul/Div by constants, Add/Sub of two expressions, Neg, and
every reshaping operator) compose expressions without creating nodes; a Relu or a
graph output materialises its operand into an ``AffineNode``. Fan-out, skip
connections and ``Add(x, x)`` therefore stay exact by construction. Each operator is one
registered handler (``@onnx_handler("MatMul")``), in one module per operator family.

Operator semantics follow the ONNX operator specification (onnx.ai/onnx/operators),
dispatched on the model's default-domain opset where they changed (Squeeze and
Unsqueeze ``axes``: attribute before opset 13, input from 13).

Supported: Gemm, MatMul, Relu, Add, Sub, Mul, Div (by a constant), Neg, Flatten,
Reshape (0 = copy, -1 = infer), Squeeze, Unsqueeze, Transpose, Identity, Constant,
and the constant-only shape operators Shape, Gather, Concat, Cast. Exporter idioms, exact
as ReLU combinations or folded constants: LeakyRelu and PRelu (constant slopes:
slope·x + (1 − slope)·relu(x)), Abs (2·relu(x) − x), Clip with constant bounds (ReLU6,
Hardtanh: lo + relu(x − lo), then hi − relu(hi − ·)), Max / Min of tensors (y + relu(x − y)),
Dropout (inference: identity), BatchNormalization (inference: folded into an affine map),
Concat and Split of variable tensors (exact rearrangements). A strictly monotone head on
the final output (Softmax over the whole output, LogSoftmax, elementwise Sigmoid, skl2onnx's
binary ``[1 - sigmoid(z), sigmoid(z)]``) is stripped: the IR keeps the logits and records the
head (``ir.head``); onnxruntime is read before it (:class:`OnnxruntimeReadout`). skl2onnx's
``ai.onnx.ml`` nodes: LinearClassifier and LinearRegressor are read (affine scores), Normalizer
after a head is order-preserving; a ZipMap output is read as the tensor it zips, class-label
outputs are left out and nodes that do not feed the output are skipped. Anything else is
refused with a ``ModelImportError`` naming file, node and reason.

Symbolic (or zero) leading dimensions are bound to 1 and reported in ``ir.notes``.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np
import onnx

from mi_certify.generator.core.errors import ModelImportError, ModelMismatchError, first_line
from mi_certify.generator.core.ir import ControllerIR
from mi_certify.generator.core.digests import sha256_file
from mi_certify.generator.core.numerics import corner_signs
from mi_certify.generator.frontend.onnx.importer import MAX_INPUTS, Importer, supported_ml_ops, supported_ops
from mi_certify.generator.frontend.onnx.registry import DEFAULT_DOMAINS
from mi_certify.verification.tools.registry import release_freed_heap

__all__ = ["HEAD_ORDER_TOL", "MAX_INPUTS", "ORT_RTOL", "OnnxruntimeReadout", "compare_with_onnxruntime", "cross_check",
           "evaluate_onnxruntime", "feed_shapes", "file_identity", "import_model", "import_onnx", "input_feed_shapes",
           "onnxruntime_session", "cross_check_points", "parse_model", "parse_model_file", "read_and_import", "read_model_again",
           "read_model_file", "run_session", "run_session_outputs", "session_from_file", "supported_ml_ops", "supported_ops"]

#: Relative tolerance of the import cross-check against onnxruntime.
ORT_RTOL = 1e-5


def _check_versions(path: Path, model: onnx.ModelProto) -> None:
    import onnxruntime

    if model.ir_version > onnx.IR_VERSION:
        raise ModelImportError(
            f"model IR {model.ir_version} > supported {onnx.IR_VERSION} (onnx {onnx.__version__}, "
            f"onnxruntime {onnxruntime.__version__}); re-export with an older IR/opset or upgrade onnx and onnxruntime",
            file=str(path), where="ir_version")
    max_opset = onnx.defs.onnx_opset_version()
    for imp in model.opset_import:
        if imp.domain in DEFAULT_DOMAINS and imp.version > max_opset:
            raise ModelImportError(
                f"model opset {imp.version} > supported {max_opset} (onnx {onnx.__version__}, "
                f"onnxruntime {onnxruntime.__version__}); re-export with opset <= {max_opset}",
                file=str(path), where="opset_import")


def read_model_file(path: str | Path) -> bytes:
    """The bytes of an ONNX file; raises ModelImportError (file, reason) when it is not a readable,
    non-empty regular file."""
    path = Path(path)
    if path.is_dir():
        raise ModelImportError("is a directory, not a file", file=str(path))
    if not path.is_file():
        raise ModelImportError("no such file", file=str(path))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelImportError(f"cannot read: {exc.strerror or exc}", file=str(path)) from None
    if not data:
        raise ModelImportError("empty file", file=str(path))
    return data


def parse_model(data: bytes, path: str | Path) -> onnx.ModelProto:
    """Parse and check ONNX bytes (``path`` names them in errors); raises ModelImportError
    (file, field, reason): unreadable protobuf, unsupported IR/opset version, onnx.checker."""
    path = Path(path)
    # the checker first, with no parsed model beside it: its C++ parses the bytes into a model of its
    # own, freed before ours is made (both at once were the import's peak: 901 MB at tllverifybench
    # N = 64). The bytes, not a proto: check_model would serialize it again (257 MB more). A model it
    # refuses is parsed and its versions checked first, then checked again: the same error, in the same
    # order, as before.
    try:
        onnx.checker.check_model(bytes(data))
        checked = True
    except Exception:  # noqa: BLE001 - reported below, after the parse and version errors
        checked = False
    try:
        model = onnx.load_from_string(data)
    except Exception as exc:  # protobuf DecodeError and friends
        raise ModelImportError(f"not a readable ONNX model ({type(exc).__name__}: {exc})", file=str(path)) from None
    _check_versions(path, model)
    if checked:
        return model
    try:
        onnx.checker.check_model(bytes(data))
    except onnx.checker.ValidationError as exc:
        raise ModelImportError(f"onnx.checker rejects the model: {first_line(exc)}", file=str(path)) from None
    except (UnicodeDecodeError, ValueError) as exc:   # a string field that is not UTF-8, and the like
        raise ModelImportError(f"onnx.checker cannot read the model ({type(exc).__name__}: {exc})",
                               file=str(path)) from None
    return model


def parse_model_file(path: str | Path) -> onnx.ModelProto:
    """Read and check an ONNX file (:func:`read_model_file`, then :func:`parse_model`); raises
    ModelImportError (file, field, reason). The model with its bytes, hash, IR and onnxruntime
    session: :func:`mi_certify.generator.frontend.model.load_model`."""
    return parse_model(read_model_file(path), path)


def import_model(model: onnx.ModelProto, path: str | Path) -> ControllerIR:
    """ControllerIR of a checked ONNX graph (``path`` names it in errors); raises ModelImportError."""
    return Importer(Path(path), model).run()


def read_and_import(path: str | Path) -> tuple[str, ControllerIR, list, list[str]]:
    """Read, check and import an ONNX file holding as little at once as it can: (hex SHA-256 of the
    bytes read, ControllerIR, :func:`feed_shapes`, graph output names). The bytes are read once, hashed, checked
    (onnx.checker) and parsed, then dropped; the initializers are taken out of the parsed model and
    the model dropped (:meth:`~.onnx.importer.Importer.take_initializers`), so the import holds one
    copy of the weights, each released once consumed. Raises ModelImportError as
    :func:`read_model_file`, :func:`parse_model` and :func:`import_model` do, in that order."""
    path = Path(path)
    data = read_model_file(path)
    sha256 = hashlib.sha256(data).hexdigest()
    proto = parse_model(data, path)
    del data
    importer = Importer(path, proto)
    del proto   # the importer holds it alone now: take_initializers' copy replaces it, and it is freed
    importer.take_initializers()
    release_freed_heap()   # the bytes', the checker's and the parser's memory, freed but kept by malloc
    ir = importer.run()
    release_freed_heap()   # the composition's temporaries: not under the cross-check's onnxruntime session
    return sha256, ir, feed_shapes(importer.model), [o.name for o in importer.model.graph.output]


def file_identity(path: Path) -> tuple:
    """(device, inode, size, modification and change times, ns) of a file: unchanged while it is not written."""
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def read_model_again(path: str | Path, sha256: str) -> bytes:
    """The bytes of a model read before, read again and checked against the SHA-256 of the first read;
    raises ModelImportError (file, reason) when the file is gone, unreadable or changed."""
    data = read_model_file(path)
    now = hashlib.sha256(data).hexdigest()
    if now != sha256:
        raise _changed_on_disk(path, now, sha256)
    return data


def _changed_on_disk(path: str | Path, now: str, was: str) -> ModelImportError:
    """The error of a model file whose bytes are no longer those hashed when it was read."""
    return ModelImportError(f"the file changed on disk since it was read (SHA-256 {now}, was {was}); "
                            "run again on a file that is not being written", file=str(path))


def session_from_file(path: str | Path, sha256: str):
    """:func:`onnxruntime_session` from the file itself (onnxruntime reads it: no copy of the bytes
    beside its own), confirmed to have read the bytes hashed before: the file's SHA-256 is checked
    after the session is made, and its identity (device, inode, size, modification and change times)
    must be the same before and after. Raises ModelImportError when the file changed."""
    path = Path(path)
    try:
        before = file_identity(path)
    except OSError:   # gone (or unreadable) since it was read: named as read_model_file names it
        read_model_file(path)
        raise
    sess = onnxruntime_session(path, path)
    now = sha256_file(path)
    if now != sha256 or file_identity(path) != before:
        raise _changed_on_disk(path, now, sha256)
    return sess


def import_onnx(path: str | Path) -> ControllerIR:
    """Import an ONNX controller as a ControllerIR (not yet cross-checked).

    Args:
        path: ONNX file.
    Returns:
        ControllerIR with ``n_inputs`` = total size of the non-constant graph inputs.
    Raises:
        ModelImportError naming file, node and reason (exit code 2).
    """
    return import_model(parse_model_file(path), path)


def input_feed_shapes(path: str | Path) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """(name, shape with batch bound to 1, numpy dtype) of each non-constant graph input."""
    return feed_shapes(parse_model_file(path))


def feed_shapes(model: onnx.ModelProto) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """(name, shape with batch bound to 1, numpy dtype) of each non-constant graph input of ``model``."""
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        out.append((vi.name, tuple(dims), dtype))
    return out


def onnxruntime_session(model: str | Path | bytes, name: str | Path):
    """An onnxruntime CPU session (one intra-op thread) of a model file or its bytes; ``name``
    names it in errors. Raises ModelImportError when onnxruntime refuses the model."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(model if isinstance(model, bytes) else str(model), sess_options=opts,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:
        msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ModelImportError(f"onnxruntime refuses the model: {msg}", file=str(name)) from None


def run_session(sess, feeds, points: np.ndarray, output_names=None) -> np.ndarray:
    """Evaluate ``sess`` at (n, n_inputs) points, one run per point (float32 feeds split by
    ``feeds`` = :func:`feed_shapes`); returns (n, n_outputs) float64, the outputs ``output_names``
    (default: every graph output) concatenated flat."""
    return np.concatenate(run_session_outputs(sess, feeds, points, output_names), axis=1)


def run_session_outputs(sess, feeds, points: np.ndarray, output_names=None) -> list[np.ndarray]:
    """:func:`run_session`, one (n, size) float64 array per output."""
    out_rows = []
    pts = np.asarray(points, dtype=np.float32)
    for row in pts:
        feed, off = {}, 0
        for name, shape, dtype in feeds:
            n = int(np.prod(shape, dtype=np.int64))
            feed[name] = row[off:off + n].reshape(shape).astype(dtype)
            off += n
        res = sess.run(list(output_names) if output_names is not None else None, feed)
        out_rows.append([np.asarray(r, dtype=np.float64).reshape(-1) for r in res])
    if not out_rows:
        return [np.zeros((0, 0))]
    return [np.stack([r[k] for r in out_rows]) for k in range(len(out_rows[0]))]


#: Largest admissible disorder of a head's output against its logits (float32 rounding of exp).
HEAD_ORDER_TOL = 1e-6


class OnnxruntimeReadout:
    """onnxruntime evaluation of the tensors the IR equals: the graph outputs the IR reads, or, when
    the importer stripped a monotone head (:class:`~.ir.Head`), the logits before it.

    The logits (and a ZipMap's probability tensor) are read by adding them as graph outputs to an
    in-memory copy of the model bytes (and, for a LinearClassifier, a copy of the node with
    post_transform NONE); the shipped file and its hash are untouched. Every evaluation also reads
    the head's own output and confirms that it orders the actions as the logits do (so argmax and
    argmin decode the same action): a ModelMismatchError otherwise.
    """

    def __init__(self, data, ir: ControllerIR, name: str | Path, outputs=None, feeds=None):
        """``data``: the model's bytes, or a :class:`~.model.LoadedModel` (its ``data``: the bytes, read
        again and checked; its ``session()``: from the file, its hash checked after). ``outputs`` and
        ``feeds`` (the graph output names and :func:`feed_shapes`), when given, spare parsing the model
        where the readout needs no change to it: the session is then the LoadedModel's ``session()``, or
        made from the bytes."""
        self.ir, self.name, self.head = ir, name, ir.head
        raw = isinstance(data, (bytes, bytearray))   # else a LoadedModel: .data (its bytes, checked), .session()
        logits = [t for t, _ in self.head.readout] if self.head else list(ir.output_names)
        fetch = list(dict.fromkeys(logits + ([self.head.output] if self.head else [])))
        self.fetch = fetch
        self._index = {t: k for k, t in enumerate(fetch)}
        if outputs is not None and feeds is not None and not (
                fetch and (fetch != list(outputs) or (self.head and self.head.extra_nodes))):
            self.feeds = list(feeds)
            self.session = onnxruntime_session(data, name) if raw else data.session()
            return
        data = data if raw else data.data
        proto = onnx.load_from_string(data)
        outs = [o.name for o in proto.graph.output]
        if fetch and (fetch != outs or (self.head and self.head.extra_nodes)):
            inputs = {i.name for i in proto.graph.input}
            for blob in (self.head.extra_nodes if self.head else ()):
                node = onnx.NodeProto()
                node.ParseFromString(blob)
                proto.graph.node.append(node)
            types = {}
            try:
                inferred = onnx.shape_inference.infer_shapes(proto)
                for vi in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
                    if vi.type.HasField("tensor_type"):
                        types[vi.name] = vi.type.tensor_type.elem_type
            except Exception:  # inference is only used for the element types; FLOAT otherwise
                pass
            self.fetch = []
            for t in fetch:
                src = t
                if t in inputs:   # a graph input read as a logits tensor: through an Identity
                    src = t + "__mi_readout"
                    proto.graph.node.append(onnx.helper.make_node("Identity", [t], [src]))
                if src not in outs:
                    proto.graph.output.append(onnx.helper.make_tensor_value_info(
                        src, types.get(t, onnx.TensorProto.FLOAT), None))
                self.fetch.append(src)
            data = proto.SerializeToString()
        self.session = onnxruntime_session(data, name)
        self.feeds = feed_shapes(proto)

    def __call__(self, points: np.ndarray) -> np.ndarray:
        """(n, n_outputs) float64: the IR's outputs as onnxruntime computes them at ``points`` (n, n_inputs)."""
        pts = np.atleast_2d(np.asarray(points, dtype=np.float64))
        if not self.fetch:
            return run_session(self.session, self.feeds, pts)
        vals = run_session_outputs(self.session, self.feeds, pts, self.fetch)
        if self.head is None:
            return np.concatenate(vals, axis=1)
        parts = [vals[self._index[t]] * g if g else np.zeros_like(vals[self._index[t]]) for t, g in self.head.readout]
        logits = np.concatenate(parts, axis=1)
        probs = vals[self._index[self.head.output]]
        self.confirm_order(pts, logits, probs)
        return logits

    def confirm_order(self, pts, logits: np.ndarray, probs: np.ndarray) -> None:
        if probs.shape != logits.shape:
            raise ModelMismatchError(f"the head output '{self.head.output}' has {probs.shape[1]} entries, its logits "
                                     f"{logits.shape[1]}", file=str(self.name))
        order = np.argsort(logits, axis=1, kind="stable")
        p = np.take_along_axis(probs, order, axis=1)
        tol = HEAD_ORDER_TOL * np.maximum(1.0, np.abs(p[:, 1:]))
        bad = np.nonzero(np.any(np.diff(p, axis=1) < -tol, axis=1))[0]
        if bad.size:
            i = int(bad[0])
            raise ModelMismatchError(
                f"onnxruntime's {self.head.kind} output '{self.head.output}' orders the actions differently from its "
                f"logits at point {pts[i].tolist()}: {probs[i].tolist()} vs logits {logits[i].tolist()}",
                file=str(self.name))


@functools.lru_cache(maxsize=8)
def _session(path: str, _mtime: int, _size: int):
    """One onnxruntime readout (and input feed layout) per model file version."""
    data = read_model_file(path)
    proto = parse_model(data, path)
    return OnnxruntimeReadout(data, import_model(proto, path), path), feed_shapes(proto)


def _cached_session(path: str | Path):
    path = Path(path)
    return _session(str(path.resolve()), path.stat().st_mtime_ns, path.stat().st_size)


def evaluate_onnxruntime(path: str | Path, points: np.ndarray) -> np.ndarray:
    """Evaluate the model with onnxruntime (float32, CPU), one point per run: the tensors its IR
    equals (:class:`OnnxruntimeReadout`: the logits when a head was stripped).

    Args:
        points: (n, n_inputs) array, flattened concatenated inputs.
    Returns:
        (n, n_outputs) float64 array of the concatenated flattened outputs.
    Raises:
        ModelImportError if onnxruntime refuses the model.
    """
    readout, _feeds = _cached_session(path)
    return readout(points)


def cross_check(ir: ControllerIR, path: str | Path, lo: np.ndarray, hi: np.ndarray,
                n_points: int = 256, seed: int = 0, rtol: float = ORT_RTOL) -> float:
    """Compare the IR (float64) with onnxruntime (float32) inside the box [lo, hi].

    Points: the box centre, the corners (all 2^n while they fill at most half of the
    points, else that many drawn by :func:`~.numerics.corner_signs`: no cost 2^n), then
    uniform random points from ``numpy.random.default_rng(seed)`` up to ``n_points`` (>= 256).
    A point fails when ``|ir - ort| > rtol * max(1, max|ort|)`` for any output.

    Returns:
        the largest scaled difference seen.
    Raises:
        ModelImportError if the box is empty or inverted; ModelMismatchError on a
        difference, naming the first failing point.
    """
    return compare_with_onnxruntime(ir, _cached_session(path)[1], lambda x: evaluate_onnxruntime(path, x), path,
                                    lo, hi, n_points=n_points, seed=seed, rtol=rtol)


def cross_check_points(n_inputs: int, feeds, name: str | Path, lo: np.ndarray, hi: np.ndarray, n_points: int = 256,
                       seed: int = 0) -> np.ndarray:
    """The points :func:`compare_with_onnxruntime` evaluates both ways ((max(n_points, 256), n_inputs)
    float64, each already rounded to what onnxruntime is fed); raises ModelImportError (``name``) for a
    box of the wrong size, empty or inverted, or not finite in float32."""
    path = name
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    if lo.shape != (n_inputs,) or hi.shape != (n_inputs,):
        raise ModelImportError(f"input box has {lo.size} entries but the model has {n_inputs} inputs", file=str(path))
    bad = np.nonzero(~(lo <= hi))[0]
    if bad.size:
        i = int(bad[0])
        raise ModelImportError(f"empty or inverted input box for input {i}: [{lo[i]}, {hi[i]}]", file=str(path))
    rng = np.random.default_rng(seed)
    total = max(n_points, 256)
    pts = [(lo + hi) / 2]
    # every corner while they take at most half of the points, else a fixed sample of them
    pts.extend(np.where(corner_signs(n_inputs, limit=total // 2), hi, lo))
    n_rand = total - len(pts)
    pts.extend(lo + (hi - lo) * rng.random((n_rand, n_inputs)))
    pts = np.asarray(np.asarray(pts, dtype=np.float32), dtype=np.float64)
    off = 0
    for _name, shape, dtype in feeds:  # round to what onnxruntime is fed
        n = int(np.prod(shape, dtype=np.int64))
        pts[:, off:off + n] = pts[:, off:off + n].astype(dtype).astype(np.float64)
        off += n
    if not np.all(np.isfinite(pts)):
        raise ModelImportError("the input box is not finite in float32", file=str(path))
    return pts


def compare_with_onnxruntime(ir: ControllerIR, feeds, evaluate, name: str | Path, lo: np.ndarray, hi: np.ndarray,
                             n_points: int = 256, seed: int = 0, rtol: float = ORT_RTOL) -> float:
    """:func:`cross_check` with the onnxruntime evaluation given: ``feeds`` = :func:`feed_shapes`,
    ``evaluate(points (n, n_inputs)) -> (n, n_outputs)``, ``name`` for errors."""
    path = name
    pts = cross_check_points(ir.n_inputs, feeds, name, lo, hi, n_points, seed)
    try:
        ort = evaluate(pts)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's errors (InvalidArgument, Fail …) derive from Exception
        if type(exc).__module__.split(".")[0] != "onnxruntime":
            raise
        raise ModelImportError(f"onnxruntime cannot run the model on its declared inputs ({first_line(exc)})",
                               file=str(path)) from None
    mine = ir.evaluate(pts)
    if ort.shape != mine.shape:
        raise ModelMismatchError(f"IR gives {mine.shape[1]} outputs, onnxruntime {ort.shape[1]}", file=str(path))
    if not (np.all(np.isfinite(ort)) and np.all(np.isfinite(mine))):
        raise ModelMismatchError("the network produces NaN or infinite outputs inside the input box", file=str(path))
    scale = np.maximum(1.0, np.max(np.abs(ort), axis=1, keepdims=True))
    err = np.abs(mine - ort) / scale
    worst = float(err.max())
    if worst > rtol:
        i, j = np.unravel_index(int(np.argmax(err)), err.shape)
        raise ModelMismatchError(
            f"imported network differs from onnxruntime by {worst:.3g} (relative) > {rtol:g} at output {j}, "
            f"point {pts[i].tolist()}: IR {mine[i, j]:.9g}, onnxruntime {ort[i, j]:.9g}", file=str(path))
    return worst
