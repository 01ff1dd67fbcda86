"""The register map of the bus wrappers: one description (:func:`register_map`) from which the
SystemRDL file ``<module>.rdl`` (:func:`emit_rdl`), the register core ``<module>_regs.v`` (its address
decode, :mod:`mi_certify.generator.build.emit_soc`) and the documentation come (docs/hdl.md,
"Bus wrappers"). 32-bit registers at byte offsets; a pure function of the spec."""

from __future__ import annotations

from dataclasses import dataclass

from mi_certify.runtime.sla import monitor_parameters
from mi_certify.templates import environment

from mi_certify.generator.build.emit_monitor import monitor_config
from mi_certify.generator.core.spec import Spec

#: ID register: MAGIC ("MC") and the version of this register map's layout.
MAGIC, MAP_VERSION = 0x4D43, 1
#: Byte offset of RAW_<input 0>; input i at RAW_BASE + 4 i.
RAW_BASE = 0x40
#: Byte offset of OP (only with sla.yaml ``operator:``).
OP_OFFSET = 0x30


@dataclass(frozen=True)
class Field:
    """One field: bits [lsb + width - 1 : lsb]; sw: "r" (read-only), "rw", "w" (write-only, reads 0);
    kind: "" (plain), "pulse" (write 1: a one-cycle strobe; reads 0), "w1c" (set by hardware, write
    1 clears), "snapshot" (latched when DECISION is read); reset: value after reset (rw fields)."""

    name: str
    lsb: int
    width: int
    sw: str
    desc: str
    kind: str = ""
    reset: int = 0

    @property
    def msb(self) -> int:
        return self.lsb + self.width - 1


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    desc: str
    fields: tuple[Field, ...]

    @property
    def sw(self) -> str:
        """"r" when every field is read-only, "w" when every one is write-only, else "rw"."""
        kinds = {f.sw for f in self.fields}
        return kinds.pop() if len(kinds) == 1 else "rw"

    @property
    def writable(self) -> bool:
        return any(f.sw in ("rw", "w") for f in self.fields)


def monitor_widths(spec: Spec) -> tuple[int, int]:
    """(accuracy-loss width ACC_W, window-count width NW) of the spec's SLA monitor (hdl/sla_monitor.v)."""
    p = monitor_parameters(monitor_config(spec)[0], len(spec.actions))
    return p["ACC_W"], p["NW"]


