"""CLI glue of ``mi-certify profile`` and ``mi-certify train`` (docs/training.md).

``profile`` measures (:mod:`mi_certify.runtime.profile`); ``train`` labels, trains and
exports (:mod:`mi_certify.generator.frontend.train`). Exit codes: 0 done, 2 bad input (one line
naming file, field and reason; nothing is written).
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from mi_certify.generator.core.errors import MiCertifyError


class ProfileInputError(MiCertifyError):
    """A workload, spec or option of ``mi-certify profile`` is unusable."""


def _ints(text: str, opt: str) -> tuple[int, ...]:
    if text.strip().lower() in ("", "none"):
        return ()
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError:
        raise ProfileInputError(f"{opt} {text!r}: expected comma-separated integers, e.g. 1,2,4") from None


def add_parsers(sub) -> dict:
    """Add ``profile`` and ``train``; returns {command: handler}."""
    from mi_certify.runtime.profile import ProfileConfig

    d = ProfileConfig()
    p = sub.add_parser("profile", help="measure every action of a workload on onnxruntime under varied conditions",
                       description="For each sample: set a condition (background load, batch size, intra-op "
                                   "threads, input size), read the probes, run the request under every action in "
                                   "a random order (warm-up discarded) and record latency (ms) and accuracy loss "
                                   "(pp vs fp32). Writes DATA.csv and DATA.json (command line, machine, feature "
                                   "sources). Format: docs/training.md.")
    p.add_argument("--workload", required=True, metavar="MODEL.onnx", help="the model the engine runs")
    p.add_argument("--out", required=True, metavar="DATA.csv", help="the profile to write (and DATA.json beside it)")
    p.add_argument("--samples", type=int, default=d.samples, metavar="N", help=f"rows (default {d.samples})")
    p.add_argument("--sla", metavar="SLA.yaml", help="take input names, envelope and actions from this spec "
                   "(default: the reference controller's five inputs and four actions)")
    p.add_argument("--map", action="append", default=[], metavar="INPUT=EXPR",
                   help="source of an input: as for `run` (NUMBER, QUANTITY, QUANTITY*NUMBER, QUANTITY/NUMBER, "
                        "Q1/Q2), or 'uniform' = drawn uniformly over the envelope (the probe cannot read it)")
    p.add_argument("--mem-bw-peak", type=float, default=None, metavar="B/s", help="peak memory bandwidth")
    p.add_argument("--plan", action="append", default=[], metavar="ACTION=LEVEL[,quantized][,threads=N]",
                   help="execution plan of an action (defaults for keep, merge_conv, int4, offload_cpu)")
    p.add_argument("--load-levels", default=",".join(map(str, d.load_levels)), metavar="K,..",
                   help=f"background-load processes to draw from (default {','.join(map(str, d.load_levels))})")
    p.add_argument("--load-kinds", default=",".join(d.load_kinds), metavar="KIND,..",
                   help="what the background processes do, one kind drawn per sample: cpu (busy loop), stream "
                        f"(memory copies), thrash (random cache-line updates) (default {','.join(d.load_kinds)})")
    p.add_argument("--microbench", action="store_true",
                   help="also read the memory micro-benchmarks (mem_bw_avail B/s, cache_chase_ns ns) at each sample")
    p.add_argument("--batch-sizes", default=",".join(map(str, d.batch_sizes)), metavar="B,..",
                   help=f"batch sizes (default {','.join(map(str, d.batch_sizes))})")
    p.add_argument("--threads", default=",".join(map(str, d.threads)), metavar="T,..",
                   help=f"intra-op threads of plans without fixed threads (default {','.join(map(str, d.threads))})")
    p.add_argument("--input-sizes", default=",".join(map(str, d.input_sizes)), metavar="S,..",
                   help="size of the input's spatial dimensions (default "
                        f"{','.join(map(str, d.input_sizes))}; 'none' = the model's own)")
    p.add_argument("--repeats", type=int, default=d.repeats, metavar="R",
                   help=f"requests per action per round, back to back (default {d.repeats})")
    p.add_argument("--rounds", type=int, default=d.rounds, metavar="K",
                   help="blocks of R requests per action per sample, spread over the sample (a warm-up before "
                        f"each later block); latency = median, accuracy loss = mean of all (default {d.rounds})")
    p.add_argument("--settle", type=float, default=d.settle_s, metavar="S",
                   help=f"pause before the probe reading, seconds (default {d.settle_s})")
    p.add_argument("--seed", type=int, default=d.seed, metavar="S", help=f"seed (default {d.seed})")

    t = sub.add_parser("train", help="train a meta controller (ONNX) from a profile",
                       description="Label each row with the action of least latency that meets its SLA (ties and "
                                   "'none meets it': the conservative action; forbid/require properties applied over "
                                   "their guard boxes), add property-box rows, train a ReLU MLP (fixed-order arithmetic, fixed "
                                   "seed), export ONNX in physical units (onnx.checker, onnxruntime == the trainer) "
                                   "and write OUT.train.json / OUT.train.md. Details: docs/training.md.")
    t.add_argument("data", metavar="DATA.csv", help="a profile (mi-certify profile)")
    t.add_argument("--sla", required=True, metavar="SLA.yaml", help="inputs, envelope, actions, SLAs, properties")
    t.add_argument("--out", required=True, metavar="controller.onnx", help="the model to write")
    t.add_argument("--hidden", default="16,16", metavar="H1,H2", help="hidden layer sizes (default 16,16)")
    t.add_argument("--alpha", type=float, default=1.0, metavar="A", help="L2 penalty (default 1.0)")
    t.add_argument("--max-iter", type=int, default=3000, metavar="N", help="L-BFGS iterations (default 3000)")
    t.add_argument("--holdout", type=float, default=0.25, metavar="F", help="held-out share (default 0.25)")
    t.add_argument("--augment", type=int, default=None, metavar="N",
                   help="synthetic rows per forbid/require property (default: as many as training rows)")
    t.add_argument("--tie-ms", type=float, default=0.0, metavar="MS",
                   help="latencies within this of the least are a tie -> conservative (default 0)")
    t.add_argument("--seed", type=int, default=0, metavar="S", help="seed (default 0)")
    t.add_argument("--certify", choices=("none", "cells"), default="none",
                   help="cells: certified training (interval bounds of the margin over every LUT cell and the "
                        "property guard boxes, an epsilon ramp after the point fit), then distil the LUT as build "
                        "does and print its proven share and agreement (default none: points only)")
    t.add_argument("--certify-weight", type=float, default=1.0, metavar="W",
                   help="weight of the cell term against the data term (default 1.0)")
    t.add_argument("--certify-iter", type=int, default=150, metavar="N",
                   help="L-BFGS iterations per stage of the epsilon ramp (default 150)")
    t.add_argument("--property-rounds", type=int, default=3, metavar="K",
                   help="counterexample rounds: while the seeded falsifiers (random points, PGD) find a "
                        "forbid/require property violated, retrain with labelled rows in each counterexample's "
                        "LUT cell, at most K times (default 3; 0: none)")
    t.add_argument("--no-verify", action="store_true",
                   help="skip the final verification of the properties as build does it (network, CROWN, "
                        "exact confirmation; exit 1 when one is violated, 3 when one is unknown)")
    return {"profile": profile_command, "train": train_command}


def _spec_inputs(path):
    from mi_certify.generator.core.spec import load_spec
    spec = load_spec(path)
    return spec, [(i.name, i.unit, i.min, i.max) for i in spec.inputs], [a.name for a in spec.actions]


def profile_command(args, console: Console) -> int:
    from mi_certify.runtime.engine import DEFAULT_PLANS, parse_plan
    from mi_certify.runtime.probes import FeatureMap
    from mi_certify.runtime.profile import REFERENCE_INPUTS, ProfileConfig, profile

    if not Path(args.workload).is_file():
        raise ProfileInputError("no such file", file=args.workload)
    if args.sla:
        _, inputs, actions = _spec_inputs(args.sla)
    else:
        inputs, actions = list(REFERENCE_INPUTS), list(DEFAULT_PLANS)
    plans = dict(DEFAULT_PLANS)
    for text in args.plan:
        try:
            name, plan = parse_plan(text)
        except ValueError as exc:
            raise ProfileInputError(f"--plan: {exc}") from None
        plans[name] = plan
    try:
        overrides = FeatureMap.parse_overrides(args.map)
    except ValueError as exc:
        raise ProfileInputError(str(exc)) from None
    cfg = ProfileConfig(samples=args.samples, load_levels=_ints(args.load_levels, "--load-levels"),
                        batch_sizes=_ints(args.batch_sizes, "--batch-sizes"), threads=_ints(args.threads, "--threads"),
                        input_sizes=_ints(args.input_sizes, "--input-sizes"), repeats=args.repeats, rounds=args.rounds,
                        settle_s=args.settle, seed=args.seed,
                        load_kinds=tuple(k.strip() for k in args.load_kinds.split(",") if k.strip()))
    command = "mi-certify " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else ""

    # on a terminal: a progress bar and a line every 20 samples; in a file or pipe (no bar): a line
    # per sample (its condition and latencies, time so far and an estimate of the time left)
    every = 20 if console.is_terminal else 1
    bar = Progress(TextColumn("profiling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TimeRemainingColumn(), console=console, transient=True, disable=not console.is_terminal)
    task = bar.add_task("profile", total=cfg.samples)
    t0 = time.monotonic()

    def on_sample(i, row):
        bar.update(task, completed=i + 1)
        if i % every == 0 or i == cfg.samples - 1:
            lat = " ".join(f"{a}={row[f'latency_ms.{a}']:.1f}" if row[f'latency_ms.{a}'] is not None else f"{a}=-"
                           for a in actions)
            took = time.monotonic() - t0
            left = took / (i + 1) * (cfg.samples - i - 1)
            console.print(f"sample {i + 1}/{cfg.samples} ({took:.0f} s, about {left:.0f} s left): load "
                          f"{row['load_procs']}{' ' + row['load_kind'] if row['load_kind'] else ''}, batch {row['batch']}, size {row['input_size']}, threads "
                          f"{row['threads']}, {inputs[0][0]}={row[inputs[0][0]]}; ms {lat}", highlight=False)

    try:
        cfg.check()
    except ValueError as exc:
        raise ProfileInputError(str(exc)) from None
    console.print(f"profiling {args.workload}: {cfg.samples} samples × {len(actions)} actions × "
                  f"{cfg.rounds} rounds × {cfg.repeats} requests …", highlight=False)
    from mi_certify.runtime.probes import LinuxProbe, MergedProbe, MicrobenchProbe
    probe = LinuxProbe(util_window_s=min(0.1, cfg.settle_s), mem_bw_peak=args.mem_bw_peak)
    if args.microbench:
        probe = MergedProbe([probe, MicrobenchProbe()])
    try:
        with bar:
            meta = profile(args.workload, args.out, actions, plans, inputs, overrides, cfg, probe=probe,
                           command=command or f"mi-certify profile --workload {args.workload} --out {args.out}",
                           on_sample=on_sample)
    except ValueError as exc:
        raise ProfileInputError(str(exc)) from None
    finally:
        probe.close()
    console.print(f"wrote {args.out} ({meta['samples']} rows, {meta['duration_s']} s) and "
                  f"{Path(args.out).with_suffix('.json')}; load average {meta['loadavg_start'][0]:.2f} → "
                  f"{meta['loadavg_end'][0]:.2f}", highlight=False)
    return 0


def lut_preview(model_path, spec) -> dict:
    """What ``build`` will report of the LUT of ``model_path``: the same distillation and fidelity
    (:func:`mi_certify.generator.build.distill.distill`, ``fidelity`` with the build's points):
    {"cells", "proven", "resolved", "proven_share", "agreement", "points"}."""
    return _distilled(model_path, spec)[0]


def _distilled(model_path, spec):
    """(:func:`lut_preview`'s figures, the LUT as ``build`` deploys it: distilled, then the property
    masks of its ``lut_properties`` stage)."""
    from mi_certify.generator.build.distill import DistillOptions, distill, fidelity
    from mi_certify.generator.core.lut import PROVEN, apply_masks, property_masks
    from mi_certify.generator.frontend.model import load_model
    from mi_certify.generator.pipeline.stages import FIDELITY_POINTS

    model = load_model(model_path)
    r = distill(spec, model, DistillOptions(resolve=spec.resolve))
    fig, _ = fidelity(spec, model, r.lut, n_points=FIDELITY_POINTS)
    proven = int((r.lut.status == PROVEN).sum())
    n = int(len(r.lut.status))
    return ({"cells": n, "proven": proven, "resolved": n - proven, "proven_share": round(proven / n, 4),
             "agreement": round(float(fig["agreement"]), 4), "points": int(fig["points"])},
            apply_masks(spec, r.lut, property_masks(spec))[0])


def _lut_figures(res, spec) -> None:
    """Adds ``lut_preview`` and ``lut_fsm_held_out`` (docs/training.md, "What build will report") to
    ``res.report``: the model is distilled as ``build`` distils it, from a temporary copy."""
    import tempfile

    import numpy as np

    from mi_certify.generator.core.lut import point_addresses
    from mi_certify.generator.frontend.train import lut_fsm_report

    with tempfile.TemporaryDirectory(prefix="mi-certify-train-") as tmp:
        path = Path(tmp) / "preview.onnx"
        path.write_bytes(res.model_bytes)
        preview, lut = _distilled(path, spec)
    res.report["lut_preview"] = preview
    if res.held_out is not None and len(res.held_out.labels):
        addrs, fault = point_addresses(spec, res.held_out.x)  # a probe fault: the FSM decides the conservative action
        tokens = np.where(fault, spec.conservative, lut.tokens[addrs])
        res.report["lut_fsm_held_out"] = lut_fsm_report(tokens, res.held_out, spec)


def _counterexamples(model_bytes: bytes, spec) -> list[tuple[str, list[float]]]:
    """(property id, x) per forbid/require property the seeded falsifiers find violated
    (:func:`mi_certify.verification.nn.nn_verify.falsify`: the same on every machine)."""
    import tempfile

    from mi_certify.generator.frontend.model import load_model
    from mi_certify.verification.nn.nn_verify import falsify
    from mi_certify.verification.nn.properties import spec_queries

    out = []
    with tempfile.TemporaryDirectory(prefix="mi-certify-train-") as tmp:   # kept while the model is used: its
        path = Path(tmp) / "round.onnx"                                    # replays read the file (hash-checked)
        path.write_bytes(model_bytes)
        model = load_model(path)
        for q in spec_queries(spec):
            if q.kind in ("forbid", "require"):
                found = falsify(model, q)
                if found is not None:
                    out.append((q.id, [float(v) for v in found[1]["x"]]))
    return out


def _property_rounds(data, spec, opts, res, rounds: int, console: Console):
    """Counterexample-guided rounds (docs/training.md, "Property rounds"): returns the last
    TrainResult with ``report["property_rounds"]`` set."""
    from mi_certify.generator.frontend.train import train_controller

    used: list = []
    done = 0
    while True:
        new = _counterexamples(res.model_bytes, spec)
        if not new or done == rounds:
            break
        done += 1
        used += new
        console.print(f"round {done}: the falsifiers found {', '.join(p for p, _ in new)} violated; retraining with "
                      f"labelled rows in the counterexamples' LUT cells", highlight=False)
        res = train_controller(data, spec, opts, counterexamples=used)
    res.report["property_rounds"] = {"limit": rounds, "rounds": done, "counterexamples": len(used),
                                     "still_falsified": sorted({p for p, _ in new})}
    return res


def _verify_properties(path, spec, console: Console) -> int:
    """The build's network verification of the properties (its default timeouts); one line; the
    exit code of ``verify --sla`` for the properties (0 all proved, 1 one violated, 3 one unknown)."""
    import time

    from mi_certify.generator.frontend.model import load_model
    from mi_certify.generator.pipeline.stages import BuildOptions
    from mi_certify.verification.nn.network import verify_spec
    from mi_certify.verification.nn.nn_verify import VerifyOptions

    t0 = time.monotonic()
    budget = BuildOptions().verify_timeout
    res = verify_spec(load_model(path), spec, VerifyOptions(timeout=budget, confirm_timeout=budget))
    words = []
    for r in res.properties:
        said = r.verdict.value
        if said == "violated" and r.witness:
            said += f" at x={[round(float(v), 6) for v in r.witness['x']]}"
        elif said == "unknown":
            said += f" ({r.errors[-1] if r.errors else r.detail})"
        words.append(f"{r.id} {said}")
    verdicts = {r.verdict.value for r in res.properties}
    code = 1 if "violated" in verdicts else 3 if "unknown" in verdicts else 0
    tail = {0: "", 1: ": build will fail (its verify stage)",
            3: ": build may fail (a verdict within this machine's time budget is unknown)"}[code]
    console.print(f"properties, verified as build verifies them ({time.monotonic() - t0:.1f} s): "
                  + ("; ".join(words) or "none declared") + tail, highlight=False, markup=False)
    return code


def train_command(args, console: Console) -> int:
    from mi_certify.generator.core.spec import load_spec
    from mi_certify.generator.frontend.train import (
        TrainError, TrainOptions, lut_fsm_line, read_profile, train_controller, write_outputs)

    spec = load_spec(args.sla)
    try:
        hidden = tuple(int(h) for h in args.hidden.split(","))
    except ValueError:
        raise TrainError(f"--hidden {args.hidden!r}: expected two integers, e.g. 16,16") from None
    opts = TrainOptions(hidden=hidden, alpha=args.alpha, max_iter=args.max_iter, holdout=args.holdout,
                        augment=args.augment, tie_ms=args.tie_ms, seed=args.seed, certify=args.certify,
                        certify_weight=args.certify_weight, certify_iter=args.certify_iter)
    opts.check()
    if args.property_rounds < 0:
        raise TrainError("--property-rounds must be >= 0")
    if not Path(args.out).resolve().parent.is_dir():
        raise TrainError("the folder of this output file does not exist", file=args.out)
    data = read_profile(args.data, spec)
    res = train_controller(data, spec, opts)
    res = _property_rounds(data, spec, opts, res, args.property_rounds, console)
    _lut_figures(res, spec)
    js, md = write_outputs(res, args.out)
    r = res.report
    h = r["held_out"]
    fx, pi = h["against_fixed_actions"], h["permutation_importance"]
    console.print(f"labels {r['label_distribution']}; held-out accuracy {h['accuracy']} (always the majority label: "
                  f"{h['majority_label_accuracy']}); regret {h['regret']}", highlight=False)
    if fx.get("rows"):
        console.print(f"mean latency regret on {fx['rows']} held-out rows: controller "
                      f"{fx['controller']['mean_regret_ms']} ms, best fixed action ({fx['best_fixed_action']}) "
                      f"{fx['fixed'][fx['best_fixed_action']]['mean_regret_ms']} ms", highlight=False)
    console.print("permutation importance (held-out accuracy drop): "
                  + ", ".join(f"{n} {v['accuracy_drop_mean']:+.3f}" for n, v in pi["inputs"].items())
                  + f"; measurable influence: {', '.join(pi['measurable_inputs']) or 'none'}", highlight=False)
    if "certified_training" in r:
        ct = r["certified_training"]["stages"][-1]
        console.print(f"certified training: {ct['cells_certify']} cells trained to be certified, {ct['cells_given_up']} "
                      f"given up (a neighbour decides another action)", highlight=False)
    lp = r["lut_preview"]
    console.print(f"build will report: {lp['proven']} of {lp['cells']} LUT cells proven ({lp['proven_share']:.1%}), "
                  f"{lp['resolved']} resolved; agreement of the LUT with the network {lp['agreement']:.1%} on "
                  f"{lp['points']} points", highlight=False)
    if "lut_fsm_held_out" in r:
        console.print(lut_fsm_line(r["lut_fsm_held_out"]), highlight=False)
    pr = r["property_rounds"]
    if pr["rounds"] or pr["still_falsified"]:
        console.print(f"property rounds: {pr['rounds']} of at most {pr['limit']}, {pr['counterexamples']} "
                      f"counterexamples used; still falsified: {', '.join(pr['still_falsified']) or 'none'}",
                      highlight=False)
    console.print(f"wrote {args.out} (sha256 {r['export']['onnx_sha256'][:16]}…), {js}, {md}", highlight=False)
    code = 0 if args.no_verify else _verify_properties(args.out, spec, console)
    if code == 0:
        console.print(f"next: mi-certify build {args.out} --sla {args.sla}", highlight=False)
    else:
        console.print("next: more data or rows where the property applies (--augment), more --property-rounds, or "
                      "another --seed / --alpha; docs/training.md, \"Property rounds and the final verification\"",
                      highlight=False)
    return code
