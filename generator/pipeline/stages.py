"""The build stages, one function each, in the order :func:`mi_certify.generator.pipeline.runner.build` runs them.

Every stage takes the :class:`BuildContext` (what the earlier stages produced: the
spec, the model, the LUT-FSM …), calls the generator or verification module that does
the work, writes its evidence into the staging directory through
:class:`~mi_certify.generator.bundle.evidence.Evidence`, and returns one
:class:`~mi_certify.generator.core.results.StageResult` whose ``record`` goes into
``summary.json``. Which module does each stage's work: docs/architecture.md.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import z3

from mi_certify.runtime.lut_file import encode_lut_hex
from mi_certify.runtime.sla import SlaLimits
from mi_certify.verification.tools import chromium
from mi_certify.verification.cosim import cocotb_sim
from mi_certify.verification.cosim import coverage
from mi_certify.verification.rtl import hdl_adapter
from mi_certify.verification.rtl import synth
from mi_certify.verification.tools import verilator
from mi_certify.verification.tools.backends import InlineBackend
from mi_certify.verification.tools.registry import ToolRunError
from mi_certify.verification.rtl.fsm_proofs import entry_alphabet, prove_fsm, write_proofs
from mi_certify.verification.rtl.lut_check import check_lut_properties
from mi_certify.verification.cosim.monitor_cosim import run_monitor_cosim
from mi_certify.verification.cosim.c_cosim import check_c_runtime
from mi_certify.verification.nn.network import verify_spec
from mi_certify.verification.nn.nn_verify import VerifyOptions
from mi_certify.verification.rtl.rtl_formal import rtl_obligations
from mi_certify.verification.rtl import sby
from mi_certify.verification.tools.registry import Background

from mi_certify.generator.bundle.distillation_file import DISTILLATION_TABLES, write_distillation
from mi_certify.generator.bundle.evidence import PROOF_INDEX, Evidence
from mi_certify.generator.bundle.stage_records import (STAGE_TEXT, c_runtime_record, cosim_record, distill_errors, emit_record,
                                                       fsm_proofs_record, hdl_record, latency_trials, lint_record,
                                                       lut_properties_record, lut_record, rtl_proofs_record,
                                                       sva_record, verify_record)
from mi_certify.generator.build.distill import DistillOptions, distill, fidelity
from mi_certify.generator.build.emit_c import c_file_names, emit_c
from mi_certify.generator.build.emit_common import SourceHashes
from mi_certify.generator.build.emit_python import emit_python
from mi_certify.generator.build.emit_sva import emit_sva, harness_document, job_files, sby_name
from mi_certify.generator.build.emit_verilog import emit_verilog
from mi_certify.generator.build.verilog_parts import ENCODINGS, LATENCIES
from mi_certify.generator.build.emit_constraints import emit_constraints
from mi_certify.generator.build.emit_monitor import copy_monitor_core, emit_sla_monitor, module_name as monitor_module
from mi_certify.generator.core.errors import BuildError
from mi_certify.generator.core.lut import (
    Lut, LutFsmArtefact, apply_masks, encode_status_runs, property_masks, sample_lut)
from mi_certify.generator.frontend.model import LoadedModel
from mi_certify.generator.core.results import StageResult, Status, Verdict
from mi_certify.generator.core.spec import Spec
from mi_certify.generator.pipeline.defaults import COSIM_RANDOM_CYCLES, COSIM_SEED  # noqa: F401 - public here too

#: Random points of the fidelity check against the network.
FIDELITY_POINTS = 100_000


def run_timed(on_event: Callable, times: dict, name: str, fn: Callable, status_of: Callable = lambda res: Status.OK.value):
    """Run ``fn()`` as stage ``name``: "start" and "done" events (``done`` carries
    ``name:status``, status from ``status_of(result)``), its seconds into ``times``."""
    on_event("start", name, None)
    t0 = time.perf_counter()
    res = fn()
    times[name] = round(time.perf_counter() - t0, 3)
    on_event("done", f"{name}:{status_of(res)}", times[name])
    return res


if TYPE_CHECKING:  # the only module that imports dask, loaded with --scheduler alone
    from mi_certify.verification.tools.dask_backend import DaskBackend


@dataclass
class BuildOptions:
    """Options of one build. ``cosim_cycles``: random cycles after the directed ones (None: sla.yaml
    ``cosim.cycles``, else COSIM_RANDOM_CYCLES). ``backend``: where the distillation's slices run (a
    live backend of :func:`mi_certify.verification.tools.backends.open_backend`; None: two processes of our
    own); it changes no output byte, so the manifest's command line does not name it."""

    cosim_cycles: int | None = None
    cosim_seed: int = COSIM_SEED
    skip_cosim: bool = False
    skip_lint: bool = False
    verify: bool = True
    verify_timeout: float = 60.0
    distill: bool = True
    heatmap: tuple[str, str] | None = None
    skip_rtl_proofs: bool = False
    skip_synth: bool = False
    backend: InlineBackend | DaskBackend | None = None


