"""Tables group of ``mi-certify check``: every copy of the LUT against lut.hex, and its properties.

Re-derives from lut.hex: lut.json's sha256, token histogram, confident-cell count and
cell status (against the distillation boxes'); the table the Verilog holds, read back
without Yosys from whichever encoding the emitter chose (case items, ``$readmemh``
ROM, sliced ROM, box tree: :func:`verilog_table`); the Python runtime's ``_LUT``
literal, parsed and not executed (all independent). Then the sla.yaml properties are
checked again on every cell of lut.hex and compared with lut_properties.json (same
code).
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

import numpy as np

from .check_common import FAIL, CheckFailed, Checker, CheckContext, cell_status, require


def check_tables(c: Checker, ev: CheckContext) -> None:
    """Items ``lut.tables: lut.json = lut.hex``, ``lut.tables: <module>.v table = lut.hex`` and
    ``lut.tables: <name>.py table = lut.hex``; one FAIL without lut.hex."""
    lut, spec = ev.lut, ev.spec
    if lut is None:
        c.add("lut.tables", FAIL, "integrity", "no lut.hex in the bundle")
        return
    c.run("lut.tables: lut.json = lut.hex", "independent", lambda: _lut_json(c, ev))
    c.run(f"lut.tables: {spec.module_name}.v table = lut.hex", "independent", lambda: _verilog(c, ev))
    c.run(f"lut.tables: {spec.name}.py table = lut.hex", "independent", lambda: _python(c, ev))


def _lut_json(c: Checker, ev: CheckContext) -> str:
    lut, spec = ev.lut, ev.spec
    j = c.read_json("lut.json")
    require(j["sha256"] == hashlib.sha256(lut.tobytes()).hexdigest(), "lut.json sha256 is not lut.hex's")
    require(j["confident_cells"] == int(np.sum(lut >> 7)), "confident cell count differs")
    hist = np.bincount(lut & 0x7F, minlength=len(spec.actions))
    require(j["tokens"] == {a.name: int(hist[i]) for i, a in enumerate(spec.actions)}, "token histogram differs")
    if ev.box_status is not None:
        require(np.array_equal(cell_status(j, lut.size), ev.box_status),
                "cell_status differs from the distillation boxes")
    return "sha256, histogram, confident cells and cell status agree with lut.hex"


def _verilog(c: Checker, ev: CheckContext) -> str:
    spec = ev.spec
    text = (c.d / f"{spec.module_name}.v").read_text(encoding="utf-8")
    table, how = verilog_table(c.d, spec, text)
    tw = spec.token_bits
    # Verilog entry = {confident, token}: token in the low tw bits
    as_bytes = (table & ((1 << tw) - 1)) | ((table >> tw) & 1) << 7
    bad = np.nonzero(as_bytes != ev.lut)[0]
    require(bad.size == 0, f"{bad.size} Verilog LUT entries differ from lut.hex, first at {bad[:1].tolist()}")
    return f"{how} = lut.hex"


def _python(c: Checker, ev: CheckContext) -> str:
    tree = ast.parse((c.d / f"{ev.spec.name}.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LUT" for t in node.targets):
            call = node.value
            require(isinstance(call, ast.Call) and len(call.args) == 1, "_LUT is not bytes.fromhex(<literal>)")
            table = bytes.fromhex(ast.literal_eval(call.args[0]))
            require(table == ev.lut.tobytes(), "the Python runtime's _LUT differs from lut.hex")
            return f"{len(table)} bytes = lut.hex (parsed, not executed)"
    raise CheckFailed("no _LUT table in the Python runtime")


def check_properties(c: Checker, ev: CheckContext) -> None:
    """Item ``lut properties re-checked on every cell``: lut_properties.json's verdicts made again."""
    def run():
        from mi_certify.verification.lut_check import check_lut_properties
        again = [r.to_json() for r in check_lut_properties(ev.spec, ev.lut_hex() & 0x7F)]
        require(again == c.read_json("lut_properties.json")["properties"], "re-checked LUT properties differ from "
                                                                          "lut_properties.json")
        return ", ".join(f"{r['id']} {r['verdict']}" for r in again) or "no properties"
    c.run("lut properties re-checked on every cell", "same code", run)


def verilog_table(d: Path, spec, text: str) -> tuple[np.ndarray, str]:
    """The LUT entries the Verilog ``text`` holds, read without Yosys.

    Returns (entries, how): entries (2**address_bits,) int64, each ``{confident, token}``
    (token in the low ``token_bits``); how says which encoding was read: a constant,
    case items + default, the ROM file of ``$readmemh`` (read from ``d``), the sliced ROM
    (:func:`_sliced_table`), or the box tree's nested if/else run at every address.
    Raises CheckFailed when no encoding is recognised or one is malformed.
    """
    n = 1 << spec.address_bits
    cases = re.findall(rf"^\s*{spec.address_bits}'d(\d+): lut_entry = \d+'d(\d+);", text, re.M)
    default = re.findall(r"^\s*default: lut_entry = \d+'d(\d+);", text, re.M)
    rom = re.findall(r'^\s*initial \$readmemh\("([A-Za-z0-9_.]+)", lut_rom\);', text, re.M)
    tree = re.search(r"^    always @\(\*\) begin\n(\s+if \(q_.*?)^    end$", text, re.M | re.S)
    const = re.findall(r"^\s*wire \[\d+:0\] lut_entry = \d+'d(\d+);$", text, re.M)
    if len(const) == 1:
        return np.full(n, int(const[0]), dtype=np.int64), "one entry for every address (continuous assignment)"
    if re.search(r"^\s*(?:reg|wire) \[\d+:0\] lut_code\b", text, re.M):
        return _sliced_table(d, spec, text)
    if len(default) == 1 and re.search(r"^\s*case \(addr\)$", text, re.M):
        table = np.full(n, int(default[0]), dtype=np.int64)
        for a, e in cases:
            table[int(a)] = int(e)
        return table, f"{len(cases)} case items + default"
    if len(rom) == 1:
        words = (d / rom[0]).read_text(encoding="ascii").split()
        require(len(words) == n, f"{rom[0]} holds {len(words)} words, the address space {n}")
        return np.array([int(w, 16) for w in words], dtype=np.int64), f"ROM {rom[0]} ({n} words)"
    require(tree is not None, "no LUT (case table, ROM or box tree) found in the Verilog")
    return _box_tree_table(text, tree.group(1), n), "box tree run at every address"


