"""Deciding network queries soundly: bounds first, Marabou exact, every answer checked.

For one disjunct (unsafe region ``x in box, C y <= d``):

1. an empty box is empty: PROVED without a solver (Marabou #813 answers SAT there);
2. **branch and bound on the input box** (input splitting, as in ReluVal / Neurify,
   Wang et al., USENIX Security 2018 / NeurIPS 2018): a box is closed when a CROWN lower
   bound proves some row ``(C y - d)_r > 0`` everywhere in it; else candidate points
   (centre, and for each row the corner minimising its linear bound) are evaluated and
   a point inside the region is replayed as a witness; else the box is split along the
   input of largest influence ``|Λ_r,i| · width_i`` of its most promising row;
3. boxes still open when the bound budget is spent go to **Marabou** (child process,
   wall-clock timeout); its ``sat`` assignments are replayed, ``unsat`` closes the box;
4. PROVED on a network with <= 64 ReLUs is confirmed by an exact **Z3** check over the
   rationals; disagreement gives UNKNOWN and an error entry.

A witness is reported only after **replay**: the point (clipped to the box, then
rounded to float32 and kept inside the box) must satisfy every row within
``TOLERANCE`` (1e-4, as VNN-COMP) on onnxruntime (float32) and on the IR (float64).
A timeout, a solver error or a witness that does not replay is UNKNOWN.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from mi_certify.generator.core.ir import ControllerIR
from mi_certify.generator.core.numerics import matmul
from mi_certify.generator.core.results import Verdict

from mi_certify.verification.tools import marabou
from mi_certify.verification.nn.falsify import pgd_search
from mi_certify.verification.nn.bounds import (BoundsTimeout, NodeBounds, combined_row_lower, crown_bounds, forward_bounds,
                     output_matrix_lower)
from mi_certify.verification.nn.lp_relax import TriangleLP, is_lp_ready
from mi_certify.verification.nn.lp_split import close_leaves
from mi_certify.verification.nn.properties import Disjunct, Query
from mi_certify.verification.nn.z3_exact import ExactChecker, confirm_boxes

if TYPE_CHECKING:
    from mi_certify.generator.frontend.model import LoadedModel

log = logging.getLogger("mi_certify.verification")

#: Absolute tolerance of witness replay (VNN-COMP checks counterexamples with 1e-4).
TOLERANCE = 1e-4
#: What a confirmed witness has passed (recorded with it in the hashed verification.json).
REPLAY_CLAIM = ("every row holds within 1e-4 on onnxruntime (float32) and within 5e-5 on the IR "
                "(float64, fixed-order arithmetic)")
#: Open boxes are handed to Marabou only when there are at most this many; otherwise
#: branch and bound keeps the whole time budget.
MARABOU_MAX_BOXES = 64
#: Boxes per vectorised branch-and-bound pass (see :func:`batch_size`).
BATCH_BOXES = 256
BATCH_ELEMENTS = 8_000_000
#: Candidate witnesses replayed per disjunct at most (each costs an onnxruntime run).
MAX_REPLAYS = 50
#: Branch-and-bound passes between gradient searches, and the open boxes they start from.
PGD_EVERY = 8
PGD_BOX_STARTS = 16
#: Disjuncts of at most this many rows also get the average of every pair of rows as a row.
PAIR_ROWS_MAX = 6
#: Share of the branch-and-bound time the smart split has before the influence split starts again.
FIRST_SHARE = 0.3
#: Share of a query's timeout the gradient search before branch and bound may take.
PGD_SHARE = 0.1
#: Seconds HiGHS may take for one box's LP (see :mod:`.lp_relax`).
LP_TIME_LIMIT = 1.0
#: Whether a box whose parent's LP multipliers are inherited gets an LP of its own too.
LP_EVERY_LEVEL = True
#: Input halvings (the sum over the inputs of log2(region width / box width)) after which
#: an open box goes to the ReLU-split LP (:mod:`.lp_split`) instead of being split again.
LEAF_DEPTH = 14
#: Processes for the Z3 confirmation (both cores of the reference machine).
Z3_WORKERS = 2
#: Networks up to this many ReLUs get an exact Z3 confirmation of every PROVED.
Z3_CONFIRM_MAX_RELUS = 64


@dataclass
class QueryResult:
    """Verdict with its evidence.

    witness: {"x": inputs (float32 values), "y_onnxruntime": outputs, "y_ir": outputs,
    "disjunct": index} for VIOLATED. stats: boxes, marabou_boxes, z3 calls.
    """

    id: str
    verdict: Verdict
    time_s: float
    method: str
    witness: dict | None = None
    detail: str = ""
    errors: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"id": self.id, "verdict": self.verdict.value, "time_s": round(self.time_s, 3), "method": self.method,
                "witness": self.witness, "detail": self.detail, "errors": self.errors, "stats": self.stats}


@dataclass(frozen=True)
class VerifyOptions:
    """timeout: wall-clock seconds per query (search). confirm_timeout: seconds for the
    exact Z3 confirmation of a PROVED (<= 64 ReLUs). bound_share: share of the timeout
    for branch and bound before Marabou takes the open boxes. max_boxes: branch-and-bound
    box budget. lp_leaves: open boxes LEAF_DEPTH halvings deep are decided by ReLU-split
    branch and bound with the triangle LP (:mod:`.lp_split`) in ``workers`` processes."""

    timeout: float = 60.0
    confirm_timeout: float = 300.0
    bound_share: float = 0.6
    max_boxes: int = 2_000_000
    use_marabou: bool = True
    z3_confirm: bool = True
    lp_hints: bool = False
    lp_leaves: bool = True
    workers: int = 2


def _float32_inside(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Round to float32 and step back inside [lo, hi] where rounding left it."""
    x32 = np.clip(x, lo, hi).astype(np.float32)
    for _ in range(4):
        below, above = x32.astype(np.float64) < lo, x32.astype(np.float64) > hi
        if not (below.any() or above.any()):
            break
        x32 = np.where(below, np.nextafter(x32, np.float32(np.inf)), x32)
        x32 = np.where(above, np.nextafter(x32, np.float32(-np.inf)), x32)
    return x32


