"""Constants and the constant-only shape arithmetic exporters emit: Constant, Shape, Gather
(of a constant), Cast (of a constant: numpy ``astype``; of a variable tensor: the identity, to a
float type only). Semantics: ONNX operator specification."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import numpy_helper

from mi_certify.generator.frontend.onnx.registry import onnx_handler
from mi_certify.generator.frontend.onnx.values import is_lin, shape_of

if TYPE_CHECKING:
    from mi_certify.generator.frontend.onnx.importer import Importer


@onnx_handler("Constant")
def op_constant(imp: Importer, a, attrs):
    if "value" in attrs:
        return numpy_helper.to_array(attrs["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise imp.fail(f"Constant with attributes {sorted(attrs)} is not supported")


@onnx_handler("Shape")
def op_shape(imp: Importer, a, attrs):
    shape = np.asarray(shape_of(a[0]), dtype=np.int64)
    start = int(attrs.get("start", 0))
    end = attrs.get("end")
    return shape[start:end] if end is not None else shape[start:]


@onnx_handler("Gather")
def op_gather(imp: Importer, a, attrs):
    if is_lin(a[0]):
        raise imp.fail("Gather on a variable tensor is not supported")
    return np.take(np.asarray(a[0]), np.asarray(a[1]), axis=int(attrs.get("axis", 0)))


@onnx_handler("Cast")
def op_cast(imp: Importer, a, attrs):
    if is_lin(a[0]):
        to = int(attrs["to"])
        if to not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
            raise imp.fail("Cast of a variable tensor to a non-float type is not supported")
        return a[0]
    return np.asarray(a[0]).astype(onnx.helper.tensor_dtype_to_np_dtype(int(attrs["to"])))
