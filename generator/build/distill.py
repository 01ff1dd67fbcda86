"""Certified distillation: the network → a LUT whose every cell is PROVEN or RESOLVED.

The quantized grid is cut into slices (:func:`slices_of`: the boxes of the first address
bits) and each slice partitioned recursively in level space (DESIGN.md, "Distillation"),
breadth first, every level bounded in vectorised CROWN passes of :data:`BOUND_CHUNK`
boxes (:func:`bound_boxes`: CROWN, the adaptive lower ReLU relaxation, then the best of four):

1. **Boxes.** The candidate action a of a box is its centre's (IR, float64). CROWN lower
   bounds of ``y_a - y_j`` (argmax; ``y_j - y_a`` for argmin) that are > 0 for every
   j != a prove that a wins strictly everywhere in the closed box (exact rational cell
   edges rounded outward), so every cell of it is **proven** a (ties cannot occur there).
   Otherwise the box is halved along the input with the most levels left (ties broken by
   the larger influence ``sum_j |Λ_j,i| · width_i``, then the lower index) down to single
   cells.
2. **Single cells.** A cell the bounds leave open is first searched for witnesses (centre
   and corners pulled inside the half-open cell: :func:`~.numerics.corner_signs`, all of
   them up to 6 inputs, a fixed sample beyond); then bisected inside (continuous boxes, all
   such cells in one batch per round) up to ``cell_boxes`` boxes; each sub-box's centre and
   the corner minimising its worst margin's linear bound are witness candidates; cells
   still open get ``RANDOM_LOOK`` seeded random points (seed = address). Every witness is
   **replayed** on the IR and on onnxruntime float32
   (:func:`mi_certify.verification.nn.nn_verify.replay_many`, tolerance 1e-4). A cell with
   replayed witnesses of two actions holds both; a cell neither proven nor witnessed
   within the budget is **undecided**. Both are **resolved** by the sla.yaml policy
   (``distill.resolve``): ``conservative`` (default: the conservative action, confident),
   ``centre`` (the centre's action, not confident) or ``refuse`` (the build fails), and
   listed with their witnesses.

Cost: linear in the number of boxes bounded (nothing is enumerated over 2^inputs: no grid
of vertices, no corner set beyond a fixed sample); memory: the table (a few bytes a cell)
and the partition as arrays (:func:`box_dtype`: 2n + 12 bytes a box).

Budgets are counted in boxes, never seconds, so the LUT is the same on any machine.
Ties at a cell centre follow numpy/onnxruntime: the lowest index wins.

Confident bit (a certified lower bound): for argmax,
``p_a = 1 / sum_j exp(y_j - y_a) >= 1 / (1 + sum_{j != a} exp(-lb(y_a - y_j)))`` with the
CROWN lower bounds of the margins (for argmin the softmax of ``-y``); for a cell proven
by bisection, the minimum over its sub-boxes. A box whose bound is under the threshold
is split further; a single cell under it is not confident.

The slices run in two worker processes (or on a Dask cluster: ``backend``,
:mod:`mi_certify.verification.tools.backends`); results are merged in slice order, so the LUT and the
partition do not depend on the backend, the number of workers or scheduling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mi_certify.generator.core.ir import ControllerIR
from mi_certify.generator.core.lut import PROVEN, RESOLVED, Lut, decode
from mi_certify.generator.frontend.model import LoadedModel
from mi_certify.generator.core.numerics import corner_signs, softmax_lower, sum_last
from mi_certify.generator.core.spec import Spec


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
    """The LUT, the partition (final boxes, :func:`box_dtype`), the replayed witnesses of the
    resolved cells (:func:`witness_dtype`, address ascending), the policy, statistics."""

    lut: Lut
    boxes: np.ndarray
    witnesses: np.ndarray
    policy: str
    stats: dict

    def resolved(self, spec: Spec) -> list[dict]:
        """The resolved cells as records (:func:`resolved_cells`)."""
        return resolved_cells(spec, self.boxes, self.witnesses, self.policy)


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


def _addresses(spec: Spec, qlo: np.ndarray, qhi: np.ndarray) -> np.ndarray:
    addr = np.zeros(1, dtype=np.int64)
    for i, inp in enumerate(spec.inputs):
        lv = np.arange(qlo[i], qhi[i] + 1, dtype=np.int64)
        addr = (addr[:, None] << inp.bits | lv[None, :]).reshape(-1)
    return addr


def _split_all(QLO: np.ndarray, QHI: np.ndarray, influence: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Halve every box (B, n) along the input with the most levels left (ties: larger
    influence, then lower index): the two halves of box b are rows b and B + b."""
    spans = QHI - QLO
    widest = spans == spans.max(axis=1, keepdims=True)
    axis = np.argmax(np.where(widest, influence, -np.inf), axis=1)  # first maximum: lowest index
    rows = np.arange(len(QLO))
    mid = (QLO[rows, axis] + QHI[rows, axis]) // 2
    a_hi, b_lo = QHI.copy(), QLO.copy()
    a_hi[rows, axis], b_lo[rows, axis] = mid, mid + 1
    return np.vstack([QLO, b_lo]), np.vstack([a_hi, QHI])


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
    from mi_certify.verification.nn.nn_verify import replay_many
    from mi_certify.verification.nn.properties import Disjunct, decoded_rows

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


