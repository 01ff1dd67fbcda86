"""Per-action SLA monitor: produces the ``sla_violation`` input of the LUT-FSM.

Normative text: docs/runtime.md, section "SLA monitor". In short:

- After every request the engine reports the action it ran under, the measured
  latency (ms) and the accuracy loss (percentage points versus the fp32 reference).
- The monitor keeps a sliding window of the last ``window`` measurements, all of
  one action: a measurement of another action first empties the window.
- For each metric the window statistic (``max``, ``mean`` or the nearest-rank
  percentile ``pNN``) is computed exactly over the n <= window measurements held
  and compared with that action's limit from sla.yaml: statistic > limit is a
  violation (equal is compliant). A missing or non-finite measurement counts as
  +infinity (fail closed). An action without a limit for a metric is never in
  violation on that metric.
- The verdict after request i is the ``sla_violation`` input of the FSM step that
  decides request i + 1. Reset: empty window, no violation.

Exact arithmetic: ``mean`` is compared as ``sum(window) > limit * n`` on
``fractions.Fraction`` of the binary float values, so no rounding decides a verdict.
"""

from __future__ import annotations

import math
import numbers
import re
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from .frozen import maker

__all__ = ["MonitorConfig", "SlaLimits", "SlaMonitor", "SlaVerdict", "window_statistic", "STATISTIC_PATTERN"]

#: Allowed statistic names: max, mean, p1 ... p99 (nearest-rank percentile).
STATISTIC_PATTERN = r"^(max|mean|p([1-9]|[1-9][0-9]))$"


@dataclass(frozen=True)
class SlaLimits:
    """Limits of one action: latency in ms, accuracy loss in percentage points; None = not judged."""

    latency_ms: float | None = None
    accuracy_loss_pct: float | None = None


@dataclass(frozen=True)
class MonitorConfig:
    """Window length (requests, >= 1) and the statistic per metric (``max``, ``mean`` or ``pNN``).

    Defaults (sla.yaml without ``monitor``): window 1, ``max``: every request is judged alone.
    """

    window: int = 1
    latency_statistic: str = "max"
    accuracy_statistic: str = "max"

    def __post_init__(self):
        if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1:
            raise ValueError(f"window must be an integer >= 1, got {self.window!r}")
        for s in (self.latency_statistic, self.accuracy_statistic):
            if not re.match(STATISTIC_PATTERN, s):
                raise ValueError(f"unknown statistic {s!r} (max, mean or p1..p99)")

    def to_json(self) -> dict:
        return {"window": self.window, "latency_statistic": self.latency_statistic,
                "accuracy_statistic": self.accuracy_statistic}


