"""Probes, the generated runtime's run-time surface, the control loop, audit replay and the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from fractions import Fraction
from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import EXAMPLES, REFERENCE_MODEL, REFERENCE_SLA
from mi_certify.generator.pipeline.runner import BuildOptions, build
from mi_certify.runtime.audit import AuditLog, verify_log
from mi_certify.runtime.live import BuildLoadError, ControlLoop, load_build, replay
from mi_certify.runtime.probes import QUANTITIES, FeatureMap, LinuxProbe, ProbeSample, Reading, TraceProbe
from mi_certify.runtime.quantize import Quantizer, quantize
from mi_certify.runtime.sla import MonitorConfig, SlaLimits

WORKLOAD = EXAMPLES / "workload" / "convnet.onnx"
INCIDENT = EXAMPLES / "workload" / "incident.csv"
KEY = b"k" * 32


@pytest.fixture(scope="module")
def quick_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("rt") / "meta_controller"
    build(REFERENCE_MODEL, REFERENCE_SLA, out, BuildOptions(skip_lint=True, skip_cosim=True, verify=False, skip_rtl_proofs=True, skip_synth=True,
                                                            distill=False))
    return out


def cli(*args):
    return subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def test_generated_quantize_is_exact_at_every_cell_edge(quick_build):
    m = load_build(quick_build).module
    qs = [Quantizer.from_floats(float(lo), float(hi), b) for _, _, lo, hi, b in m.INPUTS]
    rng = np.random.default_rng(3)
    columns = []
    for _, _, lo, hi, b in m.INPUTS:
        edges = [float(lo + (hi - lo) * Fraction(j, 1 << b)) for j in range((1 << b) + 1)]
        near = [y for e in edges for y in (e, math.nextafter(e, -math.inf), math.nextafter(e, math.inf))]
        columns.append(near + list(rng.uniform(float(lo) - 1, float(hi) + 1, 200)))
    checked = 0
    for _ in range(20000):
        v = [float(rng.choice(c)) for c in columns]
        addr, fault, _ = quantize(v, qs)
        assert m.quantize(v) == (addr, fault), v
        checked += 1
    odd = [[0.5, 0.5, 0.5, 512, 60], [Fraction(1, 2), 0.5, 0.5, np.float32(512.0), 60.0],
           [0.5, 0.5, 0.5, 512.0, float("nan")], [0.5, None, 0.5, 512.0, 60.0], [True, 0.5, 0.5, 512.0, 60.0],
           [0.5, 0.5, 0.5, 512.0, math.inf], [1.0, 1024.0, 64.0, 1024.0, 110.0], [0.0, 0.0, 0.0, 0.0, 20.0]]
    for v in odd:
        addr, fault, _ = quantize(v, qs)
        assert m.quantize(v) == (addr, fault), v
    assert m.quantize(odd[6]) == ((1 << 14) - 1, False) and m.quantize(odd[2]) == (0, True)


def test_generated_runtime_carries_sla_limits_monitor_and_lut_entries(quick_build):
    b = load_build(quick_build)
    assert b.limits == (SlaLimits(50.0, 0.0), SlaLimits(40.0, 0.1), SlaLimits(30.0, 1.5), SlaLimits(120.0, 0.0))
    assert b.monitor == MonitorConfig(20, "p90", "mean")
    assert [b.module.lut_entry(a) for a in (0, 12345)] == [(b.lut[0] & 0x7F, b.lut[0] >> 7),
                                                            (b.lut[12345] & 0x7F, b.lut[12345] >> 7)]
    with pytest.raises(IndexError):
        b.module.lut_entry(1 << 16)


def test_a_modified_build_is_refused(quick_build, tmp_path):
    import shutil
    copy = tmp_path / "b"
    shutil.copytree(quick_build, copy)
    (copy / "meta_controller.py").write_text((copy / "meta_controller.py").read_text() + "\n# edited\n")
    with pytest.raises(BuildLoadError, match="meta_controller.py is missing or does not match manifest.json"):
        load_build(copy)
    with pytest.raises(BuildLoadError, match="not a mi-certify build directory"):
        load_build(tmp_path)


def test_trace_probe_replays_rows_and_reports_gaps(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("t_s,compute_util,temperature\n0,0.5,60\n1,,61\n2,0.7,nan\n")
    tp = TraceProbe(p)
    a, b, c, d = (tp.read() for _ in range(4))
    assert a.value("compute_util") == 0.5 and a.readings["temperature"].unit == "degC"
    assert "t_s" not in a.readings and a.readings["compute_util"].source == "trace:t.csv:2"
    assert b.value("compute_util") is None and "'' is not a finite number" in b.readings["compute_util"].error
    assert c.value("temperature") is None and c.value("compute_util") == 0.7
    assert all(r.value is None and r.error == "trace exhausted" for r in d.readings.values())
    looped = TraceProbe(p, loop=True)
    assert [looped.read().value("temperature") for _ in range(4)] == [60.0, 61.0, None, 60.0]
    with pytest.raises(ValueError, match="no header row"):
        (tmp_path / "e.csv").write_text("")
        TraceProbe(tmp_path / "e.csv")


def _sample(**values):
    return ProbeSample({q: Reading(q, v, QUANTITIES.get(q, ""), 0, "test", None if v is not None else "down")
                        for q, v in values.items()}, 0, 0)


def test_feature_map_derives_inputs_and_turns_gaps_into_faults():
    inputs = ["compute_util", "cache_miss_rate", "mem_bw_util", "free_sram_kb", "temperature_c"]
    fm = FeatureMap.build(inputs, {"free_sram_kb": "free_memory/1024", "cache_miss_rate": "0.25"})
    s = _sample(compute_util=0.5, mem_bw_used=2e9, mem_bw_peak=8e9, free_memory=1024.0 * 300,
                temperature=70.0, **{"cache_miss_rate.llc": None})
    assert fm(s) == ([0.5, 0.25, 0.25, 300.0, 70.0], [None] * 5)
    values, errors = fm(_sample(compute_util=0.5, mem_bw_used=1.0, mem_bw_peak=0.0, free_memory=None,
                                temperature=70.0))
    assert values == [0.5, 0.25, None, None, 70.0]
    assert errors[2] == "mem_bw_peak is zero" and errors[3] == "free_memory: down"
    assert FeatureMap.build(inputs).sources[1:4] == ("cache_miss_rate.llc", "mem_bw_used/mem_bw_peak", "free_sram")
    assert FeatureMap.build(inputs, offered=inputs).sources == tuple(inputs)
    with pytest.raises(ValueError, match="unknown controller input 'fan'"):
        FeatureMap.build(inputs, {"fan": "1"})
    with pytest.raises(ValueError, match="input 'temperature_c': 'temperature\\+3' is not NUMBER"):
        FeatureMap.build(inputs, {"temperature_c": "temperature+3"})


def test_linux_probe_reads_every_quantity_with_units_or_a_reason():
    with LinuxProbe(mem_bw_peak=25.6e9, util_window_s=0.0) as probe:
        t_end = time.monotonic() + 0.05  # a few /proc/stat ticks (10 ms each) for the utilisation interval
        while time.monotonic() < t_end:
            pass
        s = probe.read()
    # every quantity but the two the micro-benchmarks measure (MicrobenchProbe, tests/unit/runtime/test_probes.py)
    assert set(s.readings) == set(QUANTITIES) - {"mem_bw_avail", "cache_chase_ns"}
    for q, r in s.readings.items():
        assert r.unit == QUANTITIES[q] and r.t_mono_ns == s.t_mono_ns
        assert (r.value is None) == (r.error is not None), r
    assert 0.0 <= s.value("compute_util") <= 1.0
    assert s.value("free_memory") > 0 and s.value("mem_bw_peak") == 25.6e9
    for q in ("cache_miss_rate.llc", "cache_miss_rate.l1d"):
        assert s.value(q) is None or 0.0 <= s.value(q) <= 1.0


class _FakeWorkload:
    """Deterministic stand-in for onnxruntime: merge_conv is slow (100 ms > 40 ms), the rest fast."""

    def run(self, token, i):
        return (100.0 if token == 1 else 5.0), 0.0


def _run_incident(build_dir, log_path, key=None, n=300):
    from mi_certify.runtime.engine import run_live
    b = load_build(build_dir)
    probe = TraceProbe(INCIDENT)
    loop = ControlLoop(b, probe, FeatureMap.build(b.inputs, offered=probe.columns))
    with AuditLog(log_path, key=key, fsync="never", header=loop.audit_header()) as log:
        loop.audit = log
        return run_live(loop, _FakeWorkload(), n)


def test_incident_trace_switches_falls_back_and_replays_exactly(quick_build, tmp_path):
    log = tmp_path / "incident.log"
    live = _run_incident(quick_build, log, KEY)
    assert verify_log(log, KEY).ok
    rep = replay(log, load_build(quick_build), KEY)
    assert rep.ok and rep.decisions == 300 and rep.sessions == 1 and rep.mismatches == []
    # what the incident shows (this build's LUT is sampled at cell centres, without certified confidence):
    # lightly used -> merge_conv, too slow -> fallback to keep (again and again); a neighbour -> int4; hot ->
    # not int4 (P1): offload_cpu; the sensor dropout -> probe faults
    assert set(rep.switches) == {"keep->merge_conv", "keep->int4", "keep->offload_cpu"}
    assert rep.switches["keep->merge_conv"] >= 2
    assert rep.probe_faults == 3 and rep.fallbacks >= 2 and rep.recoveries >= 2
    assert rep.per_action["merge_conv"]["met_latency"] == 0 and rep.per_action["keep"]["attainment"] == 1.0
    assert rep.per_action["int4"]["requests"] > 20 and rep.per_action["offload_cpu"]["requests"] > 20
    assert rep.switches == live.switches and rep.fallbacks == live.fallbacks and rep.recoveries == live.recoveries
    assert rep.reasons == live.reasons


class _Repeated(TraceProbe):
    """The incident trace, each row read ``k`` times. ``how``: "shared", the repeats return one read-only
    mapping and the probe says so (``shares_readings``, as SampledProbe between samples); "copies", a new
    dict per read; "one dict", the same dict object every read, changed in place (a probe that does not
    share: nothing may be kept by its identity)."""

    def __init__(self, path, k: int, how: str):
        super().__init__(path)
        self.k, self.how, self.i, self.last, self.one, self.shared = k, how, 0, None, {}, None
        self.shares_readings = how == "shared"

    def read(self):
        if self.i % self.k == 0:
            self.last = super().read()
            self.shared = MappingProxyType(dict(self.last.readings))
        self.i += 1
        if self.how == "one dict":
            self.one.clear()
            self.one.update(self.last.readings)
            r = self.one
        else:
            r = self.shared if self.how == "shared" else dict(self.last.readings)
        return ProbeSample(r, self.last.t_mono_ns, self.last.t_wall_ns)


def test_records_derived_once_per_shared_sample_equal_those_derived_per_read(quick_build, tmp_path):
    """ControlLoop keeps the feature values and the probes JSON of the last readings mapping of a probe
    that shares its mappings: the log is the one made from a fresh dict per read, record for record (times
    and chain aside), through probe faults (the incident's dropout), SLA fallbacks and recoveries; and a
    probe that changes one dict in place is never served what was derived from its earlier contents."""
    from mi_certify.runtime.engine import run_live
    b = load_build(quick_build)
    logs = []
    for how in ("copies", "shared", "one dict"):
        probe = _Repeated(INCIDENT, 2, how)
        loop = ControlLoop(b, probe, FeatureMap.build(b.inputs, offered=probe.columns))
        log = tmp_path / f"{how.replace(' ', '_')}.log"
        with AuditLog(log, fsync="never", header=loop.audit_header()) as a:
            loop.audit = a
            run_live(loop, _FakeWorkload(), 480)
        recs = [json.loads(x) for x in log.read_text().splitlines()]
        logs.append([{k: v for k, v in r.items() if k not in ("t_mono_ns", "t_wall_ns", "prev", "pid")} for r in recs])
    assert len(logs[0]) == 482 and logs[0] == logs[1] == logs[2]
    faults = [r for r in logs[1] if r.get("probe_fault")]
    assert faults and all("_probe_fault" in r["probes"] for r in faults)


class _TwoCallLoop(ControlLoop):
    """ControlLoop with the record composed as before AuditLog.append_decision (commit f1b183b):
    encode_decision by keywords, json.dumps of the extra fields, append_fields. The oracle of the one-call
    path."""

    def complete(self, d, latency_ms, accuracy_loss_pct, extra=None):
        from mi_certify.runtime.audit import encode_decision
        from mi_certify.runtime.live import _operator_json
        verdict = self.monitor.observe(d.token, latency_ms, accuracy_loss_pct)
        if self.audit is not None:
            self.audit.append_fields("decision", encode_decision(
                readings=d.readings, addr=d.addr, probe_fault=d.probe_fault, proposal=d.proposal,
                confident=d.confident, sla_violation=d.sla_violation, before=d.before, after=d.after, token=d.token,
                action=self.build.actions[d.token], reason=d.reason, latency_ms=latency_ms,
                accuracy_loss_pct=accuracy_loss_pct, verdict=verdict, probes_json=self._probes_json(d),
                extra_json=None if extra is None else json.dumps(extra, sort_keys=True, separators=(",", ":")),
                operator_json=None if d.operator is None else _operator_json(d.operator)))
        return verdict


@pytest.mark.parametrize("key", [None, KEY])
def test_the_live_loops_log_is_the_bytes_of_the_two_call_record_on_the_incident_trace(quick_build, tmp_path,
                                                                                        monkeypatch, key):
    """ControlLoop.complete (one AuditLog.append_decision per request, the extra fields by orjson when they
    are plain) writes the log the previous composition wrote, byte for byte, on the incident trace read
    three times per row through a shared mapping and three reads past its end (switches, SLA violations,
    fallbacks, recoveries, probe faults), with measurements of every kind and extra fields of every kind; the
    verdicts and decisions returned are equal too, and the log replays."""
    import itertools

    from mi_certify.runtime import audit
    monkeypatch.setattr(audit, "_wall_ns", lambda: 1_700_000_000_000_000_000)
    monkeypatch.setattr(time, "time_ns", lambda: 1_700_000_000_000_000_000)
    monkeypatch.setattr("os.getpid", lambda: 4242)
    extras = [None, {"request": 0}, {"request": 5, "phase": "quiet", "accuracy": "top-1 vs fp32"},
              {"b": 1.5, "a": [1, 2], "z": None, "y": True}, {"x": "\u00e9\u007f\n\"\\"}, {"n": 2 ** 70, "f": math.nan},
              {}, {"request": -3, "phase": "loaded"}, {"k": 1e16, "m": 1e-7}, {"big": 2 ** 63, "neg": -2 ** 63}]
    lats = [5.0, 0.0, -0.0, None, math.nan, math.inf, 3, 12.5, 1e-300, 7.25]
    b = load_build(quick_build)
    out = []
    for cls in (_TwoCallLoop, ControlLoop):
        clock = itertools.count(1_000_000, 1000)
        monkeypatch.setattr(audit, "_mono_ns", lambda: next(clock))
        monkeypatch.setattr(time, "monotonic_ns", lambda: next(clock))
        probe = _Repeated(INCIDENT, 3, "shared")
        loop = cls(b, probe, FeatureMap.build(b.inputs, offered=probe.columns))
        path = tmp_path / f"{cls.__name__}.log"
        results = []
        with AuditLog(path, key=key, fsync="never", header=loop.audit_header()) as log:
            loop.audit = log
            rows = len(probe.rows)
            for i in range(3 * rows + 3):
                d = loop.decide()
                # as _FakeWorkload (merge_conv too slow), and now and then a measurement of another kind
                lat = lats[i // 23 % len(lats)] if i % 23 == 0 else 100.0 if d.token == 1 else 5.0
                acc = [1.5, None, 100.0, 0.25, -0.0][i // 29 % 5] if i % 29 == 0 else 0.0
                v = loop.complete(d, lat, acc, extra=extras[i % len(extras)])
                results.append((d, v))
        out.append((path.read_bytes(), results))
    assert out[0][0] == out[1][0] and out[0][1] == out[1][1]
    text = out[1][0].decode()
    assert all(f'"reason":"{r}"' in text for r in ("SWITCH", "PROBE_FAULT", "FALLBACK", "RECOVER"))
    assert '"extra":{"accuracy":"top-1 vs fp32","phase":"quiet","request":5}' in text
    rep = replay(tmp_path / "ControlLoop.log", b, key)
    assert rep.ok and rep.decisions == 3 * len(TraceProbe(INCIDENT).rows) + 3


@settings(max_examples=300, deadline=None)
@given(extra=st.dictionaries(st.one_of(st.text(max_size=6), st.sampled_from(["request", "phase", "accuracy"])),
                             st.one_of(st.integers(-2 ** 70, 2 ** 70), st.text(max_size=8), st.booleans(), st.none(),
                                       st.floats(), st.lists(st.integers(), max_size=2),
                                       st.sampled_from(["quiet", "loaded", "top-1 vs fp32", 'a"b', "a\\b", "\x7f"])),
                             max_size=4))
def test_the_extra_fields_are_written_as_json_dumps_writes_them(extra):
    from mi_certify.runtime.live import _extra_json
    assert _extra_json(extra) == json.dumps(extra, sort_keys=True, separators=(",", ":")).encode("ascii")
    assert _extra_json(extra) == json.dumps(extra, sort_keys=True, separators=(",", ":")).encode("ascii")  # cached


@settings(max_examples=200, deadline=None)
@given(cmd=st.integers(0, 3), arg=st.integers(0, 300), before=st.lists(st.integers(0, 2**40), min_size=3, max_size=3),
       after=st.lists(st.one_of(st.integers(-5, 2**40), st.booleans()), min_size=3, max_size=3))
def test_the_operator_fields_template_writes_what_json_dumps_writes(cmd, arg, before, after):
    from mi_certify.runtime.live import _operator_json
    op = {"cmd": cmd, "arg": arg, "before": before, "after": after}
    assert _operator_json(op) == json.dumps(op, separators=(",", ":"))


def test_replay_finds_a_forged_decision_and_a_flipped_sla_input(quick_build, tmp_path):
    log = tmp_path / "a.log"
    _run_incident(quick_build, log, None, 120)
    lines = log.read_bytes().split(b"\n")[:-1]
    recs = [json.loads(x) for x in lines]
    i = next(j for j, r in enumerate(recs) if r.get("reason") in ("HOLD", "COOLDOWN") and j > 50)
    was = recs[i]["reason"]
    lines[i] = lines[i].replace(f'"reason":"{was}"'.encode(), b'"reason":"SWITCH"')
    k = next(j for j, r in enumerate(recs) if r["kind"] == "decision" and j > i + 5)
    lines[k] = lines[k].replace(b'"sla_violation":false', b'"sla_violation":true')
    log.write_bytes(b"\n".join(lines) + b"\n")
    assert [(f.kind, f.seq) for f in verify_log(log).findings] == [("edited", i), ("edited", k)]
    rep = replay(log, load_build(quick_build))
    assert (i, "decision", [recs[i]["token"], "SWITCH"], [recs[i]["token"], was]) in rep.mismatches
    assert (k, "sla_violation", True, False) in rep.mismatches


def test_readings_that_are_no_binary64_value_are_logged_exactly_and_replay(quick_build, tmp_path):
    """A Fraction or a wider float is quantized exactly; the log keeps it exactly ("n/d") so the
    replay quantizes the same value (a fresh-user review found 0.0625 logged for a reading just
    below it, and a replay mismatch); numpy integers keep their value."""
    from fractions import Fraction
    b = load_build(quick_build)
    m = b.module
    below = Fraction(1, 16) - Fraction(1, 10 ** 30)            # just below compute_util's level-1 edge
    above = Fraction(1) + Fraction(1, 10 ** 30)                 # just above its envelope: a probe fault
    readings = [[below, 0.5, 0.5, 512.0, 60.0], [above, 0.5, 0.5, 512.0, 60.0],
                [np.uint8(0), 0.5, 0.5, np.int16(512), 60.0], [0.0625, 0.5, 0.5, 512.0, 60.0]]
    ctl = m.Controller()
    log = tmp_path / "exact.log"
    with AuditLog(log, fsync="never", header=b.identity()) as a:
        for r in readings:
            step = ctl.step_record(r, False)
            a.append_step(step, r, False, m.ACTIONS[step[6]], m.REASONS[step[7]], 5.0, 0.0)
    recs = [json.loads(x) for x in log.read_text().splitlines() if '"decision"' in x]
    assert recs[0]["readings"][0] == f"{below.numerator}/{below.denominator}" and recs[3]["readings"][0] == 0.0625
    assert recs[0]["addr"] != recs[3]["addr"] and recs[1]["probe_fault"] and recs[2]["readings"][:4:3] == [0, 512]
    rep = replay(log, b)
    assert rep.ok and rep.decisions == 4 and rep.mismatches == []


def test_replay_refuses_a_log_of_another_build(quick_build, tmp_path):
    log = tmp_path / "a.log"
    b = load_build(quick_build)
    with AuditLog(log, header={**b.identity(), "lut_sha256": "0" * 64}) as a:
        a.append("decision", {})
    with pytest.raises(BuildLoadError, match="written by another build: lut_sha256"):
        replay(log, b)


def test_cli_run_verify_replay_on_the_real_workload(quick_build, tmp_path):
    log, key, out = tmp_path / "run.log", tmp_path / "k.bin", tmp_path / "run.json"
    key.write_bytes(KEY)
    p = cli("run", "--build", quick_build, "--workload", WORKLOAD, "--requests", 60, "--audit", log, "--key", key,
            "--probe", f"trace:{INCIDENT}", "--interval", 0, "--json", out)
    assert p.returncode == 0, p.stderr
    counts = json.loads(out.read_text())
    assert counts["requests"] == 60 and counts["tokens"]["keep"] >= 40 and counts["switches"] == {
        "keep->merge_conv": 1}
    v = cli("audit", "verify", log, "--key", key)
    assert v.returncode == 0 and "62 records, intact; HMAC checked" in v.stderr, v.stderr
    r = cli("audit", "replay", log, "--build", quick_build, "--key", key, "--json")
    assert r.returncode == 0 and "all 60 decisions confirmed" in r.stderr, r.stderr
    assert json.loads(r.stdout)["replay"]["per_action"]["merge_conv"]["requests"] == counts["tokens"]["merge_conv"]
    lines = log.read_bytes().split(b"\n")
    lines[30] = lines[30].replace(b'"probe_fault":false', b'"probe_fault":true')
    log.write_bytes(b"\n".join(lines))
    t = cli("audit", "verify", log, "--key", key)
    assert t.returncode == 1 and "edited: record 30 (line 31): MAC does not match" in t.stderr, t.stderr
    assert cli("audit", "replay", log, "--build", quick_build, "--key", key).returncode == 1


def test_cli_run_with_sampled_micro_benchmark_probes_logs_their_readings(quick_build, tmp_path):
    log, out = tmp_path / "run.log", tmp_path / "run.json"
    p = cli("run", "--build", quick_build, "--workload", WORKLOAD, "--requests", 12, "--audit", log,
            "--probe-rate", 4, "--microbench", "--interval", 0.1, "--json", out)
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["requests"] == 12
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert recs[0]["probe"] == "SampledProbe"
    decisions = [r for r in recs if r.get("kind") == "decision"]
    assert len(decisions) == 12
    fresh = 0
    # every request saw a sample of the micro-benchmarks, in their units, or a stale one flagged as such.
    # 4 Hz: a 750 ms age limit (3 periods). At 20 Hz (150 ms) a machine loaded by other builds made every
    # round of the 300 MiB copy stale (318.9 ms), and no request saw a fresh one
    for r in decisions:
        pr = r["probes"]
        assert pr["mem_bw_avail"][1] == "B/s" and pr["cache_chase_ns"][1] == "ns"
        if pr["mem_bw_avail"][0] is None or pr["cache_chase_ns"][0] is None:
            stale = [pr[q][3] for q in ("mem_bw_avail", "cache_chase_ns") if pr[q][0] is None]
            assert all(e.startswith("stale: taken ") for e in stale), pr
            assert r["probe_fault"] is True, r   # a stale reading is a probe fault, never a value
        else:
            assert pr["mem_bw_avail"][0] > 1e8 and pr["cache_chase_ns"][0] > 0
            fresh += 1
    assert fresh >= 1, [r["probes"] for r in decisions]


@pytest.mark.parametrize("args,message", [
    (["audit", "verify", "missing.log"], "missing.log: no such file"),
    (["run", "--build", "nowhere", "--workload", WORKLOAD], "nowhere: not a mi-certify build directory"),
    (["audit", "verify", "{log}", "--key", "{short}"], "holds 4 bytes; at least 16 are required"),
    (["run", "--build", "{build}", "--workload", WORKLOAD, "--map", "fan=1"], "unknown controller input 'fan'"),
    (["run", "--build", "{build}", "--workload", WORKLOAD, "--fsync", "x", "--audit", "{log}"],
     "unknown fsync policy 'x'"),
    (["run", "--build", "{build}", "--workload", "{short}"], "onnxruntime cannot load the workload"),
    (["run", "--build", "{build}", "--workload", WORKLOAD, "--probe-rate", "-1"], "--probe-rate -1: expected 0"),
    (["run", "--build", "{build}", "--workload", WORKLOAD, "--probe", f"trace:{INCIDENT}", "--microbench"],
     "use them with --probe linux"),
])
def test_cli_bad_input_is_one_line_and_exit_2(quick_build, tmp_path, args, message):
    short = tmp_path / "short.bin"
    short.write_bytes(b"abcd")
    log = tmp_path / "x.log"
    AuditLog(log, header={}).close()
    args = [str(a).format(build=quick_build, short=short, log=log) for a in args]
    p = cli(*args)
    assert p.returncode == 2, p.stderr
    err = [x for x in p.stderr.splitlines() if x.startswith("error:")]
    assert len(err) == 1 and message in err[0], p.stderr


def test_cli_run_stops_on_ctrl_c_and_prints_the_audit_head_to_anchor(quick_build, tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) stops the run after the
    current request: exit 130, the summary, and the head record (seq, sha256) of the closed log,
    which `audit verify --anchor` accepts; no tracebacks or resource_tracker warnings."""
    import hashlib
    import os
    import re
    import signal
    import time
    log = tmp_path / "int.log"
    p = subprocess.Popen([sys.executable, "-m", "mi_certify.generator.cli", "run", "--build", str(quick_build),
                          "--workload", str(WORKLOAD), "--requests", "1000000", "--audit", str(log),
                          "--probe", f"trace:{INCIDENT}", "--interval", "0.002"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while p.poll() is None and time.monotonic() < deadline and (
                not log.exists() or log.read_bytes().count(b"\n") < 40):
            time.sleep(0.05)
        assert p.poll() is None, p.stderr.read()
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err
    last = log.read_bytes().split(b"\n")[-2]
    head, sha = json.loads(last), hashlib.sha256(last).hexdigest()
    n = int(re.search(r"interrupted after (\d+) of 1000000 requests; every request done is in the audit log",
                      err)[1])
    assert head["kind"] == "close" and head["seq"] == n + 1 and n >= 39, err
    assert f"live run: {n} requests" in err
    assert f"audit log: {log}; head record {n + 1}, sha256 {sha}\n" in err
    assert f"mi-certify audit verify {log} --anchor {n + 1}:{sha}" in err
    for noise in ("Traceback", "resource_tracker", "leaked", "nothing was published"):
        assert noise not in err, err
    v = cli("audit", "verify", log, "--anchor", f"{n + 1}:{sha}")
    assert v.returncode == 0, v.stderr
    assert f"{n + 2} records, intact" in v.stderr and f"anchor {sha[:16]}… matches record {n + 1}" in v.stderr


def test_run_and_replay_tell_fallback_entries_from_steps_in_fallback(quick_build, tmp_path):
    """"fallbacks: 0" next to FALLBACK x7 read as a contradiction: the sensor dropout of the incident
    trace (rows 220-222) puts the FSM in fallback as PROBE_FAULT, and the steps there until RECOVER
    have reason FALLBACK although no SLA violation entered it. Both counts are now named."""
    log, out = tmp_path / "f.log", tmp_path / "f.json"
    p = cli("run", "--build", quick_build, "--workload", WORKLOAD, "--requests", 300, "--audit", log,
            "--probe", f"trace:{INCIDENT}", "--interval", 0, "--json", out)
    assert p.returncode == 0, p.stderr
    j = json.loads(out.read_text())
    steps = j["reasons"]["FALLBACK"]
    assert j["reasons"]["PROBE_FAULT"] == 3 and steps >= 7 and j["recoveries"] >= 1   # recovery: 8 compliant steps
    line = (f"fallback entries on SLA violations: {j['fallbacks']}; steps in fallback (reason FALLBACK: the entry "
            "steps and the later steps without a probe fault until RECOVER, also when a probe fault put it there): "
            f"{steps}; recoveries: {j['recoveries']}")
    assert line in p.stderr.splitlines(), p.stderr
    assert "fallbacks:" not in p.stderr
    r = cli("audit", "replay", log, "--build", quick_build, "--json")
    assert r.returncode == 0, r.stderr
    rj = json.loads(r.stdout)["replay"]
    assert (rj["fallbacks"], rj["reasons"]["FALLBACK"], rj["recoveries"]) == (j["fallbacks"], steps, j["recoveries"])
    assert line in r.stderr.splitlines() and "probe faults (reason PROBE_FAULT): 3" in r.stderr
    assert "fallbacks:" not in r.stderr


def test_runtime_package_imports_neither_generator_nor_verification():
    code = ("import sys, mi_certify.runtime, mi_certify.runtime.live, mi_certify.runtime.engine; "
            "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('mi_certify.')}))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "['runtime']"


def _bisect_quantize(inputs, values):
    """The generated quantize of the previous release (bisect over float thresholds), kept
    verbatim as the oracle of the straight-line quantizer that replaced it."""
    import bisect
    import numbers

    def ceil_float(x):
        f = float(x)
        return f if Fraction(f) >= x else math.nextafter(f, math.inf)

    thresholds_all = tuple(tuple(ceil_float(lo + (hi - lo) * j / (1 << bits)) for j in range(1, 1 << bits))
                           for _n, _u, lo, hi, bits in inputs)
    ranges = tuple((float(lo), float(hi)) for _n, _u, lo, hi, _b in inputs)
    values = list(values)
    if len(values) != len(inputs):
        raise ValueError(f"expected {len(inputs)} readings, got {len(values)}")
    addr, fault = 0, False
    for x, (_n, _u, lo, hi, bits), (flo, fhi), thresholds in zip(values, inputs, ranges, thresholds_all):
        if type(x) is float:
            if not flo <= x <= fhi:
                fault = True
                continue
            level = bisect.bisect_right(thresholds, x)
        else:
            if isinstance(x, bool) or not isinstance(x, numbers.Real):
                fault = True
                continue
            fx = Fraction(x) if isinstance(x, numbers.Rational) else Fraction(float(x)) if math.isfinite(x) else None
            if fx is None or fx < lo or fx > hi:
                fault = True
                continue
            level = min(math.floor((fx - lo) * (1 << bits) / (hi - lo)), (1 << bits) - 1)
        addr = (addr << bits) | level
    return (0, True) if fault else (addr, False)


def _near(x, ulps=3):
    """x and its float neighbours up to ``ulps`` steps away on both sides."""
    out, lo, hi = [x], x, x
    for _ in range(ulps):
        lo, hi = math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)
        out += [lo, hi]
    return out


def test_straight_line_quantizer_equals_the_bisect_quantizer_on_every_edge(quick_build):
    """Every cell edge, the envelope ends, their float neighbours (3 ulps), NaN, +-inf, -0.0,
    subnormals and values outside the envelope, one input at a time (the others in the
    middle of their envelope) and mixed at random; plus tuples, arrays, iterators, ints,
    Fractions and wrong lengths, which take the general path."""
    m = load_build(quick_build).module
    mid = [float((lo + hi) / 2) for _, _, lo, hi, _ in m.INPUTS]
    columns = []
    for _, _, lo, hi, b in m.INPUTS:
        edges = [float(lo + (hi - lo) * Fraction(j, 1 << b)) for j in range((1 << b) + 1)]
        col = [y for e in edges for y in _near(e)] + [float(x) for x in m._THRESHOLDS[len(columns)]]
        col += [math.nan, -math.nan, math.inf, -math.inf, -0.0, 5e-324, -5e-324, float(lo) - 1, float(hi) + 1,
                float(hi) * 2 + 1e300, -1e308]
        columns.append(col)
    checked = 0
    for i, col in enumerate(columns):
        for x in col:
            v = list(mid)
            v[i] = x
            assert m.quantize(v) == _bisect_quantize(m.INPUTS, v), (i, x)
            assert m.quantize(tuple(v)) == m.quantize(v)
            checked += 1
    rng = np.random.default_rng(7)
    for _ in range(20000):
        v = [float(rng.choice(c)) for c in columns]
        assert m.quantize(v) == _bisect_quantize(m.INPUTS, v), v
        checked += 1
    assert checked > 20000 + 5 * 40
    general = [lambda: np.array(mid), lambda: iter(mid), lambda: [Fraction(1, 2), 0.5, 0.5, 512, 60],
               lambda: [0.5, 0.5, 0.5, 512, np.float32(60.5)], lambda: [True, 0.5, 0.5, 512.0, 60.0],
               lambda: (0.5, 0.5, 0.5, 512.0, None), lambda: [0.5, "0.5", 0.5, 512.0, 60.0],
               lambda: [np.float64(0.5), 0.5, 0.5, 512.0, 60.0], lambda: [0.5, 0.5, 0.5, 2000, 60.0]]
    for make in general:
        assert m.quantize(make()) == _bisect_quantize(m.INPUTS, make()), make()
    assert m.quantize(np.array(mid)) == m.quantize(mid) and m.quantize(iter(mid)) == m.quantize(mid)
    for bad in ([0.5] * 4, (0.5,) * 6, iter([0.5] * 6), []):
        with pytest.raises(ValueError, match=r"expected 5 readings, got \d"):
            m.quantize(bad)


def test_step_and_step_record_take_the_same_steps_as_step_addr(quick_build):
    """Controller.step (FSM body written out after quantize) and step_record against
    quantize + step_addr, over random readings with probe faults and SLA violations
    that visit every reason; step_record returns the address, LUT entry and states."""
    m = load_build(quick_build).module
    a, b, c = m.Controller(), m.Controller(), m.Controller()
    rng = np.random.default_rng(11)
    lo = np.array([float(i[2]) for i in m.INPUTS])
    hi = np.array([float(i[3]) for i in m.INPUTS])
    reasons = set()
    for n in range(30000):
        v = list(map(float, lo + rng.random(len(lo)) * (hi - lo)))
        if n % 97 == 0:
            v[n % len(v)] = [math.nan, None, math.inf, float(hi[n % len(v)]) + 1][n % 4]
        sla = bool(rng.random() < (0.7 if (n // 200) % 5 == 0 else 0.05))
        addr, fault = m.quantize(v)
        before = a.state
        want = a.step_addr(addr, fault, sla)
        assert b.step(v, sla) == want
        rec = c.step_record(v, sla)
        entry = None if fault else m.lut_entry(addr)
        assert rec == (None if fault else addr, fault, None if fault else entry[0],
                       None if fault else bool(entry[1]), before, a.state, *want)
        assert a.state == b.state == c.state
        reasons.add(want[1])
    assert {m.REASONS[r] for r in reasons} >= {"HOLD", "PENDING", "SWITCH", "COOLDOWN", "FALLBACK", "RECOVER",
                                               "PROBE_FAULT"}