@dataclass
class BuildContext:
    """What one build has produced so far; each stage reads it and adds its products.

    ``d`` is the staging directory (renamed to the output directory when the build is
    complete); ``on_event(kind, name, value)`` receives progress ("start", "progress",
    "detail", "note", "done"); ``times`` the seconds per stage (timings.json, build.log: not hashed).
    """

    spec: Spec
    model: LoadedModel
    opts: BuildOptions
    d: Path
    on_event: Callable[[str, str, float | None], None]
    version: str
    times: dict[str, float] = field(default_factory=dict)
    query_times: dict[str, float] = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)
    proof_index: list[dict] = field(default_factory=list)
    results: dict[str, StageResult] = field(default_factory=dict)
    evidence: Evidence | None = None
    # products of the stages, in the order they appear
    verify_job: Background | None = None
    sva_job: Background | None = None
    boxes: list | None = None
    lut: Lut | None = None
    masks: list = field(default_factory=list)
    machine: LutFsmArtefact | None = None
    alphabet: dict = field(default_factory=dict)
    unmasked: list = field(default_factory=list)
    hashes: SourceHashes | None = None
    py_path: Path | None = None
    v_path: Path | None = None
    mon_path: Path | None = None
    #: the declared target's devices placed at emit time ({device: place_and_route record}; the hdl stage reuses them)
    target_pnr: dict | None = None
    #: the decision latency the emit stage chose (sla.yaml's, or for ``auto`` the smallest that meets
    #: the declared target, else 1); None before the emit stage
    hdl_latency: int | None = None

    @property
    def built_spec(self) -> Spec:
        """The spec of what was built: :attr:`spec` (sla.yaml as loaded, never replaced) with
        ``hdl.latency`` resolved to :attr:`hdl_latency` once the emit stage chose it. The stages
        after emit and the bundle read this one."""
        if self.hdl_latency is None:
            return self.spec
        return dataclasses.replace(self.spec, hdl=self.spec.hdl.with_latency(self.hdl_latency))

    def __post_init__(self):
        if self.evidence is None:
            self.evidence = Evidence(self.d)

    def timed(self, name: str, fn: Callable, status_of: Callable = lambda res: Status.OK.value):
        """Run ``fn()`` as stage ``name`` (:func:`run_timed`)."""
        return run_timed(self.on_event, self.times, name, fn, status_of)

    def progress(self, name: str, unit: str | None = None) -> Callable[[int, int], None]:
        """``progress(done, total)`` for stage ``name``: a "progress" event (the fraction) and,
        with ``unit``, a "detail" event ("12,288 / 65,536 cells decided")."""
        def report(a: int, b: int) -> None:
            if unit:
                self.on_event("detail", name, f"{a:,} / {b:,} {unit}")
            self.on_event("progress", name, a / b)
        return report

    def note(self, name: str, text: str) -> None:
        """A line for the user about stage ``name`` (a "note" event), e.g. an estimate."""
        self.on_event("note", name, text)

    def record(self, result: StageResult) -> StageResult:
        self.results[result.name] = result
        return result

    @property
    def stages(self) -> dict[str, dict]:
        """summary.json ``stages``: every stage's record, in build order."""
        return {name: r.record for name, r in self.results.items()}


def _status(ok: bool) -> str:
    return Status.OK.value if ok else Status.FAILED.value


# --- verify (beside the later stages) ---------------------------------------------------------

def start_verify(ctx: BuildContext) -> StageResult:
    """Network verification (properties + output domain) in a background thread: it reads only
    the IR and the spec, so it runs beside distillation and the later stages."""
    if not ctx.opts.verify:
        return StageResult.skipped("verify", STAGE_TEXT["verify.skipped"])
    # the search and the exact confirmation of a query get --verify-timeout each
    vopts = VerifyOptions(timeout=ctx.opts.verify_timeout, confirm_timeout=ctx.opts.verify_timeout)
    ctx.verify_job = Background(lambda: ctx.timed(
        "verify", lambda: verify_spec(ctx.model, ctx.spec, vopts, progress=ctx.progress("verify")),
        lambda r: _status(r.status == Verdict.PROVED.value)), name="mi-certify-verify")
    return StageResult("verify", {"status": Status.RUNNING.value})


