"""The ``case`` LUT encoding of the generated Verilog (docs/hdl.md): a case statement listing only
the entries that differ from the most common one; the ``default`` arm holds that one."""

from __future__ import annotations

import numpy as np

from mi_certify.generator.build.verilog_parts import LutContext, LutLogic


def lut_logic(c: LutContext) -> LutLogic:
    """The case statement of ``c``'s table: (address, entry literal) of every entry other than
    ``c.default``, in address order."""
    cases = [(int(a), c.entry(c.entries[a])) for a in np.nonzero(c.entries != c.default)[0]]
    note = f"case statement ({len(cases)} entries listed, the other {len(c.entries) - len(cases)} in the default arm)"
    return LutLogic(note, c.lut_out, variables={"lut_cases": cases})
