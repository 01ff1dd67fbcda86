"""The bus wrappers (docs/hdl.md, "Bus wrappers"): ``<module>_regs.v``, the register core
(``templates/verilog/soc_regs.v.j2``: the raw-input controller, its SLA monitor, the registers of
:func:`~mi_certify.generator.build.regmap.register_map` and their address decode), and the bus
adapters ``<module>_axil.v`` (AXI4-Lite slave, ``soc_axil.v.j2``) and ``<module>_wb.v`` (Wishbone B4
classic slave, ``soc_wb.v.j2``) around it. The decode and the read multiplexer come from the same
description as ``<module>_regs.rdl``. A pure function of the spec."""

from __future__ import annotations

from mi_certify.templates import environment

from mi_certify.generator.build.emit_monitor import module_name as monitor_module
from mi_certify.generator.build.emit_quantizer import quantizer_module, raw_module
from mi_certify.generator.build.regmap import Register, monitor_widths, rdl_name, register_map
from mi_certify.generator.core.spec import Spec

#: Field name -> the core's Verilog source of its read value (RAW_<input> fields: per input, below).
_READ = {
    "ID.MAP_VERSION": None, "ID.MAGIC": None,  # constants: the field's reset value
    "CTRL.STEP": "1'b0", "CTRL.FREE_RUN": "free_run", "CTRL.IRQ_EN": "irq_en",
    "STATUS.FALLBACK": "in_fallback", "STATUS.PROBE_FAULT": "(reason == R_PROBE_FAULT)",
    "STATUS.LOW_CONFIDENCE": "(reason == R_LOW_CONFIDENCE)", "STATUS.SLA_VIOLATION": "violation",
    "STATUS.INPUT_FAULT": "input_fault",
    "DECISION.TOKEN": "audit_token", "DECISION.REASON": "audit_reason",
    "SEQ.COUNT": "snap_seq", "AUDIT_ADDR.ADDR": "snap_addr", "IRQ.FALLBACK": "irq_fallback",
    "SLA_CMD.START": "1'b0", "SLA_CMD.DONE": "1'b0", "SLA_CMD.ACC_UNKNOWN": "1'b0", "SLA_ACC.LOSS": "sla_acc",
    "SLA_REQUESTS.COUNT": "sla_requests", "SLA_VIOLATIONS.COUNT": "sla_violations",
    "SLA_STATUS.LAT_VIOLATION": "lat_violation", "SLA_STATUS.ACC_VIOLATION": "acc_violation",
    "SLA_STATUS.BUSY": "sla_busy", "SLA_STATUS.PROTO_ERROR": "sla_proto_seen", "SLA_STATUS.SAMPLES": "sla_samples",
    "OP.CMD": "2'b00", "OP.ARG": None,   # write-only: read 0 (ARG's width is the token's: below)
}


def regs_module(spec: Spec) -> str:
    return rdl_name(spec)


def axil_module(spec: Spec) -> str:
    return f"{spec.module_name}_axil"


def wb_module(spec: Spec) -> str:
    return f"{spec.module_name}_wb"


#: Word addresses per group of the register core's first read stage (a power of two).
READ_GROUP = 8


def address_width(regs: tuple[Register, ...]) -> int:
    """Byte-address bits the wrappers decode: enough for the last register (at least 8)."""
    return max(8, (max(r.offset for r in regs) + 3).bit_length())


def _read_expr(reg: Register, raw: dict[str, str]) -> str:
    """The register's 32-bit read value: its fields at their bits, zeros between."""
    if all(_READ.get(f"{reg.name}.{f.name}", "") is None for f in reg.fields):
        value = sum(f.reset << f.lsb for f in reg.fields)
        return f"32'h{value:08X}"
    parts, bit = [], 32
    for f in sorted(reg.fields, key=lambda f: -f.lsb):
        if bit > f.msb + 1:
            parts.append(f"{bit - f.msb - 1}'d0")
        parts.append(raw.get(f"{reg.name}.{f.name}") or _READ[f"{reg.name}.{f.name}"] or f"{f.width}'d0")
        bit = f.lsb
    if bit > 0:
        parts.append(f"{bit}'d0")
    return "{" + ", ".join(parts) + "}"


def emit_soc(spec: Spec, version: str, spec_hash: str) -> dict[str, str]:
    """Source texts of ``<module>_regs.v``, ``<module>_axil.v`` and ``<module>_wb.v``, by file name.
    Raises ValueError without raw input formats (:func:`~mi_certify.generator.build.regmap.register_map`)."""
    regs = register_map(spec)
    acc_w, nw = monitor_widths(spec)
    inputs, raw = [], {}
    for inp, fmt in zip(spec.inputs, spec.hdl.input_formats):
        reg = inp.name.upper()
        inputs.append({"name": inp.name, "reg": reg, "width": fmt.width})
        raw[f"RAW_{reg}.WORD"], raw[f"RAW_{reg}.VALID"] = f"raw_{inp.name}", f"rawv_{inp.name}"
    fields = {f"{r.name}.{f.name}": f for r in regs for f in r.fields}
    rows = [{"name": r.name, "offset": r.offset, "writable": r.writable, "read": _read_expr(r, raw)} for r in regs]
    aw = address_width(regs)
    # reads in two stages: the registers in groups of eight word addresses (soc_regs.v.j2, "reads")
    groups: dict[int, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["offset"] // 4 // READ_GROUP, []).append(row)
    variables = dict(
        spec=spec, hdl=spec.hdl, version=version, spec_hash=spec_hash, name=regs_module(spec), regs=rows,
        fields=fields, inputs=inputs, aw=aw, n=len(spec.inputs), tb=spec.token_bits, ab=spec.address_bits,
        acc_w=acc_w, nw=nw, max_name=max(len(r.name) for r in regs), raw_top=raw_module(spec),
        quantizer=quantizer_module(spec), monitor=monitor_module(spec), read_groups=sorted(groups.items()),
        group_bits=READ_GROUP.bit_length() - 1,
        reset_active=spec.hdl.reset_active,
        axil=axil_module(spec), wb=wb_module(spec))
    env = environment()
    return {f"{regs_module(spec)}.v": env.get_template("verilog/soc_regs.v.j2").render(**variables),
            f"{axil_module(spec)}.v": env.get_template("verilog/soc_axil.v.j2").render(**variables),
            f"{wb_module(spec)}.v": env.get_template("verilog/soc_wb.v.j2").render(**variables)}
