"""Formal checks of the generated Verilog: Yosys → SMT-LIB 2 → Z3, and the LUT by exhaustive simulation.

The RTL is read by Yosys (``read_verilog``; the steps of ``prep -top`` with ``proc -norom``;
no latch (``select -assert-none t:$dlatch``), ``check -assert``: no loops or undriven nets; ``write_smt2 -wires``, Yosys
manual, "write_smt2"); its transition relation ``|top_t|`` and signal accessors
``|top_n name|`` are used as they are. Obligations (each an SMT-LIB script whose
expected answer is ``unsat``; the design is the shared prelude ``proofs/rtl/design.smt2``):

- ``rtl.reset``: a cycle with ``rst`` high leaves token = C, reason = HOLD and every
  counter zero (the reference reset state).
- ``rtl.equivalence``: from any RTL state equal to a reference state that satisfies
  the proved FSM invariant (its ghost-free part), one cycle with ``rst`` low gives the
  next state and reason of the reference transition (docs/fsm.md) for **every**
  ``addr``, ``probe_fault``, ``sla_violation`` and **every** LUT output (the LUT read
  is a cut point: the reference takes the RTL's ``lut_entry``) when the cycle is a step
  (``step``, or its pipelined ``valid_q<L-1>``), and holds every register of the decision
  stage with ``audit_valid`` 0 when it is not. With ``rtl.reset``
  this is an inductive equivalence: the RTL and the reference agree on every
  reachable state and every input sequence, so the FSM proofs hold on the RTL.
- ``rtl.invariant`` / ``rtl.property.<id>``: the ranges and the sla.yaml properties on
  the active token, stated directly on the RTL's registers (1-inductive given the
  LUT entries the table holds).
- ``rtl.audit``: the audit port: ``audit_token``/``audit_reason`` equal ``token``/``reason``
  in every state; a cycle with reset asserted clears ``audit_valid``, and so does a cycle
  without a step (``step`` low when it was sampled); a step cycle sets ``audit_valid`` and
  registers its ``addr`` into ``audit_addr``.
- ``rtl.lut_table``: the RTL's ``lut_entry`` equals ``lut.hex`` at every address: the
  SMT-LIB function Yosys made of it is evaluated at every address (exhaustive).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import z3

from mi_certify.generator.build.verilog_parts import decision_inputs, mask_address
from mi_certify.generator.core.lut import LutFsmArtefact, split_table
from mi_certify.generator.core.results import Verdict
from mi_certify.runtime.fsm import MODE_FORCE, MODE_LOCK, MODE_NONE, REASON_BITS, FsmConfig, OperatorConfig, Reason

from mi_certify.verification.tools import yosys
from mi_certify.verification.tools.bitvec import narrow, widen
from mi_certify.verification.rtl.fsm_proofs import FsmModel, Obligation, canonical_smt2

#: Registers of the generated RTL and the reference state variable each holds.
REGISTERS = {"token": "t", "cand": "k", "hcnt": "h", "dcnt": "d", "vcnt": "v", "fb": "f", "rcnt": "r"}

#: Override registers of the generated RTL with sla.yaml ``operator:`` and the reference state variable each holds.
OPERATOR_REGISTERS = {"op_mode": "o", "op_act": "a", "op_left": "e"}

#: Audit port signals of the generated RTL (registers: audit_valid, audit_addr; wires: the others).
AUDIT_PORT = ("audit_valid", "audit_token", "audit_reason", "audit_addr")


def pipeline_registers(latency: int, address_bits: int, token_bits: int | None = None) -> dict[str, int]:
    """Pipeline registers of the generated RTL at ``latency``: name -> width (stages 1 .. latency-1);
    ``token_bits`` (only with sla.yaml ``operator:``) adds the command's ``op_cmd_q<k>``, ``op_arg_q<k>``."""
    out = {}
    for k in range(1, latency):
        out.update({f"addr_q{k}": address_bits, f"probe_fault_q{k}": 1, f"sla_violation_q{k}": 1, f"valid_q{k}": 1})
        if token_bits is not None:
            out.update({f"op_cmd_q{k}": 2, f"op_arg_q{k}": token_bits})
    return out


def yosys_smt2(verilog: Path, top: str, timeout_s: float = 600.0, entry_bits: int | None = None,
               keep: tuple[str, ...] = ()) -> str:
    """SMT-LIB 2 of the design (Yosys ``prep`` steps; ``write_smt2 -wires``): :func:`.yosys.smt2`,
    script ``templates/yosys/smt2.ys.j2``. When the LUT's entries share constant upper bits
    (e.g. two entries that differ in one bit), Yosys narrows ``lut_entry`` below its declared
    ``entry_bits`` (even to a Bool): the design is then read again with that wire kept, so the
    proofs see the whole entry; ``keep``: more wires kept so (the registered property mask
    ``allowed``). Raises RuntimeError (:class:`.yosys.YosysError`: Yosys missing
    or too old, failed, or timed out)."""
    design = yosys.smt2(verilog, top, timeout_s, keep=keep)
    if entry_bits is not None and f"; yosys-smt2-wire lut_entry {entry_bits}\n" not in design:
        design = yosys.smt2(verilog, top, timeout_s, keep=("lut_entry", *keep))
    return design


