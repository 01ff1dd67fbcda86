"""Property-based tests over the space of controllers users bring (hypothesis): random ReLU MLPs
of 1–24 inputs, 1–8 bits each, 2–32 actions, depth 1–6, widths to 256, and specs over them.

What is asserted for every drawn controller (not for one example network):

* distillation: the final boxes partition the grid; every proven cell decodes the LUT's action
  on onnxruntime at its centre and at seeded interior points; every resolved cell not left
  undecided holds replayed witnesses of two actions; the tables are byte-identical with one
  worker and with two (the merge is by slice order);
* a whole build (Yosys, Icarus, Verilator; no place and route): every FSM and RTL obligation
  proved, 0 co-simulation mismatches, proven cells agree with the network, and every hashed
  output byte-identical when the build is repeated;
* bad input: a spec broken in one field gives one line naming file and field, exit 2, and
  writes nothing.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import helper

from conftest import save_model, tensor
from mi_certify.generator.build.distill import DistillOptions, distill
from mi_certify.generator.core.lut import PROVEN
from mi_certify.generator.frontend.model import load_model
from mi_certify.generator.core.spec import load_spec

def slow(examples: int) -> settings:
    """Settings for tests whose examples take seconds: no deadline, fixed examples (derandomized:
    the same draws on every machine and run), no example database written into the tree."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def controllers(draw, max_inputs=24, max_address_bits=12, max_actions=32, max_depth=6, max_width=256):
    """(bits per input, number of actions, layer widths, seed): a controller's shape."""
    n = draw(st.integers(1, min(max_inputs, max_address_bits)))
    budget = max_address_bits
    bits = [1] * n
    for i in draw(st.lists(st.integers(0, n - 1), max_size=budget - n)):
        bits[i] = min(8, bits[i] + 1)
    actions = draw(st.integers(2, max_actions))
    widths = draw(st.lists(st.sampled_from([1, 2, 3, 8, 16, 32, 64, 256]), min_size=1, max_size=max_depth))
    return bits, actions, widths, draw(st.integers(0, 2**31 - 1))


def make_controller(tmp: Path, bits, actions, widths, seed, confidence=None, prefix="ctl") -> tuple[Path, Path]:
    """A random ReLU MLP (Gemm + Relu layers, He-scaled weights) and its sla.yaml."""
    rng = np.random.default_rng(seed)
    n = len(bits)
    nodes, inits, prev, size = [], [], "in", n
    for k, w in enumerate(widths + [actions]):
        W = rng.normal(0, np.sqrt(2.0 / size), (w, size))
        b = rng.normal(0, 0.3, w)
        out = "y" if k == len(widths) else f"h{k}"
        nodes.append(helper.make_node("Gemm", [prev, f"W{k}", f"b{k}"], [out], transB=1))
        inits += [(f"W{k}", W), (f"b{k}", b)]
        if k < len(widths):
            nodes.append(helper.make_node("Relu", [out], [f"r{k}"]))
            out = f"r{k}"
        prev, size = out, w
    model = save_model(tmp, prefix, nodes, [tensor("in", [1, n])], [tensor("y", [1, actions])], inits=inits)
    spec = {"schema": "mi-certify/v1", "controller": {"name": prefix, "decode": "argmax"},
            "inputs": [{"name": f"x{i}", "min": -1.0, "max": 1.0, "bits": b} for i, b in enumerate(bits)],
            "actions": [{"name": f"a{j}", "conservative": j == 0} for j in range(actions)],
            "fsm": {"hysteresis": 2, "cooldown": 1, "violations_to_fallback": 2, "recovery": 2}}
    if confidence is not None:
        spec["confidence"] = {"kind": "softmax", "threshold": confidence}
    sla = tmp / f"{prefix}.yaml"
    sla.write_text(yaml.safe_dump(spec, sort_keys=False))
    return model, sla


def _tables(res) -> bytes:
    buf = io.BytesIO()
    np.save(buf, res.boxes)
    np.save(buf, res.witnesses)
    return buf.getvalue()


@slow(10)
@given(shape=controllers(max_address_bits=10, max_width=32, max_depth=3),
       confidence=st.sampled_from([None, 0.4]))
