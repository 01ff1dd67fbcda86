"""Hardware probes: what the controller reads before each request.

A probe returns a :class:`ProbeSample`: one :class:`Reading` per quantity, each with
a value in a fixed unit, a monotonic timestamp and its source, or ``value=None``
with the reason it is unavailable. Reading a probe never raises: a sensor that is
missing or fails is an unavailable reading, which the feature map turns into a
probe fault of the controller (rule 1 of docs/fsm.md), never an exception in the
control loop.

Quantities (name, unit):

=====================  =======  ==============================================
compute_util           ratio    busy fraction of the compute device since the last read
mem_bw_used            B/s      memory bandwidth used since the last read
mem_bw_peak            B/s      peak memory bandwidth (configured; no kernel interface)
cache_miss_rate.l1d    ratio    L1 data-cache read misses / read accesses
cache_miss_rate.llc    ratio    last-level cache misses / references
temperature            degC     hottest thermal sensor
free_memory            B        memory available to new work (MemAvailable)
mem_bw_avail           B/s      memory bandwidth a streaming copy gets now (micro-benchmark)
cache_chase_ns         ns       latency of one dependent load over a last-level-cache-sized buffer
=====================  =======  ==============================================

:class:`MicrobenchProbe` measures the last two by running small benchmarks (what the
memory system gives this process now, under whatever else runs); :class:`SampledProbe`
runs any probes in a background thread at a set rate, so a request pays for reading the
latest sample, not for taking it, and a sample older than its limit is a probe fault.

:class:`LinuxProbe` reads /proc (through psutil), /sys thermal sensors (psutil)
and hardware perf events (``perf_event_open``, counting this process and its
threads) where the kernel permits them. :class:`TraceProbe` replays a CSV.
:class:`FeatureMap` turns a sample into the controller's inputs.
"""

from __future__ import annotations

import csv
import ctypes
import math
import os
import re
import struct
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from .frozen import maker

__all__ = ["QUANTITIES", "FeatureMap", "HardwareProbe", "LinuxProbe", "MergedProbe", "MicrobenchProbe", "ProbeSample",
           "Reading", "SampledProbe", "TraceProbe"]

#: Quantity name -> unit.
QUANTITIES = {
    "compute_util": "ratio",
    "mem_bw_used": "B/s",
    "mem_bw_peak": "B/s",
    "cache_miss_rate.l1d": "ratio",
    "cache_miss_rate.llc": "ratio",
    "temperature": "degC",
    "free_memory": "B",
    "mem_bw_avail": "B/s",
    "cache_chase_ns": "ns",
}


@dataclass(frozen=True)
class Reading:
    """One reading: ``value`` in ``unit`` at monotonic time ``t_mono_ns``, or ``value=None``
    and ``error`` saying why it is unavailable. ``source`` names where it came from."""

    quantity: str
    value: float | None
    unit: str
    t_mono_ns: int
    source: str
    error: str | None = None

    @property
    def available(self) -> bool:
        return self.value is not None

    def to_json(self) -> list:
        """Compact form for the audit log: [value or null, unit, source, error or null]."""
        v = self.value
        if isinstance(v, float) and not math.isfinite(v):
            v = repr(v)
        return [v, self.unit, self.source, self.error]


@dataclass(frozen=True)
class ProbeSample:
    """All readings of one probe read, by quantity name, and the wall/monotonic time of the read.
    ``readings`` is read-only for the caller (a :class:`SampledProbe` shares one mapping between reads)."""

    readings: Mapping[str, Reading]
    t_mono_ns: int
    t_wall_ns: int

    def value(self, quantity: str) -> float | None:
        r = self.readings.get(quantity)
        return None if r is None else r.value

    def to_json(self) -> dict:
        return {q: r.to_json() for q, r in sorted(self.readings.items())}


_probe_sample = maker(ProbeSample)   # ProbeSample(...) on the hot path (runtime/frozen.py)


class SharedReadings(dict):
    """The readings of one :class:`SampledProbe` sample, returned by every read while they are fresh: a
    dict that refuses changes (TypeError), since every holder shares it. Pickles, copies and deep-copies
    as itself; ``copy()`` gives a plain dict."""

    __slots__ = ()

    def _refuse(self, *args, **kwargs):
        raise TypeError("the readings of a sampled probe are shared between reads: read-only (copy() them)")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):
        return type(self), (dict(self),)

    def copy(self) -> dict:
        return dict(self)