#: Box methods (``method`` code in the box table), in code order.
METHODS = ("bounds", "bounds+cell split", "sampling", "bounds+cell split+sampling",
           "bounds+cell split (budget spent)")
#: The method code of a cell left undecided within its budget.
UNDECIDED = 4
#: Box verdicts (``verdict`` code in the box table), in code order.
VERDICTS = ("proven", "resolved")
#: Boxes bounded in one vectorised pass (bounded working memory; the bounds of a box do not
#: depend on its batch).
BOUND_CHUNK = 1024
#: Open single cells decided together (their witness candidates and bisection boxes are
#: held at once: 65 candidates a cell beyond 6 inputs).
DECIDE_CHUNK = 2048
#: Top-level slices handed to the worker processes (the partition starts from them).
MAX_SLICES = 64


def box_dtype(n_inputs: int) -> np.dtype:
    """One final box of the partition (little-endian, packed, 2n + 12 bytes): inclusive level
    ranges per input (levels < 256: at most 8 bits per input), the action token, verdict and
    method codes (:data:`VERDICTS`, :data:`METHODS`), the confident bit, and for a box proven
    by bounds the CROWN margin lower bound (NaN otherwise)."""
    return np.dtype([("level_lo", "u1", (n_inputs,)), ("level_hi", "u1", (n_inputs,)), ("action", "u1"),
                     ("verdict", "u1"), ("method", "u1"), ("confident", "u1"), ("margin_lower", "<f8")])


def witness_dtype(n_inputs: int) -> np.dtype:
    """One replayed witness of a resolved cell: its LUT address, the action token it shows,
    the point (float64 per input)."""
    return np.dtype([("address", "<u4"), ("action", "u1"), ("x", "<f8", (n_inputs,))])


def addresses_of(spec: Spec, Q: np.ndarray) -> np.ndarray:
    """LUT addresses (int64) of single cells given as levels (B, n) (input 0 most significant)."""
    addr = np.zeros(len(Q), dtype=np.int64)
    for i, inp in enumerate(spec.inputs):
        addr = addr << inp.bits | Q[:, i].astype(np.int64)
    return addr


