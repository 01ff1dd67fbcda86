"""The ``sliced_rom`` LUT encoding of the generated Verilog (docs/hdl.md): entries dictionary-coded,
the address space cut into slices, each code bit of a slice a constant or a stored column; the
stored columns form one ROM read at the low address bits (:class:`SlicedRom`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from mi_certify.generator.build.verilog_parts import LutContext, LutLogic, rom_words

#: Most slice-select bits the ``sliced_rom`` encoding uses (at most 32 slices: a short multiplexer).
SLICE_SELECT_MAX = 5


@dataclass(frozen=True)
class SlicedRom:
    """The ``sliced_rom`` encoding of a LUT (docs/hdl.md).

    Entries are coded by their rank in ``dictionary`` (``code_bits`` bits). The address
    space is cut into ``2**(address_bits - low_bits)`` slices of ``2**low_bits`` cells
    (slice = ``addr >> low_bits``). Code bit ``b`` of slice ``s`` is ``select[s][b]``:
    ``("c", 0|1)`` (the same in every cell of the slice) or ``("m", i)``: stored column
    ``i``, an array of ``2**low_bits`` bits indexed by ``addr & (2**low_bits - 1)``;
    identical columns are stored once. The columns form the words of one ROM (bit ``i``
    of word ``a`` = column ``i`` at ``a``) read at ``addr[low_bits-1:0]``, a plain slice of
    the address, so a register in front of ``addr`` folds into block RAM read ports.
    """

    dictionary: tuple[int, ...]
    code_bits: int
    address_bits: int
    low_bits: int
    columns: tuple[np.ndarray, ...]
    select: tuple[tuple[tuple[str, int], ...], ...]

    @property
    def high_bits(self) -> int:
        return self.address_bits - self.low_bits

    def table(self) -> np.ndarray:
        """The entries at every address (int64, length 2**address_bits): the inverse of :func:`sliced_rom`."""
        n_low = 1 << self.low_bits
        codes = np.zeros((len(self.select), n_low), dtype=np.int64)
        for s, bits in enumerate(self.select):
            for b, (kind, x) in enumerate(bits):
                codes[s] |= (np.full(n_low, x, dtype=np.int64) if kind == "c" else self.columns[x].astype(np.int64)) << b
        return np.asarray(self.dictionary, dtype=np.int64)[codes.reshape(-1)]


def _ice40_brams(depth: int, width: int) -> int:
    """4 Kbit block RAMs (iCE40 SB_RAM40_4K: 256x16, 512x8, 1024x4, 2048x2) a depth x width ROM needs."""
    if width == 0:
        return 0
    per = 16 if depth <= 256 else 8 if depth <= 512 else 4 if depth <= 1024 else 2
    return -(-width // per) * max(1, -(-depth // 2048))


def sliced_rom(entries: np.ndarray, address_bits: int, low_bits: int | None = None) -> SlicedRom:
    """Dictionary-code ``entries`` (one per address) and slice them (:class:`SlicedRom`).

    ``low_bits`` None: the slicing with the fewest 4 Kbit block RAMs (:func:`_ice40_brams`
    of the stored columns), at most :data:`SLICE_SELECT_MAX` slice-select bits; ties go to
    more low bits (fewer slices, a shorter multiplexer). Sources: dictionary coding and
    constant/duplicate elimination as in ROM compression for FPGA look-up tables; the
    column sharing is Ashenhurst-Curtis decomposition restricted to a slice boundary.
    """
    values = tuple(int(x) for x in np.unique(entries))
    cw = max(1, (len(values) - 1).bit_length())
    codes = np.searchsorted(np.asarray(values), entries).astype(np.int64)

    def layout(lb: int) -> SlicedRom:
        cols: dict[bytes, int] = {}
        col_arrays: list[np.ndarray] = []
        select = []
        for sl in codes.reshape(1 << (address_bits - lb), 1 << lb):
            bits = []
            for b in range(cw):
                col = ((sl >> b) & 1).astype(np.uint8)
                if col.min() == col.max():
                    bits.append(("c", int(col[0])))
                    continue
                key = col.tobytes()
                if key not in cols:
                    cols[key] = len(col_arrays)
                    col_arrays.append(col)
                bits.append(("m", cols[key]))
            select.append(tuple(bits))
        return SlicedRom(values, cw, address_bits, lb, tuple(col_arrays), tuple(select))

    if low_bits is not None:
        return layout(low_bits)
    best = None
    for lb in range(address_bits, max(1, address_bits - SLICE_SELECT_MAX) - 1, -1):
        cand = layout(lb)
        cost = _ice40_brams(1 << lb, len(cand.columns))
        if best is None or cost < best[0]:
            best = (cost, cand)
    return best[1]


def split_select(sr: SlicedRom) -> dict:
    """The latency-3 and -4 form of a sliced ROM with slices (docs/hdl.md, "Latency"): the slice
    multiplexer cut in two register stages, so that no path from the block RAM's output
    crosses more than one 4-input LUT before a register (at latency 4 the decoded entry is
    registered once more, stage 3, before the decision stage).

    Code bit b is ``OR over slices s of sel_s & term(s, b)``. The slices are grouped per bit:
    one group of the slices where the bit is the constant 1, one group per stored column
    that gives the bit. Stage 1 registers, beside the block RAM read, one select per group
    (``lut_sel[g]``: the slice at ``addr`` is in group g; a function of the slice bits
    only). Stage 2 registers partial ORs of at most two group terms (``lut_sel[g]`` for the
    constant group, ``lut_sel[g] & lut_col[x]`` for a column: at most four signals, one
    LUT4). The decision stage ORs the partial ORs of each bit and decodes the code.

    Returns {"groups": [(bit, kind "c"|"m", column or None, slices)], "slice_sel":
    [(slice, select bits as a '0'/'1' string, MSB = last group)], "ors": [(bit, [term
    text])], "code": [Verilog expression per code bit, LSB first]}.
    """
    groups: list[tuple[int, str, int | None, list[int]]] = []
    for b in range(sr.code_bits):
        ones = [s for s, bits in enumerate(sr.select) if bits[b] == ("c", 1)]
        if ones:
            groups.append((b, "c", None, ones))
        by_col: dict[int, list[int]] = {}
        for s, bits in enumerate(sr.select):
            if bits[b][0] == "m":
                by_col.setdefault(bits[b][1], []).append(s)
        groups += [(b, "m", x, sl) for x, sl in sorted(by_col.items())]
    slice_sel = []
    for s in range(len(sr.select)):
        word = "".join("1" if s in g[3] else "0" for g in reversed(groups))
        slice_sel.append((s, word))
    ors: list[tuple[int, list[str]]] = []
    code = []
    for b in range(sr.code_bits):
        terms = [f"lut_sel[{g}]" if kind == "c" else f"(lut_sel[{g}] & lut_col[{x}])"
                 for g, (bit, kind, x, _) in enumerate(groups) if bit == b]
        first = len(ors)
        ors += [(b, terms[i:i + 2]) for i in range(0, len(terms), 2)]
        code.append(" | ".join(f"lut_or[{k}]" for k in range(first, len(ors))) or "1'b0")
    return {"groups": groups, "slice_sel": slice_sel, "ors": ors, "code": code}


def columns_hex(sr: SlicedRom) -> str:
    """The words of a sliced ROM as hex text: one word per line (line number = ROM address), bit i =
    column i ("" without columns)."""
    if not sr.columns:
        return ""
    digits = (len(sr.columns) + 3) // 4
    words = np.zeros(1 << sr.low_bits, dtype=object)
    for i, col in enumerate(sr.columns):
        words = words + (col.astype(object) << i)
    return "".join(f"{int(w):0{digits}x}\n" for w in words)


def _code(bits) -> str:
    """The Verilog expression of an entry's code in a slice: its constant bits and stored columns, MSB first."""
    terms = [f"1'b{x}" if kind == "c" else f"lut_col[{x}]" for kind, x in reversed(bits)]
    return terms[0] if len(terms) == 1 else "{" + ", ".join(terms) + "}"