def finish_verify(ctx: BuildContext) -> StageResult | None:
    """Join the verification thread; write verification.json (hashed: verdicts, machine-independent
    witnesses) and verification_log.json (not hashed: times, onnxruntime outputs). None when
    verification was skipped."""
    if ctx.verify_job is None:
        return None
    vres = ctx.verify_job.result()
    det = vres.deterministic_json()
    ctx.query_times.update({f"network.{r.id}": round(r.time_s, 3) for r in vres.properties})
    ctx.query_times.update({f"network.reachability.{r.id.split(':', 1)[1]}": round(r.time_s, 3)
                            for r in vres.reachability})
    ctx.evidence.write("verification.json", det)
    ctx.evidence.write("verification_log.json", vres.full_json())
    return StageResult("verify", verify_record(det, ctx.opts.verify_timeout), evidence=("verification.json",))


# --- lut: distillation, masks, lut_properties, the table ------------------------------------

def lut_stage(ctx: BuildContext) -> StageResult:
    """Certified distillation (or centre sampling with --sample-lut) over the quantized grid;
    fidelity against the network; distillation.json; the optional heat map."""
    spec = ctx.spec
    if ctx.opts.distill:
        def run():
            r = distill(spec, ctx.model, DistillOptions(resolve=spec.resolve),
                        progress=ctx.progress("lut", "cells decided"), backend=ctx.opts.backend)
            fid, fid_diag = fidelity(spec, ctx.model, r.lut, n_points=FIDELITY_POINTS)
            ctx.diagnostics["fidelity_onnxruntime"] = fid_diag
            return r, fid

        def errors_of(res):
            return distill_errors(spec, res[0].lut.counts()["resolved"], res[1])
        dres, fid = ctx.timed("lut", run, lambda res: Status.FAILED.value if errors_of(res) else Status.OK.value)
        ctx.lut, ctx.boxes = dres.lut, dres.boxes
        write_distillation(ctx.d, dres.boxes, dres.witnesses, spec.resolve, fid)
        record = lut_record(spec, ctx.lut.counts(), dres.boxes, fid)
        evidence = ("distillation.json", *DISTILLATION_TABLES.values())
    else:
        ctx.lut = ctx.timed("lut", lambda: sample_lut(spec, ctx.model.ir, progress=ctx.progress("lut")))
        record = lut_record(spec, ctx.lut.counts())
        evidence = ()
    if ctx.opts.heatmap:
        from mi_certify.generator.build.heatmap import (  # matplotlib: loaded only when a heat map is asked for
            write_heatmap)
        x, y = ctx.opts.heatmap
        write_heatmap(spec, ctx.lut, x, y, ctx.d / f"heatmap_{x}_{y}.png")
    return StageResult("lut", record, evidence=evidence)


def lut_properties_stage(ctx: BuildContext) -> StageResult:
    """Property masks applied to the LUT (rule 3a's cells overridden to the conservative
    action), then every forbid/require property checked on every LUT cell; lut_properties.json."""
    spec = ctx.spec
    ctx.masks = property_masks(spec)
    ctx.lut, overridden = apply_masks(spec, ctx.lut, ctx.masks)
    ctx.machine = LutFsmArtefact.from_lut(spec, ctx.lut, ctx.masks)
    violated = lambda rs: any(r.verdict == Verdict.VIOLATED.value for r in rs)  # noqa: E731
    props = ctx.timed("lut_properties", lambda: check_lut_properties(spec, ctx.lut.tokens),
                      lambda rs: Status.FAILED.value if violated(rs) else Status.OK.value)
    ctx.evidence.write("lut_properties.json", {
        "properties": [r.to_json() for r in props],
        "masks": [{"id": m.id, "levels": [list(m.lo), list(m.hi)],
                   "allowed": [a.name for i, a in enumerate(spec.actions) if (m.allowed >> i) & 1]}
                  for m in ctx.masks],
        "overridden_cells": overridden})
    return StageResult("lut_properties", lut_properties_record({r.id: r.verdict for r in props}, len(overridden)),
                       evidence=("lut_properties.json",))


