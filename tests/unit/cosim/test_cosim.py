"""Hardware SLA monitor, vector co-simulation, coverage: values asserted, and failures that must happen."""

from __future__ import annotations

import random
import subprocess
from fractions import Fraction

import pytest

from conftest import ROOT, REFERENCE_SLA
from mi_certify.generator.core.errors import SpecError
from mi_certify.generator.core.spec import load_spec
from mi_certify.runtime.fsm import FsmConfig
from mi_certify.runtime.sla import (CycleMonitorConfig, CycleSlaMonitor, MonitorConfig, SlaLimits, SlaMonitor,
                                    accuracy_limit_fixed, accuracy_to_fixed, latency_limit_cycles)
from mi_certify.verification.cosim import monitor_cosim
from mi_certify.generator.core.lut import LutFsmArtefact
from mi_certify.verification.cosim.cocotb_sim import run_cosim
from mi_certify.verification.cosim.coverage import assess
from mi_certify.verification.cosim.vector_sim import SimReport, parse_coverage

MONITOR = ROOT / "hdl" / "sla_monitor.v"
REF_LIMITS = [SlaLimits(a.latency_ms, a.accuracy_loss_pct) for a in load_spec(REFERENCE_SLA).actions]


# --- the monitor's units ------------------------------------------------------------------------


def test_cycle_limits_are_exact_floors():
    assert latency_limit_cycles(50, 100) == 5_000_000
    assert latency_limit_cycles(0.1, 3) == 300            # 0.1 (binary) * 3000 = 300.0000000000000166...
    assert latency_limit_cycles(1, 33.333) == 33_332       # the binary 33.333 is 33.3329999...: floor is exact
    assert accuracy_limit_fixed(0.1) == 100 and accuracy_limit_fixed(1.5) == 1500 and accuracy_limit_fixed(0) == 0
    assert accuracy_to_fixed(0.1001) == 101 and accuracy_to_fixed(-3) == 0 and accuracy_to_fixed(float("nan")) is None
    assert accuracy_to_fixed(500) == (1 << 17) - 1


def test_cycle_verdicts_equal_the_ms_verdicts_on_the_exact_latency():
    # max / pNN depend only on "value > limit" per request: c > floor(limit_ms * f * 1000) <=> c / (f * 1000) > limit_ms
    rng = random.Random(7)
    for _ in range(2000):
        clock, limit_ms = rng.choice([12.5, 48, 100, 33.3, 27.0]), rng.choice([0.05, 0.1, 0.2, 0.37, 1.1])
        lim_cyc = latency_limit_cycles(limit_ms, clock)
        c = lim_cyc + rng.randint(-2, 2)
        assert (c > lim_cyc) == (Fraction(c) / (Fraction(clock) * 1000) > Fraction(limit_ms))
    # mean: exact when limit_ms * f * 1000 is an integer, else never looser than the exact ms verdict
    exact = Fraction(0.37) * Fraction(33.3) * 1000           # 12320.99999999999... cycles (binary floats)
    lim = latency_limit_cycles(0.37, 33.3)
    assert lim == 12320
    mon = SlaMonitor([SlaLimits(lim, None)], MonitorConfig(2, "mean", "max"))
    assert mon.observe(0, 12320, 0).violation is False
    assert mon.observe(0, 12321, 0).violation is True       # 24641 > 2 * 12320 ...
    assert 24641 < 2 * exact                                 # ... where the exact ms mean is compliant: stricter


