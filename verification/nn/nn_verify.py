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

Branching and bounding are :mod:`~mi_certify.verification.nn.input_split`'s (the open boxes,
bounding a batch, choosing the split input, making the children); this module keeps the loop
(:func:`_branch_and_bound`), the attack step (:func:`_attack`: candidate replay, PGD) and the
phases around it. Every tuning knob is a field of
:class:`~mi_certify.verification.nn.settings.SearchSettings` (``VerifyOptions.search``).

A witness is reported only after **replay**: the point (clipped to the box, then
rounded to float32 and kept inside the box) must satisfy every row within
``TOLERANCE`` (1e-4, as VNN-COMP) on onnxruntime (float32) and on the IR (float64).
A timeout, a solver error or a witness that does not replay is UNKNOWN.
"""

from __future__ import annotations

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
from mi_certify.verification.tools.registry import keep_freed_heap
from mi_certify.verification.nn.falsify import pgd_search
from mi_certify.verification.nn.bounds import BoundsTimeout, NodeBounds, crown_bounds
from mi_certify.verification.nn.input_split import (Batch, Box, Frontier, bound_children, bound_region, boxes_per_pass,
                                                    choose_splits, frontier_of, halvings, hinted_lower, lp_hints)
from mi_certify.verification.nn.lp_relax import TriangleLP, is_lp_ready
from mi_certify.verification.nn.lp_split import LeafStream, close_leaves
from mi_certify.verification.nn.properties import Disjunct, Query
from mi_certify.verification.nn.settings import DEFAULT_SEARCH, SearchSettings
from mi_certify.verification.nn.exact_bounds import ExactBounds
from mi_certify.verification.nn.z3_exact import ExactChecker, confirm_boxes

if TYPE_CHECKING:
    from mi_certify.generator.frontend.model import LoadedModel

log = logging.getLogger("mi_certify.verification")

#: Absolute tolerance of witness replay (VNN-COMP checks counterexamples with 1e-4).
TOLERANCE = 1e-4
#: What a confirmed witness has passed (recorded with it in the hashed verification.json).
REPLAY_CLAIM = ("every row holds within 1e-4 on onnxruntime (float32) and within 5e-5 on the IR "
                "(float64, fixed-order arithmetic)")
#: Node values (over all nodes) up to which a leaf keeps its node bounds from input splitting for
#: the ReLU-split LP (16 bytes each per leaf; ACAS Xu: 610); wider networks' leaves are bounded again there.
LEAF_BOUNDS_MAX = 4096


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
    exact confirmation of a PROVED (<= ``search.z3_confirm_max_relus`` ReLUs). bound_share:
    share of the timeout for branch and bound before Marabou takes the open boxes. max_boxes:
    branch-and-bound box budget. lp_hints: the triangle LP proposes CROWN's multipliers
    (:mod:`.lp_relax`). lp_leaves: open boxes ``search.leaf_depth`` halvings deep are decided by
    ReLU-split branch and bound with the triangle LP (:mod:`.lp_split`) in ``workers`` processes.
    search: every tuning knob of the search (:class:`~.settings.SearchSettings`). end: a
    ``time.monotonic()`` by which the whole query (search and confirmation) ends (``verify
    --total-timeout``): the search then takes at most its share of what is left (all of it when no
    confirmation will run) and the confirmation the rest, up to ``end``; None: no such bound.
    whole_query: ``timeout`` bounds the whole query, search and confirmation together (``verify
    --timeout``): the query ends by its start + ``timeout`` (and by ``end``), its search taking the
    share ``timeout / (timeout + confirm_timeout)`` of that when a confirmation will run; False:
    ``timeout`` bounds the search and the confirmation has ``confirm_timeout`` more (``build``)."""

    timeout: float = 60.0
    confirm_timeout: float = 300.0
    bound_share: float = 0.6
    max_boxes: int = 2_000_000
    use_marabou: bool = True
    z3_confirm: bool = True
    lp_hints: bool = False
    lp_leaves: bool = True
    workers: int = 2
    search: SearchSettings = DEFAULT_SEARCH
    end: float | None = None
    whole_query: bool = False


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


@dataclass
class _Search:
    """What every phase of one disjunct's search shares.

    dj: the disjunct with its implied rows. closed: the boxes proved empty so far (a partition
    of the region when PROVED). lp: the triangle LP for hints, or None. leaves: where open boxes
    ``leaf_depth`` halvings deep go (None: no exact leaves, ``leaf_depth`` inf); leaf_bounds: per
    leaf its node bounds from input splitting (:class:`~.bounds.NodeBounds`), or None where they are
    not kept (more than ``LEAF_BOUNDS_MAX`` node values); leaf_budget: per leaf None, or the LPs it may take
    as an LP probe (:func:`_probes`). tried: candidate replays so far
    (``tried[0]``, at most ``opts.search.max_replays``). stream: where the leaves also go as they are
    filed, to be decided while input splitting goes on (:class:`~.lp_split.LeafStream`), or None.
    """

    model: LoadedModel
    dj: Disjunct
    opts: VerifyOptions
    stats: dict
    errors: list[str]
    closed: list
    lp: TriangleLP | None
    leaves: list | None
    leaf_depth: float
    tried: list[int] = field(default_factory=lambda: [0])
    leaf_bounds: list = field(default_factory=list)
    stream: LeafStream | None = None
    leaf_budget: list = field(default_factory=list)


