"""The Verilog emitter: the LUT-FSM as synthesizable Verilog-2001 (``templates/verilog/fsm.v.j2``;
options from ``spec.hdl``, docs/hdl.md). The LUT logic comes from one module per encoding
(``lut_case``, ``lut_rom``, ``lut_sliced_rom``, ``lut_boxtree``); this module adds the input
pipeline, the property masks of rule 3a and the FSM registers around it. The output is a pure
function of its inputs: the same inputs give byte-identical files."""

from __future__ import annotations

import re

import numpy as np

from mi_certify.runtime.fsm import REASON_BITS, OperatorReason, Reason
from mi_certify.templates import environment

from mi_certify.generator.build import lut_boxtree, lut_case, lut_rom, lut_sliced_rom
from mi_certify.generator.build.emit_common import SourceHashes, common_variables
from mi_certify.generator.build.verilog_parts import (ENCODINGS, LATENCIES, LutContext, LutLogic, address_fields,
                                                      assigns, decision_inputs, decls, lut_entries, mask_address,
                                                      template_defaults, width)
from mi_certify.generator.core.lut import LutFsmArtefact
from mi_certify.generator.core.spec import Spec

#: The LUT logic of each encoding: LutContext -> LutLogic.
ENCODERS = {"case": lut_case.lut_logic, "rom": lut_rom.lut_logic, "sliced_rom": lut_sliced_rom.lut_logic,
            "boxtree": lut_boxtree.lut_logic}


