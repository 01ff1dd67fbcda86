"""The formal harness for the integrator's own tools (issue 35): SystemVerilog assertions of the
sla.yaml properties and the FSM invariants over the ports of the generated controller, and a
SymbiYosys job that proves them (``templates/formal/``; docs/hdl.md, "SVA and SymbiYosys").

The harness is an observer: ``<module>_formal`` instantiates ``<module>`` and asserts over its
ports only, so it holds for the RTL as an integrator receives it (no hierarchical reference, no
``bind``: open-source Yosys 0.70 parses neither; a commercial tool reads the same file). It
delays ``addr`` and ``probe_fault`` through L register stages itself (L = ``hdl.latency``, docs/hdl.md
"Latency") so that each assertion names the inputs of the decision on the outputs, and it holds
the LUT (lut.hex, ``{confident, token}`` per address) as its own function, so a flipped entry
in the RTL's table is seen on the outputs. The assertions are immediate assertions in
``always @*`` blocks (IEEE 1800-2017 16.3), the subset that Yosys' ``read_verilog -formal``
accepts; concurrent ``assert property`` with sequences needs a commercial front end.

Source: the semantics are docs/fsm.md (rules 1-7, 3a, operator interventions) and docs/hdl.md
(latency, reset, audit port); each assertion's label names the rule it checks."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from mi_certify.runtime.fsm import OperatorReason, Reason
from mi_certify.templates import environment

from mi_certify.generator.build.emit_common import SourceHashes
from mi_certify.generator.build.verilog_parts import address_fields, lut_entries
from mi_certify.generator.core.lut import LutFsmArtefact
from mi_certify.generator.core.spec import Spec


@dataclass(frozen=True)
class Assertion:
    """One labelled assertion of the harness: label (``a_<name>``), the rule of docs/fsm.md or
    docs/hdl.md it checks, and what it says in one sentence."""

    label: str
    source: str
    claim: str


def harness_name(spec: Spec) -> str:
    """Module and file stem of the harness: ``<module>_formal`` (file ``<module>_formal.sv``)."""
    return f"{spec.module_name}_formal"


def sby_name(spec: Spec) -> str:
    """The SymbiYosys job file: ``<module>.sby``."""
    return f"{spec.module_name}.sby"


def proof_depth(spec: Spec, latency: int) -> int:
    """k of the k-induction (SymbiYosys ``depth``): L + H + 3.

    The L pipeline stages of the harness and the controller hold consistent values after L steps,
    and each assertion is a function of one step's inputs and the state it starts from: L + 1
    steps make them inductive. With an operator, the override registers could start the induction
    step in a state no command sets (a force of another action, a lock of an action that is not
    lockable), held unseen through a fallback for as long as the override counter runs (63 steps
    for 60, measured: the induction failed on a_locked at 9): the Verilog states the override's
    reachable states as its own assertion ``a_op_state`` under ```ifdef FORMAL`` (:func:`rtl_assertions`),
    proved by the same job, which excludes them (the depth was L + H + 3 + 2^b - 1 before, 72 for the
    reference controller: its proof took 75.8 s, 7.2 s at 9). H + 2 more steps let the base case reach
    a SWITCH from reset, so a flipped LUT entry gives a counterexample trace from reset (FAIL), not
    only a failed induction step (UNKNOWN)."""
    return latency + spec.fsm.hysteresis + 3


def rtl_assertions(spec: Spec) -> list[Assertion]:
    """The assertions the emitted Verilog itself carries under ```ifdef FORMAL`` (none for synthesis,
    simulation or lint), proved by the harness' job with the harness' own: ``a_op_state`` with an
    operator (the override in force is one a command sets)."""
    if not spec.operator:
        return []
    return [Assertion("a_op_state", f"docs/fsm.md, operator interventions ({spec.module_name}.v, under `ifdef FORMAL)",
                      "the override in force is none, a lock of a lockable action or a force of the "
                      "conservative action (an invariant that keeps the k-induction at L + H + 3 steps)")]


def assertions(spec: Spec, machine: LutFsmArtefact) -> list[Assertion]:
    """The assertions the job of :func:`emit_sva` proves: the harness', in its order (one per property
    mask), then the Verilog's own (:func:`rtl_assertions`)."""
    out = [Assertion("a_token_range", "docs/fsm.md, state", "the active token is a declared action"),
           Assertion("a_reason_range", "docs/fsm.md, reasons", "the reason is a code this configuration emits"),
           Assertion("a_audit_copy", "docs/hdl.md, audit port", "audit_token = token and audit_reason = reason"),
           Assertion("a_audit_valid", "docs/hdl.md, latency and reset",
                     "audit_valid is high exactly when no reset came in the last L cycles"
                     + (" (nor in this one: the reset is asynchronous)" if spec.hdl.reset == "async" else "")),
           Assertion("a_audit_addr", "docs/hdl.md, audit port", "a logged decision names the addr it was made on"),
           Assertion("a_reset_state", "docs/hdl.md, reset",
                     "without a decision (after a reset) token is the conservative action and reason HOLD"),
           Assertion("a_probe_fault", "docs/fsm.md, rule 1",
                     "a decision on a probe fault is PROBE_FAULT with the conservative action"
                     + (" (or an override that does not yield to probe faults)" if _no_yield_probe(spec) else "")),
           Assertion("a_conservative", "docs/fsm.md, rules 1-3, 3a",
                     "PROBE_FAULT, FALLBACK, RECOVER and MASKED decisions emit the conservative action"),
           Assertion("a_switch", "docs/fsm.md, rules 6-7",
                     "a SWITCH emits the LUT's proposal of the decision's cell, and that entry is confident"),
           Assertion("a_low_confidence", "docs/fsm.md, rule 5",
                     "a LOW_CONFIDENCE decision is made on a cell whose LUT entry is not confident"),
           Assertion("a_keep", "docs/fsm.md, rules 4-6",
                     "HOLD, PENDING, COOLDOWN and LOW_CONFIDENCE keep the active token")]
    out += [Assertion(property_label(m.id), f"sla.yaml property {m.id} (docs/fsm.md, rule 3a)",
                      f"in the cells of {m.id}, without a probe fault, the active token is one of "
                      f"{', '.join(spec.actions[a].name for a in range(len(spec.actions)) if (m.allowed >> a) & 1)}")
            for m in machine.masks]
    if spec.operator:
        out += [Assertion("a_locked", "docs/fsm.md, operator interventions",
                          "a LOCKED decision emits a lockable action"),
                Assertion("a_forced", "docs/fsm.md, operator interventions",
                          "a FORCED decision emits the conservative action")]
    return out + rtl_assertions(spec)