def _attack(sr: _Search, batch: Batch, rounds: int, deadline: float) -> tuple | None:
    """The falsification step of a round: each box's centre and, per row, the corner minimising
    its linear bound are evaluated and replayed; every ``pgd_every`` rounds PGD (Madry et al., ICLR
    2018) runs from the ``pgd_box_starts`` most promising boxes' centres. Returns the decision
    (VIOLATED, witness, method, detail) or None."""
    s, dj, n = sr.opts.search, sr.dj, batch.lo.shape[1]
    cands = np.concatenate([(batch.lo + batch.hi) / 2,
                            np.where(batch.lin >= 0, batch.lo[:, None, :], batch.hi[:, None, :]).reshape(-1, n)])
    wit = _replay_hits(sr.model, dj, cands, sr.tried, s.max_replays)
    if wit is not None:
        return Verdict.VIOLATED, wit, "bounds+search", f"{sr.stats['boxes']} boxes"
    if rounds % s.pgd_every == 0:  # gradient search from the most promising open boxes
        order = np.argsort(batch.bound, kind="stable")[:s.pgd_box_starts]
        pts = pgd_search(sr.model.ir, dj.lo, dj.hi, dj.C, dj.d, starts=(batch.lo[order] + batch.hi[order]) / 2,
                         seed=rounds, random_starts=0, deadline=deadline)
        wit = _replay_hits(sr.model, dj, pts, sr.tried, s.max_replays)
        if wit is not None:
            return Verdict.VIOLATED, wit, "bounds+pgd", f"{sr.stats['boxes']} boxes"
    return None


def _file_children(sr: _Search, kids, front: Frontier, batch: Batch) -> None:
    """Each child to ``closed`` (bound > 0), to the leaves (``leaf_depth`` halvings deep), to the leaves
    as an LP probe (:func:`_probes`) or back on the heap, in child order."""
    n = kids.lo.shape[0]
    deep = np.zeros(n, dtype=bool)
    probe = np.zeros(n, dtype=bool)
    probed = np.array([batch.boxes[p].probed for p in kids.parent], dtype=bool)
    if sr.leaves is not None:
        depth = halvings(kids.lo, kids.hi, sr.dj.lo, sr.dj.hi)
        deep = (depth >= sr.leaf_depth) | _few_unstable(sr, kids, depth)
        probe = ~deep & ~probed & _probes(sr, kids, depth)
    flat = None   # the children's node bounds, one flat row each (Box.nb), on small networks
    if kids.nb is not None and sum(v.shape[1] for v in kids.nb.lower) <= LEAF_BOUNDS_MAX:
        flat = np.concatenate(kids.nb.lower + kids.nb.upper, axis=1)
    for c in range(n):
        if kids.bound[c] > 0:
            sr.closed.append((kids.lo[c], kids.hi[c]))
        elif deep[c] or probe[c]:
            sr.leaves.append((kids.lo[c], kids.hi[c]))
            sr.leaf_bounds.append(_own_bounds(kids.nb, c))
            sr.leaf_budget.append(sr.opts.search.probe_max_lps if probe[c] else None)
            if sr.stream is not None:
                sr.stream.add(sr.leaves[-1], sr.leaf_bounds[-1], sr.leaf_budget[-1])
        else:
            front.push(float(kids.bound[c]), kids.lo[c], kids.hi[c], kids.lin[c], int(kids.row[c]), kids.hint[c],
                       bool(probed[c]), None if flat is None else flat[c].copy())


def _few_unstable(sr: _Search, kids, depth: np.ndarray) -> np.ndarray:
    """Which children are leaves by their unstable ReLUs (C,) bool: at least ``leaf_unstable_depth``
    halvings deep with at most ``leaf_unstable`` ReLUs their node bounds leave unstable. Only on networks
    that get no exact confirmation (more than ``z3_confirm_max_relus`` ReLUs; as :func:`_probes`).

    Why (issue 38, measured 2026-12-08): once a child's bounds are clipped to its parent's, a box of 3_3 /
    property 2 at 14 halvings leaves a median of 23 ReLUs unstable (9-57), and many shallower boxes as few:
    their LPs are small, while splitting them on to 14 halvings costs input splitting rounds that file the
    leaves late (one core idle meanwhile). With 30 from 12 halvings: 23,500 → 17,300 boxes bounded, 2,750 →
    2,520 LPs, 12-13 → 8-9 s (two workers, idle; one run each)."""
    s = sr.opts.search
    if s.leaf_unstable <= 0 or kids.nb is None or sr.model.ir.n_relus <= s.z3_confirm_max_relus:
        return np.zeros(depth.shape[0], dtype=bool)
    return (depth >= s.leaf_unstable_depth) & (kids.nb.unstable(sr.model.ir) <= s.leaf_unstable)


def _own_bounds(nb: NodeBounds | None, c: int) -> NodeBounds | None:
    """Child ``c``'s node bounds ((size_i,) arrays) to keep with it as a leaf, on networks of at most
    ``LEAF_BOUNDS_MAX`` node values; else None. (An open box on the heap keeps them flat, ``Box.nb``.)
    Copies: a view would keep the whole batch's arrays alive for as long as the leaf waits."""
    if nb is None or sum(v.shape[1] for v in nb.lower) > LEAF_BOUNDS_MAX:
        return None
    return NodeBounds([v[c].copy() for v in nb.lower], [v[c].copy() for v in nb.upper])


