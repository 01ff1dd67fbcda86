"""The ``mi-certify`` command line.

Exit codes: 0 success; 1 the build ran but a stage failed (see summary.json), or
``verify`` found a violated property, or ``check`` a failed item; 2 bad input (model,
spec, output directory) with one error line naming file, field or node, and reason;
3 ``verify``: some property unknown, ``check``: nothing failed but items were skipped;
130 interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from mi_certify.generator.core.errors import MiCertifyError

_STAGE_TITLES = {"spec": "read sla.yaml", "import": "import ONNX + onnxruntime cross-check",
                 "verify": "verify network properties + output domain",
                 "lut_properties": "check sla.yaml properties on every LUT cell",
                 "lut": "distill the network into the LUT", "emit": "emit Python runtime + Verilog",
                 "lint": "verilator --lint-only -Wall", "cosim": "co-simulate RTL vs Python (cocotb + Icarus)",
                 "c_runtime": "check the C runtime (gcc, clang, MISRA, Cortex-M4) and co-simulate it",
                 "fsm_proofs": "prove the LUT-FSM invariants (Z3, k-induction)",
                 "rtl_proofs": "prove the Verilog (Yosys + Z3)",
                 "sva": "prove the SVA harness (SymbiYosys + Yices), the second path",
                 "hdl_encoding": "pick the LUT encoding (Yosys estimate)",
                 "hdl_target": "measure the declared target (nextpnr), for the header",
                 "hdl": "synthesise + place and route every device (Yosys, nextpnr)",
                 "report": "write report.html, report.md, heatmaps",
                 "report_screenshot": "screenshot report.html (headless Chromium)",
                 "soc_emit": "emit the raw-input quantizer, bus wrappers, SystemRDL + PeakRDL",
                 "soc_lint": "verilator --lint-only -Wall (raw top, AXI4-Lite, Wishbone)",
                 "soc_proofs": "prove the quantizer on every raw word (Yosys + Z3)",
                 "soc_bus_cosim": "co-simulate AXI4-Lite + Wishbone vs Python (cocotb + Icarus)"}


def _parser() -> argparse.ArgumentParser:
    from mi_certify.generator.pipeline.defaults import COSIM_RANDOM_CYCLES, COSIM_SEED, version

    p = argparse.ArgumentParser(
        prog="mi-certify",
        description="Turn a neural meta controller (ONNX) into a deterministic LUT-FSM: Python runtime, "
                    "Verilog-2001, co-simulation and an evidence bundle.",
        epilog="Exit codes: 0 ok; 1 failed: a build stage (build), a property violated (verify), an item "
               "failed (check), a tampered log or a replay mismatch (audit); 2 bad input; 3 nothing failed but "
               "not everything was decided: items skipped (check), a property unknown (verify); 130 interrupted "
               "(Ctrl-C). Docs: docs/user-guide.md")
    p.add_argument("--version", action="version", version=f"mi-certify {version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_build_parser(sub, COSIM_RANDOM_CYCLES, COSIM_SEED)
    _add_verify_parsers(sub)
    _add_bundle_parsers(sub)
    c = sub.add_parser("check-spec", help="validate an sla.yaml and print what it declares",
                       description="Validate SLA.yaml against the mi-certify/v1 schema and its semantic rules.")
    c.add_argument("sla", metavar="SLA.yaml", help="the spec to validate")
    from mi_certify.generator.cli.runtime import add_parsers
    from mi_certify.generator.cli.train import add_parsers as add_train_parsers
    p.set_defaults(runtime_handlers={**add_parsers(sub), **add_train_parsers(sub)})
    return p


def _add_build_parser(sub, cosim_random_cycles: int, cosim_seed: int) -> None:
    COSIM_RANDOM_CYCLES, COSIM_SEED = cosim_random_cycles, cosim_seed  # noqa: N806 - the help texts name them
    b = sub.add_parser("build", help="build runtime, RTL and evidence from MODEL.onnx and sla.yaml",
                       description="Import and cross-check the network, build the LUT over the quantized grid, "
                                   "emit <name>.py and <name>.v, lint the Verilog and co-simulate it against the "
                                   "Python reference. Writes OUT atomically; summary.json says ok or failed.")
    b.add_argument("model", metavar="MODEL.onnx", help="the controller network (ONNX)")
    b.add_argument("--sla", required=True, metavar="SLA.yaml", help="the spec: inputs, actions, FSM, properties "
                   "(docs/sla-yaml.md)")
    b.add_argument("--out", metavar="DIR", default=None,
                   help="output directory (default: build/<controller name>); a previous build there is replaced")
    b.add_argument("--cosim-cycles", type=int, default=None, metavar="N",
                   help=f"random co-simulation cycles after the directed sequences (default: sla.yaml cosim.cycles, "
                        f"else {COSIM_RANDOM_CYCLES}; minimum 10000)")
    b.add_argument("--seed", type=int, default=COSIM_SEED, metavar="S",
                   help=f"seed of the random co-simulation stimulus (default {COSIM_SEED})")
    b.add_argument("--skip-cosim", action="store_true",
                   help="do not co-simulate (the build is then not a complete certificate)")
    b.add_argument("--skip-lint", action="store_true", help="do not run Verilator lint")
    b.add_argument("--skip-rtl-proofs", action="store_true",
                   help="do not prove the Verilog (Yosys + Z3); the build is then incomplete")
    b.add_argument("--skip-synth", action="store_true",
                   help="do not synthesise / place and route the Verilog (Yosys, nextpnr-ice40: cell counts, Fmax); "
                        "the build is then incomplete")
    b.add_argument("--no-verify", action="store_true",
                   help="do not prove the sla.yaml properties and the output domain on the network (bounds, "
                        "Marabou, Z3); the build is then incomplete")
    b.add_argument("--sample-lut", action="store_true",
                   help="fill the LUT from cell centres instead of certified distillation (fast; every cell is then "
                        "'sampled', not proven)")
    b.add_argument("--heatmap", metavar="X,Y", default=None,
                   help="also write heatmap_X_Y.png: the LUT over inputs X and Y (other inputs at their middle "
                        "level), resolved cells marked")
    b.add_argument("--verify-timeout", type=_seconds, default=60.0, metavar="S",
                   help="wall-clock seconds per verification query for its search, and as many for its exact "
                        "confirmation (default 60: a query ends within 2 x 60 s); a timeout is UNKNOWN and "
                        "fails the build")
    b.add_argument("--json", action="store_true", help="print summary.json to stdout instead of a table")
    _add_backend_options(b, "the distillation's slices")


def _seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive, finite number of seconds")
    return value


def _add_backend_options(p, what: str) -> None:
    p.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help=f"run {what} on a Dask cluster: a scheduler address (tcp://host:8786, tls://...; "
                        "docs/scale-out.md) or 'local' (a Dask LocalCluster of --workers processes here); default: "
                        "worker processes of our own, no Dask. The results are byte-identical either way")
    p.add_argument("--workers", type=int, default=2, metavar="N",
                   help="worker processes (default 2; 1: in this process), also for verify's LP leaves; with "
                        "--scheduler local, the LocalCluster's workers; with a scheduler address, the cluster's own "
                        "workers are used")
    p.add_argument("--connect-timeout", type=_seconds, default=10.0, metavar="S",
                   help="with --scheduler: seconds to reach the scheduler and see a worker (default 10)")


def _backend_spec(args):
    """The BackendSpec of --scheduler / --workers / --connect-timeout (BackendError-free checks here)."""
    from mi_certify.verification.tools.backends import BackendSpec

    if args.workers < 1:
        raise MiCertifyError("at least one worker is needed", where="--workers")
    if not args.connect_timeout > 0:
        raise MiCertifyError("must be a positive number of seconds", where="--connect-timeout")
    return BackendSpec(scheduler=args.scheduler, workers=args.workers, connect_timeout=args.connect_timeout)


def _add_verify_parsers(sub) -> None:
    i = sub.add_parser("inspect", help="import an ONNX model, cross-check it with onnxruntime, print the IR",
                       description="Import MODEL.onnx into the affine/ReLU IR, compare it with onnxruntime at 256 "
                                   "points of the input box and print the IR. Exit 2 if the model is refused.")
    i.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    i.add_argument("--sla", metavar="SLA.yaml", default=None,
                   help="take the input box from this spec (default: [-1, 1] for every input)")

    v = sub.add_parser("verify", help="prove sla.yaml properties or a VNN-LIB property on MODEL.onnx",
                       description="Decide properties of the network soundly: CROWN bounds with input splitting, "
                                   "then Marabou (built from our IR, child process, timeout); every counterexample "
                                   "is replayed on onnxruntime and the IR; PROVED on <= 64 ReLUs is confirmed by Z3. "
                                   "Exit (--sla, --vnnlib) 0 all proved (unsat), 1 some violated (sat), 3 some unknown, 2 bad input; "
                                   "(--campaign) 0 every instance sat or unsat, 3 some timeout or unknown, 1 some "
                                   "error, 2 bad input; 130 Ctrl-C.")
    v.add_argument("model", metavar="MODEL.onnx", nargs="?", default=None,
                   help="the network (ONNX); with --campaign only for a list of VNN-LIB files")
    src = v.add_mutually_exclusive_group(required=True)
    src.add_argument("--sla", metavar="SLA.yaml", help="prove its properties and the output domain over its envelope")
    src.add_argument("--vnnlib", metavar="PROP.vnnlib", help="decide one VNN-LIB property (unsafe region); the last "
                     "line of stdout is sat, unsat or unknown")
    src.add_argument("--campaign", metavar="LIST", help="decide every instance of LIST: VNN-COMP's instances.csv "
                     "(ONNX,VNNLIB[,TIMEOUT] per line, paths relative to LIST's folder) or, with MODEL.onnx, one "
                     "VNN-LIB file per line; writes --results in VNN-COMP's results.csv format")
    v.add_argument("--results", metavar="FILE.csv", help="with --campaign: the results file (default: "
                   "results.csv here): category,onnx,vnnlib,prepare_time,result,run_time per instance")
    v.add_argument("--category", metavar="NAME", help="with --campaign: the results' first column (default: "
                   "the name of LIST's folder)")
    v.add_argument("--timeout", type=_seconds, default=60.0, metavar="S",
                   help="wall-clock seconds per query, its search and its exact confirmation together (default 60); "
                        "a query that runs out is unknown")
    v.add_argument("--confirm-timeout", type=_seconds, default=300.0, metavar="S",
                   help="at most this many of a query's --timeout seconds for the exact confirmation of a "
                        "PROVED on networks with <= 64 ReLUs (default 300); the search then takes the share "
                        "timeout / (timeout + min(confirm, timeout)) of the query; an unconfirmed proof is unknown")
    v.add_argument("--total-timeout", type=_seconds, default=None, metavar="S",
                   help="with --sla or --vnnlib: wall-clock seconds for the whole run; each query must end "
                        "within what is left (its search takes its --timeout share of it, all of it when no exact "
                        "confirmation runs, and the confirmation the rest) and a query for which nothing is "
                        "left is not started (unknown). Default: no bound beyond the per-query ones")
    v.add_argument("--witness", metavar="FILE", help="with --vnnlib: write the counterexample in VNN-COMP format")
    v.add_argument("--json", metavar="FILE", dest="json_out", help="write every result (verdict, time, method, "
                   "witness, statistics) as JSON")
    v.add_argument("--no-marabou", action="store_true", help="bounds only; open boxes stay unknown")
    _add_backend_options(v, "the campaign's instances (--campaign)")


def _add_bundle_parsers(sub) -> None:
    k = sub.add_parser("check", help="re-check a certificate bundle: hashes, signature, proofs, replays, LUT",
                       description="Verify every sha256 in BUNDLE/manifest.json (and the Ed25519 signature with "
                                   "--pubkey), replay every counterexample and witness on onnxruntime, re-derive the "
                                   "LUT from the distillation boxes and compare it with lut.hex, the Verilog and the "
                                   "Python runtime, evaluate every proven cell on onnxruntime, re-run every network "
                                   "query, every CROWN box bound, every SMT-LIB obligation (z3), lint and "
                                   "co-simulation. One line per item: PASS/FAIL/SKIP and whether the path is "
                                   "independent of the build's own procedure. Exit 0 all passed, 1 some failed, "
                                   "3 nothing failed but some items were skipped, 2 bad input.")
    k.add_argument("bundle", metavar="BUNDLE", help="a build directory (e.g. certs/meta_controller)")
    k.add_argument("--pubkey", metavar="PUB.pem", help="Ed25519 public key (PEM) the signature must verify with")
    k.add_argument("--quick", action="store_true",
                   help="skip re-running the network queries, lint, co-simulation and synthesis / place and route "
                        "(those items are SKIP; exit 3); everything else, the Verilog's tie to the proofs "
                        "included, is still checked")
    k.add_argument("--json", metavar="FILE", dest="json_out", help="also write every item as JSON")

    s = sub.add_parser("sign", help="sign BUNDLE/manifest.json with an Ed25519 private key",
                       description="Write BUNDLE/manifest.json.sig: an Ed25519 signature over the exact bytes of "
                                   "manifest.json (which binds every file by its sha256). The key is a PEM PKCS#8 "
                                   "file (mi-certify keygen, or openssl genpkey -algorithm ed25519); a password "
                                   "comes from MI_CERTIFY_KEY_PASSWORD.")
    s.add_argument("bundle", metavar="BUNDLE", help="a build directory")
    s.add_argument("--key", required=True, metavar="KEY.pem", help="Ed25519 private key (PEM)")

    g = sub.add_parser("keygen", help="make an Ed25519 key pair for signing bundles, or an audit-log HMAC key",
                       description="Write a new Ed25519 private key (PEM PKCS#8, mode 0600; encrypted with "
                                   "MI_CERTIFY_KEY_PASSWORD when set) and its public key (PEM); with --hmac, 32 "
                                   "random bytes for mi-certify run --key. Never overwrites, and refuses to write a "
                                   "key inside a git working tree. Default folder: $MI_CERTIFY_KEY_DIR, else "
                                   "$XDG_CONFIG_HOME/mi-certify/keys, else ~/.config/mi-certify/keys.")
    g.add_argument("--out", metavar="NAME", help="writes NAME.key (private) and NAME.pub (public); with --hmac "
                   "the key file NAME (default: signing / audit.key in the key folder)")
    g.add_argument("--hmac", action="store_true", help="an HMAC key for audit logs (run --key, audit --key)")


def _check_out_dir(out: Path) -> None:
    """Refuse an output directory that cannot be made because it, or a folder on its way,
    exists and is not a directory (e.g. --out afile/sub): one error before the build starts."""
    from mi_certify.generator.core.errors import BuildError

    for p in (out, *out.parents):
        try:
            if not (p.exists() or p.is_symlink()):
                continue
        except OSError:
            return
        if not p.is_dir():
            raise BuildError("exists and is not a directory" if p == out else
                             f"is not a directory, so the output directory {out} cannot be made inside it",
                             file=str(p))
        return


def _run_build(args, console: Console) -> int:
    from mi_certify.generator.pipeline.runner import BuildOptions, build
    from mi_certify.generator.core.spec import load_spec

    if args.cosim_cycles is not None and args.cosim_cycles < 10_000:
        console.print("[red]error:[/] --cosim-cycles: at least 10000 random cycles are required")
        return 2
    out = args.out
    if out is None:
        out = str(Path("build") / load_spec(args.sla).name)
    _check_out_dir(Path(out))
    # the stage lines and the table are the build's output (stdout); stderr holds only errors,
    # so a refused input gives exactly one line there
    console = Console(soft_wrap=True)
    opts = BuildOptions(cosim_cycles=args.cosim_cycles, cosim_seed=args.seed, skip_cosim=args.skip_cosim,
                        skip_lint=args.skip_lint, skip_rtl_proofs=args.skip_rtl_proofs,
                        skip_synth=args.skip_synth, verify=not args.no_verify, distill=not args.sample_lut,
                        heatmap=tuple(args.heatmap.split(",", 1)) if args.heatmap else None, verify_timeout=args.verify_timeout)
    from mi_certify.verification.tools.backends import open_backend

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                        console=console, transient=True, disable=not console.is_terminal)
    with open_backend(_backend_spec(args)) as backend:  # a Dask scheduler is reached (and checked) now
        if args.scheduler:
            console.print(f"distillation on {backend.describe()}", highlight=False)
        opts.backend = backend
        with progress:
            result = build(args.model, args.sla, out, opts, on_event=_progress_events(progress, console))
    if args.json:
        print(json.dumps(result.summary, indent=2, sort_keys=True))
    else:
        _print_build(result, console)
    return 1 if result.status == "failed" else 0


#: without a terminal (a CI log, a pipe), a running stage's progress is a plain line at every tenth
PLAIN_PROGRESS_STEP = 0.1


#: Set once the command is interrupted: the build's background jobs (verify, sva) print nothing more.
_INTERRUPTED = threading.Event()


def _progress_events(progress: Progress, console: Console):
    """The build's on_event: a progress bar per running stage (on a terminal; elsewhere a plain line
    ``  <stage>: 40%`` at every :data:`PLAIN_PROGRESS_STEP`), one line per finished stage."""
    tasks: dict[str, int] = {}
    shown: dict[str, int] = {}
    details: dict[str, str] = {}
    plain = not console.is_terminal

    def on_event(kind, name, value):
        if _INTERRUPTED.is_set():  # a background stage's tool killed at exit: no verdict line after "interrupted"
            return
        if kind == "start":
            tasks[name] = progress.add_task(_STAGE_TITLES.get(name, name), total=1.0)
            shown[name] = 0
        elif kind == "progress":
            progress.update(tasks[name], completed=value)
            step = int(math.floor(min(max(value, 0.0), 1.0) / PLAIN_PROGRESS_STEP + 1e-9))
            if plain and step > shown.get(name, 0) and value < 1.0:
                shown[name] = step
                said = f" ({details[name]})" if name in details else ""
                console.print(f"  {_STAGE_TITLES.get(name, name)}: {round(step * PLAIN_PROGRESS_STEP * 100)}%{said}",
                              highlight=False)
        elif kind == "detail" and name in tasks:
            details[name] = value
            progress.update(tasks[name], description=f"{_STAGE_TITLES.get(name, name)} ({value})")
        elif kind == "note":
            console.print(f"  {_STAGE_TITLES.get(name, name)}: {value}", highlight=False)
        elif kind == "done":
            stage, status = name.split(":")
            progress.remove_task(tasks.pop(stage))
            details.pop(stage, None)
            mark = {"ok": "[green]✓[/]", "skipped": "[yellow]-[/]"}.get(status, "[red]✗[/]")
            console.print(f"{mark} {_STAGE_TITLES.get(stage, stage):55s} {value:7.2f} s")
    return on_event


def _print_build(result, console: Console) -> None:
    """The stage table (one row per StageResult), import notes, status and warnings."""
    s = result.summary
    t = Table(title=f"mi-certify build: {s['controller']}", show_header=True)
    for col in ("stage", "status", "detail"):
        t.add_column(col)
    for stage in result.stages:
        st = stage.record
        shown = stage.name in _STAGE_DETAIL and (st["status"] != "skipped" or stage.name == "hdl")
        detail = _STAGE_DETAIL[stage.name](st) if shown else ""
        color = {"ok": "green", "failed": "red"}.get(st["status"], "yellow")
        t.add_row(stage.name, f"[{color}]{st['status']}[/]", detail)
    console.print(t)
    for note in s["stages"].get("import", {}).get("notes", []):
        console.print(f"[yellow]import note:[/] {note}", highlight=False)
    color = {"ok": "green", "failed": "red"}.get(s["status"], "yellow")
    console.print(f"status: [{color}]{s['status']}[/]  →  {result.out_dir}")
    if s["skipped_stages"]:
        console.print(f"[yellow]warning:[/] skipped stages: {', '.join(s['skipped_stages'])}; this build is not a "
                      "complete certificate")
    if s["lut"]["sampled"]:
        console.print(f"[yellow]note:[/] {s['lut']['sampled']} LUT cells are sampled at their centre, not proven.")
    for st in s["stages"].values():   # why a stage failed, and what a passing stage warns of
        if st.get("status") == "failed" and isinstance(st.get("error"), str):
            console.print(f"[red]error:[/] {st['error']}", highlight=False)
        elif isinstance(st.get("warning"), str):   # low agreement, a missed advisory clock target
            console.print(f"[yellow]warning:[/] {st['warning']}", highlight=False)


def _lut_detail(st: dict) -> str:
    detail = f"{st['cells']} cells: {st['proven']} proven, {st['resolved']} resolved, {st['sampled']} sampled"
    if "fidelity" in st:
        f = st["fidelity"]
        detail += (f"; agreement with the network {f['agreement']:.2%} on {f['points']} points, "
                   f"{f['proven_agree']}/{f['proven_points']} in proven cells")
    return detail


def _cosim_detail(st: dict) -> str:
    return f"{st['cycles']} cycles, {st['mismatches']} mismatches" + (f"; {st['error']}" if st.get("error") else "")


def _lut_properties_detail(st: dict) -> str:
    # not_applicable: an output-bound property (on the network's logits), which no LUT cell holds
    detail = ", ".join(f"{k} {v}" if v != "not_applicable" else f"{k} not applicable (bounds the network's outputs)"
                       for k, v in st["properties"].items()) or "no properties"
    if st.get("overridden_cells"):
        detail += f"; {st['overridden_cells']} cells overridden to the conservative action"
    return detail


def _proofs_detail(st: dict) -> str:
    obs = st.get("obligations", {})
    if not obs:
        return st.get("error", "")
    bad = [k for k, v in obs.items() if v != "proved"]
    return (f"{len(obs) - len(bad)}/{len(obs)} obligations proved" +
            (f"; not proved: {', '.join(f'{k} {obs[k]}' for k in bad)}" if bad else ""))


def _verify_detail(st: dict) -> str:
    # not_applicable: an output-bound property (on the network's logits), which no LUT cell holds
    detail = ", ".join(f"{k} {v}" if v != "not_applicable" else f"{k} not applicable (bounds the network's outputs)"
                       for k, v in st["properties"].items()) or "no properties"
    detail += f"; reachable: {', '.join(st['reachable_actions']) or 'none'}"
    for key, word in (("unreachable_actions", "proved unreachable"), ("unknown_reachability", "reachability unknown")):
        if st.get(key):
            detail += f"; {word}: {', '.join(st[key])}"
    return detail


def _hdl_detail(st: dict) -> str:
    if "place_and_route" not in st:
        return st.get("reason", st.get("error", ""))
    pnr = st["place_and_route"]
    mhz = ", ".join(f"{'does not fit' if p['fmax_mhz'] is None else str(p['fmax_mhz']) + ' MHz'} {dev.upper()}"
                    for dev, p in pnr.items())
    w = pnr.get("hx8k")
    target = st.get("target")
    return (f"Fmax {mhz} (registered-input wrapper)"
            + ("" if st["goal_met"] else "; below the per-device goals of docs/hdl.md (not hdl.target): " + ", ".join(
                f"{dev.upper()} ({p['goal_mhz']:g} MHz)" for dev, p in pnr.items()
                if p["fmax_mhz"] is None or p["fmax_mhz"] < p["goal_mhz"]))
            + (f"; controller alone {st['lut4']} LUT4, {st['dff']} DFF, {st['bram']} BRAM" if st.get("lut4") is not None
               else f"; controller alone not synthesised ({st.get('not_measured', 'too large')})")
            + (f"; wrapper {w['lut4']} LUT4, {w['dff']} DFF, {w['bram']} BRAM" if w and w.get("lut4") is not None
               else f"; wrapper needs {w['bram']} BRAM" if w else "")
            + (f"; {target['detail']}" if target and st["status"] == "ok" else ""))


def _c_runtime_detail(st: dict) -> str:
    if "cortex_m4" not in st or "cosim" not in st:
        return st.get("reason", st.get("error", ""))
    m4, co, mi = st["cortex_m4"], st["cosim"], st["misra"]
    return (f"gcc, clang {'clean' if set(st['compilers'].values()) == {'clean'} else 'WARNINGS'}; MISRA "
            f"{mi['findings']} findings, {mi['unexplained']} unexplained (deviations: {', '.join(mi['deviated_rules'])}); "
            f"Cortex-M4 {m4['code_bytes']} B code, {m4['const_bytes']} B const, stack {m4['stack_bytes']} B; "
            f"{co['cycles']} cycles, {co['mismatches'] + co['lut_mismatches']} mismatches"
            + (f"; {st['error']}" if "error" in st else ""))


def _import_detail(st: dict) -> str:
    oc = st["onnxruntime_check"]
    return f"{st['relus']} ReLUs, = onnxruntime within {oc['tolerance']:g} on {oc['points']} points"


#: The detail column of the build table, per stage (a skipped stage shows none, hdl its reason).
_STAGE_DETAIL = {
    "lut": _lut_detail, "cosim": _cosim_detail, "lut_properties": _lut_properties_detail, "c_runtime": _c_runtime_detail,
    "fsm_proofs": _proofs_detail, "rtl_proofs": _proofs_detail, "verify": _verify_detail,
    "sva": lambda st: (f"{st['assertions']} assertions, k-induction depth {st['depth']}: {st['detail']}"
                       if "detail" in st else st.get("error", "")),
    "emit": lambda st: f"{st['verilog']} ({st['encoding']} LUT)", "hdl": _hdl_detail, "import": _import_detail,
    "lint": lambda st: "clean" if st.get("clean") else "; ".join(st.get("messages", [])[:3]) or st.get("error", ""),
    "soc": lambda st: st.get("error") or (
        f"quantizer {sum(v == 'proved' for v in (st.get('quantizer_proofs') or {}).values())}/"
        f"{len(st.get('quantizer_proofs') or {})} proved; "
        + ", ".join(f"{b} {r['transactions']} transactions, {r['mismatches']} mismatches"
                    for b, r in (st.get("bus_cosim") or {}).items())),
}


def _run_inspect(args, console: Console) -> int:
    import numpy as np

    from mi_certify.generator.frontend.model import load_model
    from mi_certify.generator.core.spec import load_spec

    model = load_model(args.model)
    ir = model.ir
    if args.sla:
        spec = load_spec(args.sla)
        from mi_certify.generator.core.lut import check_shapes
        check_shapes(spec, ir, args.model)
        lo, hi = np.array([i.min for i in spec.inputs]), np.array([i.max for i in spec.inputs])
    else:
        lo, hi = -np.ones(ir.n_inputs), np.ones(ir.n_inputs)
    worst = model.cross_check(lo, hi)
    console.print(f"{args.model}: {ir.n_inputs} inputs, {ir.n_outputs} outputs, {ir.n_relus} ReLUs")
    for line in ir.describe():
        console.print("  " + line, highlight=False)
    for note in ir.notes:
        console.print(f"  [yellow]note:[/] {note}")
    console.print(f"onnxruntime cross-check: 256 points, max relative difference {worst:.3g} (tolerance 1e-5)")
    return 0


def _verdict_style(v: str) -> str:
    return {"proved": "[green]proved[/]", "violated": "[red]violated[/]"}.get(v, "[yellow]unknown[/]")


def _witness_text(w: dict | None) -> str:
    if not w:
        return ""
    return "x=[" + ", ".join(f"{v:.6g}" for v in w["x"]) + "]"


def _run_verify(args, console: Console) -> int:
    from mi_certify.verification.nn.nn_verify import VerifyOptions

    from mi_certify.generator.frontend.model import load_model

    # --timeout bounds each query as a whole (search and exact confirmation); the confirmation takes
    # at most --confirm-timeout of it (decide: the search's share is timeout / (timeout + confirm))
    opts = VerifyOptions(timeout=args.timeout, confirm_timeout=min(args.confirm_timeout, args.timeout),
                         use_marabou=not args.no_marabou, workers=args.workers, whole_query=True)
    for target in (args.witness, args.json_out, args.results):
        if target and not Path(target).resolve().parent.is_dir():
            raise MiCertifyError("the folder of this output file does not exist", file=target)
    if args.campaign:
        if args.total_timeout is not None:
            raise MiCertifyError("not with --campaign (each instance has its own timeout)", where="--total-timeout")
        return _verify_campaign(args, opts, console)
    for flag, given in (("--results", args.results), ("--category", args.category), ("--scheduler", args.scheduler)):
        if given:
            raise MiCertifyError("only with --campaign", where=flag)
    if args.model is None:
        raise MiCertifyError("the network MODEL.onnx is required with --sla and --vnnlib", where="MODEL.onnx")
    if args.vnnlib:   # onnxruntime on the property's box first, then the import (a lower peak)
        from mi_certify.verification.nn.vnnlib import announced_boxes
        return _verify_vnnlib(args, load_model(args.model, announced_boxes([args.vnnlib])), opts, console)
    model = load_model(args.model)
    return _verify_sla(args, model, opts, console)


def _verify_campaign(args, opts, console: Console) -> int:
    """``verify --campaign LIST``: every instance decided on the backend; one VNN-COMP results.csv.
    Exit 0 every instance sat or unsat, 3 some timeout or unknown, 1 some error, 2 bad input."""
    from mi_certify.verification.tools.backends import open_backend
    from mi_certify.verification.nn.campaign import read_instances, results_csv, run_campaign

    if args.witness:
        raise MiCertifyError("not with --campaign (the JSON file holds every counterexample)", where="--witness")
    instances = read_instances(args.campaign, args.model)  # every entry checked before any work
    category = args.category or Path(args.campaign).resolve().parent.name
    if "," in category or "\n" in category:
        raise MiCertifyError("must not contain a comma", where="--category")
    results_path = Path(args.results or "results.csv")
    spec = _backend_spec(args)
    with open_backend(spec) as backend:
        console.print(f"campaign {args.campaign}: {len(instances)} instances on {backend.describe()}; each at most "
                      f"{opts.timeout:g} s (or its own timeout), search and exact confirmation together",
                      highlight=False)

        # each answer is appended to FILE.partial as it arrives (arrival order, flushed), so Ctrl-C,
        # a kill or a crash keeps the instances already decided; FILE itself (list order) is written
        # only when every instance has its answer, and the .partial is removed then
        partial = results_path.with_name(results_path.name + ".partial")
        arrived = 0
        with open(partial, "w", encoding="utf-8") as keep:
            def shown(r, done: int, total: int) -> None:
                nonlocal arrived
                keep.write(results_csv([r], category))
                keep.flush()
                arrived = done
                console.print(f"  [{done}/{total}] line {r.instance.line}: {r.instance.onnx} {r.instance.vnnlib} "
                              f"{r.result}", highlight=False)

            try:
                results = run_campaign(instances, opts, backend, on_result=shown)
            except KeyboardInterrupt:
                console.print(f"interrupted: {arrived} of {len(instances)} instances answered; their results are "
                              f"in {partial} (arrival order); {results_path} was not written", highlight=False)
                raise
    tmp = results_path.with_name(f".{results_path.name}.tmp")
    tmp.write_text(results_csv(results, category), encoding="utf-8")
    tmp.replace(results_path)
    partial.unlink()
    t = Table(title=f"campaign {args.campaign}")
    for col in ("line", "network", "property", "result", "time (s)"):
        t.add_column(col)
    for r in results:
        t.add_row(str(r.instance.line), r.instance.onnx, r.instance.vnnlib, _campaign_style(r.result), f"{r.run_s:.2f}")
    console.print(t)
    counts = {w: sum(r.result == w for r in results) for w in ("sat", "unsat", "timeout", "unknown", "error")}
    if args.json_out:
        Path(args.json_out).write_text(json.dumps([{"line": r.instance.line, "onnx": r.instance.onnx,
                                                    "vnnlib": r.instance.vnnlib, "result": r.result,
                                                    "query": r.query} for r in results], indent=2, sort_keys=True)
                                       + "\n")
    console.print(", ".join(f"{v} {k}" for k, v in counts.items()) + f" → {results_path}", highlight=False)
    return 1 if counts["error"] else 3 if counts["timeout"] or counts["unknown"] else 0


def _campaign_style(word: str) -> str:
    color = {"unsat": "green", "sat": "red", "error": "red"}.get(word, "yellow")
    return f"[{color}]{word}[/]"


def _verify_vnnlib(args, model, opts, console: Console) -> int:
    """``verify --vnnlib``: one query; the last stdout line is sat / unsat / unknown (VNN-COMP)."""
    import numpy as np

    from mi_certify.verification.nn.nn_verify import decide
    from mi_certify.verification.nn.vnnlib import parse_vnnlib, query_box, write_counterexample

    ir = model.ir
    query = parse_vnnlib(args.vnnlib, ir.n_inputs, ir.n_outputs)
    box = query_box(query, args.vnnlib)
    if box is not None:
        model.cross_check(*box)
    if args.total_timeout is not None:
        from mi_certify.verification.nn.network import within_total
        opts = within_total(opts, args.total_timeout - (time.monotonic() - args.started))
        if opts is None:   # the import and the cross-check used it up: unknown, as for --sla
            console.print(f"{args.vnnlib}: [yellow]unknown[/] (not started: the total timeout "
                          f"({args.total_timeout:g} s) ran out before the query)", highlight=False)
            print("unknown")
            return 3
    res = decide(model, query, opts)
    console.print(f"{args.vnnlib}: {_verdict_style(res.verdict.value)} in {res.time_s:.2f} s "
                  f"(CPU {res.stats.get('cpu_s', 0):.2f} s; {res.method}) "
                  f"{res.detail}", highlight=False)
    for e in res.errors:
        console.print(f"[red]error:[/] {e}", highlight=False)
    if args.witness and res.witness:
        write_counterexample(args.witness, np.array(res.witness["x_float32"]), np.array(res.witness["y_onnxruntime"]))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(res.to_json(), indent=2, sort_keys=True) + "\n")
    print(res.verdict.vnnlib)
    return {"proved": 0, "violated": 1}.get(res.verdict.value, 3)


def _verify_sla(args, model, opts, console: Console) -> int:
    """``verify --sla``: every property and the output domain over the spec's envelope."""
    import numpy as np

    from mi_certify.verification.nn.network import verify_spec

    from mi_certify.generator.core.lut import check_shapes
    from mi_certify.generator.core.spec import load_spec

    spec = load_spec(args.sla)
    check_shapes(spec, model.ir, args.model)
    model.cross_check(np.array([i.min for i in spec.inputs]), np.array([i.max for i in spec.inputs]))
    n_queries = len(spec.properties) + len(spec.actions)
    console.print(f"verifying {n_queries} queries ({len(spec.properties)} properties, {len(spec.actions)} actions); "
                  f"each at most {opts.timeout:g} s, search and exact confirmation together"
                  + (f"; the whole run at most {args.total_timeout:g} s (--total-timeout)"
                     if args.total_timeout is not None else ""), highlight=False)

    def shown(r, done: int, total: int) -> None:  # a long run is never silent: one line per query
        # a reachability query is "violated" when a replayed witness decodes the action
        said = (_verdict_style(r.verdict.value) if not r.id.startswith("reach:") else
                {"violated": "reachable", "proved": "unreachable (proved)"}.get(r.verdict.value, "[yellow]unknown[/]"))
        why = f": {r.detail}" if r.method == "not started" else ""
        console.print(f"  [{done}/{total}] {r.id}: {said} in {r.time_s:.2f} s (CPU {r.stats.get('cpu_s', 0):.2f} s; "
                      f"{r.method}){why}", highlight=False)

    left = None if args.total_timeout is None else args.total_timeout - (time.monotonic() - args.started)
    result = verify_spec(model, spec, opts, on_result=shown, total_timeout=left)
    t = Table(title=f"properties of {args.model}")
    for col in ("property", "verdict", "time (s)", "method", "witness"):
        t.add_column(col)
    for r in result.properties:
        t.add_row(r.id, _verdict_style(r.verdict.value), f"{r.time_s:.2f}", r.method, _witness_text(r.witness))
    console.print(t)
    t2 = Table(title="output domain over the envelope")
    for col in ("action", "decodable", "time (s)", "raw output bounds (proved)", "sampled range"):
        t2.add_column(col)
    for r, b in zip(result.reachability, result.output_bounds):
        word = {"violated": "[green]reachable[/]", "proved": "unreachable (proved)"}.get(r.verdict.value,
                                                                                          "[yellow]unknown[/]")
        t2.add_row(b["action"], word, f"{r.time_s:.2f}", f"[{b['lower']:.4g}, {b['upper']:.4g}]",
                   f"[{b['sampled_min']:.4g}, {b['sampled_max']:.4g}]")
    console.print(t2)
    for r in result.properties + result.reachability:
        for e in r.errors:
            console.print(f"[red]error:[/] {r.id}: {e}", highlight=False)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result.full_json(), indent=2, sort_keys=True) + "\n")
    status = result.run_status
    unknown = [r.id for r in result.properties if r.verdict.value == "unknown"]
    notes = [f"unknown: {', '.join(unknown)}"] if unknown else []
    if result.unknown_reachability:
        notes.append(f"the reachability of {', '.join(result.unknown_reachability)} is unknown")
    console.print(f"status: {status}" + (f" ({'; '.join(notes)})" if notes else ""), highlight=False)
    return {"proved": 0, "violated": 1}.get(status, 3)