def test_distillation_is_sound_and_deterministic_for_any_controller(tmp_path_factory, shape, confidence):
    bits, actions, widths, seed = shape
    tmp = tmp_path_factory.mktemp("space")
    model_path, sla = make_controller(tmp, bits, actions, widths, seed, confidence)
    spec, model = load_spec(sla), load_model(model_path)
    # a small bisection budget: the invariants hold for any budget, and undecided cells cost it all
    res = distill(spec, model, DistillOptions(workers=1, cell_boxes=16))
    n = 1 << spec.address_bits
    assert res.lut.n_cells == n and set(res.lut.status.tolist()) <= {"proven", "resolved"}
    covered = int(np.prod(res.boxes["level_hi"].astype(int) - res.boxes["level_lo"].astype(int) + 1, axis=1).sum())
    assert covered == n  # with lut_of_boxes' exact cover check: a partition
    # proven cells: onnxruntime decodes the LUT's action at the centre and two interior points
    proven = np.nonzero(res.lut.status == PROVEN)[0]
    if proven.size:
        rng = np.random.default_rng(0)
        edges = [np.linspace(-1.0, 1.0, (1 << b) + 1) for b in bits]
        levels = np.stack([(proven >> sum(bits[i + 1:])) & ((1 << b) - 1) for i, b in enumerate(bits)], axis=1)
        lo = np.stack([edges[i][levels[:, i]] for i in range(len(bits))], axis=1)
        hi = np.stack([edges[i][levels[:, i] + 1] for i in range(len(bits))], axis=1)
        for t in (np.full(lo.shape, 0.5), rng.uniform(0.05, 0.95, lo.shape), rng.uniform(0.05, 0.95, lo.shape)):
            y = model.evaluate_onnxruntime((lo + (hi - lo) * t).astype(np.float32).astype(np.float64))
            margin = y[np.arange(len(y)), res.lut.tokens[proven]] - y.max(axis=1)
            assert np.all(margin >= -1e-4), "a proven cell decodes another action on onnxruntime"
    # resolved cells that are not undecided hold witnesses of two actions
    for r in res.resolved(spec):
        assert r["undecided"] or len(set(r["actions"])) >= 2
    again = distill(spec, model, DistillOptions(workers=2, cell_boxes=16))
    assert _tables(again) == _tables(res)
    assert np.array_equal(again.lut.tokens, res.lut.tokens)


@slow(2)
@given(shape=controllers(max_inputs=12, max_address_bits=8, max_actions=6, max_depth=2, max_width=16))
def test_a_whole_build_proves_and_repeats_byte_for_byte(tmp_path_factory, shape):
    bits, actions, widths, seed = shape
    tmp = tmp_path_factory.mktemp("build")
    model_path, sla = make_controller(tmp, bits, actions, widths, seed)
    outs = []
    for k in range(2):
        out = tmp / f"out{k}"
        proc = subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "build", str(model_path), "--sla",
                               str(sla), "--out", str(out), "--skip-synth", "--verify-timeout", "20"],
                              capture_output=True, text=True, timeout=1200)
        assert "Traceback" not in proc.stderr + proc.stdout
        summary = json.loads((out / "summary.json").read_text())
        assert summary["cosim"]["mismatches"] == 0, summary["cosim"]
        for group in ("fsm_proofs", "rtl_proofs"):
            assert summary[group] and all(v == "proved" for v in summary[group].values()), (group, summary[group])
        lut = summary["stages"]["lut"]
        assert lut["fidelity"]["proven_agree"] == lut["fidelity"]["proven_points"]
        outs.append(out)
    manifest = json.loads((outs[0] / "manifest.json").read_text())
    # the report, the obligations and the heatmaps are hashed (and so compared) too
    assert {"report.html", "report.md", "obligations.json"} <= set(manifest["files"])
    if len(bits) >= 2:   # a heatmap per pair of inputs
        assert any(rel.startswith("heatmaps/heatmap_") and rel.endswith(".png") for rel in manifest["files"])
    assert (outs[0] / "manifest.json").read_bytes() == (outs[1] / "manifest.json").read_bytes()
    differ = [rel for rel in manifest["files"] if (outs[0] / rel).read_bytes() != (outs[1] / rel).read_bytes()]
    assert differ == [] and len(manifest["files"]) > 15