def property_label(pid: str) -> str:
    """The assertion label of sla.yaml property ``pid``: ``a_property_<pid>``, every character that
    is not a letter, digit or ``_`` as ``_``."""
    return "a_property_" + re.sub(r"[^A-Za-z0-9_]", "_", pid)


def harness_document(spec: Spec, machine: LutFsmArtefact, latency: int) -> dict:
    """What sva.json says of the emitted harness: ``job`` and ``harness`` file names, ``depth``
    (:func:`proof_depth`) and ``assertions`` (label, source, claim; :func:`assertions`). The build
    writes it, ``mi-certify check`` derives it again."""
    return {"job": sby_name(spec), "harness": f"{harness_name(spec)}.sv", "depth": proof_depth(spec, latency),
            "assertions": [{"label": a.label, "source": a.source, "claim": a.claim} for a in assertions(spec, machine)]}


def job_files(spec: Spec, folder) -> list:
    """The files the job of ``spec`` lists, in ``folder`` (a pathlib.Path): the Verilog (a ROM's
    contents inline) and the harness."""
    return [folder / f"{spec.module_name}.v", folder / f"{harness_name(spec)}.sv"]


def _no_yield_probe(spec: Spec) -> bool:
    return bool(spec.operator) and not spec.operator.config().yield_probe


def emit_sva(spec: Spec, machine: LutFsmArtefact, hashes: SourceHashes, version: str, latency: int
             ) -> dict[str, str]:
    """``{<module>_formal.sv: text, <module>.sby: text}`` for the controller of ``spec`` and
    ``machine`` at decision latency ``latency`` (1-3; the emitted Verilog's).
    A pure function of its inputs (byte-identical output)."""
    fields = address_fields(spec)
    entries = lut_entries(spec, machine)
    values, counts = np.unique(entries, return_counts=True)
    default = int(values[int(np.argmax(counts))])
    tw, ab = spec.token_bits, spec.address_bits
    ew = tw + 1
    cases = [(int(a), int(e)) for a, e in enumerate(entries.tolist()) if int(e) != default]
    op = spec.operator.config() if spec.operator else None
    reasons = [r for r in Reason] + ([r for r in OperatorReason] if spec.operator else [])
    masks = []
    for m in machine.masks:
        conds = []
        for f, lo, hi in zip(fields, m.lo, m.hi):
            if lo > 0:
                conds.append(f"(f_addr_d[{f['msb']}:{f['lsb']}] >= {f['bits']}'d{lo})")
            if hi < (1 << f["bits"]) - 1:
                conds.append(f"(f_addr_d[{f['msb']}:{f['lsb']}] <= {f['bits']}'d{hi})")
        allowed = [a for a in range(len(spec.actions)) if (m.allowed >> a) & 1]
        masks.append({"id": m.id, "label": property_label(m.id), "cond": " && ".join(conds) or "1'b1",
                      "allowed": " || ".join(f"(token == {tw}'d{a})" for a in allowed) or "1'b0",
                      "names": ", ".join(spec.actions[a].name for a in allowed)})
    active = "1'b1" if spec.hdl.reset_polarity == "high" else "1'b0"
    variables = dict(
        spec=spec, hashes=hashes, version=version, latency=latency, tw=tw, ab=ab, ew=ew,
        name=harness_name(spec), reset_port=spec.hdl.reset_port, reset_active=active,
        n_actions=len(spec.actions), conservative=spec.conservative,
        reasons=[(r.name, int(r)) for r in reasons], max_reason=max(int(r) for r in reasons),
        cases=cases, default=default, masks=masks, operator=op,
        locked_expr=" || ".join(f"(token == {tw}'d{a})" for a in range(len(spec.actions))
                                if op and (op.lockable >> a) & 1) or "1'b0",
        no_yield_probe=_no_yield_probe(spec), assertions=assertions(spec, machine),
        depth=proof_depth(spec, latency),
        sby=sby_name(spec))
    env = environment()
    return {f"{harness_name(spec)}.sv": env.get_template("formal/harness.sv.j2").render(**variables),
            sby_name(spec): env.get_template("formal/job.sby.j2").render(**variables)}
