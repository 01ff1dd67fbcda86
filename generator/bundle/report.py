"""report.html and report.md: the bundle for people (docs/certificate.md).

Both are rendered from one data dictionary with Jinja templates
(``mi_certify.templates`` ``report/``) and hold no times, so they are hashed like every
other output. report.html is self-contained: inline CSS, images as ``data:`` URIs, the
FSM diagram as inline SVG, no script and no external request, so it opens offline.

Sections: summary verdict; traceability matrix (every sla.yaml requirement → proof
obligations → evidence → verdicts); network verification; distillation; LUT heatmaps;
FSM diagram; RTL numbers; co-simulation and coverage; assumptions of use; evidence files.
"""

from __future__ import annotations

import base64
from collections import Counter
from pathlib import Path

import jinja2
import numpy as np

from mi_certify.templates import environment

from mi_certify.generator.bundle.distillation_file import read_distillation
from mi_certify.generator.bundle.evidence import PROOF_INDEX, Evidence
from mi_certify.generator.bundle.manifest import UNHASHED
from mi_certify.generator.bundle.operator_manual import manual
from mi_certify.generator.core.results import GOOD_VERDICTS
from mi_certify.generator.bundle.standing import (
    ASSUMED, OPEN, PROVED, RESOLVED, Standing, obligation_standing, weakest)
from mi_certify.generator.bundle.report_figures import report_figures
from mi_certify.generator.core.lut import Lut, decode_status_runs, split_table
from mi_certify.runtime.lut_file import decode_lut_hex
from mi_certify.generator.core.spec import Spec

#: Heatmaps in the report: input 0 against each other input, at most this many.
MAX_HEATMAPS = 4


def _shown(o: dict) -> dict:
    """How an obligation's verdict reads in the report (:func:`.standing.obligation_standing`):
    {"text", "css", "word"}."""
    st = obligation_standing(o)
    return {"text": st.text, "css": st.css, "word": st.word}


def _findings(spec: Spec, ver: dict | None) -> list[str]:
    """What an auditor should know about this controller that is not a failed proof."""
    if not ver:
        return []
    out = []
    for a in ver["output_domain"]["actions"]:
        if a["reachable"] == "no":
            out.append(f"{a['action']} is proved unreachable: over the whole envelope the network never decodes it, "
                       "so this controller can never choose it.")
        elif a["reachable"] == "unknown":
            out.append(f"whether {a['action']} is reachable could not be decided within the time limit.")
    return out


#: Who must ensure a service level (latency, accuracy loss) of an action: nothing in the bundle proves it.
SLA_OWNER = "the integrator (the SLA monitor watches the service levels at run time; the fallback on violations is proved)"


def _resolve_standing(spec: Spec, lut_counts: dict | None) -> Standing:
    """distill.resolve: resolved, with why and how many cells; proved when no cell is resolved."""
    n = (lut_counts or {}).get("resolved")
    if n == 0:
        return Standing(PROVED, detail="no cell resolved")
    cons = spec.actions[spec.conservative].name
    entry = f"the conservative action {cons}" if spec.resolve == "conservative" else f"the '{spec.resolve}' entry"
    return Standing(RESOLVED, why=f"{'' if n is None else f'{n:,} '}cells hold several actions (replayed "
                                  f"witnesses) or were undecided; each carries {entry}")