def replay_many(model: LoadedModel, requests: list[tuple[Disjunct, np.ndarray]]) -> list[tuple[bool, dict]]:
    """Replay candidate witnesses on the IR and on onnxruntime, one batch for all (``model``:
    :class:`~mi_certify.generator.frontend.model.LoadedModel`, its ``ir`` and its onnxruntime session).

    Each point is clipped into its disjunct's box (``x``, float64, reported);
    onnxruntime is fed its float32 rounding (``x_float32``, kept inside the box where
    float32 allows, else within one float32 step of it). Confirmed iff every row of
    ``C y <= d`` holds within TOLERANCE on the IR at ``x`` and on onnxruntime at
    ``x_float32``. The IR must hold within TOLERANCE / 2: that decision is the same bits on
    every machine, and onnxruntime (whose float32 kernels differ by CPU) could only
    decide otherwise by differing from the IR by more than TOLERANCE / 2, far beyond the
    import cross-check's 1e-5.

    Returns:
        [(confirmed, witness dict)] in request order.
    """
    if not requests:
        return []
    xs, x32s, outs, nears = [], [], [], []
    for dj, x in requests:
        x = np.asarray(x, dtype=np.float64)
        outs.append(float(np.max(np.maximum(dj.lo - x, 0) + np.maximum(x - dj.hi, 0))))
        xc = np.clip(x, dj.lo, dj.hi)
        x32 = _float32_inside(xc, dj.lo, dj.hi)
        step = np.spacing(np.abs(xc).astype(np.float32)).astype(np.float64)
        nears.append(bool(np.all(np.abs(x32.astype(np.float64) - xc) <= step)))
        xs.append(xc)
        x32s.append(x32)
    y_ort_all = model.evaluate_onnxruntime(np.array(x32s).astype(np.float64))
    y_ir_all = model.ir.evaluate(np.array(xs))
    results = []
    for (dj, _), xc, x32, near, outside, y_ort, y_ir in zip(requests, xs, x32s, nears, outs, y_ort_all, y_ir_all):
        slack_ort = matmul(dj.C, y_ort) - dj.d
        slack_ir = matmul(dj.C, y_ir) - dj.d
        ok = near and bool(np.all(slack_ir <= TOLERANCE / 2)) and bool(np.all(slack_ort <= TOLERANCE))
        results.append((ok, {"x": [float(v) for v in xc], "x_float32": [float(v) for v in x32],
                             "y_onnxruntime": [float(v) for v in y_ort], "y_ir": [float(v) for v in y_ir],
                             "max_row_slack_onnxruntime": float(np.max(slack_ort)) if slack_ort.size else 0.0,
                             "solver_point_outside_box_by": outside}))
    return results


def replay(model: LoadedModel, dj: Disjunct, x: np.ndarray) -> tuple[bool, dict]:
    """Replay one candidate witness (see :func:`replay_many`). Returns (confirmed, witness dict)."""
    return replay_many(model, [(dj, x)])[0]