def write_table(ctx: BuildContext) -> None:
    """lut.hex (one byte per address) and lut.json (its layout, cell counts, hash)."""
    spec, machine = ctx.spec, ctx.machine
    lb = machine.table
    (ctx.d / "lut.hex").write_text(encode_lut_hex(lb), encoding="ascii")
    counts = ctx.lut.counts()
    hist = np.bincount(machine.tokens, minlength=len(spec.actions))
    ctx.evidence.write("lut.json", {
        "format": "lut.hex: one line per address (address = line number), two hex digits: "
                  "bits 0-6 proposed token, bit 7 confident",
        "address_bits": spec.address_bits,
        "inputs": [{"name": i.name, "bits": i.bits, "min": i.min, "max": i.max, "unit": i.unit} for i in spec.inputs],
        "actions": [a.name for a in spec.actions], "cells": counts["cells"],
        "status": {k: counts[k] for k in ("proven", "resolved", "sampled")},
        "cell_status": encode_status_runs(ctx.lut.status),
        "tokens": {a.name: int(hist[i]) for i, a in enumerate(spec.actions)},
        "confident_cells": int(machine.confident.sum()), "sha256": machine.sha256})


# --- fsm_proofs ------------------------------------------------------------------------------

def fsm_proofs_stage(ctx: BuildContext) -> StageResult:
    """k-induction proofs of the LUT-FSM (Z3); the machine without rule 3a, whose
    counterexamples become directed co-simulation sequences."""
    machine, spec = ctx.machine, ctx.spec
    ctx.alphabet = entry_alphabet(machine)
    all_proved = lambda obs: all(o.verdict == Verdict.PROVED.value for o in obs)  # noqa: E731
    operator = spec.operator.config() if spec.operator else None   # docs/fsm.md, "Operator interventions"
    obs = ctx.timed("fsm_proofs", lambda: prove_fsm(machine, spec.properties, operator=operator),
                    lambda obs: Status.OK.value if all_proved(obs) else Status.FAILED.value)
    entries = write_proofs(obs, ctx.d, "fsm")
    ctx.proof_index += entries
    # the machine without rule 3a (docs/fsm.md): its counterexamples show why the mask is
    # there, and become directed co-simulation sequences (where the RTL must say MASKED)
    unmasked = [o for o in prove_fsm(machine, spec.properties, use_mask=False, fresh=operator is not None)
                if o.counterexample]
    ctx.unmasked = [o.counterexample for o in unmasked]
    ctx.evidence.write("proofs/fsm/without_rule_3a.json", {
        "note": "counterexamples of the machine without rule 3a (docs/fsm.md); not a defect of this build",
        "traces": {o.id: o.counterexample for o in unmasked}})
    return StageResult("fsm_proofs", fsm_proofs_record({o.id: o.verdict for o in obs}, len(ctx.alphabet),
                                                       len(ctx.unmasked)),
                       evidence=tuple(e["evidence"] for e in entries), proofs=entries)


# --- emit ------------------------------------------------------------------------------------

def auto_encoding(spec: Spec, machine: LutFsmArtefact, hashes: SourceHashes, boxes, version: str
                  ) -> tuple[str, dict]:
    """The ``auto`` encoding: each of :data:`ENCODINGS` emitted and estimated by Yosys
    (:func:`mi_certify.verification.rtl.synth.estimate`: iCE40 LUT4 + carries + BRAM x 176 behind
    registered inputs); the smallest wins, ties in the order of ENCODINGS.
    Returns (encoding, {encoding: estimate}); raises BuildError when Yosys fails."""
    from mi_certify.runtime.fsm import REASON_BITS
    est = {}
    with tempfile.TemporaryDirectory(prefix="mi-certify-auto-") as work:
        for enc in ENCODINGS:
            sub = Path(work) / enc
            sub.mkdir()
            v = sub / f"{spec.module_name}.v"
            v.write_text(emit_verilog(spec, machine, hashes, version, encoding=enc, boxes=boxes), encoding="utf-8")
            try:
                est[enc] = synth.estimate(v, spec.module_name, spec.address_bits, spec.token_bits, REASON_BITS,
                                          spec.hdl.reset_port)
            except synth.SynthError as exc:
                raise BuildError(f"hdl.encoding auto: {exc}") from None
    return min(ENCODINGS, key=lambda e: (est[e], ENCODINGS.index(e))), est


