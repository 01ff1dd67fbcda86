"""Monotone output heads: Softmax (over the whole output), LogSoftmax and elementwise Sigmoid on
the final output are stripped (the IR keeps their logits and records the head, ``ir.head``),
and the order-preserving operators a head's output may still pass through on its way to the
graph output (Identity, Cast, the reshapes, skl2onnx's ``1 − sigmoid`` and binary
``[1 − sigmoid(z), sigmoid(z)]`` Concat, Normalizer). A head feeding anything else is a hidden
non-piecewise-linear layer: refused. On constants the heads fold (numpy)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np
import onnx

from mi_certify.generator.frontend.onnx.registry import Handler, onnx_handler
from mi_certify.generator.frontend.onnx.shape import op_concat
from mi_certify.generator.frontend.onnx.values import Headed, is_lin, lin_scale, shape_of

if TYPE_CHECKING:
    from mi_certify.generator.frontend.onnx.importer import Importer

#: What a head's output may still pass through on its way to the graph output (order-preserving, no
#: rearrangement of the entries).
HEAD_PASS = ("Identity", "Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Sub", "Concat", "Normalizer")


def hidden_head_reason(h: Headed) -> str:
    """Why a head that does not reach the graph output (through :data:`HEAD_PASS` only) is refused."""
    return (f"{h.kind} ({h.node}) feeds a hidden layer: Softmax/Sigmoid/Tanh hidden layers are not piecewise "
            "linear and the affine + ReLU IR has no exact solver for them; only a Softmax (last axis), "
            "LogSoftmax or Sigmoid on the final output is imported (as its logits)")


def make_head(imp: Importer, kind: str, x, tensor: str):
    """``kind`` applied to ``x`` (read from ONNX tensor ``tensor``) by the current node."""
    if not is_lin(x):
        v = np.asarray(x, dtype=np.float64)
        if kind == "sigmoid":
            return 1.0 / (1.0 + np.exp(-v))
        e = np.exp(v - np.max(v, axis=-1, keepdims=True))
        sm = e / e.sum(axis=-1, keepdims=True)
        return sm if kind == "softmax" else np.log(sm)
    return Headed(kind, x, imp.node_desc, ((tensor, 1),))


def _softmax_like(imp: Importer, kind: str, a, attrs):
    """Softmax / LogSoftmax over the whole output only (opset < 13: the flattened dims [axis, rank);
    from 13: one axis, the last that is not 1)."""
    x = a[0]
    shape = shape_of(x)
    rank = len(shape)
    axis = int(attrs.get("axis", -1 if imp.opset >= 13 else 1))
    axis += rank if axis < 0 else 0
    # opset < 13: over the flattened dims [axis, rank); from 13: over one axis (trailing 1s keep the order)
    group = int(np.prod(shape[axis:], dtype=np.int64)) if imp.opset < 13 else shape[axis] if rank else 1
    if not 0 <= axis < max(rank, 1) or (imp.opset >= 13 and any(d != 1 for d in shape[axis + 1:])):
        raise imp.fail(f"{kind} over axis {attrs.get('axis')} of shape {shape}: only the last axis is imported")
    if rank and group != int(np.prod(shape, dtype=np.int64)):
        raise imp.fail(f"{kind} over axis {axis} of shape {shape} normalises several rows separately; the "
                       "decode runs over the whole output: export one row")
    return make_head(imp, kind, x, imp.node.input[0])


@onnx_handler("Softmax")
def op_softmax(imp: Importer, a, attrs):
    return _softmax_like(imp, "softmax", a, attrs)


@onnx_handler("LogSoftmax")
def op_log_softmax(imp: Importer, a, attrs):
    return _softmax_like(imp, "logsoftmax", a, attrs)


@onnx_handler("Sigmoid")
def op_sigmoid(imp: Importer, a, attrs):
    return make_head(imp, "sigmoid", a[0], imp.node.input[0])


def head_handler(imp: Importer, op: str, handler: Handler, h: Headed):
    """The handler of operator ``op`` (``handler`` its own, bound to ``imp``) when one of its inputs is the
    head output ``h``: :func:`through_head` for the :data:`HEAD_PASS` operators; raises the importer's
    ModelImportError otherwise."""
    if op not in HEAD_PASS:
        raise imp.fail(hidden_head_reason(h))
    return functools.partial(through_head, imp, op, handler)


def through_head(imp: Importer, op: str, handler: Handler, a, attrs):
    """The order-preserving operators a head's output may pass through to the graph output."""
    h = next(v for v in a if isinstance(v, Headed))
    if op in ("Identity", "Normalizer"):
        if op == "Normalizer":     # divides each row by a positive norm: the order of the entries is kept
            imp.notes.append(f"{imp.node_desc} after the {h.kind} head: a positive rescaling, order kept")
        return h
    if op == "Cast":
        if int(attrs["to"]) not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
            raise imp.fail("Cast of a head output to a non-float type is not supported")
        return h
    if op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):   # the flat order is unchanged
        out = handler([h.lin] + list(a[1:]), attrs)
        return Headed(h.kind, out, h.node, h.readout, h.extra_nodes)
    if op == "Sub" and h.kind == "sigmoid" and not is_lin(a[0]) and a[1] is h and \
            np.all(np.asarray(a[0]) == 1.0) and np.broadcast_shapes(np.shape(a[0]), h.shape) == h.shape:
        # 1 − sigmoid(z) = sigmoid(−z)
        return Headed("sigmoid", lin_scale(h.lin, -1.0), h.node, tuple((t, -g) for t, g in h.readout),
                      h.extra_nodes)
    if op == "Concat" and all(isinstance(v, Headed) and v.kind == "sigmoid" for v in a):
        return _concat_sigmoids(imp, h, a, attrs)
    raise imp.fail(hidden_head_reason(h))


def _concat_sigmoids(imp: Importer, h: Headed, a, attrs) -> Headed:
    """Concat of sigmoid heads along the outermost non-1 axis: one sigmoid head; skl2onnx's binary
    ``[1 − sigmoid(z), sigmoid(z)]`` is ``softmax([0, z])`` exactly."""
    axis = int(attrs["axis"])
    axis += len(h.shape) if axis < 0 else 0
    if int(np.prod(h.shape[:axis], dtype=np.int64)) != 1:   # the entries would interleave
        raise imp.fail(hidden_head_reason(h))
    lin = op_concat(imp, [v.lin for v in a], attrs)
    if len(a) == 2 and a[0].lin.numel == a[1].lin.numel == 1 and \
            a[0].readout == tuple((t, -g) for t, g in a[1].readout):
        # skl2onnx binary: [1 − sigmoid(z), sigmoid(z)] = softmax([0, z]) exactly
        zero = lin_scale(a[1].lin, 0.0)
        lin = op_concat(imp, [zero, a[1].lin], attrs)
        node = f"{a[1].node} then {imp.node_desc}: [1 − sigmoid(z), sigmoid(z)] = softmax([0, z])"
        return Headed("softmax", lin, node, tuple((t, 0) for t, _ in a[1].readout) + a[1].readout,
                      a[1].extra_nodes)
    return Headed("sigmoid", lin, a[0].node, tuple(s for v in a for s in v.readout),
                  tuple(e for v in a for e in v.extra_nodes))
