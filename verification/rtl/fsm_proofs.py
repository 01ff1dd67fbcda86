"""Z3 proofs of the LUT-FSM invariants over every input sequence (k-induction).

The reference transition relation of docs/fsm.md (rules 1-7 and 3a) is encoded in
Z3 over mathematical integers (no overflow to reason about). The machine sees an
address only through its **LUT entry**: the proposal p, the confident bit c and, per
sla.yaml forbid/require property, whether the address lies in the property's cells.
The set of those tuples that occur in the concrete LUT is computed exhaustively (one
pass over every address) and is the input alphabet of the proofs, together with
``probe_fault`` and ``sla_violation``; so "for all sequences of addresses" is covered
exactly, and every counterexample maps back to real addresses.

Ghost monitors (extra state, never emitted) turn the temporal requirements into
state invariants: steps since the last SWITCH, consecutive confident proposals of
the same action, consecutive SLA violations, consecutive compliant steps.

Method (Sheeran, Singh, Stålmarck, "Checking Safety Properties Using Induction and a
SAT-Solver", FMCAD 2000; de Moura, Rueß, Sorea, "Bounded Model Checking and
Induction", CAV 2003): for k = 1 … K, the **base** case asks for a run of at most k
steps from reset that breaks the property (a real counterexample trace), the **step**
case for k consecutive steps that keep the property and the strengthening invariant
followed by one that breaks it. Base and step unsat: PROVED. A base case sat:
VIOLATED with the trace. Neither within K: UNKNOWN (fails closed).

``fsm.invariant`` (counter ranges, declared tokens and the relations between state
and ghosts that make the others inductive) is proved first; the other obligations
assume it in their step case (sound: it holds in every reachable state).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import z3

from mi_certify.generator.core.lut import LutFsmArtefact
from mi_certify.generator.core.results import Verdict
from mi_certify.runtime.fsm import (MODE_FORCE, MODE_LOCK, MODE_NONE, Command, FsmConfig, MaskBox, OperatorConfig,
                                    OperatorReason, Reason, reason_name)

#: Deepest k tried by k-induction before a property is reported UNKNOWN.
K_MAX = 4


@dataclass
class Obligation:
    """One proof obligation with its verdict and evidence."""

    id: str
    requirement: str
    claim: str
    verdict: Verdict = Verdict.UNKNOWN
    method: str = ""
    k: int | None = None
    time_s: float = 0.0
    detail: str = ""
    smt2: str = ""
    counterexample: list | None = None
    assumes: list = field(default_factory=list)
    #: an exhaustive check has no SMT-LIB query: its evidence is this bundle file (e.g. the Verilog)
    exhaustive_evidence: str | None = None

    def index_entry(self, group: str, prelude: str | None = None) -> dict:
        """The proofs/index.json entry; ``prelude``: the SMT-LIB file the query needs first."""
        entry = {"id": self.id, "group": group, "requirement": self.requirement, "claim": self.claim,
                 "method": self.method, "verdict": self.verdict, "k": self.k, "assumes": self.assumes,
                 "evidence": f"proofs/{group}/{self.id}.smt2", "expect": "unsat",
                 "counterexample": f"proofs/{group}/{self.id}.cex.json" if self.counterexample else None}
        if self.exhaustive_evidence is not None:
            entry.update(kind="exhaustive", evidence=self.exhaustive_evidence, expect=None)
        elif prelude is not None:
            entry["prelude"] = prelude
        return entry


def entry_alphabet(machine: LutFsmArtefact) -> dict[tuple, int]:
    """Every (p, c, in_box_1, …, in_box_m) that occurs in the LUT → one address showing it
    (``machine``: :class:`~mi_certify.generator.core.lut.LutFsmArtefact`)."""
    tokens, confident, masks, bits = machine.tokens, machine.confident, machine.masks, machine.input_bits
    n = len(tokens)
    cols = [tokens.astype(np.int64), confident.astype(np.int64)]
    addr = np.arange(n, dtype=np.int64)
    for m in masks:
        inside = np.ones(n, dtype=bool)
        shift = sum(bits)
        for lo, hi, b in zip(m.lo, m.hi, bits):
            shift -= b
            q = (addr >> shift) & ((1 << b) - 1)
            inside &= (q >= lo) & (q <= hi)
        cols.append(inside.astype(np.int64))
    keys = np.stack(cols, axis=1)
    uniq, first = np.unique(keys, axis=0, return_index=True)
    return {tuple(int(v) for v in row): int(a) for row, a in zip(uniq, first)}


class FsmModel:
    """Z3 encoding of the reference LUT-FSM (docs/fsm.md), with ghost monitors.

    Args:
        cfg: FSM parameters; masks: allowed-action boxes (rule 3a); alphabet: from
        :func:`entry_alphabet`; use_mask: False encodes the machine without rule 3a
        (to show why it is there); operator: the sla.yaml ``operator:`` (docs/fsm.md, "Operator
        interventions"): adds the command inputs (cmd, arg), the override state (o, a, e) and
        the ghost gl (steps since the last accepted LOCK/FORCE, 1 at its step; 0 never);
        None encodes the machine without operator input, exactly as before;
        override_mask: False encodes an override that ignores the cell's allowed set (a
        mutant, to show the obligations catch it).
    """

    STATE = ("t", "k", "h", "d", "v", "f", "r", "g_sw", "q", "cc", "vv", "cs")
    OP_STATE = ("o", "a", "e", "gl")

    def __init__(self, cfg: FsmConfig, masks: list[MaskBox], alphabet: dict[tuple, int], use_mask: bool = True,
                 names: list[str] | None = None, operator: OperatorConfig | None = None, override_mask: bool = True):
        self.cfg, self.masks, self.alphabet, self.use_mask = cfg, masks, alphabet, use_mask
        self.names = names or [str(a) for a in range(cfg.n_actions)]
        self.op, self.override_mask = operator, override_mask
        self.state_names = self.STATE + (self.OP_STATE if operator else ())

    # --- variables -------------------------------------------------------------------
    def state(self, tag: str) -> dict:
        return {n: (z3.Bool if n == "f" else z3.Int)(f"{n}_{tag}") for n in self.state_names}

    def inputs(self, tag: str) -> dict:
        inp = {"p": z3.Int(f"p_{tag}"), "c": z3.Bool(f"c_{tag}"), "pf": z3.Bool(f"pf_{tag}"),
               "sv": z3.Bool(f"sv_{tag}")}
        for j in range(len(self.masks)):
            inp[f"in{j}"] = z3.Bool(f"in{j}_{tag}")
        if self.op:
            inp["cmd"], inp["arg"] = z3.Int(f"cmd_{tag}"), z3.Int(f"arg_{tag}")
        return inp

    def input_ok(self, i: dict) -> z3.BoolRef:
        """The LUT entry is one that occurs in the LUT (exhaustive alphabet); any command and argument
        (every integer: what is not an accepted LOCK, FORCE or RELEASE changes nothing)."""
        rows = []
        for key in self.alphabet:
            conj = [i["p"] == key[0], i["c"] == bool(key[1])]
            conj += [i[f"in{j}"] == bool(key[2 + j]) for j in range(len(self.masks))]
            rows.append(z3.And(conj))
        return z3.Or(rows)

    def allowed(self, i: dict, tok) -> z3.BoolRef:
        """Token ``tok`` is allowed by every property whose cells hold the address."""
        conds = []
        for j, m in enumerate(self.masks):
            ok = z3.Or([tok == a for a in range(self.cfg.n_actions) if (m.allowed >> a) & 1] or [z3.BoolVal(False)])
            conds.append(z3.Implies(i[f"in{j}"], ok))
        return z3.And(conds) if conds else z3.BoolVal(True)

    def reset(self, s: dict) -> z3.BoolRef:
        C, D = self.cfg.conservative, self.cfg.cooldown
        conj = [s["t"] == C, s["k"] == C, s["h"] == 0, s["d"] == 0, s["v"] == 0, z3.Not(s["f"]), s["r"] == 0,
                s["g_sw"] == D, s["q"] == -1, s["cc"] == 0, s["vv"] == 0, s["cs"] == 0]
        if self.op:
            conj += [s["o"] == MODE_NONE, s["a"] == C, s["e"] == 0, s["gl"] == 0]
        return z3.And(conj)

    def accepted(self, i: dict) -> tuple[z3.BoolRef, z3.BoolRef]:
        """(an accepted LOCK, an accepted FORCE) this step (docs/fsm.md, operator step 0)."""
        op = self.op
        lockable = [a for a in range(self.cfg.n_actions) if (op.lockable >> a) & 1]
        lock = z3.And(i["cmd"] == int(Command.LOCK), z3.Or([i["arg"] == a for a in lockable] or [z3.BoolVal(False)]))
        force = z3.And(i["cmd"] == int(Command.FORCE), z3.BoolVal(bool(op.force)))
        return lock, force

    def operate(self, s: dict, i: dict, nxt: dict, reason):
        """Operator steps 0, 2 and 3 around the base step (``nxt``, ``reason``): the next state
        with the override state and ghost, and the reason."""
        If, And, Or, Not = z3.If, z3.And, z3.Or, z3.Not
        C, L, op = self.cfg.conservative, self.op.max_steps, self.op
        lock, force = self.accepted(i)
        rel = i["cmd"] == int(Command.RELEASE)
        o1 = If(lock, MODE_LOCK, If(force, MODE_FORCE, If(rel, MODE_NONE, s["o"])))
        a1 = If(lock, i["arg"], If(force, C, If(rel, C, s["a"])))
        e1 = If(Or(lock, force), L, If(rel, 0, s["e"]))
        in_force = o1 != MODE_NONE
        yields = Or(And(z3.BoolVal(op.yield_probe), reason == int(Reason.PROBE_FAULT)),
                    And(z3.BoolVal(op.yield_fallback),
                        Or(reason == int(Reason.FALLBACK), reason == int(Reason.RECOVER))))
        ok_here = Or(i["pf"], self.allowed(i, a1)) if self.override_mask else z3.BoolVal(True)
        applies = And(in_force, Not(yields), ok_here)
        nxt = dict(nxt)
        nxt["t"] = If(applies, a1, nxt["t"])
        why = If(applies, If(o1 == MODE_LOCK, int(OperatorReason.LOCKED), int(OperatorReason.FORCED)), reason)
        stays = And(in_force, e1 > 1)
        nxt["o"], nxt["a"], nxt["e"] = If(stays, o1, MODE_NONE), If(stays, a1, C), If(stays, e1 - 1, 0)
        nxt["gl"] = If(Or(lock, force), 1, If(s["gl"] == 0, 0, If(s["gl"] >= L + 1, L + 1, s["gl"] + 1)))
        return nxt, why

    def step(self, s: dict, i: dict) -> tuple[dict, z3.ArithRef]:
        """Next state (expressions) and reason after one step from ``s`` with inputs ``i``."""
        cfg = self.cfg
        C, H, D, W, R = cfg.conservative, cfg.hysteresis, cfg.cooldown, cfg.violations_to_fallback, cfg.recovery
        If, And, Not = z3.If, z3.And, z3.Not
        pf, sv, p, c = i["pf"], i["sv"], i["p"], i["c"]

        def st(t, k, h, d, v, f, r):
            return {"t": t, "k": k, "h": h, "d": d, "v": v, "f": f, "r": r}

        r1 = If(sv, 0, s["r"] + 1)
        v1 = If(sv, s["v"] + 1, 0)
        same = p == s["k"]
        h1 = If(same, s["h"] + 1, 1)
        cases = [  # (condition, next, reason) in rule order
            (pf, st(C, C, 0, 0, 0, True, 0), Reason.PROBE_FAULT),
            (And(s["f"], r1 >= R), st(C, C, 0, D, 0, False, 0), Reason.RECOVER),
            (s["f"], st(C, C, 0, 0, 0, True, r1), Reason.FALLBACK),
            (v1 >= W, st(C, C, 0, 0, 0, True, 0), Reason.FALLBACK),
        ]
        if self.use_mask:
            cases.append((Not(self.allowed(i, s["t"])), st(C, C, 0, D, v1, False, 0), Reason.MASKED))
        cases += [
            (s["d"] > 0, st(s["t"], s["k"], s["h"], s["d"] - 1, v1, False, s["r"]), Reason.COOLDOWN),
            (Not(c), st(s["t"], s["k"], 0, 0, v1, False, s["r"]), Reason.LOW_CONFIDENCE),
            (p == s["t"], st(s["t"], s["k"], 0, 0, v1, False, s["r"]), Reason.HOLD),
            (h1 >= H, st(p, p, 0, D, v1, False, s["r"]), Reason.SWITCH),
        ]
        default = (st(s["t"], p, h1, 0, v1, False, s["r"]), Reason.PENDING)
        nxt, reason = dict(default[0]), z3.IntVal(int(default[1]))
        for cond, val, why in reversed(cases):
            nxt = {n: If(cond, val[n], nxt[n]) for n in nxt}
            reason = If(cond, int(why), reason)
        # ghosts
        switch = reason == int(Reason.SWITCH)
        nxt["g_sw"] = If(switch, 0, If(s["g_sw"] >= D, D, s["g_sw"] + 1))
        fresh = And(Not(pf), c)
        nxt["q"] = If(fresh, p, If(pf, -1, s["q"]))
        nxt["cc"] = If(fresh, If(p == s["q"], If(s["cc"] >= H, H, s["cc"] + 1), 1), 0)
        nxt["vv"] = If(sv, If(s["vv"] >= W, W, s["vv"] + 1), 0)
        nxt["cs"] = If(And(Not(sv), Not(pf)), If(s["cs"] >= R, R, s["cs"] + 1), 0)
        if self.op:
            return self.operate(s, i, nxt, reason)
        return nxt, reason

    # --- the obligations' formulas -------------------------------------------------
    def invariant(self, s: dict) -> z3.BoolRef:
        """Ranges (requirement 1) and the state/ghost relations that make the others inductive."""
        cfg = self.cfg
        n, H, D, W, R, C = cfg.n_actions, cfg.hysteresis, cfg.cooldown, cfg.violations_to_fallback, cfg.recovery, \
            cfg.conservative
        And, Implies, Not = z3.And, z3.Implies, z3.Not
        # an override that does not yield may keep another action active in fallback (docs/fsm.md);
        # the term is made where it was before the operator (Z3's search, and so a counterexample,
        # depends on the order terms are created in)
        relaxed = bool(self.op) and not (self.op.yield_fallback and self.op.yield_probe)
        return And(
            *self.operator_invariant(s),
            s["t"] >= 0, s["t"] < n, s["k"] >= 0, s["k"] < n,
            s["h"] >= 0, s["h"] <= H - 1, s["d"] >= 0, s["d"] <= D, s["v"] >= 0, s["v"] <= W - 1,
            s["r"] >= 0, s["r"] <= R - 1,
            s["g_sw"] >= 0, s["g_sw"] <= D, s["cc"] >= 0, s["cc"] <= H, s["vv"] >= 0, s["vv"] <= W,
            s["cs"] >= 0, s["cs"] <= R, s["q"] >= -1, s["q"] < n,
            Implies(s["f"], And(z3.BoolVal(True) if relaxed else s["t"] == C, s["k"] == C, s["h"] == 0, s["d"] == 0, s["v"] == 0, s["r"] <= s["cs"])),
            Implies(Not(s["f"]), And(s["r"] == 0, s["v"] == s["vv"])),
            Implies(s["d"] > 0, s["h"] == 0),
            Implies(And(Not(s["f"]), s["g_sw"] < D), s["d"] >= D - s["g_sw"]),
            Implies(s["h"] > 0, And(s["q"] == s["k"], s["cc"] >= s["h"])),
        )

    def operator_invariant(self, s: dict) -> list:
        """The override state's ranges and its relation to the ghost gl (none without an operator)."""
        if not self.op:
            return []
        And, Implies, Or = z3.And, z3.Implies, z3.Or
        C, L, op, n = self.cfg.conservative, self.op.max_steps, self.op, self.cfg.n_actions
        lockable = [a for a in range(n) if (op.lockable >> a) & 1]
        return [s["o"] >= MODE_NONE, s["o"] <= MODE_FORCE, s["gl"] >= 0, s["gl"] <= L + 1,
                Implies(s["o"] == MODE_NONE, And(s["a"] == C, s["e"] == 0)),
                Implies(s["o"] == MODE_LOCK, Or([s["a"] == a for a in lockable] or [z3.BoolVal(False)])),
                Implies(s["o"] == MODE_FORCE, And(s["a"] == C, z3.BoolVal(bool(op.force)))),
                Implies(s["o"] != MODE_NONE, And(s["e"] >= 1, s["e"] <= L - 1, s["gl"] >= 1, s["gl"] + s["e"] == L))]

    def operator_properties(self) -> list[tuple[str, str, str, callable]]:
        """The operator obligations (docs/fsm.md, "Operator interventions"); none without an operator."""
        if not self.op:
            return []
        And, Or, Not, Implies = z3.And, z3.Or, z3.Not, z3.Implies
        C, H, L = self.cfg.conservative, self.cfg.hysteresis, self.op.max_steps
        lockable = [a for a in range(self.cfg.n_actions) if (self.op.lockable >> a) & 1]
        lock_names = ", ".join(self.names[a] for a in lockable) if lockable else "none"

        def by_override(why):
            return Or(why == int(OperatorReason.LOCKED), why == int(OperatorReason.FORCED))

        def in_force(s, i):
            lock, force = self.accepted(i)
            return Or(lock, force, And(s["o"] != MODE_NONE, i["cmd"] != int(Command.RELEASE)))
        return [
            ("fsm.operator.lock_safe", "operator",
             "a lock or force never puts in force an action the current cell forbids (every step without a probe "
             "fault that an override decides leaves an action every property covering the cell allows), and a "
             f"step decided by a lock leaves a declared lockable action ({lock_names}), one decided by a force "
             "the conservative action",
             lambda s, i, s2, why: And(
                 Implies(And(by_override(why), Not(i["pf"])), self.allowed(i, s2["t"])),
                 Implies(why == int(OperatorReason.LOCKED), Or([s2["t"] == a for a in lockable] or [z3.BoolVal(False)])),
                 Implies(why == int(OperatorReason.FORCED), And(s2["t"] == C, z3.BoolVal(bool(self.op.force)))))),
            ("fsm.operator.expiry", "operator.max_lock_steps",
             f"an override is in force only within {L} steps of its LOCK/FORCE command (counted from and with the "
             "command's step), and a step decided by an override has one in force",
             lambda s, i, s2, why: And(Implies(in_force(s, i), And(s2["gl"] >= 1, s2["gl"] <= L)),
                                       Implies(by_override(why), in_force(s, i)))),
            ("fsm.operator.release", "operator",
             "after a RELEASE or an expiry (no override in force) every step decides by rules 1-7: no LOCKED/FORCED "
             f"reason, and the active action changes only to the conservative one or by a SWITCH after {H} "
             "consecutive confident proposals of the new action",
             lambda s, i, s2, why: Implies(Not(in_force(s, i)), And(
                 Not(by_override(why)), s2["o"] == MODE_NONE,
                 Or(s2["t"] == s["t"], s2["t"] == C, And(why == int(Reason.SWITCH), s2["cc"] >= H)))))]

    def _fallback_ok(self, s2: dict, why, vv: bool) -> z3.BoolRef:
        """fsm.fallback's conclusion: C in force, or (only where sla.yaml says an override does not
        yield: to the fallback or to probe faults for ``vv``, to probe faults otherwise) a step an
        override decided."""
        C, op = self.cfg.conservative, self.op
        if op is None or (op.yield_probe and (op.yield_fallback or not vv)):
            return s2["t"] == C
        return z3.Or(s2["t"] == C, why == int(OperatorReason.LOCKED), why == int(OperatorReason.FORCED))

    def _fallback_exception(self) -> str:
        op = self.op
        if op is None or (op.yield_probe and op.yield_fallback):
            return ""
        return (" (except steps an operator override decides: sla.yaml declares that it does not yield to "
                + " and ".join(w for w, y in (("the fallback", op.yield_fallback), ("probe faults", op.yield_probe))
                               if not y) + ")")

    def properties(self, spec_props) -> list[tuple[str, str, str, callable]]:
        """(id, requirement, claim, fn(s, i, s2, reason) -> Bool) for requirements 2-6."""
        cfg = self.cfg
        C, H, D, W, R = cfg.conservative, cfg.hysteresis, cfg.cooldown, cfg.violations_to_fallback, cfg.recovery
        out = [
            ("fsm.cooldown", "fsm.cooldown", f"after a SWITCH there is no other SWITCH for {D} steps",
             lambda s, i, s2, why: z3.Implies(why == int(Reason.SWITCH), s["g_sw"] >= D)),
            ("fsm.hysteresis", "fsm.hysteresis",
             f"a SWITCH to a happens only after {H} consecutive confident proposals of a (no probe fault)",
             lambda s, i, s2, why: z3.Implies(why == int(Reason.SWITCH),
                                              z3.And(s2["cc"] >= H, s2["t"] == i["p"], s2["q"] == i["p"]))),
            ("fsm.fallback", "fsm.violations_to_fallback",
             f"{W} consecutive SLA violations put the conservative action in force at that step; "
             "a probe fault in the same step" + self._fallback_exception(),
             lambda s, i, s2, why: z3.And(z3.Implies(s2["vv"] >= W, self._fallback_ok(s2, why, vv=True)),
                                          z3.Implies(i["pf"], self._fallback_ok(s2, why, vv=False)))),
            ("fsm.recovery", "fsm.recovery", f"fallback is left only after {R} consecutive compliant steps",
             lambda s, i, s2, why: z3.Implies(z3.And(s["f"], z3.Not(s2["f"])), s2["cs"] >= R)),
        ]
        out += self.operator_properties()
        for j, m in enumerate(self.masks):
            prop = next(p for p in spec_props if p.id == m.id)
            allowed = [a for a in range(cfg.n_actions) if (m.allowed >> a) & 1]
            verb = "never" if prop.kind == "forbid" else "only"
            named = [self.names[a] for a in (prop.forbid if prop.kind == "forbid" else prop.require)]
            out.append((f"fsm.property.{m.id}", m.id,
                        f"in the cells of {m.id} the active action is {verb} {' or '.join(named)} "
                        "(after every step without a probe fault)",
                        lambda s, i, s2, why, j=j, allowed=allowed: z3.Implies(
                            z3.And(i[f"in{j}"], z3.Not(i["pf"])), z3.Or([s2["t"] == a for a in allowed]))))
        return out