class _Partition:
    """The final boxes and witnesses of one slice, collected as arrays (a few bytes per box)."""

    def __init__(self, n: int):
        self.n = n
        self.boxes: list[np.ndarray] = []
        self.witnesses: list[np.ndarray] = []

    def add(self, QLO, QHI, action, verdict: int, method: int, confident, margin=None) -> None:
        b = np.zeros(len(QLO), dtype=box_dtype(self.n))
        b["level_lo"], b["level_hi"], b["action"] = QLO, QHI, action
        b["verdict"], b["method"], b["confident"] = verdict, method, confident
        b["margin_lower"] = np.nan if margin is None else margin
        self.boxes.append(b)

    def witness(self, address: int, action: int, x) -> None:
        w = np.zeros(1, dtype=witness_dtype(self.n))
        w["address"], w["action"], w["x"] = address, action, x
        self.witnesses.append(w)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return (np.concatenate(self.boxes) if self.boxes else np.zeros(0, box_dtype(self.n)),
                np.concatenate(self.witnesses) if self.witnesses else np.zeros(0, witness_dtype(self.n)))


def _distill_slice(args) -> tuple[np.ndarray, np.ndarray, dict]:
    """Worker: distill the level box [qlo, qhi]; returns (boxes (:func:`box_dtype`), witnesses
    (:func:`witness_dtype`), stats).

    Breadth first: every level of the partition is bounded in vectorised CROWN passes (the
    candidate action of a box is its centre's); a single cell the bounds leave open is first
    searched for witnesses of two actions, then split inside (:func:`bisect_cells`) up to
    ``opts.cell_boxes`` boxes; what is still open gets a seeded random look for witnesses
    and, without two, is resolved as undecided. Memory: the frontier and the final boxes as
    arrays, O(boxes · inputs) bytes.
    """
    spec, model, qlo0, qhi0, opts = args
    ir = model.ir
    thr = spec.confidence_threshold
    edges = cell_edges(spec)
    part = _Partition(len(spec.inputs))
    stats = {"boxes": 0, "bound_calls": 0, "sampled_cells": 0, "cell_split_boxes": 0,
             "split_proven_cells": 0, "undecided_cells": 0}

    def confident(low) -> np.ndarray:
        return np.ones(low.shape[:-1], dtype=bool) if thr is None else softmax_lower(low) >= thr

    # 1. the partition of the slice, level by level
    QLO, QHI = np.array(qlo0, dtype=np.int64)[None], np.array(qhi0, dtype=np.int64)[None]
    opened = []  # (levels, action) of single cells the bounds left open, per level
    while len(QLO):
        stats["boxes"] += len(QLO)
        stats["bound_calls"] += len(QLO)
        LO, HI = box_of_cells(edges, QLO, QHI)
        A = decode(spec, ir.evaluate((LO + HI) / 2))[0]
        single = np.all(QLO == QHI, axis=1)
        LOW, INF, _ = bound_boxes(spec, ir, LO, HI, A, retry=single)
        conf = confident(LOW)
        ok = np.all(LOW > 0, axis=1) & (conf | single)
        part.add(QLO[ok], QHI[ok], A[ok], 0, 0, conf[ok], LOW[ok].min(axis=1, initial=np.inf))
        opened.append((QLO[single & ~ok], A[single & ~ok]))
        split = ~single & ~ok
        QLO, QHI = _split_all(QLO[split], QHI[split], INF[split])
    Q = np.concatenate([q for q, _ in opened])
    A = np.concatenate([a for _, a in opened]).astype(np.int64)
    for s in range(0, len(Q), DECIDE_CHUNK):  # cells are decided independently: bounded memory
        _decide_cells(spec, model, opts, edges, Q[s:s + DECIDE_CHUNK], A[s:s + DECIDE_CHUNK], part, stats)
    return (*part.arrays(), stats)