def cut_lut(design: str, top: str) -> str:
    """The design with the LUT read as a cut point: ``lut_entry`` becomes a free function
    of the state (so proofs hold for every LUT content), and definitions no longer
    reachable from the transition relation or the bound signals are dropped. With a
    pipelined LUT read (latency 2 to 4) ``lut_entry`` is a register: the next-state functions
    of the ``lut_*`` registers (the registered table read) become free functions instead.
    A constant LUT has no read to cut: the design is returned unchanged."""
    import re

    ref = re.compile(r"\|%s#\d+\|" % re.escape(top))
    lines = design.splitlines()
    acc = next(ln for ln in lines if ln.startswith("(define-fun |%s_n lut_entry|" % top))
    found = ref.search(acc.split(")) ", 1)[1])
    if found is None:
        # a constant LUT (every cell the same entry): Yosys folds it into the logic, there is no
        # read to cut; the proofs then hold for this LUT, the only content the design can have
        return design
    defined = {m.group(1) for m in re.finditer(r"^\(define-fun (\|%s#\d+\|) " % re.escape(top), design, re.M)}
    targets = {found.group(0)} & defined
    for ln in lines:   # registered table reads: "(= <next> (|Q| next_state)) ; $procdff$N \lut_..."
        if ln.startswith("  (= ") and re.search(r" \\lut_\w+$", ln):
            nxt = ref.search(ln)
            if nxt is not None and nxt.group(0) in defined:
                targets.add(nxt.group(0))
    if not targets:
        return design
    out, deps, order = [], {}, []
    for ln in lines:
        head = ln.split(" ", 2)[1] if ln.startswith("(define-fun ") else None
        if head in targets:
            rest = ln.split(f"((state |{top}_s|)) ", 1)[1]
            rng = "Bool" if rest.startswith("Bool") else f"(_ BitVec {rest.split('(_ BitVec ')[1].split(')')[0]})"
            ln = f"(declare-fun {head} (|{top}_s|) {rng})"
        m = re.match(r"\(define-fun (\|%s#\d+\|) " % re.escape(top), ln)
        if m:
            deps[m.group(1)] = (ln, set(ref.findall(ln.split(" ; ")[0])) - {m.group(1)})
            order.append(m.group(1))
            continue
        out.append(ln)
    roots = set(ref.findall("\n".join(out)))
    keep, stack = set(), list(roots)
    while stack:
        x = stack.pop()
        if x in keep or x not in deps:
            continue
        keep.add(x)
        stack.extend(deps[x][1])
    # definitions go back in their original order, before the first use (accessors follow them)
    head = [ln for ln in out if ln.startswith("(declare-") or ln.startswith(";")]
    tail = [ln for ln in out if not (ln.startswith("(declare-") or ln.startswith(";"))]
    return "\n".join(head + [deps[x][0] for x in order if x in keep] + tail) + "\n"


class RtlModel:
    """The Yosys SMT-LIB model of one generated controller, bound to named constants."""

    def __init__(self, design: str, top: str, cfg: FsmConfig, address_bits: int, token_bits: int,
                 reset_port: str = "rst", reset_active_low: bool = False, latency: int = 1,
                 operator: OperatorConfig | None = None, mask_width: int = 0):
        self.design, self.top, self.cfg = design, top, cfg
        self.ab, self.tw = address_bits, token_bits
        sigs = {"addr": address_bits, "probe_fault": 1, "sla_violation": 1, "step": 1, reset_port: 1,
                "lut_entry": token_bits + 1}
        if operator:
            sigs.update({"op_cmd": 2, "op_arg": token_bits})
        pipe = pipeline_registers(latency, address_bits, token_bits if operator else None)
        regs = list(REGISTERS) + ["reason"] + (list(OPERATOR_REGISTERS) if operator else [])
        widths = {}
        for line in design.splitlines():
            # registers by name; with an asynchronous reset (async2sync) the named signal is the
            # wire after the reset mux, read below with the reset deasserted
            if line.startswith("; yosys-smt2-register ") or line.startswith("; yosys-smt2-wire "):
                _, _, name, w = line.split()
                widths.setdefault(name, int(w))
        # the registered property mask (latency > 1 with sla.yaml properties), one bit per token
        if mask_width:
            pipe = {**pipe, "allowed": mask_width}
        # a register Yosys removed (never read) is left unconstrained: no claim about it can be proved;
        # a state register of the reference machine then gets the width of its whole range (free in
        # the state a cycle starts from, the invariant bounds it)
        self.missing = [r for r in regs + list(pipe) if r not in widths]

        def bits(n: int) -> int:
            return max(1, int(n).bit_length())
        full = {"token": token_bits, "cand": token_bits, "hcnt": bits(cfg.hysteresis - 1), "dcnt": bits(cfg.cooldown),
                "vcnt": bits(cfg.violations_to_fallback - 1), "fb": 1, "rcnt": bits(cfg.recovery - 1)}
        sigs.update({r: widths.get(r, full.get(r, 1)) for r in regs})
        sigs.update(pipe)
        audit = {"audit_valid": 1, "audit_token": token_bits, "audit_reason": REASON_BITS,
                 "audit_addr": address_bits}
        sigs.update(audit)
        self.missing += [a for a in AUDIT_PORT if f"(define-fun |{top}_n {a}| " not in design]
        self.widths = sigs
        decl = ["(declare-const rtl_s |%s_s|)" % top, "(declare-const rtl_s2 |%s_s|)" % top,
                "(assert (|%s_t| rtl_s rtl_s2))" % top,
                # the next state is read with the reset deasserted (an asynchronous reset, modelled by
                # async2sync, would otherwise mask the registers' contents)
                "(assert %s(|%s_n %s| rtl_s2))" % ("" if reset_active_low else "(not ", top, reset_port)
                + ("" if reset_active_low else ")")]
        for name, w in sigs.items():
            decl.append(f"(declare-const cur_{name} (_ BitVec {w}))")
            if name not in self.missing:
                decl.append(f"(assert (= cur_{name} {self._bv(f'(|{top}_n {name}| rtl_s)', w)}))")
        for name in regs + ["audit_valid", "audit_addr"] + list(pipe):
            w = sigs[name]
            decl.append(f"(declare-const nxt_{name} (_ BitVec {w}))")
            if name not in self.missing:
                decl.append(f"(assert (= nxt_{name} {self._bv(f'(|{top}_n {name}| rtl_s2)', w)}))")
        self.binding = "\n".join(decl) + "\n"

    @staticmethod
    def _bv(term: str, w: int) -> str:
        # yosys declares 1-bit signals as Bool
        return f"(ite {term} #b1 #b0)" if w == 1 else term

    def cur(self, name: str) -> z3.BitVecRef:
        return z3.BitVec(f"cur_{name}", self.widths[name])

    def nxt(self, name: str) -> z3.BitVecRef:
        return z3.BitVec(f"nxt_{name}", self.widths[name])

    def prelude(self) -> str:
        return self.design + "\n" + self.binding

    def check(self, formula: z3.BoolRef, timeout_s: float) -> tuple[str, str]:
        """(answer, SMT-LIB text of the obligation without the prelude)."""
        s = z3.Solver()
        s.set("timeout", int(timeout_s * 1000))
        s.add(z3.parse_smt2_string(self.prelude()))
        s.add(formula)
        ans = str(s.check())
        text = ("; mi-certify proof obligation on the RTL. Expected answer: unsat.\n"
                "; Not self-contained: prepend proofs/rtl/design.smt2 (the design from Yosys write_smt2, with the\n"
                "; LUT read as a cut point, and the constants cur_*/nxt_* bound to its signals).\n"
                f"(assert {canonical_smt2(formula.sexpr())})\n(check-sat)\n")
        return ans, text