def _requirements(spec: Spec, obligations: list[dict], lut_counts: dict | None = None) -> list[dict]:
    """Rows of the traceability matrix: each sla.yaml requirement with its obligations and its
    standing (:mod:`.standing`): {"id", "source", "text", "obligations", "standing", "verdict"
    (the standing's text), "css", "informative"}."""
    from mi_certify.generator.bundle.obligations import claim_text

    rows: list[dict] = []
    by_req: dict[str, list[dict]] = {}
    for o in obligations:
        by_req.setdefault(o["requirement"], []).append(o)

    def row(rid, source, text, reqs, extra=(), standing=None):
        obs = [o for r in reqs for o in by_req.get(r, [])] + list(extra)
        required = [o for o in obs if o["required"]]
        words = [obligation_standing(o).word for o in (required or obs)]
        if not obs:
            st = Standing(OPEN, detail="no obligation")
        elif OPEN in words:
            st = Standing(OPEN)
        elif standing is not None:
            st = standing
        elif all(w == PROVED for w in words):
            st = Standing(PROVED)
        elif PROVED in words:
            st = Standing(PROVED, detail="also checked by test")
        else:
            st = Standing(weakest(words))
        rows.append({"id": rid, "source": source, "text": text, "obligations": obs, "standing": st,
                     "verdict": st.text, "css": st.css, "informative": bool(obs) and not required})

    for p in spec.properties:
        where = ", ".join(f"{spec.inputs[i].name} in [{a:g}, {b:g}]" for i, a, b in p.when) or "whole envelope"
        row(p.id, f"properties ({p.kind})", f"{claim_text(spec, p)}; region: {where}", [p.id])
        if not any(o["group"] == "network" for o in rows[-1]["obligations"]):
            rows[-1].update(standing=Standing(OPEN, detail="network not verified"), css="open",
                            verdict=Standing(OPEN, detail="network not verified").text)
            rows[-1]["text"] += " (network not verified)"  # the LUT check alone says nothing about the network
    row("inputs", "inputs", "quantization grid: " + ", ".join(f"{i.name} [{i.min:g}, {i.max:g}] {i.unit} "
                                                              f"{i.bits} bits" for i in spec.inputs), ["inputs"])
    conf = (f"; confident bit: certified softmax lower bound >= {spec.confidence_threshold:g}"
            if spec.confidence_threshold is not None else "")
    row("lut", "controller, confidence", f"every LUT cell proven or resolved, tables identical ({spec.decode}{conf})",
        ["lut"])
    row("distill.resolve", "distill.resolve", f"cells holding several actions get the '{spec.resolve}' policy",
        ["distill.resolve"], standing=_resolve_standing(spec, lut_counts))
    for a in spec.actions:
        row(f"actions.{a.name}", "actions", f"output domain: is {a.name} reachable (informative)",
            [f"actions.{a.name}"])
        if a.latency_ms is not None or a.accuracy_loss_pct is not None:
            limits = ", ".join(x for x in (f"latency <= {a.latency_ms:g} ms" if a.latency_ms is not None else "",
                                           f"accuracy loss <= {a.accuracy_loss_pct:g} %"
                                           if a.accuracy_loss_pct is not None else "") if x)
            row(f"actions.{a.name}.sla", "actions.sla", f"{limits}: an assumption of use, not proved: the SLA "
                                                        "monitor measures it at run time; proved is only the "
                                                        "mechanism: the FSM falls back after violations_to_fallback "
                                                        "violations", ["fsm.violations_to_fallback", "fsm", "monitor"],
                standing=Standing(ASSUMED, who=SLA_OWNER))
    fsm = spec.fsm
    for name, text in (("hysteresis", f"H = {fsm.hysteresis} confident proposals before a switch"),
                       ("cooldown", f"D = {fsm.cooldown} steps held after a switch or recovery"),
                       ("violations_to_fallback", f"W = {fsm.violations_to_fallback} consecutive SLA violations "
                                                  "force the conservative action"),
                       ("recovery", f"R = {fsm.recovery} compliant steps leave fallback")):
        row(f"fsm.{name}", "fsm", text, [f"fsm.{name}", "fsm"])
    row("rtl", "generated Verilog", "the RTL implements the LUT-FSM", ["rtl"],
        extra=[o for o in obligations if o["group"] == "cosim"])
    known = {r for row_ in rows for o in row_["obligations"] for r in [o["requirement"]]}
    for req in sorted(set(by_req) - known):
        row(req, "other", "obligations naming this requirement", [req])
    return rows


