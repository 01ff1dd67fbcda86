"""Documents group of ``mi-certify check``: what a person reads, re-derived from the evidence.

Re-derives (with :mod:`.bundle_documents`, which says how and what it cannot):
the generated sources (Python runtime, Verilog with its ROM contents, SLA monitor) emitted again
from sla.yaml and lut.hex, byte for byte; every figure of summary.json from the
evidence files; obligations.json; the small records (import.json, lut.json's header,
lut_properties.json's masks) and the witnesses' IR outputs in verification.json;
manifest.json's status, figures, seeds and command; report.md, report.html and the
heatmaps rendered again. Nothing without lut.hex.
"""

from __future__ import annotations

import numpy as np

from mi_certify.verification.check import bundle_documents as docs
from mi_certify.verification.check.common import Checker, CheckContext, require


def check_documents(c: Checker, ev: CheckContext) -> None:
    """Items ``generated sources: ...``, ``summary.json: ...``, ``obligations.json ...``,
    ``records: ...``, ``manifest.json: ...``, ``report: ...`` in that order."""
    if ev.lut is None:
        return
    sources: dict = {}
    c.run("generated sources: emitted again and compared", "same code", lambda: _sources(c, ev, sources))
    derived: dict = {}
    if not c.run("summary.json: every figure re-derived from the evidence", "independent",
                 lambda: _summary(c, ev, sources, derived)):
        derived.clear()
    stages = derived.get("stages", ev.summary.get("stages", {}))
    c.run("obligations.json matches the evidence", "same code", lambda: _obligations(c, ev, stages))
    c.run("records: import.json, lut.json, lut_properties.json masks, witnesses re-derived", "independent",
          lambda: _records(c, ev, stages))
    c.run("manifest.json: status and figures re-derived", "independent",
          lambda: _manifest_figures(c, ev, stages, derived or ev.summary))
    c.run("report: rendered again from the evidence and compared", "same code", lambda: _report(c, ev))
    c.run("report: every figure equals its evidence file", "independent", lambda: _figures(c))


def _first_difference(name: str, a: bytes, b: bytes) -> str:
    la, lb = a.decode("utf-8", "replace").splitlines(), b.decode("utf-8", "replace").splitlines()
    for k, (x, y) in enumerate(zip(la, lb), start=1):
        if x != y:
            x, y = x.strip(), y.strip()
            col = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            start = max(0, col - 20)   # the window shows where the lines part
            cut = (lambda t: ("…" if start else "") + t[start:start + 70])
            return f"{name} line {k} column {col + 1}: {cut(x)!r}, made again {cut(y)!r}"
    return f"{name}: {len(la)} lines, made again {len(lb)}"


def _sources(c: Checker, ev: CheckContext, sources: dict) -> str:
    """Fills ``sources`` {file: text} with the sources emitted again, then compares them."""
    sources.update(docs.regenerate_sources(c.d, ev.spec, c.manifest, ev.summary, ev.lut))
    made = {rel: text.encode("utf-8") if isinstance(text, str) else text for rel, text in sources.items()}
    bad = [_first_difference(rel, (c.d / rel).read_bytes() if (c.d / rel).exists() else b"", data)
           for rel, data in sorted(made.items())
           if not (c.d / rel).exists() or (c.d / rel).read_bytes() != data]
    require(not bad, "; ".join(bad[:3]))
    folders = sorted({rel.split("/")[0] + "/" for rel in sources if "/" in rel})
    files = [rel for rel in sorted(sources) if "/" not in rel]
    return f"{', '.join(files)}{''.join(f', {f} ({sum(r.startswith(f) for r in sources)} files)' for f in folders)} " \
           "emitted again from sla.yaml and lut.hex: byte for byte the same"


def _summary(c: Checker, ev: CheckContext, sources: dict, derived: dict) -> str:
    """Fills ``derived`` with summary.json as the evidence gives it, then compares."""
    from mi_certify.generator.bundle.summary import summarize
    summary = ev.summary
    stages = docs.expected_stages(c.d, ev.spec, ev.ir, c.manifest, summary.get("stages", {}), ev.lut)
    lut_json = c.read_json("lut.json")
    counts = docs.lut_counts(lut_json)
    derived.update(summarize(ev.spec, stages, counts, c.manifest.get("mi_certify", {}).get("version", "?")))
    diff = docs.differences(summary, derived)
    diff += [f"lut.json status.{k}: stored {lut_json['status'].get(k)}, cell_status counts {v}"
             for k, v in counts.items() if lut_json["status"].get(k) != v]
    require(not diff, f"summary.json differs from the evidence in {len(diff)} field(s): " + "; ".join(diff[:4]))
    return f"status {derived['status']}, {len(derived['stages'])} stage records and every headline figure " \
           "re-derived from the evidence files"


