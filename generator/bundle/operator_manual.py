"""The operator manual of a build whose sla.yaml declares ``operator:`` (issue 37, step 5).

What may be overridden by a person and how, what never, and what backs each sentence: a proof
obligation id with its verdict in this bundle, or, where no proof exists, the words "checked by
test" or "assumed" and who must ensure it. It follows the operator-manual requirement of the
design this project comes from (which decisions may be overridden by a person, which must stay
automatic) and IEC 62304 §5.2 / ISO 26262-8 §11 practice of tracing each user-facing statement
to its verification. The same rows feed ``operator.md`` and the "Operator manual" section of
report.html (both rendered by :func:`mi_certify.generator.bundle.report.write_report`).
"""

from __future__ import annotations

from mi_certify.generator.core.spec import Spec

__all__ = ["manual"]


def _backing(ids: list[str], verdicts: dict[str, str]) -> list[dict]:
    return [{"id": i, "verdict": verdicts.get(i, "not run")} for i in ids]


def _region(spec: Spec, p) -> str:
    if not p.when:
        return "the whole envelope"
    return ", ".join(f"{spec.inputs[k].name} in [{lo:g}, {hi:g}]" for k, lo, hi in p.when)


def manual(spec: Spec, obligations: list[dict]) -> dict | None:
    """The operator manual's content, or None without ``operator:``.

    Returns: {"actions": one row per action (name, conservative, override: the words of how it may be
    overridden, never_where: the property regions where a lock of it is never in force, backed_by:
    [{"id", "verdict"}]), "rules": [{"text", "backed_by", "basis"}] (basis: "proved" when every backing
    obligation is proved, else "not proved: …" or "checked by test" / "assumed …"), "keys", "max_steps"}.
    """
    op = spec.operator
    if op is None:
        return None
    v = {o["id"]: o["verdict"] for o in obligations}
    names = [a.name for a in spec.actions]
    C, L = spec.conservative, op.max_lock_steps
    prop_ids = [f"fsm.property.{p.id}" for p in spec.properties if p.kind != "output"]
    rows = []
    for t, a in enumerate(spec.actions):
        how = []
        if t in op.lock:
            how.append(f"lock (`lock {a.name}`): the lock is in force for at most {L} steps (then the machine's own "
                       "rules decide, and the action may stay active until they switch)")
        if t == C and op.force_conservative:
            how.append(f"force (`force`: the conservative action), the force in force for at most {L} steps")
        never = [f"{p.id} ({_region(spec, p)})" for p in spec.properties
                 if (t in p.forbid or (p.require and t not in p.require))]
        ids = ["fsm.operator.lock_safe", "fsm.operator.expiry"] if how else ["fsm.operator.lock_safe"]
        rows.append({"action": a.name, "token": t, "conservative": t == C,
                     "override": "; ".join(how) if how else "never: only the automatic machine puts it in force",
                     "never_where": never if how else [], "backed_by": _backing(ids, v)})
    yield_pf = ("A probe fault wins over a lock or force: the step runs the conservative action"
                if op.yield_to_probe_fault else
                "A lock or force stays in force during a probe fault (yield_to_probe_fault: false); the property "
                "obligations cover steps without a probe fault only, so this declaration is assumed safe by the "
                "integrator (the proofs do not cover it)")
    yield_fb = (f"The SLA fallback and its recovery win over a lock or force (conservative action "
                f"{names[C]})" if op.yield_to_fallback else
                "A lock or force stays in force during the SLA fallback (yield_to_fallback: false); fsm.fallback's "
                "claim excepts the steps an override decides")
    rules = [
        {"text": "Only the actions marked above can be put in force by a person: a step decided by a lock leaves a "
                 "declared lockable action, one decided by a force the conservative action.",
         "ids": ["fsm.operator.lock_safe"]},
        {"text": "A lock never puts in force an action that a property forbids in the current LUT cell; there the "
                 "machine decides as if there were no lock.",
         "ids": ["fsm.operator.lock_safe", *prop_ids]},
        {"text": f"A lock or force ends at the latest {L} controller steps after its command, counted with the "
                 "command's step: a forgotten lock expires; a new command restarts the count.",
         "ids": ["fsm.operator.expiry"]},
        {"text": "After a release or an expiry the machine decides by its own rules again: the active action stays "
                 f"until a SWITCH after {spec.fsm.hysteresis} consecutive confident proposals (and the cooldown), or "
                 "the conservative action on a fault, fallback or mask.",
         "ids": ["fsm.operator.release", "fsm.hysteresis", "fsm.cooldown"]},
        {"text": yield_pf + ".", "ids": ["fsm.fallback"] if op.yield_to_probe_fault else [],
         "basis_if_none": "assumed (integrator)"},
        {"text": yield_fb + ".", "ids": ["fsm.fallback", "fsm.recovery"]},
        {"text": "The Verilog implements the same machine, command port (op_cmd, op_arg) included.",
         "ids": ["rtl.equivalence", "rtl.invariant"] + (["rtl.pipeline"] if spec.hdl.latency_cycles > 1 else [])},
        {"text": "The generated Python and C runtimes step the same machine on every co-simulated cycle, commands "
                 "included (cosim.json, c_runtime.json): checked by test on the co-simulation's vectors, not proved.",
         "ids": [], "basis_if_none": "checked by test"},
        {"text": f"Who may issue commands: key ids {', '.join(op.keys)} (sla.yaml operator.keys). `mi-certify run` "
                 "accepts a command only with a valid HMAC-SHA256 signature under the key of its id, a number n above "
                 "the last one of that key, before its expiry time; it refuses a lock the current cell forbids "
                 "(forbidden_here) and logs every command it receives, accepted or refused, in the audit log "
                 "(docs/operator.md). Commands written to the bus register OP are not authenticated. This intake is checked by tests, not proved; keeping the keys "
                 "secret is the integrator's responsibility.",
         "ids": [], "basis_if_none": "checked by test; keys: assumed (integrator)"},
    ]
    for r in rules:
        r["backed_by"] = _backing(r.pop("ids"), v)
        if not r["backed_by"]:
            r["basis"] = r.pop("basis_if_none")
        else:
            r.pop("basis_if_none", None)
            open_ = [b["id"] for b in r["backed_by"] if b["verdict"] != "proved"]
            r["basis"] = "proved" if not open_ else f"not proved in this bundle: {', '.join(open_)}"
    for row in rows:
        open_ = [b["id"] for b in row["backed_by"] if b["verdict"] != "proved"]
        row["basis"] = "proved" if not open_ else f"not proved in this bundle: {', '.join(open_)}"
    return {"actions": rows, "rules": rules, "keys": list(op.keys), "max_steps": L,
            "force": op.force_conservative, "controller": spec.name}
