"""The C99 emitter: the LUT-FSM as ``<name>.h`` / ``<name>.c`` (``templates/c/``) for a
microcontroller: no heap, no recursion, no floating-point arithmetic (the float entry only
compares readings with constant thresholds), ``const`` tables, fixed-width integers, the FSM
state in a caller-owned struct, one step function, the audit record as a plain struct
(docs/c-runtime.md). The output is a pure function of the spec, the LUT and the source hashes.

The quantizers (``<name>_quantize`` for float readings, ``<name>_address`` for levels) each
return an address and a probe-fault flag, which ``<name>_step_addr`` takes: a further entry
(raw fixed-point words) is one more function of that shape.
"""

from __future__ import annotations

from mi_certify.templates import environment

from mi_certify.generator.build.emit_common import SourceHashes, common_variables
from mi_certify.generator.build.emit_python import level_thresholds
from mi_certify.generator.core.lut import LutFsmArtefact
from mi_certify.generator.core.spec import Spec

__all__ = ["MISRA_DEVIATIONS", "c_file_names", "c_literal", "emit_c"]

#: The MISRA C:2012 rules the emitted C deviates from, each with its category and the reason
#: (docs/c-runtime.md); cppcheck's findings of any other rule fail the build's ``c_runtime`` stage.
MISRA_DEVIATIONS: dict[str, dict[str, str]] = {
    "2.5": {"category": "advisory", "reason": "the header defines constants for the integrator (numbers of inputs "
            "and actions, address bits, LUT cells, reason codes) that the runtime itself does not use"},
    "8.7": {"category": "advisory", "reason": "the quantizers and the step from an address are the integrator's "
            "entries (float, level, address); they keep external linkage although the runtime calls them from one "
            "translation unit"},
    "8.9": {"category": "advisory", "reason": "the const tables (envelope, thresholds, property boxes, LUT) stay at "
            "file scope beside their documentation, where a reviewer compares them with sla.yaml and lut.hex, "
            "although each is read by one function"},
}


def c_file_names(spec: Spec) -> tuple[str, str]:
    """(header, source) file names of the C runtime: ``<name>.h``, ``<name>.c``."""
    return f"{spec.name}.h", f"{spec.name}.c"


def c_literal(x: float) -> str:
    """A C99 double literal of exactly ``x`` (finite): the shortest decimal that reads back as
    ``x`` (Python's repr; C99 6.4.4.2 and IEEE 754 round-to-nearest read it back exactly), with
    a decimal point or exponent so that it is a floating constant."""
    text = repr(float(x))
    if text in ("nan", "inf", "-inf"):
        raise ValueError(f"{text} has no C99 floating constant")
    return text if any(ch in text for ch in ".e") else text + ".0"


def _chunks(items: list[str], per_line: int) -> list[str]:
    return [" ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]


def emit_c(spec: Spec, machine: LutFsmArtefact, hashes: SourceHashes, version: str) -> tuple[str, str]:
    """Source texts (header, source) of the C runtime for ``machine``: its table, its
    allowed-action boxes (rule 3a of docs/fsm.md), its FSM parameters and input envelopes from
    ``spec``. Raises ValueError for an envelope bound that is not finite."""
    bits = [int(i.bits) for i in spec.inputs]
    shifts, shift = [], sum(bits)
    for b in bits:
        shift -= b
        shifts.append(shift)
    thresholds: list[str] = []
    quant = []      # per input: where its thresholds and its property rows start, the two rounds' shape
    level_first = 0
    for i in spec.inputs:
        low_bits = int(i.bits) // 2
        quant.append({"first": len(thresholds), "low_bits": low_bits, "groups": 1 << (int(i.bits) - low_bits),
                      "level_first": level_first})
        thresholds += [c_literal(t) + "," for t in level_thresholds(i.min, i.max, i.bits)]
        level_first += 1 << int(i.bits)
    table = bytes(machine.table) + bytes(-len(machine.table) % 4)
    entries = [f"0x{int.from_bytes(table[i:i + 4], 'little'):08x}u," for i in range(0, len(table), 4)]
    masks = list(machine.masks)
    mask_words = max(1, (len(masks) + 31) // 32)

    def words(bitset: int) -> list[str]:
        return [f"0x{(bitset >> (32 * w)) & 0xFFFFFFFF:08x}u" for w in range(mask_words)]
    in_box_rows = [{"input": inp.name, "level": q,
                    "words": words(sum(1 << m for m, box in enumerate(masks) if box.lo[k] <= q <= box.hi[k]))}
                   for k, inp in enumerate(spec.inputs) for q in range(1 << int(inp.bits))]
    forbid_rows = [words(sum(1 << m for m, box in enumerate(masks) if not (box.allowed >> t) & 1))
                   for t in range(len(spec.actions))]
    variables = dict(common_variables(spec, machine, hashes, version), p=spec.name, P=spec.name.upper(),
                     guard=f"{spec.name.upper()}_H", bits=bits, shifts=shifts,
                     mins=[c_literal(i.min) for i in spec.inputs], maxs=[c_literal(i.max) for i in spec.inputs],
                     quant=quant, thresholds=thresholds, threshold_lines=_chunks(thresholds, 4),
                     lut_lines=_chunks(entries, 6), lut_words=len(entries), mask_words=mask_words,
                     in_box_rows=in_box_rows, forbid_rows=forbid_rows,
                     mask_allows=[[a.name for t, a in enumerate(spec.actions) if (box.allowed >> t) & 1] or ["none"]
                                  for box in masks])
    env = environment()
    return (env.get_template("c/runtime.h.j2").render(**variables),
            env.get_template("c/runtime.c.j2").render(**variables))