def unavailable(quantity: str, source: str, error: str, t_mono_ns: int | None = None) -> Reading:
    return Reading(quantity, None, QUANTITIES.get(quantity, ""), t_mono_ns or time.monotonic_ns(), source, error)


class HardwareProbe(ABC):
    """Interface of every probe. ``read()`` never raises; ``close()`` releases resources."""

    #: True when a ``readings`` mapping this probe returned never changes and a read returns the same
    #: mapping object only when every reading in it is still what the probe reports now (then a caller
    #: may keep what it derived from a sample by the mapping's identity: ControlLoop does). Only
    #: :class:`SampledProbe` says so; a probe that may reuse or change its mapping must leave it False.
    shares_readings: bool = False

    @abstractmethod
    def read(self) -> ProbeSample:
        """One sample of every quantity the probe offers (unavailable ones with their reason)."""

    def close(self) -> None:  # pragma: no cover - default: nothing to release
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- perf events ---------------------------------------------------------------------------

_PERF_TYPE_HARDWARE, _PERF_TYPE_HW_CACHE = 0, 3
_HW_CACHE_REFERENCES, _HW_CACHE_MISSES = 2, 3
_L1D_READ_ACCESS = 0 | (0 << 8) | (0 << 16)
_L1D_READ_MISS = 0 | (0 << 8) | (1 << 16)
_SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "riscv64": 241, "i686": 336, "armv7l": 364}
_ATTR_SIZE = 112  # PERF_ATTR_SIZE_VER5
_DISABLED, _INHERIT, _EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 0, 1 << 1, 1 << 5, 1 << 6


class _PerfCounter:
    """One counting perf event on this process and its threads (``perf_event_open(2)``)."""

    def __init__(self, type_: int, config: int):
        nr = _SYS_PERF_EVENT_OPEN.get(os.uname().machine)
        if nr is None:
            raise OSError(0, f"perf_event_open: unknown syscall number on {os.uname().machine}")
        attr = bytearray(_ATTR_SIZE)
        struct.pack_into("=IIQ", attr, 0, type_, _ATTR_SIZE, config)
        struct.pack_into("=Q", attr, 40, _INHERIT | _EXCLUDE_KERNEL | _EXCLUDE_HV)
        buf = (ctypes.c_char * _ATTR_SIZE).from_buffer(attr)
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.syscall(nr, buf, 0, -1, -1, 0)  # pid 0 = this process, any CPU, no group
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"perf_event_open: {os.strerror(err)}")
        self.fd = fd

    def value(self) -> int:
        return struct.unpack("=Q", os.read(self.fd, 8))[0]

    def close(self) -> None:
        os.close(self.fd)


