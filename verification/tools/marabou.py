"""Marabou queries built from our IR with MarabouCore (never Marabou's ONNX parsers).

Each call runs in a child process (``python -m mi_certify.verification.tools.marabou``)
with a wall-clock timeout: maraboupy 2.0 can leave stdout redirected for the rest of
a process after an early UNSAT, and a solver crash must not take the build down.

Encoding (Katz et al., "The Marabou Framework for Verification and Analysis of Deep
Neural Networks", CAV 2019): one variable per input, per affine output and per ReLU
output; for each affine row ``sum_k W_k[r] x_src - y_r = -b_r`` (sources are distinct
by construction, so no equation repeats a variable: Marabou #669); ``addReluConstraint``
per ReLU; the box on the inputs, sound bounds from :mod:`bounds` on the other
variables; one ``LE`` equation per row of ``C y <= d``.

Answers per box: ``"unsat"``, ``"sat"`` with the input assignment, or ``"unknown"``
(timeout, error, crash) with a reason. The caller replays every witness.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mi_certify.generator.core.ir import AffineNode, ControllerIR, InputNode

from mi_certify.verification.tools.registry import run


@dataclass(frozen=True)
class MarabouAnswer:
    """One box's answer: ``status`` sat/unsat/unknown, input witness for sat, reason."""

    status: str
    x: np.ndarray | None = None
    reason: str = ""


def marabou_version() -> str:
    try:
        from importlib import metadata
        return metadata.version("maraboupy")
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return "not installed"


def _pack(ir: ControllerIR, boxes, node_bounds, C, d) -> dict:
    arrays: dict[str, np.ndarray] = {}
    nodes = []
    for i, n in enumerate(ir.nodes):
        if isinstance(n, InputNode):
            nodes.append({"kind": "input", "size": n.size})
        elif isinstance(n, AffineNode):
            terms = []
            for k, (src, w) in enumerate(n.terms):
                arrays[f"w{i}_{k}"] = w
                terms.append(src)
            arrays[f"b{i}"] = n.bias
            nodes.append({"kind": "affine", "size": n.size, "terms": terms})
        else:
            nodes.append({"kind": "relu", "size": n.size, "src": n.src})
    for b, (lo, hi) in enumerate(boxes):
        arrays[f"lo{b}"], arrays[f"hi{b}"] = lo, hi
        if node_bounds is not None and node_bounds[b] is not None:
            for i in range(len(ir.nodes)):
                arrays[f"nl{b}_{i}"] = node_bounds[b].lower[i]
                arrays[f"nu{b}_{i}"] = node_bounds[b].upper[i]
    arrays["C"], arrays["d"] = C, d
    return {"nodes": nodes, "outputs": list(ir.outputs), "n_boxes": len(boxes), "arrays": arrays}


def _child_env() -> dict:
    """The solver process's environment: this one with a single OpenBLAS thread."""
    env = dict(os.environ)
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def solve_boxes(ir: ControllerIR, boxes: list[tuple[np.ndarray, np.ndarray]], C: np.ndarray, d: np.ndarray,
                timeout: float, node_bounds=None, per_box_timeout: float | None = None) -> list[MarabouAnswer]:
    """Decide ``exists x in box: C y(x) <= d`` for each box, in one child process.

    Args:
        boxes: list of (lo, hi) input boxes, each non-empty.
        timeout: wall-clock seconds for all boxes together, the child's start included (it is
            killed one second after); boxes not reached are unknown.
        per_box_timeout: Marabou's own timeout per box (default: whatever time is left).
        node_bounds: optional per-box NodeBounds (sound) to tighten Marabou's variables.
    Returns:
        one MarabouAnswer per box, in order.
    """
    if not boxes:
        return []
    packed = _pack(ir, boxes, node_bounds, C, d)
    # (Marabou's statically linked OpenBLAS is one kernel; its thread count would follow the
    # machine's cores and change the order of its sums, so it gets one thread)
    with tempfile.TemporaryDirectory(prefix="mi-certify-marabou-") as tmp:
        job = Path(tmp) / "job.npz"
        meta = {k: v for k, v in packed.items() if k != "arrays"}
        meta["deadline"] = time.time() + timeout
        meta["per_box"] = per_box_timeout
        np.savez(job, meta=np.array(json.dumps(meta)), **packed["arrays"])
        out = Path(tmp) / "answers.jsonl"
        try:
            proc = run([sys.executable, "-m", "mi_certify.verification.tools.marabou", str(job), str(out)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=max(0.0, timeout) + 1.0, cwd=tmp,
                       env=_child_env())
            err = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] if proc.returncode else []
        except subprocess.TimeoutExpired:
            err = [f"wall-clock timeout after {timeout:.1f} s"]
        answers: list[MarabouAnswer] = []
        if out.exists():
            for line in out.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:  # the last line of a child killed while writing it
                    break
                x = np.array(rec["x"]) if rec.get("x") is not None else None
                answers.append(MarabouAnswer(rec["status"], x, rec.get("reason", "")))
    reason = "; ".join(err) or "not reached before the deadline"
    while len(answers) < len(boxes):
        answers.append(MarabouAnswer("unknown", None, reason))
    return answers