def test_cycle_model_follows_the_strobe_protocol():
    cfg = CycleMonitorConfig((5, None), (100, None), MonitorConfig(2, "max", "max"), cyc_width=4, action_width=1)
    m = CycleSlaMonitor(cfg)
    seq = [(1, 0, 0, 0, 0, 0), (0, 1, 0, 0, 0, 0)] + [(0, 0, 0, 0, 0, 0)] * 4 + [(0, 0, 0, 1, 100, 0)]
    outs = [m.clock(*r) for r in seq]
    assert outs[-1] == {"violation": 0, "lat_violation": 0, "acc_violation": 0, "verdict_valid": 1, "samples": 1,
                        "busy": 0, "proto_error": 0}                          # 5 cycles = limit: compliant
    for r in [(0, 1, 0, 0, 0, 0)] + [(0, 0, 0, 0, 0, 0)] * 5 + [(0, 0, 0, 1, 101, 0)]:
        out = m.clock(*r)
    assert out["violation"] == out["lat_violation"] == out["acc_violation"] == 1 and out["samples"] == 2
    assert m.clock(0, 0, 0, 0, 0, 0)["verdict_valid"] == 0 and m.out["violation"] == 1   # the verdict holds
    assert m.clock(0, 0, 0, 1, 0, 0)["proto_error"] == 1                      # done without a request
    m.clock(0, 1, 1, 0, 0, 0)
    out = m.clock(0, 0, 0, 1, 0, 1)                                           # action 1: not judged
    assert out["violation"] == 0 and out["samples"] == 1                     # another action: window emptied
    m.clock(0, 1, 0, 0, 0, 0)
    for _ in range(20):
        m.clock(0, 0, 0, 0, 0, 0)
    assert m.cnt == 15                                                        # saturated: +infinity
    assert m.clock(0, 0, 0, 1, 0, 0)["lat_violation"] == 1
    assert m.clock(1, 0, 0, 0, 0, 0) == dict.fromkeys(CycleSlaMonitor.OUTPUTS, 0)