def _as_int(bv: z3.BitVecRef) -> z3.ArithRef:
    return z3.BV2Int(bv, is_signed=False)


def rtl_obligations(verilog: Path, top: str, machine: LutFsmArtefact, alphabet: dict[tuple, int],
                    timeout_s: float = 300.0, reset_port: str = "rst", reset_active_low: bool = False,
                    latency: int = 1, operator: OperatorConfig | None = None) -> tuple[list[Obligation], str]:
    """Run every RTL obligation. Returns (obligations, the design's SMT-LIB prelude).

    machine: the LUT-FSM the RTL must implement (:class:`~mi_certify.generator.core.lut.LutFsmArtefact`);
    alphabet: its :func:`~.fsm_proofs.entry_alphabet`; top: the module name; reset_port /
    reset_active_low: the reset input (sla.yaml ``hdl.reset_polarity``: ``rst`` active high or
    ``rst_n`` active low); latency: the decision latency the RTL was emitted with (sla.yaml
    ``hdl.latency``, 1 | 2 | 3 | 4). With latency L > 1 the decision stage's inputs are the
    stage L-1 pipeline registers (:func:`~mi_certify.generator.build.verilog_parts.decision_inputs`): ``rtl.equivalence`` steps the
    reference on them when ``valid_q<L-1>`` is set and proves the reset values otherwise (a
    bubble), ``rtl.pipeline`` proves that every stage loads the one before it (stage 1 the
    ports), ``rtl.reset`` that a reset empties the pipeline, and ``rtl.lut_table`` evaluates
    the LUT through its L-1 registers. Together: after a reset, the outputs at cycle t are
    the one-cycle reference machine's for the inputs of cycle t - (L - 1) (docs/hdl.md).
    operator: sla.yaml ``operator:`` (docs/fsm.md, "Operator interventions"): the RTL then has the
    command ports ``op_cmd``/``op_arg`` and the override registers ``op_mode``/``op_act``/``op_left``,
    and every obligation covers them (rtl.equivalence: the reference with the operator, for every
    command)."""
    operator = operator if operator is not None else machine.operator   # the machine's own, by default
    bits, token_bits = list(machine.input_bits), machine.token_bits
    mask_reg = latency > 1 and bool(machine.masks)   # the property mask registered (docs/hdl.md, "Latency")
    design = yosys_smt2(verilog, top, entry_bits=token_bits + 1, keep=("allowed",) if mask_reg else ())
    rtl = RtlModel(cut_lut(design, top), top, machine.config, sum(bits), token_bits, reset_port, reset_active_low,
                   latency, operator, mask_width=(1 << token_bits) if mask_reg else 0)
    q = _OneCycle(rtl, machine, alphabet, latency, reset_port, reset_active_low, timeout_s, operator)
    q.reset_and_equivalence()
    if latency > 1:
        q.pipeline()
    q.invariant_and_properties()
    q.audit()
    table = lut_table(design, top, machine.table, sum(bits), token_bits, latency)
    table.exhaustive_evidence = verilog.name
    obligations = q.obligations + [table]
    for ob in obligations:
        ob.time_s = round(ob.time_s, 3)
    return obligations, rtl.prelude()


