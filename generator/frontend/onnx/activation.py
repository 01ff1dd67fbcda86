"""Piecewise-linear activations: Relu, and the exporter idioms exact as ReLU combinations
(LeakyRelu, PRelu, Abs, Clip with constant bounds, Max, Min). Semantics: ONNX operator
specification; on constants, the numpy operation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mi_certify.generator.frontend.onnx.registry import onnx_handler
from mi_certify.generator.frontend.onnx.values import is_lin, lin_add, lin_broadcast, lin_scale

if TYPE_CHECKING:
    from mi_certify.generator.frontend.onnx.importer import Importer


@onnx_handler("Relu")
def op_relu(imp: Importer, a, attrs):
    x = a[0]
    return imp.relu(x) if is_lin(x) else np.maximum(x, 0)


def _leaky(imp: Importer, x, slope):
    """x where x >= 0, slope·x below: slope·x + (1 − slope)·relu(x) (any slope)."""
    slope = np.asarray(slope, dtype=np.float64)
    if not is_lin(x):
        return np.where(np.asarray(x) >= 0, x, slope * np.asarray(x))
    shape = tuple(np.broadcast_shapes(x.shape, slope.shape))
    x = lin_broadcast(x, shape)
    return lin_add(lin_scale(x, slope), lin_scale(imp.relu(x), 1.0 - slope))


@onnx_handler("LeakyRelu")
def op_leaky_relu(imp: Importer, a, attrs):
    return _leaky(imp, a[0], float(attrs.get("alpha", 0.01)))


@onnx_handler("PRelu")
def op_prelu(imp: Importer, a, attrs):
    return _leaky(imp, a[0], imp.const(imp.input_name(1), "PRelu slope"))


@onnx_handler("Abs")
def op_abs(imp: Importer, a, attrs):
    x = a[0]
    if not is_lin(x):
        return np.abs(x)
    return lin_add(lin_scale(imp.relu(x), 2.0), x, -1.0)        # 2·relu(x) − x


@onnx_handler("Clip")
def op_clip(imp: Importer, a, attrs):
    """lo + relu(x − lo), then hi − relu(hi − ·); bounds: inputs from opset 11, attributes before."""
    x = a[0]
    if imp.opset >= 11:
        lo = imp.const(imp.input_name(1), "Clip min") if len(a) > 1 and a[1] is not None else None
        hi = imp.const(imp.input_name(2), "Clip max") if len(a) > 2 and a[2] is not None else None
    else:
        lo, hi = attrs.get("min"), attrs.get("max")
    if not is_lin(x):
        return np.clip(x, lo, hi)
    # a bound at or beyond float32's largest value (what exporters write for "none") is no bound:
    # lo + relu(x − lo) would lose x to rounding there
    lo = None if lo is None or not abs(float(lo)) < 3.4e38 else float(lo)
    hi = None if hi is None or not abs(float(hi)) < 3.4e38 else float(hi)
    if lo is not None and hi is not None and float(lo) > float(hi):
        return lin_add(lin_scale(x, 0.0), float(hi))     # ONNX: min > max gives max everywhere
    y = x
    if lo is not None:                                                 # lo + relu(x − lo)
        y = lin_add(imp.relu(lin_add(y, float(lo), -1.0)), float(lo))
    if hi is not None:                                                 # hi − relu(hi − y)
        y = lin_add(float(hi), imp.relu(lin_add(float(hi), y, -1.0)), -1.0)
    return y


def _max2(imp: Importer, x, y, take_max: bool):
    """max(x, y) = y + relu(x − y), min(x, y) = x − relu(x − y)."""
    if not is_lin(x) and not is_lin(y):
        return np.maximum(x, y) if take_max else np.minimum(x, y)
    r = imp.relu(lin_add(x, y, -1.0))                            # one operand is variable: relu(x − y)
    return lin_add(y, r) if take_max else lin_add(x, r, -1.0)  # y + relu(x−y) | x − relu(x−y)


@onnx_handler("Max")
def op_max(imp: Importer, a, attrs):
    out = a[0]
    for v in a[1:]:
        out = _max2(imp, out, v, True)
    return out


@onnx_handler("Min")
def op_min(imp: Importer, a, attrs):
    out = a[0]
    for v in a[1:]:
        out = _max2(imp, out, v, False)
    return out
