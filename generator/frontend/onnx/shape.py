"""Rearranging operators: Identity, Flatten, Reshape (0 = copy, -1 = infer), Squeeze, Unsqueeze,
Transpose, Concat, Split. On an expression each is an exact rearrangement of its entries (no IR
node); on constants, the numpy operation. Squeeze/Unsqueeze ``axes`` and Split ``split`` are
attributes before opset 13, inputs from 13 (ONNX operator specification)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mi_certify.generator.frontend.onnx.registry import onnx_handler
from mi_certify.generator.frontend.onnx.values import (is_lin, lin_index, lin_reshape, lin_stack, lin_take,
                                                       lin_transpose, shape_of)

if TYPE_CHECKING:
    from mi_certify.generator.frontend.onnx.importer import Importer


@onnx_handler("Identity")
def op_identity(imp: Importer, a, attrs):
    return a[0]


@onnx_handler("Flatten")
def op_flatten(imp: Importer, a, attrs):
    x = a[0]
    shape = shape_of(x)
    axis = int(attrs.get("axis", 1))
    if axis < 0:
        axis += len(shape)
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    return lin_reshape(x, (outer, int(np.prod(shape[axis:], dtype=np.int64))))


@onnx_handler("Reshape")
def op_reshape(imp: Importer, a, attrs):
    x = a[0]
    target = [int(d) for d in imp.const(imp.input_name(1), "Reshape shape")]
    shape = shape_of(x)
    allowzero = int(attrs.get("allowzero", 0))
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise imp.fail(f"Reshape copies dimension {i} that the input (shape {shape}) lacks")
            out.append(int(shape[i]))
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise imp.fail("Reshape target has more than one -1")
    numel = int(np.prod(shape, dtype=np.int64))
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or numel % known:
            raise imp.fail(f"cannot reshape {shape} into {target}")
        out[out.index(-1)] = numel // known
    if int(np.prod(out, dtype=np.int64)) != numel:
        raise imp.fail(f"cannot reshape {shape} into {target}")
    return lin_reshape(x, tuple(out))


def _axes(imp: Importer, a, attrs, name: str) -> list[int] | None:
    """Squeeze/Unsqueeze axes: the constant input 1 from opset 13, the attribute before; None if absent."""
    if imp.opset >= 13:
        if len(a) > 1 and a[1] is not None:
            return [int(v) for v in np.asarray(imp.const(imp.input_name(1), f"{name} axes")).reshape(-1)]
        return None
    return [int(v) for v in attrs["axes"]] if "axes" in attrs else None


@onnx_handler("Squeeze")
def op_squeeze(imp: Importer, a, attrs):
    x = a[0]
    shape = shape_of(x)
    axes = _axes(imp, a, attrs, "Squeeze")
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = sorted(ax + len(shape) if ax < 0 else ax for ax in axes)
    for ax in axes:
        if ax >= len(shape) or shape[ax] != 1:
            raise imp.fail(f"Squeeze axis {ax} of shape {shape} is not 1")
    return lin_reshape(x, tuple(d for i, d in enumerate(shape) if i not in axes))


@onnx_handler("Unsqueeze")
def op_unsqueeze(imp: Importer, a, attrs):
    x = a[0]
    shape = list(shape_of(x))
    axes = _axes(imp, a, attrs, "Unsqueeze")
    if axes is None:
        raise imp.fail("Unsqueeze without axes")
    rank = len(shape) + len(axes)
    for ax in sorted(ax + rank if ax < 0 else ax for ax in axes):
        shape.insert(ax, 1)
    return lin_reshape(x, tuple(shape))


@onnx_handler("Transpose")
def op_transpose(imp: Importer, a, attrs):
    perm = attrs.get("perm")
    return lin_transpose(a[0], list(perm) if perm is not None else None)


@onnx_handler("Concat")
def op_concat(imp: Importer, a, attrs):
    axis = int(attrs["axis"])
    if not any(is_lin(v) for v in a):
        return np.concatenate([np.asarray(v).reshape(-1) if np.ndim(v) == 0 else np.asarray(v) for v in a],
                              axis=axis)
    stacked, idx = lin_stack(a)                   # variable tensors: an exact rearrangement
    return lin_take(stacked, np.concatenate(idx, axis=axis))


@onnx_handler("Split")
def op_split(imp: Importer, a, attrs):
    """One value per output; sizes from input 1 (opset 13), the ``split`` attribute, or equal parts."""
    x = a[0]
    shape = shape_of(x)
    axis = int(attrs.get("axis", 0))
    axis += len(shape) if axis < 0 else 0
    if imp.opset >= 13 and len(a) > 1 and a[1] is not None:
        sizes = [int(v) for v in imp.const(imp.input_name(1), "Split sizes").reshape(-1)]
    elif "split" in attrs:
        sizes = [int(v) for v in attrs["split"]]
    else:
        k = len(imp.node.output)
        if shape[axis] % k:
            raise imp.fail(f"Split of {shape[axis]} into {k} equal parts")
        sizes = [shape[axis] // k] * k
    if sum(sizes) != shape[axis]:
        raise imp.fail(f"Split sizes {sizes} do not add up to dimension {shape[axis]}")
    cuts = np.cumsum(sizes)[:-1]
    if not is_lin(x):
        return list(np.split(np.asarray(x), cuts, axis=axis))
    return [lin_take(x, part) for part in np.split(lin_index(x), cuts, axis=axis)]
