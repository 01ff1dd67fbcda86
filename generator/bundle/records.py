"""The certificate bundle: provenance, compact distillation records, proof obligations.

A build directory *is* the bundle (docs/certificate.md). This module holds what the
pipeline needs to make it complete and reproducible:

* :func:`source_identity` — sha256 over the installed mi-certify source files (the
  same source gives the same digest on any machine and at any commit, so the hashed
  manifest does not change when only the repository history does);
  :func:`source_commit` — the git commit of a source checkout, recorded **unhashed**
  (a commit cannot be inside the files it contains);
* :func:`canonical_command` — the command line that reproduces the build from the
  bundle's own ``inputs/`` (no absolute paths, every effective option spelled out);
* :func:`write_distillation` / :func:`read_distillation` — ``distillation.json`` and the
  partition's binary tables (NumPy .npy records: 2n + 12 bytes a box);
* :func:`collect_obligations` — every proof obligation of the build with its
  requirement, method, verdict and evidence file (``obligations.json``, hashed);
  times go to ``timings.json`` (not hashed);
* :func:`summarize` / :func:`manifest_figures` — summary.json and the manifest's figures from
  the stage records (each record is built by :mod:`.stage_records`).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from importlib import metadata, resources
from pathlib import Path

from mi_certify.generator.core.results import GOOD_VERDICTS, Status
from mi_certify.generator.core.source_id import SOURCE_PACKAGES, source_digest

#: Format marker of manifest.json.
MANIFEST_FORMAT = "mi-certify/build-v1"
#: Number of onnxruntime cross-check points after import.
CROSS_CHECK_POINTS = 256
#: Format marker of distillation.json written by :func:`write_distillation`.
DISTILLATION_FORMAT = "mi-certify/distillation-v3"
#: The packages whose files make up mi-certify's source identity.
#: Contract of proofs/index.json (FSM and RTL proofs): obligations written by those stages.
PROOF_INDEX = "proofs/index.json"
#: Files whose content depends on timing, the machine or the signer; listed in the manifest but not hashed.
UNHASHED = ("build.log", "verification_log.json", "timings.json", "provenance.json", "report.png",
            "diagnostics.json", "manifest.json.sig")


def source_identity() -> dict:
    """{"sha256": digest over every source file, "files": count}.

    The digest covers ``<package>/<relative path>`` and the bytes of every ``.py`` and
    ``.j2`` file of the four mi-certify packages, in sorted order (each name and content
    length-prefixed, so no two file sets collide by concatenation).
    """
    digest, n = source_digest()
    return {"sha256": digest, "files": n,
            "covers": "every .py and .j2 file of " + ", ".join(SOURCE_PACKAGES)}


def source_commit() -> dict:
    """Git commit of the source checkout mi-certify runs from, and whether it has local
    changes; ``{"commit": None, ...}`` when it is not a git checkout (installed wheel)."""
    root = Path(str(resources.files("mi_certify.generator"))).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return {"commit": None, "dirty": None, "reason": "not a git checkout"}
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError) as exc:
        return {"commit": None, "dirty": None, "reason": f"git unavailable: {exc}"}


def package_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def canonical_command(model_name: str, spec_name: str, opts) -> list[str]:
    """The build command, relative to the bundle (``inputs/``), with every option that
    changes the outputs written out (defaults included); ``OUT`` stands for the output
    directory, which does not change any hashed byte."""
    cmd = ["mi-certify", "build", f"inputs/model/{model_name}", "--sla", f"inputs/spec/{spec_name}", "--out", "OUT",
           "--cosim-cycles", str(opts.cosim_cycles), "--seed", str(opts.cosim_seed),
           "--verify-timeout", f"{opts.verify_timeout:g}"]
    if opts.skip_cosim:
        cmd.append("--skip-cosim")
    if opts.skip_lint:
        cmd.append("--skip-lint")
    if opts.skip_rtl_proofs:
        cmd.append("--skip-rtl-proofs")
    if getattr(opts, "skip_synth", False):
        cmd.append("--skip-synth")
    if not opts.verify:
        cmd.append("--no-verify")
    if not opts.distill:
        cmd.append("--sample-lut")
    if opts.heatmap:
        cmd += ["--heatmap", ",".join(opts.heatmap)]
    return cmd


# --- distillation.json and its tables --------------------------------------------------------

#: The partition's tables beside distillation.json (NumPy .npy, format 1.0: a documented
#: header naming the little-endian record layout, then the records; np.load reads them).
DISTILLATION_TABLES = {"boxes": "distillation_boxes.npy", "witnesses": "distillation_witnesses.npy"}


def _npy_bytes(arr) -> bytes:
    import io

    import numpy as np
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(arr), version=(1, 0), allow_pickle=False)
    return buf.getvalue()


def write_distillation(d: Path, boxes, witnesses, policy: str, fidelity: dict) -> None:
    """Write distillation.json (policy, fidelity, the codes and the SHA-256 of each table) and
    the tables ``distillation_boxes.npy`` (one record per final box:
    :func:`~.distill.box_dtype`) and ``distillation_witnesses.npy`` (one record per replayed
    witness of a resolved cell: :func:`~.distill.witness_dtype`): 2n + 12 bytes a box, the
    reference bundle's 3 MB of JSON lines → ~0.5 MB."""
    from mi_certify.generator.build.distill import METHODS, UNDECIDED, VERDICTS

    d = Path(d)
    tables = {"boxes": _npy_bytes(boxes), "witnesses": _npy_bytes(witnesses)}
    head = {"format": DISTILLATION_FORMAT, "policy": policy, "fidelity": fidelity,
            "tables": {k: {"file": DISTILLATION_TABLES[k], "records": int(len(a)),
                           "sha256": hashlib.sha256(tables[k]).hexdigest()}
                       for k, a in (("boxes", boxes), ("witnesses", witnesses))},
            "codes": {"verdict": list(VERDICTS), "method": list(METHODS), "undecided_method": UNDECIDED},
            "note": "boxes: inclusive level ranges per input (input 0 first), action token, verdict and method "
                    "codes, confident bit, and for method 'bounds' the CROWN margin lower bound > 0 over the "
                    "closed box (NaN otherwise); witnesses: address, action token, point; a resolved cell holds "
                    "the actions of its witnesses"}
    for k, data in tables.items():
        (d / DISTILLATION_TABLES[k]).write_bytes(data)
    (d / "distillation.json").write_text(json_text(head), encoding="utf-8")


