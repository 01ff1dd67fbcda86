"""The operator's dashboard of one audit log: ``mi-certify audit report`` (docs/runtime.md,
"Dashboard: audit report").

One self-contained HTML file (no network resource: plots are inline SVG drawn by
matplotlib with a fixed ``svg.hashsalt``, ``svg.fonttype`` 'none' and no date, so the same
log and build give the same bytes) showing:

- the verdict: the hash chain (and MACs with a key) by
  :func:`mi_certify.runtime.audit.verify_log`, intact or tampered; the decisions by
  :func:`mi_certify.runtime.live.replay`, confirmed or mismatch; with counts;
- a decision timeline: the active token per decision record, switches, fallback
  entries and probe faults marked, the reason per record below it;
- probe trends: each controller input's logged reading per decision record, the LUT
  cell edges of that input (its quantization level thresholds) as horizontal lines;
- SLA attainment per action (fraction of the requests run under that action that met
  both limits) and the counts of switches, fallback entries, recoveries, probe faults;
- the visited LUT cells over the build's heat map(s) (the ``heatmap_X_Y.png`` files of the
  build, redrawn from the LUT with the visits on top) and a table of visited addresses.
"""

from __future__ import annotations

import io
import math
import os
import re
import tempfile
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from mi_certify.runtime.audit import read_records, verify_log
from mi_certify.runtime.live import LoadedBuild, replay
from mi_certify.runtime.quantize import address, fault_causes, fault_text, split_address

__all__ = ["Dashboard", "cell_edges", "dashboard_data", "render_dashboard", "write_dashboard"]

#: Marker colours of the timeline (also used in the legend of the page).
_MARKS = {"SWITCH": "#1f77b4", "FALLBACK": "#d62728", "PROBE_FAULT": "#ff7f0e", "RECOVER": "#2ca02c",
          "MASKED": "#9467bd", "LOCKED": "#8c564b", "FORCED": "#e377c2"}


@dataclass
class Dashboard:
    """A rendered dashboard: ``html`` (str), ``intact`` (chain verdict), ``confirmed``
    (replay verdict: every decision confirmed and at least one), ``ok`` (both), ``data``
    ({"verify": AuditReport JSON, "replay": ReplayReport JSON})."""

    html: str
    intact: bool
    confirmed: bool
    data: dict

    @property
    def ok(self) -> bool:
        return self.intact and self.confirmed


def cell_edges(lo, hi, bits: int) -> list[float]:
    """The inner cell edges of an input with envelope [lo, hi] and ``bits`` bits, as the
    generated runtime compares them: the ``2^bits - 1`` thresholds of
    :func:`mi_certify.generator.build.emit_python.level_thresholds` (the smallest float >= each exact edge
    ``lo + q (hi - lo) / 2^bits``; a reading at or above a threshold is in the upper cell)."""
    from mi_certify.generator.build.emit_python import level_thresholds
    return list(level_thresholds(float(lo), float(hi), bits))


def _num(x) -> float:
    """A logged reading / measurement as a float (NaN for null, faults, non-numbers)."""
    if isinstance(x, bool) or x is None:
        return math.nan
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        if re.fullmatch(r"-?[0-9]+/[0-9]+", x):
            return float(Fraction(x))
        return {"inf": math.inf, "-inf": -math.inf}.get(x, math.nan)
    return math.nan


def _raw_reading(x):
    """A logged reading as the quantizer saw it: None (unavailable), a Fraction for ``"n/d"``,
    a float for ``"nan"``/``"inf"``/``"-inf"``, else the value."""
    if isinstance(x, str):
        if re.fullmatch(r"-?[0-9]+/[0-9]+", x):
            return Fraction(x)
        return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}.get(x, x)
    return x


def _causes(r: dict, build: LoadedBuild) -> list[dict]:
    """Why a probe-fault record was one: ``probes._probe_fault`` as logged (``run`` writes it),
    else derived from the logged readings and the build's envelope (logs written before it)."""
    logged = (r.get("probes") or {}).get("_probe_fault") if isinstance(r.get("probes"), dict) else None
    if isinstance(logged, list) and all(isinstance(c, dict) and "input" in c for c in logged):
        return logged
    readings = r.get("readings")
    if not isinstance(readings, list):
        return []
    return fault_causes(build.module.INPUTS, [_raw_reading(x) for x in readings])