def _child(job_path: str, out_path: str) -> int:
    """Child process body: build and solve one InputQuery per box, append JSON lines."""
    data = np.load(job_path)
    meta = json.loads(str(data["meta"]))
    from maraboupy import MarabouCore

    nodes = meta["nodes"]
    offsets, total = [], 0
    for n in nodes:
        offsets.append(total)
        total += n["size"]
    C, d = data["C"], data["d"]
    out_off = [offsets[i] for i in meta["outputs"]]
    out_vars = [o + k for i, o in zip(meta["outputs"], out_off) for k in range(nodes[i]["size"])]
    with open(out_path, "a", encoding="utf-8") as fh:
        for b in range(meta["n_boxes"]):
            remaining = meta["deadline"] - time.time()
            if remaining <= 0.05:
                fh.write(json.dumps({"status": "unknown", "reason": "deadline reached"}) + "\n")
                continue
            ipq = MarabouCore.InputQuery()
            ipq.setNumberOfVariables(total)
            lo, hi = data[f"lo{b}"], data[f"hi{b}"]
            for j in range(nodes[0]["size"]):
                ipq.setLowerBound(j, float(lo[j]))
                ipq.setUpperBound(j, float(hi[j]))
                ipq.markInputVariable(j, j)  # lets Marabou build its network-level reasoner
            for k, v in enumerate(out_vars):
                ipq.markOutputVariable(v, k)
            have_bounds = f"nl{b}_0" in data.files
            for i, n in enumerate(nodes):
                base = offsets[i]
                if i > 0 and have_bounds:
                    nl, nu = data[f"nl{b}_{i}"], data[f"nu{b}_{i}"]
                    for k in range(n["size"]):
                        ipq.setLowerBound(base + k, float(nl[k]))
                        ipq.setUpperBound(base + k, float(nu[k]))
                if n["kind"] == "affine":
                    bias = data[f"b{i}"]
                    ws = [data[f"w{i}_{t}"] for t in range(len(n["terms"]))]
                    for r in range(n["size"]):
                        eq = MarabouCore.Equation()
                        for src, w in zip(n["terms"], ws):
                            for c in np.nonzero(w[r])[0]:
                                eq.addAddend(float(w[r, c]), offsets[src] + int(c))
                        eq.addAddend(-1.0, base + r)
                        eq.setScalar(-float(bias[r]))
                        ipq.addEquation(eq)
                elif n["kind"] == "relu":
                    for k in range(n["size"]):
                        MarabouCore.addReluConstraint(ipq, offsets[n["src"]] + k, base + k)
            for r in range(C.shape[0]):
                eq = MarabouCore.Equation(MarabouCore.Equation.LE)
                for j in np.nonzero(C[r])[0]:
                    eq.addAddend(float(C[r, j]), out_vars[int(j)])
                eq.setScalar(float(d[r]))
                ipq.addEquation(eq)
            opts = MarabouCore.Options()
            cap = meta.get("per_box") or remaining
            # whole seconds (at least 1; the parent kills the child one second after the deadline)
            opts._timeoutInSeconds = max(1, int(min(remaining, cap)))
            opts._verbosity = 0
            try:
                status, vals, _stats = MarabouCore.solve(ipq, opts, "")
            except Exception as exc:  # noqa: BLE001 - report any solver failure as unknown
                fh.write(json.dumps({"status": "unknown", "reason": f"marabou error: {exc}"}) + "\n")
                fh.flush()
                continue
            if status == "sat":
                x = [float(vals[j]) for j in range(nodes[0]["size"])]
                rec = {"status": "sat", "x": x}
            elif status == "unsat":
                rec = {"status": "unsat"}
            else:
                rec = {"status": "unknown", "reason": f"marabou: {status}"}
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
    return 0


if __name__ == "__main__":
    # keep the solver's own prints away from the parent's stdout
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.exit(_child(sys.argv[1], sys.argv[2]))