def _emit_candidate(spec: Spec, machine: LutFsmArtefact, hashes: SourceHashes, boxes, version: str, encoding: str,
                    latency: int, work: Path) -> Path:
    """The Verilog of one candidate design written into ``work``; returns the .v path."""
    v = work / f"{spec.module_name}.v"
    v.write_text(emit_verilog(spec, machine, hashes, version, encoding=encoding, boxes=boxes, latency=latency),
                 encoding="utf-8")
    return v


def measure_target(spec: Spec, machine: LutFsmArtefact, hashes: SourceHashes, boxes, version: str, encoding: str,
                   latencies: tuple[int, ...]) -> tuple[int, dict, dict]:
    """The declared target measured before the Verilog is written (its header states the verdict):
    for each of ``latencies`` in order, the design emitted and placed on the target's devices
    (:func:`mi_certify.verification.rtl.synth.place_and_route`, the hdl stage's seed and wrapper) until
    one meets it (``hdl.latency: auto``: 1, 2, 3; else the one latency). None meeting it: the one
    with the highest Fmax on its worst device (ties: the smaller latency).

    Returns (latency, {latency: place_and_route record} of the tried ones, the chosen one's
    :func:`~mi_certify.verification.rtl.synth.target_verdict`); raises BuildError when a tool fails."""
    from mi_certify.runtime.fsm import REASON_BITS
    target = spec.hdl.declared_target
    devices = tuple(target.devices(synth.DEVICES))
    tried: dict = {}
    with tempfile.TemporaryDirectory(prefix="mi-certify-target-") as work:
        for lat in latencies:
            sub = Path(work) / f"latency{lat}"
            sub.mkdir()
            v = _emit_candidate(spec, machine, hashes, boxes, version, encoding, lat, sub)
            try:
                tried[lat] = synth.place_and_route(v, spec.module_name, spec.address_bits, spec.token_bits,
                                                   REASON_BITS, spec.hdl.reset_port, devices=devices)
            except synth.SynthError as exc:
                raise BuildError(f"hdl.target (latency {lat}): {exc}") from None
            if synth.target_verdict(target, tried[lat])["met"]:
                break
    verdicts = {lat: synth.target_verdict(target, pnr) for lat, pnr in tried.items()}
    met = [lat for lat, v in verdicts.items() if v["met"]]
    worst = lambda lat: min((f or 0.0) for f in verdicts[lat]["fmax_mhz"].values())  # noqa: E731
    chosen = met[0] if met else max(tried, key=lambda lat: (worst(lat), -lat))
    return chosen, tried, verdicts[chosen]


def emit_stage(ctx: BuildContext) -> StageResult:
    """The Python runtime, the Verilog (encoding from sla.yaml, or ``auto``; a ROM's contents inline),
    the SLA-monitor wrapper and core, the C runtime and, with a declared clock, the constraint files
    (``<module>.sdc`` / ``.pcf`` / ``.lpf``). Headers name the model, spec and LUT hashes."""
    spec, d = ctx.spec, ctx.d
    ctx.hashes = SourceHashes(ctx.model.sha256, hashlib.sha256(spec.source).hexdigest(), ctx.machine.sha256)
    ctx.py_path, ctx.v_path = d / f"{spec.name}.py", d / f"{spec.module_name}.v"
    ctx.mon_path = d / f"{monitor_module(spec)}.v"
    # the distillation partition, for the box-tree encoding (inclusive level ranges)
    boxes = (list(zip(ctx.boxes["level_lo"].astype(int).tolist(), ctx.boxes["level_hi"].astype(int).tolist()))
             if ctx.boxes is not None else None)
    encoding, estimates = spec.hdl.encoding, None
    if encoding == "auto":
        encoding, estimates = ctx.timed("hdl_encoding", lambda: auto_encoding(spec, ctx.machine, ctx.hashes, boxes,
                                                                              ctx.version))
    # the declared target measured on the design before it is written, so the header states whether it
    # is met; hdl.latency auto: the smallest latency that meets it (docs/hdl.md, "Declared target")
    target, header, trials = spec.hdl.declared_target, None, None
    measure = target is not None and not ctx.opts.skip_synth and not synth.tools_missing()
    ctx.hdl_latency = spec.hdl.latency_cycles  # "auto" without a measurement: 1
    if measure:
        lats = LATENCIES if spec.hdl.latency == "auto" else (spec.hdl.latency_cycles,)
        ctx.hdl_latency, trials, header = ctx.timed("hdl_target", lambda: measure_target(
            spec, ctx.machine, ctx.hashes, boxes, ctx.version, encoding, lats))
        ctx.target_pnr = trials[ctx.hdl_latency]
    spec = ctx.built_spec
    latency = spec.hdl.latency_cycles
    constraints = emit_constraints(spec, ctx.version, ctx.hashes.spec)  # SDC, PCF, LPF: with a declared clock

    def run():
        ctx.py_path.write_text(emit_python(spec, ctx.machine, ctx.hashes, ctx.version), encoding="utf-8")
        ctx.v_path.write_text(emit_verilog(spec, ctx.machine, ctx.hashes, ctx.version, encoding=encoding,
                                           boxes=boxes, latency=latency, target_measured=header), encoding="utf-8")
        ctx.mon_path.write_text(emit_sla_monitor(spec, ctx.hashes.spec, ctx.version), encoding="utf-8")
        copy_monitor_core(d)
        for fname, text in zip(c_file_names(spec), emit_c(spec, ctx.machine, ctx.hashes, ctx.version)):
            (d / fname).write_text(text, encoding="utf-8")
        for fname, text in constraints.items():
            (d / fname).write_text(text, encoding="utf-8")
        for fname, text in sva.items():
            (d / fname).write_text(text, encoding="utf-8")
    sva = emit_sva(spec, ctx.machine, ctx.hashes, ctx.version, latency)
    ctx.timed("emit", run)
    files = (ctx.py_path.name, ctx.v_path.name, ctx.mon_path.name, "sla_monitor.v",
             *c_file_names(spec), *constraints, *sva)
    return StageResult("emit", emit_record(spec, encoding, header, estimates,
                                           latency_trials(trials) if trials is not None else None), evidence=files)