def _trace(model: FsmModel, m: z3.ModelRef, states: list, ins: list, reasons: list, ctx=None) -> list[dict]:
    """A counterexample run as JSON rows: inputs (a real address), state after, token, reason
    (``ctx``: the context the model ``m`` lives in, when the query was solved in a fresh one)."""
    rows = []
    for i, s2, why in zip(ins, states[1:], reasons):
        def ev(x):
            return m.eval(x if ctx is None else x.translate(ctx), model_completion=True)
        key = (ev(i["p"]).as_long(), int(z3.is_true(ev(i["c"]))),
               *[int(z3.is_true(ev(i[f"in{j}"]))) for j in range(len(model.masks))])
        pf = z3.is_true(ev(i["pf"]))
        row = {"addr": model.alphabet.get(key, 0), "probe_fault": pf, "sla_violation": z3.is_true(ev(i["sv"])),
               "token": ev(s2["t"]).as_long(), "reason": reason_name(ev(why).as_long()),
               "state": {n: (z3.is_true(ev(s2[n])) if n == "f" else ev(s2[n]).as_long())
                         for n in ("t", "k", "h", "d", "v", "f", "r")}}
        if model.op:
            row["cmd"], row["arg"] = ev(i["cmd"]).as_long(), ev(i["arg"]).as_long()
            row["operator_state"] = {n: ev(s2[n]).as_long() for n in ("o", "a", "e")}
        rows.append(row)
    return rows


