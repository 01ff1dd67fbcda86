"""mi-certify profile / train: measured profile -> labels -> MLP -> ONNX (docs/training.md)."""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings, strategies as st

from conftest import EXAMPLES, REFERENCE_SLA
from mi_certify.generator.frontend.onnx_import import import_onnx
from mi_certify.generator.core.spec import load_spec
from mi_certify.generator.frontend.train import (TrainError, TrainOptions, guard_boxes, label_rows, read_profile,
                                        train_controller)
from mi_certify.runtime.engine import DEFAULT_PLANS
from mi_certify.runtime.profile import REFERENCE_INPUTS, ProfileConfig, profile, profile_columns

WORKLOAD = EXAMPLES / "workload" / "convnet.onnx"
PROFILE = EXAMPLES / "meta_controller" / "profile.csv"
ACTIONS = ["keep", "merge_conv", "int4", "offload_cpu"]
INPUTS = [i[0] for i in REFERENCE_INPUTS]
UNIFORM = {"cache_chase_ns": "uniform", "mem_bw_avail_gbs": "uniform", "free_sram_kb": "uniform",
           "temperature_c": "uniform"}


def cli(*args):
    return subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def spec():
    return load_spec(REFERENCE_SLA)


# --- profile ------------------------------------------------------------------------------

