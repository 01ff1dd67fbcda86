"""The C runtime of the reference build (the shared ``reference_build``: no build of its own):
the c_runtime stage's record, and the live loop's audit log byte-identical on the C step and the
Python step over the incident trace (docs/c-runtime.md)."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest

from mi_certify.runtime import audit
from mi_certify.runtime.audit import AuditLog
from mi_certify.runtime.c_step import CController, load_c_library
from mi_certify.runtime.live import ControlLoop, load_build, replay
from mi_certify.runtime.probes import FeatureMap, TraceProbe
from mi_certify.verification.tools.c_tools import shared_library
from mi_certify.verification.tools.registry import available

ROOT = Path(__file__).resolve().parents[2]
INCIDENT = ROOT / "examples" / "workload" / "incident.csv"


def test_reference_build_checks_the_c_runtime_and_records_size_stack_and_cosim(reference_build):
    stage = json.loads((reference_build / "summary.json").read_text())["stages"]["c_runtime"]
    assert stage["status"] == "ok" and stage["compilers"] == {"clang": "clean", "gcc": "clean"}
    assert stage["misra"]["unexplained"] == 0 and set(stage["misra"]["deviated_rules"]) <= {"2.5", "8.7", "8.9"}
    assert stage["cosim"]["cycles"] - stage["cosim"]["directed_cycles"] == 100_000
    assert stage["cosim"]["mismatches"] == stage["cosim"]["lut_mismatches"] == 0
    assert stage["cosim"]["lut_entries"] == 1 << 14
    m4 = stage["cortex_m4"]
    assert m4["const_bytes"] >= 1 << 14 and 0 < m4["code_bytes"] < 4096 and m4["ram_bytes"] == 0
    assert m4["stack_path"][0] == "meta_controller_step" and 0 < m4["stack_bytes"] < 512
    manifest = json.loads((reference_build / "manifest.json").read_text())["files"]
    assert {"meta_controller.c", "meta_controller.h", "c_runtime.json"} <= set(manifest)


def _audited_run(build, controller, path: Path, monkeypatch) -> bytes:
    """The incident trace through the live loop (one ``open`` record, a decision per row, latencies
    that make the SLA monitor flag the middle third), clocks frozen to counters; the log's bytes."""
    clock = itertools.count(1_000_000, 1000)
    monkeypatch.setattr(time, "monotonic_ns", lambda: next(clock))
    monkeypatch.setattr(time, "time_ns", lambda: 1_700_000_000_000_000_000)
    monkeypatch.setattr(audit, "_mono_ns", lambda: next(clock))
    monkeypatch.setattr(audit, "_wall_ns", lambda: 1_700_000_000_000_000_000)
    probe = TraceProbe(INCIDENT)
    loop = ControlLoop(build, probe, FeatureMap.build(build.inputs, offered=probe.columns), controller=controller)
    log = AuditLog(path, fsync="never", header=loop.audit_header())
    loop.audit = log
    rows = len(probe.rows)
    for i in range(rows + 3):     # three reads past the end: every reading unavailable (probe faults)
        d = loop.decide()
        latency = 200.0 if rows // 3 <= i < 2 * rows // 3 else 5.0
        loop.complete(d, latency, 0.0, extra={"request": i})
    log.close()
    return path.read_bytes()


@pytest.mark.skipif(not available("gcc"), reason="gcc not installed")
def test_audit_log_is_byte_identical_on_the_c_step_and_the_python_step(reference_build, tmp_path, monkeypatch):
    build = load_build(reference_build)
    lib = load_c_library(shared_library([reference_build / "meta_controller.c"], tmp_path / "libmc.so"),
                         "meta_controller")
    c_log = _audited_run(build, CController(lib, "meta_controller", build.module), tmp_path / "c.log", monkeypatch)
    py_log = _audited_run(build, None, tmp_path / "py.log", monkeypatch)
    assert c_log == py_log
    text = c_log.decode()
    assert '"reason":"SWITCH"' in text and '"reason":"PROBE_FAULT"' in text and '"reason":"FALLBACK"' in text
    rep = replay(tmp_path / "c.log", build)
    assert rep.ok and rep.decisions == len(TraceProbe(INCIDENT).rows) + 3