def emit_verilog(spec: Spec, machine: LutFsmArtefact, hashes: SourceHashes, version: str,
                 encoding: str | None = None, boxes: list[tuple[list[int], list[int]]] | None = None,
                 latency: int | None = None, target_measured: dict | None = None) -> str:
    """Source text of ``<name>.v`` (Verilog-2001; options from ``spec.hdl``, docs/hdl.md) for
    ``machine`` (table, allowed-action boxes of rule 3a).

    encoding: "case" | "rom" | "boxtree" | "sliced_rom" (default ``spec.hdl.encoding``; "auto"
    must be resolved by the caller). case: only entries that differ from the most common
    entry are listed, the ``default`` arm holds that one. rom, sliced_rom: the ROM's contents are
    initial values in the Verilog itself, in blocks of
    :data:`~mi_certify.generator.build.verilog_parts.ROM_BLOCK` words (no file to read; sliced_rom:
    see :func:`~mi_certify.generator.build.lut_sliced_rom.sliced_rom`). boxtree: comparators
    on the quantized fields, built from ``boxes`` (the distillation partition: inclusive
    level ranges) by :func:`mi_certify.generator.core.boxtree.build_tree`. A LUT of one entry is a
    continuous assignment with every encoding but rom.

    latency: decision latency in clock cycles, 1 | 2 | 3 | 4 (default ``spec.hdl.latency``; "auto"
    is resolved by the caller, and until it is, it means 1): latency L delays addr,
    probe_fault and sla_violation together through L-1 register stages and registers the LUT
    read L-1 times (docs/hdl.md, "Latency"; a sliced ROM with slices at latency 3 and 4:
    :func:`~mi_certify.generator.build.lut_sliced_rom.split_select`).
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
    d = decision_inputs(latency)
    fields = address_fields(spec)
    variables = dict(
        encoding=encoding, hdl=spec.hdl, latency=latency, addr_fields=fields, d=d,
        target_lines=(spec.hdl.declared_target.header_lines(target_measured)
                      if spec.hdl.declared_target is not None else []),
        mask_lines=_mask_lines(spec, list(machine.masks), fields, mask_address(latency),
                               "allowed" if latency == 1 else "allowed_d"),
        mask_reg=latency > 1 and bool(machine.masks), mask_addr=mask_address(latency), read_times=TIMES[latency - 1],
        **_lut_variables(spec, machine, encoding, latency, fields, boxes),
        **_fsm_variables(spec, latency, d["addr"]),
        op=_operator_variables(spec, latency, d["fault"]),
        **common_variables(spec, machine, hashes, version))
    template = environment().get_template("verilog/fsm.v.j2")
    text = template.render(unused_reasons=[], **variables)
    # a reason code this configuration never produces (PENDING with hysteresis 1, MASKED without a
    # property mask): declared with the others, and said so (Verilator -Wall: UNUSEDPARAM)
    unused = [f"R_{r.name}" for r in Reason if len(re.findall(rf"\bR_{r.name}\b", text)) == 1]
    return template.render(unused_reasons=unused, **variables) if unused else text


def _lut_variables(spec: Spec, machine: LutFsmArtefact, encoding: str, latency: int, fields: list[dict],
                   boxes) -> dict:
    """The template variables of the LUT logic: the encoding's (:data:`ENCODERS`), or one continuous
    assignment for a table of one entry (every encoding but rom), then the registers that carry
    the entry to the decision stage at latency 2, 3 and 4."""
    tw = spec.token_bits
    entries = lut_entries(spec, machine)
    values, counts = np.unique(entries, return_counts=True)
    default = int(values[int(np.argmax(counts))])
    const = len(values) == 1 and encoding != "rom"
    # the address the LUT logic reads: at latency 3 the inputs are registered first (stage 1), the
    # LUT logic is a register-to-register path into lut_entry (stage 2); at latency 4 it reads stage 2
    # into lut_entry (stage 3); a ROM read itself is synchronous (docs/hdl.md, "Latency")
    c = LutContext(spec, machine, entries, default, fields, latency,
                   {3: "addr_q1", 4: "addr_q2"}.get(latency, "addr"), "lut_entry" if latency == 1 else "lut_read",
                   boxes)
    logic = (LutLogic("one entry for every address (a continuous assignment)", c.lut_out) if const else
             ENCODERS[encoding](c))
    variables = {**template_defaults(spec), **logic.variables}
    rows, lut_out, note = list(logic.decls), logic.lut_out, logic.note
    if latency > 1 and not const and lut_out == "lut_read":
        rows.append(("reg", tw + 1, "lut_read", "the LUT logic's entry, registered into lut_entry"))
    split = variables["split"]
    # what the register in front of the decision stage loads (None: no such register)
    decoded = bool(split) and latency == 3   # the decision stage decodes the stage-2 partial ORs
    lut_reg_src = (None if const or latency == 1 or (encoding == "rom" and latency == 2) or decoded else
                   "lut_word" if encoding == "rom" else "lut_read")
    stage = ("" if latency == 1 else " (decoded from the stage-2 partial ORs)" if decoded else
             f" (registered: stage {latency - 1})")
    rows += [("wire" if const else "reg", tw + 1, "lut_entry", "{confident, proposed token}" + stage),
             ("wire", tw, "lut_p", "proposed token p"), ("wire", 1, "lut_c", "confident bit c")]
    if latency > 1:
        note += f"; the read registered{TIMES[latency - 1]} (latency {latency})"
    return {**variables, "lut_default": c.entry(default), "lut_const": c.entry(default) if const else None,
            "lut_addr": c.lut_addr, "lut_out": lut_out, "lut_reg_src": lut_reg_src, "lut_decls": decls(rows),
            "encoding_note": note, "tw": tw}


#: How often the LUT read is registered, by count (latency - 1), in the header's words (0: not at all, latency 1).
TIMES = {0: "", 1: "", 2: " twice", 3: " three times"}


def _mask_lines(spec: Spec, masks: list, fields: list[dict], addr: str, name: str = "allowed") -> list[str]:
    """Declarations of rule 3a's mask: per property box, a wire ``in_<j>`` (the address ``addr`` is in
    the box: comparators on its fields, full ranges omitted), and the wire ``name``, the AND over the
    boxes of their allowed-token bits (one bit per token, tokens no action has never allowed). No lines
    without masks."""
    tw = spec.token_bits
    n_act, full = len(spec.actions), 1 << tw
    mask_rows, factors = [], []
    for j, m in enumerate(masks):
        terms = []
        for fld, lo, hi in zip(fields, m.lo, m.hi):
            sl = f"{addr}[{fld['msb']}:{fld['lsb']}]" if fld["msb"] > fld["lsb"] else f"{addr}[{fld['msb']}]"
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
    if not masks:
        return []
    lines = decls(mask_rows + [("wire", full, f"{name} = " + factors[0])])
    head = lines[-1][:-len(factors[0]) - 1]
    lines[-1] = lines[-1][:-1]
    lines += [" " * (len(head) - 2) + "& " + fac for fac in factors[1:]]
    lines[-1] += ";"
    return lines


def _operator_variables(spec: Spec, latency: int, fault: str) -> dict | None:
    """The decision stage's command signals (``op_cmd``/``op_arg``, or their stage L-1 registers), the
    width of the step count, and the override's "does not yield" condition on the base step's
    reason (docs/fsm.md, "Operator interventions"); None without sla.yaml ``operator:``."""
    op = spec.operator
    if op is None:
        return None
    k = latency - 1
    viol = "sla_violation" if k == 0 else f"sla_violation_q{k}"
    # the base step's reason is PROBE_FAULT exactly on a fault, FALLBACK or RECOVER exactly when not
    # a fault and in fallback (rule 2) or at the W-th violation (rule 3): read from the inputs and
    # registers, not from n_reason, so the override adds no logic after the base step's decision
    fallback = f"(fb || ({viol} && vcnt == VIOL_LAST))"
    if op.yield_to_probe_fault and op.yield_to_fallback:
        cond = f"(!{fault} && !{fallback})"
    elif op.yield_to_probe_fault:
        cond = f"!{fault}"
    elif op.yield_to_fallback:
        cond = f"({fault} || !{fallback})"
    else:
        cond = "1'b1"
    return {"cmd": "op_cmd" if k == 0 else f"op_cmd_q{k}", "arg": "op_arg" if k == 0 else f"op_arg_q{k}",
            "ew": _op_width(op), "not_yield": cond}


def _op_width(op) -> int:
    """Bits of ``OP_STEPS`` and ``op_left``: :func:`width` of ``max_lock_steps``, at least 2 (with one
    step a 1-bit ``op_left`` makes the step count's ``op_left > 1`` a constant comparison: Verilator
    -Wall CMPCONST)."""
    return max(2, width(op.max_lock_steps))


def _localparams(rows: list[tuple[str, int, int]]) -> list[str]:
    """Aligned ``localparam [w-1:0] NAME = w'dV;`` lines of (name, width, value) rows."""
    r = max(len(f"[{w - 1}:0]") for _, w, _ in rows)
    n = max(len(name) for name, _, _ in rows)
    return [f"localparam {f'[{w - 1}:0]':<{r}} {name:<{n}} = {w}'d{v};" for name, w, v in rows]


