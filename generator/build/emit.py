"""Emitters: the LUT-FSM as a standalone Python module and as Verilog-2001.

Both are rendered from Jinja templates in ``mi_certify.templates`` (``python/``,
``verilog/``); the output is a pure function of the spec, the LUT and the source
hashes, so the same inputs give byte-identical files.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from mi_certify.runtime.fsm import REASON_BITS, Reason
from mi_certify.templates import environment

from mi_certify.generator.core.boxtree import Leaf, build_tree, tree_size
from mi_certify.generator.core.lut import Lut, LutFsmArtefact
from mi_certify.generator.core.spec import Spec

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


def split_select(sr: SlicedRom) -> dict:
    """The latency-3 form of a sliced ROM with slices (docs/hdl.md, "Latency"): the slice
    multiplexer cut in two register stages, so that no path from the block RAM's output
    crosses more than one 4-input LUT before a register.

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


def _tree_lines(node, fields: list[dict], entry, out: str) -> tuple[list[str], set[str]]:
    """Nested if/else lines (relative indentation) assigning ``out``; ``entry(e)`` formats an
    entry; the fields used."""
    lines: list[str] = []
    used: set[str] = set()

    def walk(nd, ind: str) -> None:
        if isinstance(nd, Leaf):
            lines.append(f"{ind}{out} = {entry(nd.entry)};")
            return
        fld = fields[nd.field]
        used.add(fld["name"])
        lines.append(f"{ind}if (q_{fld['name']} < {fld['bits']}'d{nd.threshold}) begin")
        walk(nd.below, ind + "  ")
        lines.append(f"{ind}end else begin")
        walk(nd.above, ind + "  ")
        lines.append(f"{ind}end")

    walk(node, "")
    return lines, used


def _range(width: int) -> str:
    return f"[{width - 1}:0]" if width > 1 else ""


def _decls(rows: list[tuple]) -> list[str]:
    """Aligned declarations: rows of (kind, width in bits, name[, comment]); width 1 has no range,
    a width given as a string is used as the range (``"[3:0]"``), the name may carry a memory
    range or an initialiser."""
    def rng(w):
        return w if isinstance(w, str) else _range(w)
    kw = max(len(r[0]) for r in rows)
    rw = max(len(rng(r[1])) for r in rows)
    nw = max(len(r[2]) for r in rows if len(r) > 3 and r[3]) if any(len(r) > 3 and r[3] for r in rows) else 0
    out = []
    for r in rows:
        head = f"{r[0]:<{kw}} {rng(r[1]):<{rw}} {r[2]};" if rw else f"{r[0]:<{kw}} {r[2]};"
        out.append(f"{head:<{len(head) - len(r[2]) + nw}}   // {r[3]}" if len(r) > 3 and r[3] else head)
    return out


def _assigns(pairs: list[tuple[str, str]], op: str = "<=") -> list[str]:
    """Aligned ``lhs <op> rhs;`` lines."""
    w = max(len(lhs) for lhs, _ in pairs)
    return [f"{lhs:<{w}} {op} {rhs};" for lhs, rhs in pairs]


#: Decision latencies of the generated Verilog (sla.yaml ``hdl.latency``; "auto" is resolved by the pipeline).
LATENCIES = (1, 2, 3)


def decision_inputs(latency: int) -> dict[str, str]:
    """Names of the signals the decision stage of the generated Verilog reads (docs/hdl.md,
    "Latency"): ``addr``, ``fault``, ``viol`` and ``valid`` (None at latency 1: every cycle is
    a decision). Latency L reads the stage L-1 pipeline registers ``addr_q<L-1>`` etc."""
    if latency == 1:
        return {"addr": "addr", "fault": "probe_fault", "viol": "sla_violation", "valid": None}
    k = latency - 1
    return {"addr": f"addr_q{k}", "fault": f"probe_fault_q{k}", "viol": f"sla_violation_q{k}", "valid": f"valid_q{k}"}


