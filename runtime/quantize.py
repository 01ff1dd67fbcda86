"""Exact quantization of physical probe values to LUT addresses (docs/fsm.md).

Input i has envelope [min, max] and ``bits`` b. With exact rational arithmetic
(``fractions.Fraction`` of the binary float values, so no rounding anywhere):

    q = clamp(floor((x - min) * 2^b / (max - min)), 0, 2^b - 1)

Cell q covers [min + q*step, min + (q+1)*step), the last cell closed at max.
NaN, an infinity, a non-number, or x outside [min, max] is a probe fault.
The address concatenates the levels, input 0 most significant.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence


def exact_value(x) -> Fraction | None:
    """The exact rational value of a reading, or None when it has none (None, bool, not a
    real number, NaN, infinite). Python and numpy integers and rationals keep their value
    (converted to Python ints first: a numpy integer would wrap around in arithmetic);
    floats of any width (float, numpy float16/32/64/longdouble) by ``as_integer_ratio``,
    never rounded through binary64."""
    if type(x) is Fraction:   # the common case of the raw-word map (FixedPoint.value): kept as it is
        return x
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return None
    try:
        if isinstance(x, numbers.Rational):
            return Fraction(int(x.numerator), int(x.denominator))
        ratio = getattr(x, "as_integer_ratio", None)
        if ratio is not None:
            n, d = ratio()
            return Fraction(int(n), int(d))
        return Fraction(float(x))
    except (OverflowError, ValueError, TypeError):  # NaN, infinities, values with no exact ratio
        return None


@dataclass(frozen=True)
class Quantizer:
    """Quantizer for one input: envelope [lo, hi] (exact rationals), ``bits`` bits."""

    lo: Fraction
    hi: Fraction
    bits: int

    @classmethod
    def from_floats(cls, lo: float, hi: float, bits: int) -> "Quantizer":
        return cls(Fraction(lo), Fraction(hi), int(bits))

    @property
    def levels(self) -> int:
        return 1 << self.bits

    @functools.cached_property
    def _integers(self) -> tuple[int, int, int, int, int, int]:
        """(lo_n, lo_d, hi_n, hi_d, s_n, s_d): lo = lo_n/lo_d, hi = hi_n/hi_d and 2^bits / (hi - lo) =
        s_n/s_d, numerators and positive denominators of the exact rationals."""
        scale = self.levels / (self.hi - self.lo)
        return (self.lo.numerator, self.lo.denominator, self.hi.numerator, self.hi.denominator,
                scale.numerator, scale.denominator)

    def level(self, x) -> int | None:
        """Level of ``x`` in [0, 2^bits - 1], or None for a probe fault (None, NaN,
        infinite, not a real number, outside the envelope).

        The module's formula in integers: with x = n/d (d > 0), x < lo is n·lo_d < lo_n·d, and
        floor((x - lo)·2^b/(hi - lo)) = (n·lo_d - lo_n·d)·s_n // (d·lo_d·s_d), the same exact value
        as the Fraction expression without its normalising gcds (5× faster; the raw-word proof
        calls this on every word)."""
        fx = exact_value(x)
        if fx is None:
            return None
        n, d = fx.numerator, fx.denominator
        lo_n, lo_d, hi_n, hi_d, s_n, s_d = self._integers
        if n * lo_d < lo_n * d or n * hi_d > hi_n * d:
            return None
        q = (n * lo_d - lo_n * d) * s_n // (d * lo_d * s_d)
        return min(q, self.levels - 1)

    def cell_bounds(self, q: int) -> tuple[Fraction, Fraction]:
        """Exact [lower, upper] of cell q (upper excluded except for the last cell)."""
        step = (self.hi - self.lo) / self.levels
        return self.lo + q * step, self.lo + (q + 1) * step

    def centre(self, q: int) -> float:
        lo, hi = self.cell_bounds(q)
        return float((lo + hi) / 2)


def address(levels: Sequence[int], bits: Sequence[int]) -> int:
    """Concatenate levels (input 0 most significant) into a LUT address."""
    addr = 0
    for q, b in zip(levels, bits):
        addr = (addr << b) | q
    return addr


def split_address(addr: int, bits: Sequence[int]) -> list[int]:
    """Inverse of :func:`address`."""
    out = []
    for b in reversed(bits):
        out.append(addr & ((1 << b) - 1))
        addr >>= b
    return out[::-1]


def quantize(values: Sequence, quantizers: Sequence[Quantizer]) -> tuple[int, bool, list[int | None]]:
    """Quantize one probe reading.

    Returns:
        (address, probe_fault, levels). On a fault the address is 0 and levels holds
        None for each faulty input.
    Raises:
        ValueError if the number of readings differs from the number of inputs.
    """
    if len(values) != len(quantizers):
        raise ValueError(f"expected {len(quantizers)} readings, got {len(values)}")
    levels = [qz.level(v) for v, qz in zip(values, quantizers)]
    if any(q is None for q in levels):
        return 0, True, levels
    return address(levels, [qz.bits for qz in quantizers]), False, levels


def fault_causes(inputs: Sequence, readings: Sequence) -> list[dict]:
    """Why a reading is a probe fault, per input that caused it (docs/runtime.md, "Probe faults").

    ``inputs``: the generated runtime's ``INPUTS`` rows ``(name, unit, min, max, bits, ...)``;
    ``readings``: the values quantized, in input order (None = unavailable).
    Returns one dict per faulty input, in input order: ``input``, ``unit``, ``reading`` (the
    value as a float or string, None when unavailable), ``bound`` (``"min 0"``, ``"max 1024"``,
    or None), ``reason`` (``unavailable`` | ``not a number`` | ``below min`` | ``above max``).
    An empty list when every reading lies in its envelope."""
    out = []
    for row, x in zip(inputs, readings):
        name, unit, lo, hi = row[0], row[1], Fraction(row[2]), Fraction(row[3])
        fx = exact_value(x)
        if x is None:
            reason, bound = "unavailable", None
        elif fx is None:
            reason, bound = "not a number", None
        elif fx < lo:
            reason, bound = "below min", f"min {float(lo):g}"
        elif fx > hi:
            reason, bound = "above max", f"max {float(hi):g}"
        else:
            continue
        shown = x if x is None or isinstance(x, (int, float, str)) else (float(fx) if fx is not None else str(x))
        if isinstance(shown, float) and not math.isfinite(shown):
            shown = str(shown)
        out.append({"input": name, "unit": unit, "reading": shown, "bound": bound, "reason": reason})
    return out


def fault_text(cause: dict) -> str:
    """One cause of :func:`fault_causes` in words: ``cache_chase_ns = 2300 ns above max 1024``."""
    if cause["reason"] == "unavailable":
        return f"{cause['input']} unavailable"
    r = cause["reading"]
    value = f"{r:.6g}" if isinstance(r, float) else str(r)
    unit = f" {cause['unit']}" if cause.get("unit") else ""
    return f"{cause['input']} = {value}{unit} " + (f"{cause['reason']} {cause['bound'].split()[1]}"
                                                   if cause["bound"] else f"({cause['reason']})")


# --- raw fixed-point words (sla.yaml hdl.inputs; docs/hdl.md, "Raw inputs") ----------------------

#: Widest raw word: every word of every input is enumerated when the quantizer is proved.
MAX_WORD_BITS = 16


@dataclass(frozen=True)
class FixedPoint:
    """The fixed-point format of one input's raw word (an ADC's or a driver's), sla.yaml
    ``hdl.inputs.<name>`` or ``hdl.input_format``.

    The word is ``width = int_bits + frac_bits`` bits wide (1 .. :data:`MAX_WORD_BITS`); for a
    signed format ``int_bits`` counts the sign bit (two's complement). Its value is
    ``to_signed(word) / 2**frac_bits`` exactly: signed Q1.15 is ``FixedPoint(True, 1, 15)``,
    range [-1, 1 - 2**-15]; unsigned 12-bit ADC counts are ``FixedPoint(False, 12, 0)``.
    """

    signed: bool
    int_bits: int
    frac_bits: int

    @property
    def width(self) -> int:
        return self.int_bits + self.frac_bits

    @property
    def words(self) -> int:
        """Number of representable words, 2**width."""
        return 1 << self.width

    def value(self, word: int) -> Fraction:
        """Exact value of the unsigned bit pattern ``word`` in [0, 2**width); raises ValueError outside."""
        if isinstance(word, bool) or not isinstance(word, int) or not 0 <= word < self.words:
            raise ValueError(f"raw word {word!r} is not a {self.width}-bit pattern")
        if self.signed and word >> (self.width - 1):
            word -= self.words
        return Fraction(word, 1 << self.frac_bits)

    def describe(self) -> str:
        """``"signed Q1.15 (16 bits)"``: the sign bit counted in the integer bits."""
        return f"{'signed' if self.signed else 'unsigned'} Q{self.int_bits}.{self.frac_bits} ({self.width} bits)"


def word_level(quantizer: Quantizer, fmt: FixedPoint, word: int | None) -> int | None:
    """The one map from a raw word to a level (docs/hdl.md, "Raw inputs"): the level
    :meth:`Quantizer.level` gives the word's exact value, or None for a probe fault (the
    value outside the envelope, or ``word`` None: a missing reading, the RTL's ``<name>_valid``
    low). The RTL quantizer is proved equal to this on every word of every input.
    Raises ValueError for a word outside [0, 2**width)."""
    if word is None:
        return None
    return quantizer.level(fmt.value(word))


def quantize_words(words: Sequence[int | None], quantizers: Sequence[Quantizer],
                   formats: Sequence[FixedPoint]) -> tuple[int, bool, list[int | None]]:
    """:func:`quantize` for raw words (None: missing reading). Returns (address, probe_fault,
    levels): address 0 on a fault, as the RTL's ``<module>_quantizer`` outputs it.
    Raises ValueError for a wrong number of words or a word outside its format."""
    if not len(words) == len(quantizers) == len(formats):
        raise ValueError(f"expected {len(quantizers)} raw words, got {len(words)}")
    levels = [word_level(qz, fmt, w) for w, qz, fmt in zip(words, quantizers, formats)]
    if any(q is None for q in levels):
        return 0, True, levels
    return address(levels, [qz.bits for qz in quantizers]), False, levels


def word_runs(quantizer: Quantizer, fmt: FixedPoint) -> list[tuple[int, int, int | None]]:
    """Every word of ``fmt`` quantized by :func:`word_level` (exhaustively, 2**width calls), as
    runs over the word's value order: [(first word, last word, level or None)], each a maximal
    interval of *signed* word values (``to_signed(word)``; = the word for unsigned formats)
    with one result. The runs cover [min value, max value] in order without gaps."""
    lo_w = -(fmt.words >> 1) if fmt.signed else 0
    runs: list[list] = []
    for v in range(lo_w, lo_w + fmt.words):
        q = word_level(quantizer, fmt, v % fmt.words)
        if runs and runs[-1][2] == q:
            runs[-1][1] = v
        else:
            runs.append([v, v, q])
    return [tuple(r) for r in runs]