# --- lint, rtl_proofs ------------------------------------------------------------------------

def lint_stage(ctx: BuildContext) -> StageResult:
    """Verilator --lint-only -Wall of the controller and of the SLA-monitor wrapper; lint.json."""
    if ctx.opts.skip_lint:
        return StageResult.skipped("lint", STAGE_TEXT["lint.skipped"])
    spec = ctx.built_spec
    res = ctx.timed("lint", lambda: verilator.lint(ctx.v_path, spec.module_name),
                    lambda r: Status.OK.value if r.clean else Status.FAILED.value)
    mon = verilator.lint(ctx.mon_path, monitor_module(spec), extra=(ctx.d / "sla_monitor.v",))
    lint = {**res.to_json(), "sla_monitor": mon.to_json()}
    ctx.evidence.write("lint.json", lint)
    return StageResult("lint", lint_record(lint), evidence=("lint.json",))


def rtl_proofs_stage(ctx: BuildContext) -> StageResult:
    """The RTL against the reference LUT-FSM (Yosys write_smt2 + Z3; the table at every
    address); proofs/rtl/. A tool or solver failure fails the stage (fails closed)."""
    if ctx.opts.skip_rtl_proofs:
        return StageResult.skipped("rtl_proofs", STAGE_TEXT["rtl_proofs.skipped"])
    spec = ctx.built_spec

    def run():
        try:
            return rtl_obligations(ctx.v_path, spec.module_name, ctx.machine, ctx.alphabet,
                                   reset_port=spec.hdl.reset_port, reset_active_low=spec.hdl.reset_polarity == "low",
                                   latency=spec.hdl.latency_cycles,
                                   operator=spec.operator.config() if spec.operator else None)
        except (ToolRunError, OSError, z3.Z3Exception) as exc:  # Yosys or Z3 failed: the stage fails closed
            return exc
    proved = lambda r: not isinstance(r, Exception) and all(o.verdict == Verdict.PROVED.value  # noqa: E731
                                                             for o in r[0])
    res = ctx.timed("rtl_proofs", run, lambda r: Status.OK.value if proved(r) else Status.FAILED.value)
    if isinstance(res, Exception):
        return StageResult("rtl_proofs", {"status": Status.FAILED.value, "error": f"{type(res).__name__}: {res}"})
    obs, prelude = res
    entries = write_proofs(obs, ctx.d, "rtl", prelude=("proofs/rtl/design.smt2", prelude))
    ctx.proof_index += entries
    return StageResult("rtl_proofs", rtl_proofs_record({o.id: o.verdict for o in obs}),
                       evidence=("proofs/rtl/design.smt2", *(e["evidence"] for e in entries)), proofs=entries)