def register_map(spec: Spec) -> tuple[Register, ...]:
    """The registers of ``spec``'s wrappers, by offset. Needs ``spec.hdl.input_formats`` (the raw
    inputs); raises ValueError without them."""
    if not spec.hdl.input_formats:
        raise ValueError("sla.yaml declares no raw input format (hdl.inputs / hdl.input_format)")
    n, tb, ab = len(spec.inputs), spec.token_bits, spec.address_bits
    acc_w, nw = monitor_widths(spec)
    actions = ", ".join(f"{i}={a.name}" for i, a in enumerate(spec.actions))
    regs = [
        Register("ID", 0x00, "identification", (
            Field("MAP_VERSION", 0, 16, "r", f"register map layout version ({MAP_VERSION})", reset=MAP_VERSION),
            Field("MAGIC", 16, 16, "r", f"0x{MAGIC:04X} ('MC')", reset=MAGIC))),
        Register("CTRL", 0x04, "control", (
            Field("STEP", 0, 1, "w", "write 1: copy every RAW_<input> register into the quantizer's inputs "
                  "(one atomic commit of a reading); reads 0", kind="pulse"),
            Field("FREE_RUN", 1, 1, "rw", "1: the quantizer's inputs follow the RAW_<input> registers in every "
                  "cycle (no STEP needed)"),
            Field("IRQ_EN", 2, 1, "rw", "1: irq is IRQ.FALLBACK"))),
        Register("STATUS", 0x08, "status of the last controller step and of the inputs", (
            Field("FALLBACK", 0, 1, "r", "the last step's reason is FALLBACK or PROBE_FAULT (the machine is in fallback)"),
            Field("PROBE_FAULT", 1, 1, "r", "the last step's reason is PROBE_FAULT"),
            Field("LOW_CONFIDENCE", 2, 1, "r", "the last step's reason is LOW_CONFIDENCE (the LUT cell is not confident)"),
            Field("SLA_VIOLATION", 3, 1, "r", "the SLA monitor's verdict on the last request (the controller's "
                  "sla_violation)"),
            Field("INPUT_FAULT", 8, n, "r", "bit i: input i of the reading the controller steps on (the raw "
                  "top registers it the cycle after STEP loads it) is missing or outside its envelope"))),
        Register("DECISION", 0x0C, "the last controller step (reading it latches SEQ and AUDIT_ADDR of the "
                 "same step: one audit record)", (
                     Field("TOKEN", 0, tb, "r", f"active action: {actions}"),
                     Field("REASON", 8, 4, "r", "reason code (docs/fsm.md): 0=HOLD 1=PENDING 2=SWITCH 3=COOLDOWN "
                           "4=LOW_CONFIDENCE 5=FALLBACK 6=RECOVER 7=PROBE_FAULT 8=MASKED"
                           + (" 9=LOCKED 10=FORCED" if spec.operator else "")))),
        Register("SEQ", 0x10, "audit record: decision sequence number", (
            Field("COUNT", 0, 32, "r", "controller steps since reset (modulo 2^32) at the last DECISION read",
                  kind="snapshot"),)),
        Register("AUDIT_ADDR", 0x14, "audit record: the LUT address of the step read from DECISION", (
            Field("ADDR", 0, ab, "r", "quantized levels, input 0 most significant (0 on a probe fault)",
                  kind="snapshot"),)),
        Register("IRQ", 0x18, "interrupt status", (
            Field("FALLBACK", 0, 1, "rw", "set by a step whose reason is FALLBACK or PROBE_FAULT; write 1 to clear",
                  kind="w1c"),)),
        Register("SLA_CMD", 0x1C, "SLA monitor requests (sla_monitor.v, docs/runtime.md)", (
            Field("START", 0, 1, "w", "write 1: a request starts under the active action", kind="pulse"),
            Field("DONE", 1, 1, "w", "write 1: the request in flight is done, its accuracy loss in SLA_ACC",
                  kind="pulse"),
            Field("ACC_UNKNOWN", 2, 1, "w", "with DONE: the accuracy loss is unknown (+infinity)", kind="pulse"))),
        Register("SLA_ACC", 0x20, "accuracy loss of the next DONE", (
            Field("LOSS", 0, acc_w, "rw", "accuracy loss, unsigned, in the monitor's fixed-point unit "
                  "(docs/runtime.md)"),)),
        Register("SLA_REQUESTS", 0x24, "SLA monitor counter", (
            Field("COUNT", 0, 32, "r", "verdicts since reset (modulo 2^32)"),)),
        Register("SLA_VIOLATIONS", 0x28, "SLA monitor counter", (
            Field("COUNT", 0, 32, "r", "verdicts that were violations, since reset (modulo 2^32)"),)),
        Register("SLA_STATUS", 0x2C, "SLA monitor status", (
            Field("LAT_VIOLATION", 0, 1, "r", "the last verdict's latency statistic is above the limit"),
            Field("ACC_VIOLATION", 1, 1, "r", "the last verdict's accuracy statistic is above the limit"),
            Field("BUSY", 2, 1, "r", "a request is in flight"),
            Field("PROTO_ERROR", 3, 1, "rw", "set by a request protocol error (DONE with no request in flight, "
                  "an action out of range); write 1 to clear", kind="w1c"),
            Field("SAMPLES", 8, nw, "r", "requests in the window"))),
    ]
    if spec.operator:   # sla.yaml operator: the core's command port (docs/fsm.md, "Operator interventions")
        op = spec.operator
        lockable = ", ".join(f"{t}={spec.actions[t].name}" for t in op.lock) or "none"
        regs.append(Register("OP", OP_OFFSET, "operator command for the next controller step (docs/operator.md); "
                             "the bus does not authenticate: the host software must (mi-certify's run checks an "
                             "HMAC per key id before it writes a command)", (
                                 Field("CMD", 0, 2, "w", "write (byte lane 0): the command of the next controller "
                                       "step, then none again: 0 none, 1 lock ARG, 2 force the conservative action"
                                       + ("" if op.force_conservative else " (not declared: ignored)")
                                       + ", 3 release; reads 0"),
                                 Field("ARG", 8, tb, "w", f"with CMD = 1 (byte lane 1; 0 when lane 1 is not written): "
                                       f"the token to lock (lockable: {lockable}; another is ignored); reads 0"))))
    for i, (inp, fmt) in enumerate(zip(spec.inputs, spec.hdl.input_formats)):
        regs.append(Register(f"RAW_{inp.name.upper()}", RAW_BASE + 4 * i,
                             f"raw word of input {i}, {inp.name} ({inp.unit or '-'}; envelope [{inp.min:g}, {inp.max:g}])", (
                                 Field("WORD", 0, fmt.width, "rw", f"{fmt.describe()}: value = word / 2^{fmt.frac_bits}"),
                                 Field("VALID", 31, 1, "rw", "1: the reading is present (0: a missing reading, a "
                                       "probe fault)"))))
    names = [r.name for r in regs]
    if len(set(names)) != len(names):  # e.g. inputs "a" and "A": RAW_A twice
        raise ValueError(f"register names collide: {', '.join(sorted({x for x in names if names.count(x) > 1}))}")
    return tuple(regs)