def _fsm_svg(spec: Spec) -> str:
    """The FSM's modes as inline SVG: every edge labelled, each label placed clear of the
    boxes and the other edges (positions fixed by hand for this layout), TRACK's self-loop
    drawn as a loop."""
    f = spec.fsm
    cons = spec.actions[spec.conservative].name
    nodes = {"RESET": (80, 110), "TRACK": (330, 110), "SWITCH": (640, 110), "COOLDOWN": (640, 270),
             "FALLBACK": (330, 410), "RECOVER": (640, 410)}
    # (from, to, label, label x, label y, text-anchor)
    edges = [("RESET", "TRACK", f"token = {cons}", 205, 100, "middle"),
             ("TRACK", "SWITCH", f"{f.hysteresis} confident proposals of p", 485, 100, "middle"),
             ("SWITCH", "COOLDOWN", "token = p", 650, 194, "start"),
             ("COOLDOWN", "TRACK", f"after {f.cooldown} steps", 478, 205, "end"),
             ("TRACK", "FALLBACK", f"{f.violations_to_fallback} SLA violations / probe fault", 340, 260, "start"),
             ("COOLDOWN", "FALLBACK", f"{f.violations_to_fallback} violations / fault", 478, 330, "end"),
             ("FALLBACK", "RECOVER", f"{f.recovery} compliant steps", 485, 400, "middle"),
             ("RECOVER", "COOLDOWN", f"cooldown {f.cooldown}", 650, 345, "start")]
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="760" height="460" viewBox="0 0 760 460" '
           'role="img" aria-label="LUT-FSM modes">',
           '<defs><marker id="arr" markerWidth="10" markerHeight="8" refX="9" refY="4" orient="auto">'
           '<path d="M0,0 L10,4 L0,8 z" fill="#333"/></marker></defs>']

    def label(text, x, y, anchor):
        out.append(f'<text x="{x}" y="{y}" font-size="11" text-anchor="{anchor}" fill="#204080">'
                   f'{jinja2.filters.escape(text)}</text>')

    for a, b, text, lx, ly, anchor in edges:
        (x1, y1), (x2, y2) = nodes[a], nodes[b]
        dx, dy = x2 - x1, y2 - y1
        n = max(1.0, (dx * dx + dy * dy) ** 0.5)
        sx, sy = x1 + dx / n * 60, y1 + dy / n * 24
        ex, ey = x2 - dx / n * 62, y2 - dy / n * 26
        out.append(f'<line x1="{sx:.0f}" y1="{sy:.0f}" x2="{ex:.0f}" y2="{ey:.0f}" stroke="#333" '
                   f'marker-end="url(#arr)"/>')
        label(text, lx, ly, anchor)
    tx, ty = nodes["TRACK"]
    out.append(f'<path d="M{tx - 25},{ty - 22} C{tx - 45},{ty - 80} {tx + 45},{ty - 80} {tx + 25},{ty - 23}" '
               'fill="none" stroke="#333" marker-end="url(#arr)"/>')
    label("HOLD / PENDING / LOW_CONFIDENCE", tx, ty - 72, "middle")
    for name, (x, y) in nodes.items():
        fill = "#fde2e2" if name == "FALLBACK" else "#e6f0fa"
        out.append(f'<rect x="{x - 58}" y="{y - 22}" width="116" height="44" rx="10" fill="{fill}" stroke="#333"/>')
        out.append(f'<text x="{x}" y="{y + 5}" font-size="13" text-anchor="middle" font-family="monospace">{name}'
                   '</text>')
    out.append("</svg>")
    return "\n".join(out)