def _vec(width: int) -> int | str:
    """The declared width of a signal the logic bit-selects (``lut_col[0]``, ``lut_sel[0]``): one bit is
    ``[0:0]``, a vector, since a select of a scalar is not Verilog (Verilator: "Illegal bit or array select")."""
    return "[0:0]" if width == 1 else width


def lut_logic(c: LutContext) -> LutLogic:
    """The sliced ROM of ``c``'s table; at latency 3 and 4 with slices, the slice multiplexer in two
    register stages (:func:`split_select`), at 4 decoded into ``c.lut_out`` (registered by the
    emitter, stage 3). At 3 and 4 the columns are read synchronously: at ``addr`` (stage 1), or
    without slices at latency 4 at ``addr_q1`` (stage 2)."""
    sr = sliced_rom(c.entries, c.spec.address_bits)
    split = split_select(sr) if c.latency >= 3 and sr.high_bits else None
    text = columns_hex(sr)
    variables = {
        "rom_sha256": hashlib.sha256(text.encode("ascii")).hexdigest(), "rom_words": rom_words(text),
        "sliced": {"dictionary": [(k, c.entry(e)) for k, e in enumerate(sr.dictionary)], "cw": sr.code_bits,
                   "lb": sr.low_bits, "hb": sr.high_bits, "ncols": len(sr.columns),
                   "slices": [(s, _code(bits)) for s, bits in enumerate(sr.select)],
                   "select_addr": "addr" if split else c.lut_addr},
        "col_sync": c.latency >= 3, "col_addr": "addr_q1" if c.latency == 4 and not split else "addr", "split": split}
    note = (f"sliced ROM: {len(sr.dictionary)} distinct entries coded in {sr.code_bits} bit"
            f"{'s' if sr.code_bits > 1 else ''}, {1 << sr.high_bits} slice{'s' if sr.high_bits else ''} of "
            f"{1 << sr.low_bits} cells, {len(sr.columns)} stored column{'s' if len(sr.columns) != 1 else ''} of "
            f"{1 << sr.low_bits} bits" + (f" read {'combinationally' if c.latency < 3 else 'synchronously'}, "
                                           "their words inline (initial values)" if sr.columns else ""))
    rows: list[tuple] = []
    if sr.columns:
        rows.append(("reg", _vec(len(sr.columns)), f"lut_cols [0:{(1 << sr.low_bits) - 1}]",
                     "the stored columns, one word per addr[%d:0]" % (sr.low_bits - 1)))
        rows.append(("reg" if c.latency >= 3 else "wire", _vec(len(sr.columns)), "lut_col",
                     "the columns at %s[%d:0]%s" % ("addr_q1" if c.latency == 4 and not split else "addr",
                                                    sr.low_bits - 1, {3: " (stage 1)", 4: " (stage 2)" if not split
                                                                       else " (stage 1)"}.get(c.latency, ""))))
    if split:
        rows += [("reg", _vec(len(split["groups"])), "lut_sel_d", "the selects of the slice at addr"),
                 ("reg", _vec(len(split["groups"])), "lut_sel", "the selects at addr (stage 1)"),
                 ("reg", _vec(len(split["ors"])), "lut_or", "partial ORs of the code bits (stage 2)")]
    rows.append(("reg" if sr.high_bits and not split else "wire", sr.code_bits, "lut_code", "the entry's code"))
    return LutLogic(note, "lut_entry" if split and c.latency == 3 else c.lut_out, rows, variables)
