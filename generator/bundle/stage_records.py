"""summary.json's stage records: one builder per stage, the only place a record is made.

A stage record is what ``summary.json`` ``stages.<name>`` holds (status, method, the
stage's figures). The pipeline builds each one from the objects its stage produced; ``mi-certify
check`` builds it again from the evidence files (:mod:`mi_certify.verification.check.bundle_documents`)
and compares. Both call the same builder here with the same plain inputs (verdicts by id,
cell counts, file contents), so the record's layout and wording live in one place and the
two cannot drift apart. What the inputs are derived from stays each caller's own business
(the checker counts the cells from the distillation boxes, not from the pipeline's LUT).

Skipped stages: ``StageResult.skipped(name, STAGE_TEXT[f"{name}.skipped"])``
(:class:`mi_certify.generator.core.results.StageResult`).
"""

from __future__ import annotations

from mi_certify.generator.core.results import Status

__all__ = ["STAGE_TEXT", "c_runtime_record", "cosim_record", "distill_errors", "emit_record", "fsm_proofs_record", "hdl_record",
           "import_record", "latency_trials", "lint_record", "lut_properties_record", "lut_record",
           "rtl_proofs_record", "soc_record", "sva_record", "spec_record", "verify_record"]

#: Number of onnxruntime cross-check points after import.
CROSS_CHECK_POINTS = 256

#: Fixed wording of the stage records (summary.json ``stages.<name>.method`` / ``reason``).
STAGE_TEXT = {
    "verify.skipped": "--no-verify: no property of the network is proven",
    "lut.distilled": "certified distillation (CROWN bounds, input splitting, replayed witnesses)",
    "lut.sampled": "centre sampling (not proven)",
    "lut_properties": "exhaustive over every LUT cell meeting the property region (the artefact, not the network), "
                      "after overriding cells whose proposal a property does not allow",
    "fsm_proofs": "k-induction with Z3 over every input sequence (docs/fsm.md)",
    "fsm_proofs.without_mask": "{n} properties violated by cooldown/hysteresis without rule 3a; their traces are "
                               "directed co-simulation sequences",
    "hdl": "Yosys synth / synth_ice40 / synth_ecp5 cell counts; nextpnr-ice40 / nextpnr-ecp5 place and route "
           "(seed {seed}) of a wrapper with registered inputs",
    "cosim.monitor_failed": "SLA monitor co-simulation failed (monitor_cosim.json)",
    "rtl_proofs": "Yosys write_smt2 + Z3 (inductive equivalence with the reference, invariants, properties); "
                  "LUT evaluated at every address",
    "lint.skipped": "--skip-lint",
    "rtl_proofs.skipped": "--skip-rtl-proofs",
    "cosim.skipped": "--skip-cosim",
    "c_runtime": "gcc and clang -std=c99 -Wall -Wextra -Wconversion -pedantic -Werror; cppcheck MISRA C:2012 addon "
                 "(deviations listed); arm-none-eabi-gcc Cortex-M4 -Os size and -fstack-usage call-graph stack; "
                 "co-simulated record by record with the reference and the Python runtime on the co-simulation's "
                 "stimulus; the LUT read through the step at every address",
    "c_runtime.skipped": "--skip-cosim (the C runtime is checked with the co-simulation)",
    "hdl.skipped": "--skip-synth",
    "sva": "SymbiYosys (YoWASP) k-induction with yosys-smtbmc and Yices 2 of the SVA harness over the ports of the "
           "emitted Verilog: a second proof path, diverse in every tool from rtl_proofs",
    "sva.skipped": "--skip-rtl-proofs (the SVA harness is proved with the RTL proofs)",
    "soc.skipped": "sla.yaml declares no raw input format (hdl.inputs, hdl.input_format)",
}


def _ok(ok: bool) -> str:
    return Status.OK.value if ok else Status.FAILED.value


def spec_record(spec) -> dict:
    """The ``spec`` record: the sizes of the loaded sla.yaml (:class:`~mi_certify.generator.core.spec.Spec`)."""
    return {"status": Status.OK.value, "inputs": len(spec.inputs), "actions": len(spec.actions),
            "address_bits": spec.address_bits, "properties": len(spec.properties)}


