"""skl2onnx's ``ai.onnx.ml`` operators: LinearRegressor (affine values) and LinearClassifier
(affine scores; its SOFTMAX / LOGISTIC post_transform is a monotone head, its class-label output
a :class:`~mi_certify.generator.frontend.onnx.values.Refused` tensor); Normalizer only after a
head (:mod:`~mi_certify.generator.frontend.onnx.head`). Semantics: ONNX-ML operator
specification (onnx.ai/onnx/operators, domain ai.onnx.ml)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx

from mi_certify.generator.frontend.onnx.registry import ML_DOMAIN, onnx_handler
from mi_certify.generator.frontend.onnx.values import (Headed, Lin, Refused, is_lin, lin_add, lin_matmul,
                                                       lin_reshape)

if TYPE_CHECKING:
    from mi_certify.generator.frontend.onnx.importer import Importer


def _linear_ml(imp: Importer, x, attrs, what: str) -> Lin:
    """X @ coefficients.T + intercepts (ai.onnx.ml LinearClassifier / LinearRegressor); X of shape
    (n_features,) or (1, n_features)."""
    if not is_lin(x):
        raise imp.fail(f"{what} of a constant input")
    coef = np.asarray(attrs.get("coefficients", []), dtype=np.float64)
    shape = x.shape
    n_feat = shape[-1] if shape else 1
    if len(shape) > 2 or (len(shape) == 2 and shape[0] != 1) or coef.size % max(n_feat, 1):
        raise imp.fail(f"{what} input of shape {shape} with {coef.size} coefficients")
    k = coef.size // n_feat
    icpt = np.asarray(attrs.get("intercepts", np.zeros(k)), dtype=np.float64)
    if icpt.size != k:
        raise imp.fail(f"{what} has {k} coefficient rows and {icpt.size} intercepts")
    return lin_add(lin_matmul(lin_reshape(x, (1, n_feat)), coef.reshape(k, n_feat).T, imp.fail), icpt.reshape(1, k))


def _post_transform(attrs) -> str:
    post = attrs.get("post_transform", b"NONE")
    return post.decode() if isinstance(post, bytes) else str(post)


@onnx_handler("LinearRegressor", domain=ML_DOMAIN)
def op_linear_regressor(imp: Importer, a, attrs):
    post = _post_transform(attrs)
    if post != "NONE":
        raise imp.fail(f"LinearRegressor post_transform {post}: only NONE (the values) is exact")
    return _linear_ml(imp, a[0], attrs, "LinearRegressor")


@onnx_handler("LinearClassifier", domain=ML_DOMAIN)
def op_linear_classifier(imp: Importer, a, attrs):
    """[class label (Refused), scores]; with post_transform SOFTMAX or LOGISTIC the scores are a head
    whose logits onnxruntime reads from a copy of the node with post_transform NONE (``extra_nodes``)."""
    post = _post_transform(attrs)
    labels = attrs.get("classlabels_ints", attrs.get("classlabels_strings", []))
    scores = _linear_ml(imp, a[0], attrs, "LinearClassifier")
    k = scores.numel
    if k != len(labels):
        raise imp.fail(f"LinearClassifier with {k} score row(s) for {len(labels)} classes (onnxruntime's "
                       "one-row binary form) is not supported; export with skl2onnx (it writes one row per class)")
    label = Refused("the class label of a LinearClassifier is not a controller output")
    imp.notes.append(f"{imp.node_desc}: scores X·Wᵀ + b of {k} classes {list(labels)} (actions in this "
                     f"order), post_transform {post}")
    if post == "NONE":
        return [label, scores]
    if post not in ("SOFTMAX", "LOGISTIC"):
        raise imp.fail(f"LinearClassifier post_transform {post} is not imported (not a strictly monotone head "
                       "of the scores); export with post_transform NONE, SOFTMAX or LOGISTIC")
    node = imp.node
    out = node.output[1] if len(node.output) > 1 and node.output[1] else "scores"
    raw = onnx.helper.make_node("LinearClassifier", list(node.input), [out + "__mi_label", out + "__mi_logits"],
                                domain=ML_DOMAIN, name=(node.name or "LinearClassifier") + "__mi_logits")
    raw.attribute.extend(a for a in node.attribute if a.name != "post_transform")
    raw.attribute.append(onnx.helper.make_attribute("post_transform", "NONE"))
    return [label, Headed("softmax" if post == "SOFTMAX" else "sigmoid", scores, imp.node_desc,
                          ((out + "__mi_logits", 1),), (raw.SerializeToString(),))]


@onnx_handler("Normalizer", domain=ML_DOMAIN)
def op_normalizer(imp: Importer, a, attrs):
    raise imp.fail("Normalizer of the scores is not piecewise linear (only after a Softmax/Sigmoid head, "
                   "where it keeps the order)")
