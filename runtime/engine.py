"""A real inference engine under the controller: onnxruntime on this machine.

Each action of the controller is an execution *plan* of the workload model
(docs/runtime.md, "Live loop" has the table):

==============  ====================================================================
keep            fp32 model as shipped, graph optimisation disabled, default threads
merge_conv      fp32, graph optimisation ``extended`` (Conv+BatchNorm+Relu, MatMul+Add and
                the other fusions; ``all`` adds the NCHWc layout transformer, which the
                shipped profile did not measure apart)
int4            dynamically quantized model (``onnxruntime.quantization.quantize_dynamic``,
                8-bit weights: onnxruntime's CPU provider has no 4-bit convolution, so
                8-bit is the nearest real stand-in), optimisation ``extended``, one
                intra-op thread
offload_cpu     fp32, optimisation ``extended``, one intra-op thread (fewer CPU resources)
==============  ====================================================================

Why these (docs/training.md, "A workload with regimes"): on the regime workload
(examples/workload/make_regime_workload.py) two threads win on an idle machine, one thread
when another process keeps a core busy, and the 8-bit weights when another process also
takes memory bandwidth.

Accuracy loss of a request: 100 percentage points if the top-1 class differs from
the fp32 reference output (plan ``keep``) for the same input, else 0; averaged over
a window (statistic ``mean``) this is the top-1 disagreement rate in percent.
Latency: wall-clock time of ``InferenceSession.run`` in milliseconds.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .live import ControlLoop

__all__ = ["DEFAULT_PLANS", "LOAD_KINDS", "LiveReport", "Plan", "Workload", "parse_plan", "run_live", "start_background_load",
           "stop_background_load"]

_LEVELS = ("disable", "basic", "extended", "all")


@dataclass(frozen=True)
class Plan:
    """How one action runs the workload: graph optimisation level (disable, basic, extended,
    all), whether the dynamically quantized model is used, intra-op threads (0 = default)."""

    optimization: str = "disable"
    quantized: bool = False
    threads: int = 0

    def describe(self) -> str:
        return (f"optimisation {self.optimization}, {'quantized' if self.quantized else 'fp32'}, "
                f"{self.threads or 'default'} intra-op threads")


DEFAULT_PLANS = {"keep": Plan("disable", False, 0), "merge_conv": Plan("extended", False, 0),
                 "int4": Plan("extended", True, 1), "offload_cpu": Plan("extended", False, 1)}


def parse_plan(text: str) -> tuple[str, Plan]:
    """Parse ``ACTION=LEVEL[,quantized][,threads=N]``. Raises ValueError."""
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(disable|basic|extended|all)((?:,quantized|,threads=[0-9]{1,3})*)",
                     text.strip())
    if not m:
        raise ValueError(f"{text!r} is not ACTION=LEVEL[,quantized][,threads=N] with LEVEL one of "
                         f"{', '.join(_LEVELS)}")
    opts = m.group(3)
    t = re.search(r"threads=([0-9]+)", opts)
    return m.group(1), Plan(m.group(2), ",quantized" in opts, int(t.group(1)) if t else 0)


class Workload:
    """The workload model with one onnxruntime session per distinct plan.

    Args:
        model: path of the ONNX workload (one float input; symbolic dimensions become 1).
        plans: plan per action token.
        n_inputs: number of distinct random inputs, cycled (seeded, standard normal).
        seed: seed of the inputs.
        free_dims: dimensions of the first input to make symbolic (on a private copy of the model),
            so :meth:`set_inputs` can change batch size or image size; () runs the model as shipped.
    Raises:
        ValueError if the model cannot be loaded or quantized.
    """

    def __init__(self, model: str | os.PathLike, plans: list[Plan], n_inputs: int = 32, seed: int = 0,
                 free_dims: tuple[int, ...] = ()):
        import onnxruntime as ort

        self._ort = ort
        self.source = Path(model)
        self.model = Path(model)
        self.plans = list(plans)
        self._tmp = tempfile.TemporaryDirectory(prefix="mi-certify-workload-")
        self._quantized: Path | None = None
        self._sessions: dict[Plan, object] = {}
        if free_dims:
            self.model = self._free_dims(free_dims)
        try:
            ref = self._session(Plan("disable", False, 0))
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ValueError(f"{model}: onnxruntime cannot load the workload: {exc}") from None
        inp = ref.get_inputs()[0]
        if "float" not in inp.type:
            raise ValueError(f"{model}: the workload's first input must be float, not {inp.type}")
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in inp.shape]
        if free_dims:  # the dimensions made symbolic keep the model's own sizes for the first inputs
            shape = [s if j in free_dims else d for j, (d, s) in enumerate(zip(shape, self._static_shape))]
        self.input_name = inp.name
        rng = np.random.default_rng(seed)
        self.inputs = [rng.standard_normal(shape).astype(np.float32) for _ in range(n_inputs)]
        self.reference = [ref.run(None, {self.input_name: x})[0] for x in self.inputs]
        for p in self.plans:
            try:
                s = self._session(p)
                s.run(None, {self.input_name: self.inputs[0]})  # warm-up
            except Exception as exc:  # noqa: BLE001
                raise ValueError(f"{model}: plan '{p.describe()}' cannot run: {exc}") from None

    def _free_dims(self, dims: tuple[int, ...]) -> Path:
        """A copy of the model whose first input has symbolic dimensions ``dims`` (e.g. batch 0,
        height 2, width 3) and whose outputs are fully symbolic, so other shapes can run.
        Raises ValueError if the model cannot be read or the input has fewer dimensions."""
        import onnx
        try:
            m = onnx.load(str(self.model))
        except Exception as exc:  # noqa: BLE001 - onnx raises several types
            raise ValueError(f"{self.model}: cannot read the workload model: {exc}") from None
        inits = {i.name for i in m.graph.initializer}
        graph_inputs = [v for v in m.graph.input if v.name not in inits]
        if not graph_inputs:
            raise ValueError(f"{self.model}: the workload model has no input")
        shape = graph_inputs[0].type.tensor_type.shape
        if any(d >= len(shape.dim) for d in dims):
            raise ValueError(f"{self.model}: input '{graph_inputs[0].name}' has {len(shape.dim)} dimensions; "
                             f"cannot free dimension {max(dims)}")
        self._static_shape = [d.dim_value if d.HasField("dim_value") else 1 for d in shape.dim]
        for j in dims:
            shape.dim[j].ClearField("dim_value")
            shape.dim[j].dim_param = f"mi_certify_d{j}"
        for out in m.graph.output:
            for j, d in enumerate(out.type.tensor_type.shape.dim):
                d.ClearField("dim_value")
                d.dim_param = f"mi_certify_out{j}"
        del m.graph.value_info[:]  # intermediate shapes were inferred for the old input shape
        path = Path(self._tmp.name) / "dynamic.onnx"
        onnx.save(m, str(path))
        return path

    def input_shape(self) -> list[int]:
        """Shape of the current inputs."""
        return list(self.inputs[0].shape)

    def set_inputs(self, shape: list[int], n_inputs: int, seed: int = 0) -> None:
        """Replace the inputs by ``n_inputs`` seeded standard-normal tensors of ``shape`` and recompute
        their fp32 reference outputs. Raises ValueError if the model cannot run that shape."""
        rng = np.random.default_rng(seed)
        inputs = [rng.standard_normal(shape).astype(np.float32) for _ in range(n_inputs)]
        ref = self._session(Plan("disable", False, 0))
        try:
            reference = [ref.run(None, {self.input_name: x})[0] for x in inputs]
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"{self.source}: the workload cannot run an input of shape {shape}: {exc}") from None
        self.inputs, self.reference = inputs, reference

    def measure(self, plan: Plan, i: int) -> tuple[float | None, float | None]:
        """Run input ``i`` (mod n) under ``plan`` (its session is made on first use):
        (latency ms, accuracy loss pp vs the fp32 reference), or (None, None) if the run fails."""
        x = self.inputs[i % len(self.inputs)]
        try:
            s = self._session(plan)
            t0 = time.perf_counter()
            y = s.run(None, {self.input_name: x})[0]
            dt = (time.perf_counter() - t0) * 1e3
        except Exception:  # noqa: BLE001 - a failed request is a measurement, not a crash
            return None, None
        ref = self.reference[i % len(self.inputs)]
        if y.shape != ref.shape:
            return dt, 100.0
        # per batch element: top-1 differs from fp32 -> 100 pp; the request's loss is the mean over the batch
        y2, r2 = y.reshape(y.shape[0], -1), ref.reshape(ref.shape[0], -1)
        return dt, float(np.mean(np.argmax(y2, axis=1) != np.argmax(r2, axis=1)) * 100.0)

    def _session(self, plan: Plan):
        if plan in self._sessions:
            return self._sessions[plan]
        ort = self._ort
        path = self.model
        if plan.quantized:
            if self._quantized is None:
                import logging
                from onnxruntime.quantization import QuantType, quantize_dynamic
                self._quantized = Path(self._tmp.name) / "quantized.onnx"
                level = logging.getLogger().level
                logging.getLogger().setLevel(logging.ERROR)  # the quantizer warns about pre-processing
                try:
                    quantize_dynamic(str(self.model), str(self._quantized), weight_type=QuantType.QInt8)
                finally:
                    logging.getLogger().setLevel(level)
            path = self._quantized
        o = ort.SessionOptions()
        o.graph_optimization_level = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                      "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                      "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                      "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[plan.optimization]
        o.intra_op_num_threads = plan.threads
        o.log_severity_level = 3
        s = ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])
        self._sessions[plan] = s
        return s

    def run(self, token: int, i: int) -> tuple[float | None, float | None]:
        """Run input ``i`` (mod n) under the plan of ``token``: (latency ms, accuracy loss pp).
        A failing run gives (None, None): the SLA monitor counts it as a violation."""
        return self.measure(self.plans[token], i)

    def close(self):
        self._sessions.clear()
        self._tmp.cleanup()


@dataclass
class LiveReport:
    """Counts of one live run (also recomputable from its audit log with ``audit replay``)."""

    requests: int = 0
    tokens: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    switches: Counter = field(default_factory=Counter)
    fallbacks: int = 0
    recoveries: int = 0
    violations: int = 0
    latency_ms: dict = field(default_factory=dict)  # action -> list of latencies
    phases: list = field(default_factory=list)      # (phase name, first request, Counter of tokens)
    probe_faults: int = 0                            # steps that were probe faults
    fault_inputs: Counter = field(default_factory=Counter)  # input -> probe-fault steps it caused
    fault_first: dict = field(default_factory=dict)  # input -> its first cause (quantize.fault_causes)

    def to_json(self) -> dict:
        lat = {a: {"requests": len(v), "median_ms": round(float(np.median(v)), 3),
                   "p90_ms": round(float(np.percentile(v, 90)), 3)} for a, v in self.latency_ms.items() if v}
        return {"requests": self.requests, "tokens": dict(self.tokens), "reasons": dict(self.reasons),
                "switches": dict(self.switches), "switch_count": sum(self.switches.values()),
                "fallbacks": self.fallbacks, "recoveries": self.recoveries, "sla_violations": self.violations,
                "latency": lat, "phases": [{"phase": p, "from_request": i, "tokens": dict(c)} for p, i, c in self.phases],
                "probe_faults": {"steps": self.probe_faults,
                                 "by_input": {n: {"steps": k, "first": self.fault_first.get(n)}
                                              for n, k in sorted(self.fault_inputs.items())}}}


#: Background load kinds (:func:`start_background_load`): what one process does, forever.
#: ``cpu``: a Python busy loop (one core, no memory traffic). ``stream``: numpy copies between two
#: 64 MiB arrays, both ways (STREAM "Copy": one core plus DRAM bandwidth, the arrays being twice
#: any last-level cache here). ``thrash``: random read-modify-writes of 8-byte words over a 64 MiB
#: array (numpy fancy indexing, 1 Mi indices a pass): one core plus last-level-cache evictions and
#: TLB misses, little streaming bandwidth.
LOAD_KINDS = {
    "cpu": "while True: pass",
    "stream": ("import numpy as np\na = np.ones(1 << 23); b = np.empty_like(a)\n"
               "while True:\n    np.copyto(b, a); np.copyto(a, b)"),
    "thrash": ("import numpy as np\nn = 1 << 23\nidx = np.random.default_rng(0).integers(0, n, 1 << 20)\n"
               "a = np.ones(n)\nwhile True:\n    a[idx] += 1.0"),
}


def start_background_load(n: int, kind: str = "cpu") -> list[subprocess.Popen]:
    """Start ``n`` background-load processes of ``kind`` (a key of :data:`LOAD_KINDS`); stop them
    with :func:`stop_background_load`. Raises ValueError for an unknown kind."""
    if kind not in LOAD_KINDS:
        raise ValueError(f"unknown background load kind {kind!r} (kinds: {', '.join(LOAD_KINDS)})")
    return [subprocess.Popen([sys.executable, "-c", LOAD_KINDS[kind]], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(n)]


def stop_background_load(procs: list[subprocess.Popen]) -> None:
    """Kill and reap the processes of :func:`start_background_load`."""
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def run_live(loop: ControlLoop, workload: Workload, requests: int, background_load: int = 0,
             interval_s: float = 0.0, on_request=None, stop=None) -> LiveReport:
    """Run ``requests`` requests through the control loop.

    With ``background_load`` > 0, that many busy-loop processes run during the middle
    third of the requests (phases: quiet, loaded, quiet). ``interval_s``: pause between
    requests (the probe then sees the engine's duty cycle, not a 100 % busy loop).
    ``on_request(i, decision, verdict, latency_ms)`` is called after each request.
    ``stop()``, when given, is asked before each request; True ends the run there (the
    report then counts the requests done).
    """
    rep = LiveReport()
    actions = loop.build.actions
    load: list[subprocess.Popen] = []
    edges = (requests // 3, 2 * requests // 3) if background_load else (requests, requests)
    phase = None
    try:
        for i in range(requests):
            if stop is not None and stop():
                break
            want = "loaded" if edges[0] <= i < edges[1] else "quiet"
            if want != phase:
                if want == "loaded":
                    load = start_background_load(background_load)
                elif load:
                    stop_background_load(load)
                    load = []
                phase = want
                rep.phases.append((phase, i, Counter()))
            before_t, before_f = loop.ctl.t, loop.ctl.f
            d = loop.decide()
            lat, acc = workload.run(d.token, i)
            v = loop.complete(d, lat, acc, extra={"request": i, "phase": phase,
                                                  "accuracy": "top-1 vs fp32"})
            name = actions[d.token]
            rep.requests += 1
            rep.tokens[name] += 1
            rep.phases[-1][2][name] += 1
            rep.reasons[d.reason] += 1
            if d.reason == "SWITCH":
                rep.switches[f"{actions[before_t]}->{name}"] += 1
            if d.reason == "FALLBACK" and not before_f:
                rep.fallbacks += 1
            if d.reason == "RECOVER":
                rep.recoveries += 1
            rep.violations += v.violation
            if d.probe_fault:
                rep.probe_faults += 1
                for cause in loop.fault_causes(d):
                    rep.fault_inputs[cause["input"]] += 1
                    rep.fault_first.setdefault(cause["input"], cause)
            if lat is not None and math.isfinite(lat):
                rep.latency_ms.setdefault(name, []).append(lat)
            if on_request:
                on_request(i, d, v, lat)
            if interval_s > 0:
                time.sleep(interval_s)
    finally:
        if load:
            stop_background_load(load)
    return rep