class _OneCycle:
    """The one-cycle (inductive) RTL obligations of :func:`rtl_obligations`: the RTL's registers
    before (``cur``) and after (``nxt``) one cycle, the reference machine's step on the decision
    stage's inputs from the same state, and :meth:`run`, which checks one claim with Z3 and
    records its obligation in ``obligations`` (in the order run)."""

    def __init__(self, rtl: RtlModel, machine: LutFsmArtefact, alphabet: dict[tuple, int], latency: int,
                 reset_port: str, reset_active_low: bool, timeout_s: float, operator: OperatorConfig | None = None):
        self.rtl, self.cfg, self.latency, self.timeout_s = rtl, machine.config, latency, timeout_s
        self.op = operator
        regs = {**REGISTERS, **(OPERATOR_REGISTERS if operator else {})}
        self.masks, bits, tw = list(machine.masks), list(machine.input_bits), machine.token_bits
        self.bits, self.tw = bits, tw
        self.obligations: list[Obligation] = []
        self.cur = {v: (rtl.cur(r) == 1 if v == "f" else _as_int(rtl.cur(r))) for r, v in regs.items()}
        self.nxt = {v: (rtl.nxt(r) == 1 if v == "f" else _as_int(rtl.nxt(r))) for r, v in regs.items()}
        self.sig = sig = decision_inputs(latency)
        self.addr = rtl.cur(sig["addr"])
        self.valid = rtl.cur(sig["valid"]) == 1
        entry = rtl.cur("lut_entry")
        inp = {"p": _as_int(z3.Extract(tw - 1, 0, entry)), "c": z3.Extract(tw, tw, entry) == 1,
               "pf": rtl.cur(sig["fault"]) == 1, "sv": rtl.cur(sig["viol"]) == 1}
        for j, inside in enumerate(self.boxes(self.addr)):
            inp[f"in{j}"] = inside
        if operator:
            k = latency - 1
            inp["cmd"] = _as_int(rtl.cur("op_cmd" if k == 0 else f"op_cmd_q{k}"))
            inp["arg"] = _as_int(rtl.cur("op_arg" if k == 0 else f"op_arg_q{k}"))
        self.inp = inp
        # the ghost-free part of fsm.invariant (proved on the reference)
        ref = FsmModel(self.cfg, self.masks, alphabet, operator=operator)
        s = dict(ref.state("rtlghost"))
        s.update(self.cur)
        self.ghost_free = _ghost_free_invariant(self.cfg, s, operator)
        # from latency 2 on, rule 3a's mask is a register loaded with the mask of the stage before
        # (docs/hdl.md, "Latency"): when the decision stage holds a step it holds the mask of its address,
        # as rtl.pipeline proves of every cycle with rst low (a step reaches the decision stage only
        # through such a cycle)
        self.mask_reg = "allowed" in rtl.widths and latency > 1
        if self.mask_reg:
            self.ghost_free = z3.And(self.ghost_free,
                                     z3.Implies(self.valid, rtl.cur("allowed") == self.mask_of(self.addr)))
        self.nxt_ref, self.why_ref = ref.step(s, inp)
        self.entry_ok = ref.input_ok(inp)
        self.rst = rtl.cur(reset_port) == (0 if reset_active_low else 1)
        # a state register no output depends on is removed by Yosys (opt_clean): with hysteresis 1 the
        # candidate k and the count h (rules 6/7 switch at once), d with cooldown 0, k and h under a
        # table that is never confident (rule 5 before them). The claims are then about the others, with
        # the removed ones free in the state the cycle starts from (a harder claim, not a weaker one:
        # it must hold whatever they hold)
        self.unread = {v for r, v in REGISTERS.items() if r in rtl.missing and r != "token"}

    def boxes(self, addr: z3.BitVecRef) -> list:
        """Per property box (machine.masks), whether ``addr`` (the LUT address, input 0 most
        significant) is in it: z3 Booleans."""
        out = []
        for m in self.masks:
            conds, shift = [], sum(self.bits)
            for lo, hi, b in zip(m.lo, m.hi, self.bits):
                shift -= b
                q = z3.Extract(shift + b - 1, shift, addr)
                conds += [z3.UGE(q, lo), z3.ULE(q, hi)]
            out.append(z3.And(conds))
        return out

    def mask_of(self, addr: z3.BitVecRef) -> z3.BitVecRef:
        """Rule 3a's allowed tokens at ``addr`` as one bit per token of the 2**token_bits (a token no
        action has is never allowed): the AND, over the property boxes holding ``addr``, of their
        allowed bits (docs/fsm.md)."""
        full, actions = 1 << self.tw, (1 << self.cfg.n_actions) - 1
        v = z3.BitVecVal(actions, full)
        for m, inside in zip(self.masks, self.boxes(addr)):
            v = v & z3.If(inside, z3.BitVecVal(int(m.allowed) & actions, full), z3.BitVecVal((1 << full) - 1, full))
        return v

    def run(self, oid: str, requirement: str, claim: str, bad: z3.BoolRef) -> None:
        """Check that ``bad`` (the claim's negation over one cycle) is unsatisfiable: PROVED on unsat,
        VIOLATED on sat, UNKNOWN otherwise (timeout ``timeout_s``)."""
        t = time.monotonic()
        ans, text = self.rtl.check(bad, self.timeout_s)
        ob = Obligation(oid, requirement, claim, method="Yosys write_smt2 + Z3, one cycle (inductive)",
                        k=1, smt2=text, assumes=[] if oid in ("rtl.reset", "rtl.pipeline", "rtl.audit") else
                        # the registered property mask: assumed here, proved by rtl.pipeline
                        ["fsm.invariant"] + (["rtl.pipeline"] if self.mask_reg else []))
        ob.verdict = {"unsat": Verdict.PROVED, "sat": Verdict.VIOLATED}.get(ans, Verdict.UNKNOWN)
        ob.time_s = time.monotonic() - t
        if ans == "sat":
            ob.detail = "one cycle of the RTL differs from the claim"
        self.obligations.append(ob)

    def record_missing(self, oid: str, requirement: str, claim: str, names: list[str]) -> None:
        """Record ``oid`` VIOLATED: the RTL lacks the signals ``names`` its claim is about."""
        ob = Obligation(oid, requirement, claim, method="Yosys write_smt2")
        ob.verdict, ob.detail = Verdict.VIOLATED, f"missing: {', '.join(names)}"
        self.obligations.append(ob)

    def reset_and_equivalence(self) -> None:
        """rtl.reset (a reset cycle gives the reference reset state and empties the pipeline) and
        rtl.equivalence (one cycle equals the reference transition on the decision stage's inputs
        when they are a step: the ``step`` port at latency 1, ``valid_q<L-1>`` at latency L > 1;
        otherwise every register of the decision stage holds and audit_valid is 0)."""
        rtl, nxt, C, latency = self.rtl, self.nxt, self.cfg.conservative, self.latency
        reset_values = {"t": nxt["t"] == C, "k": nxt["k"] == C, "h": nxt["h"] == 0, "d": nxt["d"] == 0,
                        "v": nxt["v"] == 0, "f": z3.Not(nxt["f"]), "r": nxt["r"] == 0}
        if self.op:
            reset_values.update(o=nxt["o"] == MODE_NONE, a=nxt["a"] == C, e=nxt["e"] == 0)
        reset_state = z3.And([c for v, c in reset_values.items() if v not in self.unread]
                             + [rtl.nxt("reason") == int(Reason.HOLD)])
        empty = z3.And([rtl.nxt(f"valid_q{k}") == 0 for k in range(1, latency)]) if latency > 1 else z3.BoolVal(True)
        self.run("rtl.reset", "rtl", "a cycle with rst high gives the reference reset state (token = C, reason = HOLD)"
                 + (" and empties the pipeline" if latency > 1 else ""),
                 z3.And(self.rst, z3.Not(z3.And(reset_state, empty))))
        same = z3.And([nxt[v] == self.nxt_ref[v] for v in self.nxt if v not in self.unread]
                      + [_as_int(rtl.nxt("reason")) == self.why_ref])
        held = z3.And([nxt[v] == self.cur[v] for v in self.nxt if v not in self.unread]
                      + [rtl.nxt("reason") == rtl.cur("reason"), rtl.nxt("audit_addr") == rtl.cur("audit_addr"),
                         rtl.nxt("audit_valid") == 0])
        where = "for every input" if latency == 1 else f"on the stage-{latency - 1} inputs for every input"
        self.run("rtl.equivalence", "fsm", f"from every state of the proved invariant, one RTL cycle (rst low) equals "
                 f"the reference transition {where} and every LUT output when {self.sig['valid']} is set, and holds "
                 "every register of the decision stage (token, reason, counters, audit_addr) with audit_valid 0 "
                 "when it is not",
                 z3.And(z3.Not(self.rst), self.ghost_free, z3.Not(z3.If(self.valid, same, held))))

    def pipeline(self) -> None:
        """rtl.pipeline (latency > 1): stage 1 loads the ports, stage k stage k-1, valid_q1 is step."""
        rtl, latency = self.rtl, self.latency
        # with no lockable action (sla.yaml operator.lock: []) op_arg is never read: Yosys removes its
        # stages, and the claim is about the others
        args = self.op is not None and self.op.lockable != 0
        loads = []
        for k in range(1, latency):
            for name in ("addr", "probe_fault", "sla_violation") + (("op_cmd",) if self.op else ()) + (
                    ("op_arg",) if args else ()):
                loads.append(rtl.nxt(f"{name}_q{k}") == rtl.cur(name if k == 1 else f"{name}_q{k - 1}"))
            loads.append(rtl.nxt(f"valid_q{k}") == (rtl.cur("step") if k == 1 else rtl.cur(f"valid_q{k - 1}")))
        if self.mask_reg:   # the mask register: the mask of the stage before the decision's
            loads.append(rtl.nxt("allowed") == self.mask_of(rtl.cur(mask_address(latency))))
        missing = [r for r in pipeline_registers(latency, sum(self.bits), rtl.tw if self.op else None)
                   if r in rtl.missing and (args or not r.startswith("op_arg_q"))]
        if self.mask_reg and "allowed" in rtl.missing:
            missing.append("allowed")
        if missing:
            self.record_missing("rtl.pipeline", "rtl", "the RTL has its pipeline registers", missing)
            return
        self.run("rtl.pipeline", "rtl", f"a cycle with rst low loads stage 1 of the input pipeline from addr, "
                 f"probe_fault, sla_violation (valid_q1 from step) and stage k from stage k-1, k = 2..{latency - 1}"
                 + (f", and the property mask register `allowed` with the mask of {mask_address(latency)}"
                    if self.mask_reg else "") + f": the decision reads the inputs of {latency - 1} "
                 f"cycle{'s' if latency > 2 else ''} before, valid when they were a step and no reset came since",
                 z3.And(z3.Not(self.rst), z3.Not(z3.And(loads))))

    def invariant_and_properties(self) -> None:
        """rtl.invariant (the range invariant on the RTL registers) and rtl.property.<id> per mask
        (the active token in the property's cells is an allowed one)."""
        cfg, nxt, not_rst = self.cfg, self.nxt, z3.Not(self.rst)
        nxt_ok = {v: ((cfg.conservative if v == "k" else 0) if v in self.unread else x) for v, x in nxt.items()}
        self.run("rtl.invariant", "fsm", "token and candidate are declared actions and every counter stays in range "
                 "(on the RTL registers)",
                 z3.And(not_rst, self.ghost_free, self.entry_ok, z3.Not(_ghost_free_invariant(cfg, nxt_ok, self.op))))
        for j, m in enumerate(self.masks):
            allowed = [a for a in range(cfg.n_actions) if (m.allowed >> a) & 1]
            self.run(f"rtl.property.{m.id}", m.id, f"in the cells of {m.id} the RTL's active token is one of {allowed}",
                     z3.And(not_rst, self.valid, self.ghost_free, self.entry_ok, self.inp[f"in{j}"],
                            z3.Not(self.inp["pf"]), z3.Not(z3.Or([nxt["t"] == a for a in allowed]))))

    def audit(self) -> None:
        """rtl.audit: audit_token/audit_reason follow token/reason; audit_valid and audit_addr say
        which cycles made a decision and on which address."""
        rtl, sig, valid, rst = self.rtl, self.sig, self.valid, self.rst
        absent = [a for a in AUDIT_PORT if a in rtl.missing]
        if absent:
            self.record_missing("rtl.audit", "rtl", "the RTL has the audit port", absent)
            return
        self.run("rtl.audit", "rtl", "the audit port: audit_token = token and audit_reason = reason in every state; "
                 "a reset cycle clears audit_valid; " + f"so does a cycle without a decision ({sig['valid']} low); any "
                                                        f"other cycle sets it and registers the address of that "
                                                        f"decision ({sig['addr']}) into audit_addr",
                 z3.Or(rtl.cur("audit_token") != rtl.cur("token"), rtl.cur("audit_reason") != rtl.cur("reason"),
                       z3.And(rst, rtl.nxt("audit_valid") != 0),
                       z3.And(z3.Not(rst), z3.Not(valid), rtl.nxt("audit_valid") != 0),
                       z3.And(z3.Not(rst), valid, z3.Or(rtl.nxt("audit_valid") != 1, rtl.nxt("audit_addr") != self.addr))))