def _probes(sr: _Search, kids, depth: np.ndarray) -> np.ndarray:
    """Which children become LP probes (C,) bool: leaves with a budget of ``probe_max_lps`` LPs, given
    back to input splitting when it runs out (:func:`~.lp_split.split_leaf` ``give_back``). A child is
    one when it is ``probe_every``, 2·``probe_every`` … at most ``probe_max_depth`` halvings deep and its
    node bounds leave at most ``probe_unstable`` ReLUs unstable (the caller excludes the boxes of a lineage
    given back once). Only on networks that get no exact confirmation (more than
    ``z3_confirm_max_relus`` ReLUs): on the smaller networks the boxes closed are confirmed one by one, and
    the large boxes a probe closes cost Z3 far more than the small ones input splitting closes (measured on
    the reference controller's P2: 0.29 s without probes, 1.35 s and 8 Z3 calls with them).

    Why (issue 38, measured 2026-12-07): on ACAS Xu 4_1 / property 3 input splitting does not make the
    boxes' ReLUs stable (a median of 37 unstable at 5 to 12 halvings, 50 at 14): 13,229 boxes and 760
    leaves (10.8 s) where its 12 boxes open at 4 halvings close with 74 LPs (0.4 s). Where input splitting
    does make them stable (3_3 / property 2: 186 unstable at 4 halvings, 87 at 8, 38 at 12; random
    networks) probes at 8 halvings closed most boxes they tried but cost more than splitting them (random
    80-120-ReLU networks: 2-5x the time), so the default probes at 4 halvings only: at most 2^4 boxes of
    ``probe_max_lps`` LPs per disjunct."""
    s = sr.opts.search
    if s.probe_max_lps <= 0 or kids.nb is None or sr.model.ir.n_relus <= s.z3_confirm_max_relus:
        return np.zeros(depth.shape[0], dtype=bool)
    k = np.rint(depth)
    return (k > 0) & (k % s.probe_every == 0) & (k <= s.probe_max_depth) & \
        (kids.nb.unstable(sr.model.ir) <= s.probe_unstable)


def _marabou_can_take(ir: ControllerIR, n_open: int, left: float, s: SearchSettings) -> bool:
    """Whether ``n_open`` open boxes, handed to Marabou with ``left`` seconds to go, would each get
    ``s.marabou_min_box_time`` and ``s.marabou_box_time_per_relu`` seconds per ReLU of the network
    (after the node bounds' share ``s.marabou_bounds_share``)."""
    need = max(s.marabou_min_box_time, s.marabou_box_time_per_relu * ir.n_relus)
    return (1.0 - s.marabou_bounds_share) * left >= need * n_open


def _branch_and_bound(sr: _Search, root: Box | list[Box], deadline: float, bab_deadline: float, strategy: str):
    """Input-splitting branch and bound of one disjunct from its bounded root box (or a frontier).

    Each round takes the most promising open boxes (:meth:`~.input_split.Frontier.pop_batch`),
    tries them for a counterexample (:func:`_attack`), chooses each box's split
    (:func:`~.input_split.choose_splits`: ``strategy`` "smart" or "influence") and bounds the
    children (:func:`~.input_split.bound_children`); closed children go to ``sr.closed``, deep
    ones to ``sr.leaves``. It stops at ``deadline``, the box budget, or after ``bab_deadline``
    once at most ``marabou_max_boxes`` boxes are open and the next phase can use them: the ReLU-split
    LP when there are leaves, else Marabou only when it would have the time to try each box
    (:func:`_marabou_can_take`; with leaves the hand-over is as before: measured, ACAS Xu 4_2/p2
    with one core busy was left unknown when branch and bound kept the LP leaves' time).
    Returns (decided (verdict, witness, method, detail) or None, open boxes as (lo, hi) pairs)."""
    ir, dj, stats, s = sr.model.ir, sr.dj, sr.stats, sr.opts.search
    front = Frontier(root if isinstance(root, list) else [root])
    open_boxes: list[tuple[np.ndarray, np.ndarray]] = []
    per_pass = boxes_per_pass(ir, s)
    rounds = 0
    while len(front):
        now = time.monotonic()
        if stats["boxes"] >= sr.opts.max_boxes or now > deadline or \
                (now > bab_deadline and len(front) <= s.marabou_max_boxes
                 and (bool(sr.leaves) or _marabou_can_take(ir, len(front), deadline - now, s))):
            open_boxes += front.pairs()  # (+=: keep the point boxes left open)
            break
        batch = front.pop_batch(per_pass)
        rounds += 1
        decided = _attack(sr, batch, rounds, deadline)
        if decided is not None:
            return decided, open_boxes
        try:
            split = choose_splits(ir, dj, batch, strategy, deadline, stats, s)
            open_boxes += [(batch.lo[b], batch.hi[b]) for b in split.unsplittable]
            kids = bound_children(ir, dj, batch, split, sr.lp, deadline, stats, s)
        except BoundsTimeout:
            open_boxes += batch.pairs() + front.pairs()
            break
        _file_children(sr, kids, front, batch)
    return None, open_boxes