def _unroll(model: FsmModel, tag: str, n: int):
    states = [model.state(f"{tag}{0}")]
    ins, reasons, cons = [], [], []
    for t in range(n):
        i = model.inputs(f"{tag}{t}")
        nxt, why = model.step(states[-1], i)
        s2 = model.state(f"{tag}{t + 1}")
        cons += [model.input_ok(i)] + [s2[k] == nxt[k] for k in s2]
        ins.append(i)
        reasons.append(why)
        states.append(s2)
    return states, ins, reasons, cons


def _solver(formula: z3.BoolRef, timeout_s: float) -> tuple[z3.Solver, z3.Context]:
    """A solver holding ``formula`` read into a new Z3 context from its SMT-LIB text, and that
    context. The term ids of the copy follow that text alone (Z3's search, and so a
    counterexample, depends on them; in the main context, and in a context the formula is
    translated into, they depend on what else the process made and freed before): the same
    query gives the same answer and trace in any process. The machines with an operator use it;
    the others keep their main-context runs (their bundles stay as they were)."""
    copy = formula.translate(z3.Context())   # printed alone (see _smt2), then read back: the new
    printer = z3.Solver(ctx=copy.ctx)        # context's terms are made in the order of that text
    printer.add(copy)
    ctx = z3.Context()
    solver = z3.Solver(ctx=ctx)
    solver.set("timeout", int(timeout_s * 1000))
    solver.add(z3.parse_smt2_string(printer.to_smt2(), ctx=ctx))
    return solver, ctx


