"""What the Verilog emitter (:mod:`mi_certify.generator.build.emit_verilog`) and its LUT encodings
(``lut_case``, ``lut_rom``, ``lut_sliced_rom``, ``lut_boxtree``) share: the address fields, the
LUT entries, the decision stage's inputs, and aligned declarations.

An encoding module turns a :class:`LutContext` into a :class:`LutLogic` (the declarations,
template variables and note of its LUT logic); the emitter adds the pipeline, the property
masks and the FSM around it (docs/hdl.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mi_certify.generator.core.lut import Lut, LutFsmArtefact
from mi_certify.generator.core.spec import Spec

#: LUT encodings of the generated Verilog (sla.yaml ``hdl.encoding``; "auto" is resolved by the pipeline).
ENCODINGS = ("case", "rom", "boxtree", "sliced_rom")

#: Decision latencies of the generated Verilog (sla.yaml ``hdl.latency``; "auto" is resolved by the pipeline).
LATENCIES = (1, 2, 3, 4)


def lut_entries(spec: Spec, lut: Lut | LutFsmArtefact) -> np.ndarray:
    """The RTL's LUT entries by address: ``{confident, token}`` (token_bits + 1 bits), int64."""
    return lut.tokens.astype(np.int64) | (lut.confident.astype(np.int64) << spec.token_bits)


#: Words per ``initial`` block of a ROM's inline contents (``verilog/fsm.v.j2``, macro ``rom_init``).
ROM_BLOCK = 256


def rom_words(hex_text: str) -> list[tuple[int, str]]:
    """(address, hex word) of a ROM's contents written one hex word per line (line number = address):
    the ``rom_words`` template variable of the ``rom`` and ``sliced_rom`` encodings."""
    return list(enumerate(hex_text.split()))


def decision_inputs(latency: int) -> dict[str, str]:
    """Names of the signals the decision stage of the generated Verilog reads (docs/hdl.md,
    "Latency"): ``addr``, ``fault``, ``viol`` and ``valid`` (the ``step`` port at latency 1: a
    cycle with it low is no decision). Latency L reads the stage L-1 pipeline registers
    ``addr_q<L-1>`` etc."""
    if latency == 1:
        return {"addr": "addr", "fault": "probe_fault", "viol": "sla_violation", "valid": "step"}
    k = latency - 1
    return {"addr": f"addr_q{k}", "fault": f"probe_fault_q{k}", "viol": f"sla_violation_q{k}", "valid": f"valid_q{k}"}


def mask_address(latency: int) -> str:
    """The address rule 3a's property mask is computed on (docs/hdl.md, "Latency"): the decision's
    (``addr``) at latency 1; from latency 2 on the stage before the decision's (``addr``, ``addr_q<L-2>``),
    the mask registered beside the pipeline into ``allowed``, the mask of the decision's address
    ``addr_q<L-1>`` (a level of logic out of the decision stage)."""
    return "addr" if latency <= 2 else f"addr_q{latency - 2}"


def address_fields(spec: Spec) -> list[dict]:
    """The quantized input fields of the LUT address, input 0 most significant: name, unit,
    bits, min, max and the field's bit range (msb, lsb) in the address."""
    fields, msb = [], spec.address_bits - 1
    for inp in spec.inputs:
        fields.append({"name": inp.name, "unit": inp.unit, "bits": inp.bits, "min": inp.min, "max": inp.max,
                       "msb": msb, "lsb": msb - inp.bits + 1})
        msb -= inp.bits
    return fields


def width(max_value: int) -> int:
    """Bits of an unsigned register that holds 0 .. ``max_value`` (at least 1)."""
    return max(1, int(max_value).bit_length())


def bit_range(bits: int) -> str:
    """``[bits-1:0]``, or nothing for one bit."""
    return f"[{bits - 1}:0]" if bits > 1 else ""


def decls(rows: list[tuple]) -> list[str]:
    """Aligned declarations: rows of (kind, width in bits, name[, comment]); width 1 has no range,
    a width given as a string is used as the range (``"[3:0]"``), the name may carry a memory
    range or an initialiser."""
    def rng(w):
        return w if isinstance(w, str) else bit_range(w)
    kw = max(len(r[0]) for r in rows)
    rw = max(len(rng(r[1])) for r in rows)
    nw = max(len(r[2]) for r in rows if len(r) > 3 and r[3]) if any(len(r) > 3 and r[3] for r in rows) else 0
    out = []
    for r in rows:
        head = f"{r[0]:<{kw}} {rng(r[1]):<{rw}} {r[2]};" if rw else f"{r[0]:<{kw}} {r[2]};"
        out.append(f"{head:<{len(head) - len(r[2]) + nw}}   // {r[3]}" if len(r) > 3 and r[3] else head)
    return out


def assigns(pairs: list[tuple[str, str]], op: str = "<=") -> list[str]:
    """Aligned ``lhs <op> rhs;`` lines."""
    w = max(len(lhs) for lhs, _ in pairs)
    return [f"{lhs:<{w}} {op} {rhs};" for lhs, rhs in pairs]


@dataclass(frozen=True)
class LutContext:
    """What an encoding needs to write the LUT logic of one design.

    entries: (2**address_bits,) int64, :func:`lut_entries`; default: the most common entry;
    fields: :func:`address_fields`; latency: 1 | 2 | 3 | 4; lut_addr: the address the LUT logic
    reads (``addr_q1`` at latency 3, ``addr_q2`` at 4, else ``addr``); lut_out: the register or wire the LUT logic
    assigns unless the encoding says otherwise; boxes: the distillation partition (inclusive
    level ranges) for ``boxtree``, or None."""

    spec: Spec
    machine: LutFsmArtefact
    entries: np.ndarray
    default: int
    fields: list[dict]
    latency: int
    lut_addr: str
    lut_out: str
    boxes: list[tuple[list[int], list[int]]] | None

    @property
    def tw(self) -> int:
        return self.spec.token_bits

    def entry(self, e: int) -> str:
        """The Verilog literal of an entry: ``{1'b<confident>, <tw>'d<token>}``."""
        return f"{{1'b{int(e) >> self.tw}, {self.tw}'d{int(e) & ((1 << self.tw) - 1)}}}"


@dataclass
class LutLogic:
    """An encoding's LUT logic: a note for the header, declarations (rows for :func:`decls`),
    the output it assigns, and the template variables it sets (the others keep
    :func:`template_defaults`)."""

    note: str
    lut_out: str
    decls: list[tuple] = field(default_factory=list)
    variables: dict = field(default_factory=dict)


def template_defaults(spec: Spec) -> dict:
    """The encoding-specific variables of ``verilog/fsm.v.j2`` as no encoding sets them."""
    return {"rom_words": [], "rom_block": ROM_BLOCK, "rom_sha256": "", "tree_lines": [], "tree_comparators": 0,
            "tree_leaves": 0, "sliced": None, "tree_field_decls": [], "col_sync": False, "col_addr": "addr",
            "rom_addr": "addr", "split": None, "lut_cases": []}