def _run_check_spec(args, console: Console) -> int:
    from mi_certify.generator.core.spec import load_spec

    spec = load_spec(args.sla)
    console.print(f"{args.sla}: ok — controller '{spec.name}' ({spec.decode}), {len(spec.inputs)} inputs, "
                  f"{spec.address_bits} address bits ({1 << spec.address_bits} cells), {len(spec.actions)} actions "
                  f"(conservative: {spec.actions[spec.conservative].name}), {len(spec.properties)} properties")
    return 0


def _run_check(args, console: Console) -> int:
    from rich.markup import escape

    from mi_certify.verification.check.bundle_check import FAIL, PASS, SKIP, CheckOptions, check_bundle

    if args.json_out and not Path(args.json_out).resolve().parent.is_dir():
        raise MiCertifyError("the folder of this output file does not exist", file=args.json_out)
    style = {PASS: "green", FAIL: "red", SKIP: "yellow"}
    out = Console(soft_wrap=True)  # the item lines are the result: stdout

    def emit(item):
        kind = escape(f"[{item.kind}]")
        out.print(f"[{style[item.status]}]{item.status:4s}[/]  {escape(item.name)}  [dim]{kind}[/]"
                  + (f"  {escape(item.detail)}" if item.detail else ""), highlight=False, soft_wrap=True)

    opts = CheckOptions(rerun_network=not args.quick, rerun_tools=not args.quick, pubkey=args.pubkey)
    items = check_bundle(args.bundle, opts, emit)
    counts = {k: sum(1 for i in items if i.status == k) for k in (PASS, FAIL, SKIP)}
    from mi_certify.generator.bundle.standing import certification
    sig = next((i for i in items if i.name == "signature"), None)
    verdict = certification(passed=not counts[FAIL], skipped=bool(counts[SKIP]),
                            signed=(Path(args.bundle) / "manifest.json.sig").exists(),
                            signature_checked=sig is not None and sig.status == PASS)
    print(f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped: {verdict}")
    if args.json_out:  # after the summary line, which is printed even when this write fails (disk full)
        try:
            Path(args.json_out).write_text(json.dumps([vars(i) for i in items], indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise MiCertifyError(f"cannot write the check's JSON: {exc.strerror or exc}", file=args.json_out) from None
    return 1 if counts[FAIL] else 3 if counts[SKIP] else 0


def _run_sign(args, console: Console) -> int:
    from mi_certify.generator.bundle.signing import sign_bundle

    rec = sign_bundle(args.bundle, args.key)
    console.print(f"signed {Path(args.bundle) / 'manifest.json'} (sha256 {rec['manifest_sha256'][:16]}…) with key "
                  f"{rec['public_key_sha256'][:16]}… → manifest.json.sig", highlight=False)
    return 0


def _run_keygen(args, console: Console) -> int:
    from mi_certify.generator.bundle.signing import key_home, keygen, new_hmac_key

    if args.hmac:
        path = Path(args.out) if args.out else key_home() / "audit.key"
        new_hmac_key(path)
        console.print(f"wrote {path} (HMAC key, 32 bytes, mode 0600; keep it secret): mi-certify run --key {path}",
                      highlight=False)
        return 0
    out = args.out or str(key_home() / "signing")
    fp = keygen(f"{out}.key", f"{out}.pub")
    console.print(f"wrote {out}.key (private, keep it secret) and {out}.pub; fingerprint {fp}",
                  highlight=False)
    return 0


def _terminate(signum, frame):  # SIGTERM behaves like Ctrl-C: clean up, exit 130
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """The ``mi-certify`` command (``argv`` defaults to sys.argv[1:]); returns the exit code.
    Callable from Python (a notebook, a script, another thread): SIGTERM is handled as Ctrl-C
    only in the main thread, and the caller's handler is put back on return. The process keeps
    its freed heap (:func:`~mi_certify.verification.tools.registry.keep_freed_heap`: the bound passes'
    temporaries are not faulted in again)."""
    import signal
    import threading

    from mi_certify.verification.tools.registry import keep_freed_heap

    keep_freed_heap()

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    started = time.monotonic()  # verify --total-timeout counts from here
    _INTERRUPTED.clear()
    args = _parser().parse_args(argv)
    args.started = started
    console = Console(stderr=True, soft_wrap=True)
    try:
        handler = {"build": _run_build, "inspect": _run_inspect, "check-spec": _run_check_spec,
                   "verify": _run_verify, "check": _run_check, "sign": _run_sign, "keygen": _run_keygen,
                   **args.runtime_handlers}[args.command]
        return handler(args, console)
    except MiCertifyError as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        _INTERRUPTED.set()
        console.print("[red]interrupted[/]" + (": nothing was published" if args.command == "build" else ""))
        return 130


if __name__ == "__main__":
    sys.exit(main())