def prove(model: FsmModel, ob: Obligation, prop, assume_inv: bool, k_max: int = K_MAX, timeout_s: float = 120.0,
          fresh: bool = False) -> Obligation:
    """k-induction of ``prop(s, i, s2, reason)`` (or of the invariant when prop is None); ``fresh``:
    every query solved and printed in a context of its own (:func:`_solver`, :func:`_smt2`)."""
    t0 = time.monotonic()
    for k in range(1, k_max + 1):
        # base: a run of at most k steps from reset that breaks the property
        states, ins, reasons, cons = _unroll(model, "b", k)
        bad = [z3.Not(prop(states[t], ins[t], states[t + 1], reasons[t])) if prop else
               z3.Not(model.invariant(states[t + 1])) for t in range(k)]
        base = z3.And([model.reset(states[0])] + cons + [z3.Or(bad)])
        # step: k steps that keep it (and the invariant), then one that breaks it
        ss, si, sr, scons = _unroll(model, "s", k + 1)
        keep = []
        for t in range(k):
            keep.append(prop(ss[t], si[t], ss[t + 1], sr[t]) if prop else model.invariant(ss[t]))
        inv = [model.invariant(x) for x in ss] if assume_inv else []
        last = z3.Not(prop(ss[k], si[k], ss[k + 1], sr[k])) if prop else \
            z3.And(model.invariant(ss[k]), z3.Not(model.invariant(ss[k + 1])))
        step = z3.And(scons + keep + inv + [last])
        ctx = None
        if fresh:
            solver, ctx = _solver(base, timeout_s)
        else:
            solver = z3.Solver()
            solver.set("timeout", int(timeout_s * 1000))
            solver.add(base)
        res_base = solver.check()
        if res_base == z3.sat:
            m = solver.model()
            ob.verdict, ob.k, ob.method = Verdict.VIOLATED, k, "bounded model checking from reset (Z3)"
            ob.counterexample = _trace(model, m, states, ins, reasons, ctx)
            ob.detail = f"counterexample of {len(ob.counterexample)} steps"
            ob.smt2 = _smt2(base, f"{ob.id}: a run of <= {k} steps from reset that breaks: {ob.claim}",
                            fresh)
            ob.time_s = time.monotonic() - t0
            return ob
        if fresh:
            solver, _ctx = _solver(step, timeout_s)
        else:
            solver = z3.Solver()
            solver.set("timeout", int(timeout_s * 1000))
            solver.add(step)
        res_step = solver.check()
        if res_base == z3.unsat and res_step == z3.unsat:
            ob.verdict, ob.k = Verdict.PROVED, k
            ob.method = f"k-induction (Z3), k = {k}" + ("; assumes fsm.invariant" if assume_inv else "")
            ob.assumes = ["fsm.invariant"] if assume_inv else []
            ob.smt2 = _smt2(z3.Or(base, step), f"{ob.id}: base (a run of <= {k} steps from reset) or step "
                                                f"({k} steps keeping it, then one breaking it) breaks: {ob.claim}",
                            fresh)
            ob.time_s = time.monotonic() - t0
            return ob
        if res_base == z3.unknown or res_step == z3.unknown:
            break
    ob.verdict, ob.method = Verdict.UNKNOWN, f"k-induction (Z3) up to k = {k_max}"
    ob.detail = "neither a counterexample nor an inductive step within the bound"
    ob.smt2 = _smt2(z3.BoolVal(True), f"{ob.id}: undecided")
    ob.time_s = time.monotonic() - t0
    return ob