def _decide_cells(spec: Spec, model: LoadedModel, opts: DistillOptions, edges, Q: np.ndarray, A: np.ndarray,
                  part: _Partition, stats: dict) -> None:
    """Single cells (levels Q (C, n), candidate actions A) whose box bound failed: witnesses of
    two actions resolve a cell; the others are bisected inside, then sampled, then resolved
    as undecided (:data:`METHODS`)."""
    ir = model.ir
    thr = spec.confidence_threshold
    LO, HI = box_of_cells(edges, Q, Q)
    addr = addresses_of(spec, Q)
    centre_act = decode(spec, ir.evaluate((LO + HI) / 2))[0]

    def resolve(c: int, wits: list[dict], method: int) -> None:
        tok, conf = (int(centre_act[c]), False) if opts.resolve == "centre" else (spec.conservative, True)
        part.add(Q[c:c + 1], Q[c:c + 1], tok, 1, method, conf)
        for w in wits:
            part.witness(int(addr[c]), w["token"], w["x"])

    found = _witnesses(spec, model, [(lo, hi, []) for lo, hi in zip(LO, HI)])
    rest = []
    for c, wits in enumerate(found):
        if len(wits) >= 2:
            stats["sampled_cells"] += 1
            resolve(c, wits, 2)
        else:
            rest.append(c)
    if not rest:
        return
    status, conf_low, hits, split_boxes = bisect_cells(spec, ir, [(LO[c], HI[c], int(A[c])) for c in rest],
                                                       opts.cell_boxes)
    stats["cell_split_boxes"] += split_boxes
    for k, c in enumerate(rest):  # cells left open by the budget: a seeded random look (seed = address)
        if status[k] == "budget":
            rng = np.random.default_rng(int(addr[c]))
            hits[k].extend(LO[c] + (HI[c] - LO[c]) * rng.random((RANDOM_LOOK, LO.shape[1])))
    looked = [k for k, st in enumerate(status) if st in ("witness", "budget")]
    found = dict(zip(looked, _witnesses(spec, model, [(LO[rest[k]], HI[rest[k]], hits[k]) for k in looked])))
    for k, c in enumerate(rest):
        a = int(A[c])
        if status[k] == "proven":
            stats["split_proven_cells"] += 1
            part.add(Q[c:c + 1], Q[c:c + 1], a, 0, 1, bool(thr is None or conf_low[k] >= thr))
            continue
        wits = found[k]
        if len(wits) >= 2:
            stats["sampled_cells"] += 1
            resolve(c, wits, 3)
            continue
        # undecided within the budget: resolved like a cell holding several actions
        stats["undecided_cells"] += 1
        if not any(w["token"] == a for w in wits):
            wits = [{"token": a, "x": (LO[c] + HI[c]) / 2}] + wits
        resolve(c, wits, UNDECIDED)


def _bound_pass(spec: Spec, ir: ControllerIR, LO: np.ndarray, HI: np.ndarray, A, slopes) -> tuple:
    """One CROWN pass with the lower ReLU relaxations ``slopes``, in chunks of :data:`BOUND_CHUNK`."""
    from mi_certify.verification.nn.bounds import crown_bounds, output_matrix_lower
    from mi_certify.verification.nn.properties import decoded_rows

    n_act = len(spec.actions)
    rows = {a: -decoded_rows(n_act, a, spec.decode)[0] for a in set(int(a) for a in A)}
    LOW, INF, CORNER = [], [], []
    for s in range(0, len(A), BOUND_CHUNK):  # chunks: bounded working memory, cache-sized arrays
        lo, hi, acts = LO[s:s + BOUND_CHUNK], HI[s:s + BOUND_CHUNK], A[s:s + BOUND_CHUNK]
        D = np.stack([rows[int(a)] for a in acts])
        low, lin = output_matrix_lower(ir, D, lo, hi, crown_bounds(ir, lo, hi, slopes), slopes)
        worst = lin[np.arange(len(acts)), np.argmin(low, axis=1)]
        LOW.append(low)
        INF.append(sum_last(np.swapaxes(np.abs(lin), 1, 2)) * (hi - lo))
        CORNER.append(np.where(worst >= 0, lo, hi))
    return np.concatenate(LOW), np.concatenate(INF), np.concatenate(CORNER)


