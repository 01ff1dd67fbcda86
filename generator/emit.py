"""Emitters: the LUT-FSM as a standalone Python module and as Verilog-2001.

Both are rendered from Jinja templates in ``mi_certify.templates`` (``python/``,
``verilog/``); the output is a pure function of the spec, the LUT and the source
hashes, so the same inputs give byte-identical files.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from mi_certify.runtime.fsm import REASON_BITS, Reason
from mi_certify.templates import environment

from .boxtree import Leaf, build_tree, tree_size
from .lut import Lut, LutFsmArtefact
from .spec import Spec

#: LUT encodings of the generated Verilog (sla.yaml ``hdl.encoding``; "auto" is resolved by the pipeline).
ENCODINGS = ("case", "rom", "boxtree", "sliced_rom")

#: Most slice-select bits the ``sliced_rom`` encoding uses (at most 32 slices: a short multiplexer).
SLICE_SELECT_MAX = 5


@dataclass(frozen=True)
class SourceHashes:
    """sha256 hex digests of the model, the spec and the LUT bytes."""

    model: str
    spec: str
    lut: str


def _common(spec: Spec, machine: LutFsmArtefact, hashes: SourceHashes, version: str) -> dict:
    masks = list(machine.masks)
    return {"spec": spec, "hashes": hashes, "version": version, "counts": machine.lut.counts(),
            "reasons": [r.name for r in Reason], "reason_bits": REASON_BITS, "masks": masks,
            "mask_bits": [format(m.allowed, f"0{len(spec.actions)}b") for m in masks]}


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


def _level_tree(k: int, thresholds: tuple[float, ...], first: int, last: int, indent: str) -> list[str]:
    """Lines of a straight-line binary search: ``q<k>`` = the level of ``x<k>`` among
    levels first..last, by comparisons with the float thresholds (exact, see
    :func:`level_thresholds`)."""
    if first == last:
        return [f"{indent}q{k} = {first}"]
    mid = (first + last + 1) // 2
    deeper = indent + "    "
    return ([f"{indent}if x{k} < {thresholds[mid - 1]!r}:"] + _level_tree(k, thresholds, first, mid - 1, deeper)
            + [f"{indent}else:"] + _level_tree(k, thresholds, mid, last, deeper))


def emit_python(spec: Spec, machine: LutFsmArtefact, hashes: SourceHashes, version: str) -> str:
    """Source text of ``<name>.py`` (stdlib only, integer LUT-FSM) for ``machine``: its table, its
    allowed-action boxes (rule 3a of docs/fsm.md), its FSM parameters from ``spec``."""
    hexs = machine.table.hex()
    lines = [hexs[i:i + 96] for i in range(0, len(hexs), 96)]
    trees = [_level_tree(k, level_thresholds(i.min, i.max, i.bits), 0, (1 << i.bits) - 1, "")
             for k, i in enumerate(spec.inputs)]
    return environment().get_template("python/runtime.py.j2").render(
        lut_hex=lines, level_trees=trees, **_common(spec, machine, hashes, version))


def _width(max_value: int) -> int:
    return max(1, int(max_value).bit_length())


def lut_entries(spec: Spec, lut: Lut | LutFsmArtefact) -> np.ndarray:
    """The RTL's LUT entries by address: ``{confident, token}`` (token_bits + 1 bits), int64."""
    return lut.tokens.astype(np.int64) | (lut.confident.astype(np.int64) << spec.token_bits)


def rom_file_name(spec: Spec) -> str:
    """File the ``rom`` and ``sliced_rom`` encodings read with ``$readmemh``: ``<module>_rom.hex``, beside the ``.v``."""
    return f"{spec.module_name}_rom.hex"


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


def _columns_hex(sr: SlicedRom) -> str:
    """The ROM file of a sliced ROM: one word per ROM address, bit i = column i ("" without columns)."""
    if not sr.columns:
        return ""
    digits = (len(sr.columns) + 3) // 4
    words = np.zeros(1 << sr.low_bits, dtype=object)
    for i, col in enumerate(sr.columns):
        words = words + (col.astype(object) << i)
    return "".join(f"{int(w):0{digits}x}\n" for w in words)


def emit_rom_hex(spec: Spec, lut: Lut | LutFsmArtefact, encoding: str = "rom") -> str:
    """Contents of :func:`rom_file_name`: one hex word per line (line number = ROM address).
    ``rom``: the entry ``{confident, token}`` of :func:`lut_entries` at every address;
    ``sliced_rom``: the stored columns of :func:`sliced_rom` (bit i = column i), empty
    when no column is stored (no ROM then)."""
    if encoding == "sliced_rom":
        return _columns_hex(sliced_rom(lut_entries(spec, lut), spec.address_bits))
    digits = (spec.token_bits + 1 + 3) // 4
    return "".join(f"{int(e):0{digits}x}\n" for e in lut_entries(spec, lut))


def _tree_lines(node, fields: list[dict], ew: int) -> tuple[list[str], set[str]]:
    """Nested if/else lines (relative indentation) assigning lut_entry; the fields used."""
    lines: list[str] = []
    used: set[str] = set()

    def walk(nd, ind: str, prefix: str = "") -> None:
        if isinstance(nd, Leaf):
            lines.append(f"{ind}{prefix}lut_entry = {ew}'d{nd.entry};")
            return
        fld = fields[nd.field]
        used.add(fld["name"])
        lines.append(f"{ind}{prefix}if (q_{fld['name']} < {fld['bits']}'d{nd.threshold}) begin")
        walk(nd.below, ind + "  ")
        if isinstance(nd.above, Leaf):
            lines.append(f"{ind}end else begin")
            walk(nd.above, ind + "  ")
            lines.append(f"{ind}end")
        else:
            lines.append(f"{ind}end else begin")
            walk(nd.above, ind + "  ")
            lines.append(f"{ind}end")

    walk(node, "")
    return lines, used


