"""ONNX → ControllerIR, exact and checked.

The importer interprets the ONNX graph symbolically. Every tensor is either a
constant (numpy array) or a *linear expression* ``_Lin``: a tensor of known shape
whose row-major flattened value is ``sum_k M_k @ node_k + bias``. Affine operators
(MatMul, Gemm, Add/Sub/Mul/Div by constants, Add/Sub of two expressions, Neg, and
every reshaping operator) compose expressions without creating nodes; a Relu or a
graph output materialises its operand into an ``AffineNode``. Fan-out, skip
connections and ``Add(x, x)`` therefore stay exact by construction.

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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from mi_certify.generator.core.errors import ModelImportError, ModelMismatchError
from mi_certify.generator.core.ir import AffineNode, ControllerIR, Head, InputNode, ReluNode
from mi_certify.generator.core.numerics import corner_signs, matmul

#: Largest number of (flattened) network inputs the importer accepts.
MAX_INPUTS = 4096
#: Relative tolerance of the import cross-check against onnxruntime.
ORT_RTOL = 1e-5

_DEFAULT_DOMAINS = ("", "ai.onnx")

#: What to do instead, for operators exporters often emit that the IR does not hold (yet).
_HINTS = {
    "Tanh": ": it is not piecewise linear, so the affine + ReLU IR has no exact solver for it; train the "
            "controller with ReLU (mi-certify train does)",
    "ArgMax": ": a class-index output is not a controller output; export the scores or probabilities "
              "(the spec's decode picks the action from them)",
}
#: What to do instead, for ai.onnx.ml operators (skl2onnx) the importer does not read.
_ML_HINTS = {
    "ZipMap": "export with options={'zipmap': False}",
    "ArrayFeatureExtractor": "it belongs to the class-label path; the controller reads the probabilities output, "
                             "so export them as a graph output (skl2onnx does)",
    "LabelEncoder": "it belongs to the class-label path; the controller reads the probabilities output",
}
_ML_DEFAULT_HINT = ("export a ReLU MLPClassifier / MLPRegressor or a LogisticRegression / LinearRegression, "
                    "with options={'zipmap': False}")
#: Monotone output heads (stripped: the IR keeps their logits).
_HEAD_OPS = ("Softmax", "LogSoftmax", "Sigmoid")
#: What a head's output may still pass through on its way to the graph output (order-preserving, no
#: rearrangement of the entries).
_HEAD_PASS = ("Identity", "Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Sub", "Concat", "Normalizer")
_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)


@dataclass(frozen=True)
class _Lin:
    """A tensor of shape ``shape`` equal to ``sum M @ node + bias`` (flattened row-major)."""

    shape: tuple[int, ...]
    terms: dict[int, np.ndarray]  # node id -> (numel, node size)
    bias: np.ndarray  # (numel,)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def _is_lin(v) -> bool:
    return isinstance(v, _Lin)


@dataclass(frozen=True)
class _Headed:
    """``kind(lin)``: the output of a monotone head (Softmax over the whole tensor, LogSoftmax, or
    elementwise Sigmoid); ``readout`` = the onnxruntime tensors giving ``lin`` (see ir.Head)."""

    kind: str
    lin: _Lin
    node: str
    readout: tuple[tuple[str, int], ...]
    extra_nodes: tuple[bytes, ...] = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return self.lin.shape


@dataclass(frozen=True)
class _Refused:
    """A tensor the importer cannot represent (a class label): refused only if something reads it."""

    reason: str


class _Importer:
    def __init__(self, path: Path, model: onnx.ModelProto):
        self.path = path
        self.model = model
        self.nodes: list = []
        self.notes: list[str] = []
        self.opset = 0
        for imp in model.opset_import:
            if imp.domain in _DEFAULT_DOMAINS:
                self.opset = imp.version
        self.env: dict[str, object] = {}
        self.node_desc = "graph"

    # ---------------------------------------------------------------- errors
    def fail(self, reason: str, where: str | None = None) -> ModelImportError:
        return ModelImportError(reason, file=str(self.path), where=where or self.node_desc)

    # ------------------------------------------------------------ lin tools
    def lin_take(self, lin: _Lin, idx: np.ndarray) -> _Lin:
        """Rearrange: ``idx`` (output shape) holds flat indices into ``lin``."""
        flat = idx.reshape(-1)
        return _Lin(tuple(int(d) for d in idx.shape), {s: m[flat] for s, m in lin.terms.items()}, lin.bias[flat])

    def lin_index(self, lin: _Lin) -> np.ndarray:
        return np.arange(lin.numel, dtype=np.int64).reshape(lin.shape)

    def lin_scale(self, lin: _Lin, scale: np.ndarray) -> _Lin:
        """Elementwise multiply by a constant broadcastable to ``lin.shape``."""
        s = np.broadcast_to(np.asarray(scale, dtype=np.float64), lin.shape).reshape(-1)
        return _Lin(lin.shape, {k: m * s[:, None] for k, m in lin.terms.items()}, lin.bias * s)

    def lin_broadcast(self, lin: _Lin, shape: tuple[int, ...]) -> _Lin:
        if tuple(lin.shape) == tuple(shape):
            return lin
        return self.lin_take(lin, np.broadcast_to(self.lin_index(lin), shape))

    def lin_add(self, a, b, sign_b: float = 1.0):
        """a + sign_b * b, either may be constant; numpy broadcasting."""
        if not _is_lin(a) and not _is_lin(b):
            return np.asarray(a) + sign_b * np.asarray(b)
        shape = tuple(np.broadcast_shapes(np.shape(a) if not _is_lin(a) else a.shape,
                                          np.shape(b) if not _is_lin(b) else b.shape))
        terms: dict[int, np.ndarray] = {}
        bias = np.zeros(int(np.prod(shape, dtype=np.int64)))
        for val, sign in ((a, 1.0), (b, sign_b)):
            if _is_lin(val):
                v = self.lin_broadcast(val, shape)
                for s, m in v.terms.items():
                    terms[s] = terms[s] + sign * m if s in terms else sign * m
                bias = bias + sign * v.bias
            else:
                bias = bias + sign * np.broadcast_to(np.asarray(val, dtype=np.float64), shape).reshape(-1)
        return _Lin(shape, terms, bias)

    def lin_matmul(self, a, b):
        """numpy.matmul semantics where exactly one operand is an expression."""
        if _is_lin(a) and _is_lin(b):
            raise self.fail("product of two variable tensors (x·y) is not piecewise linear")
        if not _is_lin(a) and not _is_lin(b):
            a, b = np.asarray(a), np.asarray(b)
            if a.dtype.kind == "f" or b.dtype.kind == "f":
                return matmul(a, b)  # fixed order: the folded constant is the same on every machine
            return np.matmul(a, b)
        if _is_lin(a):
            w = np.asarray(b, dtype=np.float64)
            if w.ndim != 2:
                raise self.fail(f"MatMul with a constant of rank {w.ndim} is not supported (need rank 2)")
            shape = a.shape
            if len(shape) == 1:
                shape = (1,) + shape
            n = shape[-1]
            if w.shape[0] != n:
                raise self.fail(f"MatMul shapes {a.shape} and {w.shape} do not match")
            r = int(np.prod(shape[:-1], dtype=np.int64))
            m = w.shape[1]
            terms = {s: matmul(w.T, mm.reshape(r, n, -1)).reshape(r * m, -1) for s, mm in a.terms.items()}
            bias = matmul(a.bias.reshape(r, n), w).reshape(-1)
            out_shape = shape[:-1] + (m,) if len(a.shape) > 1 else (m,)
            return _Lin(tuple(out_shape), terms, bias)
        w = np.asarray(a, dtype=np.float64)
        if w.ndim != 2 or len(b.shape) != 2:
            raise self.fail("MatMul of a constant by a variable needs two rank-2 operands")
        n, m = b.shape
        if w.shape[1] != n:
            raise self.fail(f"MatMul shapes {w.shape} and {b.shape} do not match")
        p = w.shape[0]
        terms = {s: matmul(w, mm.reshape(n, -1)).reshape(p * m, -1) for s, mm in b.terms.items()}
        bias = matmul(w, b.bias.reshape(n, m)).reshape(-1)
        return _Lin((p, m), terms, bias)

    def lin_transpose(self, v, perm=None):
        if not _is_lin(v):
            return np.transpose(v, perm)
        return self.lin_take(v, np.transpose(self.lin_index(v), perm))

    def reshape(self, v, shape: tuple[int, ...]):
        if _is_lin(v):
            return self.lin_take(v, self.lin_index(v).reshape(shape))
        return np.reshape(v, shape)

    def materialize(self, lin: _Lin) -> int:
        """Node id holding ``lin`` (flattened); reuse a node when lin is its identity."""
        if len(lin.terms) == 1 and not np.any(lin.bias):
            (src, m), = lin.terms.items()
            if m.shape[0] == m.shape[1] and np.array_equal(m, np.eye(m.shape[0])):
                return src
        terms = tuple(sorted(((s, np.ascontiguousarray(m, dtype=np.float64)) for s, m in lin.terms.items()), key=lambda t: t[0]))
        self.nodes.append(AffineNode(terms, np.ascontiguousarray(lin.bias, dtype=np.float64)))
        return len(self.nodes) - 1

    def node_lin(self, nid: int, shape: tuple[int, ...]) -> _Lin:
        size = self.nodes[nid].size
        return _Lin(shape, {nid: np.eye(size)}, np.zeros(size))

    # --------------------------------------------------------------- values
    def get(self, name: str):
        if name == "":
            return None
        if name not in self.env:
            raise self.fail(f"input tensor '{name}' is not produced by any earlier node")
        v = self.env[name]
        if isinstance(v, _Refused):
            raise self.fail(f"reads '{name}': {v.reason}")
        return v

    def const(self, name: str, what: str) -> np.ndarray:
        v = self.get(name)
        if v is None or _is_lin(v):
            raise self.fail(f"{what} must be a constant tensor")
        return np.asarray(v)

    def shape_of(self, v) -> tuple[int, ...]:
        return v.shape if _is_lin(v) else tuple(np.shape(v))

    # ----------------------------------------------------------------- run
    def run(self) -> ControllerIR:
        graph = self.model.graph
        inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        for name, arr in inits.items():
            self.env[name] = arr
        inputs = [vi for vi in graph.input if vi.name not in inits]
        shadowed = [vi.name for vi in graph.input if vi.name in inits]
        if shadowed:
            self.notes.append(f"{len(shadowed)} initializer(s) also listed as graph inputs "
                              f"({', '.join(shadowed[:3])}{', ...' if len(shadowed) > 3 else ''}); treated as constants")
        if not inputs:
            raise self.fail("the graph has no non-constant input", where="graph.input")
        shapes = []
        for vi in inputs:
            tt = vi.type.tensor_type
            if tt.elem_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16):
                raise self.fail(f"input '{vi.name}' has element type {onnx.TensorProto.DataType.Name(tt.elem_type)}; "
                                "a floating-point tensor is required", where=f"graph.input[{vi.name}]")
            if not tt.HasField("shape"):
                raise self.fail(f"input '{vi.name}' has no shape", where=f"graph.input[{vi.name}]")
            dims = []
            for axis, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value") and d.dim_value > 0:
                    dims.append(int(d.dim_value))
                elif axis == 0:
                    label = d.dim_param or "?"
                    self.notes.append(f"input '{vi.name}': symbolic batch dimension '{label}' bound to 1")
                    dims.append(1)
                else:
                    raise self.fail(f"input '{vi.name}' has a symbolic dimension at axis {axis} "
                                    f"('{d.dim_param}'); only the leading (batch) axis may be symbolic",
                                    where=f"graph.input[{vi.name}]")
            shapes.append(tuple(dims))
        total = int(sum(np.prod(s, dtype=np.int64) for s in shapes))
        if total > MAX_INPUTS:
            raise self.fail(f"the inputs hold {total} values; at most {MAX_INPUTS} are supported", where="graph.input")
        self.nodes.append(InputNode(total))
        offset = 0
        for vi, shape in zip(inputs, shapes):
            n = int(np.prod(shape, dtype=np.int64))
            m = np.zeros((n, total))
            m[np.arange(n), offset + np.arange(n)] = 1.0
            self.env[vi.name] = _Lin(shape, {0: m}, np.zeros(n))
            offset += n
        self.input_shapes = shapes
        self.input_names = tuple(vi.name for vi in inputs)

        chosen = self.select_outputs(graph)
        needed = self.backward_slice(graph, [t for _, t in chosen])
        skipped = [n.op_type for i, n in enumerate(graph.node) if i not in needed]
        if skipped:
            self.notes.append(f"{len(skipped)} node(s) not on the path to the controller output skipped "
                              f"({', '.join(sorted(set(skipped)))})")
        for i, node in enumerate(graph.node):
            if i not in needed:
                continue
            label = f"'{node.name}'" if node.name else f"#{i}"
            self.node_desc = f"node {label} ({node.op_type})"
            if node.domain == "ai.onnx.ml":
                handler = getattr(self, f"ml_{node.op_type}", None)
                if handler is None:
                    raise self.fail(f"operator ai.onnx.ml {node.op_type} is not supported: "
                                    f"{_ML_HINTS.get(node.op_type, _ML_DEFAULT_HINT)} (supported ai.onnx.ml: "
                                    f"{', '.join(supported_ml_ops())})")
            elif node.domain not in _DEFAULT_DOMAINS:
                raise self.fail(f"operator domain '{node.domain}' ({node.op_type}) is not supported")
            else:
                handler = getattr(self, f"op_{node.op_type}", None)
            if handler is None:
                raise self.fail(f"operator {node.op_type} is not supported{_HINTS.get(node.op_type, '')} "
                                f"(supported: {', '.join(supported_ops())})")
            self._current = node
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            args = [self.get(n) for n in node.input]
            heads = [v for v in args if isinstance(v, _Headed)]
            if heads:
                if node.op_type not in _HEAD_PASS:
                    raise self.fail(self.hidden_head_reason(heads[0]))
                handler = functools.partial(self.head_op, node.op_type, handler)
            try:
                outs = handler(args, attrs)
            except ModelImportError:
                raise
            except (ValueError, IndexError, TypeError) as exc:
                raise self.fail(f"cannot evaluate: {exc}") from None
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            for name, val in zip(node.output, outs):
                if name:
                    self.env[name] = val
        self.node_desc = "graph"
        for nid, node in enumerate(self.nodes):
            if isinstance(node, AffineNode) and not (np.all(np.isfinite(node.bias)) and
                                                     all(np.all(np.isfinite(w)) for _, w in node.terms)):
                raise self.fail("weights or biases contain NaN or infinity (after folding constants)")
        outputs, head = [], None
        for gname, tname in chosen:
            v = self.env.get(tname)
            if v is None:
                raise self.fail(f"graph output '{gname}' is never produced", where=f"graph.output[{gname}]")
            if isinstance(v, _Headed):
                if len(chosen) > 1:
                    raise self.fail(f"a {v.kind} head ({v.node}) on output '{gname}' beside other outputs: the "
                                    "decode over the concatenation is not the decode over the logits; export one "
                                    "output", where=f"graph.output[{gname}]")
                head = Head(v.kind, v.node, tname, v.readout, v.extra_nodes)
                self.notes.append(head.describe() + "; decode argmax/argmin is unchanged (the head is strictly "
                                  "monotone); confidence: softmax is the softmax of these logits")
                v = v.lin
            if not _is_lin(v):
                raise self.fail(f"graph output '{gname}' does not depend on the input", where=f"graph.output[{gname}]")
            outputs.append(self.materialize(v))
        self.output_shapes = [self.env[t].shape for _, t in chosen]
        return ControllerIR(tuple(self.nodes), tuple(outputs), self.input_names,
                            tuple(t for _, t in chosen), tuple(self.notes), head)

    # -------------------------------------------------------- outputs, heads
    def select_outputs(self, graph) -> list[tuple[str, str]]:
        """(graph output, tensor read) of each controller output: a ZipMap's sequence of maps is read as
        the probability tensor it zips; a non-float output (a class label) is left out, with a note."""
        producers = {o: n for n in graph.node for o in n.output if o}
        chosen = []
        for vo in graph.output:
            kind = vo.type.WhichOneof("value")
            where = f"graph.output[{vo.name}]"
            if kind != "tensor_type":
                prod = producers.get(vo.name)
                if prod is not None and prod.op_type == "ZipMap" and prod.domain == "ai.onnx.ml":
                    self.notes.append(f"output '{vo.name}' (ZipMap: per-class maps) read as the probability tensor "
                                      f"'{prod.input[0]}' it zips; actions = class indices in order")
                    chosen.append((vo.name, prod.input[0]))
                    continue
                raise self.fail(f"graph output '{vo.name}' is a {str(kind).replace('_type', '')}, not a tensor; "
                                "export tensors (skl2onnx: options={'zipmap': False})", where=where)
            elem = vo.type.tensor_type.elem_type
            if elem not in _FLOAT_TYPES:
                self.notes.append(f"output '{vo.name}' ({onnx.TensorProto.DataType.Name(elem)}, a class label) "
                                  "ignored: the action is decoded from the other output")
                continue
            chosen.append((vo.name, vo.name))
        if not chosen:
            raise self.fail("no floating-point graph output (only class labels); export the scores or "
                            "probabilities", where="graph.output")
        return chosen

    @staticmethod
    def backward_slice(graph, tensors) -> set[int]:
        """Indices of the nodes the ``tensors`` depend on."""
        producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
        need: set[int] = set()
        stack = list(tensors)
        while stack:
            i = producer.get(stack.pop())
            if i is None or i in need:
                continue
            need.add(i)
            stack.extend(graph.node[i].input)
        return need

    def hidden_head_reason(self, h: _Headed) -> str:
        return (f"{h.kind} ({h.node}) feeds a hidden layer: Softmax/Sigmoid/Tanh hidden layers are not piecewise "
                "linear and the affine + ReLU IR has no exact solver for them; only a Softmax (last axis), "
                "LogSoftmax or Sigmoid on the final output is imported (as its logits)")

    def make_head(self, kind: str, x, tensor: str):
        """``kind`` applied to ``x`` (read from ONNX tensor ``tensor``) by the current node."""
        if not _is_lin(x):
            v = np.asarray(x, dtype=np.float64)
            if kind == "sigmoid":
                return 1.0 / (1.0 + np.exp(-v))
            e = np.exp(v - np.max(v, axis=-1, keepdims=True))
            sm = e / e.sum(axis=-1, keepdims=True)
            return sm if kind == "softmax" else np.log(sm)
        return _Headed(kind, x, self.node_desc, ((tensor, 1),))

    def _softmax_like(self, kind: str, a, attrs):
        x = a[0]
        shape = self.shape_of(x)
        rank = len(shape)
        axis = int(attrs.get("axis", -1 if self.opset >= 13 else 1))
        axis += rank if axis < 0 else 0
        # opset < 13: over the flattened dims [axis, rank); from 13: over one axis (trailing 1s keep the order)
        group = int(np.prod(shape[axis:], dtype=np.int64)) if self.opset < 13 else shape[axis] if rank else 1
        if not 0 <= axis < max(rank, 1) or (self.opset >= 13 and any(d != 1 for d in shape[axis + 1:])):
            raise self.fail(f"{kind} over axis {attrs.get('axis')} of shape {shape}: only the last axis is imported")
        if rank and group != int(np.prod(shape, dtype=np.int64)):
            raise self.fail(f"{kind} over axis {axis} of shape {shape} normalises several rows separately; the "
                            "decode runs over the whole output: export one row")
        return self.make_head(kind, x, self._current.input[0])

    def op_Softmax(self, a, attrs):
        return self._softmax_like("softmax", a, attrs)

    def op_LogSoftmax(self, a, attrs):
        return self._softmax_like("logsoftmax", a, attrs)

    def op_Sigmoid(self, a, attrs):
        return self.make_head("sigmoid", a[0], self._current.input[0])

    def head_op(self, op: str, handler, a, attrs):
        """The order-preserving operators a head's output may pass through to the graph output."""
        h = next(v for v in a if isinstance(v, _Headed))
        if op in ("Identity", "Normalizer"):
            if op == "Normalizer":     # divides each row by a positive norm: the order of the entries is kept
                self.notes.append(f"{self.node_desc} after the {h.kind} head: a positive rescaling, order kept")
            return h
        if op == "Cast":
            if int(attrs["to"]) not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
                raise self.fail("Cast of a head output to a non-float type is not supported")
            return h
        if op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):   # the flat order is unchanged
            out = handler([h.lin] + list(a[1:]), attrs)
            return _Headed(h.kind, out, h.node, h.readout, h.extra_nodes)
        if op == "Sub" and h.kind == "sigmoid" and not _is_lin(a[0]) and a[1] is h and \
                np.all(np.asarray(a[0]) == 1.0) and np.broadcast_shapes(np.shape(a[0]), h.shape) == h.shape:
            # 1 − sigmoid(z) = sigmoid(−z)
            return _Headed("sigmoid", self.lin_scale(h.lin, -1.0), h.node, tuple((t, -g) for t, g in h.readout),
                           h.extra_nodes)
        if op == "Concat" and all(isinstance(v, _Headed) and v.kind == "sigmoid" for v in a):
            axis = int(attrs["axis"])
            axis += len(h.shape) if axis < 0 else 0
            if int(np.prod(h.shape[:axis], dtype=np.int64)) != 1:   # the entries would interleave
                raise self.fail(self.hidden_head_reason(h))
            lin = self.op_Concat([v.lin for v in a], attrs)
            if len(a) == 2 and a[0].lin.numel == a[1].lin.numel == 1 and \
                    a[0].readout == tuple((t, -g) for t, g in a[1].readout):
                # skl2onnx binary: [1 − sigmoid(z), sigmoid(z)] = softmax([0, z]) exactly
                zero = self.lin_scale(a[1].lin, 0.0)
                lin = self.op_Concat([zero, a[1].lin], attrs)
                node = f"{a[1].node} then {self.node_desc}: [1 − sigmoid(z), sigmoid(z)] = softmax([0, z])"
                return _Headed("softmax", lin, node, tuple((t, 0) for t, _ in a[1].readout) + a[1].readout,
                               a[1].extra_nodes)
            return _Headed("sigmoid", lin, a[0].node, tuple(s for v in a for s in v.readout),
                           tuple(e for v in a for e in v.extra_nodes))
        raise self.fail(self.hidden_head_reason(h))

    # ------------------------------------------------------------ operators
    def op_Identity(self, a, attrs):
        return a[0]

    def op_Constant(self, a, attrs):
        if "value" in attrs:
            return numpy_helper.to_array(attrs["value"])
        for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                           ("value_int", np.int64), ("value_ints", np.int64)):
            if key in attrs:
                return np.asarray(attrs[key], dtype=dtype)
        raise self.fail(f"Constant with attributes {sorted(attrs)} is not supported")

    def relu(self, x: _Lin) -> _Lin:
        """max(x, 0) of an expression: materialised operand, one ReluNode."""
        src = self.materialize(x)
        self.nodes.append(ReluNode(src, self.nodes[src].size))
        return self.node_lin(len(self.nodes) - 1, x.shape)

    def op_Relu(self, a, attrs):
        x = a[0]
        return self.relu(x) if _is_lin(x) else np.maximum(x, 0)

    # piecewise-linear activations, exact as ReLU combinations (ONNX operator specification)
    def _leaky(self, x, slope):
        """x where x >= 0, slope·x below: slope·x + (1 − slope)·relu(x) (any slope)."""
        slope = np.asarray(slope, dtype=np.float64)
        if not _is_lin(x):
            return np.where(np.asarray(x) >= 0, x, slope * np.asarray(x))
        shape = tuple(np.broadcast_shapes(x.shape, slope.shape))
        x = self.lin_broadcast(x, shape)
        return self.lin_add(self.lin_scale(x, slope), self.lin_scale(self.relu(x), 1.0 - slope))

    def op_LeakyRelu(self, a, attrs):
        return self._leaky(a[0], float(attrs.get("alpha", 0.01)))

    def op_PRelu(self, a, attrs):
        return self._leaky(a[0], self.const(self.current_input(1), "PRelu slope"))

    def op_Abs(self, a, attrs):
        x = a[0]
        if not _is_lin(x):
            return np.abs(x)
        return self.lin_add(self.lin_scale(self.relu(x), 2.0), x, -1.0)        # 2·relu(x) − x

    def op_Clip(self, a, attrs):
        x = a[0]
        if self.opset >= 11:
            lo = self.const(self.current_input(1), "Clip min") if len(a) > 1 and a[1] is not None else None
            hi = self.const(self.current_input(2), "Clip max") if len(a) > 2 and a[2] is not None else None
        else:
            lo, hi = attrs.get("min"), attrs.get("max")
        if not _is_lin(x):
            return np.clip(x, lo, hi)
        # a bound at or beyond float32's largest value (what exporters write for "none") is no bound:
        # lo + relu(x − lo) would lose x to rounding there
        lo = None if lo is None or not abs(float(lo)) < 3.4e38 else float(lo)
        hi = None if hi is None or not abs(float(hi)) < 3.4e38 else float(hi)
        if lo is not None and hi is not None and float(lo) > float(hi):
            return self.lin_add(self.lin_scale(x, 0.0), float(hi))     # ONNX: min > max gives max everywhere
        y = x
        if lo is not None:                                                 # lo + relu(x − lo)
            y = self.lin_add(self.relu(self.lin_add(y, float(lo), -1.0)), float(lo))
        if hi is not None:                                                 # hi − relu(hi − y)
            y = self.lin_add(float(hi), self.relu(self.lin_add(float(hi), y, -1.0)), -1.0)
        return y

    def _max2(self, x, y, take_max: bool):
        if not _is_lin(x) and not _is_lin(y):
            return np.maximum(x, y) if take_max else np.minimum(x, y)
        r = self.relu(self.lin_add(x, y, -1.0))                            # one operand is variable                                                   # relu(x − y)
        return self.lin_add(y, r) if take_max else self.lin_add(x, r, -1.0)  # y + relu(x−y) | x − relu(x−y)

    def op_Max(self, a, attrs):
        out = a[0]
        for v in a[1:]:
            out = self._max2(out, v, True)
        return out

    def op_Min(self, a, attrs):
        out = a[0]
        for v in a[1:]:
            out = self._max2(out, v, False)
        return out

    def op_Dropout(self, a, attrs):
        """Inference: the identity (ONNX Dropout with training_mode false or absent)."""
        if len(a) > 2 and a[2] is not None and bool(np.asarray(self.const(self.current_input(2),
                                                                         "Dropout training_mode")).reshape(-1)[0]):
            raise self.fail("Dropout in training mode is random; export the model for inference")
        return a[0]

    def op_BatchNormalization(self, a, attrs):
        """Inference form, folded: scale·(x − mean)/sqrt(var + epsilon) + B along axis 1."""
        if int(attrs.get("training_mode", 0)):
            raise self.fail("BatchNormalization in training mode; export the model for inference")
        x = a[0]
        scale, bias, mean, var = (np.asarray(self.const(self.current_input(k), f"BatchNormalization input {k}"),
                                             dtype=np.float64).reshape(-1) for k in (1, 2, 3, 4))
        shape = self.shape_of(x)
        if len(shape) < 2 or not scale.size == bias.size == mean.size == var.size == shape[1]:
            raise self.fail(f"BatchNormalization over {shape[1] if len(shape) > 1 else '?'} channels with "
                            f"parameters of {scale.size}")
        s = scale / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))
        per = (-1,) + (1,) * (len(shape) - 2)
        if not _is_lin(x):
            return np.asarray(x) * s.reshape(per) + (bias - mean * s).reshape(per)
        return self.lin_add(self.lin_scale(x, s.reshape(per)), (bias - mean * s).reshape(per))

    def op_Add(self, a, attrs):
        return self.lin_add(a[0], a[1], 1.0)

    def op_Sub(self, a, attrs):
        return self.lin_add(a[0], a[1], -1.0)

    def op_Neg(self, a, attrs):
        x = a[0]
        return self.lin_scale(x, -1.0) if _is_lin(x) else -x

    def op_Mul(self, a, attrs):
        x, y = a
        if _is_lin(x) and _is_lin(y):
            raise self.fail("product of two variable tensors (x·y) is not piecewise linear")
        if not _is_lin(x) and not _is_lin(y):
            return np.multiply(x, y)
        lin, c = (x, y) if _is_lin(x) else (y, x)
        shape = tuple(np.broadcast_shapes(lin.shape, np.shape(c)))
        return self.lin_scale(self.lin_broadcast(lin, shape), c)

    def op_Div(self, a, attrs):
        x, y = a
        if _is_lin(y):
            raise self.fail("division by a variable tensor is not piecewise linear")
        c = np.asarray(y)
        if not _is_lin(x):
            if np.issubdtype(np.asarray(x).dtype, np.integer) and np.issubdtype(c.dtype, np.integer):
                return np.trunc(np.asarray(x) / c).astype(np.asarray(x).dtype)
            return np.divide(x, c)
        if np.any(c == 0):
            raise self.fail("division by a constant that contains zero")
        shape = tuple(np.broadcast_shapes(x.shape, c.shape))
        return self.lin_scale(self.lin_broadcast(x, shape), 1.0 / c.astype(np.float64))

    def op_MatMul(self, a, attrs):
        return self.lin_matmul(a[0], a[1])

    def op_Gemm(self, a, attrs):
        A, B = a[0], a[1]
        C = a[2] if len(a) > 2 else None
        alpha = float(attrs.get("alpha", 1.0))
        beta = float(attrs.get("beta", 1.0))
        for v, nm in ((A, "A"), (B, "B")):
            if len(self.shape_of(v)) != 2:
                raise self.fail(f"Gemm operand {nm} has rank {len(self.shape_of(v))}, expected 2")
        if attrs.get("transA", 0):
            A = self.lin_transpose(A)
        if attrs.get("transB", 0):
            B = self.lin_transpose(B)
        y = self.lin_matmul(A, B)
        if alpha != 1.0:
            y = self.lin_scale(y, alpha) if _is_lin(y) else alpha * y
        if C is not None:
            if _is_lin(C):
                C = self.lin_scale(C, beta) if beta != 1.0 else C
            else:
                C = beta * np.asarray(C, dtype=np.float64)
            y = self.lin_add(y, C, 1.0)
        return y

    def op_Flatten(self, a, attrs):
        x = a[0]
        shape = self.shape_of(x)
        axis = int(attrs.get("axis", 1))
        if axis < 0:
            axis += len(shape)
        outer = int(np.prod(shape[:axis], dtype=np.int64))
        return self.reshape(x, (outer, int(np.prod(shape[axis:], dtype=np.int64))))

    def op_Reshape(self, a, attrs):
        x = a[0]
        target = [int(d) for d in self.const(self.current_input(1), "Reshape shape")]
        shape = self.shape_of(x)
        allowzero = int(attrs.get("allowzero", 0))
        out = []
        for i, d in enumerate(target):
            if d == 0 and not allowzero:
                if i >= len(shape):
                    raise self.fail(f"Reshape copies dimension {i} that the input (shape {shape}) lacks")
                out.append(int(shape[i]))
            else:
                out.append(d)
        if out.count(-1) > 1:
            raise self.fail("Reshape target has more than one -1")
        numel = int(np.prod(shape, dtype=np.int64))
        if -1 in out:
            known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
            if known == 0 or numel % known:
                raise self.fail(f"cannot reshape {shape} into {target}")
            out[out.index(-1)] = numel // known
        if int(np.prod(out, dtype=np.int64)) != numel:
            raise self.fail(f"cannot reshape {shape} into {target}")
        return self.reshape(x, tuple(out))

    def current_input(self, k: int) -> str:
        node = self._current
        if k >= len(node.input):
            raise self.fail(f"input {k} is missing")
        return node.input[k]

    def _axes(self, a, attrs, name: str):
        if self.opset >= 13:
            if len(a) > 1 and a[1] is not None:
                return [int(v) for v in np.asarray(self.const(self.current_input(1), f"{name} axes")).reshape(-1)]
            return None
        return [int(v) for v in attrs["axes"]] if "axes" in attrs else None

    def op_Squeeze(self, a, attrs):
        x = a[0]
        shape = self.shape_of(x)
        axes = self._axes(a, attrs, "Squeeze")
        if axes is None:
            axes = [i for i, d in enumerate(shape) if d == 1]
        axes = sorted(ax + len(shape) if ax < 0 else ax for ax in axes)
        for ax in axes:
            if ax >= len(shape) or shape[ax] != 1:
                raise self.fail(f"Squeeze axis {ax} of shape {shape} is not 1")
        return self.reshape(x, tuple(d for i, d in enumerate(shape) if i not in axes))

    def op_Unsqueeze(self, a, attrs):
        x = a[0]
        shape = list(self.shape_of(x))
        axes = self._axes(a, attrs, "Unsqueeze")
        if axes is None:
            raise self.fail("Unsqueeze without axes")
        rank = len(shape) + len(axes)
        for ax in sorted(ax + rank if ax < 0 else ax for ax in axes):
            shape.insert(ax, 1)
        return self.reshape(x, tuple(shape))

    def op_Transpose(self, a, attrs):
        perm = attrs.get("perm")
        return self.lin_transpose(a[0], list(perm) if perm is not None else None)

    def op_Shape(self, a, attrs):
        shape = np.asarray(self.shape_of(a[0]), dtype=np.int64)
        start = int(attrs.get("start", 0))
        end = attrs.get("end")
        return shape[start:end] if end is not None else shape[start:]

    def op_Gather(self, a, attrs):
        if _is_lin(a[0]):
            raise self.fail("Gather on a variable tensor is not supported")
        return np.take(np.asarray(a[0]), np.asarray(a[1]), axis=int(attrs.get("axis", 0)))

    def lin_stack(self, parts: list) -> tuple[_Lin, list[np.ndarray]]:
        """All ``parts`` (expressions or constants) as one flat expression, and per part the
        indices of its entries in it (shaped like the part): for Concat and Split."""
        total = sum(int(np.prod(self.shape_of(v), dtype=np.int64)) for v in parts)
        terms: dict[int, np.ndarray] = {}
        bias = np.zeros(total)
        idx, off = [], 0
        for v in parts:
            n = int(np.prod(self.shape_of(v), dtype=np.int64))
            if _is_lin(v):
                for src, m in v.terms.items():
                    if src not in terms:
                        terms[src] = np.zeros((total, m.shape[1]))
                    terms[src][off:off + n] = m
                bias[off:off + n] = v.bias
            else:
                bias[off:off + n] = np.asarray(v, dtype=np.float64).reshape(-1)
            idx.append(off + np.arange(n, dtype=np.int64).reshape(self.shape_of(v)))
            off += n
        return _Lin((total,), terms, bias), idx

    def op_Concat(self, a, attrs):
        axis = int(attrs["axis"])
        if not any(_is_lin(v) for v in a):
            return np.concatenate([np.asarray(v).reshape(-1) if np.ndim(v) == 0 else np.asarray(v) for v in a],
                                  axis=axis)
        stacked, idx = self.lin_stack(a)                   # variable tensors: an exact rearrangement
        return self.lin_take(stacked, np.concatenate(idx, axis=axis))

    def op_Split(self, a, attrs):
        x = a[0]
        shape = self.shape_of(x)
        axis = int(attrs.get("axis", 0))
        axis += len(shape) if axis < 0 else 0
        if self.opset >= 13 and len(a) > 1 and a[1] is not None:
            sizes = [int(v) for v in self.const(self.current_input(1), "Split sizes").reshape(-1)]
        elif "split" in attrs:
            sizes = [int(v) for v in attrs["split"]]
        else:
            k = len(self._current.output)
            if shape[axis] % k:
                raise self.fail(f"Split of {shape[axis]} into {k} equal parts")
            sizes = [shape[axis] // k] * k
        if sum(sizes) != shape[axis]:
            raise self.fail(f"Split sizes {sizes} do not add up to dimension {shape[axis]}")
        cuts = np.cumsum(sizes)[:-1]
        if not _is_lin(x):
            return list(np.split(np.asarray(x), cuts, axis=axis))
        return [self.lin_take(x, part) for part in np.split(self.lin_index(x), cuts, axis=axis)]

    def op_Cast(self, a, attrs):
        if _is_lin(a[0]):
            to = int(attrs["to"])
            if to not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
                raise self.fail("Cast of a variable tensor to a non-float type is not supported")
            return a[0]
        return np.asarray(a[0]).astype(onnx.helper.tensor_dtype_to_np_dtype(int(attrs["to"])))


    # ------------------------------------------------ ai.onnx.ml (skl2onnx)
    def _linear_ml(self, x, attrs, what: str) -> _Lin:
        """X @ coefficients.T + intercepts (ai.onnx.ml LinearClassifier / LinearRegressor)."""
        if not _is_lin(x):
            raise self.fail(f"{what} of a constant input")
        coef = np.asarray(attrs.get("coefficients", []), dtype=np.float64)
        shape = x.shape
        n_feat = shape[-1] if shape else 1
        if len(shape) > 2 or (len(shape) == 2 and shape[0] != 1) or coef.size % max(n_feat, 1):
            raise self.fail(f"{what} input of shape {shape} with {coef.size} coefficients")
        k = coef.size // n_feat
        icpt = np.asarray(attrs.get("intercepts", np.zeros(k)), dtype=np.float64)
        if icpt.size != k:
            raise self.fail(f"{what} has {k} coefficient rows and {icpt.size} intercepts")
        return self.lin_add(self.lin_matmul(self.reshape(x, (1, n_feat)), coef.reshape(k, n_feat).T), icpt.reshape(1, k))

    def ml_LinearRegressor(self, a, attrs):
        post = attrs.get("post_transform", b"NONE")
        post = post.decode() if isinstance(post, bytes) else str(post)
        if post != "NONE":
            raise self.fail(f"LinearRegressor post_transform {post}: only NONE (the values) is exact")
        return self._linear_ml(a[0], attrs, "LinearRegressor")

    def ml_LinearClassifier(self, a, attrs):
        post = attrs.get("post_transform", b"NONE")
        post = post.decode() if isinstance(post, bytes) else str(post)
        labels = attrs.get("classlabels_ints", attrs.get("classlabels_strings", []))
        scores = self._linear_ml(a[0], attrs, "LinearClassifier")
        k = scores.numel
        if k != len(labels):
            raise self.fail(f"LinearClassifier with {k} score row(s) for {len(labels)} classes (onnxruntime's "
                            "one-row binary form) is not supported; export with skl2onnx (it writes one row per class)")
        label = _Refused("the class label of a LinearClassifier is not a controller output")
        self.notes.append(f"{self.node_desc}: scores X·Wᵀ + b of {k} classes {list(labels)} (actions in this "
                          f"order), post_transform {post}")
        if post == "NONE":
            return [label, scores]
        if post not in ("SOFTMAX", "LOGISTIC"):
            raise self.fail(f"LinearClassifier post_transform {post} is not imported (not a strictly monotone head "
                            "of the scores); export with post_transform NONE, SOFTMAX or LOGISTIC")
        node = self._current
        out = node.output[1] if len(node.output) > 1 and node.output[1] else "scores"
        raw = onnx.helper.make_node("LinearClassifier", list(node.input), [out + "__mi_label", out + "__mi_logits"],
                                    domain="ai.onnx.ml", name=(node.name or "LinearClassifier") + "__mi_logits")
        raw.attribute.extend(a for a in node.attribute if a.name != "post_transform")
        raw.attribute.append(onnx.helper.make_attribute("post_transform", "NONE"))
        return [label, _Headed("softmax" if post == "SOFTMAX" else "sigmoid", scores, self.node_desc,
                               ((out + "__mi_logits", 1),), (raw.SerializeToString(),))]

    def ml_Normalizer(self, a, attrs):
        raise self.fail("Normalizer of the scores is not piecewise linear (only after a Softmax/Sigmoid head, "
                        "where it keeps the order)")


def supported_ops() -> list[str]:
    """Names of the ONNX operators the importer accepts."""
    return sorted(n[3:] for n in dir(_Importer) if n.startswith("op_"))


def supported_ml_ops() -> list[str]:
    """Names of the ai.onnx.ml operators the importer reads (ZipMap and label outputs are left out, not read)."""
    return sorted(n[3:] for n in dir(_Importer) if n.startswith("ml_"))


def _check_versions(path: Path, model: onnx.ModelProto) -> None:
    import onnxruntime

    if model.ir_version > onnx.IR_VERSION:
        raise ModelImportError(
            f"model IR {model.ir_version} > supported {onnx.IR_VERSION} (onnx {onnx.__version__}, "
            f"onnxruntime {onnxruntime.__version__}); re-export with an older IR/opset or upgrade onnx and onnxruntime",
            file=str(path), where="ir_version")
    max_opset = onnx.defs.onnx_opset_version()
    for imp in model.opset_import:
        if imp.domain in _DEFAULT_DOMAINS and imp.version > max_opset:
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
    try:
        model = onnx.load_from_string(data)
    except Exception as exc:  # protobuf DecodeError and friends
        raise ModelImportError(f"not a readable ONNX model ({type(exc).__name__}: {exc})", file=str(path)) from None
    _check_versions(path, model)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelImportError(f"onnx.checker rejects the model: {first}", file=str(path)) from None
    return model


def load_model(path: str | Path) -> onnx.ModelProto:
    """Read and check an ONNX file; raises ModelImportError (file, field, reason)."""
    return parse_model(read_model_file(path), path)


def import_model(model: onnx.ModelProto, path: str | Path) -> ControllerIR:
    """ControllerIR of a checked ONNX graph (``path`` names it in errors); raises ModelImportError."""
    return _Importer(Path(path), model).run()


def import_onnx(path: str | Path) -> ControllerIR:
    """Import an ONNX controller as a ControllerIR (not yet cross-checked).

    Args:
        path: ONNX file.
    Returns:
        ControllerIR with ``n_inputs`` = total size of the non-constant graph inputs.
    Raises:
        ModelImportError naming file, node and reason (exit code 2).
    """
    return import_model(load_model(path), path)


def input_feed_shapes(path: str | Path) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """(name, shape with batch bound to 1, numpy dtype) of each non-constant graph input."""
    return feed_shapes(load_model(path))


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

    def __init__(self, data: bytes, ir: ControllerIR, name: str | Path):
        self.ir, self.name, self.head = ir, name, ir.head
        proto = onnx.load_from_string(data)
        logits = [t for t, _ in self.head.readout] if self.head else list(ir.output_names)
        fetch = list(dict.fromkeys(logits + ([self.head.output] if self.head else [])))
        outs = [o.name for o in proto.graph.output]
        self.fetch = fetch
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
        self._index = {t: k for k, t in enumerate(fetch)}
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


def compare_with_onnxruntime(ir: ControllerIR, feeds, evaluate, name: str | Path, lo: np.ndarray, hi: np.ndarray,
                             n_points: int = 256, seed: int = 0, rtol: float = ORT_RTOL) -> float:
    """:func:`cross_check` with the onnxruntime evaluation given: ``feeds`` = :func:`feed_shapes`,
    ``evaluate(points (n, n_inputs)) -> (n, n_outputs)``, ``name`` for errors."""
    path = name
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    if lo.shape != (ir.n_inputs,) or hi.shape != (ir.n_inputs,):
        raise ModelImportError(f"input box has {lo.size} entries but the model has {ir.n_inputs} inputs", file=str(path))
    bad = np.nonzero(~(lo <= hi))[0]
    if bad.size:
        i = int(bad[0])
        raise ModelImportError(f"empty or inverted input box for input {i}: [{lo[i]}, {hi[i]}]", file=str(path))
    rng = np.random.default_rng(seed)
    total = max(n_points, 256)
    pts = [(lo + hi) / 2]
    # every corner while they take at most half of the points, else a fixed sample of them
    pts.extend(np.where(corner_signs(ir.n_inputs, limit=total // 2), hi, lo))
    n_rand = total - len(pts)
    pts.extend(lo + (hi - lo) * rng.random((n_rand, ir.n_inputs)))
    pts = np.asarray(np.asarray(pts, dtype=np.float32), dtype=np.float64)
    off = 0
    for _name, shape, dtype in feeds:  # round to what onnxruntime is fed
        n = int(np.prod(shape, dtype=np.int64))
        pts[:, off:off + n] = pts[:, off:off + n].astype(dtype).astype(np.float64)
        off += n
    if not np.all(np.isfinite(pts)):
        raise ModelImportError("the input box is not finite in float32", file=str(path))
    ort = evaluate(pts)
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