def bound_boxes(spec: Spec, ir: ControllerIR, LO: np.ndarray, HI: np.ndarray, A,
                retry: np.ndarray | None = None) -> tuple:
    """Lower bounds (B, n_act - 1) of the winning margins of A[b] over each closed box [LO, HI],
    the input influence (B, n) and, per box, the corner minimising the linear bound of its
    worst margin.

    A cascade: CROWN (over :func:`~mi_certify.verification.nn.bounds.forward_bounds`, only the
    neurons they leave unstable) with the adaptive lower ReLU relaxation first; a box it does not prove
    (margins > 0 and, with confidence gating, the softmax bound >= threshold) and that
    ``retry`` marks (default: every box; the partition retries only single cells, a larger
    box is split instead, which is cheaper) is bounded again with the best of all four
    (:data:`~mi_certify.verification.nn.bounds.LOWER_SLOPES`) unless the network decodes another
    action at its minimising corner (then no bound can prove it). (The best of four for the
    margins alone, over the adaptive pass's hidden bounds, was tried as a middle step on ACAS Xu
    1_1: it proved almost nothing the full retry does not, and cost 15 %.) The result is a
    deterministic function of the box and its mark, so ``check`` recomputes every recorded
    margin bit for bit with this function.
    """
    from mi_certify.verification.nn.bounds import LOWER_SLOPES

    A = np.asarray(A, dtype=np.int64)
    if not len(A):
        n = LO.shape[1]
        return np.zeros((0, len(spec.actions) - 1)), np.zeros((0, n)), np.zeros((0, n))
    thr = spec.confidence_threshold
    LOW, INF, CORNER = _bound_pass(spec, ir, LO, HI, A, LOWER_SLOPES[:1])
    ok = np.all(LOW > 0, axis=1) & (True if thr is None else softmax_lower(LOW) >= thr)
    retry = np.nonzero(~ok & (True if retry is None else retry))[0]
    if retry.size:
        retry = retry[decode(spec, ir.evaluate(CORNER[retry]))[0] == A[retry]]
    if retry.size:
        low, inf, corner = _bound_pass(spec, ir, LO[retry], HI[retry], A[retry], LOWER_SLOPES)
        LOW[retry], INF[retry], CORNER[retry] = low, inf, corner
    return LOW, INF, CORNER


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
    _, INF0, _ = bound_boxes(spec, ir, np.array([c[0] for c in cells]), np.array([c[1] for c in cells]),
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
        LOW, INF, CORNER = bound_boxes(spec, ir, LO, HI, [cells[c][2] for c, _, _ in boxes])
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


#: Build memory model (measured with /usr/bin/time on the shipped reference at 16 and 20
#: address bits, every stage but place and route): a base plus bytes per LUT cell.
BASE_BYTES = 400 * 2**20
BYTES_PER_CELL = 160
#: Seconds of distillation per cell and per network weight on 2 cores (the reference: 400
#: weights, 53 s at 2^20 cells); the time class is this times 4 (boundaries differ).
SECONDS_PER_CELL_WEIGHT = 1.3e-7
#: Below this :func:`estimate` (seconds), :func:`distill` decides every slice in this process: starting
#: two worker interpreters (imports of numpy, onnx, onnxruntime) took 2.8 s more than the whole
#: distillation of an 8-cell grid inline (0.68 s against 3.44 s, this machine, idle).
INLINE_BELOW_S = 0.5
TIME_CLASSES = ((60, "under a minute"), (900, "minutes"), (3600, "tens of minutes"), (float("inf"), "hours"))


def estimate(spec: Spec, ir: ControllerIR, workers: int = 2) -> dict:
    """What a build of ``spec`` will take, before distilling: {"cells", "memory_bytes" (peak
    resident, all stages), "seconds" (distillation, pessimistic), "time_class"}. A model
    fitted on measurements (:data:`BYTES_PER_CELL`, :data:`SECONDS_PER_CELL_WEIGHT`): cells
    near a decision boundary cost more, so the time is a class, not a promise."""
    from mi_certify.generator.core.ir import AffineNode
    cells = 1 << spec.address_bits
    weights = sum(int(w.size) for n in ir.nodes if isinstance(n, AffineNode) for _, w in n.terms)
    seconds = 4 * cells * max(weights, 1) * SECONDS_PER_CELL_WEIGHT * 2 / max(workers, 1)
    return {"cells": cells, "memory_bytes": BASE_BYTES + BYTES_PER_CELL * cells, "seconds": seconds,
            "time_class": next(name for limit, name in TIME_CLASSES if seconds < limit)}


def slices_of(spec: Spec) -> list[tuple[np.ndarray, np.ndarray]]:
    """The top-level slices: the boxes of the first ``min(6, address_bits)`` address bits (a
    prefix of the address fixes the leading levels, so each slice is a box of levels), at
    most :data:`MAX_SLICES`, in address order."""
    bits = [i.bits for i in spec.inputs]
    prefix = min(int(np.log2(MAX_SLICES)), sum(bits))
    out = []
    for p in range(1 << prefix):
        lo = np.zeros(len(bits), dtype=np.int64)
        hi = np.array([(1 << b) - 1 for b in bits], dtype=np.int64)
        left, rest = prefix, p
        for i, b in enumerate(bits):
            take = min(b, left)
            if take == 0:
                break
            top = (rest >> (left - take)) & ((1 << take) - 1)
            lo[i] = top << (b - take)
            hi[i] = lo[i] + (1 << (b - take)) - 1
            left -= take
        out.append((lo, hi))
    return out


def distill(spec: Spec, model: LoadedModel, opts: DistillOptions | None = None,
            progress=None, backend=None) -> DistillResult:
    """Build the certified LUT over the whole grid of ``spec`` for ``model`` (its IR is bounded;
    witnesses of RESOLVED cells are replayed on its onnxruntime session).

    Args:
        progress: called as ``progress(cells_decided, cells_total)`` after every slice.
        backend: where the slices run (:mod:`mi_certify.verification.tools.backends`: this process, our own
            processes, a Dask cluster); None: ``opts.workers`` processes of our own. The result is
            byte-identical on every backend (merged in slice order).
    Returns:
        DistillResult; ``lut.status`` holds PROVEN or RESOLVED for every cell.
    Cost: linear in the number of final boxes (no grid of vertices, no corner set); memory
    O(cells) bytes for the table plus O(boxes · inputs) for the partition.
    """
    from mi_certify.verification.tools.backends import BackendSpec, map_ordered, open_backend

    opts = opts or DistillOptions()
    n = 1 << spec.address_bits
    slices = [(spec, model, lo, hi, opts) for lo, hi in slices_of(spec)]
    per = n // len(slices)
    own = backend is None
    if own:  # opts.workers processes of our own (this process when 1, or when the work is below
        # what starting them costs: INLINE_BELOW_S of :func:`estimate`): no Dask
        workers = opts.workers if estimate(spec, model.ir, opts.workers)["seconds"] >= INLINE_BELOW_S else 1
        backend = open_backend(BackendSpec(workers=workers))
    try:  # results come back in slice order, whatever the workers' number and order
        results = map_ordered(_distill_slice, slices, backend,
                              on_result=(lambda k, done, _: progress(done * per, n)) if progress else None)
    finally:
        if own:
            backend.close()
    boxes = np.concatenate([r[0] for r in results])
    witnesses = np.concatenate([r[1] for r in results])
    witnesses = witnesses[np.argsort(witnesses["address"], kind="stable")]
    stats: dict[str, int] = {}
    for r in results:
        for k, v in r[2].items():
            stats[k] = stats.get(k, 0) + v
    return DistillResult(lut_of_boxes(spec, boxes), boxes, witnesses, opts.resolve,
                         stats)


def box_addresses(spec: Spec, boxes: np.ndarray):
    """Yield (box indices, addresses (len, cells per box)) for the boxes, grouped by the shape
    of the box (vectorised: a few distinct shapes cover every box)."""
    bits = [i.bits for i in spec.inputs]
    lo = boxes["level_lo"].astype(np.int64)
    span = boxes["level_hi"].astype(np.int64) - lo
    base = np.zeros(len(boxes), dtype=np.int64)
    for i, b in enumerate(bits):
        base = base << b | lo[:, i]
    shapes, inverse = np.unique(span, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    for k, sh in enumerate(shapes):
        idx = np.nonzero(inverse == k)[0]
        off = _addresses(spec, np.zeros(len(bits), dtype=np.int64), sh)
        yield idx, base[idx, None] + off[None, :]


def lut_of_boxes(spec: Spec, boxes: np.ndarray) -> Lut:
    """The LUT the partition gives: every cell the action, confident bit and status of its box.

    Raises:
        ValueError when the boxes do not cover every cell exactly once.
    """
    n = 1 << spec.address_bits
    tokens = np.zeros(n, dtype=np.uint8)
    conf = np.zeros(n, dtype=bool)
    code = np.full(n, 255, dtype=np.uint8)
    cover = np.zeros(n, dtype=np.uint8)
    for idx, addr in box_addresses(spec, boxes):
        tokens[addr] = boxes["action"][idx, None]
        conf[addr] = boxes["confident"][idx, None].astype(bool)
        code[addr] = boxes["verdict"][idx, None]
        np.add.at(cover, addr.reshape(-1), 1)
    if np.any(cover != 1):
        raise ValueError(f"the boxes leave {int(np.sum(cover == 0))} cells uncovered and cover "
                         f"{int(np.sum(cover > 1))} more than once")
    status = np.array([PROVEN, RESOLVED], dtype=object)[code]
    return Lut(tokens, conf, status)


def resolved_cells(spec: Spec, boxes: np.ndarray, witnesses: np.ndarray, policy: str) -> list[dict]:
    """The resolved cells as records (address ascending): {"address", "levels", "actions" (shown
    by witnesses, in witness order), "witnesses" [{"action", "x"}], "undecided",
    "resolved_to", "policy"}."""
    names = [a.name for a in spec.actions]
    res = boxes[boxes["verdict"] == 1]
    res = res[np.argsort(addresses_of(spec, res["level_lo"]), kind="stable")]
    addr = addresses_of(spec, res["level_lo"])
    starts = np.searchsorted(witnesses["address"], addr, side="left")
    ends = np.searchsorted(witnesses["address"], addr, side="right")
    out = []
    for b, a, s, e in zip(res, addr, starts, ends):
        wits = [{"action": names[int(w["action"])], "x": w["x"].tolist()} for w in witnesses[s:e]]
        out.append({"address": int(a), "levels": b["level_lo"].astype(int).tolist(),
                    "actions": [w["action"] for w in wits], "witnesses": wits,
                    "undecided": int(b["method"]) == UNDECIDED, "resolved_to": names[int(b["action"])],
                    "policy": policy})
    return out


def fidelity(spec: Spec, model: LoadedModel, lut: Lut, n_points: int = 100_000,
             seed: int = 0) -> tuple[dict, dict]:
    """Agreement of the LUT with the network (``model``) on ``n_points`` uniform random points.

    Points are quantized exactly (the runtime quantizer's levels, vectorised:
    :func:`~mi_certify.generator.core.lut.point_addresses`); the network's action is the IR's
    argmax/argmin in float64, fixed-order arithmetic (lowest index on ties), so the
    figures are the same on every machine. onnxruntime (float32, whose kernels differ
    by CPU) decides the same points for the diagnostics.

    Returns:
        (figures: {"points", "agree", "agreement", "proven_points", "proven_agree",
        "disagreements_in_proven_cells" (first 10)}; machine-dependent diagnostics:
        {"points", "lut_agree_onnxruntime", "ir_vs_onnxruntime_decisions_differ"}).
    """
    from mi_certify.generator.core.lut import point_addresses

    lo = np.array([i.min for i in spec.inputs])
    hi = np.array([i.max for i in spec.inputs])
    rng = np.random.default_rng(seed)
    pts = (lo + (hi - lo) * rng.random((n_points, lo.size))).astype(np.float32).astype(np.float64)
    pts = np.clip(pts, lo, hi)
    addrs = point_addresses(spec, pts)[0]
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