def canonical_smt2(text: str) -> str:
    """Rename Z3's let-bound names (``$x123``, ``?x45``, ``a!6``; numbered by internal AST ids,
    which depend on what else the process built) by order of first appearance, so the
    same formula always prints the same bytes."""
    names: dict[str, str] = {}

    def rename(m: re.Match) -> str:
        tok = m.group(0)
        if tok not in names:
            names[tok] = f"{tok[0] if tok[0] in '$?' else 'a!'}{'x' if tok[0] in '$?' else ''}{len(names)}"
        return names[tok]
    return re.sub(r"[$?]x\d+|\ba!\d+", rename, text)


def _smt2(formula: z3.BoolRef, comment: str, fresh: bool = False) -> str:
    """The SMT-LIB text of ``formula``. ``fresh``: printed from a copy in a new Z3 context (Z3's
    printer shares a subterm by ``let`` when its reference count is above one, and the count
    includes handles the process holds elsewhere; in a context of its own only the formula holds
    them, so the same formula prints the same bytes whatever else the process built). Used for
    the machines with an operator; the others keep the text they always had."""
    if fresh:
        formula = formula.translate(z3.Context())
    s = z3.Solver(ctx=formula.ctx)
    s.add(formula)
    return f"; mi-certify proof obligation. Expected answer: unsat.\n; {comment}\n" + canonical_smt2(s.to_smt2())


