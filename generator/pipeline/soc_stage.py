"""The ``soc`` stage: the drop-in IP around the controller (docs/hdl.md, "Raw inputs").

With a raw word format in sla.yaml (``hdl.inputs`` / ``hdl.input_format``) it writes
``<module>_quantizer.v`` and ``<module>_raw.v`` (:mod:`mi_certify.generator.build.emit_quantizer`),
lints the raw top with the controller (Verilator -Wall) and proves the quantizer equal to the Python
runtime on every word of every input (:mod:`mi_certify.verification.rtl.quantizer_proofs`;
``proofs/quantizer/``). Then the bus wrappers: the register map as SystemRDL (``<module>_regs.rdl``) and
what PeakRDL makes of it (C header, IP-XACT, HTML reference), the register core and the AXI4-Lite and
Wishbone slaves (:mod:`mi_certify.generator.build.emit_soc`), linted (Verilator -Wall), and co-simulated
over each bus for :data:`BUS_TRANSACTIONS` random transactions (cocotb + Icarus,
:mod:`mi_certify.verification.cosim.bus_cosim`; bench/bus_cosim.py runs 100,000). Without a format the
stage writes nothing and has no record."""

from __future__ import annotations

import z3

import tempfile
from pathlib import Path

from mi_certify.generator.build.emit_monitor import module_name as monitor_module
from mi_certify.generator.build.emit_quantizer import emit_raw_design, quantizer_module, raw_module
from mi_certify.generator.build.emit_soc import axil_module, emit_soc, regs_module, wb_module
from mi_certify.generator.build.regmap import emit_rdl, peakrdl_outputs, rdl_name
from mi_certify.generator.bundle.stage_records import soc_record
from mi_certify.generator.core.results import StageResult
from mi_certify.verification.rtl.fsm_proofs import write_proofs
from mi_certify.verification.rtl.quantizer_proofs import PRELUDE, quantizer_obligations
from mi_certify.verification.cosim.bus_cosim import run_bus_cosim
from mi_certify.verification.tools import verilator
from mi_certify.verification.tools.registry import ToolRunError

from mi_certify.generator.pipeline.stages import BuildContext


#: Random bus transactions per wrapper in a build (after the directed protocol cases).
BUS_TRANSACTIONS = 2000


def soc_stage(ctx: BuildContext) -> StageResult | None:
    """Raw-input design, its lint and the quantizer proofs (module docstring); a tool or solver failure
    fails the stage (fails closed)."""
    spec = ctx.built_spec
    if not spec.hdl.input_formats:
        return None  # nothing to build: no record (not a skipped check; the build stays complete)
    files = {**emit_raw_design(spec, ctx.version, ctx.hashes.spec), **emit_soc(spec, ctx.version, ctx.hashes.spec),
             f"{rdl_name(spec)}.rdl": emit_rdl(spec, ctx.version, ctx.hashes.spec)}
    generated = peakrdl_outputs(files[f"{rdl_name(spec)}.rdl"], rdl_name(spec))

    def write():
        for name, text in files.items():
            (ctx.d / name).write_text(text, encoding="utf-8")
        for rel, data in generated.items():
            (ctx.d / rel).parent.mkdir(parents=True, exist_ok=True)
            (ctx.d / rel).write_bytes(data)
    ctx.timed("soc_emit", write)
    qpath, rpath = ctx.d / f"{quantizer_module(spec)}.v", ctx.d / f"{raw_module(spec)}.v"
    below = tuple(ctx.d / f"{m}.v" for m in (regs_module(spec), raw_module(spec), quantizer_module(spec),
                                              spec.module_name, monitor_module(spec), "sla_monitor"))
    lint = None
    if not ctx.opts.skip_lint:
        def lint_all():
            out = {"raw": verilator.lint(rpath, raw_module(spec), extra=(qpath, ctx.v_path)).to_json()}
            for top in (axil_module(spec), wb_module(spec)):
                out[top] = verilator.lint(ctx.d / f"{top}.v", top, extra=below).to_json()
            return {"clean": all(v["clean"] for v in out.values()), **out}
        lint = ctx.timed("soc_lint", lint_all)
    bus = None
    if not ctx.opts.skip_cosim:
        def cosim():
            with tempfile.TemporaryDirectory(prefix="mi-certify-bus-") as work:
                return {b: run_bus_cosim(spec, ctx.d, ctx.py_path, b, BUS_TRANSACTIONS, Path(work) / b,
                                         seed=ctx.opts.cosim_seed) for b in ("axil", "wb")}
        bus = ctx.timed("soc_bus_cosim", cosim)
        for rep in bus.values():
            rep.pop("seconds", None)  # wall time: not in a hashed file
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
    ctx.evidence.write("soc.json", {"lint": lint, "bus_cosim": bus})
    evidence = (*files, *generated, "soc.json", *((PRELUDE, *(e["evidence"] for e in entries)) if entries else ()))
    return StageResult("soc", soc_record(spec, lint, obligations, error, bus), evidence=evidence, proofs=entries)
