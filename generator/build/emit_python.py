"""The Python emitter: the LUT-FSM as a standalone Python module (``templates/python/runtime.py.j2``;
standard library only, integer logic after quantization). The output is a pure function of the
spec, the LUT and the source hashes: the same inputs give byte-identical files."""

from __future__ import annotations

import math
from fractions import Fraction

from mi_certify.templates import environment

from mi_certify.generator.build.emit_common import SourceHashes, common_variables
from mi_certify.generator.core.lut import LutFsmArtefact
from mi_certify.generator.core.spec import Spec


def level_thresholds(lo: float, hi: float, bits: int) -> tuple[float, ...]:
    """The floats at which the level of a reading in [lo, hi] quantized to ``bits`` bits
    steps up (2^bits - 1 of them, ascending): the smallest float >= each exact cell edge
    lo + (hi - lo) * j / 2^bits, j = 1 .. 2^bits - 1, so that for a float x,
    x >= threshold exactly when x >= edge (docs/fsm.md, quantization)."""
    flo, fhi = Fraction(lo), Fraction(hi)
    out = []
    for j in range(1, 1 << bits):
        edge = flo + (fhi - flo) * j / (1 << bits)
        f = float(edge)
        out.append(f if Fraction(f) >= edge else math.nextafter(f, math.inf))
    return tuple(out)


def level_tree(k: int, thresholds: tuple[float, ...], first: int, last: int, indent: str) -> list[str]:
    """Lines of a straight-line binary search: ``q<k>`` = the level of ``x<k>`` among
    levels first..last, by comparisons with the float thresholds (exact, see
    :func:`level_thresholds`)."""
    if first == last:
        return [f"{indent}q{k} = {first}"]
    mid = (first + last + 1) // 2
    deeper = indent + "    "
    return ([f"{indent}if x{k} < {thresholds[mid - 1]!r}:"] + level_tree(k, thresholds, first, mid - 1, deeper)
            + [f"{indent}else:"] + level_tree(k, thresholds, mid, last, deeper))


def emit_python(spec: Spec, machine: LutFsmArtefact, hashes: SourceHashes, version: str) -> str:
    """Source text of ``<name>.py`` (stdlib only, integer LUT-FSM) for ``machine``: its table, its
    allowed-action boxes (rule 3a of docs/fsm.md), its FSM parameters from ``spec``."""
    hexs = machine.table.hex()
    lines = [hexs[i:i + 96] for i in range(0, len(hexs), 96)]
    trees = [level_tree(k, level_thresholds(i.min, i.max, i.bits), 0, (1 << i.bits) - 1, "")
             for k, i in enumerate(spec.inputs)]
    return environment().get_template("python/runtime.py.j2").render(
        lut_hex=lines, level_trees=trees, **common_variables(spec, machine, hashes, version))