def _early_answer(model: LoadedModel, dj: Disjunct, deadline: float) -> tuple | None:
    """The answer for a disjunct that needs no search: an empty input box, no output constraint
    (the centre is replayed), no time left. None otherwise."""
    empty = dj.empty_input()
    if empty:
        return Verdict.PROVED, None, "input check", empty
    if dj.C.shape[0] == 0:  # no output constraint: any point of the box is in the region
        ok, wit = replay(model, dj, (dj.lo + dj.hi) / 2)
        return (Verdict.VIOLATED, wit, "evaluation", "no output constraint") if ok else \
            (Verdict.UNKNOWN, None, "evaluation", "centre point does not replay")
    if time.monotonic() >= deadline:
        return Verdict.UNKNOWN, None, "bounds", "timeout before this disjunct was searched"
    return None


def _bound_root(sr: _Search, deadline: float) -> Box:
    """The region's box bounded (CROWN, and the LP hint when open) as the search's root, ``seq`` 0.
    Raises BoundsTimeout."""
    ir, dj = sr.model.ir, sr.dj
    lo, hi = dj.lo[None, :], dj.hi[None, :]
    low, lin, nb = bound_region(ir, dj, lo, hi, deadline)
    best = float(np.max(low[0] - dj.d))
    hint = lp_hints(sr.lp, lo, hi, nb, np.array([0]) if best <= 0 else np.array([], int), deadline, sr.stats,
                    sr.opts.search)
    best = max(best, float(hinted_lower(ir, dj, lo, hi, nb, hint, deadline)[0]))
    return Box(best, 0, dj.lo.copy(), dj.hi.copy(), lin[0], int(np.argmax(low[0] - dj.d)), hint[0])


def _split_inputs(sr: _Search, root: Box, deadline: float, bab_deadline: float):
    """The portfolio: the smart split for ``first_share`` of the branch-and-bound time, then the
    influence split from the smart phase's open boxes (bounded again; its closed boxes and leaves
    stand: with the frontier they still cover the region).
    Returns (decided or None, open boxes)."""
    first = time.monotonic() + sr.opts.search.first_share * (bab_deadline - time.monotonic())
    decided, open_boxes = _branch_and_bound(sr, root, min(first, deadline), first, "smart")
    if decided is not None or not open_boxes:
        return decided, open_boxes
    try:
        frontier = frontier_of(sr.model.ir, sr.dj, open_boxes, deadline, sr.closed, sr.opts.search)
    except BoundsTimeout:
        frontier = None
    if frontier:
        return _branch_and_bound(sr, frontier, deadline, bab_deadline, "influence")
    if frontier is not None:  # every open box closed when bounded again
        open_boxes = []
    return None, open_boxes


def _decide_disjunct(model: LoadedModel, dj: Disjunct, deadline: float, opts: VerifyOptions,
                     stats: dict, errors: list[str], closed: list) -> tuple[Verdict, dict | None, str, str]:
    """Returns (verdict, witness, method, detail) for one disjunct: the root box bounded, input
    splitting (:func:`_split_inputs`), the exact leaves (:func:`_decide_leaves`), Marabou on the
    boxes left open (:func:`_marabou_stage`).

    ``closed`` receives the boxes proved empty (a partition of the region when PROVED).
    """
    early = _early_answer(model, dj, deadline)
    if early is not None:
        return early
    ir = model.ir
    start = time.monotonic()
    bab_deadline = start + (deadline - start) * (opts.bound_share if opts.use_marabou else 1.0)
    dj = _with_implied_rows(dj, opts.search.pair_rows_max)
    lp = TriangleLP(ir, dj.C, dj.d) if opts.lp_hints and is_lp_ready(ir) else None
    sr = _Search(model, dj, opts, stats, errors, closed, lp, None, math.inf)
    try:
        root = _bound_root(sr, deadline)
    except BoundsTimeout:
        return Verdict.UNKNOWN, None, "bounds", "timeout in the first bound computation"
    stats["boxes"] += 1
    if root.bound > 0:
        closed.append((dj.lo.copy(), dj.hi.copy()))
        return Verdict.PROVED, None, "bounds", "1 box closed by CROWN bounds"
    frontier: list[Box] = []
    still_open: list = []   # boxes the first round left open while its probes gave others back
    lp_closed = 0           # boxes of this disjunct the ReLU-split LP closed (probes and leaves)
    while True:   # a second round splits the boxes the LP probes gave back (they are not probed again)
        if opts.lp_leaves and is_lp_ready(ir):
            sr.leaves, sr.leaf_bounds, sr.leaf_budget, sr.leaf_depth = [], [], [], opts.search.leaf_depth
            if opts.workers > 1:   # the leaves go to the worker processes as they are filed
                sr.stream = LeafStream(ir, dj.C, dj.d, deadline, workers=opts.workers)
        try:
            decided, open_boxes = (_branch_and_bound(sr, frontier, deadline, bab_deadline, "smart") if frontier
                                   else _split_inputs(sr, root, deadline, bab_deadline))
        except BaseException:
            if sr.stream is not None:
                sr.stream.cancel()
            raise
        if decided is not None:
            if sr.stream is not None:
                sr.stream.cancel()
            return decided
        leaves = sr.leaves
        marabou_next = opts.use_marabou and not leaves and len(open_boxes) <= opts.search.marabou_max_boxes
        if leaves is not None and (leaves or open_boxes) and not marabou_next:
            # the phases hand over: the leaves, and the boxes input splitting left open when its time
            # or its box budget ran out, go to the ReLU-split LP with all the time left (before, open
            # boxes beside the leaves ended the query: "14276 boxes open (14270 went to the ReLU-split
            # LP, 0 LPs)" after 3.4 of 10 s); leaves first (deep boxes close fastest). A few open boxes
            # and no leaves go to Marabou as before (input splitting stopped early for it).
            todo = leaves + open_boxes
            n_closed = len(closed)
            decided, open_boxes, again = _decide_leaves(model, dj, todo, deadline, opts, stats, closed, errors,
                                                        sr.leaf_bounds + [None] * len(open_boxes), sr.stream,
                                                        open_boxes, sr.leaf_budget + [None] * len(open_boxes))
            lp_closed += len(closed) - n_closed
            if decided is not None:
                return decided
            if again:   # the boxes the probes gave back: split them (a point in them may still decide the query)
                still_open += open_boxes
                try:
                    frontier = frontier_of(ir, dj, again, deadline, closed, opts.search, probed=True)
                except BoundsTimeout:
                    open_boxes = again
                else:
                    if frontier:
                        continue
                    open_boxes = []   # every one closed when bounded again
        if sr.stream is not None:
            sr.stream.cancel()   # (no leaves: nothing started)
        break
    open_boxes = still_open + open_boxes
    if not open_boxes:
        if lp_closed:
            return Verdict.PROVED, None, "bounds+lp", f"{stats['boxes']} boxes closed by CROWN bounds, " \
                f"{_lp_detail(stats)}"
        return Verdict.PROVED, None, "bounds", f"{stats['boxes']} boxes closed by CROWN bounds"
    where = f"{len(open_boxes)} boxes open" if not (stats.get("lp_leaves") or stats.get("lp_probes")) else \
        f"{len(open_boxes)} boxes open ({_lp_detail(stats, tried=True)})"
    return _marabou_stage(sr, open_boxes, where, deadline)


