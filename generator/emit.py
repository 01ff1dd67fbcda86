"""Emitters: the LUT-FSM as a standalone Python module and as Verilog-2001.

Both are rendered from Jinja templates in ``mi_certify.templates`` (``python/``,
``verilog/``); the output is a pure function of the spec, the LUT and the source
hashes, so the same inputs give byte-identical files.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from importlib import resources

import jinja2
import numpy as np

from mi_certify.runtime.fsm import REASON_BITS, MaskBox, Reason

from .lut import Lut
from .spec import Spec


@dataclass(frozen=True)
class SourceHashes:
    """sha256 hex digests of the model, the spec and the LUT bytes."""

    model: str
    spec: str
    lut: str


def lut_bytes(lut: Lut) -> bytes:
    """One byte per address: token in bits 0-6, confident bit 7 (the runtime format)."""
    return (lut.tokens.astype(np.uint16) | (lut.confident.astype(np.uint16) << 7)).astype(np.uint8).tobytes()


def _fraction(x: float) -> str:
    f = Fraction(x)
    return f"Fraction({f.numerator}, {f.denominator})"


def _environment() -> jinja2.Environment:
    root = resources.files("mi_certify.templates")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(root)), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             autoescape=False)
    env.filters["fraction"] = _fraction
    env.filters["float_repr"] = repr
    env.filters["pytuple"] = lambda items: repr(tuple(items))
    env.filters["pyrepr"] = repr
    env.filters["opt_float"] = lambda x: "None" if x is None else repr(float(x))
    return env


def _common(spec: Spec, lut: Lut, hashes: SourceHashes, version: str, masks: list[MaskBox]) -> dict:
    return {"spec": spec, "hashes": hashes, "version": version, "counts": lut.counts(),
            "reasons": [r.name for r in Reason], "reason_bits": REASON_BITS, "masks": masks,
            "mask_bits": [format(m.allowed, f"0{len(spec.actions)}b") for m in masks]}


def emit_python(spec: Spec, lut: Lut, hashes: SourceHashes, version: str, masks: list[MaskBox] = ()) -> str:
    """Source text of ``<name>.py`` (stdlib only, integer LUT-FSM); ``masks``: the
    allowed-action boxes of the sla.yaml properties (rule 3a of docs/fsm.md)."""
    hexs = lut_bytes(lut).hex()
    lines = [hexs[i:i + 96] for i in range(0, len(hexs), 96)]
    return _environment().get_template("python/runtime.py.j2").render(lut_hex=lines, **_common(spec, lut, hashes, version, list(masks)))


def _width(max_value: int) -> int:
    return max(1, int(max_value).bit_length())


def emit_verilog(spec: Spec, lut: Lut, hashes: SourceHashes, version: str, masks: list[MaskBox] = ()) -> str:
    """Source text of ``<name>.v`` (Verilog-2001, case-statement LUT).

    The case lists only entries that differ from the most common entry, which is
    the ``default`` arm; the table is exact either way.
    """
    tw = spec.token_bits
    entries = lut.tokens.astype(np.int64) | (lut.confident.astype(np.int64) << tw)
    values, counts = np.unique(entries, return_counts=True)
    default = int(values[int(np.argmax(counts))])
    cases = [(int(a), int(entries[a])) for a in np.nonzero(entries != default)[0]]
    fields, msb = [], spec.address_bits - 1
    for inp in spec.inputs:
        fields.append({"name": inp.name, "unit": inp.unit, "bits": inp.bits, "min": inp.min, "max": inp.max,
                       "msb": msb, "lsb": msb - inp.bits + 1})
        msb -= inp.bits
    # the cells of each mask box: comparators on the address fields (full ranges omitted)
    mask_terms = []
    for m in masks:
        terms = []
        for fld, lo, hi in zip(fields, m.lo, m.hi):
            sl = f"addr[{fld['msb']}:{fld['lsb']}]" if fld["msb"] > fld["lsb"] else f"addr[{fld['msb']}]"
            if lo > 0:
                terms.append(f"({sl} >= {fld['bits']}'d{lo})")
            if hi < (1 << fld["bits"]) - 1:
                terms.append(f"({sl} <= {fld['bits']}'d{hi})")
        mask_terms.append(" && ".join(terms) or "1'b1")
    f = spec.fsm
    return _environment().get_template("verilog/fsm.v.j2").render(
        lut_cases=cases, lut_default=default, addr_fields=fields, tw=tw, mask_terms=mask_terms,
        hw=_width(f.hysteresis - 1), dw=_width(f.cooldown), vw=_width(f.violations_to_fallback - 1),
        rw=_width(f.recovery - 1), **_common(spec, lut, hashes, version, list(masks)))