def _ghost_free_invariant(cfg: FsmConfig, s: dict, operator: OperatorConfig | None = None) -> z3.BoolRef:
    """The part of fsm.invariant without ghosts (with the override state's ranges when ``operator``)."""
    n, H, D, W, R, C = cfg.n_actions, cfg.hysteresis, cfg.cooldown, cfg.violations_to_fallback, cfg.recovery, \
        cfg.conservative
    And, Implies, Not = z3.And, z3.Implies, z3.Not
    if operator is None:
        return And(s["t"] >= 0, s["t"] < n, s["k"] >= 0, s["k"] < n, s["h"] >= 0, s["h"] <= H - 1, s["d"] >= 0,
                   s["d"] <= D, s["v"] >= 0, s["v"] <= W - 1, s["r"] >= 0, s["r"] <= R - 1,
                   Implies(s["f"], And(s["t"] == C, s["k"] == C, s["h"] == 0, s["d"] == 0, s["v"] == 0)),
                   Implies(Not(s["f"]), s["r"] == 0), Implies(s["d"] > 0, s["h"] == 0))
    relaxed = not (operator.yield_fallback and operator.yield_probe)
    lockable = [a for a in range(n) if (operator.lockable >> a) & 1]
    L = operator.max_steps
    return And(s["t"] >= 0, s["t"] < n, s["k"] >= 0, s["k"] < n, s["h"] >= 0, s["h"] <= H - 1, s["d"] >= 0,
               s["d"] <= D, s["v"] >= 0, s["v"] <= W - 1, s["r"] >= 0, s["r"] <= R - 1,
               Implies(s["f"], And(z3.BoolVal(True) if relaxed else s["t"] == C, s["k"] == C, s["h"] == 0,
                                   s["d"] == 0, s["v"] == 0)),
               Implies(Not(s["f"]), s["r"] == 0), Implies(s["d"] > 0, s["h"] == 0),
               s["o"] >= MODE_NONE, s["o"] <= MODE_FORCE,
               Implies(s["o"] == MODE_NONE, And(s["a"] == C, s["e"] == 0)),
               Implies(s["o"] == MODE_LOCK, z3.Or([s["a"] == a for a in lockable] or [z3.BoolVal(False)])),
               Implies(s["o"] == MODE_FORCE, And(s["a"] == C, z3.BoolVal(bool(operator.force)))),
               Implies(s["o"] != MODE_NONE, And(s["e"] >= 1, s["e"] <= L - 1)))