def _lp_detail(stats: dict, tried: bool = False) -> str:
    """The ReLU-split LP's part of a detail (the query's counts so far): "L by ReLU-split LP (N LPs)", with
    the LP probes' part when there were any ("P by LP probes (T tried, G given back to input splitting), L
    by ReLU-split LP; N LPs in all"); with ``tried`` (boxes left open) "L went to the ReLU-split LP"."""
    probes, leaves, lps = stats.get("lp_probes", 0), stats.get("lp_leaves", 0), stats.get("lp_calls", 0)
    what = f"{leaves} went to the ReLU-split LP" if tried else f"{leaves} by ReLU-split LP"
    if not probes:
        return f"{what}, {lps} LPs" if tried else f"{what} ({lps} LPs)"
    return f"{stats.get('lp_probe_closed', 0)} {'closed ' if tried else ''}by LP probes ({probes} tried, " \
        f"{stats.get('lp_given_back', 0)} given back to input splitting), {what}; {lps} LPs in all"


def _marabou_stage(sr: _Search, open_boxes: list, where: str, deadline: float) -> tuple:
    """Marabou (child process, wall-clock timeout) on the boxes left open when there are at most
    ``marabou_max_boxes`` and time is left; its ``sat`` points are replayed, ``unsat`` closes a box.
    ``where`` describes the open boxes for the UNKNOWN details. Returns (verdict, witness, method,
    detail)."""
    model, dj, opts, stats, s = sr.model, sr.dj, sr.opts, sr.stats, sr.opts.search
    if not opts.use_marabou:
        return Verdict.UNKNOWN, None, "bounds", f"{where} (Marabou disabled)"
    remaining = deadline - time.monotonic()
    if remaining <= s.marabou_min_left or len(open_boxes) > s.marabou_max_boxes:
        return Verdict.UNKNOWN, None, "bounds", f"timeout with {where}"
    stats["marabou_boxes"] += len(open_boxes)
    nbs = _open_box_bounds(model.ir, open_boxes, time.monotonic() + s.marabou_bounds_share * remaining)
    remaining = deadline - time.monotonic()
    if remaining <= s.marabou_min_left:
        return Verdict.UNKNOWN, None, "bounds", f"timeout with {len(open_boxes)} boxes open"
    answers = marabou.solve_boxes(model.ir, open_boxes, dj.C, dj.d, remaining, node_bounds=nbs,
                                  per_box_timeout=max(s.marabou_min_box_time, remaining / len(open_boxes)))
    unknown = []
    for (lo, hi), ans in zip(open_boxes, answers):
        if ans.status == "sat":
            # the open box lies in the region's box: clip into it, then one replay on the region
            ok, wit = replay(model, dj, np.clip(ans.x, lo, hi))
            if ok:
                return Verdict.VIOLATED, wit, "bounds+marabou", f"{stats['boxes']} boxes, Marabou witness"
            sr.errors.append(f"Marabou witness {np.round(ans.x, 6).tolist()} does not replay "
                             f"(max slack {wit['max_row_slack_onnxruntime']:.3g})")
            unknown.append("witness does not replay")
        elif ans.status == "unknown":
            unknown.append(ans.reason)
        else:
            sr.closed.append((lo, hi))
    if unknown:
        return Verdict.UNKNOWN, None, "bounds+marabou", f"{len(unknown)} of {len(open_boxes)} boxes undecided: " \
            f"{unknown[0]}"
    return Verdict.PROVED, None, "bounds+marabou", f"{stats['boxes']} boxes; {len(open_boxes)} closed by Marabou"


