"""Make examples/workload/convnet.onnx: the small image classifier the live loop runs.

Deterministic: numpy.random.default_rng(0) draws every weight; the model carries no
timestamps, so two runs write byte-identical files. Needs numpy and onnx only.

Network (float32, NCHW, opset 13, IR 8): input ``image`` [1, 3, 64, 64] →
3 × (Conv 3×3 pad 1 → BatchNormalization → Relu → MaxPool 2×2) with 16, 32, 64
channels → GlobalAveragePool → Flatten → Gemm 64 → 10 → ``logits`` [1, 10].
The weights are random (He-normal), not trained: the live loop measures accuracy
loss as top-1 disagreement with the fp32 model, which needs no labels. The
Conv → BatchNormalization → Relu chains are what onnxruntime's graph optimiser
fuses (the ``merge_conv`` action); the Conv and Gemm weights are what dynamic
quantization compresses (the ``int4`` action, see docs/runtime.md).

Usage: python examples/workload/make_workload.py [OUT.onnx]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CHANNELS = (3, 32, 64, 128)
CLASSES = 10
SIZE = 128


def conv_blocks(rng: np.random.Generator, init, nodes: list, x: str, channels: tuple[int, ...]) -> str:
    """Append ``len(channels) - 1`` blocks Conv 3x3 pad 1 -> BatchNormalization -> Relu -> MaxPool 2x2
    to ``nodes`` (He-normal weights, random batch-norm statistics from ``rng``, in this order);
    ``init(name, array)`` adds an initializer and returns its name. Returns the last output's name.
    Shared with make_regime_workload.py."""
    for i, (cin, cout) in enumerate(zip(channels[:-1], channels[1:])):
        w = rng.normal(0.0, np.sqrt(2.0 / (cin * 9)), size=(cout, cin, 3, 3))
        nodes.append(helper.make_node("Conv", [x, init(f"conv{i}.weight", w), init(f"conv{i}.bias", np.zeros(cout))],
                                      [f"conv{i}"], name=f"conv{i}", kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node(
            "BatchNormalization",
            [f"conv{i}", init(f"bn{i}.scale", rng.uniform(0.5, 1.5, cout)), init(f"bn{i}.bias", rng.normal(0, 0.1, cout)),
             init(f"bn{i}.mean", rng.normal(0, 0.1, cout)), init(f"bn{i}.var", rng.uniform(0.5, 1.5, cout))],
            [f"bn{i}"], name=f"bn{i}", epsilon=1e-5))
        nodes.append(helper.make_node("Relu", [f"bn{i}"], [f"relu{i}"], name=f"relu{i}"))
        nodes.append(helper.make_node("MaxPool", [f"relu{i}"], [f"pool{i}"], name=f"pool{i}", kernel_shape=[2, 2],
                                      strides=[2, 2]))
        x = f"pool{i}"
    return x


def build(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def init(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array, dtype=np.float32), name))
        return name

    x = conv_blocks(rng, init, nodes, "image", CHANNELS)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["features"], name="flatten", axis=1))
    w = rng.normal(0.0, np.sqrt(2.0 / CHANNELS[-1]), size=(CLASSES, CHANNELS[-1]))
    nodes.append(helper.make_node("Gemm", ["features", init("fc.weight", w), init("fc.bias", np.zeros(CLASSES))],
                                  ["logits"], name="fc", transB=1))
    graph = helper.make_graph(
        nodes, "workload_convnet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, CHANNELS[0], SIZE, SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="mi-certify",
                              doc_string="mi-certify live-loop workload: random-weight conv net (make_workload.py)")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).with_name("convnet.onnx")
    onnx.save(build(), str(out))
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
