"""Profile a workload on this machine: the data the meta controller is trained from.

For each sample the profiler sets a *condition* (background load: its kind and number of
processes; batch size, intra-op threads, input size), reads the probes, then runs the request under **every**
action in turn (in a random order per sample, after one discarded warm-up request per
action) and records, per action, the latency and the accuracy loss against the fp32
reference. docs/training.md describes the CSV; this module only measures.

Per sample (seeded, ``ProfileConfig.seed``):

1. draw the condition; start or stop background-load processes to reach its load kind and
   level (:func:`mi_certify.runtime.engine.start_background_load`: ``cpu`` busy loops,
   ``stream`` memory copies, ``thrash`` random cache-line updates); set the input shape.
2. one warm-up request per action (discarded: first runs of a shape allocate).
3. read the probe, pause ``settle_s`` (nothing of ours runs), read it again: the second
   reading is the sample's features (``compute_util`` is then the machine's busy
   share over the pause: the background load plus whatever else runs, not our requests).
4. ``rounds`` times, for each action in the sample's order: ``repeats`` requests on distinct
   inputs, back to back (blocked, as the engine runs a plan between switches: its weights stay
   in the caches; interleaving single requests of the actions was tried and evicts each plan's
   weights with the others', which hides the cache advantage of the 8-bit plan), from the
   second round on after one discarded warm-up; per action over all its requests: latency =
   median (ms), accuracy loss = mean top-1 disagreement with fp32 (percentage points).

Feature sources are those of ``mi-certify run`` (:class:`~mi_certify.runtime.probes.FeatureMap`:
a quantity, an expression or an assumed constant) plus ``uniform``: an input the probe
cannot read is drawn uniformly over its envelope per sample (seeded), so the trained
network sees that input carry no information instead of one constant. The sidecar JSON
says for every input whether it was measured, derived, assumed constant or drawn.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .engine import LOAD_KINDS, Plan, Workload, start_background_load, stop_background_load
from .probes import FeatureMap, HardwareProbe, LinuxProbe

__all__ = ["FORMAT", "REFERENCE_INPUTS", "ProfileConfig", "profile", "profile_columns"]

#: Value of ``format`` in the sidecar JSON.
FORMAT = "mi-certify/profile-v1"

#: The reference controller's inputs (examples/meta_controller/sla.yaml): name, unit, min, max.
REFERENCE_INPUTS = (("compute_util", "ratio", 0.0, 1.0), ("cache_chase_ns", "ns", 0.0, 1024.0),
                    ("mem_bw_avail_gbs", "GB/s", 0.0, 64.0), ("free_sram_kb", "KiB", 0.0, 1024.0),
                    ("temperature_c", "degC", 20.0, 110.0))

UNIFORM = "uniform"

#: Pause before each block of requests (s). onnxruntime's intra-op pool threads spin for a while
#: after a request before they sleep; the engine keeps one session (one pool) per plan, so a
#: block that starts at once shares the cores with the previous plan's spinning threads, which
#: the live engine, switching plans rarely, does not see.
BLOCK_PAUSE_S = 0.02


@dataclass(frozen=True)
class ProfileConfig:
    """Conditions and measurement settings of a profile run.

    samples: number of rows. load_levels: numbers of background-load processes. load_kinds: what
    they do (:data:`~mi_certify.runtime.engine.LOAD_KINDS`; a sample with load draws one kind,
    all its processes of that kind). batch_sizes: first
    input dimension. threads: intra-op threads for every plan whose threads are 0 (default).
    input_sizes: size of every dimension after the second (image height and width); empty =
    the model's own. repeats: requests per action per round, back to back. rounds: how often
    every action runs its block of ``repeats`` in a sample (after the first, each block starts
    with one discarded warm-up request, the other plans having run in between): the blocks
    are spread over the sample's time, so a scheduler state that lasts one block (which core
    the background load shares with which intra-op thread) does not decide the sample alone. settle_s: pause before the
    features are read. seed: drives conditions, action order, inputs and ``uniform`` inputs.
    """

    samples: int = 240
    load_levels: tuple[int, ...] = (0, 1, 2)
    load_kinds: tuple[str, ...] = ("cpu",)
    batch_sizes: tuple[int, ...] = (1, 2, 4)
    threads: tuple[int, ...] = (1, 2)
    input_sizes: tuple[int, ...] = (64, 96, 128)
    repeats: int = 3
    rounds: int = 1
    settle_s: float = 0.25
    seed: int = 0

    def check(self) -> None:
        """Raise ValueError naming the first unusable setting."""
        if self.samples < 1:
            raise ValueError("samples must be at least 1")
        if self.repeats < 1:
            raise ValueError("repeats must be at least 1")
        if not (1 <= self.rounds <= 100):
            raise ValueError("rounds must be within [1, 100]")
        if not (0.0 <= self.settle_s <= 10.0):
            raise ValueError("settle must be within [0, 10] s")
        if not self.load_kinds or any(k not in LOAD_KINDS for k in self.load_kinds):
            bad = [k for k in self.load_kinds if k not in LOAD_KINDS]
            raise ValueError(f"load kinds: {f'unknown kind {bad[0]!r}' if bad else 'give at least one'} "
                             f"(kinds: {', '.join(LOAD_KINDS)})")
        for name, vals, low in (("load levels", self.load_levels, 0), ("batch sizes", self.batch_sizes, 1),
                                ("threads", self.threads, 1), ("input sizes", self.input_sizes, 1)):
            if name != "input sizes" and not vals:
                raise ValueError(f"{name}: give at least one value")
            if any(v < low for v in vals):
                raise ValueError(f"{name}: every value must be at least {low}")
            if any(v > 4096 for v in vals):
                raise ValueError(f"{name}: {max(vals)} is implausibly large")


def profile_columns(inputs: Sequence[str], actions: Sequence[str]) -> list[str]:
    """The CSV header: conditions, controller inputs, then latency and accuracy loss per action."""
    return (["sample", "load_procs", "load_kind", "batch", "input_size", "threads", "order", *inputs]
            + [f"latency_ms.{a}" for a in actions] + [f"accuracy_loss_pct.{a}" for a in actions])


def _fmt(v: float | None, digits: int = 4) -> str:
    return "" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def _machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import onnxruntime
    return {"platform": platform.platform(), "cpu": model, "cpus": os.cpu_count(),
            "python": platform.python_version(), "onnxruntime": onnxruntime.__version__,
            "numpy": np.__version__}


def profile(workload_path: str | os.PathLike, out_csv: str | os.PathLike, actions: Sequence[str],
            plans: dict[str, Plan], inputs: Sequence[tuple[str, str, float, float]] = REFERENCE_INPUTS,
            overrides: dict[str, str] | None = None, config: ProfileConfig = ProfileConfig(),
            probe: HardwareProbe | None = None, command: str = "",
            on_sample: Callable[[int, dict], None] | None = None) -> dict:
    """Measure ``config.samples`` rows and write ``out_csv`` plus its sidecar ``<out>.json``.

    Args:
        workload_path: ONNX model the engine runs (first input float, NCHW-like).
        out_csv: CSV to write (replaced atomically at the end; nothing is left on error).
        actions: action names in token order; ``plans[name]`` says how each runs.
        inputs: the controller's inputs (name, unit, min, max), in order.
        overrides: input -> source expression (:class:`FeatureMap`) or ``uniform``.
        probe: the probe to read (default :class:`LinuxProbe`); closed at the end if made here.
        command: the command line, recorded in the sidecar.
        on_sample: called after each row with (index, row dict).
    Returns:
        the sidecar dict.
    Raises:
        ValueError (one sentence) for a missing plan, a bad setting, an unusable workload, or an
        input the probe cannot read that has no ``--map``.
    """
    out_csv, names, uniform, fmap = _checked(out_csv, actions, plans, inputs, overrides, config)
    own_probe = probe is None
    if own_probe:
        probe = LinuxProbe(util_window_s=min(0.1, config.settle_s))
    rng = np.random.default_rng(config.seed)
    load = _BackgroundLoad()
    workload = None
    tmp = out_csv.with_name(out_csv.name + ".partial")
    try:
        first = probe.read()
        time.sleep(min(0.2, config.settle_s))
        first = probe.read()
        values, errors = fmap(first)
        for n, v, e in zip(names, values, errors):
            if n not in uniform and v is None:
                raise ValueError(f"input '{n}' is unavailable on this machine ({e}); give --map {n}=EXPR "
                                 f"(a quantity, an assumed constant) or --map {n}=uniform")
        rank = _first_input_rank(workload_path)
        if config.input_sizes and rank < 3:
            raise ValueError(f"{workload_path}: the first input has {rank} dimensions; input sizes apply to "
                             "dimensions 3 and up (give no input sizes)")
        free = tuple(d for d in (0,) + (tuple(range(2, 8)) if config.input_sizes else ()) if d < rank)
        base = [plans[a] for a in actions]
        workload = Workload(workload_path, base, n_inputs=1, seed=config.seed, free_dims=free)
        model_shape = workload.input_shape()
        meta = {"format": FORMAT, "command": command, "workload": Path(workload_path).name,
                "actions": list(actions), "plans": {a: plans[a].describe() for a in actions},
                "threads_rule": "the condition's threads replace 0 (default) in a plan; fixed threads stay",
                "inputs": _input_records(inputs, fmap, uniform, first), **_conditions_at_start(config, first),
                "model_input_shape": model_shape, "columns": profile_columns(names, actions)}
        t_start = time.monotonic()
        rows = []
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(meta["columns"])
            for i in range(config.samples):
                cond = _Condition.draw(rng, config, len(actions), inputs, uniform)
                load.set(cond.load, cond.kind)
                lat, acc, feats = _measure_sample(workload, base, model_shape, cond, config, i, probe, fmap,
                                                  names, uniform)
                row = {"sample": i, "load_procs": cond.load, "load_kind": cond.kind if cond.load else "",
                       "batch": cond.batch, "input_size": cond.size or "", "threads": cond.threads,
                       "order": "-".join(actions[k] for k in cond.order),
                       **dict(zip(names, feats)),
                       **{f"latency_ms.{a}": v for a, v in zip(actions, lat)},
                       **{f"accuracy_loss_pct.{a}": v for a, v in zip(actions, acc)}}
                w.writerow([row["sample"], cond.load, row["load_kind"], cond.batch, row["input_size"], cond.threads,
                            row["order"], *[_fmt(v, 6) for v in feats], *[_fmt(v, 4) for v in lat],
                            *[_fmt(v, 4) for v in acc]])
                rows.append(row)
                if on_sample:
                    on_sample(i, row)
        meta["duration_s"] = round(time.monotonic() - t_start, 1)
        meta["loadavg_end"] = list(os.getloadavg())
        meta["samples"] = len(rows)
        side = out_csv.with_suffix(".json")
        side.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, out_csv)
        return meta
    finally:
        load.stop()
        if tmp.exists():
            tmp.unlink()
        if workload is not None:
            workload.close()
        if own_probe:
            probe.close()


def _checked(out_csv, actions: Sequence[str], plans: dict[str, Plan], inputs, overrides: dict[str, str] | None,
             config: ProfileConfig) -> tuple[Path, list[str], set[str], FeatureMap]:
    """:func:`profile`'s arguments checked before anything runs: (out_csv as a Path, input names,
    the inputs drawn ``uniform``, the feature map of the others). Raises ValueError."""
    config.check()
    out_csv = Path(out_csv)
    if not out_csv.resolve().parent.is_dir():
        raise ValueError(f"{out_csv}: the folder does not exist")
    missing = [a for a in actions if a not in plans]
    if missing:
        raise ValueError(f"action '{missing[0]}' has no execution plan")
    names = [i[0] for i in inputs]
    overrides = dict(overrides or {})
    uniform = {n for n, v in overrides.items() if v.strip().lower() == UNIFORM}
    unknown = sorted(uniform - set(names))
    if unknown:
        raise ValueError(f"unknown controller input {unknown[0]!r} (inputs: {', '.join(names)})")
    return out_csv, names, uniform, FeatureMap.build(names, {n: v for n, v in overrides.items() if n not in uniform})


def _conditions_at_start(config: ProfileConfig, first) -> dict:
    """The sidecar's record of the start: the config, the machine, the probe's first readings and
    the load average."""
    return {"config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()},
            "machine": _machine(),
            "probe_at_start": {q: (r.value if r.value is not None else f"unavailable: {r.error}")
                               for q, r in sorted(first.readings.items())},
            "loadavg_start": list(os.getloadavg())}


def _first_input_rank(workload_path) -> int:
    """Dimensions of the workload model's first non-initializer input. Raises ValueError."""
    try:
        import onnx
        m = onnx.load(str(workload_path), load_external_data=False)
        inits = {i.name for i in m.graph.initializer}
        first_in = [v for v in m.graph.input if v.name not in inits][0]
        return len(first_in.type.tensor_type.shape.dim)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{workload_path}: cannot read the workload model: {exc}") from None