def _decide_leaves(model: LoadedModel, dj: Disjunct, leaves: list, deadline: float, opts: VerifyOptions,
                   stats: dict, closed: list, errors: list[str], bounds: list | None = None,
                   stream: LeafStream | None = None, extra: list = (), budgets: list | None = None):
    """ReLU-split LP on the leaves (:func:`~.lp_split.close_leaves`, with their node bounds where
    ``bounds`` has them, and as LP probes where ``budgets`` gives a budget); candidates are replayed. With
    ``stream`` (which input splitting filed the first ``len(leaves) - len(extra)`` of them to), the stream
    decides them, and ``extra`` (the rest) too (:meth:`~.lp_split.LeafStream.finish`: the same answers).
    Returns (decided (verdict, witness, method, detail) or None, leaves left open, probes given back)."""
    budgets = budgets if budgets is not None else [None] * len(leaves)
    if stream is not None:
        n = len(leaves) - len(extra)
        answers = stream.finish(list(extra), None if bounds is None else bounds[n:])
    else:
        answers = close_leaves(model.ir, dj.C, dj.d, leaves, deadline, workers=opts.workers, bounds=bounds,
                               budgets=budgets)
    n_probes = sum(b is not None for b in budgets)
    stats["lp_leaves"] = stats.get("lp_leaves", 0) + len(leaves) - n_probes
    if n_probes:
        stats["lp_probes"] = stats.get("lp_probes", 0) + n_probes
    left, again = [], []
    for (lo, hi), (kind, what), budget in zip(leaves, answers, budgets):
        if kind == "closed":
            closed.append((lo, hi))
            stats["lp_calls"] = stats.get("lp_calls", 0) + int(what)
            if budget is not None:
                stats["lp_probe_closed"] = stats.get("lp_probe_closed", 0) + 1
            continue
        if kind == "split":   # an LP probe's budget ran out: input splitting goes on with the box
            stats["lp_calls"] = stats.get("lp_calls", 0) + int(what)
            stats["lp_given_back"] = stats.get("lp_given_back", 0) + 1
            again.append((lo, hi))
            continue
        if kind == "candidate":
            ok, wit = replay(model, dj, np.clip(what, lo, hi))
            if ok:
                return (Verdict.VIOLATED, wit, "bounds+lp", f"{stats['boxes']} boxes, LP witness"), left, again
            errors.append(f"LP point {np.round(what, 6).tolist()} does not replay "
                          f"(max slack {wit['max_row_slack_onnxruntime']:.3g})")
        left.append((lo, hi))
    return None, left, again


def _with_implied_rows(dj: Disjunct, pair_rows_max: int) -> Disjunct:
    """The disjunct with implied rows added: the average of every pair of rows and of all rows
    (pairs only up to ``pair_rows_max`` rows). A point of the region satisfies every convex
    combination of its rows, so the region is the same; but a box where different rows are
    positive in different parts can be closed by one combined row (a fixed-multiplier
    Lagrangian relaxation of the conjunction). A combination is added only where its float64
    row and right-hand side are the exact rational combination (checked with fractions):
    a rounded row would be a slightly different constraint."""
    m = dj.C.shape[0]
    if m < 2:
        return dj
    combos = [np.full(m, 1.0 / m)]
    if m <= pair_rows_max:
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


def _replay_hits(model: LoadedModel, dj: Disjunct, cands: np.ndarray, tried: list[int],
                 max_replays: int) -> dict | None:
    """The first of ``cands`` (K, n_inputs) inside the region on the IR that replays, or None;
    at most ``max_replays`` replays per disjunct (``tried[0]`` counts them)."""
    if not len(cands) or tried[0] >= max_replays:
        return None
    ys = model.ir.evaluate(cands)
    hits = np.nonzero(np.all(matmul(ys, dj.C.T) - dj.d <= 0, axis=1))[0][:max_replays - tried[0]]
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


def _sample_witness(model: LoadedModel, query: Query, deadline: float,
                    s: SearchSettings = DEFAULT_SEARCH) -> tuple[int, dict] | None:
    """A deterministic look for easy witnesses before any search: ``s.sample_points`` seeded random
    points per distinct input box (evaluated once for every disjunct on that box), at most
    ``s.sample_replays`` replays per disjunct. Returns (disjunct index, replayed witness) or None."""
    ir = model.ir
    by_box: dict[bytes, list[int]] = {}
    for k, dj in enumerate(query.disjuncts):
        if dj.C.shape[0] and not dj.empty_input():
            by_box.setdefault(dj.lo.tobytes() + dj.hi.tobytes(), []).append(k)
    for ks in by_box.values():
        if time.monotonic() >= deadline:
            return None
        lo, hi = query.disjuncts[ks[0]].lo, query.disjuncts[ks[0]].hi
        pts = lo + (hi - lo) * np.random.default_rng(0).random((s.sample_points, lo.size))
        ys = ir.evaluate(pts)
        for k in ks:
            dj = query.disjuncts[k]
            inside = np.nonzero(np.all(matmul(ys, dj.C.T) - dj.d <= 0, axis=1))[0]
            if inside.size:
                for (ok, wit) in replay_many(model, [(dj, pts[i]) for i in inside[:s.sample_replays]]):
                    if ok:
                        return k, wit
    return None


