"""The vectorised quantizer (generator.core.lut.levels_of / point_addresses) against the runtime's
exact one (runtime.quantize.Quantizer.level / quantize), value by value, on cell faces and their
binary64 neighbours, outside the envelope, and on NaN and infinities."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from mi_certify.generator.core.lut import levels_of, point_addresses
from mi_certify.generator.core.spec import load_spec
from mi_certify.runtime.quantize import Quantizer, quantize

finite = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False)


def _probes(qz: Quantizer, picks: list[float]) -> np.ndarray:
    """Every cell face of ``qz`` rounded to binary64 and its two neighbours, both ends, the ends'
    outer neighbours, NaN, both infinities, and ``picks`` (fractions of the envelope)."""
    lo, hi = float(qz.lo), float(qz.hi)
    xs = [lo, hi, math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf), math.nan, math.inf, -math.inf]
    for q in range(qz.levels + 1):
        face = float(qz.lo + (qz.hi - qz.lo) * q / qz.levels)
        xs += [face, math.nextafter(face, -math.inf), math.nextafter(face, math.inf)]
    xs += [lo + (hi - lo) * p for p in picks]
    return np.array(xs, dtype=np.float64)


def _expected(qz: Quantizer, xs: np.ndarray) -> list[int]:
    return [-1 if (q := qz.level(float(x))) is None else q for x in xs]


@settings(max_examples=300, deadline=None)
@given(lo=finite, width=st.floats(min_value=1e-300, max_value=1e300), bits=st.integers(1, 8),
       picks=st.lists(st.floats(min_value=-0.1, max_value=1.1), max_size=40))
def test_levels_of_equals_the_exact_level_on_faces_neighbours_and_faults(lo, width, bits, picks):
    hi = lo + width
    if not (hi > lo and math.isfinite(hi)):
        return
    qz = Quantizer.from_floats(lo, hi, bits)
    xs = _probes(qz, picks)
    assert levels_of(qz, xs).tolist() == _expected(qz, xs)


def test_levels_of_on_a_narrow_envelope_of_subnormals_and_a_non_binary_one():
    sub = Quantizer.from_floats(0.0, 5e-323, 3)            # a width of ten subnormal steps
    xs = _probes(sub, [0.3, 0.7])
    assert levels_of(sub, xs).tolist() == _expected(sub, xs)
    from fractions import Fraction
    third = Quantizer(Fraction(0), Fraction(1, 3), 2)      # an end that is no binary64 value
    xs = np.array([0.0, 1 / 12, 1 / 6, 0.25, 1 / 3, 0.34, -0.0, math.nan])
    assert levels_of(third, xs).tolist() == _expected(third, xs) == [0, 0, 1, 3, 3, -1, 0, -1]   # float(1/12) < 1/12
    big = Quantizer.from_floats(-1.5e308, 1.5e308, 8)     # hi - lo overflows binary64
    xs = _probes(big, [0.5, 0.999])
    assert levels_of(big, xs).tolist() == _expected(big, xs)


def test_levels_of_decides_most_values_without_the_exact_path(monkeypatch):
    """The point of the vectorised path: on random values only those next to a face are exact."""
    qz = Quantizer.from_floats(20.0, 110.0, 6)
    calls = []
    real = Quantizer.level
    monkeypatch.setattr(Quantizer, "level", lambda self, x: calls.append(x) or real(self, x))
    xs = np.random.default_rng(3).uniform(20.0, 110.0, 50_000)
    got = levels_of(qz, xs)
    assert len(calls) == 0
    monkeypatch.undo()
    assert got.tolist() == _expected(qz, xs)
    assert levels_of(qz, np.array([20.0 + 90.0 * 5 / 64])).tolist() == [5]   # on a face: exact path


def test_point_addresses_equal_the_runtime_quantize_on_the_reference_spec():
    spec = load_spec(ROOT / "examples" / "meta_controller" / "sla.yaml")
    qs = [Quantizer.from_floats(i.min, i.max, i.bits) for i in spec.inputs]
    lo = np.array([i.min for i in spec.inputs])
    hi = np.array([i.max for i in spec.inputs])
    rng = np.random.default_rng(7)
    pts = lo + (hi - lo) * rng.uniform(-0.05, 1.05, (4000, lo.size))
    pts[::97, 1] = np.nan
    pts[5::89] = hi                                        # the closed last cell
    addr, fault = point_addresses(spec, pts)
    want = [quantize(list(map(float, p)), qs) for p in pts]
    assert addr.tolist() == [w[0] for w in want]
    assert fault.tolist() == [w[1] for w in want]
    assert 0 < fault.sum() < len(pts)
    try:
        point_addresses(spec, pts[:, :2])
    except ValueError as e:
        assert f"(n, {len(spec.inputs)})" in str(e)
    else:
        raise AssertionError("a wrong number of columns was accepted")
