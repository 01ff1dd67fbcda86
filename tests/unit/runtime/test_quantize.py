"""Exact quantization: levels, cell edges, faults, address packing."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mi_certify.runtime.quantize import Quantizer, address, quantize, split_address


def test_levels_follow_the_floor_formula_and_the_last_cell_is_closed():
    q = Quantizer.from_floats(20.0, 110.0, 3)  # step 11.25
    assert [q.level(x) for x in (20.0, 31.24, 31.25, 64.9, 98.75, 109.99, 110.0)] == [0, 0, 1, 3, 7, 7, 7]


@settings(max_examples=400, deadline=None)
@given(lo=st.floats(-1e300, 1e300), width=st.floats(5e-324, 1e300), bits=st.integers(1, 16),
       x=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.fractions(), st.integers(-2**70, 2**70)),
       pick=st.integers(0, 4))
def test_level_in_integers_is_the_fraction_formula(lo, width, bits, x, pick):
    """:meth:`Quantizer.level` computes in integers; the module's formula, in Fractions, gives the same
    level at any reading: the envelope's ends, their float neighbours, values inside and out."""
    hi = lo + width
    if not (math.isfinite(hi) and hi > lo):
        return
    q = Quantizer.from_floats(lo, hi, bits)
    x = (x, lo, hi, math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf))[pick]
    fx = None if isinstance(x, float) and not math.isfinite(x) else Fraction(x)
    want = None if fx is None or not q.lo <= fx <= q.hi else \
        min(math.floor((fx - q.lo) * (1 << bits) / (q.hi - q.lo)), (1 << bits) - 1)
    assert q.level(x) == want


def test_cell_edges_are_exact_rationals():
    q = Quantizer.from_floats(0.0, 1.0, 4)
    lo, hi = q.cell_bounds(5)
    assert (lo, hi) == (Fraction(5, 16), Fraction(6, 16))
    assert q.level(5 / 16) == 5 and q.level(math.nextafter(5 / 16, 0)) == 4


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.001, 1.001, "0.5", None, True, complex(0.5)])
def test_nan_out_of_range_and_non_numbers_are_probe_faults(bad):
    assert Quantizer.from_floats(0.0, 1.0, 2).level(bad) is None


def test_address_is_input_zero_most_significant():
    qs = [Quantizer.from_floats(0, 1, 2), Quantizer.from_floats(0, 8, 3)]
    addr, fault, levels = quantize([0.6, 7.5], qs)
    assert (addr, fault, levels) == ((2 << 3) | 7, False, [2, 7])
    assert split_address(addr, [2, 3]) == [2, 7]
    assert address([1, 0, 3], [1, 2, 2]) == 0b1_00_11


def test_a_faulty_input_gives_a_fault_and_names_the_input():
    qs = [Quantizer.from_floats(0, 1, 2), Quantizer.from_floats(0, 8, 3)]
    addr, fault, levels = quantize([0.6, float("nan")], qs)
    assert fault and levels == [2, None]
    with pytest.raises(ValueError, match="expected 2 readings, got 1"):
        quantize([0.6], qs)


def test_numpy_scalars_fractions_and_ints_are_readings_like_floats():
    import numpy as np
    q = Quantizer.from_floats(0.0, 1.0, 4)
    assert q.level(np.float32(0.5)) == q.level(np.float64(0.5)) == q.level(Fraction(1, 2)) == 8
    assert q.level(np.int64(1)) == 15 and q.level(np.float32("nan")) is None


@pytest.mark.parametrize("lo, hi", [(0.0, 1.0), (20.0, 110.0), (-3.7, 0.1), (1e-300, 3e-300), (-1e6, 1e6 + 0.3)])
def test_straight_line_level_search_is_the_exact_level_for_every_width(lo, hi):
    """The emitted if-tree (generator.emit) for 1..8 bits against the exact rational level,
    at every cell edge and its float neighbours and at random floats of the envelope."""
    import random

    from mi_certify.generator.build.emit_python import level_thresholds, level_tree

    rng = random.Random(5)
    for bits in range(1, 9):
        q = Quantizer.from_floats(lo, hi, bits)
        th = level_thresholds(lo, hi, bits)
        assert len(th) == (1 << bits) - 1 and list(th) == sorted(th)
        src = "def level(x0):\n" + "\n".join(level_tree(0, th, 0, (1 << bits) - 1, "    ")) + "\n    return q0\n"
        ns: dict = {}
        exec(compile(src, "<tree>", "exec"), ns)
        edges = [float(q.cell_bounds(j)[0]) for j in range(1 << bits)] + [hi]
        xs = [y for e in edges for y in (e, math.nextafter(e, -math.inf), math.nextafter(e, math.inf))]
        xs += [rng.uniform(lo, hi) for _ in range(300)] + list(th)
        checked = 0
        for x in xs:
            if lo <= x <= hi:
                assert ns["level"](x) == q.level(x), (bits, x)
                checked += 1
        assert checked > 300