def _pgd_witness(model: LoadedModel, query: Query, deadline: float,
                 s: SearchSettings = DEFAULT_SEARCH) -> tuple[int, dict] | None:
    """Projected gradient descent (:func:`~.falsify.pgd_search`) in every disjunct with an
    output constraint, before branch and bound: the centre and RANDOM_STARTS seeded
    points per disjunct. Returns (disjunct index, replayed witness) or None."""
    for k, dj in enumerate(query.disjuncts):
        if not dj.C.shape[0] or dj.empty_input() or time.monotonic() >= deadline:
            continue
        pts = pgd_search(model.ir, dj.lo, dj.hi, dj.C, dj.d, seed=k, deadline=deadline)
        wit = _replay_hits(model, dj, pts[:s.pgd_replays], [0], s.max_replays)
        if wit is not None:
            return k, wit
    return None


def falsify(model: LoadedModel, query: Query, s: SearchSettings = DEFAULT_SEARCH) -> tuple[int, dict] | None:
    """The deterministic part of :func:`decide`'s counterexample search, with no deadline: seeded
    random points, then projected gradient descent from fixed starts; the same answer on every
    machine. Returns (disjunct index, witness replayed on onnxruntime and the IR) or None (which
    proves nothing)."""
    return _sample_witness(model, query, math.inf, s) or _pgd_witness(model, query, math.inf, s)


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


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its child processes already reaped
    (worker pools, Marabou, Z3 workers): getrusage(2)."""
    import resource
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def decide(model: LoadedModel, query: Query, opts: VerifyOptions | None = None) -> QueryResult:
    """Decide a query (disjunction of unsafe regions) within ``opts.timeout`` seconds on ``model``
    (:class:`~mi_certify.generator.frontend.model.LoadedModel`: the IR is queried, onnxruntime replays
    every counterexample). The result's ``time_s`` is its wall time; ``stats["cpu_s"]`` the CPU
    seconds it took (this process and its reaped workers, :func:`_cpu_seconds`): on a loaded
    machine the wall time grows and the CPU time shows the work done (issue 38). The process keeps
    its freed heap from here on (:func:`~mi_certify.verification.tools.registry.keep_freed_heap`)."""
    keep_freed_heap()
    cpu0 = _cpu_seconds()
    res = _decide(model, query, opts or VerifyOptions())
    res.stats["cpu_s"] = round(_cpu_seconds() - cpu0, 3)
    return res


def _decide(model: LoadedModel, query: Query, opts: VerifyOptions) -> QueryResult:
    """:func:`decide` without the CPU-time accounting."""
    ir = model.ir
    t0 = time.monotonic()
    confirms = opts.z3_confirm and ir.n_relus <= opts.search.z3_confirm_max_relus
    deadline = t0 + opts.timeout
    end = opts.end
    if opts.whole_query:       # the query as a whole ends by t0 + timeout (verify --timeout)
        end = t0 + opts.timeout if end is None else min(end, t0 + opts.timeout)
    if end is not None:        # the search's share of what is left; the confirmation may use the rest
        share = opts.timeout / (opts.timeout + opts.confirm_timeout) if confirms else 1.0
        deadline = min(deadline, t0 + max(0.0, end - t0) * share)
    stats = {"boxes": 0, "marabou_boxes": 0, "z3_calls": 0}
    errors: list[str] = []
    methods, details = [], []
    verdict = Verdict.PROVED
    partitions: list[list] = []
    falsifiers = (("sampling", "random point in the region", lambda: _sample_witness(model, query, deadline, opts.search)),
                  ("pgd", "gradient search (PGD) point in the region",
                   lambda: _pgd_witness(model, query, min(deadline, time.monotonic() + opts.search.pgd_share * opts.timeout),
                                       opts.search)))
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
    if verdict == Verdict.PROVED and confirms:
        confirm_end = time.monotonic() + opts.confirm_timeout
        z3_before = stats["z3_calls"]
        try:
            msg = _confirm_partitions(ir, query, partitions, confirm_end if end is None else min(confirm_end, end),
                                      stats, opts.search)
        except Exception as exc:  # noqa: BLE001 - a confirmation that fails is no confirmation: UNKNOWN
            if _interrupted(exc):
                raise KeyboardInterrupt from exc
            log.exception("query %s: the confirmation failed", query.id)
            msg = f"confirmation failed: {type(exc).__name__}: {exc}"
        if msg:
            errors.append(msg)
            log.error("%s: %s", query.id, msg)
            verdict = Verdict.UNKNOWN
        else:
            method += "; confirmed by exact bounds" + (" and z3" if stats["z3_calls"] > z3_before else "")
    return QueryResult(query.id, verdict, time.monotonic() - t0, method, None, "; ".join(details), errors, stats)


def _bisect(a: np.ndarray, b: np.ndarray, j: int) -> tuple | None:
    """The two halves of box [a, b] cut at the float midpoint of input ``j``, upper half first
    (the stack then takes the lower one next); None when no float lies strictly between."""
    mid = (a[j] + b[j]) / 2
    if not a[j] < mid < b[j]:
        return None
    upper_lo, lower_hi = a.copy(), b.copy()
    upper_lo[j], lower_hi[j] = mid, mid
    return (upper_lo, b), (a, lower_hi)


def _exact_bound_pass(ir: ControllerIR, regions: list, deadline: float, max_depth: int, stats: dict) -> list:
    """Exact symbolic bounds (:mod:`exact_bounds`) on a partition of each region that this function
    makes itself, by bisection from the region: so the pieces cover the region by construction,
    whatever the search's boxes are.

    ``regions``: (C, d, lo, hi, boxes) per disjunct, ``boxes`` the search's proof partition, used
    only as a hint of where to cut: a piece whose lower corner is the lower corner of a smaller
    search box is bisected, without a bound evaluation, on the input that box is narrowest in
    (relative to the piece); a piece that is a search box, or that no search box starts at, gets a
    bound evaluation and, when that does not close it, is bisected on the input of largest
    smear, at most ``max_depth`` times down its line. Until ``deadline``. Returns the open pieces
    as tasks (C, d, lo, hi) for Z3. Counts in ``stats``: ``exact_closed`` (pieces closed),
    ``exact_bound_boxes`` (bound evaluations)."""
    bounds = ExactBounds(ir)
    left: list = []
    evaluations = closed = 0
    for C, d, lo, hi, boxes in regions:
        corner = {}
        for blo, bhi in boxes:
            corner.setdefault(np.asarray(blo, dtype=np.float64).tobytes(), np.asarray(bhi, dtype=np.float64))
        stack = [(np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64), None)]
        while stack:
            a, b, depth = stack.pop()
            if time.monotonic() > deadline:
                left.append((C, d, a, b))
                continue
            if depth is None:   # follow the search's cuts while a smaller search box starts here
                bhi = corner.get(a.tobytes())
                if bhi is not None and np.all(bhi <= b) and np.any(bhi < b):
                    narrow = np.where(bhi < b, (b - a) / np.where(bhi > a, bhi - a, np.inf), 0.0)
                    halves = _bisect(a, b, int(np.argmax(narrow)))
                    if halves:
                        stack.extend((lo_, hi_, None) for lo_, hi_ in halves)
                        continue
                depth = 0
            evaluations += 1
            shut, score = bounds.closes(C, d, a, b)
            if shut:
                closed += 1
                continue
            halves = _bisect(a, b, int(np.argmax(score))) if depth < max_depth else None
            if not halves:   # Z3 takes the piece
                left.append((C, d, a, b))
                continue
            stack.extend((lo_, hi_, depth + 1) for lo_, hi_ in halves)
    stats["exact_closed"] = stats.get("exact_closed", 0) + closed
    stats["exact_bound_boxes"] = stats.get("exact_bound_boxes", 0) + evaluations
    return left


def _confirm_partitions(ir: ControllerIR, query: Query, partitions: list[list], deadline: float,
                        stats: dict, s: SearchSettings = DEFAULT_SEARCH) -> str | None:
    """Exact check of every disjunct's region; None when all are empty.

    The confirmation partitions each region itself (:func:`_exact_bound_pass`, by bisection from
    the region), so it covers the region whatever the search's boxes (``partitions``, one list of
    (lo, hi) per disjunct) are: they only guide where to cut. Exact symbolic bounds close what they
    can; Z3 over the rationals decides the pieces they leave open, bisected (exact-interval rule)
    until there are enough independent tasks for the worker processes.
    """
    # every disjunct is checked, with or without hints (a missing hint list is no hint, never a pass)
    regions = [(dj.C, dj.d, dj.lo, dj.hi, partitions[k] if k < len(partitions) else [])
               for k, dj in enumerate(query.disjuncts) if not dj.empty_input()]
    # exact symbolic bounds (integer arithmetic, bisecting) close most pieces in milliseconds; what
    # they leave open within their share of the budget goes to Z3
    tasks = _exact_bound_pass(ir, regions, time.monotonic() + s.exact_bound_share * max(0.0, deadline - time.monotonic()),
                              s.exact_max_depth, stats)
    if not tasks:
        return None
    while 0 < len(tasks) < s.z3_tasks_per_worker * s.z3_workers and time.monotonic() < deadline:
        k = int(np.argmax([float(np.prod(np.where(hi > lo, hi - lo, 1.0))) for _, _, lo, hi in tasks]))
        C, d, lo, hi = tasks.pop(k)
        halves = ExactChecker(ir, C, d)._split(lo, hi)
        if halves is None:
            tasks.insert(k, (C, d, lo, hi))
            break
        tasks.extend((C, d, a, b) for a, b in halves)
    left = deadline - time.monotonic()
    if left <= 0:
        return "exact confirmation ran out of time before Z3 could start"
    stats["z3_calls"] += len(tasks)
    results = confirm_boxes(ir, tasks, left, workers=s.z3_workers, first_failure=True)
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