def test_tiny_profile_measures_every_action_under_each_condition(tmp_path):
    out = tmp_path / "p.csv"
    cfg = ProfileConfig(samples=3, load_levels=(0, 1), batch_sizes=(1, 2), threads=(1,), input_sizes=(32,),
                        repeats=2, settle_s=0.1, seed=4)
    meta = profile(WORKLOAD, out, ACTIONS, DEFAULT_PLANS, overrides=UNIFORM, config=cfg, command="test")
    with open(out, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == profile_columns(INPUTS, ACTIONS) == meta["columns"]
    assert len(rows) == 4 and not (tmp_path / "p.csv.partial").exists()
    for r in rows[1:]:
        d = dict(zip(rows[0], r))
        assert d["load_procs"] in ("0", "1") and d["batch"] in ("1", "2") and d["input_size"] == "32"
        assert sorted(d["order"].split("-")) == sorted(ACTIONS)  # every action ran, in a per-sample order
        assert 0.0 <= float(d["compute_util"]) <= 1.0 and 20.0 <= float(d["temperature_c"]) <= 110.0
        for a in ACTIONS:
            assert 0.0 < float(d[f"latency_ms.{a}"]) < 10_000
            assert float(d[f"accuracy_loss_pct.{a}"]) in (0.0, 25.0, 50.0, 75.0, 100.0)
        assert float(d["accuracy_loss_pct.keep"]) == 0.0  # keep is the fp32 reference itself
    side = json.loads((tmp_path / "p.json").read_text())
    assert side["command"] == "test" and side["samples"] == 3 and side["machine"]["cpus"] >= 1
    kinds = {i["name"]: i["kind"] for i in side["inputs"]}
    assert kinds["compute_util"].startswith("measured") and kinds["temperature_c"].startswith("assumed: drawn")
    assert side["plans"]["offload_cpu"] == DEFAULT_PLANS["offload_cpu"].describe()


def test_profile_draws_load_kinds_and_spreads_rounds(tmp_path):
    """Background loads of each kind: the column names the kind of every loaded sample, none for load 0;
    with rounds the row still holds one median per action."""
    out = tmp_path / "p.csv"
    cfg = ProfileConfig(samples=6, load_levels=(0, 1), load_kinds=("cpu", "stream", "thrash"), batch_sizes=(1,),
                        threads=(1,), input_sizes=(32,), repeats=1, rounds=2, settle_s=0.05, seed=2)
    profile(WORKLOAD, out, ACTIONS, DEFAULT_PLANS, overrides=UNIFORM, config=cfg, command="test")
    with open(out, newline="") as fh:
        table = list(csv.reader(fh))
    rows = [dict(zip(table[0], x)) for x in table[1:]]
    assert len(rows) == 6
    for d in rows:
        assert (d["load_kind"] == "") == (d["load_procs"] == "0")
        assert d["load_kind"] in ("", "cpu", "stream", "thrash")
        assert all(float(d[f"latency_ms.{a}"]) > 0 for a in ACTIONS)
    assert {d["load_kind"] for d in rows if d["load_procs"] == "1"}, "seed 2 loads some samples"
    for bad, msg in ((dict(load_kinds=("gpu",)), "load kinds: unknown kind 'gpu'"), (dict(load_kinds=()), "give at least one"),
                     (dict(rounds=0), "rounds must be")):
        with pytest.raises(ValueError, match=msg):
            ProfileConfig(**bad).check()


def test_background_load_kinds_run_until_stopped():
    from mi_certify.runtime.engine import LOAD_KINDS, start_background_load, stop_background_load
    procs = [p for k in LOAD_KINDS for p in start_background_load(1, k)]
    try:
        time.sleep(0.5)
        assert len(procs) == 3 and all(p.poll() is None for p in procs)   # alive: none raised at start
    finally:
        stop_background_load(procs)
    assert all(p.returncode is not None for p in procs)
    with pytest.raises(ValueError, match="unknown background load kind 'gpu'"):
        start_background_load(1, "gpu")


def test_cli_profile_prints_a_progress_line_per_sample_when_stderr_is_a_file(tmp_path):
    """Without a terminal (a log file, a pipe) there is no progress bar: one line per sample, with
    its condition, latencies, time so far and time left (it used to print every 20th sample only)."""
    import re
    out = tmp_path / "p.csv"
    proc = cli("profile", "--workload", WORKLOAD, "--out", out, "--samples", 3, "--load-levels", "0",
               "--batch-sizes", "1", "--threads", "1", "--input-sizes", "32", "--repeats", 1, "--settle", 0.05,
               *[f"--map={k}={v}" for k, v in UNIFORM.items()])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == f"profiling {WORKLOAD}: 3 samples × 4 actions × 1 rounds × 1 requests …"
    progress = [line for line in lines if line.startswith("sample ")]
    assert len(progress) == 3, proc.stderr
    for k, line in enumerate(progress, 1):
        assert re.fullmatch(rf"sample {k}/3 \(\d+ s, about \d+ s left\): load 0, batch 1, size 32, threads 1, "
                            r"compute_util=\S+; ms keep=\d+\.\d merge_conv=\d+\.\d int4=\d+\.\d "
                            r"offload_cpu=\d+\.\d", line), line
    assert progress[-1].startswith("sample 3/3 (") and ", about 0 s left)" in progress[-1]
    assert lines[-1].startswith(f"wrote {out} (3 rows, ") and len(out.read_text().splitlines()) == 4


def test_profile_refuses_bad_input_with_one_line(tmp_path):
    proc = cli("profile", "--workload", tmp_path / "missing.onnx", "--out", tmp_path / "p.csv")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "missing.onnx: no such file" in proc.stderr
    # free_sram_kb has no source on any CPU probe: the profile must say so, not record garbage
    proc = cli("profile", "--workload", WORKLOAD, "--out", tmp_path / "p.csv", "--samples", "1",
               *[f"--map={k}=uniform" for k in ("cache_chase_ns", "mem_bw_avail_gbs", "temperature_c")])
    assert proc.returncode == 2 and "input 'free_sram_kb' is unavailable" in proc.stderr
    assert "--map free_sram_kb=" in proc.stderr and not (tmp_path / "p.csv").exists()
    proc = cli("profile", "--workload", WORKLOAD, "--out", tmp_path / "p.csv", "--batch-sizes", "1,x")
    assert proc.returncode == 2 and "--batch-sizes '1,x'" in proc.stderr


# --- labels -------------------------------------------------------------------------------

def test_guard_boxes_widen_properties_to_their_quantization_cells(spec):
    boxes = {pid: (lo, hi, ok) for pid, lo, hi, ok in guard_boxes(spec)}
    assert set(boxes) == {"P1", "P2"}  # P3 bounds an output: no label constraint
    lo, hi, ok = boxes["P1"]
    assert (lo[4], hi[4]) == (87.5, 110.0) and ok == {0, 1, 3}  # 3-bit cells of [20, 110]: 95 lies in [87.5, 98.75)
    lo, hi, ok = boxes["P2"]
    assert (lo[0], hi[0]) == (0.0, 0.125) and ok == {0}  # 4-bit cells: 0.1 lies in [0.0625, 0.125)
    assert (lo[1:].tolist(), hi[1:].tolist()) == ([0, 0, 0, 20], [1024, 64, 1024, 110])


def test_label_rule_on_hand_made_rows(spec):
    x = np.tile([0.5, 0.5, 0.5, 512.0, 60.0], (8, 1))
    nan = np.nan
    lat = np.array([[45, 30, 20, 100],    # int4 fastest and within 30 ms -> int4
                    [45, 30, 31, 100],    # int4 over its 30 ms -> merge_conv
                    [45, 30, 30, 100],    # merge_conv and int4 tie -> conservative
                    [60, 41, 31, 121],    # nobody meets its SLA -> conservative
                    [45, 39, 20, 100],    # int4 fastest but loses 2 pp (> 1.5) -> merge_conv
                    [45, nan, 25, 100],   # merge_conv not measured -> fails; int4
                    [45, 30, 20, 100],    # same as row 0 but hot (P1 guard box): int4 forbidden -> merge_conv
                    [45, 30, 20, 100]],   # same but idle (P2 guard box): keep required -> keep
                   dtype=float)
    acc = np.zeros_like(lat)
    acc[4, 2] = 2.0
    x[6, 4] = 90.0   # inside [87.5, 110] although below P1's 95: the guard band
    x[7, 0] = 0.12   # inside [0, 0.125] although above P2's 0.1
    y, why = label_rows(x, lat, acc, spec)
    assert [ACTIONS[t] for t in y] == ["int4", "merge_conv", "keep", "keep", "merge_conv", "int4", "merge_conv",
                                       "keep"]
    assert why == {"least latency": 6, "tie": 1, "none meets its SLA": 1, "inside a property guard box": 2}
    near = np.array([[45, 30, 29, 100], [45, 30, 20, 100]], dtype=float)  # int4 29 vs merge_conv 30: a tie at 1.5 ms
    y, why = label_rows(x[:2], near, np.zeros_like(near), spec, tie_ms=1.5)
    assert [ACTIONS[t] for t in y] == ["keep", "int4"] and why["tie"] == 1


# --- train --------------------------------------------------------------------------------

def _fixed_csv(path, n=160, seed=7):
    """A small fixed profile: merge_conv wins when busy, int4 when the pointer chase is fast."""
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(profile_columns(INPUTS, ACTIONS))
        for i in range(n):
            x = [rng.random(), 1024 * rng.random(), 64 * rng.random(), 1024 * rng.random(), 20 + 90 * rng.random()]
            lat = [35.0, 25.0 if x[0] > 0.5 else 45.0, 20.0 if x[1] < 300 else 60.0, 80.0]
            w.writerow([i, 0, "", 1, 64, 1, "-".join(ACTIONS), *[f"{v:.6f}" for v in x], *[f"{v:.4f}" for v in lat],
                        0, 0, 0, 0])
    return path


def test_lut_fsm_report_on_hand_made_rows(spec):
    """The LUT-FSM's figures against the network and the labels (issue 33 item 3), by hand: three rows
    outside the guard boxes; the LUT differs from the network on rows 0 and 2, and on row 2 it picks
    merge_conv at 45 ms, above its 40 ms SLA."""
    from mi_certify.generator.frontend.train import HeldOutRows, lut_fsm_report
    x = np.array([[0.5, 500.0, 32.0, 512.0, 50.0]] * 3)
    lat = np.array([[10.0, 5.0, 8.0, 20.0], [10.0, 12.0, 9.0, 20.0], [10.0, 45.0, 25.0, 20.0]])
    acc = np.zeros((3, 4))
    y, _, cand = label_rows(x, lat, acc, spec, return_candidates=True)
    assert y.tolist() == [1, 2, 0]
    rows = HeldOutRows(x, y, lat, acc, cand, network=np.array([1, 2, 0]))
    r = lut_fsm_report(np.array([2, 2, 1]), rows, spec)
    assert r["rows"] == 3 and r["agree_with_network"] == 1 and r["accuracy"] == 0.3333
    assert r["cost_of_disagreement"] == {"rows_they_differ": 2, "rows_measured": 3, "lut_only_sla_misses": 1,
                                         "network_only_sla_misses": 0, "mean_ms": 12.667, "min_ms": 0.0,
                                         "max_ms": 35.0, "mean_where_they_differ_ms": 19.0}
    assert r["regret"] == {"rows": 2, "chosen_not_a_candidate": 1, "rows_without_candidate": 0, "mean_ms": 1.5,
                           "p95_ms": 3.0, "max_ms": 3.0}
    assert r["mean_regret_ms"] == 12.667 and r["network_mean_regret_ms"] == 0.0
    assert r["best_fixed_action"] == {"action": "keep", "mean_regret_ms": 2.0, "sla_missed_rows": 0}
    assert r["sla_met_share"] == 0.6667
    from mi_certify.generator.frontend.train import lut_fsm_line
    assert "does NOT beat it" in lut_fsm_line(r) and "2 rows differ" in lut_fsm_line(r)


def test_training_is_deterministic_and_the_onnx_decides_like_the_trainer(spec, tmp_path):
    data = read_profile(_fixed_csv(tmp_path / "fixed.csv"), spec)
    opts = TrainOptions(augment=80, max_iter=500)
    a = train_controller(data, spec, opts)
    b = train_controller(data, spec, opts)
    assert a.model_bytes == b.model_bytes and a.report == b.report
    model = onnx.load_from_string(a.model_bytes)
    onnx.checker.check_model(model, full_check=True)
    lo, hi = np.array([i.min for i in spec.inputs]), np.array([i.max for i in spec.inputs])
    xs = (lo + (hi - lo) * np.random.default_rng(3).random((3000, 5))).astype(np.float32)
    s = ort.InferenceSession(a.model_bytes, providers=["CPUExecutionProvider"])
    logits = np.concatenate([s.run(None, {"probes": x[None]})[0] for x in xs])
    sk = a.classifier.predict((xs.astype(np.float64) - lo) / (hi - lo))
    assert np.array_equal(logits.argmax(axis=1), sk)
    # the importer takes it and evaluates it like onnxruntime (physical units in, 4 logits out)
    ir = import_onnx_bytes(a.model_bytes, tmp_path)
    np.testing.assert_allclose(ir.evaluate(xs.astype(np.float64)), logits, rtol=1e-4, atol=1e-4)
    rep = a.report
    assert rep["profile"]["sha256"] == hashlib.sha256((tmp_path / "fixed.csv").read_bytes()).hexdigest()
    assert rep["model"]["seed"] == 0 and rep["model"]["layers"] == [5, 16, 16, 4]
    assert sum(rep["label_distribution"].values()) == 160 and rep["label_distribution"]["offload_cpu"] == 0
    # offload_cpu never wins: it gets keep's logit minus the margin, so it can never be decoded
    assert rep["model"]["absent_actions"] == ["offload_cpu"] and not np.any(logits.argmax(axis=1) == 3)
    np.testing.assert_allclose(logits[:, 0] - logits[:, 3], 16.0, atol=1e-3)
    h = rep["held_out"]
    assert h["accuracy"] >= 0.85 and np.sum(h["confusion_matrix"]["counts"]) == rep["split"]["held_out_rows"] == 40
    reg = h["regret"]
    assert set(reg) == {"rows", "chosen_not_a_candidate", "rows_without_candidate", "mean_ms", "p95_ms", "max_ms"}
    assert reg["rows"] + reg["chosen_not_a_candidate"] + reg["rows_without_candidate"] == 40
    assert reg["max_ms"] >= reg["p95_ms"] >= 0 and reg["max_ms"] >= reg["mean_ms"] >= 0
    # every held-out row's best action is known here (no SLA miss), and always-keep costs 10 ms when merge_conv wins
    assert h["regret_always_conservative"]["max_ms"] in (10.0, 15.0)
    # against fixed actions, on the same rows: the controller regrets less than any one action always
    fx = h["against_fixed_actions"]
    assert fx["rows"] == 40 and set(fx["fixed"]) == set(ACTIONS)
    regrets = {a: v["mean_regret_ms"] for a, v in fx["fixed"].items()}
    assert fx["best_fixed_action"] == min(regrets, key=regrets.get)
    assert fx["controller"]["mean_regret_ms"] < min(regrets.values())
    assert regrets["offload_cpu"] >= 45.0   # 80 ms against at most 35 ms on every row
    # permutation importance: the two inputs the latencies depend on are measurable, mem_bw_avail_gbs
    # (no influence on any label) is not
    pi = h["permutation_importance"]
    assert pi["rows"] == 40 and pi["base_accuracy"] == h["accuracy"]
    assert {"compute_util", "cache_chase_ns"} <= set(pi["measurable_inputs"])
    assert "mem_bw_avail_gbs" not in pi["measurable_inputs"]
    assert pi["inputs"]["compute_util"]["accuracy_drop_mean"] > 0.1
    aug = {r["property"]: r for r in rep["augmentation"]}
    assert aug["P1"]["rows"] == 80 and "int4" not in aug["P1"]["labels"]
    assert aug["P2"]["labels"] == {"keep": 80}
    c = train_controller(data, spec, TrainOptions(augment=80, max_iter=500, seed=1))
    assert c.model_bytes != a.model_bytes  # the seed matters (initial weights and split)


def import_onnx_bytes(data: bytes, tmp_path):
    p = tmp_path / "m.onnx"
    p.write_bytes(data)
    return import_onnx(p)


@pytest.mark.parametrize("edit, where", [
    (lambda rows: [rows[0][:-1]] + rows[1:], "no column 'accuracy_loss_pct.offload_cpu'"),
    (lambda rows: rows[:3] + [rows[3][:7] + ["x"] + rows[3][8:]] + rows[4:], "line 4, column 'compute_util': 'x' is not a number"),
    (lambda rows: rows[:2] + [rows[2][:-2]] + rows[3:], "line 3: 18 cells, the header has 20"),
    (lambda rows: rows[:2] + [rows[2][:12] + ["-3"] + rows[2][13:]] + rows[3:], "line 3, column 'latency_ms.keep': -3 is negative"),
    (lambda rows: [[("compute_util" if c == "batch" else c) for c in rows[0]]] + rows[1:],
     "line 1: duplicate column 'compute_util'"),
    (lambda rows: [], "empty file"),
])
def test_bad_csv_is_one_located_error_and_nothing_is_written(tmp_path, edit, where):
    src = _fixed_csv(tmp_path / "fixed.csv", n=10)
    with open(src, newline="") as fh:
        rows = list(csv.reader(fh))
    bad = tmp_path / "bad.csv"
    with open(bad, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(edit(rows))
    proc = cli("train", bad, "--sla", REFERENCE_SLA, "--out", tmp_path / "c.onnx")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and f"{bad}" in proc.stderr and where in proc.stderr, proc.stderr
    assert not (tmp_path / "c.onnx").exists() and not (tmp_path / "c.train.json").exists()


def test_rows_with_unreadable_or_out_of_envelope_inputs_are_dropped_and_counted(spec, tmp_path):
    src = _fixed_csv(tmp_path / "fixed.csv", n=12)
    text = src.read_text().splitlines()
    cells = text[2].split(",")
    cells[11] = ""          # temperature_c unavailable
    text[2] = ",".join(cells)
    cells = text[3].split(",")
    cells[11] = "150.0"     # above the 110 degC envelope: a probe fault at run time
    text[3] = ",".join(cells)
    src.write_text("\n".join(text) + "\n")
    data = read_profile(src, spec)
    assert len(data.x) == 10 and data.dropped == {"unavailable input": 1, "input outside the envelope": 1}
    with pytest.raises(TrainError, match="at least 4"):
        read_profile(_fixed_csv(tmp_path / "tiny.csv", n=3), spec)


# the shipped controller retrained byte for byte: tests/e2e/test_reproducibility.py (its "this machine" variant)


def test_a_profile_where_one_action_always_wins_is_refused(spec, tmp_path):
    src = _fixed_csv(tmp_path / "fixed.csv", n=20)
    rows = [r.split(",") for r in src.read_text().splitlines()]
    for r in rows[1:]:
        r[12] = "1.0000"  # keep always fastest: every label is keep, nothing to learn
    src.write_text("\n".join(",".join(r) for r in rows) + "\n")
    with pytest.raises(TrainError, match="every training row has the label keep"):
        train_controller(read_profile(src, spec), spec, TrainOptions(augment=10))


def test_profile_refuses_an_unknown_input_before_measuring(tmp_path):
    with pytest.raises(ValueError, match="unknown controller input 'fan'"):
        profile(WORKLOAD, tmp_path / "p.csv", ACTIONS, DEFAULT_PLANS, overrides={**UNIFORM, "fan": "uniform"})
    assert not list(tmp_path.iterdir())


def test_the_regime_workload_is_made_byte_for_byte_the_same_and_runs(tmp_path):
    """examples/workload/make_regime_workload.py: the model the shipped profile was measured on."""
    script = EXAMPLES / "workload" / "make_regime_workload.py"
    digests = []
    for k in range(2):
        out = tmp_path / f"m{k}.onnx"
        proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        digests.append(hashlib.sha256(out.read_bytes()).hexdigest())
    assert digests[0] == digests[1]
    m = onnx.load(str(tmp_path / "m0.onnx"))
    head = sum(int(np.prod(i.dims)) for i in m.graph.initializer if i.name.startswith("fc"))
    assert head * 4 == 64 * 2**20 + 3 * 2048 * 4   # 64 MiB of fp32 head weights (+ biases)
    s = ort.InferenceSession(str(tmp_path / "m0.onnx"), providers=["CPUExecutionProvider"])
    assert s.run(None, {"image": np.zeros((1, 3, 64, 64), np.float32)})[0].shape == (1, 10)


def _small_spec(tmp_path):
    """The reference sla.yaml with 9 address bits (512 cells), so distillation takes a second."""
    import re
    text = REFERENCE_SLA.read_text()
    for name, b in (("compute_util", 3), ("cache_chase_ns", 2), ("mem_bw_avail_gbs", 1), ("temperature_c", 2)):
        text = re.sub(rf"(name: {name},.*?bits: )\d", rf"\g<1>{b}", text)
    (tmp_path / "sla.yaml").write_text(text)
    return load_spec(tmp_path / "sla.yaml")


def test_certified_training_is_deterministic_and_proves_more_cells(tmp_path):
    """--certify cells (docs/training.md, "Certified training") on a small fixed profile: two runs give the same
    bytes; the LUT build distils has more proven cells and agrees better with the network than with points only;
    the option off leaves the report as it was (no certified-training fields)."""
    from mi_certify.generator.build.distill import DistillOptions, distill, fidelity
    from mi_certify.generator.cli.train import lut_preview
    from mi_certify.generator.core.lut import PROVEN
    from mi_certify.generator.frontend.model import load_model
    from mi_certify.generator.frontend.train import write_outputs

    spec = _small_spec(tmp_path)
    assert spec.address_bits == 9
    data = read_profile(_fixed_csv(tmp_path / "fixed.csv"), spec)
    plain = train_controller(data, spec, TrainOptions(augment=80, max_iter=500))
    assert "certified_training" not in plain.report and "certify" not in plain.report["options"]
    opts = TrainOptions(augment=80, max_iter=500, certify="cells", certify_iter=100)
    a = train_controller(data, spec, opts)
    b = train_controller(data, spec, opts)
    assert a.model_bytes == b.model_bytes and a.report == b.report
    ct = a.report["certified_training"]
    assert [s["epsilon"] for s in ct["stages"]] == [0.25, 0.5, 0.75, 1.0, 1.0] and ct["cells"] == 512
    last = ct["stages"][-1]
    assert last["cells_certify"] + last["cells_given_up"] == 512 and last["conflicting_faces"] == 0
    assert a.report["options"]["certify"] == "cells"
    figures = {}
    for name, res in (("plain", plain), ("cells", a)):
        write_outputs(res, tmp_path / f"{name}.onnx")
        model = load_model(tmp_path / f"{name}.onnx")
        lut = distill(spec, model, DistillOptions(resolve=spec.resolve, workers=1)).lut
        figures[name] = (int((lut.status == PROVEN).sum()), fidelity(spec, model, lut, n_points=20_000)[0]["agreement"])
    # measured: 263 -> 368 proven cells of 512, agreement 0.69 -> 0.82
    assert figures["plain"][0] < 300 and figures["cells"][0] >= 350
    assert figures["cells"][1] >= figures["plain"][1] + 0.08
    assert a.report["held_out"]["accuracy"] >= 0.8
    pre = lut_preview(tmp_path / "cells.onnx", spec)  # what `train --certify cells` prints: the same figures
    assert pre["proven"] == figures["cells"][0] and pre["cells"] == 512 and pre["points"] == 100_000


def test_cli_train_certify_prints_what_build_will_report(tmp_path):
    spec_dir = tmp_path / "s"
    spec_dir.mkdir()
    _small_spec(spec_dir)
    csv_path = _fixed_csv(tmp_path / "fixed.csv")
    # --no-verify: this network's P1 takes the verifier 30-50 s (56,000 boxes), a verdict that depends on the load
    r = cli("train", csv_path, "--sla", spec_dir / "sla.yaml", "--out", tmp_path / "c.onnx", "--augment", "80",
            "--max-iter", "500", "--certify", "cells", "--certify-iter", "100", "--no-verify")
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "build will report:" in out and "cells proven" in out
    rep = json.loads((tmp_path / "c.train.json").read_text())
    lp = rep["lut_preview"]
    assert lp["cells"] == 512 and lp["proven"] + lp["resolved"] == 512 and f"{lp['proven']} of 512 LUT cells" in out
    assert "LUT as build will distil it" in (tmp_path / "c.train.md").read_text()
    bad = cli("train", csv_path, "--sla", spec_dir / "sla.yaml", "--out", tmp_path / "d.onnx", "--certify-weight", "0")
    assert bad.returncode == 2 and "--certify-weight" in bad.stderr + bad.stdout


def test_property_rounds_retrain_at_the_falsifiers_counterexamples(tmp_path):
    """``--augment 0`` leaves the guard boxes of P1 and P2 without rows of their own: the seeded
    falsifiers find both violated. One round adds 64 rows in each counterexample's LUT cell, labelled
    with allowed actions only, and the retrained network decides an allowed action at both
    counterexamples. The same command gives the same bytes again."""
    from mi_certify.generator.frontend.model import load_model
    args = ["train", PROFILE, "--sla", REFERENCE_SLA, "--out", tmp_path / "c.onnx", "--augment", "0",
            "--property-rounds", "1", "--no-verify"]
    proc = cli(*args)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr
    assert "round 1: the falsifiers found P1, P2 violated" in text, text
    rep = json.loads((tmp_path / "c.train.json").read_text())
    pr = rep["property_rounds"]
    assert pr["rounds"] == 1 and pr["limit"] == 1 and pr["counterexamples"] == 2
    assert f"still falsified: {', '.join(pr['still_falsified']) or 'none'}" in text
    p1, p2 = rep["counterexample_rows"]
    assert (p1["property"], p2["property"]) == ("P1", "P2") and p1["rows"] == p2["rows"] == 64
    assert p2["labels"] == {"keep": 64}                                    # P2 requires keep
    assert "int4" not in p1["labels"] and sum(p1["labels"].values()) == 64  # P1 forbids int4
    assert 95 <= p1["x"][4] <= 110 and 0 <= p2["x"][0] <= 0.1              # inside the when boxes
    y = load_model(tmp_path / "c.onnx").ir.evaluate(np.array([p1["x"], p2["x"]]))
    assert int(y[0].argmax()) != 2 and int(y[1].argmax()) == 0
    assert "counterexample of P2 at" in (tmp_path / "c.train.md").read_text()
    args[5] = tmp_path / "d.onnx"
    assert cli(*args).returncode == 0
    assert (tmp_path / "d.onnx").read_bytes() == (tmp_path / "c.onnx").read_bytes()


_VARIANT_SCRIPT = """
import hashlib, sys
from mi_certify.generator.core.spec import load_spec
from mi_certify.generator.frontend.train import TrainOptions, read_profile, train_controller
spec = load_spec(sys.argv[1])
res = train_controller(read_profile(sys.argv[2], spec), spec,
                       TrainOptions(augment=80, max_iter=500, certify="cells", certify_iter=100))
print(hashlib.sha256(res.model_bytes).hexdigest())
"""


def test_certified_training_is_the_same_bytes_under_every_blas_and_simd_variant(tmp_path):
    """--certify cells keeps the trainer's guarantee (docs/training.md, "Same network on every machine"):
    the same ONNX bytes under the reproducibility test's OpenBLAS-kernel / SIMD / thread variants."""
    import os

    from test_reproducibility import VARIANTS

    spec_dir = tmp_path / "s"
    spec_dir.mkdir()
    _small_spec(spec_dir)
    csv_path = _fixed_csv(tmp_path / "fixed.csv")
    digests = {}
    for name, env_over in VARIANTS.items():
        env = {**os.environ, **env_over}
        r = subprocess.run([sys.executable, "-c", _VARIANT_SCRIPT, str(spec_dir / "sla.yaml"), str(csv_path)],
                           capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 0, r.stderr
        digests[name] = r.stdout.strip()
    assert len(set(digests.values())) == 1 and len(digests["this machine"]) == 64, digests


# --- train -> build over the space of profiles (issue 33) ----------------------------------

@st.composite
def _profiles(draw):
    """(inputs' bits, number of actions, rows, property draws, seed): a random profile and spec shape."""
    bits = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    actions = draw(st.integers(2, 4))
    rows = draw(st.integers(60, 160))
    forbid = draw(st.none() | st.tuples(st.floats(0.3, 0.8), st.integers(1, actions - 1)))
    require = draw(st.none() | st.floats(0.05, 0.4))
    return bits, actions, rows, forbid, require, draw(st.integers(0, 2**31 - 1))


def _random_profile(tmp, bits, n_act, rows, forbid, require, seed):
    """A profile CSV whose best action changes with the inputs (each action's latency is affine in one
    input, plus noise) and its sla.yaml (forbid / require properties on the first / last input)."""
    rng = np.random.default_rng(seed)
    names, acts = [f"x{i}" for i in range(len(bits))], [f"a{j}" for j in range(n_act)]
    base, slope = rng.uniform(10, 30, n_act), rng.uniform(-20, 20, n_act)
    which = rng.integers(0, len(bits), n_act)
    path = tmp / "profile.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(profile_columns(names, acts))
        for r in range(rows):
            x = rng.random(len(bits))
            lat = np.maximum(1.0, base + slope * x[which] + rng.normal(0, 2, n_act))
            w.writerow([r, 0, "", 1, 64, 1, "-".join(acts), *[f"{v:.6f}" for v in x], *[f"{v:.4f}" for v in lat],
                        *["0"] * n_act])
    props = []
    if forbid is not None:
        props.append({"id": "P1", "when": {"x0": [round(forbid[0], 3), 1.0]}, "forbid": [acts[forbid[1]]]})
    if require is not None:
        props.append({"id": "P2", "when": {names[-1]: [0.0, round(require, 3)]}, "require": [acts[0]]})
    spec = {"schema": "mi-certify/v1", "controller": {"name": "rnd", "decode": "argmax"},
            "inputs": [{"name": n, "min": 0.0, "max": 1.0, "bits": b} for n, b in zip(names, bits)],
            "actions": [{"name": a, "conservative": j == 0, "sla": {"latency_ms": 40.0}} for j, a in enumerate(acts)],
            "fsm": {"hysteresis": 2, "cooldown": 1, "violations_to_fallback": 2, "recovery": 2},
            "cosim": {"cycles": 10000}, "properties": props}
    sla = tmp / "sla.yaml"
    sla.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path, sla


@settings(max_examples=5, deadline=None, derandomize=True, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(shape=_profiles())
def test_train_then_build_proves_or_train_names_the_property(tmp_path_factory, shape):
    """Issue 33: on random profiles and specs, `train` with its defaults either ends with exit 0 and a
    `next:` build command whose build ends ok with every property proved, or exits 1/3 naming the
    property it could not certify; never a build that fails on a controller `train` called fine."""
    tmp = tmp_path_factory.mktemp("trainbuild")
    csv_path, sla = _random_profile(tmp, *shape)
    out = tmp / "c.onnx"
    r = cli("train", csv_path, "--sla", sla, "--out", out, "--hidden", "8,8", "--max-iter", "300")
    text = r.stdout + r.stderr
    event(f"train exit {r.returncode}")
    if r.returncode == 2 and "nothing to learn" in text:
        return  # every row has one label: train refuses, as documented
    assert r.returncode in (0, 1, 3), text
    assert "Traceback" not in text
    rep = json.loads((tmp / "c.train.json").read_text())
    lp, lf = rep["lut_preview"], rep["lut_fsm_held_out"]
    assert lp["proven"] + lp["resolved"] == lp["cells"] == 1 << sum(shape[0])
    assert lf["rows"] == rep["split"]["held_out_rows"] and 0 <= lf["agree_with_network"] <= lf["rows"]
    line = next(ln for ln in text.splitlines() if ln.startswith("properties, verified as build verifies them"))
    if r.returncode != 0:  # the open property is named
        import re
        assert re.search(r"P\d (violated|unknown)", line), line
        assert "next: mi-certify build" not in text
        return
    assert f"next: mi-certify build {out} --sla {sla}" in text
    b = subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "build", str(out), "--sla", str(sla),
                        "--out", str(tmp / "build"), "--skip-synth"], capture_output=True, text=True, timeout=1200)
    summary = json.loads((tmp / "build" / "summary.json").read_text())
    # ok but for place and route (--skip-synth: "incomplete", exit 0), nothing failed
    assert b.returncode == 0 and summary["failed_stages"] == [] and summary["skipped_stages"] == ["hdl"], \
        (b.stdout + b.stderr)[-3000:]
    verdicts = summary["stages"]["verify"]["properties"]
    assert sorted(verdicts) == sorted(p["id"] for p in yaml.safe_load(sla.read_text())["properties"])
    assert all(v == "proved" for v in verdicts.values()), verdicts