def _input_records(inputs, fmap: FeatureMap, uniform: set[str], first) -> list[dict]:
    """The sidecar's ``inputs``: per controller input its envelope, its source expression and what
    kind of value that is (measured, derived, an assumed constant, or drawn uniformly)."""
    out = []
    for (n, unit, lo, hi), src in zip(inputs, fmap.sources):
        if n in uniform:
            source = {"source": UNIFORM, "kind": f"assumed: drawn uniformly over [{lo:g}, {hi:g}] {unit} "
                                                 "per sample (the probe cannot read it)"}
        else:
            r = first.readings.get(src)
            try:
                float(src)
                kind = "assumed constant"
            except ValueError:
                kind = f"measured ({r.source})" if r is not None else "derived from " + src
            source = {"source": src, "kind": kind}
        out.append({"name": n, "unit": unit, "min": lo, "max": hi, **source})
    return out


@dataclass(frozen=True)
class _Condition:
    """One sample's conditions: background load (processes, kind), batch, threads, input size
    (None: the model's), the order the actions run in, and the drawn values of ``uniform`` inputs."""

    load: int
    kind: str
    batch: int
    threads: int
    size: int | None
    order: list[int]
    draws: dict[str, float]

    @staticmethod
    def draw(rng: np.random.Generator, config: ProfileConfig, n_actions: int, inputs, uniform: set[str]) -> "_Condition":
        """Draw the next sample's conditions from ``rng`` (in this order: load, kind, batch, threads,
        size, action order, uniform inputs; the order is part of the profile's reproducibility)."""
        load = int(rng.choice(config.load_levels))
        kind = str(rng.choice(config.load_kinds)) if len(config.load_kinds) > 1 else config.load_kinds[0]
        batch = int(rng.choice(config.batch_sizes))
        threads = int(rng.choice(config.threads))
        size = int(rng.choice(config.input_sizes)) if config.input_sizes else None
        order = [int(k) for k in rng.permutation(n_actions)]
        draws = {n: float(lo + (hi - lo) * rng.random()) for n, _, lo, hi in inputs if n in uniform}
        return _Condition(load, kind, batch, threads, size, order, draws)


