"""SLA monitor semantics (docs/runtime.md) and the sla.yaml monitor section."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REFERENCE_SLA
from mi_certify.generator.core.errors import SpecError
from mi_certify.generator.core.spec import load_spec
from mi_certify.runtime.sla import MonitorConfig, SlaLimits, SlaMonitor, exceeds, window_statistic

LIMITS = [SlaLimits(50.0, 0.0), SlaLimits(30.0, 1.5), SlaLimits(None, None)]


def test_default_monitor_judges_every_request_alone():
    m = SlaMonitor(LIMITS)
    assert [m.observe(0, x, 0.0).violation for x in (49.9, 50.0, 50.1, 10.0)] == [False, False, True, False]
    assert m.observe(0, 10.0, 0.01).accuracy is True  # limit 0.0: any loss violates
    assert m.observe(2, 1e9, 100.0).violation is False  # no limits: never judged


@pytest.mark.parametrize("values,stat,expected", [
    ([3.0, 1.0, 2.0], "max", 3.0),
    ([3.0, 1.0, 2.0], "mean", 2.0),
    ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], "p90", 9.0),   # rank ceil(9.0) = 9
    ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], "p91", 10.0),  # rank ceil(9.1) = 10
    ([5.0, 1.0], "p50", 1.0),                                           # rank ceil(1.0) = 1
    ([5.0], "p1", 5.0),
    ([1.0, math.inf], "mean", math.inf),
])
def test_window_statistics_are_nearest_rank_and_exact(values, stat, expected):
    assert window_statistic(values, stat) == expected


def test_mean_is_compared_exactly_not_in_floating_point():
    # 0.1 + 0.2 + 0.3 rounds to 0.6000000000000001 in floats; the exact mean of the three
    # binary values is still below the float 0.2 (= 0.200000000000000011...)
    vals = [0.1, 0.2, 0.3]
    assert sum(vals) / 3 > 0.2
    assert exceeds(vals, "mean", 0.2) is False


def test_p90_over_a_window_tolerates_one_slow_request_in_twenty():
    m = SlaMonitor(LIMITS, MonitorConfig(window=20, latency_statistic="p90", accuracy_statistic="mean"))
    verdicts = [m.observe(1, 10.0, 0.0).violation for _ in range(19)]
    assert not any(verdicts)
    assert m.observe(1, 500.0, 0.0).violation is False     # 1 of 20 above: p90 is still 10 ms
    assert m.observe(1, 500.0, 0.0).violation is False     # 2 of 20 above: rank 18 is still 10 ms
    v = m.observe(1, 500.0, 0.0)                           # 3 of 20 above: rank 18 is 500 ms
    assert v.violation and v.latency and not v.accuracy and v.samples == 20 and v.latency_ms == 500.0


def test_window_holds_one_action_and_a_new_action_empties_it():
    m = SlaMonitor(LIMITS, MonitorConfig(window=4, latency_statistic="max"))
    assert m.observe(1, 100.0, 0.0).violation            # int4-like action, 100 > 30
    v = m.observe(0, 40.0, 0.0)                           # another action: window restarts
    assert not v.violation and v.samples == 1
    assert m.observe(0, 40.0, 0.0).samples == 2
    m.reset()
    assert m.violation is False


def test_missing_or_non_finite_measurements_fail_closed():
    m = SlaMonitor(LIMITS, MonitorConfig(window=3, latency_statistic="mean"))
    assert m.observe(0, None, 0.0).violation
    assert m.observe(0, float("nan"), 0.0).latency_ms == math.inf
    assert SlaMonitor(LIMITS).observe(0, 1.0, "n/a").accuracy is True


def test_bad_monitor_config_and_action_are_refused():
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        MonitorConfig(window=0)
    with pytest.raises(ValueError, match="unknown statistic 'median'"):
        MonitorConfig(latency_statistic="median")
    with pytest.raises(ValueError, match="action 3 is not a token 0..2"):
        SlaMonitor(LIMITS).observe(3, 1.0, 0.0)


def _spec_with_monitor(tmp_path, monitor):
    data = yaml.safe_load(REFERENCE_SLA.read_text())
    if monitor is None:
        data.pop("monitor", None)
    else:
        data["monitor"] = monitor
    p = tmp_path / "sla.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def test_monitor_section_is_optional_with_safe_defaults(tmp_path):
    assert load_spec(_spec_with_monitor(tmp_path, None)).monitor == MonitorConfig(1, "max", "max")
    assert load_spec(REFERENCE_SLA).monitor == MonitorConfig(20, "p90", "mean")


@pytest.mark.parametrize("monitor,where,reason", [
    ({"window": 0}, "monitor.window", "less than the minimum of 1"),
    ({"window": 5000}, "monitor.window", "greater than the maximum of 4096"),
    ({"latency_statistic": "p100"}, "monitor.latency_statistic", "p100 is not a statistic"),
    ({"accuracy_statistic": "median"}, "monitor.accuracy_statistic", "median is not a statistic"),
    ({"windows": 3}, "monitor.windows", "unknown field"),
])
def test_bad_monitor_section_names_file_and_field(tmp_path, monitor, where, reason):
    p = _spec_with_monitor(tmp_path, monitor)
    with pytest.raises(SpecError) as exc:
        load_spec(p)
    assert str(exc.value).startswith(f"{p}: {where}: ") and reason in str(exc.value), str(exc.value)


def test_the_integer_exact_mean_agrees_with_fractions_on_every_kind_of_float():
    from fractions import Fraction

    import numpy as np
    rng = np.random.default_rng(5)
    kinds = [lambda: float(rng.uniform(0, 100)), lambda: float(rng.uniform(-1, 1)),
             lambda: float(np.float64(5e-324) * int(rng.integers(1, 1000))),   # subnormals
             lambda: float(rng.uniform(0, 1) * 2.0 ** int(rng.integers(-1000, 1000))), lambda: 0.1, lambda: 0.2]
    for trial in range(300):
        values = [kinds[int(rng.integers(len(kinds)))]() for _ in range(int(rng.integers(1, 25)))]
        exact = sum(map(Fraction, values))
        for limit in (exact / len(values), float(exact / len(values)), 30, 0.1, values[0]):
            want = exact > Fraction(limit) * len(values)
            assert exceeds(values, "mean", limit) == want, (values, limit)
        assert window_statistic(values, "mean") == float(exact / len(values))


_measures = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.none(),
                      st.floats(min_value=0, max_value=100), st.integers(-5, 60), st.sampled_from([0.1, 0.2, 5e-324]))


@settings(max_examples=300, deadline=None)
@given(window=st.integers(1, 6), lat_stat=st.sampled_from(["max", "mean", "p50", "p90", "p1"]),
       acc_stat=st.sampled_from(["max", "mean", "p75"]),
       limits=st.lists(st.tuples(st.one_of(st.none(), st.floats(0, 60), st.integers(0, 60)),
                                 st.one_of(st.none(), st.floats(0, 2), st.just(0))), min_size=1, max_size=3),
       data=st.data())
def test_the_running_window_gives_the_verdicts_of_the_window_definition(window, lat_stat, acc_stat, limits, data):
    """SlaMonitor keeps its windows (and a mean's exact sum) as measurements come and go; its verdicts
    and statistics equal docs/runtime.md's definition applied to the window from scratch (Fractions)."""
    from fractions import Fraction

    def judge(values, stat, limit):
        if stat == "mean":
            if any(math.isinf(v) for v in values):
                return limit is not None, math.inf
            mean = sum(map(Fraction, values)) / len(values)
            return limit is not None and mean > Fraction(limit), float(mean)
        rank = len(values) if stat == "max" else max(1, math.ceil(int(stat[1:]) * len(values) / 100))
        x = sorted(values)[rank - 1]
        return limit is not None and Fraction(x) > Fraction(limit) if math.isfinite(x) else limit is not None, x

    def measure(x):
        return x if isinstance(x, (int, float)) and math.isfinite(x) else math.inf

    lims = [SlaLimits(a, b) for a, b in limits]
    m = SlaMonitor(lims, MonitorConfig(window, lat_stat, acc_stat))
    lat_w, acc_w, act = [], [], None
    for a, lat, acc in data.draw(st.lists(st.tuples(st.integers(0, len(lims) - 1), _measures, _measures), max_size=25)):
        if a != act:
            lat_w, acc_w, act = [], [], a
        lat_w, acc_w = (lat_w + [measure(lat)])[-window:], (acc_w + [measure(acc)])[-window:]
        v = m.observe(a, lat, acc)
        lb, ls = judge(lat_w, lat_stat, lims[a].latency_ms)
        ab, as_ = judge(acc_w, acc_stat, lims[a].accuracy_loss_pct)
        assert (v.latency, v.accuracy, v.violation, v.samples) == (lb, ab, lb or ab, len(lat_w))
        assert v.latency_ms == ls and v.accuracy_loss_pct == as_
        assert m.violation is v.violation


def test_limits_replaced_after_construction_are_the_ones_judged():
    m = SlaMonitor([SlaLimits(10.0, None)], MonitorConfig(3, "mean", "max"))
    assert not m.observe(0, 5.0, 0.0).latency
    m.limits = (SlaLimits(1.0, None),)
    assert m.observe(0, 5.0, 0.0).latency and m.observe(0, 5, 0.0).latency
    m.limits = (SlaLimits(50, None),)
    assert not m.observe(0, 5.0, 0.0).latency


def test_the_verdicts_are_those_of_the_monitor_before_its_one_call_windows():
    """The monitor's verdicts (every field, repr: the sign of a zero statistic included) and its
    ``violation`` on 20,000 seeded observations over five configurations (windows 1-20; max, mean, p1,
    p50, p90, p99; limits float, int and none; -0.0 and 0.0, subnormals, values a rounding step either
    side of a limit, inf, NaN, None; actions changing; resets) hash to what the monitor gave before
    ``_Window.push`` replaced its add-then-judge calls (commit f1b183b)."""
    import hashlib
    import random

    rng = random.Random(1)
    lines = []
    for cfg in [MonitorConfig(20, "p90", "mean"), MonitorConfig(1, "max", "max"), MonitorConfig(5, "max", "p50"),
                MonitorConfig(7, "mean", "p1"), MonitorConfig(3, "p99", "mean")]:
        lim = [SlaLimits(10.0, 1.0), SlaLimits(None, 2), SlaLimits(3, None), SlaLimits(0.1, 0.5)]
        mon = SlaMonitor(lim, cfg)
        vals = [0.0, -0.0, 1.0, 10.0, 10.000000000000002, 9.999999999999998, math.inf, math.nan, None, 3, 1e-320, 5.5]
        for i in range(4000):
            a = rng.choice([0, 0, 0, 1, 2, 3]) if rng.random() < 0.1 else (i // 50) % 4
            if rng.random() < 0.002:
                mon.reset()
            x = rng.choice(vals) if rng.random() < 0.5 else rng.uniform(0, 20)
            y = rng.choice(vals) if rng.random() < 0.5 else rng.uniform(0, 3)
            v = mon.observe(a, x, y)
            lines.append(repr(v) + repr(mon.violation))
    text = "\n".join(lines)
    assert "latency_ms=-0.0" in text and "latency_ms=inf" in text and "violation=True" in text
    assert hashlib.sha256(text.encode()).hexdigest() == \
        "036b9779e4ced07c848d258e4c6807604a9890af41c0cae4b18eb37de86e6467"