def _sexp(text: str):
    """Parse one S-expression (symbols with |bars| kept whole)."""
    tokens, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "()":
            tokens.append(ch)
            i += 1
        elif ch.isspace():
            i += 1
        elif ch == "|":
            j = text.index("|", i + 1)
            tokens.append(text[i:j + 1])
            i = j + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in "()":
                j += 1
            tokens.append(text[i:j])
            i = j
    stack: list[list] = [[]]
    for t in tokens:
        if t == "(":
            stack.append([])
        elif t == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(t)
    return stack[0][0]


#: Addresses evaluated at once by :func:`lut_from_smt2` (memory: about 8 bytes per address for
#: each intermediate still needed; at 2^20 addresses all at once, the 20-bit reference's ~1,700
#: definitions took 13 GB).
LUT_EVAL_CHUNK = 1 << 16


def _lut_graph(design: str, top: str) -> tuple[list, dict, set, dict, int]:
    """The LUT read of the Yosys SMT-LIB ``design``: (accessor of ``lut_entry``, definitions by
    name, the addr functions, uses per definition reachable from the accessor, registers
    crossed). A register on the way (a pipelined read, docs/hdl.md "Latency") stands for its
    next-state expression one cycle earlier (``|top_t|``); every path from ``addr`` to
    ``lut_entry`` must cross the same number of registers. Raises ValueError otherwise."""
    defs: dict[str, list] = {}
    lines = design.splitlines()
    for line in lines:
        if line.startswith("(define-fun |") and line.count("(") == line.count(")"):  # one-line definitions
            e = _sexp(line.split(" ; ")[0])
            defs[e[1]] = e[4]
    registers: dict[str, list] = {}
    for line in lines:   # the transition relation: (= <next value> (|Q| next_state))
        if line.startswith("  (= ") and "next_state)" in line:
            e = _sexp(line.split(" ; ")[0])
            if isinstance(e[2], list) and e[2][1:] == ["next_state"] and e[2][0] not in defs:
                registers[e[2][0]] = e[1]
    addr_fns = set()
    for line in lines:
        if line.startswith("(define-fun |%s_n addr|" % top):
            addr_fns.add(_sexp(line)[4][0])  # the addr accessor's underlying function
    accessor = next(_sexp(ln)[4] for ln in lines if ln.startswith("(define-fun |%s_n lut_entry|" % top))

    # uses of each definition reachable from the accessor (one per occurrence), and the registers
    # crossed on the way to each (one number per definition, and one for addr)
    uses: dict[str, int] = {}
    depth: dict[str, int] = {}
    addr_depths: set[int] = set()
    stack = [(accessor, 0)]
    while stack:
        e, k = stack.pop()
        if not isinstance(e, list) or not e:
            continue
        head = e[0]
        if isinstance(head, str) and head.startswith("|"):
            if head in addr_fns:
                addr_depths.add(k)
                continue
            uses[head] = uses.get(head, 0) + 1
            if head in depth:
                if depth[head] != k:
                    raise ValueError(f"{head} is read {depth[head]} and {k} cycles back: not a table read")
                continue
            depth[head] = k
            if head in defs:
                stack.append((defs[head], k))
            elif head in registers:
                if k > 8:
                    raise ValueError("more than 8 registers between addr and lut_entry")
                stack.append((registers[head], k + 1))
            continue
        stack.extend((x, k) for x in e[1:])
    if len(addr_depths) > 1:
        raise ValueError(f"lut_entry mixes the addresses of different cycles ({sorted(addr_depths)} registers back)")
    defs.update(registers)
    return accessor, defs, addr_fns, uses, next(iter(addr_depths), 0)