@pytest.mark.parametrize("params", [
    {}, {"WINDOW": 20, "LAT_STAT": 90, "ACC_STAT": 0}, {"WINDOW": 1, "LAT_STAT": 0, "RST_ASYNC": 1, "RST_ACTIVE_LOW": 1},
    {"N_ACTIONS": 3, "WINDOW": 3, "LAT_STAT": 100, "ACC_STAT": 50},
])
def test_sla_monitor_is_lint_clean_and_synthesises_without_latches(tmp_path, params):
    g = [f"-G{k}={v}" for k, v in params.items()]
    proc = subprocess.run(["verilator", "--lint-only", "-Wall", *g, "--top-module", "sla_monitor", str(MONITOR)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout + proc.stderr == ""
    chparam = " ".join(f"-set {k} {v}" for k, v in params.items())
    script = (f"read_verilog {MONITOR}; " + (f"chparam {chparam} sla_monitor; " if params else "") +
              "hierarchy -top sla_monitor; proc; flatten; opt; check -assert; "
              "select -assert-none t:$dlatch t:$_DLATCH_*; synth -top sla_monitor")
    proc = subprocess.run(["yosys", "-q", "-p", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    code = "\n".join(line.split("//")[0] for line in MONITOR.read_text().splitlines())
    assert "initial" not in code


@pytest.mark.parametrize("params", [{"WINDOW": 20, "NW": 4}, {"WINDOW": 0}, {"CYC_W": 33}, {"LAT_STAT": 101},
                                    {"N_ACTIONS": 5, "ACTION_W": 2}])
def test_illegal_monitor_parameters_fail_elaboration_in_every_tool(tmp_path, params):
    # NW 4 cannot count 20 samples: without the check the window count would wrap silently
    g = [f"-G{k}={v}" for k, v in params.items()]
    proc = subprocess.run(["verilator", "--lint-only", "-Wall", *g, "--top-module", "sla_monitor", str(MONITOR)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode != 0 and "sla_monitor_illegal_parameters" in proc.stdout + proc.stderr
    chparam = " ".join(f"-set {k} {v}" for k, v in params.items())
    proc = subprocess.run(["yosys", "-q", "-p", f"read_verilog {MONITOR}; chparam {chparam} sla_monitor; "
                           "hierarchy -check -top sla_monitor"], capture_output=True, text=True)
    assert proc.returncode != 0 and "sla_monitor_illegal_parameters" in proc.stdout + proc.stderr
    proc = subprocess.run(["iverilog", *[f"-Psla_monitor.{k}={v}" for k, v in params.items()], "-o", "sim",
                           str(MONITOR)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode != 0 and "sla_monitor_illegal_parameters" in proc.stdout + proc.stderr


def test_the_widest_sample_count_is_legal(tmp_path):
    # NW 31: 1 << 31 overflows a 32-bit integer; the check must not refuse it
    proc = subprocess.run(["iverilog", "-Psla_monitor.NW=31", "-Psla_monitor.WINDOW=1000", "-o", "sim", str(MONITOR)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_reason_coverage_counts_only_the_reasons_this_lut_can_produce():
    # a constant LUT can never SWITCH, PENDING or LOW_CONFIDENCE, and a mask that forbids no active
    # action never MASKs: 1.0 was out of reach for such specs (a fresh-user review)
    from types import SimpleNamespace
    from mi_certify.runtime.fsm import MaskBox, Reason
    from mi_certify.verification.cosim.cocotb_sim import functional_coverage
    cfg = FsmConfig(4, 0, 3, 10, 3, 8)
    always = (Reason.HOLD, Reason.PROBE_FAULT, Reason.FALLBACK, Reason.RECOVER, Reason.COOLDOWN)
    rep = SimpleNamespace(cells=16, transitions={}, reasons={int(r): 5 for r in always})
    cov = functional_coverage(cfg, bytes([0x80] * 16), rep)["reasons"]                 # every cell: keep, confident
    assert (cov["seen"], cov["total"], cov["share"]) == (5, 5, 1.0)
    assert cov["impossible"] == ["PENDING", "SWITCH", "LOW_CONFIDENCE", "MASKED"]
    mixed = bytes([0x80, 0x81, 0x01] * 5 + [0x80])                                      # keep, merge, unsure
    forbid_1 = MaskBox("P", (0,), (1,), (4,), 0b1101)
    cov = functional_coverage(cfg, mixed, rep, (forbid_1,))["reasons"]
    assert (cov["seen"], cov["total"], cov["impossible"]) == (5, 9, [])
    cov = functional_coverage(FsmConfig(4, 0, 1, 0, 3, 8), mixed, rep, (MaskBox("P", (0,), (1,), (4,), 0b0011),))
    assert cov["reasons"]["impossible"] == ["PENDING", "COOLDOWN", "MASKED"]             # hysteresis 1, cooldown 0


def test_an_emitted_runtime_that_does_not_import_fails_the_cosimulation(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("class Controller:\n    def step_addr(self\n")   # a syntax error
    cfg = FsmConfig(2, 0, 1, 0, 1, 1)
    res = run_cosim(MONITOR, "sla_monitor", LutFsmArtefact.of_table(cfg, bytes([0x80, 0x81])), tmp_path / "w",
                    runtime_py=broken,
                    random_cycles=10)
    assert not res.passed and res.error.startswith("emitted Python runtime raised SyntaxError")


def test_monitor_rtl_agrees_with_the_python_monitor_every_cycle(tmp_path):
    res = monitor_cosim.run_monitor_cosim(REF_LIMITS, load_spec(REFERENCE_SLA).monitor, tmp_path, random_requests=400)
    assert res.passed, res.to_json()
    spec_cfg, stress = res.configs
    assert (spec_cfg["window"], spec_cfg["latency_statistic"], spec_cfg["accuracy_statistic"]) == (20, "p90", "mean")
    for c in res.configs:
        assert c["cycles"] > 3000 and c["mismatches"] == 0
        assert 0 < c["violations"] < c["verdicts"]          # both verdicts occur


def test_monitor_cosimulation_fails_when_the_expectation_is_altered(tmp_path):
    def alter(exp):
        i = next(k for k, e in enumerate(exp) if e[3])       # first verdict: flip its violation bit
        exp[i] = [exp[i][0] ^ 1] + exp[i][1:]
        return exp
    res = monitor_cosim.run_monitor_cosim(REF_LIMITS, MonitorConfig(4, "p50", "mean"), tmp_path, random_requests=100,
                                          alter=alter)
    assert not res.passed and all(c["mismatches"] >= 1 for c in res.configs)
    assert all(c["first_mismatch"]["rtl"]["violation"] != c["first_mismatch"]["reference"]["violation"]
               for c in res.configs)


def test_a_limit_wider_than_its_field_is_refused_not_packed_into_the_neighbours():
    """A helper's find: 131,072 in a 17-bit accuracy field wrapped to 0 and moved a bit into action 1's
    limit (3,324 cycles of wrong verdicts); sla.yaml's range never reaches it, a direct caller could."""
    from mi_certify.runtime.sla import monitor_parameters
    ok = CycleMonitorConfig((5, 9), (131_071, 500), MonitorConfig(3, "mean", "mean"), cyc_width=4, acc_width=17,
                            action_width=1)
    assert monitor_parameters(ok, 2)["ACC_LIMIT"] == (34, 500 << 17 | 131_071)
    for lat, acc, why in [((5, 9), (131_072, 500), "limit 131072 of action 0 does not fit 17 bits (0 .. 131071)"),
                          ((16, 9), (1, 500), "limit 16 of action 0 does not fit 4 bits (0 .. 15)"),
                          ((5, -1), (1, 500), "limit -1 of action 1 does not fit 4 bits")]:
        with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
            monitor_parameters(CycleMonitorConfig(lat, acc, MonitorConfig(3, "mean", "mean"), cyc_width=4,
                                                  acc_width=17, action_width=1), 2)


@pytest.mark.parametrize("window", [1, 2, 7])
def test_monitor_rtl_with_the_mean_on_both_metrics_agrees_with_the_python_monitor(tmp_path, window):
    """The mean's running difference (sum - limit * n, no multiplier) on the latency counter's width as
    well as the accuracy's: the windows the reference does not use, filling up, full, and emptied by
    another action (the stimulus switches actions)."""
    from mi_certify.runtime.sla import MonitorConfig
    res = monitor_cosim.run_monitor_cosim(REF_LIMITS, MonitorConfig(window, "mean", "mean"), tmp_path / "w",
                                          random_requests=400, seed=window)
    assert res.passed and [c["mismatches"] for c in res.configs] == [0, 0], res.to_json()
    assert res.configs[0]["accuracy_statistic"] == res.configs[0]["latency_statistic"] == "mean"
    assert all(0 < c["violations"] < c["verdicts"] for c in res.configs), res.to_json()   # both verdicts seen


@pytest.mark.parametrize("mutation", [
    ("violate_next = judged & (exceed ? (~d0[NW] | (&d0)) : ~d0[NW]);",           # rank: equality compliant
     "violate_next = judged & (exceed ? ~d0[NW] : (~d0[NW] & ~(d0 == {(NW + 1){1'b0}})));"),
    ("s = bm0 + val_w;", "s = bm0 + val_w + {{(EX_W - 1){1'b0}}, 1'b1};"),       # mean: equality a violation
    ("(inf | (ninf0 != old_inf) | ~s[EX_W-1])", "(inf | ~s[EX_W-1])"),               # mean: an older +infinity forgotten
    ("(full2 ? {EX_W{1'b0}} : lim_ext)", "(full2 ? lim_ext : lim_ext)"),             # mean: n counted when full
    ("n_same = n_win_any & (n_act == n_win_act);", "n_same = n_win_any;"),          # another action: no clear
    ("wire lat_inf   = abandoned | lat_sat;", "wire lat_inf   = lat_sat;"),
    ("n_lat_gt  = lat_gt | (cnt == lat_limit);", "n_lat_gt  = lat_gt;"),           # the limit never crossed
    ("3'b000, 3'b110, 3'b101: delta", "3'b000, 3'b101: delta"),                    # the oldest never leaves
    ("3'b100:                 delta", "3'b111:                 delta"),             # an exceeding value not counted
    # the threshold of one push too early: only while the window fills (window 4, p50: thresholds 1, 2, 2, 3)
    ("!= rank_threshold((k + 2 > WINDOW) ? WINDOW : k + 2));", "!= rank_threshold((k + 1 > WINDOW) ? WINDOW : k + 1));"),
    ("cs_carry[0] = 1'b1;", "cs_carry[0] = 1'b0;"),                                 # bm1 = bm0 + new - x0 - 1
])
def test_mutated_monitor_rtl_is_caught(tmp_path, monkeypatch, mutation):
    src = MONITOR.read_text()
    assert mutation[0] in src
    mutant = tmp_path / "sla_monitor.v"
    mutant.write_text(src.replace(mutation[0], mutation[1], 1))
    monkeypatch.setattr(monitor_cosim, "monitor_source", lambda: mutant)
    from mi_certify.runtime.sla import MonitorConfig
    res = monitor_cosim.run_monitor_cosim(REF_LIMITS, load_spec(REFERENCE_SLA).monitor, tmp_path / "w",
                                          random_requests=300)
    short = monitor_cosim.run_monitor_cosim(REF_LIMITS, MonitorConfig(4, "p50", "mean"), tmp_path / "w4",
                                            random_requests=300)
    assert not (res.passed and short.passed)
    assert sum(c["mismatches"] for c in res.configs + short.configs) > 0


def test_coverage_file_is_parsed_per_kind_and_hierarchy(tmp_path):
    f = tmp_path / "coverage.dat"
    pt = lambda page, h, n: f"C '\x01f\x02x.v\x01l\x021\x01page\x02{page}\x01h\x02{h}' {n}\n"  # noqa: E731
    f.write_text("# SystemC::Coverage-3\n" + pt("v_line/m", "TOP.mi_certify_tb.dut", 3) + pt("v_line/m", "TOP.mi_certify_tb.dut", 0)
                 + pt("v_toggle/m", "TOP.mi_certify_tb.dut", 1) + pt("v_branch/m", "TOP.mi_certify_tb.dut.sub", 0)
                 + pt("v_line/tb", "TOP.mi_certify_tb", 0))
    assert parse_coverage(f, "TOP.mi_certify_tb.dut") == {"line": {"points": 2, "hit": 1, "share": 0.5},
                                                          "toggle": {"points": 1, "hit": 1, "share": 1.0},
                                                          "branch": {"points": 1, "hit": 0, "share": 0.0}}


def test_coverage_below_a_threshold_or_not_measured_fails_with_a_clear_message():
    cfg = FsmConfig(2, 0, 1, 0, 1, 1)
    lut = bytes([0x80, 0x81, 0x01, 0x00])
    rep = SimReport(True, cycles=10, reasons={0: 5, 1: 0, 2: 3}, transitions={1: 2}, cells=3)
    code = (SimReport(True, cycles=10), {"line": {"points": 4, "hit": 3, "share": 0.75},
                                         "toggle": {"points": 2, "hit": 2, "share": 1.0},
                                         "branch": {"points": 2, "hit": 1, "share": 0.5}})
    out = assess(LutFsmArtefact.of_table(cfg, lut), rep, code, {"lut_cells": 0.7, "line": 0.8, "transitions": 0.5})
    assert out["summary"]["lut_cells"] == 0.75 and out["summary"]["transitions"] == 0.5
    assert out["errors"] == ["line coverage 0.7500 is below the threshold 0.8 (sla.yaml cosim.coverage.line)"]
    assert not out["passed"]
    out = assess(LutFsmArtefact.of_table(cfg, lut), rep, None, {"toggle": 0.1})
    assert out["errors"] == ["toggle coverage was not measured but sla.yaml cosim.coverage.toggle requires >= 0.1"]


def test_cosim_section_of_the_spec_is_validated(tmp_path):
    sla = tmp_path / "sla.yaml"
    sla.write_text(REFERENCE_SLA.read_text().split("\ncosim:")[0] + "\ncosim: {cycles: 500}\n")
    with pytest.raises(SpecError, match=r"cosim.cycles: 500 is less than the minimum of 10000"):
        load_spec(sla)
    sla.write_text(REFERENCE_SLA.read_text().split("\ncosim:")[0] + "\ncosim: {coverage: {lines: 0.5}}\n")
    with pytest.raises(SpecError, match=r"cosim.coverage.lines: unknown field"):
        load_spec(sla)
    assert load_spec(REFERENCE_SLA).cosim.cycles == 100_000


def test_the_directed_stimulus_switches_between_every_ordered_pair_of_active_actions():
    """Transition coverage must not rest on the random part: a certified-trained controller's build
    failed on coverage 0.9167 (int4 -> offload_cpu never taken) because the directed part only
    chained keep -> a1 -> a2 -> a3. With no random cycles at all, the reference FSM driven by the
    directed stimulus now takes all 12 ordered pairs of 4 actions."""
    from mi_certify.verification.cosim.cocotb_sim import expected_trace, make_stimulus
    cfg = FsmConfig(4, 0, 3, 10, 3, 8)
    lut = bytes([0x80 | t for t in (0, 1, 2, 3)] * 4)          # every action proposed confidently somewhere
    rows, directed = make_stimulus(cfg, lut, 0, seed=1)
    assert directed == len(rows)
    trace, disagreement = expected_trace(cfg, lut, rows)
    assert disagreement is None
    tokens = [t[0] for t in trace]
    pairs = {(a, b) for a, b in zip(tokens, tokens[1:]) if a != b}
    assert pairs == {(a, b) for a in range(4) for b in range(4) if a != b}


@pytest.mark.parametrize("mutation", [None, ("n_lat_sat = (cnt == CYC_INF - {{(CYC_W - 1){1'b0}}, 1'b1});",
                                             "n_lat_sat = (cnt == CYC_INF);")])   # the flag one cycle late
def test_a_request_done_at_the_saturated_count_is_infinite_under_a_latency_mean(tmp_path, mutation):
    """Done exactly 2^CYC_W - 1 cycles after its start, a request is +infinity (the counter saturated): a mean
    tells it from that finite count (max / pNN do not: both exceed). The build's stimulus (make_stimulus) ends
    requests at CYC_INF - 1 and CYC_INF + 3 only, and takes the latency's mean only when the spec does: a monitor
    whose saturation flag came one cycle late (its count wrapping to 0 once) passed every co-simulation."""
    from mi_certify.runtime.sla import monitor_parameters, parameter_text
    from mi_certify.verification.cosim.vector_sim import Port, VectorJob, run_icarus
    src = MONITOR
    if mutation:
        text = MONITOR.read_text()
        assert mutation[0] in text
        src = tmp_path / "sla_monitor.v"
        src.write_text(text.replace(mutation[0], mutation[1], 1))
    cfg = CycleMonitorConfig((40,), (None,), MonitorConfig(3, "mean", "max"), cyc_width=6, acc_width=4, action_width=1)
    rows = [[1, 0, 0, 0, 0, 0]] * 2
    for latency in (63, 1, 1, 62, 1, 64, 1, 63):            # CYC_INF = 63
        rows += [[0, 1, 0, 0, 0, 0]] + [[0, 0, 0, 0, 0, 0]] * (latency - 1) + [[0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0]]
    p = monitor_parameters(cfg, 1)
    job = VectorJob([src], "sla_monitor",
                    [Port("rst", 1), Port("req_start", 1), Port("req_action", 1), Port("req_done", 1),
                     Port("acc_loss", 4), Port("acc_unknown", 1)],
                    [Port("violation", 1), Port("lat_violation", 1), Port("acc_violation", 1),
                     Port("verdict_valid", 1), Port("samples", p["NW"]), Port("busy", 1), Port("proto_error", 1)],
                    rows, monitor_cosim.expected(cfg, rows), params=parameter_text(p))
    rep = run_icarus(job, tmp_path / "w")
    if mutation:
        assert not rep.ok and rep.mismatches > 0
    else:
        assert rep.ok, rep
        # [63, 1] is a violation (+infinity), finite it would be compliant (mean 32 <= 40); [1, 1, 62] is compliant
        assert [e[0] for e in job.expected if e[3]] == [1, 1, 1, 0, 0, 1, 1, 1]