def _assumptions(spec: Spec) -> list[str]:
    env = ", ".join(f"{i.name} in [{i.min:g}, {i.max:g}] {i.unit}".rstrip() for i in spec.inputs)
    return [
        f"The probes deliver readings inside the envelope ({env}); a reading outside it, NaN or a missing sensor is "
        f"a probe fault and the machine runs the conservative action ({spec.actions[spec.conservative].name}). "
        "The proofs cover the envelope only.",
        "The integrator's SLA monitor asserts sla_violation exactly when a measurement exceeds the active action's "
        "service level; mi-certify does not measure latency or accuracy.",
        "Network properties are proved about the real-valued network whose weights are the float64 values of the "
        "imported IR (bounds inflated for float64 rounding); onnxruntime's float32 evaluation was cross-checked to "
        "1e-5 relative difference and witnesses are replayed within 1e-4 (docs/safety-manual.md).",
        "The LUT, not the network, runs: proven cells decode like the network everywhere in the cell; resolved "
        "cells hold several actions and carry the documented policy's entry.",
        "The Verilog is checked by lint and cycle-accurate co-simulation against the reference LUT-FSM; formal FSM "
        "and RTL proofs, where the build made them, are listed in the traceability matrix.",
        "Tool versions are those in manifest.json; a different version is a different tool and needs a new build "
        "and check (docs/tool-qualification.md).",
        _clock_assumption(spec),
    ]


def _clock_assumption(spec: Spec) -> str:
    """The hardware SLA monitor counts cycles of one clock: the integrator must run it at that clock."""
    from mi_certify.generator.build.emit_monitor import module_name, monitor_config
    cfg, clock, default = monitor_config(spec)  # the cycle limits the generated monitor holds
    limits = ", ".join(f"{a.name} {a.latency_ms:g} ms = {cycles:,} cycles"
                       for a, cycles in zip(spec.actions, cfg.lat_limits) if cycles is not None)
    src = "hdl.clock_mhz not set: the default" if default else "hdl.clock_mhz"
    return (f"The hardware SLA monitor ({module_name(spec)}.v) measures latency in cycles of a "
            f"{clock:g} MHz clock ({src}): {limits or 'no latency limits'}. Clock it at exactly {clock:g} MHz: "
            "slower, it accepts latencies above the SLA (fails open); faster, it flags compliant requests. The "
            "controller must also meet that clock on the integrator's device (Synthesis, under RTL).")


def _heatmaps(spec: Spec, lut: Lut, d: Path) -> list[dict]:
    from mi_certify.generator.build.heatmap import write_heatmap

    out = []
    if len(spec.inputs) < 2:
        return out
    (d / "heatmaps").mkdir(exist_ok=True)
    x = spec.inputs[0].name
    for other in spec.inputs[1: 1 + MAX_HEATMAPS]:
        rel = f"heatmaps/heatmap_{x}_{other.name}.png"
        write_heatmap(spec, lut, x, other.name, d / rel)
        out.append({"file": rel, "x": x, "y": other.name,
                    "data": base64.b64encode((d / rel).read_bytes()).decode("ascii")})
    return out


def _lut_from_bundle(spec: Spec, d: Path) -> Lut:
    """The final LUT of the bundle in ``d``: lut.hex's entries, lut.json's cell status."""
    table = decode_lut_hex((d / "lut.hex").read_text(encoding="ascii"))
    return Lut(*split_table(table), decode_status_runs(Evidence(d).read("lut.json")["cell_status"], len(table)))


def _hdl_rows(summary: dict) -> dict:
    """The synthesis numbers for the report: {"status", "measured", "note", "alone", "devices": [...],
    "target"} from summary.json (stage ``hdl``; docs/hdl.md). ``measured``: the stage has figures (it
    is ok, or failed on a missed target); ``target``: the declared target's verdict
    (:func:`mi_certify.verification.rtl.synth.target_verdict`) or None."""
    st = summary.get("stages", {}).get("hdl", {})
    if "place_and_route" not in st:
        return {"status": st.get("status", "skipped"), "measured": False,
                "note": st.get("reason", st.get("error", "not run")), "alone": None, "devices": [], "target": None}
    h = summary["hdl"]
    devices = [{"device": dev.upper(), "fits": p["fits"], "fmax_mhz": p["fmax_mhz"], "goal_mhz": p["goal_mhz"],
                "meets_goal": p["meets_goal"], "lut4": p["lut4"], "dff": p["dff"], "bram": p["bram"],
                "package": p["package"], "seed": p["seed"],
                "meets_clock": st.get(f"meets_clock_{dev.replace('-', '_')}"),
                "axil": (st.get("axil") or {}).get("devices", {}).get(dev)}
               for dev, p in st["place_and_route"].items()]
    return {"status": st["status"], "measured": True, "note": st.get("error", ""),
            "alone": {"lut4": h["lut4"], "dff": h["dff"], "bram": h["bram"]},
            "goal_met": h["goal_met"], "devices": devices, "clock_mhz": st.get("clock_mhz"),
            "not_measured": st.get("not_measured", ""), "target": st.get("target"),
            "axil": (st.get("axil") or {}).get("module"),
            "latency": summary.get("stages", {}).get("emit", {}).get("latency", 1)}


