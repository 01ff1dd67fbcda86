"""sla.yaml properties checked on the LUT itself (every cell, exhaustively).

A ``forbid`` / ``require`` property constrains every LUT cell whose box meets the
property's ``when`` region (cell q of an input covers [min + q·step, min + (q+1)·step),
the last one closed): the cell's proposed token must not be forbidden / must be
required. This is an exact check of the artefact that runs, cell by cell; it says
nothing about the network between cell centres (that is the network verification's
job). ``output`` properties bound raw network outputs, which the LUT does not hold:
they are reported as not applicable here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mi_certify.generator.core.lut import levels_meeting
from mi_certify.generator.core.results import Verdict
from mi_certify.generator.core.spec import Spec


@dataclass(frozen=True)
class LutPropertyResult:
    """``verdict``: "holds", "violated" or "not_applicable"; offending cell addresses."""

    id: str
    verdict: str
    cells_in_region: int
    violating_cells: int
    first_violations: tuple[dict, ...] = ()

    def to_json(self) -> dict:
        return {"id": self.id, "verdict": self.verdict, "cells_in_region": self.cells_in_region,
                "violating_cells": self.violating_cells, "first_violations": list(self.first_violations)}


def check_lut_properties(spec: Spec, tokens: np.ndarray) -> list[LutPropertyResult]:
    """Check every forbid/require property on every LUT cell.

    Args:
        tokens: (2^address_bits,) proposed token per address.
    """
    out = []
    for p in spec.properties:
        if p.kind == "output":
            out.append(LutPropertyResult(p.id, Verdict.NOT_APPLICABLE, 0, 0))
            continue
        mask = np.ones(1, dtype=bool)
        ranges = {i: (a, b) for i, a, b in p.when}
        for i, inp in enumerate(spec.inputs):
            lv = levels_meeting(inp, *ranges.get(i, (inp.min, inp.max)))
            mask = (mask[:, None] & lv[None, :]).reshape(-1)
        addrs = np.nonzero(mask)[0]
        t = tokens[addrs]
        bad = np.isin(t, p.forbid) if p.kind == "forbid" else ~np.isin(t, p.require)
        viol = addrs[bad]
        first = tuple({"address": int(a), "token": spec.actions[int(tokens[a])].name} for a in viol[:10])
        out.append(LutPropertyResult(p.id, Verdict.VIOLATED if viol.size else Verdict.HOLDS, int(addrs.size), int(viol.size),
                                     first))
    return out
