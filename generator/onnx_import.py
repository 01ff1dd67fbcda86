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
Concat and Split of variable tensors (exact rearrangements). Anything else is
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

from .errors import ModelImportError, ModelMismatchError
from .ir import AffineNode, ControllerIR, InputNode, ReluNode
from .numerics import corner_signs, matmul

#: Largest number of (flattened) network inputs the importer accepts.
MAX_INPUTS = 4096
#: Relative tolerance of the import cross-check against onnxruntime.
ORT_RTOL = 1e-5

_DEFAULT_DOMAINS = ("", "ai.onnx")

#: What to do instead, for operators exporters often emit that the IR does not hold (yet).
_HINTS = {
    "Softmax": ": export the logits (the layer before it): decode argmax/argmin is the same on them, and "
               "sla.yaml confidence: softmax computes the probabilities from them",
    "LogSoftmax": ": export the logits (the layer before it): decode argmax/argmin is the same on them",
    "Sigmoid": ": as the last layer, export the layer before it (sigmoid is monotone: the decoded action is the "
               "same); as a hidden layer it is not piecewise linear",
    "Tanh": ": not piecewise linear; train the controller with ReLU (mi-certify train does)",
}


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
        return self.env[name]

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

        for i, node in enumerate(graph.node):
            label = f"'{node.name}'" if node.name else f"#{i}"
            self.node_desc = f"node {label} ({node.op_type})"
            if node.domain not in _DEFAULT_DOMAINS:
                hint = (" (scikit-learn exports through skl2onnx: export the MLP's layers without the ai.onnx.ml "
                        "classifier head, e.g. skl2onnx options {'zipmap': False} and the raw scores)"
                        if node.domain == "ai.onnx.ml" else "")
                raise self.fail(f"operator domain '{node.domain}' ({node.op_type}) is not supported{hint}")
            handler = getattr(self, f"op_{node.op_type}", None)
            if handler is None:
                raise self.fail(f"operator {node.op_type} is not supported{_HINTS.get(node.op_type, '')} "
                                f"(supported: {', '.join(supported_ops())})")
            self._current = node
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            args = [self.get(n) for n in node.input]
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
        outputs = []
        for vo in graph.output:
            v = self.env.get(vo.name)
            if v is None:
                raise self.fail(f"graph output '{vo.name}' is never produced", where=f"graph.output[{vo.name}]")
            if not _is_lin(v):
                raise self.fail(f"graph output '{vo.name}' does not depend on the input", where=f"graph.output[{vo.name}]")
            outputs.append(self.materialize(v))
        self.output_shapes = [self.env[vo.name].shape for vo in graph.output]
        return ControllerIR(tuple(self.nodes), tuple(outputs), self.input_names,
                            tuple(vo.name for vo in graph.output), tuple(self.notes))

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


def supported_ops() -> list[str]:
    """Names of the ONNX operators the importer accepts."""
    return sorted(n[3:] for n in dir(_Importer) if n.startswith("op_"))


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


def run_session(sess, feeds, points: np.ndarray) -> np.ndarray:
    """Evaluate ``sess`` at (n, n_inputs) points, one run per point (float32 feeds split by
    ``feeds`` = :func:`feed_shapes`); returns (n, n_outputs) float64, outputs concatenated flat."""
    out_rows = []
    pts = np.asarray(points, dtype=np.float32)
    for row in pts:
        feed, off = {}, 0
        for name, shape, dtype in feeds:
            n = int(np.prod(shape, dtype=np.int64))
            feed[name] = row[off:off + n].reshape(shape).astype(dtype)
            off += n
        res = sess.run(None, feed)
        out_rows.append(np.concatenate([np.asarray(r, dtype=np.float64).reshape(-1) for r in res]))
    return np.stack(out_rows)


@functools.lru_cache(maxsize=8)
def _session(path: str, _mtime: int, _size: int):
    """One onnxruntime session (and input feed layout) per model file version."""
    return onnxruntime_session(path, path), input_feed_shapes(path)


def _cached_session(path: str | Path):
    path = Path(path)
    return _session(str(path.resolve()), path.stat().st_mtime_ns, path.stat().st_size)


def evaluate_onnxruntime(path: str | Path, points: np.ndarray) -> np.ndarray:
    """Evaluate the model with onnxruntime (float32, CPU), one point per run.

    Args:
        points: (n, n_inputs) array, flattened concatenated inputs.
    Returns:
        (n, n_outputs) float64 array of the concatenated flattened outputs.
    Raises:
        ModelImportError if onnxruntime refuses the model.
    """
    sess, feeds = _cached_session(path)
    return run_session(sess, feeds, points)


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
