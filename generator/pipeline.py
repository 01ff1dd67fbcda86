"""The build pipeline: ONNX + sla.yaml → runtime, RTL, co-simulation, evidence bundle.

Stages (each reads typed objects and writes files into a staging directory):
spec → import → lut → emit → lint → cosim → bundle. Bad input (spec, model)
raises a ``MiCertifyError`` and leaves nothing behind. A stage that fails (lint
warning, co-simulation mismatch, missing tool) still publishes the directory, with
``summary.json`` ``"status": "failed"`` and a ``FAILED`` file, so it can never be
mistaken for a good build. The directory appears atomically (rename) when complete.

Determinism: every file except ``build.log`` is a pure function of the inputs and
the tool versions (no timestamps, fixed seeds); ``manifest.json`` hashes them all.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
import threading
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable

import numpy as np
import z3

from mi_certify.verification import cocotb_sim, hdl_adapter, synth, verilator
from mi_certify.verification.fsm_proofs import entry_alphabet, prove_fsm, write_proofs
from mi_certify.verification.rtl_formal import rtl_obligations
from mi_certify.verification.lut_check import check_lut_properties
from mi_certify.verification.network import verify_spec
from mi_certify.verification.nn_verify import VerifyOptions
from mi_certify.verification.tools import tool_version

from .bundle import (CROSS_CHECK_POINTS, MANIFEST_FORMAT, STAGE_TEXT, UNHASHED, canonical_command, collect_obligations, cosim_stage, distill_errors,
                     manifest_figures, obligations_status, source_commit, source_identity, summarize,
                     write_distillation)
from .emit import ENCODINGS, SourceHashes, emit_python, emit_rom_hex, emit_verilog, lut_bytes, rom_file_name
from .emit_monitor import copy_monitor_core, emit_sla_monitor, module_name as monitor_module
from .errors import BuildError, SpecError
from .distill import DistillOptions, distill, fidelity
from .lut import apply_masks, check_shapes, property_masks, sample_lut
from .onnx_import import cross_check, import_onnx
from .spec import Spec, load_spec

#: Random points of the fidelity check against onnxruntime.
FIDELITY_POINTS = 100_000
#: Random co-simulation cycles (directed sequences come on top).
COSIM_RANDOM_CYCLES = 10_000
COSIM_SEED = 1


def version() -> str:
    try:
        return metadata.version("mi-certify")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _distill_errors(spec: Spec, dres, fid: dict) -> list[str]:
    return distill_errors(spec, dres.lut.counts()["resolved"], fid)


def _runs(status: np.ndarray) -> list:
    """Run-length encoding [[start, stop, status], ...] of the per-cell status."""
    out, start = [], 0
    for i in range(1, len(status) + 1):
        if i == len(status) or status[i] != status[start]:
            out.append([start, i, str(status[start])])
            start = i
    return out


def _dump(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


@dataclass
class BuildOptions:
    """Options of one build. ``cosim_cycles``: random cycles after the directed ones (None: sla.yaml
    ``cosim.cycles``, else COSIM_RANDOM_CYCLES)."""

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


@dataclass
class BuildResult:
    """What the build produced: ``status`` ok/failed, per-stage records, output dir."""

    status: str
    out_dir: Path
    summary: dict
    stage_times: dict = field(default_factory=dict)


class _Reporter:
    """Progress sink: ``stage(name)`` context and ``progress(done, total)``."""

    def __init__(self, callback: Callable[[str, str, float | None], None] | None):
        self.cb = callback or (lambda *a: None)

    def start(self, name: str):
        self.cb("start", name, None)

    def done(self, name: str, status: str, seconds: float):
        self.cb("done", f"{name}:{status}", seconds)

    def progress(self, name: str, frac: float):
        self.cb("progress", name, frac)


def tool_versions() -> dict:
    """Versions recorded in the manifest (deterministic on one machine)."""
    pkgs = {}
    for dist in ("mi-certify", "numpy", "onnx", "onnxruntime", "maraboupy", "z3-solver", "cocotb", "jinja2",
                 "jsonschema", "pyyaml", "rich", "matplotlib", "cryptography"):
        try:
            pkgs[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pkgs[dist] = "not installed"
    return {"python": platform.python_version(), "packages": pkgs,
            "tools": {t: tool_version(t) for t in ("iverilog", "verilator", "yosys", "nextpnr-ice40")}}


class _Background:
    """Run ``fn`` in a daemon thread (Ctrl-C / SIGTERM of the build does not wait for it);
    ``result()`` waits and returns its value or raises its exception."""

    def __init__(self, fn):
        self._value, self._error = None, None

        def run():
            try:
                self._value = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller of result()
                self._error = exc
        self._thread = threading.Thread(target=run, name="mi-certify-verify", daemon=True)
        self._thread.start()

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _cosim(spec: Spec, cfg, lb: bytes, v_path: Path, py_path: Path, masks, unmasked, opts: BuildOptions,
           d: Path) -> dict:
    """The co-simulation stage: the FSM (Icarus, every cycle), the SLA monitor (Icarus), the
    Verilator code-coverage replay of the FSM vectors (beside Icarus, when sla.yaml sets a line,
    toggle or branch threshold); coverage against the sla.yaml thresholds.

    Writes cosim.json (FSM), monitor_cosim.json, coverage.json; returns the stage record."""
    from mi_certify.runtime.sla import SlaLimits
    from mi_certify.verification import coverage as cov_mod
    from mi_certify.verification.monitor_cosim import run_monitor_cosim

    with tempfile.TemporaryDirectory(prefix="mi-certify-cosim-") as work:
        work = Path(work)
        sims = {}
        for sim in ("icarus", "verilator"):
            # options (reset port, polarity, prefix) adapted to the test bench's active-high rst; the
            # ROM encodings' $readmemh file copied where the simulator runs
            sims[sim] = hdl_adapter.prepare(v_path, spec.module_name, spec.hdl.reset_port, spec.address_bits,
                                            spec.token_bits, work / sim)
        replay = None
        if spec.cosim.code_coverage:
            replay = _Background(lambda: cov_mod.verilator_replay(*sims["verilator"], cfg, lb, work / "verilator",
                                                                  masks, tuple(unmasked), opts.cosim_cycles,
                                                                  opts.cosim_seed))
        monitor = _Background(lambda: run_monitor_cosim(
            [SlaLimits(a.latency_ms, a.accuracy_loss_pct) for a in spec.actions], spec.monitor, work / "monitor",
            random_requests=spec.cosim.monitor_requests, seed=opts.cosim_seed))
        res = cocotb_sim.run_cosim(*sims["icarus"], cfg, lb, work / "icarus", runtime_py=py_path, masks=masks,
                                   traces=tuple(unmasked), random_cycles=opts.cosim_cycles, seed=opts.cosim_seed)
        mon = monitor.result()
        code = replay.result() if replay is not None else None
        for log in ("icarus/icarus.log", "verilator/verilator.log"):
            if (not res.passed or (code is not None and not code[0].ok)) and (work / log).exists():
                shutil.copyfile(work / log, d / Path(log).name)
    _dump(d / "cosim.json", res.to_json())
    _dump(d / "monitor_cosim.json", mon.to_json())
    coverage = cov_mod.assess(cfg, lb, getattr(res, "report", None), code, dict(spec.cosim.coverage), tuple(masks))
    _dump(d / "coverage.json", coverage)
    return cosim_stage(res.to_json(), mon.to_json(), coverage)


def _obligation_time(o: dict, times: dict, query_times: dict) -> float | None:
    """Seconds spent on an obligation: the query time, else the time of the stage that made it."""
    if o["group"] == "network":
        return query_times.get(o["id"])
    stage = {"rtl": "lint" if o["id"] == "rtl.lint" else "rtl_proofs", "fsm": "fsm_proofs",
             "cosim": "cosim"}.get(o["group"])
    if o["group"] == "lut":
        stage = "lut_properties" if o["evidence"] == "lut_properties.json" else "lut"
    return times.get(stage) if stage else None


def _auto_encoding(spec: Spec, lut, hashes: SourceHashes, masks, boxes) -> tuple[str, dict]:
    """The ``auto`` encoding: each of :data:`ENCODINGS` emitted and estimated by Yosys
    (:func:`mi_certify.verification.synth.estimate`: iCE40 LUT4 + carries + BRAM x 176 behind
    registered inputs);
    the smallest wins, ties in the order of ENCODINGS. Returns (encoding, {encoding: estimate})."""
    from mi_certify.runtime.fsm import REASON_BITS
    est = {}
    with tempfile.TemporaryDirectory(prefix="mi-certify-auto-") as work:
        for enc in ENCODINGS:
            sub = Path(work) / enc
            sub.mkdir()
            v = sub / f"{spec.module_name}.v"
            v.write_text(emit_verilog(spec, lut, hashes, version(), masks, encoding=enc, boxes=boxes), encoding="utf-8")
            rom_text = emit_rom_hex(spec, lut, enc) if enc in ("rom", "sliced_rom") else ""
            if rom_text:
                (sub / rom_file_name(spec)).write_text(rom_text, encoding="ascii")
            try:
                est[enc] = synth.estimate(v, spec.module_name, spec.address_bits, spec.token_bits, REASON_BITS,
                                          spec.hdl.reset_port)
            except synth.SynthError as exc:
                raise BuildError(f"hdl.encoding auto: {exc}") from None
    return min(ENCODINGS, key=lambda e: (est[e], ENCODINGS.index(e))), est


def _screenshot(d: Path) -> bool:
    """Load report.html in headless Chromium and save report.png (not hashed); True when taken.
    Console errors are the report test's business (tests/test_certificate.py)."""
    from mi_certify.verification import chromium

    if chromium.find_chromium() is None:
        return False
    try:
        res = chromium.load_page(d / "report.html", screenshot=d / "report.png")
    except (OSError, chromium.ToolUnavailable):  # a screenshot is a convenience, never a build failure
        (d / "report.png").unlink(missing_ok=True)
        return False
    return res.loaded


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
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
        stage.chmod(0o755)
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


