"""Micro-benchmark probes and the background probe sampler (runtime/probes.py; issue 20, item 1)."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from mi_certify.runtime.probes import (FeatureMap, HardwareProbe, MergedProbe, MicrobenchProbe, ProbeSample,
                                       Reading, SampledProbe, last_level_cache_bytes)


class Counting(HardwareProbe):
    """A probe whose one quantity counts its reads; ``block`` makes reads after the first wait."""

    def __init__(self, fail_after: int | None = None):
        self.n = 0
        self.fail_after = fail_after
        self.block = threading.Event()
        self.closed = False

    def read(self) -> ProbeSample:
        if self.n >= 1 and self.block.is_set():
            time.sleep(0.5)
        if self.fail_after is not None and self.n >= self.fail_after:
            raise RuntimeError("sensor gone")
        self.n += 1
        t = time.monotonic_ns()
        return ProbeSample({"compute_util": Reading("compute_util", float(self.n), "ratio", t, "count")}, t, t)

    def close(self) -> None:
        self.closed = True


def test_the_sampler_returns_the_latest_reading_with_its_age_and_no_read_before_the_first():
    inner = Counting()
    p = SampledProbe([inner], period_s=0.01, max_age_s=0.2)
    try:
        assert p.wait_first(5.0)
        time.sleep(0.1)
        s = p.read()
        r = s.readings["compute_util"]
        assert r.value is not None and r.value >= 3   # sampled about every 10 ms
        assert 0 <= s.t_mono_ns - r.t_mono_ns <= 0.2e9
        assert len(p.cost_ns) >= 3 and all(c >= 0 for c in p.cost_ns)
    finally:
        p.close()
    assert inner.closed
    # after close: every reading is a fault, with the reason
    r = p.read().readings["compute_util"]
    assert r.value is None and "stopped" in r.error


def test_a_stale_reading_is_a_probe_fault_of_the_controller():
    inner = Counting()
    p = SampledProbe([inner], period_s=0.01, max_age_s=0.05)
    try:
        assert p.wait_first(5.0)
        inner.block.set()          # the next sampling round takes 0.5 s
        time.sleep(0.2)
        r = p.read().readings["compute_util"]
        assert r.value is None and r.error.startswith("stale: taken ") and "(limit 50.0 ms)" in r.error
        values, errors = FeatureMap.build(["compute_util"])(p.read())
        assert values == [None] and "stale" in errors[0]
    finally:
        p.close()


def test_a_sampler_whose_probe_raises_reports_every_reading_unavailable():
    p = SampledProbe([Counting(fail_after=2)], period_s=0.005)
    try:
        assert p.wait_first(5.0)
        deadline = time.monotonic() + 10.0   # the third round raises (about 10 ms later; longer on a busy machine)
        while p.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        r = p.read().readings["compute_util"]
        assert r.value is None and r.error == "sampler stopped: RuntimeError: sensor gone"
    finally:
        p.close()
    with pytest.raises(ValueError, match="must be positive"):
        SampledProbe([Counting()], period_s=0)


class _Exits(Counting):
    """A probe whose third read ends the sampler thread by an exception no ``except Exception`` catches."""

    def read(self) -> ProbeSample:
        if self.n >= 2:
            raise SystemExit
        return super().read()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_sampler_thread_that_ended_is_never_read_as_fresh():
    """read() serves the published sample without asking whether the sampler thread is alive (the thread
    ends the sample's freshness on its way out): a thread ended by SystemExit, whose sample is young
    enough to be fresh, gives unavailable readings, as after close()."""
    p = SampledProbe([_Exits()], period_s=0.005, max_age_s=60.0)
    try:
        assert p.wait_first(5.0)
        p._thread.join(10.0)
        assert not p._thread.is_alive() and p.error is None
        r = p.read().readings["compute_util"]
        assert r.value is None and "stopped" in r.error
    finally:
        p.close()


def test_microbenchmarks_measure_bandwidth_and_a_chase_that_slows_when_the_buffer_leaves_the_cache():
    assert last_level_cache_bytes() >= 256 << 10
    small = MicrobenchProbe(copy_bytes=8 << 20, chase_bytes=16 << 10, chase_steps=1 << 16)
    big = MicrobenchProbe(copy_bytes=64 << 20, chase_bytes=128 << 20, chase_steps=1 << 16)
    s, b = small.read(), big.read()
    for sample in (s, b):
        assert set(sample.readings) == {"mem_bw_avail", "cache_chase_ns"}
        bw = sample.readings["mem_bw_avail"]
        assert bw.unit == "B/s" and 1e8 < bw.value < 1e13, bw
        assert sample.readings["cache_chase_ns"].unit == "ns"
    lat_small = min(small.read().readings["cache_chase_ns"].value for _ in range(3))
    lat_big = min(big.read().readings["cache_chase_ns"].value for _ in range(3))
    # an L1-resident chain against one 8x larger than any L3 here: DRAM latency is > 3x L1's
    assert 0.1 < lat_small < 50 and lat_big > 3 * lat_small, (lat_small, lat_big)


class Fixed(HardwareProbe):
    def __init__(self, **values):
        self.values, self.closed = values, False

    def read(self) -> ProbeSample:
        t = time.monotonic_ns()
        return ProbeSample({q: Reading(q, v, "ratio", t, "fixed") for q, v in self.values.items()}, t, t)

    def close(self) -> None:
        self.closed = True


def test_merged_probe_reads_every_probe_in_order_and_closes_them():
    a, b = Fixed(compute_util=0.25, temperature=40.0), Fixed(temperature=55.0, mem_bw_avail=2e10)
    with MergedProbe([a, b]) as m:
        s = m.read()
        assert {q: r.value for q, r in s.readings.items()} == {"compute_util": 0.25, "temperature": 55.0,
                                                               "mem_bw_avail": 2e10}   # the later probe wins
        fm = FeatureMap.build(["mem_bw_avail_gbs"])
        assert fm.sources == ("mem_bw_avail/1e9",) and fm(s) == ([20.0], [None])   # the reference's GB/s input
    assert a.closed and b.closed


def test_the_sampler_shares_one_read_only_mapping_while_every_reading_is_fresh():
    """Between samples every read returns the same read-only readings (ControlLoop derives a sample's
    features and JSON once by that identity); a stale reading gives a new mapping that says so."""
    inner = Counting()
    p = SampledProbe([inner], period_s=0.01, max_age_s=0.2)
    try:
        assert p.wait_first(5.0)
        inner.block.set()   # the rounds from now on take 0.5 s: the sample stays the latest, then goes stale
        time.sleep(0.02)    # a round that began before has published
        a, b = p.read(), p.read()
        assert a.readings is b.readings and a.t_mono_ns <= b.t_mono_ns
        for change in (lambda r: r.__setitem__("compute_util", None), lambda r: r.pop("compute_util"),
                       lambda r: r.update({}), lambda r: r.clear()):
            with pytest.raises(TypeError):
                change(a.readings)
        import copy
        import pickle
        for twin in (pickle.loads(pickle.dumps(a)), copy.deepcopy(a), copy.copy(a)):   # as a dict sample does
            assert twin == a and type(twin.readings) is type(a.readings)
        assert dataclasses.asdict(a)["readings"]["compute_util"]["value"] == a.readings["compute_util"].value
        assert a.readings.copy() == dict(a.readings) and type(a.readings.copy()) is dict
        time.sleep(0.3)
        c = p.read()
        assert c.readings is not a.readings and c.readings["compute_util"].error.startswith("stale: taken ")
        assert a.readings["compute_util"].value is not None   # what was returned before is unchanged
    finally:
        p.close()
    assert p.read().readings is not a.readings


def test_the_fast_record_maker_builds_the_same_frozen_records_and_refuses_what_it_cannot_serve():
    from mi_certify.runtime.frozen import maker
    from mi_certify.runtime.live import Decision
    from mi_certify.runtime.sla import SlaVerdict
    r = Reading("compute_util", 0.5, "ratio", 7, "x")
    args = [(ProbeSample, ({"compute_util": r}, 1, 2)),
            (SlaVerdict, (1, True, False, True, 2.5, 0.0, 3)),
            (Decision, (None, (0.5,), (None,), 12, False, 1, True, False, (0,) * 7, (1,) * 7, 1, "SWITCH")),
            (Decision, (None, (0.5,), (None,), 12, False, 1, True, False, (0,) * 7, (1,) * 7, 1, "SWITCH", {"cmd": 0}))]
    for cls, a in args:
        fast, slow = maker(cls)(*a), cls(*a)
        assert type(fast) is cls and fast == slow and repr(fast) == repr(slow)
        assert dataclasses.astuple(fast) == dataclasses.astuple(slow)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(fast, dataclasses.fields(cls)[0].name, None)
    short = maker(Decision)(*args[2][1])
    assert short.operator is None and vars(short) == vars(Decision(*args[2][1]))   # a field left out: its default
    with pytest.raises(TypeError):
        maker(Decision)(*args[3][1], "one too many")
    with pytest.raises(TypeError):
        maker(SlaVerdict)(1, True)

    @dataclasses.dataclass(frozen=True)
    class WithPost:
        a: int

        def __post_init__(self):
            pass

    @dataclasses.dataclass(frozen=True)
    class WithFactory:
        a: list = dataclasses.field(default_factory=list)

    for cls in (WithPost, WithFactory, Reading.__class__):
        with pytest.raises(TypeError):
            maker(cls)