def _glance(spec: Spec, summary: dict, requirements: list[dict], obligations: list[dict], open_obs: list[dict],
            hdl: dict) -> dict:
    """What the first screen of report.html shows beside the figures: the properties and their
    standing, the assumptions of use (who ensures each), the open items, the signature, the
    user's declared target and mi-certify's own goals, apart. Plain values for the templates."""
    props = []
    for p in spec.properties:
        r = next(r for r in requirements if r["id"] == p.id)
        where = sorted({o["group"] for o in r["obligations"]})
        props.append({"id": p.id, "kind": p.kind, "standing": r["standing"].text, "css": r["css"],
                      "where": ", ".join(where)})
    assumed: list[dict] = []   # grouped by who must ensure them
    for r in requirements:
        if r["standing"].word == ASSUMED:
            item = f"{r['id'].removeprefix('actions.').removesuffix('.sla')} {r['text'].split(':')[0]}"
            group = next((g for g in assumed if g["who"] == r["standing"].who), None)
            if group is None:
                assumed.append({"who": r["standing"].who, "limits": [item]})
            else:
                group["limits"].append(item)
    resolved = [{"id": r["id"], "why": r["standing"].why} for r in requirements if r["standing"].word == RESOLVED]
    goals = [{"device": dv["device"], "goal_mhz": dv["goal_mhz"], "fmax_mhz": dv["fmax_mhz"] if dv["fits"] else None,
              "met": dv["meets_goal"], "key": dv["device"].lower()} for dv in hdl.get("devices", [])]
    return {"properties": props, "assumed": assumed, "resolved": resolved,
            "open": [{"id": o["id"], "verdict": o["verdict"]} for o in open_obs],
            "signature": "not part of this report: it is written before signing. The bundle is certified only when "
                         "manifest.json.sig verifies and every check passes: mi-certify check --pubkey KEY.pub "
                         "<bundle> ends with CERTIFIED or says what is missing.",
            "target": hdl.get("target"), "goals": goals,
            "required": sum(1 for o in obligations if o["required"]),
            "informative": sum(1 for o in obligations if not o["required"])}