def lut_registers(design: str, top: str) -> int:
    """Registers between ``addr`` and ``lut_entry`` in the Yosys SMT-LIB ``design`` (0: a
    combinational read; latency L reads through L - 1). Raises ValueError (:func:`_lut_graph`)."""
    return _lut_graph(design, top)[4]


def lut_from_smt2(design: str, top: str, address_bits: int, chunk: int = LUT_EVAL_CHUNK) -> np.ndarray:
    """Evaluate the RTL's ``lut_entry`` (as Yosys compiled it to SMT-LIB) at every address.

    A small evaluator of the SMT-LIB subset Yosys emits for the LUT (ite, =, or, and, not,
    bit-vector constants, extract, concat, bitwise and/or/not, unsigned comparisons),
    vectorised over ``chunk`` addresses at a time (every address in turn); a definition's
    values are dropped once its last use in the chunk has read them, so memory stays
    bounded by the chunk, not by 2^address_bits x definitions. Raises ValueError on anything else.
    """
    accessor, defs, addr_fns, uses, _ = _lut_graph(design, top)
    total = 1 << address_bits
    chunk = max(1, min(chunk, total))
    out = np.empty(total, dtype=np.int64)
    for start in range(0, total, chunk):
        addrs = np.arange(start, min(start + chunk, total), dtype=np.int64)
        out[start:start + addrs.size] = _eval_lut_chunk(accessor, defs, addr_fns, dict(uses), addrs, address_bits)
    return out