def build(model_path: str | Path, spec_path: str | Path, out: str | Path, options: BuildOptions | None = None,
          on_event: Callable | None = None) -> BuildResult:
    """Run the whole pipeline.

    Args:
        model_path: controller ONNX file.
        spec_path: sla.yaml.
        out: output directory (created or replaced atomically; an existing non-empty
            directory that is not a previous build is refused).
    Returns:
        BuildResult with status "ok" or "failed".
    Raises:
        SpecError, ModelImportError, BuildError for bad input (nothing is written).
    """
    opts = options or BuildOptions()
    rep = _Reporter(on_event)
    model_path, spec_path, out = Path(model_path), Path(spec_path), Path(out)
    times: dict[str, float] = {}
    stages: dict[str, dict] = {}

    def timed(name, fn, status_of=lambda res: "ok"):
        rep.start(name)
        t0 = time.perf_counter()
        res = fn()
        times[name] = round(time.perf_counter() - t0, 3)
        rep.done(name, status_of(res), times[name])
        return res

    spec: Spec = timed("spec", lambda: load_spec(spec_path))
    if opts.cosim_cycles is None:
        opts = dataclasses.replace(opts, cosim_cycles=spec.cosim.cycles)
    stages["spec"] = {"status": "ok", "inputs": len(spec.inputs), "actions": len(spec.actions),
                      "address_bits": spec.address_bits, "properties": len(spec.properties)}

    if opts.heatmap:
        names = [i.name for i in spec.inputs]
        if len(opts.heatmap) != 2 or any(n not in names for n in opts.heatmap) or opts.heatmap[0] == opts.heatmap[1]:
            raise SpecError(f"--heatmap {','.join(opts.heatmap)}: give two different inputs as X,Y "
                            f"(inputs: {', '.join(names)})", file=spec.path)

    def do_import():
        ir = import_onnx(model_path)
        check_shapes(spec, ir, str(model_path))
        lo = np.array([i.min for i in spec.inputs])
        hi = np.array([i.max for i in spec.inputs])
        worst = cross_check(ir, model_path, lo, hi, n_points=CROSS_CHECK_POINTS)
        return ir, worst

    ir, worst = timed("import", do_import)
    # onnxruntime's float32 kernels differ by CPU: its figures are diagnostics (diagnostics.json,
    # not hashed); the hashed record says what was checked and that it passed
    diagnostics = {"import_onnxruntime": {"points": CROSS_CHECK_POINTS, "max_relative_difference": float(f"{worst:.3g}")}}
    stages["import"] = {"status": "ok", "nodes": len(ir.nodes), "relus": ir.n_relus, "notes": list(ir.notes),
                        "onnxruntime_check": {"points": CROSS_CHECK_POINTS, "tolerance": 1e-5, "passed": True}}

    stage_dir = _prepare_out(out)
    try:
        result = _build_outputs(spec, ir, model_path, spec_path, stage_dir, opts, timed, stages, rep, times,
                                diagnostics)
        (stage_dir / "build.log").write_text(
            "".join(f"{k}\t{v:.3f} s\n" for k, v in times.items()), encoding="utf-8")
        _publish(stage_dir, out.resolve())
    except BaseException:
        shutil.rmtree(stage_dir, ignore_errors=True)
        raise
    return BuildResult(result["status"], out.resolve(), result, times)