def sva_stage(ctx: BuildContext) -> StageResult:
    """The second proof path (docs/hdl.md, "SVA and SymbiYosys"): starts the emitted SymbiYosys job
    ``<module>.sby`` on the SVA harness ``<module>_formal.sv`` and the emitted Verilog (YoWASP
    SymbiYosys, k-induction, Yices) in a background thread, beside the stages that follow (it reads
    copies of files they do not change); :func:`finish_sva` joins it."""
    if ctx.opts.skip_rtl_proofs:
        return StageResult.skipped("sva", STAGE_TEXT["sva.skipped"])
    spec, d = ctx.built_spec, ctx.d
    job, files = d / sby_name(spec), job_files(spec, d)
    ctx.sva_job = Background(lambda: ctx.timed(
        "sva", lambda: sby.run_sby(job, files),
        lambda r: Status.OK.value if r.verdict == "proved" else Status.FAILED.value), name="mi-certify-sva")
    return StageResult("sva", {"status": Status.RUNNING.value})


def finish_sva(ctx: BuildContext) -> StageResult | None:
    """Join :func:`sva_stage`'s job; sva.json. Anything but PASS fails the stage (fails closed).
    None when the stage was skipped."""
    if ctx.sva_job is None:
        return None
    res = ctx.sva_job.result()
    spec = ctx.built_spec
    doc = sva_document(spec, ctx.machine, spec.hdl.latency_cycles, res.to_json())
    ctx.evidence.write("sva.json", doc)
    return StageResult("sva", sva_record(doc), evidence=("sva.json",))


def sva_document(spec: Spec, machine: LutFsmArtefact, latency: int, result: dict) -> dict:
    """sva.json: the harness (:func:`mi_certify.generator.build.emit_sva.harness_document`), the engine, and the
    run's result (:meth:`mi_certify.verification.rtl.sby.SbyResult.to_json`)."""
    return {**harness_document(spec, machine, latency), "engine": sby.ENGINE, **result}


def write_proof_index(ctx: BuildContext) -> None:
    ctx.evidence.write(PROOF_INDEX, {"obligations": ctx.proof_index})


# --- cosim -----------------------------------------------------------------------------------

def cosim_stage(ctx: BuildContext) -> StageResult:
    """Co-simulation: the FSM (cocotb + Icarus, every cycle, against the reference and the
    emitted runtime), the SLA monitor (Icarus), the Verilator code-coverage replay of the FSM
    vectors (beside Icarus, when sla.yaml sets a line, toggle or branch threshold); coverage
    against the sla.yaml thresholds. Writes cosim.json, monitor_cosim.json, coverage.json."""
    if ctx.opts.skip_cosim:
        return StageResult.skipped("cosim", STAGE_TEXT["cosim.skipped"])
    record = ctx.timed("cosim", lambda: _cosim(ctx), lambda r: Status.OK.value if r["status"] == Status.OK.value else Status.FAILED.value)
    return StageResult("cosim", record, evidence=("cosim.json", "monitor_cosim.json", "coverage.json"))


def _cosim(ctx: BuildContext) -> dict:
    import shutil
    spec, opts, machine, d = ctx.built_spec, ctx.opts, ctx.machine, ctx.d
    with tempfile.TemporaryDirectory(prefix="mi-certify-cosim-") as work:
        work = Path(work)
        # options (reset port, polarity, prefix) adapted to the test bench's active-high rst
        operator = spec.operator.config() if spec.operator else None   # the command port driven too
        sims = {sim: hdl_adapter.prepare(ctx.v_path, spec.module_name, spec.hdl.reset_port, machine, work / sim,
                                         operator is not None) for sim in ("icarus", "verilator")}
        replay = None
        if spec.cosim.code_coverage:
            replay = Background(lambda: coverage.verilator_replay(*sims["verilator"], machine, work / "verilator",
                                                                  tuple(ctx.unmasked), opts.cosim_cycles,
                                                                  opts.cosim_seed, spec.hdl.latency_cycles,
                                                                  operator))
        monitor = Background(lambda: run_monitor_cosim(
            [SlaLimits(a.latency_ms, a.accuracy_loss_pct) for a in spec.actions], spec.monitor, work / "monitor",
            random_requests=spec.cosim.monitor_requests, seed=opts.cosim_seed))
        res = cocotb_sim.run_cosim(*sims["icarus"], machine, work / "icarus", runtime_py=ctx.py_path,
                                   traces=tuple(ctx.unmasked), random_cycles=opts.cosim_cycles, seed=opts.cosim_seed,
                                   latency=spec.hdl.latency_cycles, operator=operator)
        mon = monitor.result()
        code = replay.result() if replay is not None else None
        for log in ("icarus/icarus.log", "verilator/verilator.log"):
            if (not res.passed or (code is not None and not code[0].ok)) and (work / log).exists():
                shutil.copyfile(work / log, d / Path(log).name)
    ctx.evidence.write("cosim.json", res.to_json())
    ctx.evidence.write("monitor_cosim.json", mon.to_json())
    cov = coverage.assess(machine, res.report, code, dict(spec.cosim.coverage))
    ctx.evidence.write("coverage.json", cov)
    return cosim_record(res.to_json(), mon.to_json(), cov)