def _eval_lut_chunk(accessor, defs: dict, addr_fns: set, left: dict, addrs: np.ndarray, address_bits: int
                    ) -> np.ndarray:
    """:func:`lut_from_smt2` on the addresses ``addrs``; ``left``: uses still to come per definition
    (consumed here: a value is freed after its last use)."""
    cache: dict[str, tuple] = {}
    n = addrs.size

    def ev(e):
        if isinstance(e, str):
            # constants as numpy scalars: they broadcast, and cost no memory per address
            if e == "true":
                return np.True_, 0
            if e == "false":
                return np.False_, 0
            if e.startswith("#b"):
                return narrow(int(e[2:], 2), len(e) - 2), len(e) - 2
            raise ValueError(f"unsupported atom {e}")
        head = e[0]
        if isinstance(head, str) and head.startswith("|"):  # (|fn| state)
            if head in addr_fns:
                return addrs, address_bits
            val = cache.get(head)
            if val is None:
                val = ev(defs[head])
            left[head] -= 1
            if left[head] > 0:
                cache[head] = val
            else:
                cache.pop(head, None)
            return val
        if isinstance(head, list) and head[0] == "_" and head[1] == "extract":
            hi, lo = int(head[2]), int(head[3])
            v, _ = ev(e[1])
            return narrow((v >> lo) & ((1 << (hi - lo + 1)) - 1), hi - lo + 1), hi - lo + 1
        args = [ev(x) for x in e[1:]]
        if head == "ite":
            w = max(args[1][1], args[2][1])
            return np.where(args[0][0], widen(args[1][0], w), widen(args[2][0], w)), args[1][1]
        if head == "=":
            wide = max(w for _, w in args)
            return np.asarray(widen(args[0][0], wide) == widen(args[1][0], wide), dtype=bool), 0
        if head in ("or", "and"):
            out = args[0][0].copy()
            for v, _ in args[1:]:
                out = out | v if head == "or" else out & v
            return out, 0
        if head == "not":
            return ~args[0][0], 0
        if head == "concat":
            w_all = sum(w for _, w in args)
            v, w = widen(args[0][0], w_all), args[0][1]
            for v2, w2 in args[1:]:
                v, w = (v << w2) | widen(v2, w_all), w + w2
            return v, w
        if head in ("bvand", "bvor"):
            wide = max(w for _, w in args)
            out = widen(args[0][0], wide).copy()
            for v, _ in args[1:]:
                v = widen(v, wide)
                out = out & v if head == "bvand" else out | v
            return out, args[0][1]
        if head == "bvnot":
            return (~args[0][0]) & ((1 << args[0][1]) - 1), args[0][1]
        if head in ("bvuge", "bvule", "bvugt", "bvult"):
            wide = max(w for _, w in args)
            a, b = widen(args[0][0], wide), widen(args[1][0], wide)
            return {"bvuge": a >= b, "bvule": a <= b, "bvugt": a > b, "bvult": a < b}[head], 0
        raise ValueError(f"unsupported operator {head}")

    return np.broadcast_to(ev(accessor)[0], n)  # a constant LUT evaluates to a scalar


def lut_table(design: str, top: str, lut: bytes, address_bits: int, token_bits: int, latency: int = 1
              ) -> Obligation:
    """``rtl.lut_table``: the RTL's ``lut_entry``, as Yosys compiled it, evaluated at every
    address and compared with ``lut.hex`` (exhaustive); with ``latency`` L > 1 through the
    L - 1 registers of the pipelined read, which must be exactly that many on every path."""
    t0 = time.monotonic()
    ob = Obligation("rtl.lut_table", "lut", "the RTL's LUT entry equals lut.hex at every address",
                    method="Yosys SMT-LIB of the RTL evaluated at every address (exhaustive)")
    tokens, confident = split_table(lut)
    want = tokens.astype(np.int64) | (confident.astype(np.int64) << token_bits)
    try:
        got = lut_from_smt2(design, top, address_bits)
        regs = lut_registers(design, top)
    except (ValueError, KeyError, IndexError, StopIteration, OverflowError, TypeError) as exc:
        ob.verdict, ob.detail = Verdict.UNKNOWN, f"cannot evaluate the RTL's LUT: {exc}"
        return ob
    except RecursionError:   # the evaluator recurses along the LUT logic's expression depth
        ob.verdict, ob.detail = Verdict.UNKNOWN, "cannot evaluate the RTL's LUT: its logic is nested deeper than " \
                                                 f"the evaluator's recursion limit ({sys.getrecursionlimit()})"
        return ob
    if regs != latency - 1 and not np.all(got == got.flat[0] if got.size else True):
        ob.verdict = Verdict.VIOLATED
        ob.detail = f"the LUT is read through {regs} registers; latency {latency} needs {latency - 1}"
        return ob
    ob.time_s = time.monotonic() - t0
    bad = np.nonzero(got != want)[0]
    ob.verdict = Verdict.VIOLATED if bad.size else Verdict.PROVED
    ob.detail = (f"{bad.size} entries differ, first at address {int(bad[0])}" if bad.size
                 else f"{len(want)} entries equal" + (f" (read through {regs} registers)" if regs else ""))
    if bad.size:
        ob.counterexample = [{"addr": int(a), "rtl": int(got[a]), "lut": int(want[a])} for a in bad[:20]]
    return ob
