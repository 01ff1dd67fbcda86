"""What both emitters (:mod:`~mi_certify.generator.build.emit_python`,
:mod:`~mi_certify.generator.build.emit_verilog`) put in a generated controller's header and body:
the source hashes, the counts, the reasons, the property masks."""

from __future__ import annotations

from dataclasses import dataclass

from mi_certify.runtime.fsm import REASON_BITS, OperatorReason, Reason

from mi_certify.generator.core.lut import LutFsmArtefact
from mi_certify.generator.core.spec import Spec


@dataclass(frozen=True)
class SourceHashes:
    """sha256 hex digests of the model, the spec and the LUT bytes."""

    model: str
    spec: str
    lut: str


def common_variables(spec: Spec, machine: LutFsmArtefact, hashes: SourceHashes, version: str) -> dict:
    """Template variables of both emitters: spec, hashes, version, LUT counts, reasons, masks, and the
    operator's (reason names LOCKED/FORCED, lockable bitmask, lockable names; empty without ``operator:``)."""
    masks = list(machine.masks)
    return {"spec": spec, "hashes": hashes, "version": version, "counts": machine.lut.counts(),
            "reasons": [r.name for r in Reason], "reason_bits": REASON_BITS, "masks": masks,
            "mask_bits": [format(m.allowed, f"0{len(spec.actions)}b") for m in masks],
            # operator interventions (empty without sla.yaml operator:, so those controllers are as before)
            "operator_reasons": [r.name for r in OperatorReason] if spec.operator else [],
            "operator_lockable": format(spec.operator.config().lockable, f"0{len(spec.actions)}b")
            if spec.operator else "",
            "operator_lock_names": [spec.actions[a].name for a in spec.operator.lock] if spec.operator else []}