def emit_verilog(spec: Spec, machine: LutFsmArtefact, hashes: SourceHashes, version: str,
                 encoding: str | None = None, boxes: list[tuple[list[int], list[int]]] | None = None,
                 latency: int | None = None, target_measured: dict | None = None) -> str:
    """Source text of ``<name>.v`` (Verilog-2001; options from ``spec.hdl``, docs/hdl.md) for
    ``machine`` (table, allowed-action boxes of rule 3a).

    encoding: "case" | "rom" | "boxtree" | "sliced_rom" (default ``spec.hdl.encoding``; "auto"
    must be resolved by the caller). case: only entries that differ from the most common
    entry are listed, the ``default`` arm holds that one. rom, sliced_rom: the design reads
    :func:`rom_file_name` (write :func:`emit_rom_hex` beside it; sliced_rom: see
    :func:`sliced_rom`). boxtree: comparators
    on the quantized fields, built from ``boxes`` (the distillation partition: inclusive
    level ranges) by :func:`mi_certify.generator.core.boxtree.build_tree`. A LUT of one entry is a
    continuous assignment with every encoding but rom.

    latency: decision latency in clock cycles, 1 | 2 | 3 (default ``spec.hdl.latency``; "auto"
    is resolved by the caller, and until it is, it means 1): latency L delays addr,
    probe_fault and sla_violation together through L-1 register stages and registers the LUT
    read (docs/hdl.md, "Latency"; a sliced ROM with slices at latency 3: :func:`split_select`).
    Raises ValueError on an unknown encoding or latency.

    target_measured: the declared target's verdict measured on this design before it was written
    (a ``target`` record of :func:`mi_certify.verification.rtl.synth.target_verdict`; the build's emit
    stage records it as ``target_header``); the header states the declared target
    (:meth:`mi_certify.generator.core.spec.HdlTarget.header_lines`) and, with it, whether it was met.
    The header has the same number of lines with or without it (the netlist, whose source
    locations name lines, stays the same).
    """
    encoding = encoding or spec.hdl.encoding
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown LUT encoding {encoding!r} (one of {', '.join(ENCODINGS)})")
    if latency is None:
        latency = spec.hdl.latency_cycles  # "auto" is resolved upstream; until it is, 1
    if latency not in LATENCIES:
        raise ValueError(f"unknown decision latency {latency!r} (one of {', '.join(map(str, LATENCIES))})")
    tw = spec.token_bits
    ab = spec.address_bits

    def entry(e: int) -> str:
        return f"{{1'b{int(e) >> tw}, {tw}'d{int(e) & ((1 << tw) - 1)}}}"

    entries = lut_entries(spec, machine)
    masks = list(machine.masks)
    values, counts = np.unique(entries, return_counts=True)
    default = int(values[int(np.argmax(counts))])
    const = len(values) == 1 and encoding != "rom"
    cases = ([(int(a), entry(entries[a])) for a in np.nonzero(entries != default)[0]]
             if encoding == "case" and not const else [])
    fields, msb = [], ab - 1
    for inp in spec.inputs:
        fields.append({"name": inp.name, "unit": inp.unit, "bits": inp.bits, "min": inp.min, "max": inp.max,
                       "msb": msb, "lsb": msb - inp.bits + 1})
        msb -= inp.bits
    d = decision_inputs(latency)
    # the address the LUT logic reads: at latency 3 the inputs are registered first (stage 1), the
    # LUT logic is a register-to-register path into lut_entry (stage 2); the ROM read itself is the
    # synchronous stage-1 read of addr
    lut_addr = "addr_q1" if latency == 3 else "addr"
    lut_out = "lut_entry" if latency == 1 else "lut_read"
    extra: dict = {"rom_file": rom_file_name(spec), "rom_sha256": "", "tree_lines": [], "tree_comparators": 0,
                   "tree_leaves": 0, "sliced": None, "tree_field_decls": [], "col_sync": False, "split": None}
    lut_decls: list[tuple] = []
    entry_kind = "wire" if const else "reg"
    if const:
        note = "one entry for every address (a continuous assignment)"
    elif encoding == "case":
        note = f"case statement ({len(cases)} entries listed, the other {len(entries) - len(cases)} in the default arm)"
    elif encoding == "rom":
        extra["rom_sha256"] = hashlib.sha256(emit_rom_hex(spec, machine).encode("ascii")).hexdigest()
        note = (f"flat ROM of {len(entries)} x {tw + 1} bits read "
                f"{'combinationally' if latency == 1 else 'synchronously'} from {rom_file_name(spec)} ($readmemh)")
        lut_decls.append(("reg", tw + 1, f"lut_rom [0:{len(entries) - 1}]", "the table, one word per address"))
        if latency == 3:
            lut_decls.append(("reg", tw + 1, "lut_word", "the ROM word read at addr (stage 1)"))
        lut_out = "lut_entry"
    elif encoding == "sliced_rom":
        sr = sliced_rom(entries, ab)
        extra["rom_sha256"] = hashlib.sha256(_columns_hex(sr).encode("ascii")).hexdigest()

        def code(bits):
            terms = [f"1'b{x}" if kind == "c" else f"lut_col[{x}]" for kind, x in reversed(bits)]
            return terms[0] if len(terms) == 1 else "{" + ", ".join(terms) + "}"
        split = split_select(sr) if latency == 3 and sr.high_bits else None
        extra["sliced"] = {"dictionary": [(k, entry(e)) for k, e in enumerate(sr.dictionary)], "cw": sr.code_bits,
                           "lb": sr.low_bits, "hb": sr.high_bits, "ncols": len(sr.columns),
                           "slices": [(s, code(bits)) for s, bits in enumerate(sr.select)],
                           "select_addr": "addr" if split else lut_addr}
        extra["col_sync"] = latency == 3
        extra["split"] = split
        note = (f"sliced ROM: {len(sr.dictionary)} distinct entries coded in {sr.code_bits} bit"
                f"{'s' if sr.code_bits > 1 else ''}, {1 << sr.high_bits} slice{'s' if sr.high_bits else ''} of "
                f"{1 << sr.low_bits} cells, {len(sr.columns)} stored column{'s' if len(sr.columns) != 1 else ''} of "
                f"{1 << sr.low_bits} bits" + (f" read {'combinationally' if latency < 3 else 'synchronously'} from "
                                               f"{rom_file_name(spec)} ($readmemh)" if sr.columns else ""))
        if sr.columns:
            lut_decls.append(("reg", len(sr.columns), f"lut_cols [0:{(1 << sr.low_bits) - 1}]",
                              "the stored columns, one word per addr[%d:0]" % (sr.low_bits - 1)))
            lut_decls.append(("reg" if latency == 3 else "wire", len(sr.columns), "lut_col",
                              "the columns at addr[%d:0]%s" % (sr.low_bits - 1, " (stage 1)" if latency == 3 else "")))
        if split:
            lut_decls += [("reg", len(split["groups"]), "lut_sel_d", "the selects of the slice at addr"),
                          ("reg", len(split["groups"]), "lut_sel", "the selects at addr (stage 1)"),
                          ("reg", len(split["ors"]), "lut_or", "partial ORs of the code bits (stage 2)")]
            lut_out = "lut_entry"
        lut_decls.append(("reg" if sr.high_bits and not split else "wire", sr.code_bits, "lut_code",
                          "the entry's code"))
    else:
        root = build_tree(entries, [f["bits"] for f in fields], boxes)
        comparators, leaves = tree_size(root)
        lines, used = _tree_lines(root, fields, entry, lut_out)
        extra.update(tree_lines=lines, tree_comparators=comparators, tree_leaves=leaves)
        tree_fields = [f for f in fields if f["name"] in used]
        rows = [("wire", f["bits"], f"q_{f['name']}") for f in tree_fields]
        extra["tree_field_decls"] = [ln for ln in _decls(rows)] if rows else []
        extra["tree_field_decls"] = [ln[:-1] + f" = {lut_addr}[{f['msb']}:{f['lsb']}];" if f["msb"] > f["lsb"] else
                                     ln[:-1] + f" = {lut_addr}[{f['msb']}];"
                                     for ln, f in zip(extra["tree_field_decls"], tree_fields)]
        note = (f"box tree of {comparators} comparators and {leaves} leaves on the quantized input fields "
                f"(from the {'distillation partition' if boxes else 'grid'})")
    if latency > 1 and not const and lut_out == "lut_read":
        lut_decls.append(("reg", tw + 1, "lut_read", "the LUT logic's entry, registered into lut_entry"))
    # what the register in front of the decision stage loads (None: no such register)
    lut_reg_src = (None if const or latency == 1 or (encoding == "rom" and latency == 2) or extra.get("split") else
                   "lut_word" if encoding == "rom" else "lut_read")
    stage = ("" if latency == 1 else " (decoded from the stage-2 partial ORs)" if extra.get("split") else
             f" (registered: stage {latency - 1})")
    lut_decls += [(entry_kind, tw + 1, "lut_entry", "{confident, proposed token}" + stage),
                  ("wire", tw, "lut_p", "proposed token p"), ("wire", 1, "lut_c", "confident bit c")]
    if latency > 1:
        note += f"; the read registered{' twice' if latency == 3 else ''} (latency {latency})"
    # the cells of each mask box: comparators on the decision stage's address fields (full ranges omitted)
    n_act, full = len(spec.actions), 1 << tw
    mask_rows, factors = [], []
    for j, m in enumerate(masks):
        terms = []
        for fld, lo, hi in zip(fields, m.lo, m.hi):
            sl = f"{d['addr']}[{fld['msb']}:{fld['lsb']}]" if fld["msb"] > fld["lsb"] else f"{d['addr']}[{fld['msb']}]"
            if lo > 0:
                terms.append(f"({sl} >= {fld['bits']}'d{lo})")
            if hi < (1 << fld["bits"]) - 1:
                terms.append(f"({sl} <= {fld['bits']}'d{hi})")
        bits = format(m.allowed, f"0{n_act}b").rjust(full, "0")
        if terms:
            mask_rows.append(("wire", 1, f"in_{j} = {' && '.join(terms)}", m.id))
            factors.append(f"(in_{j} ? {full}'b{bits} : {full}'b{'1' * full})")
        else:   # the property's region is the whole envelope
            factors.append(f"{full}'b{bits}")
    if n_act < full:   # tokens no action has are never allowed
        factors.insert(0, f"{full}'b{'1' * n_act:0>{full}}")
    mask_lines = []
    if masks:
        mask_lines = _decls(mask_rows + [("wire", full, "allowed = " + factors[0])])
        head = mask_lines[-1][:-len(factors[0]) - 1]
        mask_lines[-1] = mask_lines[-1][:-1]
        mask_lines += [" " * (len(head) - 2) + "& " + fac for fac in factors[1:]]
        mask_lines[-1] += ";"
    f = spec.fsm
    hw, dw, vw, rw = (_width(f.hysteresis - 1), _width(f.cooldown), _width(f.violations_to_fallback - 1),
                      _width(f.recovery - 1))
    params = [("CONSERVATIVE", tw, spec.conservative)]
    if f.hysteresis > 1:
        params.append(("HYST_LAST", hw, f.hysteresis - 1))
    params += [("COOLDOWN", dw, f.cooldown), ("VIOL_LAST", vw, f.violations_to_fallback - 1),
               ("RECOV_LAST", rw, f.recovery - 1)]

    def localparams(rows):
        r = max(len(f"[{w - 1}:0]") for _, w, _ in rows)
        n = max(len(name) for name, _, _ in rows)
        return [f"localparam {f'[{w - 1}:0]':<{r}} {name:<{n}} = {w}'d{v};" for name, w, v in rows]
    reasons = [r.name for r in Reason]
    state = [("reg", tw, "cand", "candidate k"),
             ("reg", hw, "hcnt", f"hysteresis count h, 0..{f.hysteresis - 1}"),
             ("reg", dw, "dcnt", f"cooldown count d, 0..{f.cooldown}"),
             ("reg", vw, "vcnt", f"consecutive SLA violations v, 0..{f.violations_to_fallback - 1}"),
             ("reg", 1, "fb", "fallback flag f"),
             ("reg", rw, "rcnt", f"consecutive compliant steps in fallback r, 0..{f.recovery - 1}")]
    pipe_rows, pipe_data = [], []
    for k in range(1, latency):
        src = ("addr", "probe_fault", "sla_violation") if k == 1 else (f"addr_q{k - 1}", f"probe_fault_q{k - 1}",
                                                                       f"sla_violation_q{k - 1}")
        pipe_rows += [("reg", ab, f"addr_q{k}", f"addr sampled {k} cycle{'s' if k > 1 else ''} ago"),
                      ("reg", 1, f"probe_fault_q{k}", None), ("reg", 1, f"sla_violation_q{k}", None),
                      ("reg", 1, f"valid_q{k}", "no reset in the last " + ("cycle" if k == 1 else f"{k} cycles"))]
        pipe_data += [(f"addr_q{k}", src[0]), (f"probe_fault_q{k}", src[1]), (f"sla_violation_q{k}", src[2])]
    nxt = [("reg", tw, "n_token"), ("reg", tw, "n_cand"), ("reg", hw, "n_hcnt"), ("reg", dw, "n_dcnt"),
           ("reg", vw, "n_vcnt"), ("reg", 1, "n_fb"), ("reg", rw, "n_rcnt"), ("reg", REASON_BITS, "n_reason")]
    regs = ["token", "cand", "hcnt", "dcnt", "vcnt", "fb", "rcnt", "reason"]
    reset_vals = ["CONSERVATIVE", "CONSERVATIVE", f"{hw}'d0", f"{dw}'d0", f"{vw}'d0", "1'b0", f"{rw}'d0", "R_HOLD"]
    reg_reset = _assigns(list(zip(regs, reset_vals)) + [("audit_valid", "1'b0"), ("audit_addr", f"{ab}'d0")])
    reg_next = _assigns([(r, f"n_{r}") for r in regs] + [("audit_valid", "1'b1"), ("audit_addr", d["addr"])])
    def render(unused_reasons):
        return template.render(unused_reasons=unused_reasons, **variables)
    template = environment().get_template("verilog/fsm.v.j2")
    variables = dict(
        lut_cases=cases, lut_default=entry(default), lut_const=entry(default) if const else None, addr_fields=fields,
        tw=tw, hw=hw, dw=dw, vw=vw, rw=rw, encoding=encoding, encoding_note=note, hdl=spec.hdl, latency=latency,
        target_lines=(spec.hdl.declared_target.header_lines(target_measured)
                      if spec.hdl.declared_target is not None else []),
        d=d, lut_addr=lut_addr, lut_out=lut_out, lut_reg_src=lut_reg_src, lut_decls=_decls(lut_decls), mask_lines=mask_lines,
        aligned_params=localparams(params),
        reason_params=localparams([(f"R_{r}", REASON_BITS, i) for i, r in enumerate(reasons)]),
        state_decls=_decls(state), pipe_decls=_decls(pipe_rows) if pipe_rows else [],
        pipe_data=_assigns(pipe_data) if pipe_data else [], next_decls=_decls(nxt), reg_reset=reg_reset,
        reg_next=reg_next, reset_active="rst" if spec.hdl.reset_polarity == "high" else "!rst_n",
        **extra, **_common(spec, machine, hashes, version))
    text = render([])
    # a reason code this configuration never produces (PENDING with hysteresis 1, MASKED without a
    # property mask): declared with the others, and said so (Verilator -Wall: UNUSEDPARAM)
    unused = [f"R_{r}" for r in reasons if len(re.findall(rf"\bR_{r}\b", text)) == 1]
    return render(unused) if unused else text
