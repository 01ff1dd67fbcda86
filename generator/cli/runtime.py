"""CLI glue of the run-time commands: ``mi-certify run`` and ``mi-certify audit verify|replay|report``.

The work is done by :mod:`mi_certify.runtime` (probes, SLA monitor, audit log, live
loop, replay); this module parses options, turns runtime errors into located
``MiCertifyError`` lines (exit 2) and renders results.

Exit codes: ``run`` 0 done, 2 bad input, 130 interrupted (the first Ctrl-C or SIGTERM
stops it after the current request; the summary and the audit log's head are printed);
``audit verify`` 0 intact (a torn last line is reported, not a failure), 1 tampered,
2 bad input; ``audit replay`` 0 every decision confirmed, 1 a mismatch or a tampered
log, 2 bad input; ``audit report`` the same as replay (the HTML is written for 0 and 1,
nothing for 2).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table

from mi_certify.generator.core.errors import MiCertifyError


#: ``run`` warns when more than this share of its steps were probe faults (``--warn-probe-faults``).
PROBE_FAULT_WARN_SHARE = 0.05


class RuntimeInputError(MiCertifyError):
    """A build directory, workload, audit log, key or option of a run-time command is unusable."""


def add_parsers(sub) -> dict:
    """Add ``run`` and ``audit`` to the sub-parsers; returns {command: handler}."""
    r = sub.add_parser("run", help="run a workload on onnxruntime under a built controller (live loop)",
                       description="Before each request: read the probes, step the generated controller, apply "
                                   "its action to the onnxruntime session; after it: measure latency and accuracy "
                                   "loss against fp32, feed the SLA monitor, append an audit record. Action → "
                                   "plan mapping and probe sources: docs/runtime.md. Ctrl-C stops after the "
                                   "current request (exit 130) and prints the summary and the audit log's head "
                                   "record (seq, sha256) to pass to audit verify --anchor.")
    r.add_argument("--build", required=True, metavar="DIR", help="a build directory (mi-certify build)")
    r.add_argument("--workload", required=True, metavar="MODEL.onnx", help="the model the engine runs "
                   "(examples/workload/convnet.onnx)")
    r.add_argument("--requests", type=int, default=300, metavar="N", help="number of requests (default 300)")
    r.add_argument("--audit", metavar="LOG", help="append decision records to this JSON Lines audit log")
    r.add_argument("--key", metavar="KEYFILE", help="HMAC key file (>= 16 bytes) for the audit log")
    r.add_argument("--fsync", default="always", metavar="POLICY",
                   help="audit fsync policy: always (default), never, every:N")
    r.add_argument("--probe", default="linux", metavar="SOURCE",
                   help="linux (this machine, default) or trace:FILE.csv (replay recorded readings)")
    r.add_argument("--probe-rate", type=float, default=0.0, metavar="HZ",
                   help="sample the probes in a background thread at HZ (the request reads the latest sample; "
                        "one older than 3 periods is a probe fault); 0: read them before each request (default)")
    r.add_argument("--microbench", action="store_true",
                   help="also measure mem_bw_avail and cache_chase_ns by micro-benchmarks (docs/runtime.md); "
                        "with --probe linux")
    r.add_argument("--map", action="append", default=[], metavar="INPUT=EXPR",
                   help="source of a controller input: NUMBER (an assumed constant), QUANTITY, QUANTITY*NUMBER, "
                        "QUANTITY/NUMBER or Q1/Q2 (repeatable; quantities in docs/runtime.md)")
    r.add_argument("--mem-bw-peak", type=float, default=None, metavar="B/s",
                   help="peak memory bandwidth for mem_bw_peak (the kernel does not expose it)")
    r.add_argument("--plan", action="append", default=[], metavar="ACTION=LEVEL[,quantized][,threads=N]",
                   help="execution plan of an action (defaults for keep, merge_conv, int4, offload_cpu)")
    r.add_argument("--background-load", type=int, default=0, metavar="K",
                   help="run K busy-loop processes during the middle third of the requests")
    r.add_argument("--interval", type=float, default=0.02, metavar="S",
                   help="pause between requests in seconds (default 0.02)")
    r.add_argument("--json", metavar="FILE", dest="json_out", help="write the run's counts as JSON")
    r.add_argument("--warn-probe-faults", type=float, default=PROBE_FAULT_WARN_SHARE, metavar="SHARE",
                   help=f"warn when more than this share of the steps are probe faults (default "
                        f"{PROBE_FAULT_WARN_SHARE:g})")
    r.add_argument("--commands", metavar="FILE",
                   help="operator commands: signed lines appended to FILE while the run goes on (mi-certify command "
                        "… >> FILE); builds whose sla.yaml declares operator: (docs/operator.md)")
    r.add_argument("--command-socket", metavar="PATH",
                   help="operator commands: a Unix datagram socket created at PATH (mode 0600, removed at the end); "
                        "send with mi-certify command … --socket PATH")
    r.add_argument("--operator-key", action="append", default=[], metavar="ID=KEYFILE",
                   help="the HMAC key of operator key id ID (one of sla.yaml operator.keys; repeatable); a command "
                        "signed with a key id the run holds no key for is refused")
    r.add_argument("--step", choices=("auto", "c", "python"), default="auto",
                   help="the controller step: the build's C runtime compiled with gcc and called through ctypes "
                        "(c), the generated Python runtime (python), or c when gcc and <name>.c are there (auto, "
                        "the default); the audit log is byte-identical either way (docs/c-runtime.md)")

    a = sub.add_parser("audit", help="verify, replay or report (HTML dashboard) an audit log",
                       description="Check the hash chain (and HMACs) of an audit log, or replay its decisions.")
    asub = a.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    v = asub.add_parser("verify", help="check the chain; report every edited, removed, inserted or reordered record",
                        description="Exit 0 intact (a torn last line from a crash is reported and ignored), "
                                    "1 tampered, 2 bad input.")
    v.add_argument("log", metavar="LOG")
    v.add_argument("--key", metavar="KEYFILE", help="HMAC key: also check every record's MAC")
    v.add_argument("--anchor", metavar="[SEQ:]SHA256", action="append", default=[],
                   help="a record hash kept outside the log (e.g. the head sha256 printed by run): it must be "
                        "in the intact chain; detects truncation and, without a key, a rebuilt chain (repeatable)")
    v.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p = asub.add_parser("replay", help="re-run the FSM from the logged inputs and confirm every decision",
                        description="Uses the build's generated runtime and the reference FSM; prints SLA "
                                    "attainment per action and switch counts. Exit 0 all confirmed, 1 mismatch "
                                    "or tampered log, 2 bad input.")
    p.add_argument("log", metavar="LOG")
    p.add_argument("--build", required=True, metavar="DIR", help="the build the log was written with")
    p.add_argument("--key", metavar="KEYFILE", help="HMAC key of the log")
    p.add_argument("--anchor", metavar="[SEQ:]SHA256", action="append", default=[],
                   help="a record hash kept outside the log that must be in the intact chain (repeatable)")
    p.add_argument("--json", action="store_true", help="print the replay report as JSON on stdout")
    p.add_argument("--operator-key", action="append", default=[], metavar="ID=KEYFILE",
                   help="also re-check the signature of every accepted operator command of key id ID (repeatable)")
    d = asub.add_parser("report", help="write the operator's dashboard of a log: one offline HTML file",
                        description="Verifies the chain, replays the decisions and writes one self-contained HTML "
                                    "file (inline SVG plots): decision timeline, probe trends with LUT cell edges, "
                                    "SLA attainment per action, visited LUT cells, the verdict. Exit 0 written "
                                    "and all confirmed, 1 written but tampered or mismatch, 2 bad input (nothing "
                                    "written).")
    d.add_argument("log", metavar="LOG")
    d.add_argument("--build", required=True, metavar="DIR", help="the build the log was written with")
    d.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write (e.g. run.html)")
    d.add_argument("--key", metavar="KEYFILE", help="HMAC key of the log")
    d.add_argument("--anchor", metavar="[SEQ:]SHA256", action="append", default=[],
                   help="a record hash kept outside the log that must be in the intact chain (repeatable)")
    c = sub.add_parser("command", help="sign an operator command (lock, force, release) for a running controller",
                       description="Prints one signed command line (docs/operator.md), appends it to a command file "
                                   "(--to) or sends it to a run's command socket (--socket). Exit 0 signed (and "
                                   "delivered), 2 bad input.")
    c.add_argument("what", choices=("lock", "force", "release"), help="the command")
    c.add_argument("action", nargs="?", help="the action to lock (lock only)")
    c.add_argument("--build", required=True, metavar="DIR", help="the build the command is for")
    c.add_argument("--key-id", required=True, metavar="ID", help="the key id (one of sla.yaml operator.keys)")
    c.add_argument("--key", required=True, metavar="KEYFILE", help="the HMAC key of that key id (>= 16 bytes)")
    c.add_argument("--n", required=True, type=int, metavar="N",
                   help="a number that grows with every command of this key (a command whose n is not above the "
                        "last one the run accepted from this key is refused as replayed)")
    c.add_argument("--why", required=True, metavar="TEXT", help="the reason, logged with the command")
    c.add_argument("--expires-in", type=float, default=None, metavar="S",
                   help="refuse the command if it reaches a step more than S seconds from now")
    c.add_argument("--to", metavar="FILE", help="append the line to this command file")
    c.add_argument("--socket", metavar="PATH", help="send it to this command socket")
    return {"run": run_command, "audit": audit_command, "command": command_command}


def command_command(args, console: Console) -> int:
    """``mi-certify command``: one signed operator command (runtime/operator.py)."""
    import time

    from mi_certify.runtime.operator import send_to_socket, sign_command
    from mi_certify.runtime.live import load_build
    build = _located(load_build, args.build)
    policy = build.operator
    if policy is None:
        raise RuntimeInputError("its sla.yaml declares no operator: this controller takes no commands",
                                file=args.build)
    if args.key_id not in policy.key_ids:
        raise RuntimeInputError(f"--key-id {args.key_id!r} is not in sla.yaml operator.keys "
                                f"({', '.join(policy.key_ids)})", file=args.build)
    if args.what == "lock" and args.action not in build.actions:
        raise RuntimeInputError(f"lock {args.action!r}: name one of the actions {', '.join(build.actions)}")
    if args.what != "lock" and args.action is not None:
        raise RuntimeInputError(f"{args.what} takes no action (only lock does)")
    key = _key(args.key)
    expires = None if args.expires_in is None else round(time.time() + args.expires_in, 3)
    fields = _located(sign_command, key, controller=build.name, key_id=args.key_id, n=args.n, command=args.what,
                      action=args.action, why=args.why, expires_unix=expires)
    line = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    print(line)
    if args.to:
        try:
            with open(args.to, "a", encoding="ascii") as fh:
                fh.write(line + "\n")
        except OSError as exc:
            raise RuntimeInputError(f"cannot append the command: {exc.strerror or exc}", file=args.to) from None
    if args.socket:
        try:
            send_to_socket(args.socket, line.encode("ascii"))
        except OSError as exc:
            raise RuntimeInputError(f"cannot send the command: {exc.strerror or exc} (is mi-certify run "
                                    "--command-socket running there?)", file=args.socket) from None
    return 0


def _located(fn, *args, **kw):
    """Call fn; turn runtime-package errors into one located MiCertifyError line."""
    from mi_certify.runtime.audit import AuditError
    from mi_certify.runtime.live import BuildLoadError
    try:
        return fn(*args, **kw)
    except (AuditError, BuildLoadError) as exc:
        raise RuntimeInputError(exc.reason, file=exc.file) from None
    except ValueError as exc:
        raise RuntimeInputError(str(exc)) from None


def _key(path):
    from mi_certify.runtime.audit import load_key
    return None if path is None else _located(load_key, path)


def run_command(args, console: Console) -> int:
    """``mi-certify run``: the live loop on onnxruntime under a built controller (docs/runtime.md)."""
    build, plans, probe, features = _live_inputs(args)
    from mi_certify.runtime.audit import AuditError, AuditLog
    from mi_certify.runtime.engine import Workload, run_live
    from mi_certify.runtime.live import ControlLoop

    key = _key(args.key)
    console.print(f"loading {args.workload} ({len(build.actions)} plans) …")
    workload = _located(Workload, args.workload, [plans[a] for a in build.actions])
    intake = _intake(args, build)
    controller, step_note, c_dir = _controller(args, build)
    console.print(f"step: {step_note}")
    loop = ControlLoop(build, probe, features, controller=controller, intake=intake)
    log = head = rep = failed = None
    interrupted: list[int] = []
    restore = _stop_on_signals(interrupted)
    try:
        if args.audit:
            log = _located(AuditLog, args.audit, key=key, fsync=args.fsync,
                           header={**loop.audit_header(), "workload": Path(args.workload).name,
                                   "plans": {a: plans[a].describe() for a in build.actions}})
            loop.audit = log
            if intake is not None:   # a continued log: the numbers n already used stay used
                from mi_certify.runtime.audit import read_records
                _located(intake.seed_from_log, _located(read_records, args.audit, key)[0])
        _print_inputs(probe, features, console)
        rep = run_live(loop, workload, args.requests, args.background_load, args.interval,
                       stop=lambda: bool(interrupted))
    except KeyboardInterrupt:  # a second Ctrl-C: stopped at once, without the summary
        interrupted.append(signal.SIGINT)
    except AuditError as exc:  # a record could not be written (disk full): the log is closed, intact up to it
        failed = exc
    finally:
        restore()
        try:
            if failed is None and intake is not None:   # every command received is logged, also unapplied ones
                try:
                    loop.end_commands()
                except AuditError as exc:
                    failed = exc
            if log is not None:
                head = log.close()
        finally:
            probe.close()
            workload.close()
            if intake is not None:
                intake.close()
            if c_dir is not None:
                c_dir.cleanup()
    if failed is not None:
        raise RuntimeInputError(f"{failed.reason}; stopped, every record before it is in the log", file=failed.file)
    _print_run_end(args, build, rep, log, head, interrupted, console)
    if intake is not None:
        console.print(command_summary(loop.commands), highlight=False)
    return 130 if interrupted else 0


def command_summary(records: list) -> str:
    """One line: how many operator commands came, accepted, refused per reason."""
    from collections import Counter
    c = Counter(r["outcome"] if r["outcome"] == "accepted" else r["refusal"] for r in records)
    refused = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k != "accepted")
    return (f"operator commands: {len(records)} received, {c.get('accepted', 0)} accepted, "
            f"{len(records) - c.get('accepted', 0)} refused{' (' + refused + ')' if refused else ''}")


def _intake(args, build):
    """The operator command intake of ``run`` (None without --commands/--command-socket)."""
    from mi_certify.runtime.operator import CommandFile, CommandSocket, Intake, load_operator_keys
    if not args.commands and not args.command_socket:
        if args.operator_key:
            raise RuntimeInputError("--operator-key needs --commands FILE or --command-socket PATH")
        return None
    if build.operator is None:
        raise RuntimeInputError("its sla.yaml declares no operator: this controller takes no commands "
                                "(--commands, --command-socket)", file=args.build)
    keys = _located(load_operator_keys, args.operator_key)
    for kid in keys:
        if kid not in build.operator.key_ids:
            raise RuntimeInputError(f"--operator-key {kid}=…: {kid!r} is not in sla.yaml operator.keys "
                                    f"({', '.join(build.operator.key_ids)})", file=args.build)
    sources = []
    try:
        if args.commands:
            sources.append(_located(CommandFile, args.commands))
        if args.command_socket:
            sources.append(_located(CommandSocket, args.command_socket))
    except RuntimeInputError:
        for s in sources:
            s.close()
        raise
    return Intake(build.operator, build.actions, build.name, keys, sources)


def _controller(args, build):
    """(controller or None for the Python step, what ``run`` prints about the step, the temporary
    directory of the compiled library or None). ``--step c``: the build's ``<name>.c`` compiled by gcc
    (``-O2 -shared -fPIC``) and loaded through ctypes, a failure is bad input (exit 2); ``auto``: the
    same, falling back to the Python step with the reason; ``python``: the generated Python runtime."""
    import tempfile

    if args.step == "python":
        return None, "Python (the generated runtime; --step python)", None
    source = build.dir / f"{build.name}.c"
    try:
        if not source.is_file():
            raise OSError(f"{source.name} is not in the build (built before the C runtime existed)")
        from mi_certify.runtime.c_step import CController, load_c_library
        from mi_certify.verification.tools.c_tools import shared_library
        tmp = tempfile.TemporaryDirectory(prefix="mi-certify-step-")
        try:
            so = shared_library([source], Path(tmp.name) / f"lib{build.name}.so")
            ctl = CController(load_c_library(so, build.name, build.operator is not None), build.name, build.module)
        except BaseException:
            tmp.cleanup()
            raise
    except Exception as exc:  # noqa: BLE001 -- gcc missing or failing, a library that does not load
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        if args.step == "c":
            raise RuntimeInputError(f"--step c: the C step is not available ({reason})", file=str(source)) from None
        return None, f"Python (the generated runtime; the C step is not available: {reason})", None
    return ctl, f"C ({source.name} compiled by gcc, called through ctypes)", tmp


def _live_inputs(args):
    """(build, plans, probe, feature map) of ``mi-certify run``; RuntimeInputError on bad options."""
    from mi_certify.runtime.engine import DEFAULT_PLANS, parse_plan
    from mi_certify.runtime.live import load_build
    from mi_certify.runtime.probes import FeatureMap, LinuxProbe, MicrobenchProbe, SampledProbe, TraceProbe

    if args.requests < 1:
        raise RuntimeInputError("--requests must be at least 1")
    if not 0 <= args.warn_probe_faults <= 1:
        raise RuntimeInputError(f"--warn-probe-faults {args.warn_probe_faults:g}: expected a share in [0, 1]")
    if args.background_load < 0 or args.interval < 0:
        raise RuntimeInputError("--background-load and --interval must not be negative")
    build = _located(load_build, args.build)
    plans = dict(DEFAULT_PLANS)
    for text in args.plan:
        name, plan = _located(parse_plan, text)
        plans[name] = plan
    missing = [a for a in build.actions if a not in plans]
    if missing:
        raise RuntimeInputError(f"action '{missing[0]}' has no execution plan; give --plan "
                                f"{missing[0]}=LEVEL[,quantized][,threads=N]", file=args.build)
    try:
        overrides = FeatureMap.parse_overrides(args.map)
    except ValueError as exc:
        raise RuntimeInputError(str(exc)) from None
    if not Path(args.workload).is_file():
        raise RuntimeInputError("no such file", file=args.workload)
    if args.probe_rate < 0 or args.probe_rate > 1000:
        raise RuntimeInputError(f"--probe-rate {args.probe_rate:g}: expected 0 (inline) or a rate up to 1000 Hz")
    if (args.microbench or args.probe_rate > 0) and args.probe != "linux":
        raise RuntimeInputError("--microbench and --probe-rate measure this machine: use them with --probe linux")
    if args.probe == "linux":
        probes = [LinuxProbe(mem_bw_peak=args.mem_bw_peak)] + ([MicrobenchProbe()] if args.microbench else [])
        rate = args.probe_rate or (1.0 if args.microbench else 0.0)   # micro-benchmarks never run inline
        probe = SampledProbe(probes, 1.0 / rate) if rate else probes[0]
        if rate:
            probe.wait_first(30.0)   # the first request sees a sample, not a probe fault
        offered = ()
    elif args.probe.startswith("trace:"):
        probe = _located(TraceProbe, args.probe[len("trace:"):])
        offered = probe.columns
    else:
        raise RuntimeInputError(f"--probe {args.probe!r}: expected linux or trace:FILE.csv")
    return build, plans, probe, _located(FeatureMap.build, build.inputs, overrides, offered)


def _print_inputs(probe, features, console: Console) -> None:
    """The table of controller inputs, their sources and a first reading (not used up from a trace)."""
    from mi_certify.runtime.probes import TraceProbe

    t = Table(title="inputs and their sources")
    for col in ("controller input", "source", "first reading"):
        t.add_column(col)
    first = features(probe.read())
    if isinstance(probe, TraceProbe):
        probe.index = 0  # the table's sample must not use up the trace's first row
    for n, s, v, e in zip(features.inputs, features.sources, *first):
        t.add_row(n, s, f"{v:.4g}" if v is not None else f"[yellow]unavailable[/]: {e}")
    console.print(t)
    if any(v is None for v in first[0]):
        console.print("[yellow]warning:[/] some inputs are unavailable: every step is a probe fault "
                      "(conservative action). Map them with --map INPUT=EXPR (a number = an assumed constant).")


def _print_run_end(args, build, rep, log, head, interrupted: list, console: Console) -> None:
    if rep is not None:
        _print_live(rep, build, console, args.warn_probe_faults)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(rep.to_json(), indent=2, sort_keys=True) + "\n")
    if interrupted:
        done = (f"after {rep.requests} of {args.requests} requests" if rep is not None else
                "(a second time: stopped at once, no summary)")
        console.print(f"[yellow]interrupted[/] {done}" + ("; every request done is in the audit log"
                                                         if log is not None else ""), highlight=False)
    if head is not None:
        console.print(f"audit log: {args.audit}; head record {head.seq}, sha256 {head.sha256}\n"
                      f"keep that hash elsewhere: mi-certify audit verify {args.audit}"
                      f"{' --key ' + args.key if args.key else ''} --anchor {head.seq}:{head.sha256}", highlight=False)


def _stop_on_signals(flag: list) -> Callable[[], None]:
    """Make the first Ctrl-C (SIGINT) or SIGTERM a request to stop after the current request
    (the number is appended to ``flag``); a second one raises KeyboardInterrupt. A SIGINT that
    the parent set to be ignored (a background job) stays ignored. Returns the function that
    restores the previous handlers."""
    def handler(signum, frame):
        if flag:
            raise KeyboardInterrupt
        flag.append(signum)

    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        prev = signal.getsignal(sig)
        if prev is not signal.SIG_IGN:
            old[sig] = prev
            signal.signal(sig, handler)

    def restore():
        for sig, prev in old.items():
            signal.signal(sig, prev)
    return restore


def _print_live(rep, build, console: Console, warn_share: float = PROBE_FAULT_WARN_SHARE) -> None:
    t = Table(title=f"live run: {rep.requests} requests")
    for col in ("action", "requests", "median latency (ms)", "p90 (ms)", "limit (ms)"):
        t.add_column(col)
    j = rep.to_json()
    for i, a in enumerate(build.actions):
        lat = j["latency"].get(a, {})
        lim = build.limits[i].latency_ms
        t.add_row(a, str(rep.tokens.get(a, 0)), str(lat.get("median_ms", "-")), str(lat.get("p90_ms", "-")),
                  "-" if lim is None else f"{lim:g}")
    console.print(t)
    for p in j["phases"]:
        console.print(f"phase {p['phase']:6s} from request {p['from_request']:5d}: {p['tokens']}", highlight=False)
    console.print(f"switches: {j['switch_count']} {j['switches']}; SLA violations: {rep.violations}",
                  highlight=False)
    console.print(fallback_summary(rep.fallbacks, j["reasons"].get("FALLBACK", 0), rep.recoveries), highlight=False)
    console.print(f"steps per reason: {j['reasons']}", highlight=False)
    for line in probe_fault_lines(j, rep.requests, warn_share):
        console.print(line, highlight=False)


def probe_fault_lines(j: dict, requests: int, warn_share: float) -> list[str]:
    """The run summary's probe-fault lines from :meth:`LiveReport.to_json` ``j``: the count, each
    input that caused faults with its first reading and the bound it broke, and a warning when more
    than ``warn_share`` of the ``requests`` steps were probe faults."""
    from mi_certify.runtime.quantize import fault_text
    pf = j.get("probe_faults", {})
    n = pf.get("steps", 0)
    if not n:
        return [f"probe faults: 0 of {requests} steps"]
    causes = "; ".join(f"{name}: {v['steps']} steps, first {fault_text(v['first'])}"
                       for name, v in pf.get("by_input", {}).items() if v.get("first"))
    out = [f"probe faults: {n} of {requests} steps ({n / max(1, requests):.1%}); {causes or 'cause not recorded'}"]
    if n > warn_share * requests:
        out.append(f"[yellow]warning:[/] {n / max(1, requests):.1%} of the steps were probe faults (more than "
                   f"{100 * warn_share:g} %, --warn-probe-faults): the controller ran the conservative action on them. "
                   "Widen the input's envelope in sla.yaml (and rebuild), fix the probe, or map the input "
                   "(--map INPUT=EXPR).")
    return out


def fallback_summary(entries: int, fallback_steps: int, recoveries: int) -> str:
    """The fallback counts of a run or replay, worded so the two counts cannot be confused:
    ``entries`` = steps that entered the fallback on ``violations_to_fallback`` consecutive SLA
    violations (reason FALLBACK, not in fallback before); ``fallback_steps`` = all steps with
    reason FALLBACK (those entries, and every later step without a probe fault until RECOVER,
    also after a fallback that a probe fault started; probe-fault steps are PROBE_FAULT)."""
    return (f"fallback entries on SLA violations: {entries}; steps in fallback (reason FALLBACK: the entry steps and "
            f"the later steps without a probe fault until RECOVER, also when a probe fault put it there): "
            f"{fallback_steps}; recoveries: {recoveries}")


def audit_command(args, console: Console) -> int:
    from mi_certify.runtime.audit import verify_log

    key = _key(args.key)
    if not Path(args.log).is_file():
        raise RuntimeInputError("no such file", file=args.log)
    if args.audit_command == "report":
        return _report_command(args, key, console)
    report = _located(verify_log, args.log, key, args.anchor)
    if args.audit_command == "verify":
        if args.json:
            print(json.dumps(report.to_json(), indent=2, sort_keys=True))
        _print_verify(report, console)
        return 0 if report.ok else 1
    from mi_certify.runtime.live import load_build, replay
    build = _located(load_build, args.build)
    from mi_certify.runtime.operator import load_operator_keys
    rep = _located(replay, args.log, build, key, _located(load_operator_keys, args.operator_key))
    if args.json:
        print(json.dumps({"verify": report.to_json(), "replay": rep.to_json()}, indent=2, sort_keys=True))
    _print_verify(report, console)
    t = Table(title=f"SLA attainment per action ({rep.decisions} decisions, {rep.sessions} sessions)")
    for col in ("action", "requests", "latency met", "accuracy met", "attainment", "monitor compliant"):
        t.add_column(col)
    for a, st in rep.per_action.items():
        n = st["requests"]
        t.add_row(a, str(n), f"{st['met_latency']}", f"{st['met_accuracy']}",
                  "-" if not n else f"{st['attainment']:.1%}", f"{st['verdict_compliant']}")
    console.print(t)
    j = rep.to_json()
    console.print(f"switches: {j['switch_count']} {j['switches']}; probe faults (reason PROBE_FAULT): "
                  f"{rep.probe_faults}", highlight=False)
    console.print(fallback_summary(rep.fallbacks, j["reasons"].get("FALLBACK", 0), rep.recoveries), highlight=False)
    if build.operator is not None:
        n = sum(rep.commands.values())
        console.print(f"operator commands: {n} ({dict(sorted(rep.commands.items()))}); steps LOCKED "
                      f"{j['reasons'].get('LOCKED', 0)}, FORCED {j['reasons'].get('FORCED', 0)}; signatures "
                      f"re-checked: {rep.signatures_checked} of {rep.commands.get('accepted', 0)} accepted"
                      f"{'' if args.operator_key else ' (give --operator-key ID=FILE to re-check them)'}",
                      highlight=False)
    if rep.mismatches:
        for seq, what, logged, got in rep.mismatches[:20]:
            console.print(f"[red]mismatch[/] record {seq}: {what}: logged {logged!r}, replayed {got!r}",
                          highlight=False)
        console.print(f"[red]{len(rep.mismatches)} mismatches[/]")
    elif rep.decisions:
        console.print(f"[green]all {rep.decisions} decisions confirmed[/] (token, reason, state, LUT entry, "
                      "address, SLA verdict) by the generated runtime and the reference FSM")
    else:
        console.print("[yellow]the log holds no decision[/]")
    if not report.ok:  # the last line says the verdict: replayed decisions of a tampered log prove nothing
        console.print(f"[red]the log is tampered: {len(report.findings)} finding(s) (above); not confirmed[/]")
    return 0 if rep.ok and report.ok else 1


def _report_command(args, key, console: Console) -> int:
    """``mi-certify audit report``: the dashboard (generator/bundle/dashboard.py); exit codes as ``audit replay``."""
    from mi_certify.generator.bundle.dashboard import write_dashboard
    from mi_certify.runtime.live import load_build
    out = Path(args.out)
    if out.is_dir():
        raise RuntimeInputError("is a directory, not an HTML file to write", file=args.out)
    if not out.parent.is_dir():
        raise RuntimeInputError(f"the directory {out.parent} does not exist", file=args.out)
    build = _located(load_build, args.build)
    try:
        dash = _located(write_dashboard, args.log, build, out, key, args.anchor)
    except OSError as exc:
        raise RuntimeInputError(f"cannot write the dashboard: {exc.strerror or exc}", file=args.out) from None
    j = dash.data
    chain = "[green]intact[/]" if dash.intact else "[red]TAMPERED[/]"
    rep = ("[green]confirmed[/]" if dash.confirmed else "[red]MISMATCH[/]" if j["replay"]["decisions"]
           else "[yellow]no decision[/]")
    console.print(f"{args.log}: {j['verify']['records']} records, chain {chain} "
                  f"({len(j['verify']['findings'])} findings); {j['replay']['decisions']} decisions {rep} "
                  f"({j['replay']['mismatch_count']} mismatches); dashboard written to {out}", highlight=False)
    return 0 if dash.ok else 1


def _print_verify(report, console: Console) -> None:
    for n in report.notes[:1]:
        if n.startswith("no record's MAC verifies"):
            console.print(f"[yellow]note:[/] {n}", highlight=False)
    shown = report.findings[:20]
    for f in shown:
        where = f"record {f.seq}" if f.seq is not None else "record ?"
        line = f" (line {f.line})" if f.line else ""
        console.print(f"[red]{f.kind}[/]: {where}{line}: {f.detail}", highlight=False)
    if len(report.findings) > len(shown):
        console.print(f"... and {len(report.findings) - len(shown)} more findings (--json lists them all)",
                      highlight=False)
    for n in report.notes:
        if not n.startswith("no record's MAC verifies"):
            console.print(f"[yellow]note:[/] {n}", highlight=False)
    state = "[green]intact[/]" if report.ok else f"[red]TAMPERED[/] ({len(report.findings)} findings)"
    console.print(f"{report.path}: {report.records} records, {state}; "
                  f"{'HMAC checked' if report.authenticated else 'hash chain only (no key)'}; "
                  f"head sha256 {report.head}", highlight=False)