class LinuxProbe(HardwareProbe):
    """Probe of this Linux machine (the CPU is the compute device).

    - compute_util: busy share of all CPUs (/proc/stat via psutil; busy = total - idle -
      iowait) over the interval from the latest earlier read at least ``util_window_s``
      old (the kernel counts CPU time in ticks, so shorter intervals are noise) to now;
      before such a read exists, since construction.
    - free_memory: MemAvailable (/proc/meminfo via psutil).
    - temperature: the hottest sensor psutil finds (/sys/class/hwmon, /sys/class/thermal).
    - cache_miss_rate.llc / .l1d: perf hardware cache events of this process between reads.
    - mem_bw_used: LLC misses x ``line_bytes`` per second (an estimate of the DRAM traffic
      this process causes; no uncore counters are used).
    - mem_bw_peak: ``mem_bw_peak`` (B/s) if given; the kernel does not expose it.

    Args:
        mem_bw_peak: peak memory bandwidth in B/s, or None (then unavailable).
        line_bytes: cache line size for the bandwidth estimate (default 64).
    """

    def __init__(self, mem_bw_peak: float | None = None, line_bytes: int = 64, util_window_s: float = 0.1):
        import psutil  # a dependency of mi-certify; imported here so TraceProbe works without it
        self._psutil = psutil
        self.mem_bw_peak = mem_bw_peak
        self.line_bytes = line_bytes
        self._counters: dict[str, _PerfCounter] = {}
        self._perf_error: dict[str, str] = {}
        for name, (t, c) in {"llc_ref": (_PERF_TYPE_HARDWARE, _HW_CACHE_REFERENCES),
                             "llc_miss": (_PERF_TYPE_HARDWARE, _HW_CACHE_MISSES),
                             "l1d_access": (_PERF_TYPE_HW_CACHE, _L1D_READ_ACCESS),
                             "l1d_miss": (_PERF_TYPE_HW_CACHE, _L1D_READ_MISS)}.items():
            try:
                self._counters[name] = _PerfCounter(t, c)
            except OSError as exc:
                self._perf_error[name] = exc.strerror or str(exc)
        self.util_window_ns = int(util_window_s * 1e9)
        self._cpu_history: list[tuple[int, tuple]] = []  # (t_mono_ns, cpu times), oldest first
        cpu = self._cpu_times()
        if cpu is not None:
            self._cpu_history.append((time.monotonic_ns(), cpu))
        self._last_counts = self._counts()
        self._last_t = time.monotonic_ns()

    def _cpu_times(self):
        try:
            t = self._psutil.cpu_times()
            idle = t.idle + getattr(t, "iowait", 0.0)
            return sum(t), idle
        except Exception:  # noqa: BLE001 - a failing sensor is a reading, never an exception
            return None

    def _counts(self) -> dict[str, int | None]:
        out = {}
        for name, c in self._counters.items():
            try:
                out[name] = c.value()
            except OSError:
                out[name] = None
        return out

    def _ratio(self, q: str, num: str, den: str, counts: dict, t: int) -> Reading:
        src = f"perf:{num}/{den}"
        for n in (num, den):
            if n in self._perf_error:
                return unavailable(q, src, f"perf event {n}: {self._perf_error[n]}", t)
        a0, b0, a1, b1 = (self._last_counts.get(num), self._last_counts.get(den), counts.get(num), counts.get(den))
        if None in (a0, b0, a1, b1):
            return unavailable(q, src, "perf counter read failed", t)
        if b1 - b0 <= 0:
            return unavailable(q, src, "no accesses counted in the interval", t)
        return Reading(q, min(1.0, (a1 - a0) / (b1 - b0)), "ratio", t, src)

    def read(self) -> ProbeSample:
        t = time.monotonic_ns()
        wall = time.time_ns()
        r: dict[str, Reading] = {}
        cpu = self._cpu_times()
        if cpu is None or not self._cpu_history:
            r["compute_util"] = unavailable("compute_util", "/proc/stat", "cannot read CPU times", t)
        else:
            old = [c for tc, c in self._cpu_history if t - tc >= self.util_window_ns]
            base = old[-1] if old else self._cpu_history[0][1]
            total, idle = cpu[0] - base[0], cpu[1] - base[1]
            if total <= 0:
                r["compute_util"] = unavailable("compute_util", "/proc/stat", "no CPU time counted in the interval", t)
            else:
                r["compute_util"] = Reading("compute_util", min(1.0, max(0.0, (total - idle) / total)), "ratio", t,
                                            "/proc/stat")
        if cpu is not None:
            self._cpu_history.append((t, cpu))
            # keep the newest read older than the window and everything after it
            cut = max((i for i, (tc, _) in enumerate(self._cpu_history) if t - tc >= self.util_window_ns), default=0)
            del self._cpu_history[:cut]
        try:
            r["free_memory"] = Reading("free_memory", float(self._psutil.virtual_memory().available), "B", t,
                                       "/proc/meminfo MemAvailable")
        except Exception as exc:  # noqa: BLE001
            r["free_memory"] = unavailable("free_memory", "/proc/meminfo", f"cannot read: {exc}", t)
        try:
            temps = self._psutil.sensors_temperatures() if hasattr(self._psutil, "sensors_temperatures") else {}
            vals = [(s.current, f"{chip}/{s.label or 'temp'}") for chip, ss in temps.items() for s in ss
                    if s.current is not None and math.isfinite(s.current)]
            if vals:
                v, src = max(vals)
                r["temperature"] = Reading("temperature", float(v), "degC", t, f"hwmon:{src}")
            else:
                r["temperature"] = unavailable("temperature", "/sys/class/hwmon", "no temperature sensor exposed", t)
        except Exception as exc:  # noqa: BLE001
            r["temperature"] = unavailable("temperature", "/sys/class/hwmon", f"cannot read: {exc}", t)
        counts = self._counts()
        r["cache_miss_rate.llc"] = self._ratio("cache_miss_rate.llc", "llc_miss", "llc_ref", counts, t)
        r["cache_miss_rate.l1d"] = self._ratio("cache_miss_rate.l1d", "l1d_miss", "l1d_access", counts, t)
        dt = (t - self._last_t) / 1e9
        if "llc_miss" in self._perf_error:
            r["mem_bw_used"] = unavailable("mem_bw_used", "perf:llc_miss", f"perf event llc_miss: "
                                           f"{self._perf_error['llc_miss']}", t)
        elif counts.get("llc_miss") is None or self._last_counts.get("llc_miss") is None or dt <= 0:
            r["mem_bw_used"] = unavailable("mem_bw_used", "perf:llc_miss", "perf counter read failed", t)
        else:
            r["mem_bw_used"] = Reading("mem_bw_used", (counts["llc_miss"] - self._last_counts["llc_miss"]) *
                                       self.line_bytes / dt, "B/s", t, f"perf:llc_miss x {self.line_bytes} B")
        if self.mem_bw_peak is None:
            r["mem_bw_peak"] = unavailable("mem_bw_peak", "configuration", "not configured (no kernel interface)", t)
        else:
            r["mem_bw_peak"] = Reading("mem_bw_peak", float(self.mem_bw_peak), "B/s", t, "configuration")
        self._last_counts, self._last_t = counts, t
        return ProbeSample(r, t, wall)

    def close(self) -> None:
        for c in self._counters.values():
            c.close()
        self._counters = {}


