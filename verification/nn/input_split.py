"""Input splitting for one disjunct: the open boxes, bounding a batch of them, choosing each box's
split and making and bounding its children (as α,β-CROWN's ``input_split/`` keeps branching and
bounding apart; the attack step and the loop are :mod:`~mi_certify.verification.nn.nn_verify`'s).

A disjunct's region is ``x in [lo, hi], C y <= d`` (C (m, n_outputs), d (m,)). A box is *closed*
when a sound lower bound proves some row ``(C y - d)_r > 0`` everywhere in it. Bounds: node
bounds carried forward as linear functions of the input (symbolic intervals with linear
relaxations, Neurify: Wang et al., NeurIPS 2018), the rows by CROWN's backward pass (Zhang et
al., NeurIPS 2018) over them, and for a box those leave open CROWN's backward bounds of every
hidden node (:func:`bound_region`). Optionally the triangle LP (Planet: Ehlers, ATVA 2017)
proposes CROWN's slopes and row weights (Salman et al., NeurIPS 2019; :func:`lp_hints`), sound
through our own pass (:func:`hinted_lower`).

Branching (:func:`choose_splits`): a box is halved along one input; "influence" takes the input
of largest ``|Λ_r,i| · width_i`` on the box's best row (ReluVal's smear heuristic: Wang et al.,
USENIX Security 2018); "smart" bounds all 2n halves cheaply and proposes the input whose worse
half is nearest to closing, and :func:`bound_children` keeps, of the two candidates, the split
whose halves' tight bounds are nearer to closing. Every knob is a field of
:class:`~mi_certify.verification.nn.settings.SearchSettings`.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

import numpy as np

from mi_certify.generator.core.ir import ControllerIR

from mi_certify.verification.nn.bounds import (NodeBounds, combined_row_lower, crown_bounds, forward_bounds,
                                               output_matrix_lower)
from mi_certify.verification.nn.lp_relax import TriangleLP
from mi_certify.verification.nn.properties import Disjunct
from mi_certify.verification.nn.settings import DEFAULT_SEARCH, SearchSettings

__all__ = ["Batch", "Box", "Children", "Frontier", "Split", "batch_size", "bound_children", "bound_region",
           "boxes_per_pass", "choose_splits", "frontier_of", "halvings", "hinted_lower", "lp_hints", "tighten_region"]


@dataclass(order=True, slots=True)
class Box:
    """One open box on the search heap, ordered by ``(bound, seq)`` only: the lowest bound first
    (most promising for a counterexample), ties in the order the boxes were pushed (``seq`` is
    unique within one search, so the arrays are never compared).

    bound: the box's best lower bound ``max_r (C y - d)_r`` (<= 0: open). seq: push counter.
    lo, hi: (n_inputs,) the box. lin: (m, n_inputs) the rows' input coefficients of their
    lower bounds (the influence pick and the bound-minimising corners read them). row: the row
    of ``bound``. hint: LP multipliers ``(λ (m,), {ReLU id: slopes})`` the box inherits or got
    (:func:`lp_hints`), or None. probed: the box's lineage was given back by an LP probe once.
    """

    bound: float
    seq: int
    lo: np.ndarray = field(compare=False)
    hi: np.ndarray = field(compare=False)
    lin: np.ndarray = field(compare=False)
    row: int = field(compare=False)
    hint: tuple | None = field(compare=False, default=None)
    probed: bool = field(compare=False, default=False)
    #: the box's own node bounds when kept (small networks), flat: every node's lower bounds in node
    #: order, then every node's upper bounds (CROWN's where its forward bounds left it open); its
    #: children's bounds are clipped to them (:func:`bound_region` ``clip``, :meth:`Batch.parent_bounds`)
    nb: np.ndarray | None = field(compare=False, default=None)


@dataclass
class Batch:
    """Boxes taken off the heap together, as arrays: K boxes, n inputs, m rows.

    boxes: the :class:`Box` entries. bound (K,), lo/hi (K, n), lin (K, m, n), row (K,).
    """

    boxes: list[Box]
    bound: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    lin: np.ndarray
    row: np.ndarray

    def pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The boxes as (lo, hi) pairs, in batch order."""
        return list(zip(self.lo, self.hi))

    def parent_bounds(self, parent: np.ndarray, sizes: list[int]) -> NodeBounds | None:
        """The node bounds of the boxes ``parent`` (indices into the batch, one per child;
        :attr:`Box.nb`) as (len(parent), size_i) arrays, node sizes ``sizes``, to clip their
        children's bounds to; None when some box of the batch has none."""
        if parent.size == 0 or any(b.nb is None for b in self.boxes):
            return None
        flat = np.stack([b.nb for b in self.boxes])[parent]
        cut = np.cumsum([0] + list(sizes) + list(sizes))
        parts = [flat[:, cut[i]:cut[i + 1]] for i in range(2 * len(sizes))]
        return NodeBounds(parts[:len(sizes)], parts[len(sizes):])


