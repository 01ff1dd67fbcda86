"""Tables group of ``mi-certify check``: every copy of the LUT against lut.hex, and its properties.

Re-derives from lut.hex: lut.json's sha256, token histogram, confident-cell count and
cell status (against the distillation boxes'); the table the Verilog holds, read back
without Yosys from whichever encoding the emitter chose (case items, the ROM's initial
values, sliced ROM, box tree: :func:`verilog_table`, pyverilog's syntax tree), and every
``.v`` parsed with the controller's interface and latency confirmed
(:func:`check_rtl_reading`); the Python runtime's ``_LUT``
literal, parsed and not executed (all independent). Then the sla.yaml properties are
checked again on every cell of lut.hex and compared with lut_properties.json (same
code).
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import numpy as np

from mi_certify.generator.core.lut import decode_status_runs, split_table, table_bytes
from mi_certify.verification.check.common import FAIL, CheckFailed, Checker, CheckContext, require


def check_tables(c: Checker, ev: CheckContext) -> None:
    """Items ``lut.tables: lut.json = lut.hex``, ``lut.tables: <module>.v table = lut.hex`` and
    ``lut.tables: <name>.py table = lut.hex``; one FAIL without lut.hex."""
    lut, spec = ev.lut, ev.spec
    if lut is None:
        c.add("lut.tables", FAIL, "integrity", "no lut.hex in the bundle")
        return
    c.run("lut.tables: lut.json = lut.hex", "independent", lambda: _lut_json(c, ev))
    c.run(f"lut.tables: {spec.module_name}.v table = lut.hex", "independent", lambda: _verilog(c, ev))
    check_rtl_reading(c, ev)
    c.run(f"lut.tables: {spec.name}.py table = lut.hex", "independent", lambda: _python(c, ev))


def _lut_json(c: Checker, ev: CheckContext) -> str:
    lut, spec = ev.lut, ev.spec
    j = c.read_json("lut.json")
    require(j["sha256"] == hashlib.sha256(lut.tobytes()).hexdigest(), "lut.json sha256 is not lut.hex's")
    tokens, confident = split_table(lut)
    require(j["confident_cells"] == int(np.sum(confident)), "confident cell count differs")
    hist = np.bincount(tokens, minlength=len(spec.actions))
    require(j["tokens"] == {a.name: int(hist[i]) for i, a in enumerate(spec.actions)}, "token histogram differs")
    if ev.box_status is not None:
        require(np.array_equal(decode_status_runs(j["cell_status"], lut.size), ev.box_status),
                "cell_status differs from the distillation boxes")
    return "sha256, histogram, confident cells and cell status agree with lut.hex"


def _verilog(c: Checker, ev: CheckContext) -> str:
    spec = ev.spec
    table, how = verilog_table(c.d, spec)
    tw = spec.token_bits
    # Verilog entry = {confident, token}: token in the low tw bits
    as_bytes = np.frombuffer(table_bytes(table & ((1 << tw) - 1), (table >> tw) & 1), dtype=np.uint8)
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
        from mi_certify.verification.rtl.lut_check import check_lut_properties
        again = [r.to_json() for r in check_lut_properties(ev.spec, split_table(ev.lut_hex())[0])]
        require(again == c.read_json("lut_properties.json")["properties"], "re-checked LUT properties differ from "
                                                                          "lut_properties.json")
        return ", ".join(f"{r['id']} {r['verdict']}" for r in again) or "no properties"
    c.run("lut properties re-checked on every cell", "same code", run)


def verilog_table(d: Path, spec) -> tuple[np.ndarray, str]:
    """The LUT entries ``<module>.v`` in ``d`` holds, read without Yosys: pyverilog's syntax tree,
    its data flow from ``addr`` to ``lut_entry`` evaluated at every address, a ROM's initial values included
    (:func:`.verilog_reader.read_lut`; every encoding and latency).

    Returns (entries, how): entries (2**address_bits,) int64, each ``{confident, token}``
    (token in the low ``token_bits``); how says what was read (ROM initial values, case statements, box
    tree) and the latency. Raises CheckFailed when the file cannot be read (file, line, construct).
    """
    from mi_certify.verification.tools.verilog_reader import VerilogReadError, read_lut
    try:
        got = read_lut(d / f"{spec.module_name}.v", spec.address_bits, spec.module_name)
    except VerilogReadError as exc:
        raise CheckFailed(str(exc)) from None
    return got.entries, f"{got.how}, latency {got.latency} (pyverilog)"


def check_rtl_reading(c: Checker, ev: CheckContext) -> None:
    """Item ``rtl.read: every .v parsed (pyverilog), <module>.v interface = spec``: every ``.v`` of
    the bundle parses with pyverilog 1.3; the controller's module name, ports, parameters,
    localparams and latency agree with its header and the spec (:func:`.verilog_reader.check_controller`)."""
    from mi_certify.runtime.fsm import REASON_BITS, OperatorReason, Reason

    from mi_certify.verification.tools.verilog_reader import VerilogReadError, check_all, check_controller
    spec = ev.spec

    def run():
        try:
            files = check_all(c.d)
            reasons = [r.name for r in Reason] + ([r.name for r in OperatorReason] if spec.operator else [])
            got = check_controller(c.d / f"{spec.module_name}.v", spec, reasons, REASON_BITS)
        except VerilogReadError as exc:
            raise CheckFailed(str(exc)) from None
        return (f"{len(files)} files parsed ({', '.join(files)}); module {got['module']}: {got['ports']} ports, "
                f"{got['localparams']} localparams and latency {got['latency']} as the header and the spec say")
    c.run(f"rtl.read: every .v parsed (pyverilog), {spec.module_name}.v interface = spec", "independent", run)