class _BackgroundLoad:
    """The background-load processes of the current sample: :meth:`set` starts or stops processes
    to reach a count (a new kind replaces them all), :meth:`stop` ends them."""

    def __init__(self):
        self.procs: list = []
        self.kind: str | None = None

    def set(self, load: int, kind: str) -> None:
        if load and kind != self.kind:
            stop_background_load(self.procs)
            self.procs = []
        self.kind = kind
        if load > len(self.procs):
            self.procs += start_background_load(load - len(self.procs), kind)
        elif load < len(self.procs):
            stop_background_load(self.procs[load:])
            self.procs = self.procs[:load]

    def stop(self) -> None:
        if self.procs:
            stop_background_load(self.procs)


def _measure_sample(workload: Workload, base: list[Plan], model_shape: list, cond: _Condition,
                    config: ProfileConfig, i: int, probe, fmap: FeatureMap, names: list[str],
                    uniform: set[str]) -> tuple[list, list, list]:
    """Run sample ``i``: warm every plan up, read the probe after ``settle_s``, then
    ``config.rounds`` blocks of ``config.repeats`` requests per action in ``cond.order``.
    Returns (median latency ms per action, mean accuracy loss pp per action, the controller's
    inputs); an action whose runs failed has None."""
    shape = [cond.batch] + model_shape[1:2] + ([cond.size] * (len(model_shape) - 2) if cond.size else model_shape[2:])
    workload.set_inputs(shape, config.repeats, seed=config.seed + i)
    run_plans = [Plan(p.optimization, p.quantized, p.threads or cond.threads) for p in base]
    for k in cond.order:
        workload.measure(run_plans[k], 0)  # warm-up, discarded
    probe.read()
    if config.settle_s:
        time.sleep(config.settle_s)
    sample = probe.read()
    vals, _ = fmap(sample)
    feats = [cond.draws[n] if n in uniform else v for n, v in zip(names, vals)]
    lat: list[float | None] = [None] * len(base)
    acc: list[float | None] = [None] * len(base)
    runs: dict[int, list] = {k: [] for k in cond.order}
    for rnd in range(config.rounds):
        for k in cond.order:
            time.sleep(BLOCK_PAUSE_S)  # the plan that ran before lets its pool threads sleep
            if rnd:
                workload.measure(run_plans[k], 0)  # warm-up after the other plans ran, discarded
            runs[k] += [workload.measure(run_plans[k], r) for r in range(config.repeats)]
    for k in cond.order:
        res = runs[k]
        if all(x is not None for x, _ in res):
            lat[k] = float(np.median([x for x, _ in res]))
            acc[k] = float(np.mean([y for _, y in res]))
    return lat, acc, feats