def _in_fallback(state) -> bool:
    """The fallback flag f of a logged FSM state (t, k, h, d, v, f, r); True if unreadable."""
    return not (isinstance(state, list) and len(state) == 7) or bool(state[5])


def _heatmap_pairs(build: LoadedBuild) -> list[tuple[str, str]]:
    """(x, y) input pairs of the build's heat map files ``[heatmaps/]heatmap_X_Y.png``, sorted."""
    names = build.inputs
    pairs = set()
    for f in list(build.dir.glob("heatmap_*.png")) + list(build.dir.glob("heatmaps/heatmap_*.png")):
        stem = f.stem.removeprefix("heatmap_")
        for x in names:
            for y in names:
                if x != y and stem == f"{x}_{y}":
                    pairs.add((x, y))
    return sorted(pairs, key=lambda p: (names.index(p[0]), names.index(p[1])))


def dashboard_data(log_path, build: LoadedBuild, key: bytes | None = None, anchors=()) -> dict:
    """Everything the dashboard shows, as plain values (no plots).

    Keys: ``verify`` (:meth:`AuditReport.to_json`), ``replay`` (:meth:`ReplayReport.to_json`),
    ``intact``, ``confirmed``, ``records`` (decision records read, file order: dicts with
    seq, token, action, reason, addr, probe_fault, readings (floats, NaN for none),
    latency_ms, accuracy_loss_pct, sla_violation, mismatch (count), fallback_entry), ``visited`` (Counter addr → count),
    ``inputs`` ((name, unit, lo, hi, bits) per input), ``edges`` (input → cell edges),
    ``heatmaps`` ((x, y) pairs), ``per_action`` rows, ``commands`` (the operator ``command``
    records, file order: seq, who, what, action, why, outcome, refusal, detail, token_without,
    token_with, changed, at (index in ``records`` of the decision it went into or came before)).

    Raises:
        AuditError if the log cannot be read; BuildLoadError if it holds no record or was
        written by another build (as :func:`replay`).
    """
    report = verify_log(log_path, key, anchors)
    rep = replay(log_path, build, key)
    lines, _torn = read_records(log_path, key)
    bad = Counter(m[0] for m in rep.mismatches)
    m = build.module
    records, commands = [], []
    t0 = None
    for ln in lines:
        r = ln.record
        if r is not None and r.get("kind") == "command":
            c = r.get("command") if isinstance(r.get("command"), dict) else {}
            commands.append({"seq": ln.seq, "who": str(r.get("who") or "-"), "what": str(r.get("what") or "-"),
                             "action": str(c.get("action") or ""), "why": str(r.get("why") or ""),
                             "outcome": str(r.get("outcome")), "refusal": r.get("refusal"),
                             "detail": str(r.get("detail") or ""), "token_without": r.get("token_without"),
                             "token_with": r.get("token_with"), "changed": bool(r.get("changed")),
                             "mismatch": bad.get(ln.seq, 0), "at": len(records)})
            continue
        if r is None or r.get("kind") != "decision":
            continue
        tok, reason, addr, readings = r.get("token"), r.get("reason"), r.get("addr"), r.get("readings")
        # a tampered record may hold anything: keep only values the plots can place
        tok = tok if type(tok) is int and 0 <= tok < len(build.actions) else None
        addr = addr if type(addr) is int and 0 <= addr < len(build.lut) else None
        t = r.get("t_wall_ns") if type(r.get("t_wall_ns")) is int else None
        t0 = t if t0 is None else t0
        verdict = r.get("verdict") if isinstance(r.get("verdict"), dict) else {}
        records.append({"seq": ln.seq, "token": tok, "action": str(r.get("action")),
                        "t_s": math.nan if t is None or t0 is None else (t - t0) / 1e9,
                        "violation_after": bool(verdict.get("violation")),
                        "causes": _causes(r, build) if r.get("probe_fault") else [],
                        "reason": reason if isinstance(reason, str) else None,
                        "addr": addr, "probe_fault": bool(r.get("probe_fault")),
                        "readings": [_num(x) for x in (readings if isinstance(readings, list) else [])],
                        "latency_ms": _num(r.get("latency_ms")), "accuracy_loss_pct": _num(r.get("accuracy_loss_pct")),
                        "sla_violation": bool(r.get("sla_violation")), "mismatch": bad.get(ln.seq, 0),
                        "fallback_entry": r.get("reason") == "FALLBACK" and not _in_fallback(r.get("before"))})
    visited = Counter(r["addr"] for r in records if r["addr"] is not None and not r["probe_fault"])
    inputs = [tuple(i[:5]) for i in m.INPUTS]
    j = rep.to_json()
    per_action = []
    for a, st in rep.per_action.items():
        lim = build.limits[build.actions.index(a)]
        per_action.append({"action": a, "requests": st["requests"], "met_latency": st["met_latency"],
                           "met_accuracy": st["met_accuracy"], "met_both": st["met_both"],
                           "attainment": st["attainment"], "verdict_compliant": st["verdict_compliant"],
                           "latency_limit": lim.latency_ms, "accuracy_limit": lim.accuracy_loss_pct})
    return {"verify": report.to_json(), "replay": j, "intact": report.ok, "confirmed": rep.ok,
            "records": records, "visited": visited, "inputs": inputs, "alerts": _alerts(records, per_action),
            "edges": {i[0]: cell_edges(i[2], i[3], i[4]) for i in inputs},
            "heatmaps": _heatmap_pairs(build), "per_action": per_action, "commands": commands}


