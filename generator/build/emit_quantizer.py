"""The raw-input design: ``<module>_quantizer.v`` (``templates/verilog/quantizer.v.j2``), a comparator quantizer from each input's raw fixed-point word (sla.yaml
``hdl.inputs`` / ``hdl.input_format``; :class:`mi_certify.runtime.quantize.FixedPoint`) to its level
and probe fault, and ``<module>_raw.v`` (``raw_top.v.j2``), that quantizer wired to the controller ``<module>``
(docs/hdl.md, "Raw inputs"). The thresholds are exact (rational arithmetic); the build proves the
quantizer equal to :func:`mi_certify.runtime.quantize.word_level` on every word of every input
(:mod:`mi_certify.verification.rtl.quantizer_proofs`). A pure function of the spec."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from mi_certify.runtime.fsm import REASON_BITS
from mi_certify.runtime.quantize import FixedPoint, Quantizer
from mi_certify.templates import environment

from mi_certify.generator.build.verilog_parts import address_fields
from mi_certify.generator.core.spec import Spec


def quantizer_module(spec: Spec) -> str:
    """Name of the quantizer module: ``<module>_quantizer``."""
    return f"{spec.module_name}_quantizer"


def raw_module(spec: Spec) -> str:
    """Name of the raw-input top: ``<module>_raw``."""
    return f"{spec.module_name}_raw"


@dataclass(frozen=True)
class InputComparators:
    """The comparators of one input, on the offset word ``u`` (unsigned: the word; signed: the word
    with its sign bit flipped, so unsigned comparison orders by value).

    low: fault when u < low (None: no word is below the envelope); high: fault when u > high (None:
    none above); steps: [(level k, u threshold)] for level k when u >= threshold, highest k first,
    only thresholds some word reaches and not all words pass; base: the level when no step passes."""

    width: int
    flip_sign: bool
    low: int | None
    high: int | None
    steps: tuple[tuple[int, int], ...]
    base: int


def comparators(qz: Quantizer, fmt: FixedPoint) -> InputComparators:
    """Thresholds of one input in the word domain, exact: the word value v / 2^frac_bits is in the
    envelope iff ceil(min * 2^f) <= v <= floor(max * 2^f), and its level is >= k iff
    v >= ceil((min + k * step) * 2^f) (floor((x - min) / step) >= k iff x >= min + k * step)."""
    scale = 1 << fmt.frac_bits
    bias = fmt.words >> 1 if fmt.signed else 0
    top = fmt.words - 1

    def u(x: Fraction, up: bool) -> int:
        return (math.ceil(x * scale) if up else math.floor(x * scale)) + bias
    lo_u, hi_u = u(qz.lo, True), u(qz.hi, False)
    step = (qz.hi - qz.lo) / qz.levels
    thresholds = [(k, u(qz.lo + k * step, True)) for k in range(1, qz.levels)]
    base = max([k for k, t in thresholds if t <= 0], default=0)
    steps = tuple((k, t) for k, t in reversed(thresholds) if k > base and t <= top)
    return InputComparators(fmt.width, fmt.signed, lo_u if lo_u > 0 else None, hi_u if hi_u < top else None,
                            steps, base)


def emit_raw_design(spec: Spec, version: str, spec_hash: str) -> dict[str, str]:
    """Source texts of ``<module>_quantizer.v`` and ``<module>_raw.v`` (Verilog-2001), by file name.
    Raises ValueError when sla.yaml declares no raw word format (``spec.hdl.input_formats`` empty)."""
    formats = spec.hdl.input_formats
    if not formats:
        raise ValueError("sla.yaml declares no raw input format (hdl.inputs / hdl.input_format)")
    fields = address_fields(spec)
    inputs = []
    for inp, fmt, fld in zip(spec.inputs, formats, fields):
        qz = Quantizer.from_floats(inp.min, inp.max, inp.bits)
        inputs.append({"name": inp.name, "fmt": fmt, "field": fld, "cmp": comparators(qz, fmt)})
    env = environment()
    variables = dict(spec=spec, version=version, spec_hash=spec_hash, inputs=inputs, quantizer=quantizer_module(spec),
                     top=raw_module(spec), hdl=spec.hdl, reason_bits=REASON_BITS, reset_active=spec.hdl.reset_active)
    return {f"{quantizer_module(spec)}.v": env.get_template("verilog/quantizer.v.j2").render(**variables),
            f"{raw_module(spec)}.v": env.get_template("verilog/raw_top.v.j2").render(**variables)}
