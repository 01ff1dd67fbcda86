"""The ``soc`` stage: the drop-in IP around the controller (docs/hdl.md, "Raw inputs").

With a raw word format in sla.yaml (``hdl.inputs`` / ``hdl.input_format``) it writes
``<module>_quantizer.v`` and ``<module>_raw.v`` (:mod:`mi_certify.generator.build.emit_quantizer`),
lints the raw top with the controller (Verilator -Wall) and proves the quantizer equal to the Python
runtime on every word of every input (:mod:`mi_certify.verification.rtl.quantizer_proofs`;
``proofs/quantizer/``). Without a format the stage is skipped."""

from __future__ import annotations

import z3

from mi_certify.generator.build.emit_quantizer import emit_raw_design, quantizer_module, raw_module
from mi_certify.generator.bundle.stage_records import STAGE_TEXT, soc_record
from mi_certify.generator.core.results import StageResult
from mi_certify.verification.rtl.fsm_proofs import write_proofs
from mi_certify.verification.rtl.quantizer_proofs import PRELUDE, quantizer_obligations
from mi_certify.verification.tools import verilator
from mi_certify.verification.tools.registry import ToolRunError

from mi_certify.generator.pipeline.stages import BuildContext


def soc_stage(ctx: BuildContext) -> StageResult:
    """Raw-input design, its lint and the quantizer proofs (module docstring); a tool or solver failure
    fails the stage (fails closed)."""
    spec = ctx.built_spec
    if not spec.hdl.input_formats:
        return StageResult.skipped("soc", STAGE_TEXT["soc.skipped"])
    files = emit_raw_design(spec, ctx.version, ctx.hashes.spec)
    ctx.timed("soc_emit", lambda: [(ctx.d / name).write_text(text, encoding="utf-8") for name, text in files.items()])
    qpath, rpath = ctx.d / f"{quantizer_module(spec)}.v", ctx.d / f"{raw_module(spec)}.v"
    lint = None
    if not ctx.opts.skip_lint:
        lint = ctx.timed("soc_lint", lambda: verilator.lint(rpath, raw_module(spec), extra=(qpath, ctx.v_path))).to_json()
    obligations, entries, error = None, [], None
    if not ctx.opts.skip_rtl_proofs:
        def prove():
            try:
                return quantizer_obligations(qpath, spec, quantizer_module(spec))
            except (ToolRunError, OSError, z3.Z3Exception) as exc:
                return exc
        res = ctx.timed("soc_proofs", prove)
        if isinstance(res, Exception):
            error = f"{type(res).__name__}: {res}"
        else:
            obs, prelude = res
            entries = write_proofs(obs, ctx.d, "quantizer", prelude=(PRELUDE, prelude))
            ctx.proof_index += entries
            obligations = {o.id: o.verdict for o in obs}
    ctx.evidence.write("soc.json", {"lint": lint})
    evidence = (*files, "soc.json", *((PRELUDE, *(e["evidence"] for e in entries)) if entries else ()))
    return StageResult("soc", soc_record(spec, lint, obligations, error), evidence=evidence, proofs=entries)