def _alerts(records: list[dict], per_action: list[dict]) -> dict:
    """What went wrong in the run, for the banner: ``over_limit`` (requests whose measurement broke
    the active action's limit, per action), ``violations`` (requests after which the SLA monitor
    reported a violation), ``fallbacks`` (fallback entries), ``probe_faults`` (steps) with
    ``fault_inputs`` (input → {"steps", "first": cause, "text"}), ``masked`` (steps with reason
    MASKED: a property mask held back the proposal), ``any``."""
    over = {a["action"]: a["requests"] - a["met_both"] for a in per_action if a["requests"] - a["met_both"]}
    inputs: dict[str, dict] = {}
    for r in records:
        for c in r["causes"]:
            e = inputs.setdefault(c["input"], {"steps": 0, "first": c, "text": fault_text(c)})
            e["steps"] += 1
    out = {"over_limit": over, "violations": sum(r["violation_after"] for r in records),
           "fallbacks": sum(r["fallback_entry"] for r in records),
           "probe_faults": sum(r["probe_fault"] for r in records), "fault_inputs": inputs,
           "masked": sum(r["reason"] == "MASKED" for r in records)}
    out["any"] = bool(over or out["violations"] or out["fallbacks"] or out["probe_faults"] or out["masked"])
    return out


# ---------------------------------------------------------------------------------------
# Plots (inline SVG)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _svg(fig, prefix: str) -> str:
    """The figure as inline SVG text: deterministic, without XML prolog, metadata and
    namespace URLs, element ids prefixed (several plots share one page)."""
    import matplotlib

    plt = _plt()
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "mi-certify-dashboard", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    plt.close(fig)
    s = buf.getvalue()
    s = s[s.index("<svg"):]
    s = re.sub(r"<metadata>.*?</metadata>\s*", "", s, flags=re.S)
    s = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", s)
    s = re.sub(r'\bid="', f'id="{prefix}-', s)
    s = s.replace("url(#", f"url(#{prefix}-").replace('href="#', f'href="#{prefix}-')
    return s


