"""Make examples/workload/convgemm.onnx: the workload whose best execution plan depends on the regime.

Deterministic: numpy.random.default_rng(0) draws every weight and the model carries no
timestamps, so two runs write byte-identical files (about 64 MB: generated, not shipped;
``make workload`` or this script makes it). Needs numpy and onnx only.

Network (float32, NCHW, opset 13, IR 8): input ``image`` [batch, 3, 64, 64] ->
3 x (Conv 3x3 pad 1 -> BatchNormalization -> Relu -> MaxPool 2x2) with 32, 64, 64 channels ->
Flatten (4,096) -> 3 x (MatMul -> Add -> Relu) with 2,048 units -> MatMul 10 -> ``logits``.
Why this shape (measured on the development VM, docs/training.md "A workload with regimes"):

- the convolutions are compute-bound and small: fp32 with graph fusion is fast, while
  onnxruntime's dynamically quantized ConvInteger is several times slower;
- the fully connected head holds 64 MiB of fp32 weights (twice the 32 MiB last-level cache), so
  at batch 1-2 it streams its weights from DRAM on every request; 8-bit weights (16 MiB) cut that
  traffic by 4: the quantized plan gains in the head what it loses in the convolutions, more so
  when another process takes memory bandwidth;
- both parts parallelise over the intra-op threads: two threads win on an idle machine, one
  thread wins when other processes keep a core busy.

The weights are random (He-normal), not trained: accuracy loss is top-1 disagreement with fp32.

Usage: python examples/workload/make_regime_workload.py [OUT.onnx]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_workload import conv_blocks  # noqa: E402  (the convolutional blocks of the convnet workload)

CHANNELS = (3, 24, 40, 64)
SIZE = 64
HEAD = (2048, 2048, 2048)
CLASSES = 10


def build(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def init(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array, dtype=np.float32), name))
        return name

    x = conv_blocks(rng, init, nodes, "image", CHANNELS)
    nodes.append(helper.make_node("Flatten", [x], ["features"], name="flatten", axis=1))
    x, width = "features", CHANNELS[-1] * (SIZE // 8) ** 2
    for j, units in enumerate(HEAD):
        w = rng.normal(0.0, np.sqrt(2.0 / width), size=(width, units))
        nodes.append(helper.make_node("MatMul", [x, init(f"fc{j}.weight", w)], [f"fc{j}.mm"], name=f"fc{j}"))
        nodes.append(helper.make_node("Add", [f"fc{j}.mm", init(f"fc{j}.bias", np.zeros(units))], [f"fc{j}.add"],
                                      name=f"fc{j}.add"))
        nodes.append(helper.make_node("Relu", [f"fc{j}.add"], [f"fc{j}"], name=f"fc{j}.relu"))
        x, width = f"fc{j}", units
    w = rng.normal(0.0, np.sqrt(2.0 / width), size=(width, CLASSES))
    nodes.append(helper.make_node("MatMul", [x, init("out.weight", w)], ["logits"], name="out"))
    graph = helper.make_graph(
        nodes, "workload_convgemm",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, CHANNELS[0], SIZE, SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="mi-certify",
                              doc_string="mi-certify regime workload: conv front end + 64 MiB GEMM head "
                                         "(make_regime_workload.py)")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).with_name("convgemm.onnx")
    onnx.save(build(), str(out))
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
