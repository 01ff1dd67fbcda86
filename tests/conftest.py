"""Shared fixtures: paths to the real inputs in ../shared and tiny ONNX builders."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
CASES = SHARED / "cases"
ANCHORS = SHARED / "anchors"
EXAMPLES = ROOT / "examples"
REFERENCE_MODEL = EXAMPLES / "meta_controller" / "controller.onnx"
REFERENCE_SLA = EXAMPLES / "meta_controller" / "sla.yaml"
ACAS_1_1 = ANCHORS / "acasxu" / "onnx" / "ACASXU_run2a_1_1_batch_2000.onnx"
CARTPOLE = ANCHORS / "rl_cartpole" / "onnx" / "cartpole.onnx"


def pytest_configure(config):
    if not SHARED.is_dir():
        raise pytest.UsageError(f"the shared inputs are missing: {SHARED}")


def save_model(tmp_path: Path, name: str, nodes, inputs, outputs, inits=(), opset: int = 13) -> Path:
    """Write a small ONNX model (IR 8) built with onnx.helper and return its path."""
    graph = helper.make_graph(nodes, name, inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v, dtype=np.float32), k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def tensor(name: str, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


@pytest.fixture(scope="session")
def reference_build(tmp_path_factory):
    """The reference controller built once per session with the CLI (the same command as `make certs`)."""
    out = tmp_path_factory.mktemp("ref") / "meta_controller"
    proc = subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "build", str(REFERENCE_MODEL), "--sla",
                           str(REFERENCE_SLA), "--out", str(out)], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    return out


def children(pid: int) -> list[int]:
    """Child processes of ``pid`` (started by any of its threads)."""
    import os
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def spawned_workers(pid: int) -> list[int]:
    """Worker processes of ``pid`` (verification/tools/workers.py; multiprocessing spawn's too)."""
    out = []
    for c in children(pid):
        try:
            with open(f"/proc/{c}/cmdline") as fh:
                cmd = fh.read()
                if "spawn_main" in cmd or "mi_certify.verification.tools.workers" in cmd:
                    out.append(c)
        except OSError:
            pass
    return out


def running(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