def _timeline_svg(data: dict, actions) -> str:
    plt = _plt()
    recs = data["records"]
    xs, xlabel = _times(recs)
    reasons = sorted({r["reason"] for r in recs if r["reason"]})
    fig, (ax, ar) = plt.subplots(2, 1, figsize=(11, 4.6), dpi=100, sharex=True,
                                 gridspec_kw={"height_ratios": [3, 2]})
    ax.step(xs, [math.nan if r["token"] is None else r["token"] for r in recs], where="post",
            color="#444444", lw=1.2, label="active token")
    for reason, label, marker in (("SWITCH", "switch", "^"), ("FALLBACK", "fallback", "v"),
                                  ("PROBE_FAULT", "probe fault", "x"), ("RECOVER", "recover", "o"),
                                  ("MASKED", "masked", "s"), ("LOCKED", "locked", "D"), ("FORCED", "forced", "P")):
        pts = [(xs[i], r["token"]) for i, r in enumerate(recs) if r["token"] is not None
               and (r["fallback_entry"] if reason == "FALLBACK" else r["reason"] == reason)]  # fallback: entries
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, s=42, color=_MARKS[reason],
                       label=f"{label if reason != 'FALLBACK' else 'fallback entry'} ({len(pts)})", zorder=3)
    for outcome, marker, colour in (("accepted", "*", "#17becf"), ("refused", "X", "#7f7f7f")):
        pts = [xs[c["at"]] for c in data.get("commands", ()) if (c["outcome"] == "accepted") == (outcome == "accepted")
               and c["at"] < len(xs)]
        if pts:   # operator commands on the bottom edge, at the decision they went into (or came before)
            ax.scatter(pts, [-0.4] * len(pts), marker=marker, s=60, color=colour, zorder=4,
                       label=f"operator command {outcome} ({len(pts)})")
    mism = [xs[i] for i, r in enumerate(recs) if r["mismatch"]]
    for i in mism:
        ax.axvline(i, color="#d62728", lw=0.8, ls=":")
    ax.set_yticks(range(len(actions)), list(actions))
    ax.set_ylim(-0.5, len(actions) - 0.5)
    ax.set_ylabel("action")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title("Decision timeline" + (f" ({len(mism)} records with replay mismatches, dotted)" if mism else ""),
                 fontsize=10)
    ry = [reasons.index(r["reason"]) if r["reason"] in reasons else math.nan for r in recs]
    ar.scatter(xs, ry, s=6, c=[_MARKS.get(r["reason"], "#777777") for r in recs])
    ar.set_yticks(range(len(reasons)), reasons, fontsize=7)
    ar.set_ylim(-0.5, len(reasons) - 0.5)
    ar.set_xlabel(xlabel)
    ar.set_ylabel("reason")
    fig.subplots_adjust(left=0.09, right=0.84, top=0.93, bottom=0.11, hspace=0.08)  # fixed: no tight_layout pass
    return _svg(fig, "timeline")


def _times(recs: list[dict]) -> tuple[list[float], str]:
    """The x axis of the plots: wall-clock seconds since the first decision record, or the record
    index when the log holds no time (then the label says so)."""
    ts = [r["t_s"] for r in recs]
    if ts and all(not math.isnan(t) for t in ts):
        return ts, "wall-clock time since the first decision [s]"
    return [float(i) for i in range(len(recs))], "decision record (file order; the log holds no time)"