def _measure(x) -> float:
    """A measurement as a float; None, NaN, non-numbers and +-inf count as +inf (fail closed)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return math.inf
    x = float(x)
    return x if math.isfinite(x) else math.inf


#: Every finite float is an integer multiple of 2^-1074 (the smallest subnormal, IEEE 754 binary64).
_EXACT_SHIFT = 1074


def _scaled(x: float) -> int:
    """``x * 2**1074`` as an exact integer (x finite)."""
    n, d = x.as_integer_ratio()   # d is a power of two, at most 2^1074
    return n << (_EXACT_SHIFT + 1 - d.bit_length())


def _exact_sum(values: Sequence[float]) -> int:
    """The exact sum of finite ``values``, scaled by 2^1074 (integer arithmetic: the same as a
    sum of ``Fraction`` objects, without their gcd per addition)."""
    return sum(map(_scaled, values))


def window_statistic(values: Sequence[float], statistic: str) -> float:
    """The statistic of a non-empty window (floats, +inf allowed).

    ``max``: the largest value. ``mean``: the exact mean, rounded to float only for
    reporting (the verdict uses :func:`exceeds`). ``pNN``: nearest-rank percentile,
    the value of rank ceil(NN * n / 100) in ascending order (rank >= 1).
    """
    if not values:
        raise ValueError("empty window")
    if statistic == "max":
        return max(values)
    if statistic == "mean":
        if any(math.isinf(v) for v in values):
            return math.inf
        return float(Fraction(_exact_sum(values), len(values) << _EXACT_SHIFT))
    p = int(statistic[1:])
    rank = max(1, -(-p * len(values) // 100))
    return sorted(values)[rank - 1]


def _sum_exceeds(total: int, n: int, limit) -> bool:
    """The exact mean of n values whose :func:`_exact_sum` is ``total`` is strictly above ``limit``."""
    if isinstance(limit, float):
        return total > _scaled(limit) * n
    return Fraction(total, 1 << _EXACT_SHIFT) > Fraction(limit) * n


def exceeds(values: Sequence[float], statistic: str, limit: float | None) -> bool:
    """True if the window statistic is strictly greater than ``limit`` (exact; None = never)."""
    return _judge(values, statistic, limit)[0]


def _judge(values: Sequence[float], statistic: str, limit: float | None) -> tuple[bool, float]:
    """(:func:`exceeds`, :func:`window_statistic`) of one window, the exact sum of a mean taken once."""
    if statistic == "mean" and not any(math.isinf(v) for v in values):
        total = _exact_sum(values)
        return (limit is not None and _sum_exceeds(total, len(values), limit),
                float(Fraction(total, len(values) << _EXACT_SHIFT)) if values else math.nan)
    stat = window_statistic(values, statistic)
    # a mean over a window holding +inf (a failed request) exceeds every limit
    return limit is not None and (statistic == "mean" or stat > limit), stat


@dataclass(frozen=True)
class SlaVerdict:
    """The monitor's output after one request.

    ``violation`` is the FSM's ``sla_violation`` input for the next step;
    ``latency``/``accuracy`` say which metric is in violation; ``latency_ms`` and
    ``accuracy_loss_pct`` are the window statistics (float, may be inf); ``samples``
    is the number of measurements in the window (1 ... window).
    """

    action: int
    violation: bool
    latency: bool
    accuracy: bool
    latency_ms: float
    accuracy_loss_pct: float
    samples: int

    def to_json(self) -> dict:
        def num(x):
            return x if math.isfinite(x) else "inf"
        return {"action": self.action, "violation": self.violation, "latency": self.latency,
                "accuracy": self.accuracy, "latency_ms": num(self.latency_ms),
                "accuracy_loss_pct": num(self.accuracy_loss_pct), "samples": self.samples}


_verdict = maker(SlaVerdict)   # SlaVerdict(...) on the hot path (runtime/frozen.py)


class _Window:
    """The last <= N measurements of one metric and what its statistic needs, kept as they come:
    for ``mean`` the exact sum of the finite values (scaled by 2^1074, :func:`_scaled`) and the
    number of +inf among them, updated per measurement instead of summed again per verdict."""

    __slots__ = ("values", "scaled", "statistic", "mean", "total", "infs", "p")

    def __init__(self, n: int, statistic: str):
        self.values: deque[float] = deque(maxlen=n)
        #: for ``mean``: each value's :func:`_scaled` (None for +inf), kept so that a value leaving the
        #: window is not scaled a second time
        self.scaled: deque[int | None] = deque(maxlen=n)
        self.statistic = statistic
        self.mean = statistic == "mean"
        self.total = 0
        self.infs = 0
        #: the percentile of ``pNN`` (NN), 100 for ``max`` (nearest rank: the largest), 0 for ``mean``
        self.p = 0 if self.mean else 100 if statistic == "max" else int(statistic[1:])

    def clear(self) -> None:
        self.values.clear()
        self.scaled.clear()
        self.total = self.infs = 0

    def push(self, x: float, limit, scaled_limit: int | None) -> tuple[bool, float]:
        """Add measurement ``x`` (the oldest leaves a full window) and judge the window against ``limit``:
        (:func:`exceeds`, :func:`window_statistic`) of the window, in one call per metric and request.
        ``max`` is ``max(values)`` and ``pNN`` the value of rank ceil(NN * n / 100) of ``sorted(values)``, as
        :func:`window_statistic` takes them; ``mean`` keeps its exact sum as values come and go.
        ``scaled_limit``: ``limit`` scaled by 2^1074 when that is an integer (a float or int limit), else None."""
        v = self.values
        if not self.mean:
            v.append(x)
            if self.p == 100:
                stat = max(v)
            else:
                n = len(v)
                stat = sorted(v)[max(1, -(-self.p * n // 100)) - 1]
            return limit is not None and stat > limit, stat
        sc = self.scaled
        if len(sc) == sc.maxlen:   # the oldest value leaves the window
            old = sc[0]
            if old is None:
                self.infs -= 1
            else:
                self.total -= old
        if x == _INF_F:
            self.infs += 1
            sc.append(None)
        else:
            s = _scaled(x)
            self.total += s
            sc.append(s)
        v.append(x)
        n = len(v)
        if self.infs:   # a mean over a window holding +inf (a failed request) exceeds every limit
            return limit is not None, _INF_F
        total = self.total
        if limit is None:
            bad = False
        elif scaled_limit is not None:
            bad = total > scaled_limit * n
        else:
            bad = _sum_exceeds(total, n, limit)
        return bad, total / (n << _EXACT_SHIFT)


_INF_F = math.inf


def _scaled_limit(limit) -> int | None:
    """``limit * 2**1074`` for a float or int limit (exact), None otherwise (or for no limit)."""
    if type(limit) is float and math.isfinite(limit):
        return _scaled(limit)
    if type(limit) is int:
        return limit << _EXACT_SHIFT
    return None


class SlaMonitor:
    """Sliding-window SLA monitor over the actions of one controller.

    Args:
        limits: one :class:`SlaLimits` per action token (index = token).
        config: window length and statistics.

    The verdicts are those of :func:`window_statistic` / :func:`exceeds` on the window (docs/runtime.md,
    "SLA monitor"); a ``mean`` keeps its exact sum as measurements come and go (tests/unit/runtime/test_sla.py
    compares both on random sequences).
    """

    def __init__(self, limits: Sequence[SlaLimits], config: MonitorConfig | None = None):
        self.limits = tuple(limits)
        self.config = config or MonitorConfig()
        self._lat = _Window(self.config.window, self.config.latency_statistic)
        self._acc = _Window(self.config.window, self.config.accuracy_statistic)
        self._rescale()
        self._action: int | None = None
        self.violation = False

    def _rescale(self) -> None:
        """The limits scaled by 2^1074 for the exact ``mean`` comparison, for the current ``limits``."""
        self._scaled = tuple((_scaled_limit(lim.latency_ms), _scaled_limit(lim.accuracy_loss_pct))
                             for lim in self.limits)
        self._scaled_for = self.limits

    def reset(self) -> None:
        """Empty the window; the next FSM step sees no violation."""
        self._lat.clear()
        self._acc.clear()
        self._action = None
        self.violation = False

    def observe(self, action: int, latency_ms, accuracy_loss_pct) -> SlaVerdict:
        """Add one request's measurement and judge the window.

        Args:
            action: token of the action the request ran under.
            latency_ms: measured latency in milliseconds (None/NaN = failed request).
            accuracy_loss_pct: accuracy loss in percentage points (None/NaN = unknown).
        Returns:
            the verdict; ``self.violation`` is updated to ``verdict.violation``.
        Raises:
            ValueError if ``action`` is not a token of this controller.
        """
        if (type(action) is not int and (isinstance(action, bool) or not isinstance(action, int))) \
                or not 0 <= action < len(self.limits):
            raise ValueError(f"action {action!r} is not a token 0..{len(self.limits) - 1}")
        if action != self._action:
            self._lat.clear()
            self._acc.clear()
            self._action = action
        if self._scaled_for is not self.limits:   # limits replaced since: scale them again
            self._rescale()
        lim = self.limits[action]
        s_lat, s_acc = self._scaled[action]
        lat_bad, lat = self._lat.push(latency_ms if type(latency_ms) is float and -_INF_F < latency_ms < _INF_F
                                      else _measure(latency_ms), lim.latency_ms, s_lat)
        acc_bad, acc = self._acc.push(accuracy_loss_pct if type(accuracy_loss_pct) is float
                                      and -_INF_F < accuracy_loss_pct < _INF_F else _measure(accuracy_loss_pct),
                                      lim.accuracy_loss_pct, s_acc)
        self.violation = violation = lat_bad or acc_bad
        return _verdict(action, violation, lat_bad, acc_bad, lat, acc, len(self._lat.values))




# --- the hardware monitor's units: cycles and fixed-point accuracy (hdl/sla_monitor.v) -----------

#: Fixed-point units per percentage point of the hardware monitor's ``acc_loss`` input (0.001 pp).
ACC_SCALE = 1000
#: Width of ``acc_loss``: 0 ... 2^17 - 1 units covers 0 ... 131 pp (a loss is at most 100 pp).
ACC_WIDTH = 17


def latency_limit_cycles(latency_ms: float, clock_mhz: float) -> int:
    """The latency limit in clock cycles: floor(latency_ms * clock_mhz * 1000), exact (Fraction).

    For an integer cycle count c, c > floor(x) <=> c > x, so the hardware verdict
    ``cycles > limit_cycles`` is the ms verdict on the exact latency c / (clock_mhz * 1000) ms
    for ``max`` and ``pNN``; for ``mean`` it is the same when latency_ms * clock_mhz * 1000
    is an integer, else stricter by less than one cycle (never looser).
    """
    return math.floor(Fraction(latency_ms) * Fraction(clock_mhz) * 1000)


def accuracy_limit_fixed(accuracy_loss_pct: float, scale: int = ACC_SCALE) -> int:
    """The accuracy-loss limit in 1/scale percentage points: floor(limit * scale), exact."""
    return math.floor(Fraction(accuracy_loss_pct) * scale)


def accuracy_to_fixed(accuracy_loss_pct, scale: int = ACC_SCALE, width: int = ACC_WIDTH) -> int | None:
    """What the engine drives on ``acc_loss``: ceil(loss * scale), negative losses as 0, saturated at
    2^width - 1; None (drive ``acc_unknown``) for a missing or non-finite loss. Rounding up means
    the hardware never judges a loss smaller than the measured one."""
    x = _measure(accuracy_loss_pct)
    if math.isinf(x):
        return None
    return min(max(0, math.ceil(Fraction(x) * scale)), (1 << width) - 1)


def latency_counter_width(top_cycles: int, window: int) -> int:
    """Bits of the hardware monitor's latency counter for a largest limit of ``top_cycles``
    cycles and a window of ``window`` requests: one saturated value alone exceeds window x
    the limit, so saturation never changes a verdict (``mean`` included). At most 32 are built."""
    return max(2, (window * top_cycles + 1).bit_length() + 1)


@dataclass(frozen=True)
class CycleMonitorConfig:
    """Parameters of one ``hdl/sla_monitor.v`` instance.

    ``lat_limits``/``acc_limits``: per token (index), limit in cycles / in 1/ACC_SCALE pp, None =
    not judged. ``cyc_width``: latency counter width; a count of 2^cyc_width - 1 (saturated) is
    +infinity. ``action_width``: width of ``req_action``; tokens >= len(lat_limits) are judged
    against limit 0 (always a violation). ``monitor``: window and statistics.
    """

    lat_limits: tuple
    acc_limits: tuple
    monitor: MonitorConfig
    cyc_width: int = 32
    acc_width: int = ACC_WIDTH
    action_width: int = 2

    @classmethod
    def from_limits(cls, limits: Sequence[SlaLimits], monitor: MonitorConfig, clock_mhz: float,
                    action_width: int | None = None) -> "CycleMonitorConfig":
        """The cycle-unit configuration of ms / pp limits at ``clock_mhz``.

        The counter is wide enough that one saturated value alone exceeds window * the largest
        limit, so saturation never changes a verdict (``mean`` included).
        """
        lat = tuple(None if lim.latency_ms is None else latency_limit_cycles(lim.latency_ms, clock_mhz)
                    for lim in limits)
        acc = tuple(None if lim.accuracy_loss_pct is None else accuracy_limit_fixed(lim.accuracy_loss_pct)
                    for lim in limits)
        top = max([x for x in lat if x is not None] or [1])
        width = latency_counter_width(top, monitor.window)
        if width > 32:
            raise ValueError(f"latency limit {top} cycles x window {monitor.window} needs a {width}-bit counter; "
                             "at most 32 bits (lower hdl.clock_mhz or the limit)")
        return cls(lat, acc, monitor, width, ACC_WIDTH, action_width or max(1, (len(limits) - 1).bit_length()))


class CycleSlaMonitor:
    """Cycle-accurate model of ``hdl/sla_monitor.v``: request strobes, latency counter, outputs.

    Only the strobe protocol lives here; windows and verdicts are :class:`SlaMonitor` on integer
    measurements (cycles, 1/ACC_SCALE pp), so the statistic logic exists once. :meth:`clock` is one
    rising edge: it takes the inputs sampled at that edge and returns the registered outputs after
    it, a dict with ``violation``, ``lat_violation``, ``acc_violation``, ``verdict_valid``,
    ``samples``, ``busy``, ``proto_error`` (ints).
    """

    OUTPUTS = ("violation", "lat_violation", "acc_violation", "verdict_valid", "samples", "busy", "proto_error")

    def __init__(self, config: CycleMonitorConfig):
        self.config = config
        n = len(config.lat_limits)
        extra = [SlaLimits(0, 0)] * ((1 << config.action_width) - n)   # unknown tokens: limit 0
        self._monitor = SlaMonitor([SlaLimits(a, b) for a, b in zip(config.lat_limits, config.acc_limits)] + extra,
                                   config.monitor)
        self._n_actions = n
        self.reset()

    def reset(self) -> dict:
        self._monitor.reset()
        self.busy, self.cnt, self.act = 0, 0, 0
        self.out = dict.fromkeys(self.OUTPUTS, 0)
        return dict(self.out)

    def clock(self, rst: int, req_start: int, req_action: int, req_done: int, acc_loss: int,
              acc_unknown: int) -> dict:
        if rst:
            return self.reset()
        cfg = self.config
        inf = (1 << cfg.cyc_width) - 1
        done_ok = req_done and self.busy
        abandoned = req_start and self.busy and not req_done
        out = self.out
        out["verdict_valid"] = int(bool(done_ok or abandoned))
        out["proto_error"] = int(bool(req_done and not self.busy))
        if done_ok or abandoned:
            lat = None if abandoned or self.cnt == inf else self.cnt
            acc = None if abandoned or acc_unknown else acc_loss
            v = self._monitor.observe(self.act, lat, acc)
            out.update(violation=int(v.violation), lat_violation=int(v.latency), acc_violation=int(v.accuracy),
                       samples=v.samples)
            out["proto_error"] |= int(self.act >= self._n_actions)
            self.busy = 0
        elif self.busy and self.cnt != inf:
            self.cnt += 1
        if req_start:
            self.busy, self.cnt, self.act = 1, 1, req_action
        out["busy"] = self.busy
        return dict(out)


def stat_code(statistic: str) -> int:
    """The monitor's statistic parameter: 0 mean, NN for pNN, 100 max (max is nearest-rank p100)."""
    return 0 if statistic == "mean" else 100 if statistic == "max" else int(statistic[1:])


