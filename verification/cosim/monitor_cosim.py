"""Co-simulation of the hardware SLA monitor (hdl/sla_monitor.v) against the Python reference.

The reference is :class:`mi_certify.runtime.sla.CycleSlaMonitor` (request strobes, cycle
counter) over :class:`~mi_certify.runtime.sla.SlaMonitor` (windows and verdicts, the
normative semantics of docs/runtime.md). Stimulus: directed sequences (latency and
accuracy at limit - 1, limit, limit + 1 for every judged action; window fill and roll-over;
an action change empties the window; reset in the middle of a window and of a request;
an abandoned request; done without a request; an unknown action; back-to-back requests;
a saturated counter) and random request streams. Every output is compared every cycle.

Latency limits in co-simulation are small cycle counts (the real ones, millions of cycles
at the FPGA clock, are the same comparator with other parameter values); window length,
statistics and accuracy limits are the spec's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from mi_certify.runtime.sla import (ACC_WIDTH, CycleMonitorConfig, CycleSlaMonitor, MonitorConfig, SlaLimits,
                                    accuracy_limit_fixed, monitor_parameters, parameter_text)

from mi_certify.verification.cosim.vector_sim import Port, SimReport, VectorJob, run_icarus

#: hdl/sla_monitor.v, shipped as package data of mi_certify.hdl.
def monitor_source() -> Path:
    from importlib import resources
    return Path(str(resources.files("mi_certify.hdl") / "sla_monitor.v"))


INPUTS = ("rst", "req_start", "req_action", "req_done", "acc_loss", "acc_unknown")


def make_stimulus(cfg: CycleMonitorConfig, n_actions: int, random_requests: int, seed: int) -> list[list[int]]:
    """Rows [rst, req_start, req_action, req_done, acc_loss, acc_unknown], one per cycle."""
    rng = random.Random(seed)
    rows: list[list[int]] = []
    acc_max = (1 << cfg.acc_width) - 1
    cyc_inf = (1 << cfg.cyc_width) - 1
    W = cfg.monitor.window

    def idle(n=1, rst=0):
        rows.extend([rst, 0, 0, 0, 0, 0] for _ in range(n))

    def request(action, latency, acc=0, unknown=0, gap=1, back_to_back=False):
        """start, latency - 1 busy cycles, done (with acc); back_to_back: the next start shares the done row."""
        if back_to_back and rows and rows[-1][3] == 1 and rows[-1][1] == 0:
            rows[-1][1], rows[-1][2] = 1, action
        else:
            idle(gap)
            rows.append([0, 1, action, 0, 0, 0])
        idle(latency - 1)
        rows.append([0, 0, 0, 1, min(acc, acc_max), unknown])

    def near(lim, d):
        return max(1, (lim if lim is not None else 4) + d)

    def acc_near(lim, d):
        return max(0, (lim if lim is not None else 0) + d)

    idle(2, rst=1)
    for a in range(n_actions):                                  # limit - 1, limit, limit + 1
        lat, acc = cfg.lat_limits[a], cfg.acc_limits[a]
        for d in (-1, 0, 1):
            idle(1, rst=1)
            request(a, near(lat, d), acc_near(acc, -1))
            request(a, near(lat, -1), acc_near(acc, d))
        idle(1, rst=1)
        for k in range(W + 2):                                  # fill, roll over, then recover
            request(a, near(lat, 1 if k % 3 == 0 else -1), acc_near(acc, 1 if k % 4 == 1 else 0))
        for _ in range(W + 1):
            request(a, near(lat, 0), acc_near(acc, 0), back_to_back=True)
        request((a + 1) % n_actions, near(cfg.lat_limits[(a + 1) % n_actions], 0))   # new action: empty window
        request(a, near(lat, 5), acc_near(acc, 0))
        request(a, near(lat, 0), acc_near(acc, 0), unknown=1)      # missing accuracy: +inf
    request(0, 3)                                               # reset in the middle of a window and a request
    rows.append([0, 1, 0, 0, 0, 0])
    idle(1)
    idle(1, rst=1)
    request(0, 2)
    rows.append([0, 1, 1, 0, 0, 0])                            # abandoned request: +inf
    idle(2)
    rows.append([0, 1, 1, 0, 0, 0])
    idle(1)
    rows.append([0, 0, 0, 1, 0, 0])
    rows.append([0, 0, 0, 1, 0, 0])                            # done without a request
    if n_actions < (1 << cfg.action_width):
        request(n_actions, 1)                                  # unknown action: judged against 0
    if cyc_inf < 5000:
        request(0, cyc_inf + 3)                                # counter saturates: +inf
        request(0, cyc_inf - 1)
    for _ in range(random_requests):
        r = rng.random()
        a = rng.randrange(n_actions) if rng.random() < 0.97 else rng.randrange(1 << cfg.action_width)
        if rng.random() < 0.7:                                 # mostly stay on one action: windows fill
            a = rows_action(rows, a)
        lat = cfg.lat_limits[a] if a < n_actions else None
        acc = cfg.acc_limits[a] if a < n_actions else None
        latency = near(lat, rng.randint(-3, 3)) if r < 0.8 else rng.randint(1, 3 * near(lat, 0))
        request(a, latency, acc_near(acc, rng.randint(-2, 2)) if rng.random() < 0.8 else rng.randrange(acc_max + 1),
                unknown=int(rng.random() < 0.02), gap=rng.choice((0, 0, 1, 1, 2, 5)),
                back_to_back=rng.random() < 0.3)
        if rng.random() < 0.01:
            rows.append([0, 1, rng.randrange(n_actions), 0, 0, 0])  # abandoned
        if rng.random() < 0.005:
            idle(1, rst=1)
        if rng.random() < 0.005:
            rows.append([0, 0, 0, 1, 0, 0])
    idle(2)
    return rows


def rows_action(rows, default):
    """The action of the last request started (keeps random streams on one action for a while)."""
    for r in reversed(rows):
        if r[1]:
            return r[2]
    return default


def expected(cfg: CycleMonitorConfig, stimulus: list[list[int]]) -> list[list[int]]:
    model = CycleSlaMonitor(cfg)
    return [[out[k] for k in CycleSlaMonitor.OUTPUTS] for out in (model.clock(*row) for row in stimulus)]


@dataclass
class MonitorCosimResult:
    passed: bool
    configs: list

    def to_json(self) -> dict:
        return {"passed": self.passed, "configs": self.configs}


def cosim_configs(limits: list[SlaLimits], monitor: MonitorConfig) -> list[CycleMonitorConfig]:
    """The spec's window, statistics and accuracy limits with small latency limits (3 + 4 * token
    cycles); and a stress configuration (window 3, max latency, mean accuracy, 6-bit counter)."""
    n = len(limits)
    aw = max(1, (n - 1).bit_length())
    lat = tuple(None if lim.latency_ms is None else 3 + 4 * i for i, lim in enumerate(limits))
    acc = tuple(None if lim.accuracy_loss_pct is None else accuracy_limit_fixed(lim.accuracy_loss_pct)
                for lim in limits)
    top = max([x for x in lat if x is not None] or [1])
    spec_cfg = CycleMonitorConfig(lat, acc, monitor, max(2, (monitor.window * top + 1).bit_length() + 1), ACC_WIDTH, aw)
    stress = CycleMonitorConfig(tuple(3 + 2 * i for i in range(n)), tuple(1500 + 100 * i for i in range(n)),
                                MonitorConfig(3, "max", "mean"), 6, ACC_WIDTH, aw + (1 if n == 1 << aw else 0))
    return [spec_cfg, stress]


def run_monitor_cosim(limits: list[SlaLimits], monitor: MonitorConfig, workdir: Path, random_requests: int = 3000,
                      seed: int = 1, alter=None) -> MonitorCosimResult:
    """Co-simulate hdl/sla_monitor.v in each of :func:`cosim_configs` against the reference.

    ``alter``: optional callable(expected) -> expected (tests: a wrong expectation must fail)."""
    out, ok = [], True
    n = len(limits)
    for i, cfg in enumerate(cosim_configs(limits, monitor)):
        stim = make_stimulus(cfg, n, random_requests, seed + i)
        exp = expected(cfg, stim)
        if alter is not None:
            exp = alter(exp)
        p = monitor_parameters(cfg, n)
        outs = [Port("violation", 1), Port("lat_violation", 1), Port("acc_violation", 1), Port("verdict_valid", 1),
                Port("samples", p["NW"]), Port("busy", 1), Port("proto_error", 1)]
        ins = [Port("rst", 1), Port("req_start", 1), Port("req_action", cfg.action_width), Port("req_done", 1),
               Port("acc_loss", cfg.acc_width), Port("acc_unknown", 1)]
        job = VectorJob([monitor_source()], "sla_monitor", ins, outs, stim, exp, params=parameter_text(p))
        rep: SimReport = run_icarus(job, workdir / f"monitor{i}")
        ok = ok and rep.ok
        out.append(config_record(cfg, exp, rep))
    return MonitorCosimResult(ok, out)


def config_record(cfg: CycleMonitorConfig, exp: list[list[int]], rep: SimReport) -> dict:
    """One configuration's record of monitor_cosim.json: the configuration, the expected verdicts
    and violations (the Python reference), and what the simulator reported (``rep``)."""
    return {"window": cfg.monitor.window, "latency_statistic": cfg.monitor.latency_statistic,
            "accuracy_statistic": cfg.monitor.accuracy_statistic, "cycles": rep.cycles,
            "verdicts": sum(e[3] for e in exp), "violations": sum(e[0] & e[3] for e in exp),
            "mismatches": rep.mismatches, "first_mismatch": rep.first_mismatch, "error": rep.error,
            "passed": rep.ok}


def passing_records(limits: list[SlaLimits], monitor: MonitorConfig, random_requests: int, seed: int) -> dict:
    """monitor_cosim.json as :func:`run_monitor_cosim` writes it for a run in which the RTL agrees
    with the reference on every cycle, made without a simulator (the checker compares a bundle's
    file with it: every configuration, stimulus length and expected verdict re-derived)."""
    n = len(limits)
    out = []
    for i, cfg in enumerate(cosim_configs(limits, monitor)):
        stim = make_stimulus(cfg, n, random_requests, seed + i)
        out.append(config_record(cfg, expected(cfg, stim), SimReport(True, cycles=len(stim))))
    return MonitorCosimResult(True, out).to_json()
