"""Every proof obligation of a build (obligations.json, hashed): requirement, claim, method,
verdict and evidence file; times go to timings.json (not hashed)."""

from __future__ import annotations

from pathlib import Path

from mi_certify.generator.core.results import GOOD_VERDICTS, Status
from mi_certify.generator.bundle.evidence import PROOF_INDEX, Evidence


NETWORK_METHOD = ("branch and bound over the input box with CROWN bounds, Marabou on boxes left open, exact "
                  "confirmation of PROVED on networks with <= 64 ReLUs (symbolic bounds in integer arithmetic, then "
                  "Z3 over the rationals on what they leave open); witnesses replayed on onnxruntime and the IR")


def collect_obligations(spec, d: Path | Evidence, stages: dict) -> list[dict]:
    """Every proof obligation of the build in ``d`` (a directory or its :class:`Evidence`;
    deterministic: no times).

    Each: {"id", "group" (network | lut | fsm | rtl | cosim), "requirement" (sla.yaml id:
    property id, ``fsm.<param>``, ``actions.<name>``, ``inputs``, ``rtl``), "claim",
    "method", "verdict" (proved | violated | unknown | passed | failed), "required" (the
    certificate needs it proved or checked by test), "evidence" (bundle file), "counterexample" (file or
    None)}. FSM and RTL obligations are read from ``proofs/index.json`` when that stage
    wrote it.
    """
    ev = d if isinstance(d, Evidence) else Evidence(d)
    obs: list[dict] = []

    def add(**kw):
        kw.setdefault("counterexample", None)
        kw.setdefault("required", True)
        obs.append(kw)

    if ev.has("verification.json"):
        ver = ev.read("verification.json")
        props = {p.id: p for p in spec.properties}
        for r in ver["properties"]:
            add(id=f"network.{r['id']}", group="network", requirement=r["id"],
                claim=claim_text(spec, props[r["id"]]) + " on the network, everywhere in the region",
                method=NETWORK_METHOD, verdict=r["verdict"], evidence="verification.json",
                counterexample="verification.json" if r["witness"] else None)
        for a in ver["output_domain"]["actions"]:
            verdict = {"yes": "violated", "no": "proved"}.get(a["reachable"], "unknown")
            add(id=f"network.reachability.{a['action']}", group="network", requirement=f"actions.{a['action']}",
                claim=f"whether {a['action']} is decoded somewhere in the envelope, decided either way: reachable "
                      f"is proved by a witness replayed on onnxruntime, unreachable by bounds over the whole envelope "
                      f"(informative: no requirement rests on it)",
                method=NETWORK_METHOD, verdict=verdict, evidence="verification.json", required=False,
                counterexample="verification.json" if a["witness"] else None)
    if ev.has("distillation.json"):
        lut = stages["lut"]
        add(id="lut.partition", group="lut", requirement="inputs",
            claim="the distillation boxes partition the quantized grid: every cell lies in exactly one box",
            method="counting over every cell", verdict="proved", evidence="distillation.json")
        add(id="lut.proven_cells", group="lut", requirement="lut",
            claim=f"in each of the {lut['proven']} proven cells the LUT action wins strictly everywhere "
                  "(and its certified softmax bound meets the threshold where the cell is confident)",
            method="CROWN lower bounds of the winning margins > 0 over each closed box (exact rational cell "
                   "edges rounded outward); single cells also by bisection inside the cell", verdict="proved",
            evidence="distillation.json")
        add(id="lut.resolved_cells", group="lut", requirement="distill.resolve",
            claim=f"each of the {lut['resolved']} resolved cells holds the listed actions (replayed witnesses) or "
                  f"is undecided, and carries the '{spec.resolve}' policy's entry",
            method="witnesses replayed on onnxruntime", verdict="failed" if lut["status"] == Status.FAILED else "passed",
            evidence="distillation.json")
    if ev.has("lut.hex"):
        add(id="lut.tables", group="lut", requirement="lut",
            claim="lut.hex, the distillation boxes, lut.json and the tables in the Python runtime and the Verilog "
                  "hold the same entries", method="entry-by-entry comparison", verdict="proved",
            evidence="lut.hex")
    if ev.has("lut_properties.json"):
        for r in ev.read("lut_properties.json")["properties"]:
            if r["verdict"] == "not_applicable":
                continue
            add(id=f"lut.{r['id']}", group="lut", requirement=r["id"],
                claim=claim_text(spec, next(p for p in spec.properties if p.id == r["id"])) + " in every LUT cell that "
                      "meets the region", method="exhaustive over the LUT cells",
                verdict="proved" if r["verdict"] == "holds" else "violated", evidence="lut_properties.json",
                counterexample="lut_properties.json" if r["verdict"] == "violated" else None)
    if ev.has(PROOF_INDEX):
        index = ev.read(PROOF_INDEX)
        for o in index["obligations"]:
            add(id=f"{o['group']}.{o['id']}" if not o["id"].startswith(o["group"] + ".") else o["id"],
                group=o["group"], requirement=o["requirement"], claim=o.get("claim", o["id"]), method=o["method"],
                verdict=o["verdict"], evidence=o["evidence"], counterexample=o.get("counterexample"),
                expect=o.get("expect", "unsat"))
    if ev.has("lint.json"):
        add(id="rtl.lint", group="rtl", requirement="rtl", claim="the Verilog is Verilator-lint clean (-Wall)",
            method="verilator --lint-only -Wall", verdict="passed" if stages["lint"]["status"] == Status.OK else "failed",
            evidence="lint.json")
    if ev.has("cosim.json"):
        c = stages["cosim"]
        add(id="cosim.rtl_vs_reference", group="cosim", requirement="fsm",
            claim="RTL, emitted Python runtime and reference LUT-FSM agree on every cycle",
            method=f"co-simulation (cocotb + Icarus), {c['cycles']} cycles ({c['directed_cycles']} directed), "
                   f"seed {c['seed']}", verdict="passed" if c["status"] == Status.OK else "failed",
            evidence="cosim.json")
    if ev.has("monitor_cosim.json"):
        m = ev.read("monitor_cosim.json")
        add(id="cosim.sla_monitor", group="cosim", requirement="monitor",
            claim="the hardware SLA monitor (sla_monitor.v) and the Python monitor agree on every output, every cycle",
            method=f"co-simulation (cocotb + Icarus), {len(m['configs'])} configurations, "
                   f"{sum(c['cycles'] for c in m['configs'])} cycles, directed limit - 1 / limit / limit + 1 and "
                   "random requests", verdict="passed" if m["passed"] else "failed", evidence="monitor_cosim.json")
    if ev.has("coverage.json"):
        c = ev.read("coverage.json")
        add(id="cosim.coverage", group="cosim", requirement="cosim.coverage",
            claim="co-simulation coverage meets the sla.yaml cosim.coverage thresholds",
            method="functional coverage sampled in the test bench; line/toggle/branch from Verilator --coverage",
            verdict="passed" if c["passed"] else "failed", evidence="coverage.json")
    return obs


def claim_text(spec, p) -> str:
    names = [a.name for a in spec.actions]
    if p.kind == "forbid":
        return f"{p.id}: never decode {', '.join(names[a] for a in p.forbid)}"
    if p.kind == "require":
        return f"{p.id}: decode only {', '.join(names[a] for a in p.require)}"
    parts = []
    for a, mn, mx in p.output:
        if mn is not None:
            parts.append(f"{names[a]} output >= {mn:g}")
        if mx is not None:
            parts.append(f"{names[a]} output <= {mx:g}")
    return f"{p.id}: " + " and ".join(parts)


def obligations_status(obs: list[dict]) -> str:
    """"none open" when every required obligation is proved or checked by test (verdict proved /
    passed), else "open" (the standing vocabulary of :mod:`.standing`; "discharged" before)."""
    return "none open" if all(o["verdict"] in GOOD_VERDICTS for o in obs if o["required"]) else "open"