# --- c_runtime -------------------------------------------------------------------------------

def c_runtime_stage(ctx: BuildContext) -> StageResult:
    """The emitted C runtime (docs/c-runtime.md): gcc and clang -Werror, cppcheck MISRA, Cortex-M4 size
    and stack, and the co-simulation of its records on the Verilog co-simulation's stimulus (same seed,
    cycles and traces); c_runtime.json. Skipped with the co-simulation; a missing tool fails it."""
    if ctx.opts.skip_cosim:
        return StageResult.skipped("c_runtime", STAGE_TEXT["c_runtime.skipped"])
    spec = ctx.built_spec
    res = ctx.timed("c_runtime", lambda: check_c_runtime(spec, ctx.machine, ctx.d / c_file_names(spec)[1],
                                                         ctx.opts.cosim_cycles,
                                                         ctx.opts.cosim_seed, tuple(ctx.unmasked), ctx.py_path),
                    lambda r: Status.OK.value if r["status"] == Status.OK.value else Status.FAILED.value)
    ctx.evidence.write("c_runtime.json", res)
    return StageResult("c_runtime", c_runtime_record(res), evidence=("c_runtime.json",))


# --- hdl -------------------------------------------------------------------------------------

def hdl_stage(ctx: BuildContext) -> StageResult:
    """Synthesis and place and route figures (Yosys, nextpnr-ice40 / -ecp5: every device of
    :data:`mi_certify.verification.rtl.synth.DEVICES`). Runs after the network verification has
    joined: its queries have wall-clock budgets, and Yosys / nextpnr would take a core from them.

    The declared target (``hdl.target``, or ``hdl.clock_mhz`` alone on every device) decides the
    status: missed and not advisory, the stage fails with the target's one-line ``detail`` as its
    ``error`` (the figures stay in the record); missed and advisory, it is ok with a ``warning``."""
    missing = synth.tools_missing()
    if ctx.opts.skip_synth:
        return StageResult.skipped("hdl", STAGE_TEXT["hdl.skipped"])
    if missing:
        return StageResult.skipped("hdl", f"not installed: {', '.join(missing)}")

    def run():
        try:
            return synth.hdl_numbers(ctx.built_spec, ctx.v_path, known=ctx.target_pnr)
        except (synth.SynthError, OSError) as exc:  # a tool failed or its report is unreadable: the stage fails
            return exc
    numbers = ctx.timed("hdl", run, lambda r: Status.FAILED.value if isinstance(r, Exception) else Status.OK.value)
    if isinstance(numbers, Exception):
        return StageResult("hdl", {"status": Status.FAILED.value, "error": f"{type(numbers).__name__}: {numbers}"[:800]})
    return StageResult("hdl", hdl_record(numbers, synth.SEED, header=ctx.results["emit"].record.get("target_header")
                                         if "emit" in ctx.results else None))


# --- report screenshot -----------------------------------------------------------------------

#: Set to ``0`` to leave the screenshot out (a machine with Chromium that builds often: the test
#: suite sets it, as the screenshot costs about 2 s and 1.5 CPU-s a build and no test reads it).
SCREENSHOT_ENV = "MI_CERTIFY_SCREENSHOT"


def screenshot(d: Path) -> bool:
    """Load report.html in headless Chromium and save report.png (not hashed); True when taken;
    False without Chromium or with ``MI_CERTIFY_SCREENSHOT=0`` (:data:`SCREENSHOT_ENV`). Console
    errors are the report test's business (tests/e2e/test_certificate.py)."""
    if os.environ.get(SCREENSHOT_ENV) == "0" or chromium.find_chromium() is None:
        return False
    try:
        res = chromium.load_page(d / "report.html", screenshot=d / "report.png")
    except (OSError, chromium.ToolUnavailable):  # a screenshot is a convenience, never a build failure
        (d / "report.png").unlink(missing_ok=True)
        return False
    return res.loaded
