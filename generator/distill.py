"""Certified distillation: the network → a LUT whose every cell is PROVEN or RESOLVED.

The quantized grid is partitioned recursively in level space (DESIGN.md,
"Distillation"). For a box of cells (closed physical box covering them) the candidate
action a is the decoded action at the box centre; CROWN lower bounds of
``y_a - y_j`` (argmax; ``y_j - y_a`` for argmin) that are > 0 for every j != a prove
that a wins strictly everywhere in the box, so every cell of it is **proven** a (ties
cannot occur there). Otherwise the box is split along the input with the most levels
left (ties broken by the larger influence ``sum_j |Λ_j,i| · width_i``) down to single
cells. A single cell is decided by :func:`mi_certify.verification.nn_verify.decide`
(seeded sampling, then bounds with input splitting under a fixed box budget, witnesses
replayed on onnxruntime; no wall-clock limits, so the LUT is the same on any machine)
on "some other action is decoded in the cell": PROVED makes the cell proven; a replayed witness shows the
cell holds two actions and it is **resolved** by the sla.yaml policy
(``distill.resolve``): ``conservative`` (default: the conservative action, confident),
``centre`` (the centre's action, not confident) or ``refuse`` (the build fails); an
UNKNOWN answer is resolved the same way and listed as undecided.

Ties at a cell centre follow numpy/onnxruntime: the lowest index wins.

Confident bit (a certified lower bound): for argmax,
``p_a = 1 / sum_j exp(y_j - y_a) >= 1 / (1 + sum_{j != a} exp(ub(y_j - y_a)))`` with the
CROWN upper bounds of the differences (for argmin the softmax of ``-y``). A box whose
bound is under the threshold is split further; a single cell under it is not confident.

Independent top-level slices run in two worker processes; results are merged in slice
order, so the LUT does not depend on scheduling.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from .ir import ControllerIR
from .lut import PROVEN, RESOLVED, Lut, decode
from .spec import Spec


@dataclass(frozen=True)
class DistillOptions:
    """cell_boxes: branch-and-bound budget (boxes, not seconds, so the result does not
    depend on machine speed) for deciding one single cell. workers: processes."""

    resolve: str = "conservative"
    cell_boxes: int = 60
    workers: int = 2


@dataclass
class DistillResult:
    """The LUT, every final box (deterministic records), resolved cells, statistics."""

    lut: Lut
    boxes: list[dict]
    resolved: list[dict]
    stats: dict


def _phys(spec: Spec, qlo: np.ndarray, qhi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Closed float64 box containing cells qlo..qhi (exact rational edges, rounded outward)."""
    from mi_certify.runtime.quantize import Quantizer

    lo, hi = np.empty(len(spec.inputs)), np.empty(len(spec.inputs))
    for k, inp in enumerate(spec.inputs):
        qz = Quantizer.from_floats(inp.min, inp.max, inp.bits)
        a, _ = qz.cell_bounds(int(qlo[k]))
        _, b = qz.cell_bounds(int(qhi[k]))
        lo[k] = float(a) if float(a) <= a else np.nextafter(float(a), -np.inf)
        hi[k] = float(b) if float(b) >= b else np.nextafter(float(b), np.inf)
    return lo, hi


def _softmax_lower(margin_low: np.ndarray) -> float:
    """Certified lower bound of the winner's softmax probability from lower bounds of its margins."""
    return 1.0 / (1.0 + float(np.sum(np.exp(-margin_low))))


def _addresses(spec: Spec, qlo: np.ndarray, qhi: np.ndarray) -> np.ndarray:
    addr = np.zeros(1, dtype=np.int64)
    for i, inp in enumerate(spec.inputs):
        lv = np.arange(qlo[i], qhi[i] + 1, dtype=np.int64)
        addr = (addr[:, None] << inp.bits | lv[None, :]).reshape(-1)
    return addr


