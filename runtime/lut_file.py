"""The LUT's table format: one entry a byte, and ``lut.hex`` (docs/certificate.md). The one codec.

An entry is one byte per LUT address: the proposed token in bits 0-6, the confident bit in
bit 7 (:func:`pack_entry` / :func:`unpack_entry`). ``lut.hex`` holds the table one entry a
line, the address being the line number, each line two lowercase hex digits and a newline
(:func:`encode_lut_hex` / :func:`decode_lut_hex`). The table's SHA-256 (lut.json, the
manifest, the generated headers) is over the bytes, not the text.

Standard library only: it ships beside a generated controller (:mod:`.live` reads lut.hex
with it). :mod:`mi_certify.generator.core.lut` applies the same layout to whole numpy tables
(``table_bytes``, ``split_table``) with :data:`TOKEN_MASK` and :data:`CONFIDENT_SHIFT`.
"""

from __future__ import annotations

import re

__all__ = ["CONFIDENT_SHIFT", "MAX_ACTIONS", "TOKEN_MASK", "decode_lut_hex", "encode_lut_hex", "pack_entry",
           "split_entries", "unpack_entry"]

#: Bits 0-6 of an entry: the proposed token.
TOKEN_MASK = 0x7F
#: Position of the confident bit (bit 7).
CONFIDENT_SHIFT = 7
#: Tokens an entry can hold (0 .. 127).
MAX_ACTIONS = TOKEN_MASK + 1

_LUT_HEX = re.compile(r"(?:[0-9a-f]{2}\n)*")


def pack_entry(token: int, confident: bool) -> int:
    """The entry byte (0 .. 255) of ``token`` (0 .. 127) and ``confident``; raises ValueError
    for a token the entry cannot hold."""
    if not 0 <= int(token) <= TOKEN_MASK:
        raise ValueError(f"LUT token {token} does not fit bits 0-6 of an entry (0 .. {TOKEN_MASK})")
    return int(token) | (int(bool(confident)) << CONFIDENT_SHIFT)


def unpack_entry(entry: int) -> tuple[int, bool]:
    """(token, confident) of an entry byte: the inverse of :func:`pack_entry`; raises ValueError
    for a value that is not a byte."""
    if not 0 <= int(entry) <= 0xFF:
        raise ValueError(f"LUT entry {entry} is not a byte")
    return int(entry) & TOKEN_MASK, bool(int(entry) >> CONFIDENT_SHIFT)


def split_entries(table: bytes) -> tuple[list[int], list[bool]]:
    """(tokens, confident bits) of a table, one per address, as lists (what
    :class:`~mi_certify.runtime.fsm.LutFsm` takes)."""
    pairs = [unpack_entry(e) for e in bytes(table)]
    return [t for t, _ in pairs], [c for _, c in pairs]


def encode_lut_hex(table: bytes) -> str:
    """The text of lut.hex for ``table`` (one byte per address): one line per address, two
    lowercase hex digits and a newline each."""
    return "".join(f"{b:02x}\n" for b in bytes(table))


def decode_lut_hex(text: str) -> bytes:
    """The table (one byte per address) of lut.hex ``text``: the inverse of :func:`encode_lut_hex`.

    Raises ValueError naming the first line that is not two lowercase hex digits and a newline
    (so the text re-encodes to itself, byte for byte)."""
    if _LUT_HEX.fullmatch(text) is None:
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if re.fullmatch(r"[0-9a-f]{2}", line) is None and not (i == len(lines) - 1 and line == ""):
                raise ValueError(f"lut.hex line {i + 1}: {line[:20]!r} is not two lowercase hex digits")
        raise ValueError("lut.hex: the last line has no newline")
    return bytes.fromhex(text)