def _build_outputs(spec: Spec, ir, model_path: Path, spec_path: Path, d: Path, opts: BuildOptions, timed,
                   stages: dict, rep: _Reporter, times: dict, diagnostics: dict) -> dict:
    (d / "inputs" / "model").mkdir(parents=True)
    (d / "inputs" / "spec").mkdir()
    shutil.copyfile(model_path, d / "inputs" / "model" / model_path.name)
    shutil.copyfile(spec_path, d / "inputs" / "spec" / spec_path.name)
    _dump(d / "import.json", {"model": model_path.name, "ir": ir.describe(), "notes": list(ir.notes),
                              "onnxruntime_check": stages["import"]["onnxruntime_check"]})

    query_times: dict[str, float] = {}
    verify_job = None
    if not opts.verify:
        stages["verify"] = {"status": "skipped", "reason": STAGE_TEXT["verify.skipped"]}
    else:
        # network verification runs beside distillation and the later stages (it reads
        # only the IR and the spec); its results are recorded when it is done
        stages["verify"] = {"status": "running"}
        verify_job = _Background(lambda: timed(
            "verify", lambda: verify_spec(ir, model_path, spec, VerifyOptions(timeout=opts.verify_timeout),
                                          progress=lambda a, b: rep.progress("verify", a / b)),
            lambda r: "ok" if r.status == "proved" else "failed"))

    def record_verify():
        vres = verify_job.result()
        det = vres.deterministic_json()
        query_times.update({f"network.{r.id}": round(r.time_s, 3) for r in vres.properties})
        query_times.update({f"network.unreachable.{r.id.split(':', 1)[1]}": round(r.time_s, 3)
                            for r in vres.reachability})
        _dump(d / "verification.json", det)
        (d / "verification_log.json").write_text(json.dumps(vres.full_json(), indent=2, sort_keys=True) + "\n")
        stages["verify"] = {"status": "ok" if vres.status == "proved" else "failed", "result": vres.status,
                            "properties": {r["id"]: r["verdict"] for r in det["properties"]},
                            "reachable_actions": [a["action"] for a in det["output_domain"]["actions"]
                                                  if a["reachable"] == "yes"],
                            "timeout_s": opts.verify_timeout}

    if opts.distill:
        def do_distill():
            r = distill(spec, ir, model_path, DistillOptions(resolve=spec.resolve),
                        progress=lambda a, b: rep.progress("lut", a / b))
            fid, fid_diag = fidelity(spec, ir, model_path, r.lut, n_points=FIDELITY_POINTS)
            diagnostics["fidelity_onnxruntime"] = fid_diag
            return r, fid

        dres, fid = timed("lut", do_distill, lambda res: "failed" if _distill_errors(spec, *res) else "ok")
        lut = dres.lut
        counts = lut.counts()
        errors = _distill_errors(spec, dres, fid)
        write_distillation(d / "distillation.json", dres.boxes, dres.resolved, spec.resolve, fid)
        stages["lut"] = {"status": "failed" if errors else "ok",
                         "method": STAGE_TEXT["lut.distilled"],
                         **counts, "proven_share": round(counts["proven"] / counts["cells"], 6),
                         "undecided_cells": sum(1 for r in dres.resolved if r["undecided"]),
                         "fidelity": {k: v for k, v in fid.items()
                                                                                  if k != "disagreements_in_proven_cells"},
                         **({"error": "; ".join(errors)} if errors else {})}
    else:
        lut = timed("lut", lambda: sample_lut(spec, ir, progress=lambda a, b: rep.progress("lut", a / b)))
        counts = lut.counts()
        stages["lut"] = {"status": "ok", "method": STAGE_TEXT["lut.sampled"], **counts}
    if opts.heatmap:
        from .heatmap import write_heatmap
        write_heatmap(spec, lut, opts.heatmap[0], opts.heatmap[1], d / f"heatmap_{opts.heatmap[0]}_{opts.heatmap[1]}.png")
    masks = property_masks(spec)
    lut, overridden = apply_masks(spec, lut, masks)
    counts = lut.counts()
    lut_props = timed("lut_properties", lambda: check_lut_properties(spec, lut.tokens),
                      lambda rs: "failed" if any(r.verdict == "violated" for r in rs) else "ok")
    stages["lut_properties"] = {
        "status": "failed" if any(r.verdict == "violated" for r in lut_props) else "ok",
        "method": STAGE_TEXT["lut_properties"],
        "properties": {r.id: r.verdict for r in lut_props}, "overridden_cells": len(overridden)}
    _dump(d / "lut_properties.json", {"properties": [r.to_json() for r in lut_props],
                                      "masks": [{"id": m.id, "levels": [list(m.lo), list(m.hi)],
                                                 "allowed": [a.name for i, a in enumerate(spec.actions)
                                                             if (m.allowed >> i) & 1]} for m in masks],
                                      "overridden_cells": overridden})
    lb = lut_bytes(lut)
    (d / "lut.hex").write_text("".join(f"{b:02x}\n" for b in lb), encoding="ascii")
    hist = np.bincount(lut.tokens, minlength=len(spec.actions))
    _dump(d / "lut.json", {
        "format": "lut.hex: one line per address (address = line number), two hex digits: "
                  "bits 0-6 proposed token, bit 7 confident",
        "address_bits": spec.address_bits,
        "inputs": [{"name": i.name, "bits": i.bits, "min": i.min, "max": i.max, "unit": i.unit} for i in spec.inputs],
        "actions": [a.name for a in spec.actions], "cells": counts["cells"],
        "status": {k: counts[k] for k in ("proven", "resolved", "sampled")},
        "cell_status": _runs(lut.status),
        "tokens": {a.name: int(hist[i]) for i, a in enumerate(spec.actions)},
        "confident_cells": int(lut.confident.sum()), "sha256": hashlib.sha256(lb).hexdigest()})

    cfg = spec.fsm_config()
    bits = [i.bits for i in spec.inputs]
    alphabet = entry_alphabet(cfg, lut.tokens, lut.confident, masks, bits)
    proof_index: list[dict] = []
    names = [a.name for a in spec.actions]
    fsm_obs = timed("fsm_proofs", lambda: prove_fsm(cfg, lut.tokens, lut.confident, masks, bits, spec.properties,
                                                    names=names),
                    lambda obs: "ok" if all(o.verdict == "proved" for o in obs) else "failed")
    proof_index += write_proofs(fsm_obs, d, "fsm")
    # the machine without rule 3a (docs/fsm.md): its counterexamples show why the mask is
    # there, and become directed co-simulation sequences (where the RTL must say MASKED)
    unmasked_obs = [o for o in prove_fsm(cfg, lut.tokens, lut.confident, masks, bits, spec.properties,
                                         use_mask=False, names=names) if o.counterexample]
    unmasked = [o.counterexample for o in unmasked_obs]
    _dump(d / "proofs" / "fsm" / "without_rule_3a.json",
          {"note": "counterexamples of the machine without rule 3a (docs/fsm.md); not a defect of this build",
           "traces": {o.id: o.counterexample for o in unmasked_obs}})
    stages["fsm_proofs"] = {"status": "ok" if all(o.verdict == "proved" for o in fsm_obs) else "failed",
                            "method": STAGE_TEXT["fsm_proofs"],
                            "obligations": {o.id: o.verdict for o in fsm_obs},
                            "lut_entries": len(alphabet),
                            "without_mask": STAGE_TEXT["fsm_proofs.without_mask"].format(n=len(unmasked))}

    hashes = SourceHashes(sha256_file(model_path), sha256_file(spec_path), hashlib.sha256(lb).hexdigest())
    py_path, v_path = d / f"{spec.name}.py", d / f"{spec.module_name}.v"
    # the distillation partition, for the box-tree encoding (inclusive level ranges)
    boxes = [(r["levels"][0], r["levels"][1]) for r in dres.boxes] if opts.distill else None
    encoding, estimates = spec.hdl.encoding, None
    if encoding == "auto":
        encoding, estimates = timed("hdl_encoding", lambda: _auto_encoding(spec, lut, hashes, masks, boxes))
    rom_text = emit_rom_hex(spec, lut, encoding) if encoding in ("rom", "sliced_rom") else ""
    rom_file = rom_file_name(spec) if rom_text else None

    def do_emit():
        py_path.write_text(emit_python(spec, lut, hashes, version(), masks), encoding="utf-8")
        v_path.write_text(emit_verilog(spec, lut, hashes, version(), masks, encoding=encoding, boxes=boxes),
                          encoding="utf-8")
        if rom_file:
            (d / rom_file).write_text(rom_text, encoding="ascii")
        mon_path.write_text(emit_sla_monitor(spec, hashes.spec, version()), encoding="utf-8")
        copy_monitor_core(d)
    mon_path = d / f"{monitor_module(spec)}.v"
    timed("emit", do_emit)
    stages["emit"] = {"status": "ok", "python_runtime": py_path.name, "verilog": v_path.name, "module": spec.module_name,
                      "encoding": encoding, **({"rom": rom_file} if rom_file else {}),
                      **({"encoding_estimates": estimates} if estimates is not None else {}),
                      "sla_monitor": [mon_path.name, "sla_monitor.v"]}

    if opts.skip_lint:
        stages["lint"] = {"status": "skipped", "reason": STAGE_TEXT["lint.skipped"]}
    else:
        res = timed("lint", lambda: verilator.lint(v_path, spec.module_name), lambda r: "ok" if r.clean else "failed")
        mon_lint = verilator.lint(mon_path, monitor_module(spec), extra=(d / "sla_monitor.v",))
        stages["lint"] = {"status": "ok" if res.clean and mon_lint.clean else "failed", **res.to_json(),
                          "sla_monitor": mon_lint.to_json()}
        _dump(d / "lint.json", {**res.to_json(), "sla_monitor": mon_lint.to_json()})

    if opts.skip_rtl_proofs:
        stages["rtl_proofs"] = {"status": "skipped", "reason": STAGE_TEXT["rtl_proofs.skipped"]}
    else:
        def do_rtl():
            try:
                return rtl_obligations(v_path, spec.module_name, cfg, masks, bits, spec.token_bits, alphabet, lb,
                                       reset_port=spec.hdl.reset_port,
                                       reset_active_low=spec.hdl.reset_polarity == "low")
            except (RuntimeError, OSError, subprocess.SubprocessError, z3.Z3Exception) as exc:
                return exc
        rtl_res = timed("rtl_proofs", do_rtl, lambda r: "ok" if not isinstance(r, Exception) and
                        all(o.verdict == "proved" for o in r[0]) else "failed")
        if isinstance(rtl_res, Exception):
            stages["rtl_proofs"] = {"status": "failed", "error": f"{type(rtl_res).__name__}: {rtl_res}"}
        else:
            rtl_obs, prelude = rtl_res
            (d / "proofs" / "rtl").mkdir(parents=True, exist_ok=True)
            (d / "proofs" / "rtl" / "design.smt2").write_text(prelude, encoding="utf-8")
            entries = write_proofs(rtl_obs, d, "rtl")
            for e in entries:
                if e["id"] == "rtl.lut_table":
                    e.update(kind="exhaustive", evidence=v_path.name, expect=None)
                    (d / "proofs" / "rtl" / "rtl.lut_table.smt2").unlink()
                else:
                    e["prelude"] = "proofs/rtl/design.smt2"
            proof_index += entries
            stages["rtl_proofs"] = {"status": "ok" if all(o.verdict == "proved" for o in rtl_obs) else "failed",
                                    "method": STAGE_TEXT["rtl_proofs"],
                                    "obligations": {o.id: o.verdict for o in rtl_obs}}
    _dump(d / "proofs" / "index.json", {"obligations": proof_index})

    if opts.skip_cosim:
        stages["cosim"] = {"status": "skipped", "reason": STAGE_TEXT["cosim.skipped"]}
    else:
        stages["cosim"] = timed("cosim", lambda: _cosim(spec, cfg, lb, v_path, py_path, masks, unmasked, opts, d),
                                lambda r: "ok" if r["status"] == "ok" else "failed")

    if verify_job is not None:
        record_verify()
    # after the network verification has joined: its queries have wall-clock budgets, and
    # Yosys / nextpnr would take a core from them
    missing = synth.tools_missing()
    if opts.skip_synth:
        stages["hdl"] = {"status": "skipped", "reason": STAGE_TEXT["hdl.skipped"]}
    elif missing:
        stages["hdl"] = {"status": "skipped", "reason": f"not installed: {', '.join(missing)}"}
    else:
        def do_synth():
            try:
                return synth.hdl_numbers(spec, v_path)
            except (synth.SynthError, OSError, ValueError, KeyError) as exc:  # fails closed: the stage fails
                return exc
        numbers = timed("hdl", do_synth, lambda r: "failed" if isinstance(r, Exception) else "ok")
        if isinstance(numbers, Exception):
            stages["hdl"] = {"status": "failed", "error": f"{type(numbers).__name__}: {numbers}"[:800]}
        else:
            stages["hdl"] = {"status": "ok", "method": STAGE_TEXT["hdl"].format(seed=synth.SEED), **numbers}
    summary = summarize(spec, stages, {k: counts[k] for k in ("proven", "resolved", "sampled")}, version())
    status, failed = summary["status"], summary["failed_stages"]
    _dump(d / "summary.json", summary)
    if failed:
        (d / "FAILED").write_text("build failed in stage(s): " + ", ".join(failed) + "\nsee summary.json\n")
    obligations = collect_obligations(spec, d, stages)
    _dump(d / "obligations.json", {"status": obligations_status(obligations), "obligations": obligations,
                                   "times": "timings.json (not hashed)"})
    figures = manifest_figures(summary, obligations)
    from .report import write_report
    timed("report", lambda: write_report(spec, d, obligations))
    _dump(d / "timings.json", {"stages_s": times, "obligations_s": {o["id"]: _obligation_time(o, times, query_times)
                                                                      for o in obligations}})
    _dump(d / "diagnostics.json", {"note": "not hashed: onnxruntime's float32 kernels are chosen by CPU, so these "
                                           "figures can differ between machines; the hashed files hold what was "
                                           "checked and its verdict", **diagnostics})
    _dump(d / "provenance.json", {"mi_certify_source_commit": source_commit(),
                                  "note": "not hashed: a commit id cannot be inside the commit that contains it; "
                                          "manifest.json binds the source by mi_certify.source.sha256"})
    timed("report_screenshot", lambda: _screenshot(d))
    files = sorted(p for p in d.rglob("*") if p.is_file() and p.relative_to(d).as_posix() not in
                   UNHASHED + ("manifest.json",))
    _dump(d / "manifest.json", {
        "status": figures["status"], "controller": spec.name,
        "format": MANIFEST_FORMAT,
        "command": canonical_command(model_path.name, spec_path.name, opts),
        "mi_certify": {"version": version(), "source": source_identity(),
                       "source_commit": "provenance.json (not hashed)"},
        "obligations": figures["obligations"],
        "inputs": {"model": {"path": f"inputs/model/{model_path.name}", "sha256": hashes.model},
                   "spec": {"path": f"inputs/spec/{spec_path.name}", "sha256": hashes.spec}},
        "files": {p.relative_to(d).as_posix(): sha256_file(p) for p in files},
        "proofs": figures["proofs"],
        "not_hashed": {"build.log": "stage times",
                       "verification_log.json": "per-query times, methods, statistics, witness outputs on onnxruntime",
                       "timings.json": "seconds per stage and per proof obligation",
                       "diagnostics.json": "onnxruntime figures (float32 kernels differ by CPU): import cross-check "
                                           "difference, fidelity against onnxruntime",
                       "provenance.json": "git commit of the mi-certify source checkout",
                       "report.png": "screenshot of report.html in headless Chromium (absent without chromium)",
                       "manifest.json.sig": "Ed25519 signature of manifest.json (mi-certify sign)"},
        "versions": tool_versions(), "seeds": {"cosim": opts.cosim_seed, "onnxruntime_check": 0}})
    return summary