def monitor_parameters(cfg: CycleMonitorConfig, n_actions: int, nw: int | None = None) -> dict:
    """Parameter values of ``hdl/sla_monitor.v`` for ``cfg``: {name: int, or (width, value) for the
    packed limit vectors, action 0 least significant}. Used by the emitter of the monitor wrapper and
    by its co-simulation, so both instantiate the core with the same values. Raises ValueError for a
    limit that does not fit its field (0 .. 2^width - 1): packed anyway it would change its neighbour's."""
    def pack(limits, width):
        word = 0
        for i, lim in reversed(list(enumerate(limits))):
            if lim is not None and not 0 <= lim < 1 << width:
                raise ValueError(f"SLA monitor limit {lim} of action {i} does not fit {width} bits "
                                 f"(0 .. {(1 << width) - 1})")
            word = word << width | (lim or 0)
        return word
    judged = lambda limits: sum(1 << i for i, lim in enumerate(limits) if lim is not None)  # noqa: E731
    return {"N_ACTIONS": n_actions, "ACTION_W": cfg.action_width, "WINDOW": cfg.monitor.window,
            "CYC_W": cfg.cyc_width, "ACC_W": cfg.acc_width,
            "LAT_STAT": stat_code(cfg.monitor.latency_statistic), "ACC_STAT": stat_code(cfg.monitor.accuracy_statistic),
            "LAT_LIMIT": (n_actions * cfg.cyc_width, pack(cfg.lat_limits, cfg.cyc_width)),
            "LAT_JUDGED": (n_actions, judged(cfg.lat_limits)),
            "ACC_LIMIT": (n_actions * cfg.acc_width, pack(cfg.acc_limits, cfg.acc_width)),
            "ACC_JUDGED": (n_actions, judged(cfg.acc_limits)),
            "NW": nw or max(1, cfg.monitor.window.bit_length())}


def parameter_text(p: dict) -> str:
    """``#(.NAME(value), ...)`` with sized hex literals for the packed vectors."""
    def lit(v):
        return f"{v[0]}'h{v[1]:x}" if isinstance(v, tuple) else str(v)
    return "#(" + ", ".join(f".{k}({lit(v)})" for k, v in p.items()) + ")"