def read_distillation(d: Path, spec=None) -> dict:
    """Read distillation.json and its tables into {"boxes", "witnesses" (structured arrays),
    "policy", "fidelity"} and, given the spec, "resolved_cells" (:func:`~.distill.resolved_cells`).

    Raises:
        ValueError if a file is missing, not the distillation-v3 format, or a table's SHA-256
        or record layout differs from what distillation.json states.
    """
    import io

    import numpy as np
    d = Path(d)
    try:
        raw = json.loads((d / "distillation.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"distillation.json: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != DISTILLATION_FORMAT:
        raise ValueError(f"distillation.json: not a {DISTILLATION_FORMAT} file")
    out = {"policy": raw["policy"], "fidelity": raw["fidelity"]}
    for k, meta in raw["tables"].items():
        try:
            data = (d / meta["file"]).read_bytes()
        except OSError as exc:
            raise ValueError(f"{meta['file']}: {exc.strerror}") from exc
        if hashlib.sha256(data).hexdigest() != meta["sha256"]:
            raise ValueError(f"{meta['file']}: SHA-256 differs from distillation.json")
        arr = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
        if arr.dtype.names is None or len(arr) != meta["records"]:
            raise ValueError(f"{meta['file']}: not {meta['records']} records")
        out[k] = arr
    if spec is not None:
        from mi_certify.generator.build.distill import box_dtype, resolved_cells, witness_dtype
        n = len(spec.inputs)
        if out["boxes"].dtype != box_dtype(n) or out["witnesses"].dtype != witness_dtype(n):
            raise ValueError(f"distillation tables: record layout is not that of {n} inputs")
        out["resolved_cells"] = resolved_cells(spec, out["boxes"], out["witnesses"], out["policy"])
    return out


# --- the bundle's JSON evidence ---------------------------------------------------------------

def json_text(obj) -> str:
    """The bundle's JSON layout: two-space indent, sorted keys, one final newline."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


class Evidence:
    """The JSON evidence of one bundle directory ``d``.

    The pipeline writes each document through :meth:`write`, which keeps what the file
    now holds (the parsed text, so readers see exactly the bytes on disk); the checker
    opens a finished bundle with the same class and reads the files. Either way
    :func:`collect_obligations` and the report read the evidence through :meth:`read`.
    """

    def __init__(self, d: Path):
        self.d = Path(d)
        self._docs: dict[str, object] = {}

    def write(self, rel: str, obj) -> None:
        """Write ``obj`` as ``d/rel`` (:func:`json_text`), creating its folder."""
        text = json_text(obj)
        path = self.d / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self._docs[rel] = json.loads(text)

    def has(self, rel: str) -> bool:
        """True when the bundle holds ``rel`` (JSON or any other file)."""
        return rel in self._docs or (self.d / rel).exists()

    def read(self, rel: str):
        """The parsed JSON document ``rel``; raises OSError / ValueError for a missing or bad file."""
        if rel not in self._docs:
            self._docs[rel] = json.loads((self.d / rel).read_text(encoding="utf-8"))
        return self._docs[rel]


# --- proof obligations ----------------------------------------------------------------------

NETWORK_METHOD = ("branch and bound over the input box with CROWN bounds, Marabou on boxes left open, exact Z3 "
                  "confirmation of PROVED on networks with <= 64 ReLUs; witnesses replayed on onnxruntime and the IR")


def collect_obligations(spec, d: Path | Evidence, stages: dict) -> list[dict]:
    """Every proof obligation of the build in ``d`` (a directory or its :class:`Evidence`;
    deterministic: no times).

    Each: {"id", "group" (network | lut | fsm | rtl | cosim), "requirement" (sla.yaml id:
    property id, ``fsm.<param>``, ``actions.<name>``, ``inputs``, ``rtl``), "claim",
    "method", "verdict" (proved | violated | unknown | passed | failed), "required" (the
    certificate needs it discharged), "evidence" (bundle file), "counterexample" (file or
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
            add(id=f"network.unreachable.{a['action']}", group="network", requirement=f"actions.{a['action']}",
                claim=f"{a['action']} is never decoded in the envelope (violated = reachable, with a witness)",
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
    """"discharged" when every required obligation is proved/passed, else "open"."""
    return "discharged" if all(o["verdict"] in GOOD_VERDICTS for o in obs if o["required"]) else "open"


# --- the documents a person reads: summary.json and the manifest's figures ------------------

#: Fields of the ``hdl`` stage copied into summary.json ``hdl`` (when the stage measured them: ok,
#: or failed on a missed target).
HDL_SUMMARY_KEYS = ("fmax_mhz_hx8k", "fmax_mhz_up5k", "fmax_mhz_ecp5_25f", "lut4", "dff", "bram", "goal_met",
                    "devices", "target")


def summarize(spec, stages: dict, lut_counts: dict, version: str) -> dict:
    """summary.json from the stage records and the final LUT's cell counts (lut.json
    ``status``, after the property masks): status, failed and skipped stages, the
    headline figures. A pure function, so ``mi-certify check`` recomputes it."""
    failed = [k for k, v in stages.items() if v["status"] == Status.FAILED]
    skipped = [k for k, v in stages.items() if v["status"] == Status.SKIPPED]
    lut = stages["lut"]
    cosim = stages["cosim"]
    hdl = stages["hdl"]
    return {"status": Status.FAILED.value if failed else "incomplete" if skipped else Status.OK.value, "failed_stages": failed,
            "skipped_stages": skipped, "stages": stages,
            "lut": {"cells": sum(lut_counts.values()), **{k: lut_counts[k] for k in ("sampled", "proven", "resolved")},
                    **({"proven_share": lut["proven_share"], "fidelity": lut["fidelity"]} if "fidelity" in lut else {})},
            "cosim": ({"cycles": cosim["cycles"], "mismatches": cosim["mismatches"]} if "cycles" in cosim
                      else {"cycles": 0, "mismatches": None}),
            **({"coverage": cosim["coverage"]} if "coverage" in cosim else {}),
            "fsm_proofs": stages["fsm_proofs"]["obligations"],
            "rtl_proofs": stages["rtl_proofs"].get("obligations", {}),
            "hdl": {"encoding": stages["emit"]["encoding"], "module": spec.module_name,
                    **({k: hdl.get(k) for k in HDL_SUMMARY_KEYS} if "place_and_route" in hdl else {})},
            "artifacts": {"python_runtime": stages["emit"]["python_runtime"], "verilog": stages["emit"]["verilog"]},
            "controller": spec.name, "mi_certify": version}


def manifest_figures(summary: dict, obligations: list[dict]) -> dict:
    """The manifest's status and figures, from summary.json and obligations.json."""
    lut = summary["lut"]
    return {"status": summary["status"],
            "obligations": {"file": "obligations.json", "count": len(obligations),
                            "status": obligations_status(obligations)},
            "proofs": {"network_properties": "proved" if summary["stages"]["verify"]["status"] == Status.OK else "not proved",
                       "lut": f"{lut['proven']} cells proven, {lut['resolved']} resolved, {lut['sampled']} "
                              "sampled (not proven)"}}