def _latency_svg(data: dict, build: LoadedBuild) -> str:
    """Latency of every request over wall-clock time, coloured by the active action, each action's
    latency limit as a dashed line of its colour; switches, masked steps, fallback entries and
    probe faults marked."""
    plt = _plt()
    recs = data["records"]
    xs, xlabel = _times(recs)
    colours = plt.get_cmap("tab10").colors
    fig, ax = plt.subplots(figsize=(11, 3.6), dpi=100)
    finite = [r["latency_ms"] for r in recs if math.isfinite(r["latency_ms"])]
    top = max(finite + [lim.latency_ms for lim in build.limits if lim.latency_ms is not None] + [1.0])
    for k, a in enumerate(build.actions):
        pts = [(x, r["latency_ms"]) for x, r in zip(xs, recs) if r["token"] == k and math.isfinite(r["latency_ms"])]
        lim = build.limits[k].latency_ms
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=9, color=colours[k % 10], label=f"{a} ({len(pts)})",
                       zorder=3)
        if lim is not None and (pts or any(r["token"] == k for r in recs)):
            ax.axhline(lim, color=colours[k % 10], lw=1.0, ls="--", label=f"{a} limit {lim:g} ms", zorder=2)
    for reason, label, style in (("SWITCH", "switch", "-"), ("MASKED", "masked", ":"),
                                 ("FALLBACK", "fallback entry", "-"), ("PROBE_FAULT", "probe fault", "--")):
        idx = [x for x, r in zip(xs, recs) if (r["fallback_entry"] if reason == "FALLBACK" else r["reason"] == reason)]
        for j, x in enumerate(idx):
            ax.axvline(x, color=_MARKS[reason], lw=0.8, ls=style, zorder=1,
                       label=f"{label} ({len(idx)})" if j == 0 else None)
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("latency [ms]")
    ax.set_title("Latency of each request against the active action's limit", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.subplots_adjust(left=0.07, right=0.8, top=0.9, bottom=0.14)
    return _svg(fig, "latency")


def _probes_svg(data: dict) -> str:
    plt = _plt()
    recs, inputs = data["records"], data["inputs"]
    n = len(inputs)
    fig, axes = plt.subplots(n, 1, figsize=(11, 1.9 * n + 0.6), dpi=100, sharex=True, squeeze=False)
    xs, xlabel = _times(recs)
    for k, (name, unit, lo, hi, bits) in enumerate(inputs):
        ax = axes[k][0]
        for e in data["edges"][name]:
            ax.axhline(e, color="#bbbbbb", lw=0.6, zorder=1)
        ys = [r["readings"][k] if k < len(r["readings"]) else math.nan for r in recs]
        ax.plot(xs, ys, color="#1f77b4", lw=1.0, zorder=2)
        faults = [xs[i] for i, r in enumerate(recs) if r["probe_fault"]]
        for i in faults:
            ax.axvline(i, color=_MARKS["PROBE_FAULT"], lw=0.8, ls="--", zorder=1)
        ax.set_ylim(float(lo) - 0.02 * float(hi - lo), float(hi) + 0.02 * float(hi - lo))
        ax.set_ylabel(f"{name}\n[{unit}]" if unit else name, fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][0].set_title("Probe trends (grey: LUT cell edges; dashed: probe faults)", fontsize=10)
    axes[-1][0].set_xlabel(xlabel)
    fig.subplots_adjust(left=0.09, right=0.98, top=0.96, bottom=0.06, hspace=0.1)
    return _svg(fig, "probes")


def _attainment_svg(data: dict) -> str:
    plt = _plt()
    rows = data["per_action"]
    fig, ax = plt.subplots(figsize=(7, 2.8), dpi=100)
    names = [r["action"] for r in rows]
    vals = [r["attainment"] if r["attainment"] is not None else 0.0 for r in rows]
    ax.bar(names, vals, color=["#2ca02c" if v >= 1.0 else "#d62728" if v < 0.9 else "#ff7f0e" for v in vals])
    for i, r in enumerate(rows):
        ax.text(i, vals[i] + 0.02, "-" if r["attainment"] is None else f"{r['attainment']:.1%} of {r['requests']}",
                ha="center", fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("SLA attainment")
    ax.set_title("Requests meeting the SLA of the active action", fontsize=10)
    fig.subplots_adjust(left=0.1, right=0.98, top=0.9, bottom=0.1)
    return _svg(fig, "attainment")


def _heatmap_svg(data: dict, build: LoadedBuild, x_name: str, y_name: str, n: int) -> str:
    plt = _plt()
    from matplotlib.colors import ListedColormap

    m = build.module
    inputs = data["inputs"]
    names = [i[0] for i in inputs]
    xi, yi = names.index(x_name), names.index(y_name)
    bits = [i[4] for i in inputs]
    base = [1 << (b - 1) for b in bits]
    nx, ny = 1 << bits[xi], 1 << bits[yi]
    tok = [[int(m.lut_entry(address([qx if k == xi else qy if k == yi else base[k] for k in range(len(bits))],
                                    bits))[0]) for qx in range(nx)] for qy in range(ny)]
    visits: Counter = Counter()
    for addr, c in data["visited"].items():
        lv = split_address(addr, bits)
        visits[(lv[xi], lv[yi])] += c
    xs, ys = inputs[xi], inputs[yi]
    x0, x1, y0, y1 = float(xs[2]), float(xs[3]), float(ys[2]), float(ys[3])
    actions = build.actions
    fig, ax = plt.subplots(figsize=(7, 5), dpi=100)
    cmap = ListedColormap(plt.get_cmap("tab10").colors[: len(actions)])
    sx, sy = (x1 - x0) / nx, (y1 - y0) / ny
    ax.pcolormesh([x0 + q * sx for q in range(nx + 1)], [y0 + q * sy for q in range(ny + 1)], tok, cmap=cmap,
                  vmin=-0.5, vmax=len(actions) - 0.5, shading="flat")  # vector cells, no embedded raster
    if visits:
        top = max(visits.values())
        cells = sorted(visits)
        ax.scatter([x0 + (q[0] + 0.5) * sx for q in cells], [y0 + (q[1] + 0.5) * sy for q in cells],
                   s=[30 + 270 * visits[q] / top for q in cells], facecolors="none", edgecolors="black", lw=1.2,
                   label="visited (size: visits)")
        for q in cells:
            ax.annotate(str(visits[q]), (x0 + (q[0] + 0.5) * sx, y0 + (q[1] + 0.5) * sy), fontsize=7,
                        ha="center", va="center")
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(i)) for i in range(len(actions))]
    extra, extra_labels = ax.get_legend_handles_labels()
    ax.legend(handles + extra, list(actions) + extra_labels, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8)
    others = ", ".join(f"{nm} level {b}" for k, (nm, b) in enumerate(zip(names, base)) if k not in (xi, yi))
    ax.set_title(f"LUT proposal over {x_name} × {y_name}\n(at {others})\n"
                 "circles: visited cells, visits summed over the other inputs", fontsize=8, loc="left")
    ax.set_xlabel(f"{x_name} [{xs[1]}]" if xs[1] else x_name)
    ax.set_ylabel(f"{y_name} [{ys[1]}]" if ys[1] else y_name)
    fig.subplots_adjust(left=0.11, right=0.76, top=0.84, bottom=0.1)
    return _svg(fig, f"heatmap{n}")