def _branch_and_bound(model: LoadedModel, dj: Disjunct, root: tuple, deadline: float, bab_deadline: float,
                      opts: VerifyOptions, stats: dict, closed: list, strategy: str, tried: list[int],
                      lp: TriangleLP | None, leaves: list | None = None, leaf_depth: float = math.inf):
    """Input-splitting branch and bound of one disjunct from its bounded root box.

    ``strategy``: "influence" splits the input of largest influence |Λ_r,i| · width_i on the
    box's best row (Wang et al., ReluVal, USENIX Security 2018, "smear" style); "smart"
    bounds all 2n halves cheaply and takes, of that pick and the influence pick, the split
    whose halves' tight bounds are nearer to closing. Boxes proved empty go to ``closed``.
    ``leaves``: where an open box that is ``leaf_depth`` halvings deep (the sum over the
    inputs of log2(region width / box width)) goes instead of being split again.
    Returns (decided (verdict, witness, method, detail) or None, open boxes)."""
    ir = model.ir
    root_w = dj.hi - dj.lo
    n = ir.n_inputs
    heap = list(root) if isinstance(root, list) else [root]  # one root box, or a frontier
    heapq.heapify(heap)
    counter = 1 + max(t[1] for t in heap)
    open_boxes: list[tuple[np.ndarray, np.ndarray]] = []
    per_pass = max(1, batch_size(ir) * 8 // (2 * n))
    rounds = 0
    while heap:
        now = time.monotonic()
        if stats["boxes"] >= opts.max_boxes or now > deadline or (now > bab_deadline and len(heap) <= MARABOU_MAX_BOXES):
            open_boxes += [t[2:4] for t in heap]  # (+=: keep the point boxes left open)
            break
        take = [heapq.heappop(heap) for _ in range(min(per_pass, len(heap)))]
        best = np.array([t[0] for t in take])
        los = np.array([t[2] for t in take])
        his = np.array([t[3] for t in take])
        lin = np.array([t[4] for t in take])
        rows = np.array([t[5] for t in take])
        # candidates: each open box's centre and, per row, the corner minimising its linear bound
        cands = np.concatenate([(los + his) / 2,
                                np.where(lin >= 0, los[:, None, :], his[:, None, :]).reshape(-1, n)])
        wit = _replay_hits(model, dj, cands, tried)
        if wit is not None:
            return (Verdict.VIOLATED, wit, "bounds+search", f"{stats['boxes']} boxes"), open_boxes
        rounds += 1
        if rounds % PGD_EVERY == 0:  # gradient search from the most promising open boxes
            order = np.argsort(best, kind="stable")[:PGD_BOX_STARTS]
            pts = pgd_search(ir, dj.lo, dj.hi, dj.C, dj.d, starts=(los[order] + his[order]) / 2, seed=rounds,
                             random_starts=0, deadline=deadline)
            wit = _replay_hits(model, dj, pts, tried)
            if wit is not None:
                return (Verdict.VIOLATED, wit, "bounds+pgd", f"{stats['boxes']} boxes"), open_boxes
        K = los.shape[0]
        mid = (los + his) / 2
        c_lo = np.repeat(los[:, None, None, :], 2, axis=2).repeat(n, axis=1)  # (K, n, 2, n)
        c_hi = np.repeat(his[:, None, None, :], 2, axis=2).repeat(n, axis=1)
        dims = np.arange(n)
        c_hi[:, dims, 0, dims] = mid
        c_lo[:, dims, 1, dims] = mid
        if strategy == "smart":
            # every box's 2n children (halves along each input) bounded in one cheap pass; the
            # input whose worse half is nearer to being closed is the first candidate
            try:
                c_low, _, _ = _bound_region(ir, dj, c_lo.reshape(-1, n), c_hi.reshape(-1, n), deadline, tight=False)
            except BoundsTimeout:
                open_boxes += list(zip(los, his)) + [t[2:4] for t in heap]
                break
            stats["boxes"] += 2 * n * K
            c_best = np.max(c_low - dj.d, axis=1).reshape(K, n, 2)
            score = np.min(c_best, axis=2) + 1e-3 * np.max(c_best, axis=2)
            score = np.where(his - los > 0, score, -np.inf)
            pick = np.argmax(score, axis=1)
        # a second candidate: the input of largest influence |Λ_r,i| · width_i on the box's best
        # row (the cheap bounds mislead where they are loose); both candidates' halves get the
        # tight bounds and the split whose worse half is nearer to closing is taken
        infl = np.abs(lin[np.arange(K), rows]) * (his - los)
        infl = np.where(np.any(infl > 0, axis=1)[:, None], infl, his - los)
        infl = np.where(his - los > 0, infl, -np.inf)
        other = np.argmax(infl, axis=1)
        if strategy == "influence":  # the influence split alone: no cheap pass
            pick = other
        splittable = np.any(his - los > 0, axis=1)
        for b in np.nonzero(~splittable)[0]:
            open_boxes.append((los[b], his[b]))
        ok = np.nonzero(splittable)[0]
        two = ok[other[ok] != pick[ok]]
        ch_lo = np.concatenate([c_lo[ok, pick[ok]], c_lo[two, other[two]]]).reshape(-1, n)
        ch_hi = np.concatenate([c_hi[ok, pick[ok]], c_hi[two, other[two]]]).reshape(-1, n)
        parent = np.concatenate([np.repeat(ok, 2), np.repeat(two, 2)])
        try:
            ch_low, ch_lin, ch_nb = _bound_region(ir, dj, ch_lo, ch_hi, deadline)
        except BoundsTimeout:
            open_boxes += list(zip(los, his)) + [t[2:4] for t in heap]
            break
        stats["boxes"] += ch_lo.shape[0]
        pair = np.max(ch_low - dj.d, axis=1).reshape(-1, 2)
        keep = np.ones(pair.shape[0], dtype=bool)
        if two.size:  # pairs [0, len(ok)) are the cheap pick's, then the influence pick's
            a = np.searchsorted(ok, two)
            b2 = len(ok) + np.arange(two.size)
            worse_a = np.minimum(np.max(pair[a], axis=1), 0.0) + np.minimum(np.min(pair[a], axis=1), 0.0)
            worse_b = np.minimum(np.max(pair[b2], axis=1), 0.0) + np.minimum(np.min(pair[b2], axis=1), 0.0)
            keep[np.where(worse_b > worse_a, a, b2)] = False
        sel = np.repeat(keep, 2)
        ch_lo, ch_hi, ch_low, ch_lin, parent = ch_lo[sel], ch_hi[sel], ch_low[sel], ch_lin[sel], parent[sel]
        ch_nb = NodeBounds([v[sel] for v in ch_nb.lower], [v[sel] for v in ch_nb.upper])
        ch_best = np.max(ch_low - dj.d, axis=1)
        ch_row = np.argmax(ch_low - dj.d, axis=1)
        # the parents' LP multipliers (α, λ) on the children, then the LP's own where still open
        hints = [take[p][6] for p in parent]
        try:
            ch_best = np.maximum(ch_best, _hinted_lower(ir, dj, ch_lo, ch_hi, ch_nb, hints, deadline))
            want = np.nonzero(~(ch_best > 0) & np.array([h is None or LP_EVERY_LEVEL for h in hints]))[0]
            fresh = _lp_hints(lp, ch_lo, ch_hi, ch_nb, want, deadline, stats)
            ch_best = np.maximum(ch_best, _hinted_lower(ir, dj, ch_lo, ch_hi, ch_nb, fresh, deadline))
        except BoundsTimeout:
            open_boxes += list(zip(los, his)) + [t[2:4] for t in heap]
            break
        deep = np.zeros(ch_lo.shape[0], dtype=bool)
        if leaves is not None:
            w = ch_hi - ch_lo
            with np.errstate(divide="ignore"):
                halvings = np.sum(np.where(root_w > 0, np.log2(np.where(w > 0, root_w / np.where(w > 0, w, 1.0),
                                                                         math.inf)), 0.0), axis=1)
            deep = halvings >= leaf_depth
        for c in range(ch_lo.shape[0]):
            if ch_best[c] > 0:
                closed.append((ch_lo[c], ch_hi[c]))
            elif deep[c]:
                leaves.append((ch_lo[c], ch_hi[c]))
            else:
                heapq.heappush(heap, (float(ch_best[c]), counter, ch_lo[c], ch_hi[c], ch_lin[c], int(ch_row[c]),
                                      fresh[c] if fresh[c] is not None else hints[c]))
                counter += 1
    return None, open_boxes


def _decide_disjunct(model: LoadedModel, dj: Disjunct, deadline: float, opts: VerifyOptions,
                     stats: dict, errors: list[str], closed: list) -> tuple[Verdict, dict | None, str, str]:
    """Returns (verdict, witness, method, detail) for one disjunct.

    ``closed`` receives the boxes proved empty (a partition of the region when PROVED).
    """
    ir = model.ir
    empty = dj.empty_input()
    if empty:
        return Verdict.PROVED, None, "input check", empty
    if dj.C.shape[0] == 0:  # no output constraint: any point of the box is in the region
        ok, wit = replay(model, dj, (dj.lo + dj.hi) / 2)
        return (Verdict.VIOLATED, wit, "evaluation", "no output constraint") if ok else \
            (Verdict.UNKNOWN, None, "evaluation", "centre point does not replay")
    if time.monotonic() >= deadline:
        return Verdict.UNKNOWN, None, "bounds", "timeout before this disjunct was searched"
    start = time.monotonic()
    bab_deadline = start + (deadline - start) * (opts.bound_share if opts.use_marabou else 1.0)
    dj = _with_implied_rows(dj)
    lp = TriangleLP(ir, dj.C, dj.d) if opts.lp_hints and is_lp_ready(ir) else None
    try:
        low, lin, nb = _bound_region(ir, dj, dj.lo[None, :], dj.hi[None, :], deadline)
        best = float(np.max(low[0] - dj.d))
        hint = _lp_hints(lp, dj.lo[None, :], dj.hi[None, :], nb, np.array([0]) if best <= 0 else np.array([], int),
                         deadline, stats)
        best = max(best, float(_hinted_lower(ir, dj, dj.lo[None, :], dj.hi[None, :], nb, hint, deadline)[0]))
    except BoundsTimeout:
        return Verdict.UNKNOWN, None, "bounds", "timeout in the first bound computation"
    stats["boxes"] += 1
    if best > 0:
        closed.append((dj.lo.copy(), dj.hi.copy()))
        return Verdict.PROVED, None, "bounds", "1 box closed by CROWN bounds"
    # the frontier: open boxes with their bounds, most promising for a counterexample first;
    # a portfolio: the smart split first for a share of the time, then the influence split
    root = (best, 0, dj.lo.copy(), dj.hi.copy(), lin[0], int(np.argmax(low[0] - dj.d)), hint[0])
    tried = [0]
    first = time.monotonic() + FIRST_SHARE * (bab_deadline - time.monotonic())
    leaves = [] if opts.lp_leaves and is_lp_ready(ir) else None
    depth = LEAF_DEPTH if leaves is not None else math.inf
    decided, open_boxes = _branch_and_bound(model, dj, root, min(first, deadline), first, opts, stats, closed,
                                            "smart", tried, lp, leaves, depth)
    if decided is not None:
        return decided
    if open_boxes:
        # the influence split goes on from the smart phase's frontier (its closed boxes and
        # leaves stand: with the frontier they still cover the region)
        try:
            frontier = _frontier(ir, dj, open_boxes, deadline, closed)
        except BoundsTimeout:
            frontier = None
        if frontier:
            decided, open_boxes = _branch_and_bound(model, dj, frontier, deadline, bab_deadline, opts, stats,
                                                    closed, "influence", tried, lp, leaves, depth)
            if decided is not None:
                return decided
        elif frontier is not None:
            open_boxes = []
    if leaves:
        if open_boxes:  # the leaves are open too
            open_boxes += leaves
        else:
            decided, open_boxes = _decide_leaves(model, dj, leaves, deadline, opts, stats, closed, errors)
            if decided is not None:
                return decided
            if not open_boxes:
                return Verdict.PROVED, None, "bounds+lp", f"{stats['boxes']} boxes closed by CROWN bounds, " \
                    f"{len(leaves)} by ReLU-split LP ({stats['lp_calls']} LPs)"
    if not open_boxes:
        return Verdict.PROVED, None, "bounds", f"{stats['boxes']} boxes closed by CROWN bounds"
    where = f"{len(open_boxes)} boxes open" if not leaves else \
        f"{len(open_boxes)} boxes open ({len(leaves)} went to the ReLU-split LP, {stats.get('lp_calls', 0)} LPs)"
    if not opts.use_marabou:
        return Verdict.UNKNOWN, None, "bounds", f"{where} (Marabou disabled)"
    remaining = deadline - time.monotonic()
    if remaining <= 0.5 or len(open_boxes) > MARABOU_MAX_BOXES:
        return Verdict.UNKNOWN, None, "bounds", f"timeout with {where}"
    stats["marabou_boxes"] += len(open_boxes)
    nbs = _open_box_bounds(ir, open_boxes, time.monotonic() + 0.2 * remaining)
    remaining = deadline - time.monotonic()
    if remaining <= 0.5:
        return Verdict.UNKNOWN, None, "bounds", f"timeout with {len(open_boxes)} boxes open"
    answers = marabou.solve_boxes(ir, open_boxes, dj.C, dj.d, remaining, node_bounds=nbs,
                                  per_box_timeout=max(1.0, remaining / len(open_boxes)))
    unknown = []
    for (lo, hi), ans in zip(open_boxes, answers):
        if ans.status == "sat":
            # the open box lies in the region's box: clip into it, then one replay on the region
            ok, wit = replay(model, dj, np.clip(ans.x, lo, hi))
            if ok:
                return Verdict.VIOLATED, wit, "bounds+marabou", f"{stats['boxes']} boxes, Marabou witness"
            errors.append(f"Marabou witness {np.round(ans.x, 6).tolist()} does not replay "
                          f"(max slack {wit['max_row_slack_onnxruntime']:.3g})")
            unknown.append("witness does not replay")
        elif ans.status == "unknown":
            unknown.append(ans.reason)
        else:
            closed.append((lo, hi))
    if unknown:
        return Verdict.UNKNOWN, None, "bounds+marabou", f"{len(unknown)} of {len(open_boxes)} boxes undecided: " \
            f"{unknown[0]}"
    return Verdict.PROVED, None, "bounds+marabou", f"{stats['boxes']} boxes; {len(open_boxes)} closed by Marabou"


def _frontier(ir: ControllerIR, dj: Disjunct, boxes: list, deadline: float, closed: list) -> list:
    """Heap entries for open boxes (bounded again, in batches); boxes that close go to
    ``closed``. Raises BoundsTimeout."""
    out = []
    step = batch_size(ir)
    for k in range(0, len(boxes), step):
        los = np.array([b[0] for b in boxes[k:k + step]])
        his = np.array([b[1] for b in boxes[k:k + step]])
        low, lin, _ = _bound_region(ir, dj, los, his, deadline)
        best = np.max(low - dj.d, axis=1)
        row = np.argmax(low - dj.d, axis=1)
        for j in range(los.shape[0]):
            if best[j] > 0:
                closed.append((los[j], his[j]))
            else:
                out.append((float(best[j]), len(out), los[j], his[j], lin[j], int(row[j]), None))
    return out


def _decide_leaves(model: LoadedModel, dj: Disjunct, leaves: list, deadline: float, opts: VerifyOptions,
                   stats: dict, closed: list, errors: list[str]):
    """ReLU-split LP on the leaves (:func:`~.lp_split.close_leaves`); candidates are replayed.
    Returns (decided (verdict, witness, method, detail) or None, leaves left open)."""
    answers = close_leaves(model.ir, dj.C, dj.d, leaves, deadline, workers=opts.workers)
    stats["lp_leaves"] = stats.get("lp_leaves", 0) + len(leaves)
    left = []
    for (lo, hi), (kind, what) in zip(leaves, answers):
        if kind == "closed":
            closed.append((lo, hi))
            stats["lp_calls"] = stats.get("lp_calls", 0) + int(what)
            continue
        if kind == "candidate":
            ok, wit = replay(model, dj, np.clip(what, lo, hi))
            if ok:
                return (Verdict.VIOLATED, wit, "bounds+lp", f"{stats['boxes']} boxes, LP witness"), left
            errors.append(f"LP point {np.round(what, 6).tolist()} does not replay "
                          f"(max slack {wit['max_row_slack_onnxruntime']:.3g})")
        left.append((lo, hi))
    return None, left


def _with_implied_rows(dj: Disjunct) -> Disjunct:
    """The disjunct with implied rows added: the average of every pair of rows and of all rows
    (pairs only up to PAIR_ROWS_MAX rows). A point of the region satisfies every convex
    combination of its rows, so the region is the same; but a box where different rows are
    positive in different parts can be closed by one combined row (a fixed-multiplier
    Lagrangian relaxation of the conjunction). A combination is added only where its float64
    row and right-hand side are the exact rational combination (checked with fractions):
    a rounded row would be a slightly different constraint."""
    m = dj.C.shape[0]
    if m < 2:
        return dj
    combos = [np.full(m, 1.0 / m)]
    if m <= PAIR_ROWS_MAX:
        for a in range(m):
            for b in range(a + 1, m):
                w = np.zeros(m)
                w[a] = w[b] = 0.5
                combos.append(w)
    W = np.array(combos)
    rows, rhs = matmul(W, dj.C), matmul(W, dj.d)
    exact = [k for k in range(W.shape[0]) if _exact_combination(W[k], dj.C, dj.d, rows[k], rhs[k])]
    if not exact:
        return dj
    return Disjunct(dj.lo, dj.hi, np.vstack([dj.C, rows[exact]]), np.concatenate([dj.d, rhs[exact]]), dj.label)


def _exact_combination(w: np.ndarray, C: np.ndarray, d: np.ndarray, row: np.ndarray, rhs: float) -> bool:
    """True when ``row == Σ_r w_r C_r`` and ``rhs == Σ_r w_r d_r`` hold exactly (rationals)."""
    from fractions import Fraction
    wf = [Fraction(float(v)) for v in w]
    if Fraction(float(rhs)) != sum(a * Fraction(float(v)) for a, v in zip(wf, d)):
        return False
    return all(Fraction(float(row[j])) == sum(a * Fraction(float(v)) for a, v in zip(wf, C[:, j]))
               for j in range(C.shape[1]))


def _bound_region(ir: ControllerIR, dj: Disjunct, lo: np.ndarray, hi: np.ndarray, deadline: float,
                  tight: bool = True) -> tuple[np.ndarray, np.ndarray, NodeBounds]:
    """Lower bounds of the disjunct's rows ``C y`` over each box (B, m), their input
    coefficients (B, m, n_inputs) and the node bounds used (NodeBounds of (B, size_i)
    arrays), by CROWN's backward pass for the rows over node bounds
    from :func:`~.bounds.forward_bounds` (cheap); with ``tight``, the boxes those leave
    open get CROWN's backward bounds for every hidden node too (:func:`~.bounds.crown_bounds`,
    far tighter in deep networks, ~15x the cost). Raises BoundsTimeout."""
    nb = forward_bounds(ir, lo, hi, deadline=deadline)
    low, lin = output_matrix_lower(ir, dj.C, lo, hi, nb, deadline=deadline)
    if not tight:
        return low, lin, nb
    again = np.nonzero(~(np.max(low - dj.d, axis=1) > 0))[0]
    if again.size:
        cb = crown_bounds(ir, lo[again], hi[again], deadline=deadline)
        cb = NodeBounds([np.maximum(a, f[again]) for a, f in zip(cb.lower, nb.lower)],
                        [np.minimum(a, f[again]) for a, f in zip(cb.upper, nb.upper)])
        low2, lin2 = output_matrix_lower(ir, dj.C, lo[again], hi[again], cb, deadline=deadline)
        better = np.max(low2 - dj.d, axis=1) >= np.max(low[again] - dj.d, axis=1)
        low[again[better]] = low2[better]
        lin[again[better]] = lin2[better]
        for full, part in zip(nb.lower + nb.upper, cb.lower + cb.upper):
            full[again] = part
    return low, lin, nb


def _hinted_lower(ir: ControllerIR, dj: Disjunct, lo: np.ndarray, hi: np.ndarray, nb: NodeBounds,
                  hints: list, deadline: float) -> np.ndarray:
    """Sound lower bound of ``λᵀ(C y − d)`` per box for the boxes' hints ((λ (m,), {ReLU id:
    slopes}) from :meth:`~.lp_relax.TriangleLP.hint`, a parent's or the box's own), over the
    boxes' node bounds ``nb``; -inf where a box has no hint (B,)."""
    out = np.full(lo.shape[0], -np.inf)
    has = np.array([h is not None for h in hints], dtype=bool)
    if not has.any():
        return out
    k = np.nonzero(has)[0]
    lam = np.array([hints[i][0] for i in k])
    slopes = {nid: np.array([hints[i][1][nid] for i in k]) for nid in hints[k[0]][1]}
    sub = NodeBounds([v[k] for v in nb.lower], [v[k] for v in nb.upper])
    out[k] = combined_row_lower(ir, dj.C, dj.d, lam, lo[k], hi[k], sub, slopes, deadline=deadline)
    return out


def _lp_hints(lp: TriangleLP | None, lo: np.ndarray, hi: np.ndarray, nb: NodeBounds, which: np.ndarray,
              deadline: float, stats: dict) -> list:
    """LP hints for the boxes ``which`` (indices into lo/hi/nb), None for the others and when
    the LP gives none or the deadline is near."""
    hints: list = [None] * lo.shape[0]
    if lp is None:
        return hints
    for b in which:
        left = deadline - time.monotonic()
        if left <= 0.05:
            break
        h = lp.hint(lo[b], hi[b], NodeBounds([v[b] for v in nb.lower], [v[b] for v in nb.upper]),
                    time_limit=min(LP_TIME_LIMIT, left))
        stats["lp_calls"] = stats.get("lp_calls", 0) + 1
        if h is not None:
            hints[b] = (h[1], h[2])
    return hints


def batch_size(ir: ControllerIR) -> int:
    """Boxes bounded in one vectorised pass: BATCH_BOXES, fewer for wide networks so the
    largest backward-pass array (boxes × 2·width × width float64) stays near BATCH_ELEMENTS."""
    width = max(node.size for node in ir.nodes)
    return int(max(4, min(BATCH_BOXES, BATCH_ELEMENTS // max(1, 2 * width * width))))


def _replay_hits(model: LoadedModel, dj: Disjunct, cands: np.ndarray, tried: list[int]) -> dict | None:
    """The first of ``cands`` (K, n_inputs) inside the region on the IR that replays, or None;
    at most MAX_REPLAYS replays per disjunct (``tried[0]`` counts them)."""
    if not len(cands) or tried[0] >= MAX_REPLAYS:
        return None
    ys = model.ir.evaluate(cands)
    hits = np.nonzero(np.all(matmul(ys, dj.C.T) - dj.d <= 0, axis=1))[0][:MAX_REPLAYS - tried[0]]
    if not hits.size:
        return None
    tried[0] += int(hits.size)
    for ok, wit in replay_many(model, [(dj, cands[k]) for k in hits]):
        if ok:
            return wit
    return None


def _open_box_bounds(ir: ControllerIR, boxes: list, deadline: float) -> list:
    """CROWN node bounds for Marabou's variables, all boxes in one batched pass; ``None`` per
    box when the pass would end after ``deadline`` (Marabou then starts from the box alone)."""
    try:
        nb = crown_bounds(ir, np.array([lo for lo, _ in boxes]), np.array([hi for _, hi in boxes]), deadline=deadline)
    except BoundsTimeout:
        return [None] * len(boxes)
    return [NodeBounds([v[b] for v in nb.lower], [v[b] for v in nb.upper]) for b in range(len(boxes))]


def _sample_witness(model: LoadedModel, query: Query, deadline: float) -> tuple[int, dict] | None:
    """A deterministic look for easy witnesses before any search: 256 seeded random points per
    distinct input box (evaluated once for every disjunct on that box), at most 5 replays per
    disjunct. Returns (disjunct index, replayed witness) or None."""
    ir = model.ir
    by_box: dict[bytes, list[int]] = {}
    for k, dj in enumerate(query.disjuncts):
        if dj.C.shape[0] and not dj.empty_input():
            by_box.setdefault(dj.lo.tobytes() + dj.hi.tobytes(), []).append(k)
    for ks in by_box.values():
        if time.monotonic() >= deadline:
            return None
        lo, hi = query.disjuncts[ks[0]].lo, query.disjuncts[ks[0]].hi
        pts = lo + (hi - lo) * np.random.default_rng(0).random((256, lo.size))
        ys = ir.evaluate(pts)
        for k in ks:
            dj = query.disjuncts[k]
            inside = np.nonzero(np.all(matmul(ys, dj.C.T) - dj.d <= 0, axis=1))[0]
            if inside.size:
                for (ok, wit) in replay_many(model, [(dj, pts[i]) for i in inside[:5]]):
                    if ok:
                        return k, wit
    return None


def _pgd_witness(model: LoadedModel, query: Query, deadline: float) -> tuple[int, dict] | None:
    """Projected gradient descent (:func:`~.falsify.pgd_search`) in every disjunct with an
    output constraint, before branch and bound: the centre and RANDOM_STARTS seeded
    points per disjunct. Returns (disjunct index, replayed witness) or None."""
    for k, dj in enumerate(query.disjuncts):
        if not dj.C.shape[0] or dj.empty_input() or time.monotonic() >= deadline:
            continue
        pts = pgd_search(model.ir, dj.lo, dj.hi, dj.C, dj.d, seed=k, deadline=deadline)
        wit = _replay_hits(model, dj, pts[:5], [0])
        if wit is not None:
            return k, wit
    return None


def _interrupted(exc: BaseException) -> bool:
    """True for Ctrl-C that a compiled kernel turned into another exception (numba reports a
    KeyboardInterrupt raised inside it as SystemError with the interrupt as its context)."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def decide(model: LoadedModel, query: Query, opts: VerifyOptions | None = None) -> QueryResult:
    """Decide a query (disjunction of unsafe regions) within ``opts.timeout`` seconds on ``model``
    (:class:`~mi_certify.generator.frontend.model.LoadedModel`: the IR is queried, onnxruntime replays
    every counterexample)."""
    opts = opts or VerifyOptions()
    ir = model.ir
    t0 = time.monotonic()
    deadline = t0 + opts.timeout
    stats = {"boxes": 0, "marabou_boxes": 0, "z3_calls": 0}
    errors: list[str] = []
    methods, details = [], []
    verdict = Verdict.PROVED
    partitions: list[list] = []
    falsifiers = (("sampling", "random point in the region", lambda: _sample_witness(model, query, deadline)),
                  ("pgd", "gradient search (PGD) point in the region",
                   lambda: _pgd_witness(model, query, min(deadline, time.monotonic() + PGD_SHARE * opts.timeout))))
    for name, what, look in falsifiers:
        try:
            found = look()
        except Exception as exc:  # noqa: BLE001 - a failed look is no answer; the search below decides
            if _interrupted(exc):
                raise KeyboardInterrupt from exc
            log.exception("query %s: %s failed", query.id, name)
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            found = None
        if found is not None:
            k, wit = found
            wit["disjunct"] = k
            dj = query.disjuncts[k]
            return QueryResult(query.id, Verdict.VIOLATED, time.monotonic() - t0, name, wit,
                               f"[{dj.label or k}] {what}", errors, stats)
    for k, dj in enumerate(query.disjuncts):
        partitions.append([])
        try:
            v, wit, method, detail = _decide_disjunct(model, dj, deadline, opts, stats, errors,
                                                      partitions[-1])
        except Exception as exc:  # noqa: BLE001 - any internal failure is UNKNOWN, never PROVED
            if _interrupted(exc):
                raise KeyboardInterrupt from exc
            log.exception("query %s failed", query.id)
            v, wit, method, detail = Verdict.UNKNOWN, None, "error", f"{type(exc).__name__}: {exc}"
            errors.append(detail)
        methods.append(method)
        details.append(f"[{dj.label or k}] {detail}")
        if v == Verdict.VIOLATED:
            wit["disjunct"] = k
            return QueryResult(query.id, v, time.monotonic() - t0, method, wit, "; ".join(details), errors, stats)
        if v == Verdict.UNKNOWN:
            verdict = Verdict.UNKNOWN
    method = "+".join(sorted({part for m in methods for part in m.split("+")})) or "none"
    if verdict == Verdict.PROVED and opts.z3_confirm and ir.n_relus <= Z3_CONFIRM_MAX_RELUS:
        msg = _confirm_partitions(ir, query, partitions, time.monotonic() + opts.confirm_timeout, stats)
        if msg:
            errors.append(msg)
            log.error("%s: %s", query.id, msg)
            verdict = Verdict.UNKNOWN
        else:
            method += "; confirmed by z3"
    return QueryResult(query.id, verdict, time.monotonic() - t0, method, None, "; ".join(details), errors, stats)


def _confirm_partitions(ir: ControllerIR, query: Query, partitions: list[list], deadline: float,
                        stats: dict) -> str | None:
    """Exact Z3 check of every box of every disjunct's proof partition; None when all unsat.

    Each partition must cover its region: every box inside it and the volumes (relative
    to the region's widths) summing to 1. Large boxes are bisected (exact-interval rule)
    until there are enough independent tasks for the worker processes.
    """
    tasks = []
    for dj, boxes in zip(query.disjuncts, partitions):
        if dj.empty_input():
            continue
        width = np.where(dj.hi > dj.lo, dj.hi - dj.lo, 1.0)
        vol = 0.0
        for lo, hi in boxes:
            if np.any(lo < dj.lo) or np.any(hi > dj.hi):
                return "partition box outside the region"
            vol += float(np.prod(np.where(dj.hi > dj.lo, (hi - lo) / width, 1.0)))
        if abs(vol - 1.0) > 1e-9:
            return f"partition covers {vol:.12f} of the region, not all of it"
        tasks.extend((dj.C, dj.d, lo, hi) for lo, hi in boxes)
    # boxes exact rational intervals already close need neither Z3 nor worker processes (a
    # quarter of the budget at most here)
    pre_deadline = time.monotonic() + 0.25 * max(0.0, deadline - time.monotonic())
    n_all, kept = len(tasks), []
    for k, (C, d, lo, hi) in enumerate(tasks):
        if time.monotonic() > pre_deadline:
            kept.extend(tasks[k:])
            break
        if not ExactChecker(ir, C, d).interval_unsat(lo, hi):
            kept.append((C, d, lo, hi))
    tasks = kept
    stats["z3_interval_closed"] = stats.get("z3_interval_closed", 0) + n_all - len(tasks)
    if not tasks:
        return None
    while 0 < len(tasks) < 4 * Z3_WORKERS and time.monotonic() < deadline:
        k = int(np.argmax([float(np.prod(np.where(hi > lo, hi - lo, 1.0))) for _, _, lo, hi in tasks]))
        C, d, lo, hi = tasks.pop(k)
        halves = ExactChecker(ir, C, d)._split(lo, hi)
        if halves is None:
            tasks.insert(k, (C, d, lo, hi))
            break
        tasks.extend((C, d, a, b) for a, b in halves)
    left = deadline - time.monotonic()
    if left <= 0:
        return "Z3 confirmation ran out of time"
    stats["z3_calls"] += len(tasks)
    results = confirm_boxes(ir, tasks, left, workers=Z3_WORKERS, first_failure=True)
    # a box Z3 found a point in (sat) names the failure first, then the first unknown one
    order = sorted(range(len(tasks)), key=lambda k: results[k][0] != "sat")
    for (_, _, lo, hi), (res, x) in ((tasks[k], results[k]) for k in order):
        if res == "unknown":
            n_ok = sum(r == "unsat" for r, _ in results)
            return (f"Z3 confirmation unfinished when its time ran out ({n_ok} of {len(tasks)} boxes confirmed; "
                    f"first open: lo={np.round(lo, 6).tolist()} hi={np.round(hi, 6).tolist()})")
        if res != "unsat":
            return (f"Z3 does not confirm PROVED on box lo={np.round(lo, 6).tolist()} hi={np.round(hi, 6).tolist()}: "
                    f"{res}" + (f" at x={np.round(x, 6).tolist()}" if x is not None else ""))
    return None