def import_record(ir) -> dict:
    """The ``import`` record of the imported network ``ir`` (:class:`~mi_certify.generator.core.ir.ControllerIR`):
    its size and notes, and what the onnxruntime cross-check checked (its figures are diagnostics,
    not hashed: onnxruntime's float32 kernels differ by CPU): its points and its relative tolerance
    (:data:`~mi_certify.generator.frontend.onnx_import.ORT_RTOL`, the import's cross-check)."""
    from mi_certify.generator.frontend.onnx_import import ORT_RTOL
    return {"status": Status.OK.value, "nodes": len(ir.nodes), "relus": ir.n_relus, "notes": list(ir.notes),
            "onnxruntime_check": {"points": CROSS_CHECK_POINTS, "tolerance": ORT_RTOL, "passed": True}}


def verify_record(verification: dict, timeout_s: float) -> dict:
    """The ``verify`` record of verification.json's content ``verification`` (status, per-property
    verdicts, the output domain: every action listed as reachable, proved unreachable or unknown)
    and the per-query ``timeout_s`` (``--verify-timeout``)."""
    return {"status": _ok(verification["status"] == "proved"), "result": verification["status"],
            "properties": {r["id"]: r["verdict"] for r in verification["properties"]},
            **{key: [a["action"] for a in verification["output_domain"]["actions"] if a["reachable"] == word]
               for key, word in (("reachable_actions", "yes"), ("unreachable_actions", "no"),
                                 ("unknown_reachability", "unknown"))},
            "timeout_s": timeout_s}


#: below this agreement with the network (share of test points) a distilled LUT's record carries a
#: warning, whether or not sla.yaml bounds it (``distill.min_agreement``)
LOW_AGREEMENT = 0.9


def distill_errors(spec, resolved_cells: int, fidelity: dict) -> list[str]:
    """Why a distillation fails the build: a proven cell that disagrees with the network,
    resolved cells under the ``refuse`` policy, or an agreement below ``distill.min_agreement``."""
    errors = []
    if spec.min_agreement is not None and fidelity["agreement"] < spec.min_agreement:
        errors.append(f"the LUT agrees with the network on {fidelity['agreement']:.2%} of "
                      f"{fidelity['points']:,} test points, below distill.min_agreement {spec.min_agreement:.2%}")
    if fidelity["proven_agree"] != fidelity["proven_points"]:
        errors.append("a proven cell disagrees with the network")
    if spec.resolve == "refuse" and resolved_cells > 0:
        errors.append(f"distill.resolve is refuse and {resolved_cells} cells hold several actions")
    return errors


def lut_record(spec, counts: dict, boxes=None, fidelity: dict | None = None) -> dict:
    """The ``lut`` record. ``counts``: cells per status {"sampled", "proven", "resolved"} of the
    LUT as the lut stage made it (before the property masks). A distilled LUT also gives
    ``boxes`` (the partition: :func:`~mi_certify.generator.build.distill.box_dtype` records) and
    ``fidelity`` (distillation.json's): its share of proven cells, undecided cells, fidelity
    figures and :func:`distill_errors` (the stage fails on any). Without ``boxes``: centre sampling."""
    cells = counts["sampled"] + counts["proven"] + counts["resolved"]
    tally = {"cells": cells, "sampled": counts["sampled"], "proven": counts["proven"], "resolved": counts["resolved"]}
    if boxes is None:
        return {"status": Status.OK.value, "method": STAGE_TEXT["lut.sampled"], **tally}
    import numpy as np

    from mi_certify.generator.build.distill import UNDECIDED
    errors = distill_errors(spec, counts["resolved"], fidelity)
    low = fidelity["agreement"] < LOW_AGREEMENT and not errors
    return {"status": _ok(not errors), "method": STAGE_TEXT["lut.distilled"], **tally,
            "proven_share": round(counts["proven"] / cells, 6),
            "undecided_cells": int(np.sum(boxes["method"] == UNDECIDED)),
            "fidelity": {k: v for k, v in fidelity.items() if k != "disagreements_in_proven_cells"},
            **({"error": "; ".join(errors)} if errors else {}),
            **({"warning": f"the LUT agrees with the network on only {fidelity['agreement']:.2%} of "
                           f"{fidelity['points']:,} test points ({counts['resolved']:,} of {cells:,} cells "
                           f"resolved, not proven); distill.min_agreement bounds it"} if low else {})}


