"""Certified distillation: the network → a LUT whose every cell is PROVEN or RESOLVED.

The quantized grid is partitioned recursively in level space (DESIGN.md,
"Distillation"), breadth first, every level of the partition bounded in one vectorised
CROWN pass (:mod:`mi_certify.verification.bounds`, best of four lower ReLU relaxations):

1. **Grid vertices.** The network is evaluated (IR, float64) at every vertex of the
   grid. A box whose vertices decode to different actions cannot have one strict
   winner everywhere: it is split without being bounded. Otherwise its candidate
   action a is the vertices' action.
2. **Boxes.** CROWN lower bounds of ``y_a - y_j`` (argmax; ``y_j - y_a`` for argmin)
   that are > 0 for every j != a prove that a wins strictly everywhere in the closed
   box (exact rational cell edges rounded outward), so every cell of it is **proven**
   a (ties cannot occur there). Otherwise the box is halved along the input with the
   most levels left (ties broken by the larger influence ``sum_j |Λ_j,i| · width_i``)
   down to single cells.
3. **Single cells.** A cell whose vertices disagree is first searched for witnesses
   (centre and corners pulled inside the half-open cell); a cell the bounds leave
   open is bisected inside (continuous boxes, all such cells in one batch per round)
   up to ``cell_boxes`` boxes; each sub-box's centre and the corner minimising its
   worst margin's linear bound are witness candidates; cells still open get
   ``RANDOM_LOOK`` seeded random points (seed = address). Every witness is **replayed**
   on the IR and on onnxruntime float32 (:func:`mi_certify.verification.nn_verify.replay_many`,
   tolerance 1e-4). A cell with replayed witnesses of two actions holds both; a cell
   neither proven nor witnessed within the budget is **undecided**. Both are
   **resolved** by the sla.yaml policy (``distill.resolve``): ``conservative``
   (default: the conservative action, confident), ``centre`` (the centre's action, not
   confident) or ``refuse`` (the build fails), and listed with their witnesses.

Budgets are counted in boxes, never seconds, so the LUT is the same on any machine.
Ties at a cell centre follow numpy/onnxruntime: the lowest index wins.

Confident bit (a certified lower bound): for argmax,
``p_a = 1 / sum_j exp(y_j - y_a) >= 1 / (1 + sum_{j != a} exp(-lb(y_a - y_j)))`` with the
CROWN lower bounds of the margins (for argmin the softmax of ``-y``); for a cell proven
by bisection, the minimum over its sub-boxes. A box whose bound is under the threshold
is split further; a single cell under it is not confident.

Independent top-level slices run in two worker processes; results are merged in slice
order, so the LUT does not depend on scheduling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ir import ControllerIR
from .lut import PROVEN, RESOLVED, Lut, decode
from .model import LoadedModel
from .numerics import corner_signs, softmax_lower, sum_last
from .spec import Spec


#: Seeded random points per cell that the bounds could not decide within its box budget.
RANDOM_LOOK = 64


@dataclass(frozen=True)
class DistillOptions:
    """cell_boxes: bisection budget (boxes, not seconds, so the result does not depend on
    machine speed) for deciding one single cell. workers: processes."""

    resolve: str = "conservative"
    cell_boxes: int = 256
    workers: int = 2


@dataclass
class DistillResult:
    """The LUT, every final box (deterministic records), resolved cells, statistics."""

    lut: Lut
    boxes: list[dict]
    resolved: list[dict]
    stats: dict


def cell_edges(spec: Spec) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per input, float64 lower and upper edges of every cell (exact rational edges of the
    runtime quantizer, rounded outward): closed boxes that contain the half-open cells."""
    from mi_certify.runtime.quantize import Quantizer

    lows, highs = [], []
    for inp in spec.inputs:
        qz = Quantizer.from_floats(inp.min, inp.max, inp.bits)
        lo_e, hi_e = np.empty(qz.levels), np.empty(qz.levels)
        for q in range(qz.levels):
            a, b = qz.cell_bounds(q)
            lo_e[q] = float(a) if float(a) <= a else np.nextafter(float(a), -np.inf)
            hi_e[q] = float(b) if float(b) >= b else np.nextafter(float(b), np.inf)
        lows.append(lo_e)
        highs.append(hi_e)
    return lows, highs