def last_level_cache_bytes(default: int = 8 << 20) -> int:
    """Size of the largest CPU cache of cpu0 (Linux sysfs ``cache/index*/size``), else ``default``."""
    best = 0
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = f.read_text().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            best = max(best, int(text.rstrip("KMG")) * mult)
        except (OSError, ValueError):
            continue
    return best or default


_CHASE = None


def _chase_kernel():
    """The pointer-chase loop, compiled (numba; cached on disk): ``j = nxt[j]`` ``steps`` times."""
    global _CHASE
    if _CHASE is None:
        import numba

        @numba.njit(cache=True, nogil=True)
        def chase(nxt, steps):
            j = 0
            for _ in range(steps):
                j = nxt[j]
            return j
        _CHASE = chase
    return _CHASE


class MicrobenchProbe(HardwareProbe):
    """Memory-system micro-benchmarks, run at each :meth:`read` (wrap it in :class:`SampledProbe`
    so that requests do not wait for them).

    - ``mem_bw_avail`` (B/s): bytes read plus bytes written per second by one streaming copy
      (``numpy.copyto``) of ``copy_bytes`` (default: the last-level cache's size, at least
      16 MiB: source and destination together are twice the cache, so the copy streams
      from DRAM): the bandwidth this process gets now. The
      STREAM "Copy" kernel's accounting (McCalpin, "Memory Bandwidth and Machine Balance in
      Current High Performance Computers", IEEE TCCA Newsletter 1995).
    - ``cache_chase_ns`` (ns): time per load of a chain of dependent loads through a random
      cyclic permutation over ``chase_bytes`` (default: the last-level cache's size), so each
      load waits for the one before: it rises when other work evicts the buffer from the
      cache (the lmbench ``lat_mem_rd`` method: McVoy and Staelin, USENIX 1996).

    Cost per read (the development VM, 32 MiB last-level cache, defaults): about 9 ms (a 32 MiB
    copy at ~10 GB/s and 16,384 loads at ~200 ns); its share of a core is that times the
    sampling rate (2 Hz: under 2 %; bench/runtime.py prints it). A benchmark that fails
    (no numba, memory) gives an unavailable reading, never an exception.
    """

    def __init__(self, copy_bytes: int | None = None, chase_bytes: int | None = None, chase_steps: int = 1 << 14,
                 seed: int = 0):
        import numpy as np

        llc = last_level_cache_bytes()
        self.copy_bytes = int(copy_bytes or max(llc, 16 << 20))
        self.chase_bytes = int(chase_bytes or llc)
        self.chase_steps = int(chase_steps)
        self._src = np.ones(self.copy_bytes // 8, dtype=np.float64)
        self._dst = np.empty_like(self._src)
        np.copyto(self._dst, self._src)   # the pages are mapped before the first timed copy
        n = max(2, self.chase_bytes // 8)
        order = np.random.default_rng(seed).permutation(n)
        nxt = np.empty(n, dtype=np.int64)
        nxt[order] = np.roll(order, -1)   # one cycle through every slot, in random order
        self._next = nxt

    def read(self) -> ProbeSample:
        import numpy as np

        t, wall = time.monotonic_ns(), time.time_ns()
        out: dict[str, Reading] = {}
        src = f"microbench:copy {self.copy_bytes >> 20} MiB"
        try:
            t0 = time.perf_counter_ns()
            np.copyto(self._dst, self._src)
            dt = time.perf_counter_ns() - t0
            out["mem_bw_avail"] = (Reading("mem_bw_avail", 2 * self.copy_bytes / (dt / 1e9), "B/s", t, src)
                                   if dt > 0 else unavailable("mem_bw_avail", src, "copy took no measurable time", t))
        except Exception as exc:  # noqa: BLE001
            out["mem_bw_avail"] = unavailable("mem_bw_avail", src, f"copy failed: {exc}", t)
        src = f"microbench:chase {self.chase_bytes >> 10} KiB"
        try:
            chase = _chase_kernel()
            chase(self._next, 16)   # compiled before it is timed
            t0 = time.perf_counter_ns()
            chase(self._next, self.chase_steps)
            dt = time.perf_counter_ns() - t0
            out["cache_chase_ns"] = Reading("cache_chase_ns", dt / self.chase_steps, "ns", t, src)
        except Exception as exc:  # noqa: BLE001
            out["cache_chase_ns"] = unavailable("cache_chase_ns", src, f"chase failed: {exc}", t)
        return ProbeSample(out, t, wall)


class MergedProbe(HardwareProbe):
    """Reads ``probes`` one after another, in the caller's thread, and merges their readings (a
    later probe's reading of a quantity replaces an earlier one's). For measurements taken while
    nothing else of ours runs (``mi-certify profile``); the live loop samples in the background
    (:class:`SampledProbe`). :meth:`close` closes the wrapped probes."""

    def __init__(self, probes: Sequence[HardwareProbe]):
        self.probes = list(probes)

    def read(self) -> ProbeSample:
        t, wall = time.monotonic_ns(), time.time_ns()
        merged: dict[str, Reading] = {}
        for p in self.probes:
            merged.update(p.read().readings)
        return ProbeSample(merged, t, wall)

    def close(self) -> None:
        for p in self.probes:
            p.close()


class SampledProbe(HardwareProbe):
    """Runs ``probes`` in a background thread every ``period_s`` seconds; :meth:`read` returns
    the latest readings at once, each with the monotonic time it was taken (``Reading.t_mono_ns``;
    the returned sample's ``t_mono_ns`` is the time of the read, so the difference is the
    reading's age). A reading older than ``max_age_s`` (default 3 periods) is returned
    unavailable, "stale: taken N ms ago (limit M ms)": a probe fault of the controller, as is
    every reading before the first sample and after the sampler stopped or failed.

    Raises ValueError for a period or age that is not positive. :meth:`close` stops the thread
    (joined) and closes the wrapped probes.
    """

    shares_readings = True   # read(): one read-only mapping per sample, while all its readings are fresh

    def __init__(self, probes: Sequence[HardwareProbe], period_s: float, max_age_s: float | None = None):
        import threading

        if not period_s > 0 or (max_age_s is not None and not max_age_s > 0):
            raise ValueError(f"probe sampling period {period_s!r} s and age limit {max_age_s!r} s must be positive")
        self.probes = list(probes)
        self.period_s = float(period_s)
        self.max_age_ns = int((3 * self.period_s if max_age_s is None else max_age_s) * 1e9)
        self._latest: dict[str, Reading] = {}
        # (readings, fresh until): the latest sample as one read-only dict, shared by every read while
        # all of its readings are younger than max_age (one attribute, replaced whole by the sampler)
        self._published: tuple = (SharedReadings(), -1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._first = threading.Event()   # set by the first sample, or when the sampler fails before it
        self.error: str | None = None
        self.cost_ns: list[int] = []   # duration of each sampling round (the probes' own cost)
        self._thread = threading.Thread(target=self._run, name="mi-certify-probe-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # every exit of this thread (stopped, a probe that raised) ends the published sample's freshness
        # first (finally): read() then takes its checked path, which also sees the thread's end; so read()
        # need not ask the thread whether it is alive while the published sample is fresh
        try:
            self._sample()
        finally:
            with self._lock:
                self._published = (self._published[0], -1)

    def _sample(self) -> None:
        try:
            while not self._stop.is_set():
                t0 = time.monotonic_ns()
                merged: dict[str, Reading] = {}
                for p in self.probes:
                    merged.update(p.read().readings)
                until = min((r.t_mono_ns for r in merged.values()), default=-1 - self.max_age_ns) + self.max_age_ns
                with self._lock:
                    self._latest = merged
                    self._published = (SharedReadings(merged), until)
                    self.cost_ns.append(time.monotonic_ns() - t0)
                    del self.cost_ns[:-1000]
                self._first.set()
                self._stop.wait(max(0.0, self.period_s - (time.monotonic_ns() - t0) / 1e9))
        except Exception as exc:  # noqa: BLE001  (a probe that raises despite its contract)
            self.error = f"sampler stopped: {type(exc).__name__}: {exc}"
            self._first.set()

    def wait_first(self, timeout_s: float = 10.0) -> bool:
        """Wait until the first sample is in (True), the sampler failed or ``timeout_s`` passed (False)."""
        return self._first.wait(timeout_s) and self.error is None

    def read(self) -> ProbeSample:
        """The latest sample, each reading with its age checked at this read. While every reading of
        the sample is fresh, every read returns the same read-only ``readings``
        (:class:`SharedReadings`, so that a caller can keep what it derives from a sample by the
        mapping's identity: ``shares_readings``); a stale or failed reading gives a new dict."""
        t, wall = time.monotonic_ns(), time.time_ns()
        readings, until = self._published
        if t <= until and self.error is None:   # fresh, and the sampler still running (_run: until is -1 after)
            return _probe_sample(readings, t, wall)
        with self._lock:
            latest = dict(self._latest)
        out: dict[str, Reading] = {}
        alive = self._thread.is_alive() and self.error is None
        for q, r in latest.items():
            age = t - r.t_mono_ns
            if not alive:
                out[q] = unavailable(q, r.source, self.error or "the probe sampler is stopped", t)
            elif age > self.max_age_ns:
                out[q] = unavailable(q, r.source, f"stale: taken {age / 1e6:.1f} ms ago "
                                                  f"(limit {self.max_age_ns / 1e6:.1f} ms)", t)
            else:
                out[q] = r
        return ProbeSample(out, t, wall)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for p in self.probes:
            p.close()


class TraceProbe(HardwareProbe):
    """Replays a CSV: the header names quantities (or controller inputs), one row per read.

    An empty cell, ``nan``, ``unavailable`` or text that is not a number is an
    unavailable reading. After the last row every reading is unavailable ("trace
    exhausted") unless ``loop`` is set. An optional column ``t_s`` is ignored
    (documentation of when the row was recorded).

    Raises:
        ValueError (at construction only) if the file cannot be read or has no header.
    """

    def __init__(self, path: str | os.PathLike, loop: bool = False):
        self.path = Path(path)
        try:
            with open(self.path, newline="", encoding="utf-8") as fh:
                rows = list(csv.reader(fh))
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: cannot read the trace: {exc}") from None
        if not rows or not rows[0]:
            raise ValueError(f"{path}: the trace has no header row")
        self.columns = [c.strip() for c in rows[0]]
        self.rows = rows[1:]
        self.loop = loop
        self.index = 0

    def read(self) -> ProbeSample:
        t, wall = time.monotonic_ns(), time.time_ns()
        if self.index >= len(self.rows) and self.loop and self.rows:
            self.index = 0
        row_no = self.index + 2  # 1-based line number in the file
        row = self.rows[self.index] if self.index < len(self.rows) else None
        self.index += 1
        out = {}
        for j, q in enumerate(self.columns):
            if q == "t_s":
                continue
            src = f"trace:{self.path.name}:{row_no}"
            if row is None:
                out[q] = unavailable(q, src, "trace exhausted", t)
                continue
            cell = row[j].strip() if j < len(row) else ""
            try:
                v = float(cell)
                if not math.isfinite(v):
                    raise ValueError
            except ValueError:
                out[q] = unavailable(q, src, f"cell {cell!r} is not a finite number", t)
                continue
            out[q] = Reading(q, v, QUANTITIES.get(q, ""), t, src)
        return ProbeSample(out, t, wall)


# -- probe quantities -> controller inputs ---------------------------------------------------

#: Default sources of the reference controller's inputs (examples/meta_controller).
DEFAULT_SOURCES = {
    "mem_bw_avail_gbs": "mem_bw_avail/1e9",   # the micro-benchmark's B/s in GB/s (the reference controller)
    "cache_miss_rate": "cache_miss_rate.llc",
    "mem_bw_util": "mem_bw_used/mem_bw_peak",
    "temperature_c": "temperature",
    "free_sram_kb": "free_sram",  # no on-chip SRAM on a CPU: unavailable unless mapped
}
_EXPR = re.compile(r"^\s*(?:(?P<const>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
                   r"|(?P<a>[A-Za-z_][A-Za-z0-9_.]*)\s*(?:(?P<op>[*/])\s*(?P<b>[A-Za-z_][A-Za-z0-9_.]*|"
                   r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))?)\s*$")


@dataclass(frozen=True)
class FeatureMap:
    """How each controller input is computed from a probe sample.

    ``sources[i]`` is an expression for input i: a number (a constant the operator
    assumes; recorded as such), ``QUANTITY``, ``QUANTITY*FACTOR``, ``QUANTITY/FACTOR``
    or ``Q1/Q2``. An unavailable quantity, a division by zero or a non-finite result
    gives ``None`` for that input, which the controller treats as a probe fault.
    """

    inputs: tuple[str, ...]
    sources: tuple[str, ...]
    _parsed: tuple = field(default=(), compare=False, repr=False)

    @staticmethod
    def parse_overrides(texts: Sequence[str]) -> dict[str, str]:
        """``["INPUT=EXPR", ...]`` (the ``--map`` options) -> {input: expression}, later ones
        winning. Raises ValueError naming the malformed text."""
        out = {}
        for text in texts:
            if "=" not in text:
                raise ValueError(f"--map {text!r}: expected INPUT=EXPR")
            k, v = text.split("=", 1)
            out[k.strip()] = v.strip()
        return out

    @classmethod
    def build(cls, inputs: Sequence[str], overrides: dict[str, str] | None = None,
              offered: Sequence[str] = ()) -> "FeatureMap":
        """Map every input to ``overrides[name]``; else to the quantity of the same name if the
        probe ``offered`` it (a trace with a column per input); else to its default source in
        :data:`DEFAULT_SOURCES`; else to the quantity of the same name. Raises ValueError naming
        the input for a malformed expression or an override of an unknown input."""
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(inputs))
        if unknown:
            raise ValueError(f"unknown controller input {unknown[0]!r} (inputs: {', '.join(inputs)})")
        sources = tuple(overrides.get(n, n if n in offered else DEFAULT_SOURCES.get(n, n)) for n in inputs)
        parsed = []
        for n, s in zip(inputs, sources):
            m = _EXPR.match(s)
            if not m:
                raise ValueError(f"input {n!r}: {s!r} is not NUMBER, QUANTITY, QUANTITY*NUMBER, QUANTITY/NUMBER "
                                 "or QUANTITY/QUANTITY")
            parsed.append(m.groupdict())
        return cls(tuple(inputs), sources, tuple(parsed))

    def __call__(self, sample: ProbeSample) -> tuple[list[float | None], list[str | None]]:
        """(values in input order, per-input error or None)."""
        values, errors = [], []
        for name, g in zip(self.inputs, self._parsed):
            v, err = self._eval(g, sample)
            values.append(v)
            errors.append(err)
        return values, errors

    @staticmethod
    def _operand(tok: str, sample: ProbeSample):
        try:
            return float(tok), None
        except ValueError:
            r = sample.readings.get(tok)
            if r is None:
                return None, f"{tok}: not offered by the probe"
            if r.value is None:
                return None, f"{tok}: {r.error}"
            return r.value, None

    def _eval(self, g: dict, sample: ProbeSample):
        if g["const"] is not None:
            return float(g["const"]), None
        a, err = self._operand(g["a"], sample)
        if err:
            return None, err
        if g["op"]:
            b, err = self._operand(g["b"], sample)
            if err:
                return None, err
            if g["op"] == "/":
                if b == 0:
                    return None, f"{g['b']} is zero"
                a = a / b
            else:
                a = a * b
        if not math.isfinite(a):
            return None, "not a finite number"
        return a, None
