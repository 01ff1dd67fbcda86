"""Bit-vectors of any width as NumPy vectors, for the evaluators that read the LUT back.

Values up to :data:`INT64_BITS` bits live in int64 lanes (fast); wider ones (a ROM word of
many slice columns, a long concatenation) are exact Python integers in object arrays, so
nothing ever wraps. :func:`widen` before an operation whose result may be wider than the
lanes, :func:`narrow` after one whose result fits again. Used by
:mod:`mi_certify.verification.rtl.rtl_formal` (Yosys SMT-LIB) and
:mod:`mi_certify.verification.tools.verilog_reader` (pyverilog syntax tree).
"""

from __future__ import annotations

import numpy as np

__all__ = ["INT64_BITS", "narrow", "widen"]

#: Widest bit-vector kept in int64 lanes (two bits below 64: shifts and sums stay exact).
INT64_BITS = 62


def widen(v, width: int):
    """``v`` (scalar or array) as exact Python integers (object dtype) when ``width`` exceeds
    int64 lanes; unchanged otherwise."""
    if width <= INT64_BITS:
        return v
    if isinstance(v, np.ndarray):
        return v if v.dtype == object else v.astype(object)
    return np.array(int(v), dtype=object)


def narrow(v, width: int):
    """A value of ``width`` bits in int64 lanes when it fits (scalars as numpy int64); as exact
    integers (object dtype) when it does not."""
    if width > INT64_BITS:
        return v if isinstance(v, np.ndarray) else np.array(int(v), dtype=object)
    if isinstance(v, np.ndarray):
        return v.astype(np.int64) if v.dtype == object else v
    return np.int64(int(v))