def _box_tree_table(text: str, tree: str, n: int) -> np.ndarray:
    """The box tree (nested ``if (q_<field> < K) begin ... end else begin ... end``) run at every address."""
    fields = dict(re.findall(r"^\s*wire \[\d+:0\] q_(\w+) = addr\[(\d+:\d+)\];", text, re.M))
    addrs = np.arange(n, dtype=np.int64)
    table = np.full(n, -1, dtype=np.int64)
    stack = [np.ones(n, dtype=bool)]  # addresses reaching the current branch
    conds: list[np.ndarray] = []
    for line in tree.splitlines():
        line = line.strip()
        m = re.fullmatch(r"if \(q_(\w+) < \d+'d(\d+)\) begin", line)
        if m:
            hi, lo = map(int, fields[m.group(1)].split(":"))
            cond = ((addrs >> lo) & ((1 << (hi - lo + 1)) - 1)) < int(m.group(2))
            conds.append(cond)
            stack.append(stack[-1] & cond)
        elif line == "end else begin":
            stack.pop()
            stack.append(stack[-1] & ~conds[-1])
        elif line == "end":
            stack.pop()
            conds.pop()
        else:
            m = re.fullmatch(r"lut_entry = \d+'d(\d+);", line)
            require(m is not None, f"unexpected line in the box tree: {line[:60]}")
            table[stack[-1]] = int(m.group(1))
    require(bool(np.all(table >= 0)), "the box tree leaves addresses without an entry")
    return table


def _sliced_table(d: Path, spec, text: str) -> tuple[np.ndarray, str]:
    """The ``sliced_rom`` encoding read back: the ROM file's columns, the slice case items
    (constants and column bits) and the code dictionary, evaluated at every address."""
    n = 1 << spec.address_bits
    cw = int(re.search(r"^\s*(?:reg|wire) \[(\d+):0\] lut_code\b", text, re.M).group(1)) + 1
    dec = re.search(r"^\s*wire \[\d+:0\] lut_entry =((?: \(lut_code == \d+'d\d+\) \? \d+'d\d+ :)+) \d+'d(\d+);$",
                    text, re.M)
    require(dec is not None, "sliced ROM: no code dictionary (lut_entry from lut_code) found")
    dictionary = {int(k): int(e) for k, e in re.findall(r"\(lut_code == \d+'d(\d+)\) \? \d+'d(\d+) :", dec.group(1))}
    last = int(dec.group(2))
    rom = re.findall(r'^\s*initial \$readmemh\("([A-Za-z0-9_.]+)", lut_cols\);', text, re.M)
    low = re.search(r"^\s*wire \[(\d+):0\] lut_col = lut_cols\[addr\[(\d+):0\]\];", text, re.M)
    sel = re.search(rf"^\s*case \(addr\[{spec.address_bits - 1}:(\d+)\]\)", text, re.M)
    lb = int(sel.group(1)) if sel else spec.address_bits
    words = np.zeros(1 << lb, dtype=object)
    if rom:
        require(low is not None and int(low.group(2)) + 1 == lb, "sliced ROM: the column read and the slice select "
                "do not split the address at the same bit")
        words = [int(w, 16) for w in (d / rom[0]).read_text(encoding="ascii").split()]
        require(len(words) == 1 << lb, f"{rom[0]} holds {len(words)} words, the slice {1 << lb}")
        words = np.array(words, dtype=object)
    if sel:
        items = re.findall(rf"^\s*{spec.address_bits - lb}'d(\d+): lut_code = (.+);", text, re.M)
    else:
        items = [("0", m) for m in re.findall(r"^\s*wire \[\d+:0\] lut_code = (.+);", text, re.M)]
    require(len(items) == 1 << (spec.address_bits - lb), f"sliced ROM: {len(items)} slice items, expected "
            f"{1 << (spec.address_bits - lb)}")
    codes = np.zeros((1 << (spec.address_bits - lb), 1 << lb), dtype=np.int64)
    for s_, expr in items:
        terms = [t.strip() for t in expr.strip().strip("{}").split(",")]
        require(len(terms) == cw, f"sliced ROM: slice {s_} gives {len(terms)} code bits, lut_code has {cw}")
        for b, t in enumerate(reversed(terms)):
            m = re.fullmatch(r"1'b([01])|lut_col\[(\d+)\]", t)
            require(m is not None, f"sliced ROM: unexpected code bit {t[:40]}")
            col = (np.full(1 << lb, int(m.group(1))) if m.group(1) is not None
                   else np.array([(int(w) >> int(m.group(2))) & 1 for w in words], dtype=np.int64))
            codes[int(s_)] |= col.astype(np.int64) << b
    table = np.array([dictionary.get(c, last) for c in range(1 << cw)], dtype=np.int64)[codes.reshape(-1)]
    require(len(table) == n, "sliced ROM: the slices do not cover the address space")
    return table, (f"sliced ROM: {len(dictionary) + 1} dictionary entries, {len(items)} slices"
                   + (f", columns from {rom[0]}" if rom else ""))