class Frontier:
    """The open boxes of one search: a heap of :class:`Box`, lowest bound first, ties by push order."""

    def __init__(self, boxes: list[Box]):
        self.heap = list(boxes)
        heapq.heapify(self.heap)
        self.seq = 1 + max(b.seq for b in self.heap)  # the next push's counter

    def __len__(self) -> int:
        return len(self.heap)

    def push(self, bound: float, lo: np.ndarray, hi: np.ndarray, lin: np.ndarray, row: int, hint,
             probed: bool = False, nb: np.ndarray | None = None) -> None:
        """Add an open box (the counter gives it the next ``seq``)."""
        heapq.heappush(self.heap, Box(bound, self.seq, lo, hi, lin, row, hint, probed, nb))
        self.seq += 1

    def pop_batch(self, k: int) -> Batch:
        """The (at most) ``k`` most promising boxes, off the heap, as a :class:`Batch`."""
        take = [heapq.heappop(self.heap) for _ in range(min(k, len(self.heap)))]
        return Batch(take, np.array([b.bound for b in take]), np.array([b.lo for b in take]),
                     np.array([b.hi for b in take]), np.array([b.lin for b in take]),
                     np.array([b.row for b in take]))

    def pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The boxes still on the heap as (lo, hi) pairs, in heap (array) order."""
        return [(b.lo, b.hi) for b in self.heap]


def batch_size(ir: ControllerIR, s: SearchSettings = DEFAULT_SEARCH) -> int:
    """Boxes bounded in one vectorised pass: ``s.batch_boxes``, fewer for wide networks so the
    largest backward-pass array (boxes × 2·width × width float64) stays near ``s.batch_elements``."""
    width = max(node.size for node in ir.nodes)
    return int(max(s.batch_min_boxes, min(s.batch_boxes, s.batch_elements // max(1, 2 * width * width))))


def boxes_per_pass(ir: ControllerIR, s: SearchSettings = DEFAULT_SEARCH) -> int:
    """Boxes taken off the heap per round: ``s.cheap_pass_batches`` batches' worth of their 2n halves."""
    return max(1, batch_size(ir, s) * s.cheap_pass_batches // (2 * ir.n_inputs))


def bound_region(ir: ControllerIR, dj: Disjunct, lo: np.ndarray, hi: np.ndarray, deadline: float,
                 tight: bool = True, clip: NodeBounds | None = None) -> tuple[np.ndarray, np.ndarray, NodeBounds]:
    """Lower bounds of the disjunct's rows ``C y`` over each box (B, m), their input
    coefficients (B, m, n_inputs) and the node bounds used (NodeBounds of (B, size_i)
    arrays), by CROWN's backward pass for the rows over node bounds
    from :func:`~.bounds.forward_bounds` (cheap); with ``tight``, the boxes those leave
    open get CROWN's backward bounds for every hidden node too (:func:`~.bounds.crown_bounds`,
    far tighter in deep networks, ~15x the cost). ``clip``: sound node bounds over each box
    ((B, size_i): its parent's) that every node's bounds are intersected with (fewer unstable
    ReLUs, tighter relaxations). Raises BoundsTimeout."""
    nb = forward_bounds(ir, lo, hi, deadline=deadline, clip=clip)
    low, lin = output_matrix_lower(ir, dj.C, lo, hi, nb, deadline=deadline)
    if not tight:
        return low, lin, nb
    return tighten_region(ir, dj, lo, hi, low, lin, nb, deadline)


def tighten_region(ir: ControllerIR, dj: Disjunct, lo: np.ndarray, hi: np.ndarray, low: np.ndarray, lin: np.ndarray,
                   nb: NodeBounds, deadline: float) -> tuple[np.ndarray, np.ndarray, NodeBounds]:
    """:func:`bound_region`'s tight part: given the boxes' forward bounds ``nb`` and the rows' bounds over them
    (``low`` (B, m), ``lin`` (B, m, n_inputs); updated in place, as ``nb``), the boxes they leave open get
    CROWN's backward bounds for every hidden node and their rows bounded again over those. Returns (low,
    lin, nb). Raises BoundsTimeout."""
    again = np.nonzero(~(np.max(low - dj.d, axis=1) > 0))[0]
    if again.size:
        # the forward bounds just computed are those crown_bounds would compute first (the same bits
        # per box): handed over as ``init`` rather than computed again; CROWN only tightens them (every
        # node's result lies within init's), so no intersection with them is needed afterwards
        cb = crown_bounds(ir, lo[again], hi[again], deadline=deadline,
                          init=NodeBounds([v[again] for v in nb.lower], [v[again] for v in nb.upper]))
        low2, lin2 = output_matrix_lower(ir, dj.C, lo[again], hi[again], cb, deadline=deadline)
        better = np.max(low2 - dj.d, axis=1) >= np.max(low[again] - dj.d, axis=1)
        low[again[better]] = low2[better]
        lin[again[better]] = lin2[better]
        for full, part in zip(nb.lower + nb.upper, cb.lower + cb.upper):
            full[again] = part
    return low, lin, nb


def hinted_lower(ir: ControllerIR, dj: Disjunct, lo: np.ndarray, hi: np.ndarray, nb: NodeBounds,
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


def lp_hints(lp: TriangleLP | None, lo: np.ndarray, hi: np.ndarray, nb: NodeBounds, which: np.ndarray,
             deadline: float, stats: dict, s: SearchSettings = DEFAULT_SEARCH) -> list:
    """LP hints for the boxes ``which`` (indices into lo/hi/nb), None for the others and when
    the LP gives none or the deadline is near (``s.lp_min_left`` seconds; each LP at most
    ``s.lp_time_limit``)."""
    hints: list = [None] * lo.shape[0]
    if lp is None:
        return hints
    for b in which:
        left = deadline - time.monotonic()
        if left <= s.lp_min_left:
            break
        h = lp.hint(lo[b], hi[b], NodeBounds([v[b] for v in nb.lower], [v[b] for v in nb.upper]),
                    time_limit=min(s.lp_time_limit, left))
        stats["lp_calls"] = stats.get("lp_calls", 0) + 1
        if h is not None:
            hints[b] = (h[1], h[2])
    return hints


@dataclass
class Split:
    """Each box's split candidates: K boxes of a :class:`Batch`, n inputs.

    halves_lo, halves_hi: (K, n, 2, n) the two halves of every box along every input.
    pick: (K,) the input the strategy chose; other: (K,) the influence pick (== pick under
    "influence"). ok: indices of the boxes that can be split (some width > 0); two: those of
    ``ok`` whose candidates differ (both splits get bounded); unsplittable: the others (points).
    cheap: the smart pick's pass over every half ((low, lin, node bounds) of the (K·n·2) halves in
    ``halves_lo.reshape(-1, n)`` order), or None: :func:`bound_children` starts from those instead of
    computing the chosen halves' forward bounds and rows again (the same bits: each box's bounds depend on
    that box and its parent's bounds alone).
    """

    halves_lo: np.ndarray
    halves_hi: np.ndarray
    pick: np.ndarray
    other: np.ndarray
    ok: np.ndarray
    two: np.ndarray
    unsplittable: np.ndarray
    cheap: tuple | None = None


def _halves(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """Every box's 2n halves (K, n, 2, n) lo and hi: ``[k, i, 0]`` the lower half along input i."""
    los, his = batch.lo, batch.hi
    n = los.shape[1]
    mid = (los + his) / 2
    c_lo = np.repeat(los[:, None, None, :], 2, axis=2).repeat(n, axis=1)  # (K, n, 2, n)
    c_hi = np.repeat(his[:, None, None, :], 2, axis=2).repeat(n, axis=1)
    dims = np.arange(n)
    c_hi[:, dims, 0, dims] = mid
    c_lo[:, dims, 1, dims] = mid
    return c_lo, c_hi


def _smart_pick(ir: ControllerIR, dj: Disjunct, batch: Batch, c_lo: np.ndarray, c_hi: np.ndarray,
                deadline: float, stats: dict, s: SearchSettings) -> tuple[np.ndarray, tuple]:
    """The input whose worse half is nearest to being closed (K,): every box's 2n halves bounded in
    one cheap pass (forward bounds and CROWN for the rows only); and that pass's (low, lin, node bounds)
    of the 2n·K halves in ``c_lo.reshape(-1, n)`` order (:class:`Split` ``cheap``). Raises BoundsTimeout."""
    K, n = batch.lo.shape
    c_low, c_lin, c_nb = bound_region(ir, dj, c_lo.reshape(-1, n), c_hi.reshape(-1, n), deadline, tight=False,
                                      clip=batch.parent_bounds(np.repeat(np.arange(K), 2 * n),
                                                               [v.size for v in ir.nodes]))
    stats["boxes"] += 2 * n * K
    c_best = np.max(c_low - dj.d, axis=1).reshape(K, n, 2)
    score = np.min(c_best, axis=2) + s.smart_tiebreak * np.max(c_best, axis=2)
    score = np.where(batch.hi - batch.lo > 0, score, -np.inf)
    return np.argmax(score, axis=1), (c_low, c_lin, c_nb)


def _influence_pick(batch: Batch) -> np.ndarray:
    """The input of largest influence ``|Λ_r,i| · width_i`` on each box's best row (K,); the widest
    input where every influence is 0; never a zero-width input while the box has a wider one."""
    K = batch.lo.shape[0]
    width = batch.hi - batch.lo
    infl = np.abs(batch.lin[np.arange(K), batch.row]) * width
    infl = np.where(np.any(infl > 0, axis=1)[:, None], infl, width)
    infl = np.where(width > 0, infl, -np.inf)
    return np.argmax(infl, axis=1)


def choose_splits(ir: ControllerIR, dj: Disjunct, batch: Batch, strategy: str, deadline: float, stats: dict,
                  s: SearchSettings = DEFAULT_SEARCH) -> Split:
    """Each box's split candidates under ``strategy`` ("smart": the cheap look-ahead pick and the
    influence pick; "influence": the influence pick alone, no cheap pass). Raises BoundsTimeout."""
    c_lo, c_hi = _halves(batch)
    # a second candidate: the input of largest influence (the cheap bounds mislead where they are
    # loose); both candidates' halves get the tight bounds in bound_children
    other = _influence_pick(batch)
    cheap = None
    if strategy == "smart":
        pick, cheap = _smart_pick(ir, dj, batch, c_lo, c_hi, deadline, stats, s)
    elif strategy == "influence":
        pick = other
    else:
        raise ValueError(f"unknown branching strategy {strategy!r}")
    splittable = np.any(batch.hi - batch.lo > 0, axis=1)
    ok = np.nonzero(splittable)[0]
    return Split(c_lo, c_hi, pick, other, ok, ok[other[ok] != pick[ok]], np.nonzero(~splittable)[0], cheap)


@dataclass
class Children:
    """The children kept, C of them: lo/hi (C, n); bound (C,) their best lower bound (LP hints
    included); row (C,) the row of their CROWN bound; lin (C, m, n) its coefficients; hint: per
    child the LP multipliers it got or inherited, or None; nb: their node bounds ((C, size_i) arrays:
    CROWN's where the forward bounds left a child open, :func:`bound_region`)."""

    lo: np.ndarray
    hi: np.ndarray
    bound: np.ndarray
    row: np.ndarray
    lin: np.ndarray
    hint: list
    nb: NodeBounds | None = None
    parent: np.ndarray | None = None


def bound_children(ir: ControllerIR, dj: Disjunct, batch: Batch, split: Split, lp: TriangleLP | None,
                   deadline: float, stats: dict, s: SearchSettings = DEFAULT_SEARCH) -> Children:
    """Make the children of every splittable box (both candidates' halves where they differ), bound
    them tightly (:func:`bound_region`) and keep, per box, the split whose worse half is nearer to
    closing; then the LP multipliers: the parents' on the children, and the LP's own where still
    open (:func:`lp_hints`). Raises BoundsTimeout."""
    n = batch.lo.shape[1]
    ok, two, pick, other = split.ok, split.two, split.pick, split.other
    ch_lo = np.concatenate([split.halves_lo[ok, pick[ok]], split.halves_lo[two, other[two]]]).reshape(-1, n)
    ch_hi = np.concatenate([split.halves_hi[ok, pick[ok]], split.halves_hi[two, other[two]]]).reshape(-1, n)
    parent = np.concatenate([np.repeat(ok, 2), np.repeat(two, 2)])
    if split.cheap is not None:   # the cheap pass bounded these halves already (forward, rows): CROWN on
        # the ones it leaves open; indices into the halves' order (box, input, side)
        idx = np.concatenate([((ok * n + pick[ok]) * 2)[:, None] + np.arange(2),
                              ((two * n + other[two]) * 2)[:, None] + np.arange(2)]).reshape(-1)
        c_low, c_lin, c_nb = split.cheap
        ch_low, ch_lin, ch_nb = tighten_region(ir, dj, ch_lo, ch_hi, c_low[idx], c_lin[idx],
                                               NodeBounds([v[idx] for v in c_nb.lower], [v[idx] for v in c_nb.upper]),
                                               deadline)
    else:
        ch_low, ch_lin, ch_nb = bound_region(ir, dj, ch_lo, ch_hi, deadline,
                                             clip=batch.parent_bounds(parent, [v.size for v in ir.nodes]))
    stats["boxes"] += ch_lo.shape[0]
    pair = np.max(ch_low - dj.d, axis=1).reshape(-1, 2)
    keep = np.ones(pair.shape[0], dtype=bool)
    if two.size:  # pairs [0, len(ok)) are the first pick's, then the influence pick's
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
    hints = [batch.boxes[p].hint for p in parent]
    ch_best = np.maximum(ch_best, hinted_lower(ir, dj, ch_lo, ch_hi, ch_nb, hints, deadline))
    want = np.nonzero(~(ch_best > 0) & np.array([h is None or s.lp_every_level for h in hints]))[0]
    fresh = lp_hints(lp, ch_lo, ch_hi, ch_nb, want, deadline, stats, s)
    ch_best = np.maximum(ch_best, hinted_lower(ir, dj, ch_lo, ch_hi, ch_nb, fresh, deadline))
    return Children(ch_lo, ch_hi, ch_best, ch_row, ch_lin,
                    [f if f is not None else h for f, h in zip(fresh, hints)], ch_nb, parent)


def halvings(lo: np.ndarray, hi: np.ndarray, region_lo: np.ndarray, region_hi: np.ndarray) -> np.ndarray:
    """How deep each box (lo, hi: (B, n)) is: Σ_i log2(region width_i / box width_i) over the inputs
    of positive region width (B,); inf for a box of zero width along an input where the region has
    a positive one."""
    root_w = region_hi - region_lo
    w = hi - lo
    with np.errstate(divide="ignore"):
        return np.sum(np.where(root_w > 0, np.log2(np.where(w > 0, root_w / np.where(w > 0, w, 1.0),
                                                              math.inf)), 0.0), axis=1)


def frontier_of(ir: ControllerIR, dj: Disjunct, boxes: list, deadline: float, closed: list,
                s: SearchSettings = DEFAULT_SEARCH, probed: bool = False) -> list[Box]:
    """Heap entries for open boxes ((lo, hi) pairs, bounded again in batches of
    :func:`batch_size`, ``seq`` in box order, no LP hint, ``probed`` as given); boxes that close go to
    ``closed``. Raises BoundsTimeout."""
    out: list[Box] = []
    step = batch_size(ir, s)
    for k in range(0, len(boxes), step):
        los = np.array([b[0] for b in boxes[k:k + step]])
        his = np.array([b[1] for b in boxes[k:k + step]])
        low, lin, _ = bound_region(ir, dj, los, his, deadline)
        best = np.max(low - dj.d, axis=1)
        row = np.argmax(low - dj.d, axis=1)
        for j in range(los.shape[0]):
            if best[j] > 0:
                closed.append((los[j], his[j]))
            else:
                out.append(Box(float(best[j]), len(out), los[j], his[j], lin[j], int(row[j]), None, probed))
    return out
