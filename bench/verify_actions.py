"""Benchmark: `verify` wall time against the number of actions (issue 17, "more actions").

Makes seeded random ReLU MLPs (numpy weights -> ONNX with onnx.helper) and a matching
sla.yaml (one entry per action, a forbid, a require and an output property), runs
``mi-certify verify`` with small per-query timeouts and prints, per shape, the number of
queries, the wall time, the bound ``queries x (timeout + confirm-timeout)`` the
timeouts promise, and the verdicts. Usage:
``python bench/verify_actions.py [--timeout S] [--confirm-timeout S] [--shapes 5x32x8,...]``
(a shape is inputs x hidden... x actions).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_mlp(path: Path, sizes: list[int], seed: int = 0) -> Path:
    """A random ReLU MLP ``sizes[0] -> ... -> sizes[-1]`` (He-scaled weights) saved as ONNX."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, cur = [], [], "x"
    for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
        bias = (0.1 * rng.standard_normal(b)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"W{k}"), numpy_helper.from_array(bias, f"B{k}")]
        nodes += [helper.make_node("MatMul", [cur, f"W{k}"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", f"B{k}"], [f"a{k}"])]
        cur = f"a{k}"
        if k < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [cur], [f"r{k}"]))
            cur = f"r{k}"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, sizes[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, sizes[-1]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def make_sla(path: Path, n_inputs: int, n_actions: int, properties: str | None = None) -> Path:
    """An sla.yaml for the network: inputs in [0, 1] (bits so the address stays <= 24 bits)."""
    bits = max(1, min(8, 24 // n_inputs))
    ins = "\n".join(f"  - {{name: x{i}, min: 0, max: 1, bits: {bits}}}" for i in range(n_inputs))
    acts = "\n".join(f"  - {{name: a{j}, conservative: {'true' if j == 0 else 'false'}, "
                     f"sla: {{latency_ms: 50, accuracy_loss_pct: 0.0}}}}" for j in range(n_actions))
    if properties is None:
        properties = ("  - {id: P1, when: {x0: [0.9, 1]}, forbid: [a1]}\n"
                      "  - {id: P2, when: {x0: [0, 0.05]}, require: [a0, a1]}\n"
                      "  - {id: P3, when: {}, output: {a0: {max: 1000}}}\n")
    path.write_text("schema: mi-certify/v1\ncontroller: {name: bench, decode: argmax}\n"
                    f"inputs:\n{ins}\nactions:\n{acts}\n"
                    "fsm: {hysteresis: 1, cooldown: 0, violations_to_fallback: 1, recovery: 1}\n"
                    f"properties:\n{properties}")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--confirm-timeout", type=float, default=10.0)
    ap.add_argument("--shapes", default="5x32x4,5x32x8,5x32x16,5x32x32,24x256x256x256x256x256x256x32")
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("mi-certify"))
    print(f"{'shape':36s} {'queries':>7s} {'wall s':>8s} {'bound s':>8s}  verdicts")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            sizes = [int(s) for s in shape.split("x")]
            model = make_mlp(Path(tmp) / f"{shape}.onnx", sizes)
            sla = make_sla(Path(tmp) / f"{shape}.yaml", sizes[0], sizes[-1])
            out = Path(tmp) / f"{shape}.json"
            t0 = time.monotonic()
            subprocess.run([exe, "verify", str(model), "--sla", str(sla), "--timeout", str(args.timeout),
                            "--confirm-timeout", str(args.confirm_timeout), "--json", str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = time.monotonic() - t0
            res = json.loads(out.read_text()) if out.exists() else {"properties": [], "reachability": []}
            rs = res["properties"] + res["reachability"]
            n_q = 3 + sizes[-1]
            verdicts = {}
            for r in rs:
                verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
            print(f"{shape:36s} {n_q:7d} {wall:8.1f} {n_q * (args.timeout + args.confirm_timeout):8.0f}  "
                  f"{verdicts}", flush=True)


if __name__ == "__main__":
    main()