def emit_verilog(spec: Spec, machine: LutFsmArtefact, hashes: SourceHashes, version: str,
                 encoding: str | None = None, boxes: list[tuple[list[int], list[int]]] | None = None) -> str:
    """Source text of ``<name>.v`` (Verilog-2001; options from ``spec.hdl``, docs/hdl.md) for
    ``machine`` (table, allowed-action boxes of rule 3a).

    encoding: "case" | "rom" | "boxtree" | "sliced_rom" (default ``spec.hdl.encoding``; "auto"
    must be resolved by the caller). case: only entries that differ from the most common
    entry are listed, the ``default`` arm holds that one. rom, sliced_rom: the design reads
    :func:`rom_file_name` (write :func:`emit_rom_hex` beside it; sliced_rom: see
    :func:`sliced_rom`). boxtree: comparators
    on the quantized fields, built from ``boxes`` (the distillation partition: inclusive
    level ranges) by :func:`mi_certify.generator.boxtree.build_tree`. Raises ValueError
    on an unknown encoding.
    """
    encoding = encoding or spec.hdl.encoding
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown LUT encoding {encoding!r} (one of {', '.join(ENCODINGS)})")
    tw = spec.token_bits
    entries = lut_entries(spec, machine)
    masks = list(machine.masks)
    values, counts = np.unique(entries, return_counts=True)
    default = int(values[int(np.argmax(counts))])
    cases = [(int(a), int(entries[a])) for a in np.nonzero(entries != default)[0]] if encoding == "case" else []
    fields, msb = [], spec.address_bits - 1
    for inp in spec.inputs:
        fields.append({"name": inp.name, "unit": inp.unit, "bits": inp.bits, "min": inp.min, "max": inp.max,
                       "msb": msb, "lsb": msb - inp.bits + 1})
        msb -= inp.bits
    extra: dict = {"rom_file": rom_file_name(spec), "rom_sha256": "", "tree_lines": [], "tree_comparators": 0,
                   "tree_leaves": 0, "sliced": None}
    tree_fields = fields
    if encoding == "case":
        note = f"case statement ({len(cases)} entries listed, the other {len(entries) - len(cases)} in the default arm)"
    elif encoding == "rom":
        extra["rom_sha256"] = hashlib.sha256(emit_rom_hex(spec, machine).encode("ascii")).hexdigest()
        note = (f"flat ROM of {len(entries)} x {tw + 1} bits read combinationally from {rom_file_name(spec)} "
                "($readmemh)")
    elif encoding == "sliced_rom":
        sr = sliced_rom(entries, spec.address_bits)
        extra["rom_sha256"] = hashlib.sha256(_columns_hex(sr).encode("ascii")).hexdigest()

        def code(bits):
            terms = [f"1'b{x}" if kind == "c" else f"lut_col[{x}]" for kind, x in reversed(bits)]
            return terms[0] if len(terms) == 1 else "{" + ", ".join(terms) + "}"
        extra["sliced"] = {"dictionary": list(enumerate(sr.dictionary)), "cw": sr.code_bits, "lb": sr.low_bits,
                           "hb": sr.high_bits, "ncols": len(sr.columns),
                           "slices": [(s, code(bits)) for s, bits in enumerate(sr.select)]}
        note = ("sliced ROM: every cell holds the same entry (no ROM)" if len(sr.dictionary) == 1 else
                f"sliced ROM: {len(sr.dictionary)} distinct entries coded in {sr.code_bits} bit"
                f"{'s' if sr.code_bits > 1 else ''}, {1 << sr.high_bits} slice{'s' if sr.high_bits else ''} of "
                f"{1 << sr.low_bits} cells, {len(sr.columns)} stored column{'s' if len(sr.columns) != 1 else ''} of "
                f"{1 << sr.low_bits} bits" + (f" read combinationally from {rom_file_name(spec)} ($readmemh)"
                                               if sr.columns else ""))
    else:
        root = build_tree(entries, [f["bits"] for f in fields], boxes)
        comparators, leaves = tree_size(root)
        lines, used = _tree_lines(root, fields, tw + 1)
        extra.update(tree_lines=lines, tree_comparators=comparators, tree_leaves=leaves)
        tree_fields = [f for f in fields if f["name"] in used]
        note = (f"box tree of {comparators} comparators and {leaves} leaves on the quantized input fields "
                f"(from the {'distillation partition' if boxes else 'grid'})")
    # the cells of each mask box: comparators on the address fields (full ranges omitted)
    mask_terms = []
    for m in masks:
        terms = []
        for fld, lo, hi in zip(fields, m.lo, m.hi):
            sl = f"addr[{fld['msb']}:{fld['lsb']}]" if fld["msb"] > fld["lsb"] else f"addr[{fld['msb']}]"
            if lo > 0:
                terms.append(f"({sl} >= {fld['bits']}'d{lo})")
            if hi < (1 << fld["bits"]) - 1:
                terms.append(f"({sl} <= {fld['bits']}'d{hi})")
        mask_terms.append(" && ".join(terms) or "1'b1")
    f = spec.fsm
    return environment().get_template("verilog/fsm.v.j2").render(
        lut_cases=cases, lut_default=default, addr_fields=fields, tw=tw, mask_terms=mask_terms,
        hw=_width(f.hysteresis - 1), dw=_width(f.cooldown), vw=_width(f.violations_to_fallback - 1),
        rw=_width(f.recovery - 1), encoding=encoding, encoding_note=note, hdl=spec.hdl, tree_fields=tree_fields,
        **extra, **_common(spec, machine, hashes, version))