def report_data(spec: Spec, d: Path, obligations: list[dict], evidence: Evidence | None = None,
                lut: Lut | None = None) -> dict:
    """The template variables of report.md / report.html for the bundle in ``d``: read through
    ``evidence`` (the pipeline's, holding what it wrote; else the files) and ``lut`` (the final
    table; else decoded from lut.hex and lut.json)."""
    ev = evidence if evidence is not None else Evidence(d)

    def doc(rel: str):
        return ev.read(rel) if ev.has(rel) else None
    summary = doc("summary.json")
    ver = doc("verification.json")
    dist = read_distillation(d) if (d / "distillation.json").exists() else None
    lut_json = doc("lut.json")
    cosim = doc("cosim.json")
    lint = doc("lint.json")
    lut_props = (doc("lut_properties.json") or {}).get("properties", [])
    vfile = d / f"{spec.module_name}.v"
    vtext = vfile.read_text(encoding="utf-8") if vfile.exists() else ""
    methods = Counter()
    if dist:
        from mi_certify.generator.build.distill import METHODS, UNDECIDED, VERDICTS
        pairs, n = np.unique(np.stack([dist["boxes"]["verdict"], dist["boxes"]["method"]], axis=1), axis=0,
                             return_counts=True)
        methods = Counter({(VERDICTS[v], METHODS[m]): int(k) for (v, m), k in zip(pairs, n)})
        dist = {**dist, "undecided": int(np.sum(dist["boxes"]["method"] == UNDECIDED))}
    required = [o for o in obligations if o["required"]]
    open_obs = [o for o in required if o["verdict"] not in GOOD_VERDICTS]
    ok = summary["status"] == "ok" and not open_obs
    # never CERTIFIED: this report is written before any signature (standing.certification, mi-certify check)
    verdict = ("NOT CERTIFIED YET: build ok, no open obligation; unsigned when this report was written" if ok else
               "NOT CERTIFIED: build " + summary["status"] + (f", {len(open_obs)} open obligation(s)" if open_obs
                                                              else ""))
    figures = report_figures(ev.read, ev.has)
    lut_counts = (summary.get("lut") or {})
    requirements = _requirements(spec, obligations, lut_counts)
    heatmaps = _heatmaps(spec, lut if lut is not None else _lut_from_bundle(spec, d), d) if lut_json else []
    # the files manifest.json will hash: what is here now, the report itself and its heatmaps
    files = sorted({p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file()} - set(UNHASHED)
                   | {"report.md", "report.html"} | ({"operator.md"} if spec.operator else set())
                   | {h["file"] for h in heatmaps})
    ob_methods = list(dict.fromkeys(o["method"] for o in obligations))
    return {
        "spec": spec, "summary": summary, "verdict": verdict, "ok": ok, "fig": figures,
        "glance": _glance(spec, summary, requirements, obligations, open_obs, _hdl_rows(summary)),
        "shown": {o["id"]: _shown(o) for o in obligations}, "findings": _findings(spec, ver),
        "methods": ob_methods, "method_key": {m: f"M{k + 1}" for k, m in enumerate(ob_methods)},
        "obligations": obligations, "open": open_obs, "requirements": requirements,
        "verification": ver, "distillation": dist, "box_methods": sorted(methods.items()),
        "lut": lut_json, "lut_properties": lut_props, "cosim": cosim, "lint": lint,
        "c_runtime": doc("c_runtime.json"), "c_record": summary.get("stages", {}).get("c_runtime"),
        "sva": doc("sva.json"),
        "rtl": {"file": vfile.name, "lines": vtext.count("\n"),
                "cells": 1 << spec.address_bits, "address_bits": spec.address_bits, "token_bits": spec.token_bits,
                "proof_index": (d / PROOF_INDEX).exists(),
                "encoding": summary.get("stages", {}).get("emit", {}).get("encoding", "")},
        "hdl": _hdl_rows(summary),
        "heatmaps": heatmaps, "unhashed": UNHASHED,
        "fsm_svg": _fsm_svg(spec), "assumptions": _assumptions(spec),
        "files": files, "actions": [a.name for a in spec.actions],
        "operator_manual": manual(spec, obligations),
    }


def write_report(spec: Spec, d: Path, obligations: list[dict], evidence: Evidence | None = None,
                 lut: Lut | None = None) -> None:
    """Write report.md, report.html, operator.md (sla.yaml ``operator:`` only) and heatmaps/*.png into the
    build directory ``d``
    (:func:`report_data`: ``evidence`` and ``lut`` when the pipeline has them in memory)."""
    data = report_data(spec, d, obligations, evidence, lut)
    env = environment()
    (d / "report.md").write_text(env.get_template("report/report.md.j2").render(**data), encoding="utf-8")
    (d / "report.html").write_text(env.get_template("report/report.html.j2").render(**data), encoding="utf-8")
    if data["operator_manual"] is not None:   # sla.yaml operator: (generator/bundle/operator_manual.py)
        (d / "operator.md").write_text(env.get_template("report/operator.md.j2").render(m=data["operator_manual"]),
                                       encoding="utf-8")