def prove_fsm(machine: LutFsmArtefact, spec_props, use_mask: bool = True, operator: OperatorConfig | None = None,
              override_mask: bool = True, fresh: bool | None = None) -> list[Obligation]:
    """Every FSM obligation (requirements 1-6 of the FSM issue) on the concrete LUT-FSM.

    Args:
        machine: the LUT-FSM (:class:`~mi_certify.generator.core.lut.LutFsmArtefact`: table, masks,
            FSM parameters, widths, action names for the claims).
        spec_props: the sla.yaml properties (for the claims).
        use_mask: False proves the machine without rule 3a (its counterexamples become
            directed co-simulation sequences).
        operator: sla.yaml ``operator:`` (:meth:`~mi_certify.generator.core.spec.OperatorSpec.config`);
            adds the command input and the fsm.operator.* obligations; None: no operator input.
        override_mask: False proves a mutant whose override ignores the cell's allowed set.
        fresh: each query solved and printed in a Z3 context of its own (:func:`_solver`): the same
            bytes and traces whatever the process did before (default: with an operator; the
            build also asks it for the machine without rule 3a of a spec with an operator). The
            specs without an operator keep the main context, so their bundles stay as they were.
    Method: k-induction with Z3 (Sheeran, Singh, Stålmarck, FMCAD 2000) on the encoding of
    docs/fsm.md.
    """
    cfg, masks, names = machine.config, list(machine.masks), list(machine.actions)
    alphabet = entry_alphabet(machine)
    model = FsmModel(cfg, masks, alphabet, use_mask, names, operator, override_mask)
    fresh = operator is not None if fresh is None else fresh
    inv = prove(model, Obligation("fsm.invariant", "fsm",
                                  "the active and candidate tokens are declared actions and every counter stays in "
                                  "its range (with the state relations that make the rest inductive)"),
                None, assume_inv=False, fresh=fresh)
    out = [inv]
    for oid, req, claim, fn in model.properties(spec_props):
        ob = Obligation(oid, req, claim)
        if inv.verdict != Verdict.PROVED:
            ob.detail = "not attempted: fsm.invariant is not proved"
            out.append(ob)
            continue
        out.append(prove(model, ob, fn, assume_inv=True, fresh=fresh))
    return out


def write_proofs(obligations: list[Obligation], d: Path, group: str, prelude: tuple[str, str] | None = None
                 ) -> list[dict]:
    """Write ``proofs/<group>/<id>.smt2`` (and ``.cex.json``) of each obligation (none for an
    exhaustive check, whose evidence is a bundle file); return their proofs/index.json entries.

    ``prelude``: (bundle path, SMT-LIB text) that every query of the group needs first (the
    RTL's design); written once and named in each entry."""
    pdir = d / "proofs" / group
    pdir.mkdir(parents=True, exist_ok=True)
    if prelude is not None:
        (d / prelude[0]).write_text(prelude[1], encoding="utf-8")
    entries = []
    for ob in obligations:
        if ob.exhaustive_evidence is None:
            (pdir / f"{ob.id}.smt2").write_text(ob.smt2, encoding="utf-8")
        if ob.counterexample:
            (pdir / f"{ob.id}.cex.json").write_text(json.dumps(ob.counterexample, indent=1) + "\n", encoding="utf-8")
        entries.append(ob.index_entry(group, prelude[0] if prelude is not None else None))
    return entries