# ---------------------------------------------------------------------------------------
# Page


def render_dashboard(log_path, build: LoadedBuild, key: bytes | None = None, anchors=()) -> Dashboard:
    """Render the dashboard of the audit log ``log_path`` written by ``build``.

    ``key``: the log's HMAC key (bytes) or None (hash chain only); ``anchors``: ``[SEQ:]SHA256``
    texts as for :func:`verify_log`. The HTML holds no time and no network reference: the same
    inputs give the same bytes.

    Raises:
        AuditError, BuildLoadError as :func:`dashboard_data`.
    """
    from mi_certify.templates import environment
    from markupsafe import Markup

    data = dashboard_data(log_path, build, key, anchors)
    recs = data["records"]
    plots = {"latency": Markup(_latency_svg(data, build)) if recs else None,
             "timeline": Markup(_timeline_svg(data, build.actions)) if recs else None,
             "probes": Markup(_probes_svg(data)) if recs else None,
             "attainment": Markup(_attainment_svg(data))}
    heatmaps = [{"x": x, "y": y, "svg": Markup(_heatmap_svg(data, build, x, y, k))}
                for k, (x, y) in enumerate(data["heatmaps"])]
    rows = []
    for r in recs:
        rows.append({**r, "fault": "; ".join(fault_text(c) for c in r["causes"]), "readings": ", ".join("-" if math.isnan(v) else f"{v:.6g}" for v in r["readings"]),
                     "latency_ms": "-" if math.isnan(r["latency_ms"]) else f"{r['latency_ms']:.6g}",
                     "accuracy_loss_pct": ("-" if math.isnan(r["accuracy_loss_pct"])
                                           else f"{r['accuracy_loss_pct']:.6g}")})
    bits = [i[4] for i in data["inputs"]]
    visited = [{"addr": a, "count": c, "levels": split_address(a, bits),
                "action": build.actions[int(build.module.lut_entry(a)[0])]}
               for a, c in sorted(data["visited"].items(), key=lambda kv: (-kv[1], kv[0]))]
    j = data["replay"]
    html = environment().get_template("report/dashboard.html.j2").render(
        controller=build.name, log=str(log_path), build_dir=str(build.dir), verify=data["verify"], replay=j,
        intact=data["intact"], confirmed=data["confirmed"], ok=data["intact"] and data["confirmed"],
        records=rows, decision_records=len(recs), per_action=data["per_action"], plots=plots,
        heatmaps=heatmaps, visited=visited, inputs=data["inputs"], input_names=[i[0] for i in data["inputs"]],
        edges={k: ", ".join(f"{e:.6g}" for e in v) for k, v in data["edges"].items()},
        marks=_MARKS, fallback_steps=j["reasons"].get("FALLBACK", 0), alerts=data["alerts"],
        commands=data["commands"], operator=build.operator,
        actions=build.actions, conservative=build.module.CONSERVATIVE)
    return Dashboard(html, data["intact"], data["confirmed"], {"verify": data["verify"], "replay": j})


def write_dashboard(log_path, build: LoadedBuild, out, key: bytes | None = None, anchors=()) -> Dashboard:
    """Render the dashboard and write it to ``out`` atomically (a temporary file in the same
    directory, then ``os.replace``): ``out`` is either the whole new page or left as it was.

    Raises:
        AuditError, BuildLoadError as :func:`render_dashboard` (nothing is written then);
        OSError if ``out`` cannot be written.
    """
    dash = render_dashboard(log_path, build, key, anchors)
    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dash.html)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return dash