def _obligations(c: Checker, ev: CheckContext, stages: dict) -> str:
    from mi_certify.generator.bundle.obligations import collect_obligations, obligations_status
    stored = c.read_json("obligations.json")
    again = collect_obligations(ev.spec, c.d, stages)
    diff = docs.differences(stored["obligations"], again, "obligations")
    require(not diff, "obligations.json differs from the evidence: " + "; ".join(diff[:3]))
    require(stored["status"] == obligations_status(again),
            f"obligations.json status: stored {stored['status']}, derived {obligations_status(again)}")
    return f"{len(again)} obligations, {stored['status']}"


def _records(c: Checker, ev: CheckContext, stages: dict) -> str:
    want = docs.expected_documents(c.d, ev.spec, ev.ir, c.manifest, stages)
    diff = []
    for rel, fields in want.items():
        require((c.d / rel).is_file(), f"{rel} is missing")
        stored = c.read_json(rel)
        diff += [f"{rel} {x}" for x in docs.differences({k: stored.get(k) for k in fields}, fields)]
    ver = c.read_json("verification.json") if (c.d / "verification.json").exists() else None
    if ver:  # every witness's recorded IR outputs are the IR's at its x (fixed-order float64)
        wits = [("properties", r["id"], r["witness"]) for r in ver["properties"]] + \
               [("output_domain", a["action"], a["witness"]) for a in ver["output_domain"]["actions"]]
        for where, name, w in wits:
            if w is None:
                continue
            y = ev.ir.evaluate(np.array(w["x"])).tolist()
            if w.get("y_ir") != y:
                diff.append(f"verification.json {where} {name} witness y_ir: stored {w.get('y_ir')}, IR {y}")
    require(not diff, "; ".join(diff[:4]))
    return f"{', '.join(want)} and the witnesses' IR outputs re-derived from sla.yaml and the network"


def _manifest_figures(c: Checker, ev: CheckContext, stages: dict, summary: dict) -> str:
    """manifest.json's figures against ``summary`` (the derived one, or the stored one when
    the summary item failed), its controller against sla.yaml, its seed and cycles against cosim.json."""
    from mi_certify.generator.bundle.manifest import manifest_figures
    from mi_certify.generator.bundle.obligations import collect_obligations
    obligations = collect_obligations(ev.spec, c.d, stages)
    want = manifest_figures(summary, obligations)
    diff = docs.differences({k: c.manifest.get(k) for k in want}, want)
    if c.manifest.get("controller") != ev.spec.name:
        diff.append(f"controller: stored {c.manifest.get('controller')!r}, sla.yaml {ev.spec.name!r}")
    command = c.manifest.get("command", [])
    if (c.d / "cosim.json").exists():
        cos = c.read_json("cosim.json")
        if c.manifest.get("seeds", {}).get("cosim") != cos["seed"]:
            diff.append("seeds.cosim: not cosim.json's seed")
        if "--seed" not in command or command[command.index("--seed") + 1] != str(cos["seed"]):
            diff.append("command --seed: not cosim.json's seed")
        random = cos["cycles"] - cos["directed_cycles"]
        if "--cosim-cycles" not in command or command[command.index("--cosim-cycles") + 1] != str(random):
            diff.append(f"command --cosim-cycles: not cosim.json's {random} random cycles")
    require(not diff, "manifest.json differs from the evidence: " + "; ".join(diff[:4]))
    return f"status {want['status']}, obligations {want['obligations']['count']} {want['obligations']['status']}, " \
           "proof figures as derived"


def _report(c: Checker, ev: CheckContext) -> str:
    obligations = c.read_json("obligations.json")["obligations"]
    again = docs.regenerate_report(c.d, ev.spec, obligations)
    stored = {p.relative_to(c.d).as_posix() for p in c.d.rglob("*") if p.is_file()
              and (p.name in ("report.md", "report.html") or p.relative_to(c.d).as_posix() == "operator.md"
                   or p.relative_to(c.d).parts[0] == "heatmaps")}
    bad = [f"{rel}: not made again" for rel in sorted(stored - set(again))]
    bad += [_first_difference(rel, (c.d / rel).read_bytes() if rel in stored else b"", data)
            if not rel.endswith(".png") else f"{rel}: image differs"
            for rel, data in sorted(again.items()) if rel not in stored or (c.d / rel).read_bytes() != data]
    require(not bad, "; ".join(bad[:3]))
    return f"{', '.join(sorted(again))} rendered again from the evidence: byte for byte the same"


def _figures(c: Checker) -> str:
    """Every row of report.md's "Figures and their sources" (and the same figure wherever report.html
    prints it) against the field of the evidence file it names."""
    from mi_certify.generator.bundle.report_figures import compare_figures
    n, bad = compare_figures(c.d)
    require(not bad, f"{len(bad)} figure(s) differ: " + "; ".join(bad[:3]))
    return f"{n} figures of report.md and report.html equal their evidence fields"