def rdl_name(spec: Spec) -> str:
    """The SystemRDL address map's name and file stem: ``<module>_regs``."""
    return f"{spec.module_name}_regs"


def emit_rdl(spec: Spec, version: str, spec_hash: str) -> str:
    """Source text of ``<module>_regs.rdl`` (SystemRDL 2.0) of :func:`register_map`."""
    return environment().get_template("rdl/regmap.rdl.j2").render(
        name=rdl_name(spec), spec=spec, version=version, spec_hash=spec_hash, regs=register_map(spec))


def peakrdl_outputs(rdl_text: str, stem: str) -> dict[str, bytes]:
    """What PeakRDL makes of ``rdl_text`` (compiled by systemrdl-compiler): ``<stem>.h`` (peakrdl-cheader),
    ``<stem>.xml`` (IP-XACT, peakrdl-ipxact) and ``<stem>_html/`` (peakrdl-html, without its web fonts and
    Windows launchers, its build timestamp set to 0 so the files are deterministic), by relative path.
    Raises ValueError with the compiler's message when the RDL does not compile."""
    import tempfile
    from pathlib import Path

    from peakrdl_cheader.c_standards import CStandard
    from peakrdl_cheader.exporter import CHeaderExporter
    from peakrdl_html import HTMLExporter
    from peakrdl_ipxact import IPXACTExporter
    from systemrdl import RDLCompileError, RDLCompiler

    out: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="mi-certify-rdl-") as work:
        w = Path(work)
        (w / f"{stem}.rdl").write_text(rdl_text, encoding="utf-8")
        rdlc = RDLCompiler()
        try:
            rdlc.compile_file(str(w / f"{stem}.rdl"))
            root = rdlc.elaborate()
        except RDLCompileError as exc:
            raise ValueError(f"{stem}.rdl does not compile: {exc}") from None
        CHeaderExporter().export(root, str(w / f"{stem}.h"), std=CStandard.gnu99)  # no C11 static_assert: compiles with -std=c99
        IPXACTExporter().export(root, str(w / f"{stem}.xml"))
        HTMLExporter().export(root, str(w / f"{stem}_html"), footer="Generated by PeakRDL-html from " + f"{stem}.rdl")
        import re
        for p in sorted(w.rglob("*")):
            rel = p.relative_to(w).as_posix()
            if not p.is_file() or rel.endswith(".rdl") or "/fonts/" in rel or "/.launcher_data/" in rel or rel.endswith(".bat"):
                continue
            data = p.read_bytes()
            if rel == f"{stem}_html/index.html":
                data = re.sub(rb"BUILD_TS = \d+", b"BUILD_TS = 0", data)
                data = re.sub(rb"\?ts=\d+", b"?ts=0", data)
            out[rel] = data
    return out