BREAKS = [  # (field, how sla.yaml is broken, what the one line must name)
    ("inputs[0].bits", lambda s: s["inputs"][0].update(bits=0), "inputs[0].bits"),
    ("inputs[0].bits", lambda s: s["inputs"][0].update(bits=9), "inputs[0].bits"),
    ("inputs[0].max", lambda s: s["inputs"][0].update(max=-1.0), "inputs[0]"),
    ("actions", lambda s: s["actions"][0].update(conservative=False), "conservative"),
    ("inputs", lambda s: s["inputs"].append(dict(s["inputs"][0], name="extra")), "input"),
    ("actions", lambda s: s["actions"].pop(), "action"),
    ("fsm.hysteresis", lambda s: s["fsm"].update(hysteresis=0), "fsm.hysteresis"),
]


@slow(10)
@given(shape=controllers(max_inputs=12, max_address_bits=12, max_actions=8, max_depth=2, max_width=8),
       which=st.integers(0, len(BREAKS) - 1))
def test_a_spec_broken_in_one_field_gives_one_line_and_exit_2(tmp_path_factory, shape, which):
    bits, actions, widths, seed = shape
    tmp = tmp_path_factory.mktemp("bad")
    model_path, sla = make_controller(tmp, bits, actions, widths, seed)
    raw = yaml.safe_load(sla.read_text())
    _, breaks, named = BREAKS[which]
    breaks(raw)
    sla.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = tmp / "out"
    proc = subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "build", str(model_path), "--sla",
                           str(sla), "--out", str(out)], capture_output=True, text=True, timeout=300)
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert str(sla) in err[0] and named in err[0], err[0]
    assert not out.exists() and not list(tmp.glob(".out*"))


def test_the_estimate_refuses_what_does_not_fit_before_writing_anything(tmp_path):
    """24 address bits with 1 GiB 'available': one line naming the spec and the bits, exit 2."""
    model_path, sla = make_controller(tmp_path, [8, 8, 4, 2, 2], 4, [16, 16], 1)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "build", str(model_path), "--sla",
                           str(sla), "--out", str(out)], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "MI_CERTIFY_MEMORY_BYTES": str(2**30)})
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert err[0].startswith(f"error: {sla}: inputs[*].bits: a 24-bit LUT (16,777,216 cells) needs an estimated ")
    assert "1.0 GiB are available" in err[0] and not out.exists()


@pytest.mark.parametrize("bits, actions, widths", [
    ([1] * 24, 2, [8]),                      # 24 inputs, 1 bit each
    ([8, 8, 4, 2, 2], 32, [256, 256]),       # the spec's full 24 bits' worth of inputs, 32 actions, width 256
    ([2] * 6, 3, [16, 16, 16, 16, 16, 16]),  # depth 6
])
def test_the_estimate_is_linear_in_cells_for_any_shape(tmp_path, bits, actions, widths):
    from mi_certify.generator.build.distill import BASE_BYTES, BYTES_PER_CELL, estimate
    model_path, sla = make_controller(tmp_path, bits, actions, widths, 3)
    plan = estimate(load_spec(sla), load_model(model_path).ir)
    assert plan["cells"] == 1 << sum(bits)
    assert plan["memory_bytes"] == BASE_BYTES + BYTES_PER_CELL * plan["cells"]
    assert plan["time_class"] in ("under a minute", "minutes", "tens of minutes", "hours")


def test_a_coverage_threshold_the_cycles_cannot_reach_is_refused_before_the_build(tmp_path):
    """16 address bits, 10,000 cycles, lut_cells 0.5: 32,768 cells cannot be addressed; one line, exit 2."""
    model_path, sla = make_controller(tmp_path, [4, 4, 4, 4], 3, [8], 5)
    raw = yaml.safe_load(sla.read_text())
    raw["cosim"] = {"cycles": 10000, "coverage": {"lut_cells": 0.5}}
    sla.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "build", str(model_path), "--sla",
                           str(sla), "--out", str(out)], capture_output=True, text=True, timeout=300)
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(err) == 1 and not out.exists(), proc.stderr
    assert err[0] == (f"error: {sla}: cosim.coverage.lut_cells: 0.5 of the 65,536 LUT cells cannot be addressed by "
                      "10,000 co-simulation cycles (one cell a cycle): raise cosim.cycles (or --cosim-cycles) to "
                      "32,768 or lower the threshold")
