"""The ``rom`` LUT encoding of the generated Verilog (docs/hdl.md): a flat ROM of one word
``{confident, token}`` per address, its contents inline in the Verilog (initial values); the
header comment gives the sha256 of the words as hex text (:func:`rom_hex`)."""

from __future__ import annotations

import hashlib

import numpy as np

from mi_certify.generator.build.verilog_parts import LutContext, LutLogic, rom_words


def rom_hex(entries: np.ndarray, token_bits: int) -> str:
    """One hex word per line (line number = address): the entries of :func:`.verilog_parts.lut_entries`."""
    digits = (token_bits + 1 + 3) // 4
    return "".join(f"{int(e):0{digits}x}\n" for e in entries)


def lut_logic(c: LutContext) -> LutLogic:
    """The flat ROM of ``c``'s table, read combinationally at latency 1 and synchronously at 2,
    3 and 4 (at 3 into ``lut_word``, stage 1; at 4 the read of ``addr_q1`` into ``lut_word``, stage 2)."""
    tw, n = c.tw, len(c.entries)
    text = rom_hex(c.entries, tw)
    sha = hashlib.sha256(text.encode("ascii")).hexdigest()
    note = (f"flat ROM of {n} x {tw + 1} bits read "
            f"{'combinationally' if c.latency == 1 else 'synchronously'}, its contents inline (initial values)")
    rows = [("reg", tw + 1, f"lut_rom [0:{n - 1}]", "the table, one word per address")]
    if c.latency >= 3:
        rows.append(("reg", tw + 1, "lut_word", "the ROM word read at addr (stage 1)" if c.latency == 3 else
                     "the ROM word read at addr_q1 (stage 2)"))
    return LutLogic(note, "lut_entry", rows, {"rom_sha256": sha, "rom_words": rom_words(text),
                                              "rom_addr": "addr_q1" if c.latency == 4 else "addr"})