def _distill_slice(args) -> tuple[list, list, list, dict]:
    """Worker: distill the level box [qlo, qhi]; returns (assignments, box records, resolved, stats)."""
    from mi_certify.verification.bounds import crown_bounds, output_matrix_lower
    from mi_certify.verification.nn_verify import Verdict, VerifyOptions, decide
    from mi_certify.verification.properties import Disjunct, Query, decoded_rows

    spec, ir, model_path, qlo0, qhi0, opts = args
    n_act = len(spec.actions)
    thr = spec.confidence_threshold
    assigns, records, resolved = [], [], []
    stats = {"boxes": 0, "bound_calls": 0, "solver_cells": 0, "marabou_boxes": 0}
    stack = [(np.array(qlo0), np.array(qhi0))]
    # deterministic: a box budget instead of a clock, no Marabou (its timeouts depend on speed)
    vopts = VerifyOptions(timeout=1e9, max_boxes=opts.cell_boxes, use_marabou=False, z3_confirm=False)
    while stack:
        qlo, qhi = stack.pop()
        stats["boxes"] += 1
        lo, hi = _phys(spec, qlo, qhi)
        centre = (lo + hi) / 2
        a = int(decode(spec, ir.evaluate(centre)[None, :])[0][0])
        D = -decoded_rows(n_act, a, spec.decode)[0]  # rows: winning margins of a over each j
        nb = crown_bounds(ir, lo, hi)
        low, lin = output_matrix_lower(ir, D, lo, hi, nb)
        stats["bound_calls"] += 1
        single = bool(np.all(qlo == qhi))
        if np.all(low > 0):
            conf = thr is None or _softmax_lower(low) >= thr
            if conf or single:
                assigns.append((qlo, qhi, a, conf, PROVEN))
                records.append({"levels": [qlo.tolist(), qhi.tolist()], "verdict": "proven", "action": a,
                                "method": "bounds", "confident": conf, "margin_lower": float(low.min())})
                continue
        if not single:
            spans = qhi - qlo
            influence = np.abs(lin).sum(axis=0) * (hi - lo)
            i = int(np.lexsort((-influence, -spans))[0])
            mid = (qlo[i] + qhi[i]) // 2
            a_hi, b_lo = qhi.copy(), qlo.copy()
            a_hi[i], b_lo[i] = mid, mid + 1
            stack.extend([(b_lo, qhi), (qlo, a_hi)])
            continue
        # a single cell the bounds could not decide: ask the complete procedure
        stats["solver_cells"] += 1
        djs = []
        for j in range(n_act):
            if j == a:
                continue
            C, d = decoded_rows(n_act, j, spec.decode)
            djs.append(Disjunct(lo, hi, C, d, spec.actions[j].name))
        res = decide(ir, model_path, Query("cell", "distill", tuple(djs)), vopts)
        stats["marabou_boxes"] += res.stats.get("marabou_boxes", 0)
        addr = int(_addresses(spec, qlo, qhi)[0])
        if res.verdict == Verdict.PROVED:
            # a wins wherever the others are excluded (non-strict rows cover ties)
            conf = thr is None or _softmax_lower(low) >= thr
            assigns.append((qlo, qhi, a, bool(conf), PROVEN))
            records.append({"levels": [qlo.tolist(), qhi.tolist()], "verdict": "proven", "action": a,
                            "method": f"cell branch and bound ({res.method})", "confident": bool(conf)})
            continue
        held = [spec.actions[a].name]
        witnesses = [{"action": spec.actions[a].name, "x": centre.tolist()}]
        if res.verdict == Verdict.VIOLATED:
            other = djs[res.witness["disjunct"]].label
            held.append(other)
            witnesses.append({"action": other, "x": res.witness["x"]})
        if opts.resolve == "centre":
            tok, conf = a, False
        else:
            tok, conf = spec.conservative, True
        assigns.append((qlo, qhi, tok, conf, RESOLVED))
        entry = {"address": addr, "levels": qlo.tolist(), "actions": held, "witnesses": witnesses,
                 "undecided": res.verdict != Verdict.VIOLATED, "resolved_to": spec.actions[tok].name,
                 "policy": opts.resolve}
        resolved.append(entry)
        records.append({"levels": [qlo.tolist(), qhi.tolist()], "verdict": "resolved", "action": tok,
                        "method": res.method, "confident": conf, "held": held})
    return assigns, records, resolved, stats


