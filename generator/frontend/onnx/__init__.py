"""The ONNX importer: graph walk and one small handler per operator, grouped by family.

- ``registry.py``: ``@onnx_handler("MatMul")`` registers a handler; ``lookup`` finds it.
- ``importer.py``: the core: inputs, output selection, the graph walk, checks, errors.
- ``values.py``: what a tensor holds during the walk (constant, ``Lin`` expression, ``Headed``
  output, ``Refused`` label) and the expression algebra.
- operator families: ``linear.py`` (Add, Sub, Neg, Mul, Div, MatMul, Gemm), ``activation.py``
  (Relu, LeakyRelu, PRelu, Abs, Clip, Max, Min), ``shape.py`` (Identity, Flatten, Reshape,
  Squeeze, Unsqueeze, Transpose, Concat, Split), ``constant.py`` (Constant, Shape, Gather, Cast),
  ``inference.py`` (Dropout, BatchNormalization), ``head.py`` (Softmax, LogSoftmax, Sigmoid and
  what a head's output may pass through), ``ml.py`` (ai.onnx.ml LinearClassifier,
  LinearRegressor, Normalizer).

To support an operator, add one decorated function to the family it belongs to::

    @onnx_handler("Neg")
    def op_neg(imp: Importer, a, attrs):
        x = a[0]
        return lin_scale(x, -1.0) if is_lin(x) else -x

(a new family is a new module here, imported once in ``importer.py``). The handler's contract is
in ``registry.py``; ``supported_ops()`` lists the operators, and with them the error message for
an unsupported one. The public entry is :mod:`mi_certify.generator.frontend.onnx_import`.

(``import onnx`` inside this package is the onnx library: imports are absolute.)
"""