def lut_properties_record(properties: dict, overridden_cells: int) -> dict:
    """The ``lut_properties`` record: ``properties`` {id: verdict} (lut_properties.json), the
    number of cells overridden to the conservative action; fails on a violated property."""
    return {"status": _ok(not any(v == "violated" for v in properties.values())),
            "method": STAGE_TEXT["lut_properties"], "properties": dict(properties),
            "overridden_cells": overridden_cells}


def fsm_proofs_record(obligations: dict, lut_entries: int, without_mask: int) -> dict:
    """The ``fsm_proofs`` record: ``obligations`` {id: verdict} (fails unless every one is
    proved), the number of distinct LUT entries the proofs range over, and the number of
    properties the machine without rule 3a violates (proofs/fsm/without_rule_3a.json)."""
    return {"status": _ok(all(v == "proved" for v in obligations.values())), "method": STAGE_TEXT["fsm_proofs"],
            "obligations": dict(obligations), "lut_entries": lut_entries,
            "without_mask": STAGE_TEXT["fsm_proofs.without_mask"].format(n=without_mask)}


def latency_trials(trials: dict) -> dict:
    """The emit record's ``latency_trials`` of :func:`~mi_certify.generator.pipeline.stages.measure_target`'s
    tried designs {latency: {device: place_and_route record}}: {"<latency>": {device: Fmax MHz}}."""
    return {str(lat): {dev: p["fmax_mhz"] for dev, p in pnr.items()} for lat, pnr in trials.items()}


def emit_record(spec, encoding: str, target_header: dict | None,
                encoding_estimates: dict | None = None, trials: dict | None = None) -> dict:
    """The ``emit`` record of the sources emitted for ``spec`` (its latency resolved): the file and
    module names, the Verilog ``encoding`` (a ROM's contents are inline in the Verilog), the latency, the target
    verdict the Verilog header states. Measurements, kept only where the spec asks for them:
    ``encoding_estimates`` ({encoding: estimate}, ``hdl.encoding: auto``) and ``trials``
    (:func:`latency_trials`, ``hdl.latency: auto``)."""
    from mi_certify.generator.build.emit_monitor import module_name as monitor_module
    auto_encoding = spec.hdl.encoding == "auto" and encoding_estimates is not None
    auto_latency = spec.hdl.latency == "auto" and trials is not None
    return {"status": Status.OK.value, "python_runtime": f"{spec.name}.py", "verilog": f"{spec.module_name}.v",
            "module": spec.module_name, "encoding": encoding,
            **({"encoding_estimates": encoding_estimates} if auto_encoding else {}),
            "latency": spec.hdl.latency_cycles, "target_header": target_header,
            **({"latency_trials": trials} if auto_latency else {}),
            "sla_monitor": [f"{monitor_module(spec)}.v", "sla_monitor.v"]}


def lint_record(lint: dict) -> dict:
    """The ``lint`` record of lint.json's content (the controller's lint and ``sla_monitor``'s):
    ok when both are clean."""
    return {"status": _ok(bool(lint["clean"] and lint.get("sla_monitor", {}).get("clean"))), **lint}


def rtl_proofs_record(obligations: dict) -> dict:
    """The ``rtl_proofs`` record: ``obligations`` {id: verdict}; fails unless every one is proved."""
    return {"status": _ok(all(v == "proved" for v in obligations.values())), "method": STAGE_TEXT["rtl_proofs"],
            "obligations": dict(obligations)}


def sva_record(sva: dict) -> dict:
    """The ``sva`` record of sva.json: ok only when the SymbiYosys job passed (PASS)."""
    return {"status": _ok(sva["verdict"] == "proved"), "method": STAGE_TEXT["sva"], "verdict": sva["verdict"],
            "assertions": len(sva["assertions"]), "depth": sva["depth"], "failed": list(sva["failed"]),
            "detail": sva["detail"]}


def soc_record(spec, lint: dict | None, obligations: dict | None, error: str | None, bus: dict | None = None) -> dict:
    """The ``soc`` record (docs/hdl.md, "Raw inputs"): the raw-input files and formats, the lint of the
    raw top (None: skipped), the quantizer obligations {id: verdict} (None: skipped) or the tool
    ``error``; ok when the lint is clean and every obligation proved (what ran)."""
    from mi_certify.generator.build.emit_quantizer import quantizer_module, raw_module
    ok = (error is None and (lint is None or bool(lint["clean"]))
          and (obligations is None or all(v == "proved" for v in obligations.values()))
          and (bus is None or all(r["passed"] for r in bus.values())))
    return {"status": _ok(ok), "quantizer": f"{quantizer_module(spec)}.v", "raw_top": f"{raw_module(spec)}.v",
            "input_formats": {i.name: f.describe() for i, f in zip(spec.inputs, spec.hdl.input_formats)},
            "lint": None if lint is None else {"clean": lint["clean"]}, "quantizer_proofs": obligations,
            "bus_cosim": None if bus is None else {b: {k: r.get(k) for k in ("transactions", "cycles", "mismatches")}
                                                   for b, r in bus.items()},
            **({"error": error} if error else {})}


