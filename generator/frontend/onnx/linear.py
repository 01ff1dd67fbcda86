"""Affine operators: Add, Sub, Neg, Mul and Div by constants, MatMul, Gemm. They compose
expressions (:class:`~mi_certify.generator.frontend.onnx.values.Lin`) without creating IR nodes;
on constants they fold (numpy semantics, fixed-order float products). A product or quotient of
two variable tensors is refused (not piecewise linear). Semantics: ONNX operator specification."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mi_certify.generator.frontend.onnx.registry import onnx_handler
from mi_certify.generator.frontend.onnx.values import (is_lin, lin_add, lin_broadcast, lin_matmul, lin_scale,
                                                       lin_transpose, shape_of)

if TYPE_CHECKING:
    from mi_certify.generator.frontend.onnx.importer import Importer


@onnx_handler("Add")
def op_add(imp: Importer, a, attrs):
    return lin_add(a[0], a[1], 1.0)


@onnx_handler("Sub")
def op_sub(imp: Importer, a, attrs):
    return lin_add(a[0], a[1], -1.0)


@onnx_handler("Neg")
def op_neg(imp: Importer, a, attrs):
    x = a[0]
    return lin_scale(x, -1.0) if is_lin(x) else -x


@onnx_handler("Mul")
def op_mul(imp: Importer, a, attrs):
    x, y = a
    if is_lin(x) and is_lin(y):
        raise imp.fail("product of two variable tensors (x·y) is not piecewise linear")
    if not is_lin(x) and not is_lin(y):
        return np.multiply(x, y)
    lin, c = (x, y) if is_lin(x) else (y, x)
    shape = tuple(np.broadcast_shapes(lin.shape, np.shape(c)))
    return lin_scale(lin_broadcast(lin, shape), c)


@onnx_handler("Div")
def op_div(imp: Importer, a, attrs):
    """By a constant only (without zeros); integer constants divide truncating, as onnxruntime does."""
    x, y = a
    if is_lin(y):
        raise imp.fail("division by a variable tensor is not piecewise linear")
    c = np.asarray(y)
    if not is_lin(x):
        if np.issubdtype(np.asarray(x).dtype, np.integer) and np.issubdtype(c.dtype, np.integer):
            return np.trunc(np.asarray(x) / c).astype(np.asarray(x).dtype)
        return np.divide(x, c)
    if np.any(c == 0):
        raise imp.fail("division by a constant that contains zero")
    shape = tuple(np.broadcast_shapes(x.shape, c.shape))
    return lin_scale(lin_broadcast(x, shape), 1.0 / c.astype(np.float64))


@onnx_handler("MatMul")
def op_matmul(imp: Importer, a, attrs):
    return lin_matmul(a[0], a[1], imp.fail)


@onnx_handler("Gemm")
def op_gemm(imp: Importer, a, attrs):
    """alpha·A'·B' + beta·C with A' = A or Aᵀ (transA), B' = B or Bᵀ (transB); A and B of rank 2."""
    A, B = a[0], a[1]
    C = a[2] if len(a) > 2 else None
    alpha = float(attrs.get("alpha", 1.0))
    beta = float(attrs.get("beta", 1.0))
    for v, nm in ((A, "A"), (B, "B")):
        if len(shape_of(v)) != 2:
            raise imp.fail(f"Gemm operand {nm} has rank {len(shape_of(v))}, expected 2")
    if attrs.get("transA", 0):
        A = lin_transpose(A)
    if attrs.get("transB", 0):
        B = lin_transpose(B)
    y = lin_matmul(A, B, imp.fail)
    if alpha != 1.0:
        y = lin_scale(y, alpha) if is_lin(y) else alpha * y
    if C is not None:
        if is_lin(C):
            C = lin_scale(C, beta) if beta != 1.0 else C
        else:
            C = beta * np.asarray(C, dtype=np.float64)
        y = lin_add(y, C, 1.0)
    return y