def box_of_cells(edges, qlo: np.ndarray, qhi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Closed float64 box containing cells qlo..qhi (each (n,) or (B, n) levels)."""
    lows, highs = edges
    qlo, qhi = np.asarray(qlo), np.asarray(qhi)
    lo = np.stack([lows[k][qlo[..., k]] for k in range(len(lows))], axis=-1)
    hi = np.stack([highs[k][qhi[..., k]] for k in range(len(highs))], axis=-1)
    return lo, hi


def vertex_actions(spec: Spec, ir: ControllerIR, chunk: int = 1 << 17) -> np.ndarray:
    """Decoded action (IR, float64; lowest index on ties) at every vertex of the grid.

    Returns:
        int16 array of shape ``(2**bits_i + 1 for each input)``. Used only to choose
        which boxes to bound: a closed box whose vertices decode differently cannot have
        one strict winner everywhere, so bounding it is skipped and it is split at once.
    """
    lows, highs = cell_edges(spec)
    axes = [np.append(lo_e, hi_e[-1]) for lo_e, hi_e in zip(lows, highs)]
    shape = tuple(len(ax) for ax in axes)
    out = np.empty(int(np.prod(shape)), dtype=np.int16)
    for start in range(0, out.size, chunk):
        idx = np.unravel_index(np.arange(start, min(start + chunk, out.size)), shape)
        pts = np.stack([ax[i] for ax, i in zip(axes, idx)], axis=1)
        out[start:start + len(pts)] = decode(spec, ir.evaluate(pts))[0]
    return out.reshape(shape)


def _addresses(spec: Spec, qlo: np.ndarray, qhi: np.ndarray) -> np.ndarray:
    addr = np.zeros(1, dtype=np.int64)
    for i, inp in enumerate(spec.inputs):
        lv = np.arange(qlo[i], qhi[i] + 1, dtype=np.int64)
        addr = (addr[:, None] << inp.bits | lv[None, :]).reshape(-1)
    return addr


def _split(qlo: np.ndarray, qhi: np.ndarray, influence: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Halve the box along the input with the most levels left (ties: larger influence,
    then lower index)."""
    spans = qhi - qlo
    keys = (np.arange(len(spans)),) if influence is None else (np.arange(len(spans)), -influence)
    i = int(np.lexsort(keys + (-spans,))[0])
    mid = (qlo[i] + qhi[i]) // 2
    a_hi, b_lo = qhi.copy(), qlo.copy()
    a_hi[i], b_lo[i] = mid, mid + 1
    return [(qlo, a_hi), (b_lo, qhi)]


def _witnesses(spec: Spec, model: LoadedModel,
               cells: list[tuple[np.ndarray, np.ndarray, list[np.ndarray]]]) -> list[list[dict]]:
    """Replayed witnesses of distinct actions, per single cell (lo, hi, extra points).

    Candidates: the centre, the corners (:func:`~.numerics.corner_signs`: all of them up to
    6 inputs, a fixed sample of 64 beyond) pulled 2^-20 of the half-width towards it (strictly
    inside the half-open cell), then the extra points; the first candidate of each
    decoded action is replayed on the IR and onnxruntime (one batch for all cells).

    Returns:
        per cell, [{"token", "action", "x", "y_onnxruntime"}] of confirmed witnesses.
    """
    from mi_certify.verification.nn_verify import replay_many
    from mi_certify.verification.properties import Disjunct, decoded_rows

    if not cells:
        return []
    ir = model.ir
    n = len(spec.inputs)
    signs = corner_signs(n)  # every corner up to 6 inputs, a fixed sample beyond: no cost 2^n
    pts, owner = [], []
    for ci, (lo, hi, extra) in enumerate(cells):
        centre = (lo + hi) / 2
        corners = np.where(signs, hi, lo)
        cand = np.vstack([centre[None], centre + (corners - centre) * (1 - 2.0 ** -20)] + [e[None] for e in extra])
        pts.append(cand)
        owner.extend([ci] * len(cand))
    allpts = np.vstack(pts)
    acts = decode(spec, ir.evaluate(allpts))[0]
    requests, req_cell, seen = [], [], set()
    for k, ci in enumerate(owner):
        j = int(acts[k])
        if (ci, j) in seen:
            continue
        seen.add((ci, j))
        lo, hi, _ = cells[ci]
        C, d = decoded_rows(len(spec.actions), j, spec.decode)
        requests.append((Disjunct(lo, hi, C, d, spec.actions[j].name), allpts[k]))
        req_cell.append((ci, j))
    found: list[list[dict]] = [[] for _ in cells]
    for (ci, j), (ok, wit) in zip(req_cell, replay_many(model, requests)):
        if ok:
            found[ci].append({"token": j, "action": spec.actions[j].name, "x": wit["x"],
                              "y_onnxruntime": wit["y_onnxruntime"]})
    return found


def _distill_slice(args) -> tuple[list, list, list, dict]:
    """Worker: distill the level box [qlo, qhi]; returns (assignments, box records, resolved, stats).

    Breadth first: every level of the partition is bounded in one vectorised CROWN pass;
    then the single cells the bounds left open are split inside (:func:`bisect_cells`)
    up to ``opts.cell_boxes`` boxes each; what is still open gets a seeded random look
    for witnesses and, without two, is resolved as undecided.
    """
    spec, model, qlo0, qhi0, opts, verts = args
    ir = model.ir
    thr = spec.confidence_threshold
    edges = cell_edges(spec)
    assigns, records, resolved = [], [], []
    stats = {"boxes": 0, "bound_calls": 0, "skipped_boxes": 0, "sampled_cells": 0, "cell_split_boxes": 0,
             "split_proven_cells": 0, "undecided_cells": 0}

    def confident(low) -> np.ndarray:
        return np.ones(low.shape[:-1], dtype=bool) if thr is None else softmax_lower(low) >= thr

    def proven(qlo, qhi, a, conf, method, margin=None):
        assigns.append((qlo, qhi, a, conf, PROVEN))
        rec = {"levels": [qlo.tolist(), qhi.tolist()], "verdict": "proven", "action": a, "method": method,
               "confident": conf}
        if margin is not None:
            rec["margin_lower"] = float(margin)
        records.append(rec)

    def centre_action(lo, hi) -> int:
        return int(decode(spec, ir.evaluate(((lo + hi) / 2)[None]))[0][0])

    def resolve(qlo, lo, hi, wits, undecided, method):
        tok, conf = (centre_action(lo, hi), False) if opts.resolve == "centre" else (spec.conservative, True)
        assigns.append((qlo, qlo, tok, conf, RESOLVED))
        held = [w["action"] for w in wits]
        resolved.append({"address": int(_addresses(spec, qlo, qlo)[0]), "levels": qlo.tolist(), "actions": held,
                         "witnesses": [{"action": w["action"], "x": w["x"]} for w in wits],
                         "undecided": undecided, "resolved_to": spec.actions[tok].name, "policy": opts.resolve})
        records.append({"levels": [qlo.tolist(), qlo.tolist()], "verdict": "resolved", "action": tok,
                        "method": method, "confident": conf, "held": held})

    # 1. the partition of the grid, level by level
    open_cells = []  # (qlo, lo, hi, action): single cells the bounds left open
    frontier = [(np.array(qlo0), np.array(qhi0))]
    while frontier:
        nxt, cand, mixed = [], [], []
        for qlo, qhi in frontier:
            stats["boxes"] += 1
            sub = verts[tuple(slice(int(l), int(h) + 2) for l, h in zip(qlo, qhi))]
            first = int(sub.flat[0])
            if np.all(sub == first):
                cand.append((qlo, qhi, first))
            elif np.any(qlo != qhi):
                stats["skipped_boxes"] += 1
                nxt.extend(_split(qlo, qhi, None))
            else:
                mixed.append(qlo)
        if mixed:
            lo_m, hi_m = box_of_cells(edges, np.array(mixed), np.array(mixed))
            for qlo, lo, hi, wits in zip(mixed, lo_m, hi_m, _witnesses(spec, model,
                                                                      [(l, h, []) for l, h in zip(lo_m, hi_m)])):
                if len(wits) >= 2:
                    stats["sampled_cells"] += 1
                    resolve(qlo, lo, hi, wits, False, "sampling")
                else:
                    cand.append((qlo, qlo, centre_action(lo, hi)))
        if cand:
            QLO, QHI = np.array([c[0] for c in cand]), np.array([c[1] for c in cand])
            LO, HI = box_of_cells(edges, QLO, QHI)
            LOW, INF, _ = _bound(spec, ir, LO, HI, [c[2] for c in cand])
            stats["bound_calls"] += len(cand)
            conf = confident(LOW)
            for k, (qlo, qhi, a) in enumerate(cand):
                single = bool(np.all(qlo == qhi))
                if np.all(LOW[k] > 0) and (conf[k] or single):
                    proven(qlo, qhi, a, bool(conf[k]), "bounds", LOW[k].min())
                elif not single:
                    nxt.extend(_split(qlo, qhi, INF[k]))
                else:
                    open_cells.append((qlo, LO[k], HI[k], a))
        frontier = nxt

    # 2. open single cells: bisection inside each cell, all cells batched per round
    status, conf_low, hits, split_boxes = bisect_cells(spec, ir, [(lo, hi, a) for _, lo, hi, a in open_cells],
                                                       opts.cell_boxes)
    stats["cell_split_boxes"] += split_boxes
    # cells left open by the budget: a seeded random look for witnesses (seed = address)
    for c, st in enumerate(status):
        if st == "budget":
            qlo, lo, hi = open_cells[c][:3]
            rng = np.random.default_rng(int(_addresses(spec, qlo, qlo)[0]))
            hits[c].extend(lo + (hi - lo) * rng.random((RANDOM_LOOK, lo.size)))
    looked = [c for c, st in enumerate(status) if st in ("witness", "budget")]
    found = dict(zip(looked, _witnesses(spec, model, [(open_cells[c][1], open_cells[c][2], hits[c])
                                                                for c in looked])))
    for c, (qlo, lo, hi, a) in enumerate(open_cells):
        if status[c] == "proven":
            stats["split_proven_cells"] += 1
            proven(qlo, qlo, a, bool(thr is None or conf_low[c] >= thr), "bounds+cell split")
            continue
        wits = found[c]
        if len(wits) >= 2:
            stats["sampled_cells"] += 1
            resolve(qlo, lo, hi, wits, False, "bounds+cell split+sampling")
            continue
        # undecided within the budget: resolved like a cell holding several actions
        stats["undecided_cells"] += 1
        if not any(w["token"] == a for w in wits):
            wits = [{"action": spec.actions[a].name, "x": ((lo + hi) / 2).tolist()}] + wits
        resolve(qlo, lo, hi, wits, True, "bounds+cell split (budget spent)")
    return assigns, records, resolved, stats


def _bound(spec: Spec, ir: ControllerIR, LO: np.ndarray, HI: np.ndarray, A) -> tuple:
    """Lower bounds (B, n_act - 1) of the winning margins of A[b] over each box (best of the
    lower ReLU relaxations), input influence (B, n) and, per box, the corner minimising
    the linear bound of its worst margin."""
    from mi_certify.verification.bounds import LOWER_SLOPES, crown_bounds, output_matrix_lower
    from mi_certify.verification.properties import decoded_rows

    n_act = len(spec.actions)
    D = np.stack([-decoded_rows(n_act, a, spec.decode)[0] for a in A])
    LOW, LIN = output_matrix_lower(ir, D, LO, HI, crown_bounds(ir, LO, HI, LOWER_SLOPES), LOWER_SLOPES)
    worst = LIN[np.arange(len(A)), np.argmin(LOW, axis=1)]
    return LOW, sum_last(np.swapaxes(np.abs(LIN), 1, 2)) * (HI - LO), np.where(worst >= 0, LO, HI)


def bisect_cells(spec: Spec, ir: ControllerIR, cells: list[tuple[np.ndarray, np.ndarray, int]], budget: int
                 ) -> tuple[list[str], list[float], list[list[np.ndarray]], int]:
    """Decide single cells by bisection inside each, all cells batched per round.

    Args:
        cells: (lo, hi, a): the closed box of a cell and the action to prove there.
        budget: boxes per cell (the cell itself counts one).
    Returns:
        (status per cell: "proven" | "witness" (a sub-box centre or minimising corner
        decodes another action; candidates in ``hits``) | "budget"; the certified softmax
        lower bound per cell (min over its sub-boxes); witness candidates per cell; boxes bounded).
    """
    thr = spec.confidence_threshold
    used = [1] * len(cells)
    conf_low = [1.0] * len(cells)
    status = ["open"] * len(cells)
    hits: list[list[np.ndarray]] = [[] for _ in cells]
    n_boxes = 0
    if not cells:
        return [], [], [], 0
    _, INF0, _ = _bound(spec, ir, np.array([c[0] for c in cells]), np.array([c[1] for c in cells]),
                        [c[2] for c in cells])
    boxes = []  # (cell, lo, hi)
    for c, (lo, hi, _) in enumerate(cells):
        boxes.extend((c, l, h) for l, h in _bisect(lo, hi, INF0[c]))
        used[c] += 2
    while boxes:
        # a sub-box centre that decodes another action is a witness candidate for its cell
        centres = np.array([(l + h) / 2 for _, l, h in boxes])
        acts = decode(spec, ir.evaluate(centres))[0]
        for (c, _, _), x, a in zip(boxes, centres, acts):
            if int(a) != cells[c][2] and status[c] == "open":
                status[c] = "witness"
                hits[c].append(x)
        boxes = [b for b in boxes if status[b[0]] == "open"]
        if not boxes:
            break
        LO, HI = np.array([b[1] for b in boxes]), np.array([b[2] for b in boxes])
        LOW, INF, CORNER = _bound(spec, ir, LO, HI, [cells[c][2] for c, _, _ in boxes])
        n_boxes += len(boxes)
        probs = np.ones(len(boxes)) if thr is None else softmax_lower(LOW)
        # the corner that minimises the worst margin's linear bound (pulled inside the cell)
        cc = (LO + HI) / 2
        CORNER = cc + (CORNER - cc) * (1 - 2.0 ** -20)
        corner_acts = decode(spec, ir.evaluate(CORNER))[0]
        nxt = []
        for k, (c, lo, hi) in enumerate(boxes):
            if status[c] != "open":
                continue
            if np.all(LOW[k] > 0):
                conf_low[c] = min(conf_low[c], float(probs[k]))
                continue
            if int(corner_acts[k]) != cells[c][2]:
                status[c] = "witness"
                hits[c].append(CORNER[k])
                continue
            if used[c] + 2 > budget:
                status[c] = "budget"
                continue
            used[c] += 2
            nxt.extend((c, l, h) for l, h in _bisect(lo, hi, INF[k]))
        boxes = [b for b in nxt if status[b[0]] == "open"]
    status = ["proven" if st == "open" else st for st in status]
    return status, conf_low, hits, n_boxes


def _bisect(lo: np.ndarray, hi: np.ndarray, influence: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Halve a continuous box along the input of largest influence (ties: lower index)."""
    i = int(np.argmax(influence)) if np.any(influence > 0) else int(np.argmax(hi - lo))
    mid = (lo[i] + hi[i]) / 2
    a_hi, b_lo = hi.copy(), lo.copy()
    a_hi[i], b_lo[i] = mid, mid
    return [(lo, a_hi), (b_lo, hi)]


def distill(spec: Spec, model: LoadedModel, opts: DistillOptions | None = None,
            progress=None) -> DistillResult:
    """Build the certified LUT over the whole grid of ``spec`` for ``model`` (its IR is bounded;
    witnesses of RESOLVED cells are replayed on its onnxruntime session).

    Returns:
        DistillResult; ``lut.status`` holds PROVEN or RESOLVED for every cell.
    """
    opts = opts or DistillOptions()
    ir = model.ir
    n = 1 << spec.address_bits
    tokens = np.zeros(n, dtype=np.uint8)
    conf = np.zeros(n, dtype=bool)
    status = np.full(n, "", dtype=object)
    # top-level slices along input 0 (most significant) for the worker processes
    b0 = spec.inputs[0].bits
    slices = []
    n_slices = min(1 << b0, 4)
    per = (1 << b0) // n_slices
    full_hi = np.array([(1 << i.bits) - 1 for i in spec.inputs])
    verts = vertex_actions(spec, ir)
    for s in range(n_slices):
        qlo = np.zeros(len(spec.inputs), dtype=np.int64)
        qhi = full_hi.copy()
        qlo[0], qhi[0] = s * per, (s + 1) * per - 1
        slices.append((spec, model, qlo, qhi, opts, verts))
    records, resolved = [], []
    stats: dict[str, int] = {}
    results = []
    if opts.workers > 1:
        from mi_certify.verification.workers import WorkersLost, map_in_processes
        try:  # results come back in slice order, whatever the workers' order
            results = map_in_processes(_distill_slice, slices, opts.workers,
                                       on_result=(lambda k, done: progress(done, len(slices))) if progress else None)
        except WorkersLost:  # e.g. called from a script without a __main__ guard
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
        for k, v in st.items():
            stats[k] = stats.get(k, 0) + v
    if np.any(status == ""):
        raise AssertionError("distillation left cells unassigned")  # pragma: no cover - partition bug
    resolved.sort(key=lambda e: e["address"])
    return DistillResult(Lut(tokens, conf, status), records, resolved, stats)


def fidelity(spec: Spec, model: LoadedModel, lut: Lut, n_points: int = 100_000,
             seed: int = 0) -> tuple[dict, dict]:
    """Agreement of the LUT with the network (``model``) on ``n_points`` uniform random points.

    Points are quantized exactly (runtime quantizer); the network's action is the IR's
    argmax/argmin in float64, fixed-order arithmetic (lowest index on ties), so the
    figures are the same on every machine. onnxruntime (float32, whose kernels differ
    by CPU) decides the same points for the diagnostics.

    Returns:
        (figures: {"points", "agree", "agreement", "proven_points", "proven_agree",
        "disagreements_in_proven_cells" (first 10)}; machine-dependent diagnostics:
        {"points", "lut_agree_onnxruntime", "ir_vs_onnxruntime_decisions_differ"}).
    """
    from mi_certify.runtime.quantize import quantize

    from .lut import quantizers

    lo = np.array([i.min for i in spec.inputs])
    hi = np.array([i.max for i in spec.inputs])
    rng = np.random.default_rng(seed)
    pts = (lo + (hi - lo) * rng.random((n_points, lo.size))).astype(np.float32).astype(np.float64)
    pts = np.clip(pts, lo, hi)
    qs = quantizers(spec)
    addrs = np.array([quantize(list(map(float, p)), qs)[0] for p in pts])
    ys = model.ir.evaluate(pts)
    net = np.argmin(ys, axis=1) if spec.decode == "argmin" else np.argmax(ys, axis=1)
    ys_ort = model.evaluate_onnxruntime(pts)
    net_ort = np.argmin(ys_ort, axis=1) if spec.decode == "argmin" else np.argmax(ys_ort, axis=1)
    got = lut.tokens[addrs]
    agree = got == net
    proven = lut.status[addrs] == PROVEN
    bad = np.nonzero(~agree & proven)[0][:10]
    figures = {"points": int(n_points), "agree": int(agree.sum()), "agreement": float(agree.mean()),
               "proven_points": int(proven.sum()), "proven_agree": int((agree & proven).sum()),
               "network": "IR float64 (fixed-order arithmetic)",
               "disagreements_in_proven_cells": [{"x": pts[i].tolist(), "address": int(addrs[i]),
                                                  "lut": spec.actions[int(got[i])].name,
                                                  "network": spec.actions[int(net[i])].name} for i in bad]}
    diagnostics = {"points": int(n_points), "lut_agree_onnxruntime": int((got == net_ort).sum()),
                   "ir_vs_onnxruntime_decisions_differ": int((net != net_ort).sum())}
    return figures, diagnostics