def _fsm_variables(spec: Spec, latency: int, addr: str) -> dict:
    """The template variables of the FSM around the LUT: parameters, state registers, the input
    pipeline of latency L (L-1 stages of addr, probe_fault, sla_violation and a valid bit), the
    next-state registers and their reset and load lines; ``addr``: the decision stage's address."""
    tw, f = spec.token_bits, spec.fsm
    hw, dw, vw, rw = (width(f.hysteresis - 1), width(f.cooldown), width(f.violations_to_fallback - 1),
                      width(f.recovery - 1))
    params = [("CONSERVATIVE", tw, spec.conservative)]
    if f.hysteresis > 1:
        params.append(("HYST_LAST", hw, f.hysteresis - 1))
    params += [("COOLDOWN", dw, f.cooldown), ("VIOL_LAST", vw, f.violations_to_fallback - 1),
               ("RECOV_LAST", rw, f.recovery - 1)]
    op, ew = spec.operator, _op_width(spec.operator) if spec.operator else 0
    if op:
        params += [("OP_STEPS", ew, op.max_lock_steps), ("OP_LOCKABLE", 1 << tw, op.config().lockable)]
    state = [("reg", tw, "cand", "candidate k"),
             ("reg", hw, "hcnt", f"hysteresis count h, 0..{f.hysteresis - 1}"),
             ("reg", dw, "dcnt", f"cooldown count d, 0..{f.cooldown}"),
             ("reg", vw, "vcnt", f"consecutive SLA violations v, 0..{f.violations_to_fallback - 1}"),
             ("reg", 1, "fb", "fallback flag f"),
             ("reg", rw, "rcnt", f"consecutive compliant steps in fallback r, 0..{f.recovery - 1}")]
    if op:
        state += [("reg", 2, "op_mode", "operator override o: 0 none, 1 lock, 2 force"),
                  ("reg", tw, "op_act", "the action the override puts in force a"),
                  ("reg", ew, "op_left", f"steps the override stays in force e, 0..{op.max_lock_steps - 1}")]
    pipe_rows, pipe_data = [], []
    for k in range(1, latency):
        src = ("addr", "probe_fault", "sla_violation") if k == 1 else (f"addr_q{k - 1}", f"probe_fault_q{k - 1}",
                                                                       f"sla_violation_q{k - 1}")
        pipe_rows += [("reg", spec.address_bits, f"addr_q{k}", f"addr sampled {k} cycle{'s' if k > 1 else ''} ago"),
                      ("reg", 1, f"probe_fault_q{k}", None), ("reg", 1, f"sla_violation_q{k}", None),
                      ("reg", 1, f"valid_q{k}", f"a step, sampled {k} cycle{'s' if k > 1 else ''} ago, and no reset since")]
        pipe_data += [(f"addr_q{k}", src[0]), (f"probe_fault_q{k}", src[1]), (f"sla_violation_q{k}", src[2])]
        if op:
            pipe_rows += [("reg", 2, f"op_cmd_q{k}", None), ("reg", tw, f"op_arg_q{k}", None)]
            pipe_data += [(f"op_cmd_q{k}", "op_cmd" if k == 1 else f"op_cmd_q{k - 1}"),
                          (f"op_arg_q{k}", "op_arg" if k == 1 else f"op_arg_q{k - 1}")]
    nxt = [("reg", tw, "n_token"), ("reg", tw, "n_cand"), ("reg", hw, "n_hcnt"), ("reg", dw, "n_dcnt"),
           ("reg", vw, "n_vcnt"), ("reg", 1, "n_fb"), ("reg", rw, "n_rcnt"), ("reg", REASON_BITS, "n_reason")]
    regs = ["token", "cand", "hcnt", "dcnt", "vcnt", "fb", "rcnt", "reason"]
    reset_vals = ["CONSERVATIVE", "CONSERVATIVE", f"{hw}'d0", f"{dw}'d0", f"{vw}'d0", "1'b0", f"{rw}'d0", "R_HOLD"]
    loads = [(r, f"n_{r}") for r in regs]
    reasons = list(Reason)
    if op:   # the override's outputs (x_*) go to token and reason; its state to op_*
        nxt += [("reg", tw, "x_token"), ("reg", REASON_BITS, "x_reason"), ("reg", 2, "c_mode"), ("reg", tw, "c_act"),
                ("reg", 1, "c_more"), ("reg", ew, "c_dec"), ("reg", 2, "n_mode"), ("reg", tw, "n_act"), ("reg", ew, "n_left")]
        loads = [(r, {"token": "x_token", "reason": "x_reason"}.get(r, f"n_{r}")) for r in regs]
        loads += [("op_mode", "n_mode"), ("op_act", "n_act"), ("op_left", "n_left")]
        regs += ["op_mode", "op_act", "op_left"]
        reset_vals += ["2'd0", "CONSERVATIVE", f"{ew}'d0"]
        reasons += list(OperatorReason)
    ab = spec.address_bits
    return dict(
        hw=hw, dw=dw, vw=vw, rw=rw, aligned_params=_localparams(params),
        reason_params=_localparams([(f"R_{r.name}", REASON_BITS, int(r)) for r in reasons]),
        state_decls=decls(state), pipe_decls=decls(pipe_rows) if pipe_rows else [],
        pipe_data=assigns(pipe_data) if pipe_data else [], next_decls=decls(nxt),
        reg_reset=assigns(list(zip(regs, reset_vals)) + [("audit_valid", "1'b0"), ("audit_addr", f"{ab}'d0")]),
        reg_next=assigns(loads + [("audit_valid", "1'b1"), ("audit_addr", addr)]),
        reset_active=spec.hdl.reset_active)