def distill(spec: Spec, ir: ControllerIR, model_path: str | Path, opts: DistillOptions | None = None,
            progress=None) -> DistillResult:
    """Build the certified LUT over the whole grid.

    Returns:
        DistillResult; ``lut.status`` holds PROVEN or RESOLVED for every cell.
    """
    opts = opts or DistillOptions()
    n = 1 << spec.address_bits
    tokens = np.zeros(n, dtype=np.uint8)
    conf = np.zeros(n, dtype=bool)
    status = np.full(n, "", dtype=object)
    # top-level slices along input 0 (most significant) for the worker processes
    b0 = spec.inputs[0].bits
    slices = []
    n_slices = min(1 << b0, 8)
    per = (1 << b0) // n_slices
    full_hi = np.array([(1 << i.bits) - 1 for i in spec.inputs])
    for s in range(n_slices):
        qlo = np.zeros(len(spec.inputs), dtype=np.int64)
        qhi = full_hi.copy()
        qlo[0], qhi[0] = s * per, (s + 1) * per - 1
        slices.append((spec, ir, str(model_path), qlo, qhi, opts))
    records, resolved = [], []
    stats = {"boxes": 0, "bound_calls": 0, "solver_cells": 0, "marabou_boxes": 0}
    results = []
    if opts.workers > 1:
        try:
            with ProcessPoolExecutor(max_workers=opts.workers, mp_context=get_context("spawn")) as pool:
                for k, r in enumerate(pool.map(_distill_slice, slices)):
                    results.append(r)
                    if progress:
                        progress(k + 1, len(slices))
        except (RuntimeError, BrokenProcessPool):  # e.g. called from a script without a __main__ guard
            results = []
    if not results:
        for k, s in enumerate(slices):
            results.append(_distill_slice(s))
            if progress:
                progress(k + 1, len(slices))
    for assigns, recs, res, st in results:
        for qlo, qhi, tok, c, stt in assigns:
            addr = _addresses(spec, qlo, qhi)
            tokens[addr] = tok
            conf[addr] = c
            status[addr] = stt
        records.extend(recs)
        resolved.extend(res)
        for k in stats:
            stats[k] += st[k]
    if np.any(status == ""):
        raise AssertionError("distillation left cells unassigned")  # pragma: no cover - partition bug
    resolved.sort(key=lambda e: e["address"])
    return DistillResult(Lut(tokens, conf, status), records, resolved, stats)


def fidelity(spec: Spec, model_path: str | Path, lut: Lut, n_points: int = 100_000, seed: int = 0) -> dict:
    """Agreement of the LUT with onnxruntime on ``n_points`` uniform random points.

    Points are quantized exactly (runtime quantizer); the network's action is the
    onnxruntime float32 argmax/argmin (lowest index on ties).

    Returns:
        {"points", "agree", "agreement", "proven_points", "proven_agree", "disagreements" (first 10)}.
    """
    from mi_certify.runtime.quantize import quantize

    from .lut import quantizers
    from .onnx_import import evaluate_onnxruntime

    lo = np.array([i.min for i in spec.inputs])
    hi = np.array([i.max for i in spec.inputs])
    rng = np.random.default_rng(seed)
    pts = (lo + (hi - lo) * rng.random((n_points, lo.size))).astype(np.float32).astype(np.float64)
    pts = np.clip(pts, lo, hi)
    qs = quantizers(spec)
    addrs = np.array([quantize(list(map(float, p)), qs)[0] for p in pts])
    ys = evaluate_onnxruntime(model_path, pts)
    net = np.argmin(ys, axis=1) if spec.decode == "argmin" else np.argmax(ys, axis=1)
    got = lut.tokens[addrs]
    agree = got == net
    proven = lut.status[addrs] == PROVEN
    bad = np.nonzero(~agree & proven)[0][:10]
    return {"points": int(n_points), "agree": int(agree.sum()), "agreement": float(agree.mean()),
            "proven_points": int(proven.sum()), "proven_agree": int((agree & proven).sum()),
            "disagreements_in_proven_cells": [{"x": pts[i].tolist(), "address": int(addrs[i]),
                                               "lut": spec.actions[int(got[i])].name,
                                               "onnxruntime": spec.actions[int(net[i])].name} for i in bad]}