def cosim_record(cosim: dict, monitor: dict, coverage: dict) -> dict:
    """The ``cosim`` record from cosim.json, monitor_cosim.json and coverage.json."""
    errors = [e for e in (cosim["error"] if not cosim["passed"] else None,
                          None if monitor["passed"] else STAGE_TEXT["cosim.monitor_failed"], *coverage["errors"]) if e]
    return {"status": Status.OK.value if cosim["passed"] and monitor["passed"] and coverage["passed"] else Status.FAILED.value, **cosim,
            "monitor": {"passed": monitor["passed"], "cycles": sum(c["cycles"] for c in monitor["configs"]),
                        "mismatches": sum(c["mismatches"] for c in monitor["configs"])},
            "coverage": coverage["summary"], **({"error": "; ".join(errors)} if errors else {})}


def c_runtime_record(c: dict) -> dict:
    """The ``c_runtime`` record of c_runtime.json's content (:func:`~mi_certify.verification.cosim.c_cosim.check_c_runtime`):
    the compilers' verdicts, MISRA findings (deviated rules, unexplained count), the Cortex-M4 code
    size and worst-case stack of ``<name>_step``, the co-simulation counts; ok as c_runtime.json says."""
    rec: dict = {"status": _ok(c["status"] == Status.OK.value), "method": STAGE_TEXT["c_runtime"], "files": c["files"]}
    if "compile" in c:
        rec["compilers"] = {x["compiler"]: "clean" if x["clean"] else "warnings" for x in c["compile"]}
    if "misra" in c:
        rec["misra"] = {"findings": c["misra"]["findings"], "deviated_rules": [d["rule"] for d in c["misra"]["deviations"]],
                        "unexplained": len(c["misra"]["unexplained"])}
    if "cortex_m4" in c:
        m4 = c["cortex_m4"]
        step = next(iter(m4["worst_stack"].values()))
        rec["cortex_m4"] = {"code_bytes": m4["code_bytes"], "const_bytes": m4["const_bytes"], "ram_bytes": m4["ram_bytes"],
                            "stack_bytes": step["bytes"], "stack_path": step["path"], "stack_excludes": m4["external"]}
    if "cosim" in c:
        co = c["cosim"]
        rec["cosim"] = {k: co[k] for k in ("cycles", "directed_cycles", "mismatches", "lut_entries", "lut_mismatches",
                                           "quantizer_points", "quantizer_mismatches", "address_points",
                                           "address_mismatches")}
    if "error" in c:
        rec["error"] = c["error"]
    return rec


def hdl_record(numbers: dict, seed: int, header: dict | None = None) -> dict:
    """The hdl stage record of :func:`mi_certify.verification.rtl.synth.hdl_numbers` ``numbers`` (nextpnr
    ``seed``): status from the declared target (``numbers["target"]``; none declared: ok), method, the
    numbers, and ``error`` (a missed target: the build fails) or ``warning`` (a missed advisory
    target: it passes and says so). ``header``: the verdict the Verilog header states (the emit
    stage's ``target_header``, measured before the file was written); a different measurement now
    fails the stage. ``mi-certify check`` rebuilds it from numbers made again."""
    target = numbers.get("target")
    missed = target is not None and not target["met"]
    status = Status.FAILED.value if missed and not target["advisory"] else Status.OK.value
    error = target["detail"] if status == Status.FAILED.value else None
    if header is not None and (target is None or header["fmax_mhz"] != target["fmax_mhz"]):
        status, error = Status.FAILED.value, (f"the Verilog header states Fmax {header['fmax_mhz']} (measured before it was "
                                   f"written), the hdl stage measured {target and target['fmax_mhz']}")
    return {"status": status, "method": STAGE_TEXT["hdl"].format(seed=seed), **numbers,
            **({"error": error} if status == Status.FAILED.value else
               {"warning": target["detail"]} if missed else {})}
