"""The operator handlers: one small function per ONNX operator, registered by
``@onnx_handler("MatMul")`` (as hls4ml's ONNX converter does), and their lookup.

A handler is ``handler(imp, args, attrs) -> value | list of values``:

- ``imp``: the :class:`~mi_certify.generator.frontend.onnx.importer.Importer` reading the graph
  (``imp.node`` the ONNX node, ``imp.opset`` the default-domain opset, ``imp.fail(reason)`` the
  located ModelImportError to raise, ``imp.const``/``imp.input_name`` for constant inputs,
  ``imp.relu`` to add a ReLU, ``imp.notes`` for the import notes);
- ``args``: the node's inputs in order (:mod:`~mi_certify.generator.frontend.onnx.values`: numpy
  constants, ``Lin`` expressions; None for an omitted optional input);
- ``attrs``: the node's attributes, ``{name: onnx.helper.get_attribute_value}``;
- returns one value per node output (a single value for one output).

The handlers live in one module per operator family (``linear``, ``activation``, ``shape``,
``constant``, ``inference``, ``head``, ``ml``); the importer core imports each family module,
which registers its handlers. Operator semantics follow the ONNX operator specification
(onnx.ai/onnx/operators).
"""

from __future__ import annotations

from typing import Callable

#: The ONNX default domain under both its spellings (handlers register it as "").
DEFAULT_DOMAINS = ("", "ai.onnx")
#: The domain of skl2onnx's classic-ML operators.
ML_DOMAIN = "ai.onnx.ml"

Handler = Callable[..., object]

_HANDLERS: dict[tuple[str, str], Handler] = {}


def onnx_handler(*op_types: str, domain: str = "") -> Callable[[Handler], Handler]:
    """Decorator: register the function as the handler of ``op_types`` in ``domain`` ("" = the
    default ONNX domain, or :data:`ML_DOMAIN`). Raises ValueError when an operator already has one."""
    def register(fn: Handler) -> Handler:
        for op in op_types:
            if (domain, op) in _HANDLERS:
                raise ValueError(f"two handlers for operator {domain or 'ai.onnx'} {op}")
            _HANDLERS[(domain, op)] = fn
        return fn
    return register


def lookup(domain: str, op_type: str) -> Handler | None:
    """The handler of ``op_type`` in ``domain`` (either default-domain spelling), None if none is registered."""
    return _HANDLERS.get(("" if domain in DEFAULT_DOMAINS else domain, op_type))


def registered(domain: str = "") -> list[str]:
    """Sorted names of the operators of ``domain`` with a handler (so far: the importer core loads
    every family module)."""
    return sorted(op for d, op in _HANDLERS if d == domain)
