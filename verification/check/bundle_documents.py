"""The documents a person reads, re-derived from the evidence (part of ``mi-certify check``).

A reader trusts ``summary.json``, ``report.md`` / ``report.html``, ``obligations.json`` and
the manifest's status and figures; a hash only says they were not changed after the
manifest was written. So every figure in them is derived again here from the evidence
files the rest of ``check`` verifies (verification.json, distillation.json, lut.json,
lut_properties.json, proofs/index.json, lint.json, cosim.json, monitor_cosim.json,
coverage.json, the spec and the re-imported network), the summary and the manifest
figures are recomputed with the build's own pure functions, the report is rendered
again into a scratch copy of the bundle, and the generated sources are emitted again
from the spec and lut.hex. Any difference is a FAIL naming the file and the field.

What this cannot re-derive, it says: the ``hdl`` stage's numbers come from Yosys and
nextpnr and are made again by the ``hdl`` item of the full check (skipped by
``--quick``); a failed stage's free-text ``error`` is not compared (the build is failed
either way); the ``encoding_estimates`` of ``hdl.encoding: auto``, the emit stage's ``target_header`` and the
``latency_trials`` of ``hdl.latency: auto`` are measurements.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from mi_certify.verification.check.common import command_option

__all__ = ["differences", "expected_documents", "expected_stages", "lut_counts", "regenerate_report",
           "regenerate_sources"]


def _read(d: Path, rel: str):
    p = d / rel
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None


def differences(stored, derived, path: str = "") -> list[str]:
    """Field paths where ``stored`` and ``derived`` differ, each "path: stored X, derived Y"."""
    if isinstance(stored, dict) and isinstance(derived, dict):
        out = []
        for k in sorted(set(stored) | set(derived), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in stored:
                out.append(f"{sub}: missing (derived {json.dumps(derived[k])[:80]})")
            elif k not in derived:
                out.append(f"{sub}: present ({json.dumps(stored[k])[:80]}) but not derivable from the evidence")
            else:
                out.extend(differences(stored[k], derived[k], sub))
        return out
    if isinstance(stored, list) and isinstance(derived, list) and len(stored) == len(derived):
        return [d for i, (a, b) in enumerate(zip(stored, derived)) for d in differences(a, b, f"{path}[{i}]")]
    if stored != derived or isinstance(stored, bool) != isinstance(derived, bool):
        return [f"{path}: stored {json.dumps(stored)[:80]}, derived {json.dumps(derived)[:80]}"]
    return []


def lut_counts(lut_json: dict) -> dict:
    """Cells per status {"proven", "resolved", "sampled"} counted from lut.json's ``cell_status`` runs
    (:func:`~mi_certify.generator.core.lut.status_run_counts`); raises ValueError for runs that do not
    follow one another from cell 0."""
    from mi_certify.generator.core.lut import status_run_counts
    return status_run_counts(lut_json["cell_status"])


def expected_stages(d: Path, spec, ir, manifest: dict, stored: dict, lut: np.ndarray) -> dict:
    """Every stage record of summary.json derived from the evidence files in ``d``.

    ``stored`` is summary.json's ``stages``: only the ``hdl`` record (tool measurements,
    re-made by the full check) and, for a failed stage, its ``error`` text are taken from it.
    Each record is built by the pipeline's own builder (:mod:`mi_certify.generator.bundle.stage_records`) from
    inputs read here out of the evidence files.
    """
    from mi_certify.generator.bundle.stage_records import (STAGE_TEXT, cosim_record, import_record,
                                                           lint_record, lut_properties_record, spec_record)

    command = manifest.get("command", [])
    out: dict = {}
    out["spec"] = spec_record(spec)
    out["import"] = import_record(ir)
    out["verify"] = _verify_stage(_read(d, "verification.json"), command)
    out["lut"] = _lut_stage(d, spec, _read(d, "lut.json"))
    lp = _read(d, "lut_properties.json")
    out["lut_properties"] = lut_properties_record({r["id"]: r["verdict"] for r in lp["properties"]},
                                                  len(lp["overridden_cells"]))
    index = _read(d, "proofs/index.json") or {"obligations": []}
    out["fsm_proofs"] = _fsm_stage(d, spec, index, lut)
    out["emit"] = _emit_stage(spec, stored)
    lint = _read(d, "lint.json")
    out["lint"] = _skipped("lint") if lint is None else lint_record(lint)
    out["rtl_proofs"] = _rtl_stage(index, command)
    cos, mon, cov = _read(d, "cosim.json"), _read(d, "monitor_cosim.json"), _read(d, "coverage.json")
    out["cosim"] = _skipped("cosim") if cos is None else cosim_record(cos, mon, cov)
    crt = _read(d, "c_runtime.json")
    if crt is not None:
        from mi_certify.generator.bundle.stage_records import c_runtime_record
        out["c_runtime"] = c_runtime_record(crt)
    elif "c_runtime" in stored:
        out["c_runtime"] = _skipped("c_runtime")
    sva = _read(d, "sva.json")
    if sva is not None:
        from mi_certify.generator.bundle.stage_records import sva_record
        out["sva"] = sva_record(sva)
    elif "sva" in stored:
        out["sva"] = _skipped("sva")
    if "soc" in stored or (d / "soc.json").exists():  # bundles made before the soc stage have no record
        out["soc"] = _soc_stage(d, spec, index)
    out["hdl"] = dict(stored.get("hdl", {}))
    if out["hdl"].get("status") == "ok":  # the numbers are re-made by the full check's hdl item
        from mi_certify.verification.rtl.synth import SEED
        out["hdl"]["method"] = STAGE_TEXT["hdl"].format(seed=SEED)
    for name, rec in out.items():  # a failed stage's free text is not re-derivable
        if rec.get("status") == "failed" and "error" in stored.get(name, {}) and "error" not in rec:
            rec["error"] = stored[name]["error"]
    return out


def _soc_stage(d: Path, spec, index: dict) -> dict:
    """The ``soc`` record: skipped without a raw input format; else from soc.json (the raw top's lint)
    and the quantizer obligations of proofs/index.json."""
    from mi_certify.generator.bundle.stage_records import soc_record
    soc = _read(d, "soc.json")
    if not spec.hdl.input_formats or soc is None:
        return _skipped("soc")
    obs = {o["id"]: o["verdict"] for o in index["obligations"] if o["group"] == "quantizer"}
    return soc_record(spec, soc["lint"], obs or None, None, soc.get("bus_cosim"))


def _skipped(name: str) -> dict:
    """The record of stage ``name`` skipped by its command-line option."""
    from mi_certify.generator.bundle.stage_records import STAGE_TEXT
    from mi_certify.generator.core.results import StageResult
    return StageResult.skipped(name, STAGE_TEXT[f"{name}.skipped"]).record


def _verify_stage(ver: dict | None, command: list[str]) -> dict:
    from mi_certify.generator.bundle.stage_records import verify_record
    if ver is None:
        return _skipped("verify")
    return verify_record(ver, float(command_option(command, "--verify-timeout", "60")))


def _lut_stage(d: Path, spec, lut_json: dict | None) -> dict:
    """The ``lut`` record: from the distillation boxes, or lut.json's counts for a sampled LUT."""
    from mi_certify.generator.bundle.distillation_file import read_distillation
    from mi_certify.generator.bundle.stage_records import lut_record
    if not (d / "distillation.json").exists():
        return lut_record(spec, lut_counts(lut_json))
    from mi_certify.generator.build.distill import VERDICTS
    dist = read_distillation(d)
    boxes = dist["boxes"]
    # independent re-computation: the cells per verdict counted from the box extents, not taken
    # from the build's LUT
    size = np.prod(boxes["level_hi"].astype(np.int64) - boxes["level_lo"].astype(np.int64) + 1, axis=1)
    counts = {"sampled": 0, **{v: int(size[boxes["verdict"] == k].sum()) for k, v in enumerate(VERDICTS)}}
    return lut_record(spec, counts, boxes, dist["fidelity"])


def _fsm_stage(d: Path, spec, index: dict, lut: np.ndarray) -> dict:
    from mi_certify.generator.bundle.stage_records import fsm_proofs_record
    from mi_certify.generator.core.lut import LutFsmArtefact, property_masks
    from mi_certify.verification.rtl.fsm_proofs import entry_alphabet
    fsm = {o["id"]: o["verdict"] for o in index["obligations"] if o["group"] == "fsm"}
    machine = LutFsmArtefact.from_table(spec, lut, property_masks(spec))
    traces = (_read(d, "proofs/fsm/without_rule_3a.json") or {"traces": {}})["traces"]
    return fsm_proofs_record(fsm, len(entry_alphabet(machine)), len(traces))


def _emit_stage(spec, stored: dict) -> dict:
    """The ``emit`` record; the measurements (the ``auto`` encoding and its estimates, the latency
    trials) are taken from summary.json."""
    from mi_certify.generator.bundle.stage_records import emit_record
    emit = stored.get("emit", {})
    encoding = emit.get("encoding") if spec.hdl.encoding == "auto" else spec.hdl.encoding
    return emit_record(spec, encoding, _target_header(spec, stored), emit.get("encoding_estimates"),
                       emit.get("latency_trials"))


def _target_header(spec, stored: dict) -> dict | None:
    """The emit stage's ``target_header`` (the verdict the Verilog header states): a measurement, so
    taken from summary.json, but only where the build measured (a declared target, the hdl stage
    not skipped) and only when its Fmax is the hdl stage's (made again by the full check's hdl item);
    else None (the stored one then differs)."""
    header = stored.get("emit", {}).get("target_header")
    hdl = stored.get("hdl", {})
    if header is None or spec.hdl.declared_target is None or hdl.get("status") == "skipped":
        return None
    target = hdl.get("target") or {}
    return header if header.get("fmax_mhz") == target.get("fmax_mhz") else None


def _rtl_stage(index: dict, command: list[str]) -> dict:
    from mi_certify.generator.bundle.stage_records import rtl_proofs_record
    rtl = {o["id"]: o["verdict"] for o in index["obligations"] if o["group"] == "rtl"}
    if "--skip-rtl-proofs" in command:
        return _skipped("rtl_proofs")
    if rtl:
        return rtl_proofs_record(rtl)
    return {"status": "failed"}  # the stage ran and wrote no obligation: its error text is taken from summary.json


def expected_documents(d: Path, spec, ir, manifest: dict, stages: dict) -> dict[str, object]:
    """Small hashed records that are a function of the spec, the network and the stage
    records: import.json, lut.json's header fields, lut_properties.json's masks,
    obligations.json's wording. {file: {field: value}}."""
    from mi_certify.generator.core.lut import property_masks

    masks = property_masks(spec)
    return {
        "import.json": {"model": Path(manifest["inputs"]["model"]["path"]).name, "ir": ir.describe(),
                        "notes": list(ir.notes), "onnxruntime_check": stages["import"]["onnxruntime_check"]},
        "lut.json": {"address_bits": spec.address_bits, "cells": 1 << spec.address_bits,
                     "actions": [a.name for a in spec.actions],
                     "inputs": [{"name": i.name, "bits": i.bits, "min": i.min, "max": i.max, "unit": i.unit}
                                for i in spec.inputs]},
        "lut_properties.json": {"masks": [{"id": m.id, "levels": [list(m.lo), list(m.hi)],
                                           "allowed": [a.name for k, a in enumerate(spec.actions)
                                                       if (m.allowed >> k) & 1]} for m in masks]},
        "obligations.json": {"times": "timings.json (not hashed)"},
    }


def regenerate_report(d: Path, spec, obligations: list[dict]) -> dict[str, bytes]:
    """report.md, report.html, operator.md and heatmaps/*.png rendered again from the bundle's evidence
    in a scratch copy (the report files themselves and every unhashed file left out)."""
    from mi_certify.generator.bundle.report import write_report

    manifest = _read(d, "manifest.json")
    mine = {"report.md", "report.html", "operator.md"}
    with tempfile.TemporaryDirectory(prefix="mi-certify-report-") as tmp:
        t = Path(tmp)
        for rel in manifest["files"]:
            if rel in mine or rel.startswith("heatmaps/"):
                continue
            (t / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(d / rel, t / rel)
        write_report(spec, t, obligations)
        return {p.relative_to(t).as_posix(): p.read_bytes() for p in sorted(t.rglob("*"))
                if p.is_file() and (p.relative_to(t).as_posix() in mine or p.relative_to(t).parts[0] == "heatmaps")}


def regenerate_sources(d: Path, spec, manifest: dict, summary: dict, lut: np.ndarray) -> dict[str, str | bytes]:
    """The emitted Python runtime, Verilog, C, SLA-monitor wrapper, constraint files and (with raw inputs)
    the quantizer, bus wrappers, SystemRDL and PeakRDL outputs made again from the spec, lut.hex,
    the distillation boxes and the recorded hashes and version: text, or bytes for the PeakRDL
    HTML's files (an HTML file listed in the manifest that PeakRDL does not make maps to b"")."""
    from mi_certify.generator.bundle.distillation_file import read_distillation
    from mi_certify.generator.build.emit_common import SourceHashes
    from mi_certify.generator.build.emit_c import c_file_names, emit_c
    from mi_certify.generator.build.emit_python import emit_python
    from mi_certify.generator.build.emit_verilog import emit_verilog
    from mi_certify.generator.build.emit_monitor import emit_sla_monitor, module_name as monitor_module
    from mi_certify.generator.core.lut import Lut, LutFsmArtefact, decode_status_runs, property_masks, split_table

    lut_json = _read(d, "lut.json")
    table = Lut(*split_table(lut), decode_status_runs(lut_json["cell_status"], lut.size))
    machine = LutFsmArtefact.from_lut(spec, table, property_masks(spec))
    inputs = manifest["inputs"]
    hashes = SourceHashes(inputs["model"]["sha256"], inputs["spec"]["sha256"], lut_json["sha256"])
    version = manifest["mi_certify"]["version"]
    encoding = summary["stages"]["emit"]["encoding"]
    boxes = None
    if (d / "distillation.json").exists():
        table = read_distillation(d)["boxes"]
        boxes = list(zip(table["level_lo"].astype(int).tolist(), table["level_hi"].astype(int).tolist()))
    from importlib import resources
    core = resources.files("mi_certify.hdl").joinpath("sla_monitor.v").read_text(encoding="utf-8")
    out = {f"{spec.name}.py": emit_python(spec, machine, hashes, version), "sla_monitor.v": core,
           f"{spec.module_name}.v": emit_verilog(spec, machine, hashes, version, encoding=encoding, boxes=boxes,
                                                 target_measured=summary["stages"]["emit"].get("target_header")),
           f"{monitor_module(spec)}.v": emit_sla_monitor(spec, hashes.spec, version)}
    if f"{spec.name}.c" in manifest["files"]:   # bundles made before the C runtime have none
        out.update(zip(c_file_names(spec), emit_c(spec, machine, hashes, version)))
    from mi_certify.generator.build.emit_constraints import emit_constraints
    made = emit_constraints(spec, version, hashes.spec)
    if any(name in manifest["files"] for name in made):   # bundles made before issue 35 have none
        out.update(made)
    from mi_certify.generator.build.emit_sva import emit_sva, sby_name
    if sby_name(spec) in manifest["files"]:   # bundles made before the SVA harness have none
        out.update(emit_sva(spec, machine, hashes, version, spec.hdl.latency_cycles))
    if spec.hdl.input_formats and (d / "soc.json").exists():  # the raw-input design (docs/hdl.md, "Raw inputs")
        from mi_certify.generator.build.emit_quantizer import emit_raw_design
        from mi_certify.generator.build.emit_soc import emit_soc
        from mi_certify.generator.build.regmap import emit_rdl, peakrdl_outputs, rdl_name
        out.update(emit_raw_design(spec, version, hashes.spec))
        out.update(emit_soc(spec, version, hashes.spec))
        rdl = emit_rdl(spec, version, hashes.spec)
        out[f"{rdl_name(spec)}.rdl"] = rdl
        # the PeakRDL C header, IP-XACT and every file of the HTML made again from the RDL; an HTML
        # file the manifest lists that PeakRDL does not make is compared with nothing (so it fails)
        made = peakrdl_outputs(rdl, rdl_name(spec))
        for ext in (".h", ".xml"):
            out[rdl_name(spec) + ext] = made[rdl_name(spec) + ext].decode("utf-8")
        html = f"{rdl_name(spec)}_html/"
        out.update({rel: data for rel, data in made.items() if rel.startswith(html)})
        out.update({rel: b"" for rel in manifest["files"] if rel.startswith(html) and rel not in made})
    return out
