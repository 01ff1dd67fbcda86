"""Layers that differ between training and inference, imported in their inference form: Dropout
(the identity) and BatchNormalization (folded into an affine map). A model exported in training
mode is refused. Semantics: ONNX operator specification."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mi_certify.generator.frontend.onnx.registry import onnx_handler
from mi_certify.generator.frontend.onnx.values import is_lin, lin_add, lin_scale, shape_of

if TYPE_CHECKING:
    from mi_certify.generator.frontend.onnx.importer import Importer


@onnx_handler("Dropout")
def op_dropout(imp: Importer, a, attrs):
    """Inference: the identity (ONNX Dropout with training_mode false or absent)."""
    if len(a) > 2 and a[2] is not None and bool(np.asarray(imp.const(imp.input_name(2),
                                                                    "Dropout training_mode")).reshape(-1)[0]):
        raise imp.fail("Dropout in training mode is random; export the model for inference")
    return a[0]


@onnx_handler("BatchNormalization")
def op_batch_normalization(imp: Importer, a, attrs):
    """Inference form, folded: scale·(x − mean)/sqrt(var + epsilon) + B along axis 1."""
    if int(attrs.get("training_mode", 0)):
        raise imp.fail("BatchNormalization in training mode; export the model for inference")
    x = a[0]
    scale, bias, mean, var = (np.asarray(imp.const(imp.input_name(k), f"BatchNormalization input {k}"),
                                         dtype=np.float64).reshape(-1) for k in (1, 2, 3, 4))
    shape = shape_of(x)
    if len(shape) < 2 or not scale.size == bias.size == mean.size == var.size == shape[1]:
        raise imp.fail(f"BatchNormalization over {shape[1] if len(shape) > 1 else '?'} channels with "
                       f"parameters of {scale.size}")
    s = scale / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))
    per = (-1,) + (1,) * (len(shape) - 2)
    if not is_lin(x):
        return np.asarray(x) * s.reshape(per) + (bias - mean * s).reshape(per)
    return lin_add(lin_scale(x, s.reshape(per)), (bias - mean * s).reshape(per))
