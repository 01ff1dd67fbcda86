"""Train a meta controller from a measured profile (``mi-certify train``).

Input: a profile CSV (``mi-certify profile``, docs/training.md) with the controller's
inputs in physical units and, per action, the measured latency (ms) and accuracy loss
(percentage points vs fp32); and the sla.yaml the controller will be built with.

1. **Labels.** For each row, the candidates are the actions whose measured latency and
   accuracy loss meet that action's SLA (``sla.latency_ms``, ``sla.accuracy_loss_pct``;
   an absent limit is not judged; a missing measurement fails) and that the sla.yaml
   ``forbid`` / ``require`` properties permit at the row's inputs, where each property
   applies over its *guard box* (its ``when`` box widened to the edges of the
   quantization cells it touches). The label is the candidate of least latency; a tie
   within ``tie_ms`` for the least latency, or no candidate, gives the conservative action.
2. **Property-aware augmentation.** For each forbid/require property, ``augment`` rows
   are copied from the training split (seeded) with the guard box's inputs redrawn
   uniformly inside it; their measured latencies are kept and they are labelled by
   the same rule, so the network sees the property's region with the labels the
   property allows. The build's formal verification remains the judge.
3. **Network.** :class:`~mi_certify.generator.frontend.mlp.DeterministicMLP` (ReLU, two hidden
   layers, L-BFGS, fixed seed; scikit-learn's model and defaults in fixed-order arithmetic,
   so the same network on every machine) on inputs normalised to [0, 1] over the sla.yaml envelope;
   exported as ONNX (MatMul+Add, Gemm, MatMul+Add; normalisation folded into layer 1
   so the model takes physical units; one logit per action). An action no label
   names gets the logit of the conservative action minus ``ABSENT_MARGIN``, so it
   can never win the argmax.
4. **Checks.** ``onnx.checker`` (full), and onnxruntime's decision equals the trainer's
   on every row and on random points of the envelope.
5. **Report.** Held-out accuracy, confusion matrix, regret in ms against the best action
   (mean, p95, max), label distribution, seed, data hash (JSON and Markdown).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mi_certify.generator.core.errors import MiCertifyError
from mi_certify.generator.core.spec import Spec

__all__ = ["ABSENT_MARGIN", "HeldOutRows", "ProfileData", "TrainError", "TrainOptions", "TrainResult", "guard_boxes",
           "label_rows", "lut_fsm_report", "read_profile", "train_controller"]

#: Logit gap below the conservative action given to an action that no label names.
ABSENT_MARGIN = 16.0
#: Training rows added per counterexample of a ``train`` round, inside its LUT cell (chosen: a
#: quarter of the reference's training rows per guard box).
COUNTEREXAMPLE_ROWS = 64


class TrainError(MiCertifyError):
    """The profile CSV or a training option is unusable, or the exported model fails its checks."""


@dataclass
class ProfileData:
    """Rows of a profile: ``x`` [n, inputs] physical units; ``latency_ms`` and ``accuracy_loss_pct``
    [n, actions] (NaN = not measured); ``lines`` the 1-based CSV line of each row;
    ``dropped`` reason -> number of rows left out."""

    x: np.ndarray
    latency_ms: np.ndarray
    accuracy_loss_pct: np.ndarray
    lines: np.ndarray
    dropped: dict
    sha256: str
    path: str


@dataclass(frozen=True)
class TrainOptions:
    """hidden: sizes of the two hidden layers. alpha: L2 penalty. max_iter: L-BFGS iterations.
    holdout: share of rows held out for the report. augment: synthetic rows per forbid/require
    property (None = as many as training rows). tie_ms: latencies within this of the least
    count as a tie. seed: split, augmentation and initial weights. certify: "none" (points only, the
    default) or "cells" (certified training over the LUT cells and the property guard boxes,
    :mod:`.certified`; docs/training.md, "Certified training"); certify_weight: weight of the cell
    term against the data term; certify_iter: L-BFGS iterations per stage of the ε schedule."""

    hidden: tuple[int, int] = (16, 16)
    alpha: float = 1.0
    max_iter: int = 3000
    holdout: float = 0.25
    augment: int | None = None
    tie_ms: float = 0.0
    seed: int = 0
    certify: str = "none"
    certify_weight: float = 1.0
    certify_iter: int = 150

    def check(self) -> None:
        if len(self.hidden) != 2 or any(h < 1 or h > 1024 for h in self.hidden):
            raise TrainError("--hidden: two layer sizes in [1, 1024], e.g. 16,16")
        if not (0.0 < self.holdout < 0.9):
            raise TrainError("--holdout must be in (0, 0.9)")
        if not (self.alpha >= 0.0 and math.isfinite(self.alpha)):
            raise TrainError("--alpha must be a finite number >= 0")
        if self.max_iter < 1:
            raise TrainError("--max-iter must be at least 1")
        if self.augment is not None and self.augment < 0:
            raise TrainError("--augment must be >= 0")
        if not (self.tie_ms >= 0.0 and math.isfinite(self.tie_ms)):
            raise TrainError("--tie-ms must be a finite number >= 0")
        if self.certify not in ("none", "cells"):
            raise TrainError(f"--certify {self.certify!r}: expected none or cells")
        if not (self.certify_weight > 0.0 and math.isfinite(self.certify_weight)):
            raise TrainError("--certify-weight must be a finite number > 0")
        if self.certify_iter < 1:
            raise TrainError("--certify-iter must be at least 1")

    def report_options(self) -> dict:
        """The options as the report records them (the certified-training ones only when on, so a
        default run's report is what it was before they existed)."""
        out = {**asdict(self), "hidden": list(self.hidden)}
        if self.certify == "none":
            for k in ("certify", "certify_weight", "certify_iter"):
                del out[k]
        return out


@dataclass(frozen=True)
class HeldOutRows:
    """The held-out rows of a run: ``x`` [n, inputs] physical units; ``labels`` [n] (label rule);
    ``latency_ms``, ``accuracy_loss_pct`` [n, actions] as measured (NaN = not measured);
    ``candidates`` [n, actions] (label rule); ``network`` [n] the trained network's decisions."""

    x: np.ndarray
    labels: np.ndarray
    latency_ms: np.ndarray
    accuracy_loss_pct: np.ndarray
    candidates: np.ndarray
    network: np.ndarray


@dataclass
class TrainResult:
    """The exported model's bytes, the training report (a JSON-able dict), the fitted
    classifier (it takes inputs normalised to [0, 1] over the envelope) and the held-out rows
    (for :func:`lut_fsm_report`)."""

    model_bytes: bytes
    report: dict
    classifier: object = None
    held_out: HeldOutRows | None = None


# ---------------------------------------------------------------------------------------
# reading

def read_profile(path: str | Path, spec: Spec) -> ProfileData:
    """Read a profile CSV for ``spec``'s inputs and actions.

    Columns used: one per input name, ``latency_ms.<action>`` and ``accuracy_loss_pct.<action>``
    per action; other columns are ignored. An empty feature cell (the probe could not read it)
    or a feature outside the envelope (a probe fault at run time) drops the row (counted); an
    empty measurement is "not measured" (the action then fails its SLA in that row).

    Raises:
        TrainError naming file, line and column: unreadable file, missing column, a cell that
        is not a number, a negative measurement, or no usable row.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
        text = raw.decode("utf-8")
    except OSError as exc:
        raise TrainError(f"cannot read: {exc.strerror or exc}", file=p) from None
    except UnicodeDecodeError:
        raise TrainError("not UTF-8 text (is this a profile CSV?)", file=p) from None
    rows = list(csv.reader(text.splitlines()))
    if not rows or not any(c.strip() for c in rows[0]):
        raise TrainError("empty file: expected a header row (docs/training.md)", file=p)
    header = [c.strip() for c in rows[0]]
    dup = next((c for i, c in enumerate(header) if c in header[:i]), None)
    if dup is not None:
        raise TrainError(f"duplicate column '{dup}'", file=p, where="line 1")
    inputs = [i.name for i in spec.inputs]
    actions = [a.name for a in spec.actions]
    need = inputs + [f"latency_ms.{a}" for a in actions] + [f"accuracy_loss_pct.{a}" for a in actions]
    col = {}
    for n in need:
        if n not in header:
            raise TrainError(f"no column '{n}' (the header needs every input of {spec.path} and "
                             "latency_ms.<action>, accuracy_loss_pct.<action> per action)", file=p, where="line 1")
        col[n] = header.index(n)
    lo = np.array([i.min for i in spec.inputs])
    hi = np.array([i.max for i in spec.inputs])
    xs, lats, accs, lines = [], [], [], []
    dropped = {"unavailable input": 0, "input outside the envelope": 0}
    for ln, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise TrainError(f"{len(row)} cells, the header has {len(header)}", file=p, where=f"line {ln}")
        vals = {}
        for n in need:
            cell = row[col[n]].strip()
            if cell == "":
                vals[n] = math.nan
                continue
            try:
                v = float(cell)
            except ValueError:
                raise TrainError(f"{cell[:40]!r} is not a number", file=p, where=f"line {ln}, column '{n}'") from None
            if not math.isfinite(v):
                raise TrainError(f"{cell!r} is not a finite number (leave the cell empty for 'not measured')",
                                 file=p, where=f"line {ln}, column '{n}'")
            if n not in inputs and v < 0:
                raise TrainError(f"{v:g} is negative: latencies and accuracy losses are >= 0", file=p,
                                 where=f"line {ln}, column '{n}'")
            vals[n] = v
        x = np.array([vals[n] for n in inputs])
        if np.isnan(x).any():
            dropped["unavailable input"] += 1
            continue
        if np.any(x < lo) or np.any(x > hi):
            dropped["input outside the envelope"] += 1
            continue
        xs.append(x)
        lats.append([vals[f"latency_ms.{a}"] for a in actions])
        accs.append([vals[f"accuracy_loss_pct.{a}"] for a in actions])
        lines.append(ln)
    if len(xs) < 4:
        raise TrainError(f"{len(xs)} usable rows (dropped: {dropped}); at least 4 are needed", file=p)
    return ProfileData(np.array(xs), np.array(lats), np.array(accs), np.array(lines), dropped,
                       hashlib.sha256(raw).hexdigest(), str(p))


# ---------------------------------------------------------------------------------------
# labels

def _cell_edges(inp, value: float) -> tuple[float, float]:
    """The edges (physical units) of the quantization cell of input ``inp`` that holds ``value``
    (clamped to the envelope's first and last cells)."""
    step = (inp.max - inp.min) / (1 << inp.bits)
    q = min(max(math.floor((value - inp.min) / step), 0), (1 << inp.bits) - 1)
    return inp.min + q * step, inp.max if q == (1 << inp.bits) - 1 else inp.min + (q + 1) * step


def guard_boxes(spec: Spec) -> list[tuple[str, np.ndarray, np.ndarray, frozenset]]:
    """Per forbid/require property: (id, lo, hi, allowed tokens), the ``when`` box widened to the
    edges of the quantization cells it touches (inputs not named span the envelope)."""
    out = []
    n_act = len(spec.actions)
    for prop in spec.properties:
        if prop.kind == "output":
            continue
        lo = np.array([i.min for i in spec.inputs], dtype=float)
        hi = np.array([i.max for i in spec.inputs], dtype=float)
        for k, a, b in prop.when:
            lo[k], hi[k] = _cell_edges(spec.inputs[k], a)[0], _cell_edges(spec.inputs[k], b)[1]
        allowed = (frozenset(range(n_act)) - set(prop.forbid)) if prop.kind == "forbid" else frozenset(prop.require)
        out.append((prop.id, lo, hi, allowed))
    return out


def label_rows(x: np.ndarray, latency_ms: np.ndarray, accuracy_loss_pct: np.ndarray, spec: Spec,
               tie_ms: float = 0.0, boxes=None, return_candidates: bool = False) -> tuple:
    """Label each row (docs/training.md, "Label rule"). Returns (tokens [n], counts of why), and
    with ``return_candidates`` also the candidate mask [n, actions].

    ``boxes``: the property guard boxes (default :func:`guard_boxes` of ``spec``)."""
    boxes = guard_boxes(spec) if boxes is None else boxes
    n, n_act = latency_ms.shape
    cons = spec.conservative
    lat_lim = np.array([math.inf if a.latency_ms is None else a.latency_ms for a in spec.actions])
    acc_lim = np.array([math.inf if a.accuracy_loss_pct is None else a.accuracy_loss_pct for a in spec.actions])
    lat = np.where(np.isnan(latency_ms), math.inf, latency_ms)
    acc = np.where(np.isnan(accuracy_loss_pct), math.inf, accuracy_loss_pct)
    meets = (lat <= lat_lim) & (acc <= acc_lim) & np.isfinite(lat)
    meets &= ~(np.isnan(accuracy_loss_pct) & np.isfinite(acc_lim))
    allowed = np.ones((n, n_act), dtype=bool)
    constrained = np.zeros(n, dtype=bool)
    for _, lo, hi, ok in boxes:
        inside = np.all((x >= lo) & (x <= hi), axis=1)
        mask = np.array([a in ok for a in range(n_act)])
        allowed[inside] &= mask
        constrained |= inside
    cand = meets & allowed
    out = np.full(n, cons, dtype=np.int64)
    why = {"least latency": 0, "tie": 0, "none meets its SLA": 0, "inside a property guard box": int(constrained.sum())}
    for r in range(n):
        c = np.nonzero(cand[r])[0]
        if len(c) == 0:
            why["none meets its SLA"] += 1
            continue
        best = lat[r, c].min()
        near = c[lat[r, c] <= best + tie_ms]
        if len(near) > 1:
            why["tie"] += 1
            continue
        out[r] = int(near[0])
        why["least latency"] += 1
    return (out, why, cand) if return_candidates else (out, why)


# ---------------------------------------------------------------------------------------
# training and export

def _fit(z: np.ndarray, y: np.ndarray, opts: TrainOptions):
    from mi_certify.generator.frontend.mlp import DeterministicMLP

    return DeterministicMLP(hidden_layer_sizes=tuple(opts.hidden), alpha=opts.alpha, max_iter=opts.max_iter,
                            random_state=opts.seed, tol=1e-7).fit(z, y)


#: The ε schedule of certified training (Gowal et al. 2018, §4: ramp the region from the points to its
#: full size): the share of each cell's half-width bounded at each stage, after the point fit.
CERTIFY_SCHEDULE = (0.25, 0.5, 0.75, 1.0, 1.0)
#: Share of a given-up cell's half-width (times ε) trained to the conservative action.
GIVEN_UP_SHARE = 0.5


def _cell_arrays(spec: Spec, classes: np.ndarray, boxes: list, x_fit: np.ndarray, y_fit: np.ndarray):
    """Per LUT cell (address order): training rows per class (N, K), classes the properties allow
    (N, K), in a require property's guard box (N,); the cells' normalised centres and half-widths."""
    from mi_certify.generator.frontend.certified import cell_grid

    bits = [i.bits for i in spec.inputs]
    lo = np.array([i.min for i in spec.inputs])
    hi = np.array([i.max for i in spec.inputs])
    levels, centres, half = cell_grid(bits)
    K = len(classes)
    size = np.array([1 << b for b in bits])
    q = np.minimum(np.floor((x_fit - lo) / (hi - lo) * size).astype(np.int64), size - 1)
    addr = np.zeros(len(q), dtype=np.int64)
    for k, b in enumerate(bits):
        addr = addr << b | q[:, k]
    cls_of = {int(c): j for j, c in enumerate(classes)}
    counts = np.zeros((len(centres), K), dtype=np.int64)
    np.add.at(counts, (addr, np.array([cls_of[int(t)] for t in y_fit], dtype=np.int64)), 1)
    phys = lo + centres * (hi - lo)
    allowed = np.ones((len(centres), K), dtype=bool)
    required = np.zeros(len(centres), dtype=bool)
    by_id = {p.id: p for p in spec.properties}
    for pid, blo, bhi, ok in boxes:
        inside = np.all((phys >= blo) & (phys <= bhi), axis=1)
        allowed[inside] &= np.array([int(c) in ok for c in classes])
        if by_id[pid].kind == "require":
            required |= inside
    return counts, allowed, required, centres, half


def _fit_certified(z: np.ndarray, y: np.ndarray, opts: TrainOptions, spec: Spec, boxes: list,
                   x_fit: np.ndarray):
    """Certified training (docs/training.md, "Certified training"): the point fit, then one warm-started
    L-BFGS run per stage of :data:`CERTIFY_SCHEDULE` on the data loss plus ``certify_weight`` times the
    mean IBP cross-entropy over the cells (:func:`.certified.ibp_cross_entropy`), the targets planned
    again from the network at each stage (:func:`.certified.plan_cells`). Returns (classifier, record)."""
    from mi_certify.generator.frontend.certified import ibp_cross_entropy, ibp_margin_upper, plan_cells

    clf = _fit(z, y, opts)
    classes = clf.classes_
    if spec.conservative not in set(int(c) for c in classes):
        raise TrainError(f"--certify cells: no training row has the conservative action "
                         f"{spec.actions[spec.conservative].name} as its label (the cells certified training gives "
                         "up take it)")
    cons = int(np.nonzero(classes == spec.conservative)[0][0])
    counts, allowed, required, centres, half = _cell_arrays(spec, classes, boxes, x_fit, y)
    bits = [i.bits for i in spec.inputs]
    N = len(centres)
    stages = []
    for eps in CERTIFY_SCHEDULE:
        plan = plan_cells(bits, clf._logits(centres), counts, allowed, required, cons)
        cert = np.nonzero(plan.certify)[0]
        gave = np.nonzero(~plan.certify)[0]
        forb = gave[plan.forbidden[gave].any(axis=1)]
        scale = opts.certify_weight / N
        r_cert = np.broadcast_to(half * eps, (len(cert), len(half)))
        r_gave = np.broadcast_to(half * (eps * GIVEN_UP_SHARE), (len(gave), len(half)))
        r_forb = np.broadcast_to(half, (len(forb), len(half)))

        def extra(ws, bs, cert=cert, gave=gave, forb=forb, plan=plan, r_cert=r_cert, r_gave=r_gave,
                  r_forb=r_forb, scale=scale):
            total, gw, gb = 0.0, [np.zeros_like(w) for w in ws], [np.zeros_like(b) for b in bs]
            for idx, r, cols in ((cert, r_cert, None), (gave, r_gave, None), (forb, r_forb, plan.forbidden[forb])):
                if not len(idx):
                    continue
                loss, lw, lb = ibp_cross_entropy(ws, bs, centres[idx], r, plan.target[idx], cols)
                total = total + loss * scale
                gw = [a + d * scale for a, d in zip(gw, lw)]
                gb = [a + d * scale for a, d in zip(gb, lb)]
            return total, gw, gb

        clf.max_iter = opts.certify_iter
        clf.fit(z, y, extra=extra, warm_start=True)
        ub = ibp_margin_upper(clf.coefs_, clf.intercepts_, centres, np.broadcast_to(half, centres.shape),
                              plan.target)
        ub[np.arange(N), plan.target] = -np.inf
        certified = np.all(ub < 0, axis=1)
        stages.append({"epsilon": eps, "cells_certify": int(len(cert)), "cells_given_up": int(len(gave)),
                       "conflicting_faces": int(plan.conflicts), "iterations": int(clf.n_iter_),
                       "ibp_certified_cells": int((certified & plan.certify).sum())})
    clf.max_iter = opts.max_iter
    record = {"method": "IBP cross-entropy over every LUT cell (Gowal et al. 2018), hand-derived gradients, "
                        "fixed-order arithmetic", "schedule": list(CERTIFY_SCHEDULE), "weight": opts.certify_weight,
              "iterations_per_stage": opts.certify_iter, "cells": N, "stages": stages}
    return clf, record


def _full_logits(clf, n_act: int, cons: int) -> tuple[np.ndarray, np.ndarray]:
    """Last layer with one logit per action (float64): absent actions = reference logit - margin."""
    w, b = clf.coefs_[-1], clf.intercepts_[-1]
    classes = [int(c) for c in clf.classes_]
    h = w.shape[0]
    if w.shape[1] == 1:  # binary: logistic unit z = P(classes[1]); softmax of [0, z] is the same
        w = np.hstack([np.zeros((h, 1)), w])
        b = np.concatenate([[0.0], b])
    W = np.zeros((h, n_act))
    B = np.zeros(n_act)
    for j, c in enumerate(classes):
        W[:, c], B[c] = w[:, j], b[j]
    ref = cons if cons in classes else classes[0]
    for a in range(n_act):
        if a not in classes:
            W[:, a], B[a] = W[:, ref], B[ref] - ABSENT_MARGIN
    return W, B


def _params(clf, spec: Spec) -> list[np.ndarray]:
    """float32 parameters in physical units: [W1 (in, h1), c1, W2 (h1, h2), c2, W3 (h2, actions), c3]."""
    lo = np.array([i.min for i in spec.inputs])
    hi = np.array([i.max for i in spec.inputs])
    w1, c1 = clf.coefs_[0], clf.intercepts_[0]
    scale = 1.0 / (hi - lo)
    w1p = w1 * scale[:, None]
    c1p = c1 - (lo * scale) @ w1
    w3, c3 = _full_logits(clf, len(spec.actions), spec.conservative)
    if spec.decode == "argmin":
        w3, c3 = -w3, -c3
    return [p.astype(np.float32) for p in (w1p, c1p, clf.coefs_[1], clf.intercepts_[1], w3, c3)]


def _export(params: list[np.ndarray], spec: Spec, meta: dict):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w1, c1, w2, c2, w3, c3 = params
    inits = [numpy_helper.from_array(w1, "fc1.weight"), numpy_helper.from_array(c1, "fc1.bias"),
             numpy_helper.from_array(np.ascontiguousarray(w2.T), "fc2.weight"), numpy_helper.from_array(c2, "fc2.bias"),
             numpy_helper.from_array(w3, "fc3.weight"), numpy_helper.from_array(c3, "fc3.bias")]
    nodes = [
        helper.make_node("MatMul", ["probes", "fc1.weight"], ["fc1.mm"], name="fc1_matmul"),
        helper.make_node("Add", ["fc1.mm", "fc1.bias"], ["fc1.out"], name="fc1_add"),
        helper.make_node("Relu", ["fc1.out"], ["relu1.out"], name="relu1"),
        helper.make_node("Gemm", ["relu1.out", "fc2.weight", "fc2.bias"], ["fc2.out"], name="fc2_gemm",
                         alpha=1.0, beta=1.0, transA=0, transB=1),
        helper.make_node("Relu", ["fc2.out"], ["relu2.out"], name="relu2"),
        helper.make_node("MatMul", ["relu2.out", "fc3.weight"], ["fc3.mm"], name="fc3_matmul"),
        helper.make_node("Add", ["fc3.mm", "fc3.bias"], ["logits"], name="fc3_add"),
    ]
    n_in, n_act = len(spec.inputs), len(spec.actions)
    graph = helper.make_graph(
        nodes, spec.name,
        [helper.make_tensor_value_info("probes", TensorProto.FLOAT, [1, n_in])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, n_act])], initializer=inits,
        doc_string=("inputs (physical units): " + ", ".join(f"{i.name} [{i.min:g}, {i.max:g}] {i.unit}".rstrip()
                                                               for i in spec.inputs)
                    + f"; outputs ({spec.decode}, index = token): "
                    + ", ".join(f"{k} {a.name}" for k, a in enumerate(spec.actions))))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="mi-certify train", producer_version="1",
                              doc_string="meta controller trained from measured profile data (mi-certify train)")
    model.ir_version = 8
    model.model_version = 1
    helper.set_model_props(model, {"inputs": ",".join(i.name for i in spec.inputs),
                                   "actions": ",".join(a.name for a in spec.actions), "decode": spec.decode,
                                   **{k: str(v) for k, v in meta.items()}})
    onnx.checker.check_model(model, full_check=True)
    return model


def _ort_logits(data: bytes, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    o.log_severity_level = 3
    s = ort.InferenceSession(data, o, providers=["CPUExecutionProvider"])
    x32 = x.astype(np.float32)
    return np.concatenate([s.run(None, {"probes": x32[i:i + 1]})[0] for i in range(len(x32))])


def _regret(pred: np.ndarray, best: np.ndarray, lat: np.ndarray, cand: np.ndarray) -> dict:
    """Latency of the chosen action minus that of the best (the label), ms, over the rows where the
    chosen action is a candidate (meets its SLA, allowed by the properties) and the label is not
    the fallback for "no candidate"; the other rows are counted, not averaged."""
    rows = np.arange(len(pred))
    ok = cand[rows, pred] & cand.any(axis=1)
    r = lat[rows, pred][ok] - lat[rows, best][ok]
    out = {"rows": int(ok.sum()), "chosen_not_a_candidate": int((~cand[rows, pred] & cand.any(axis=1)).sum()),
           "rows_without_candidate": int((~cand.any(axis=1)).sum())}
    if len(r):
        out.update({"mean_ms": round(float(r.mean()), 3), "p95_ms": round(float(np.percentile(r, 95, method="nearest")), 3),
                    "max_ms": round(float(r.max()), 3)})
    return out


def _fixed_comparison(pred: np.ndarray, best: np.ndarray, lat: np.ndarray, cand: np.ndarray,
                      actions: list[str]) -> dict:
    """Mean latency regret (ms) of the controller and of every fixed action over the same rows.

    Rows: the held-out rows where some action is a candidate. Regret of a row: measured latency of
    the chosen action minus that of the label (the least-latency candidate), whether or not the
    chosen action met its SLA (misses are counted beside it). A fixed action chooses itself on
    every row. ``best_fixed_action``: the fixed action of least mean regret."""
    ok = cand.any(axis=1)
    rows = np.nonzero(ok)[0]
    if not len(rows):
        return {"rows": 0}

    def stats(choice):
        r = lat[rows, choice[rows]] - lat[rows, best[rows]]
        r = r[np.isfinite(r)]
        return {"mean_regret_ms": round(float(r.mean()), 3) if len(r) else None,
                "sla_missed_rows": int((~cand[rows, choice[rows]]).sum())}

    fixed = {a: stats(np.full(len(pred), k)) for k, a in enumerate(actions)}
    finite = {a: v["mean_regret_ms"] for a, v in fixed.items() if v["mean_regret_ms"] is not None}
    best_fixed = min(finite, key=lambda a: (finite[a], actions.index(a))) if finite else None
    return {"rows": int(len(rows)), "controller": stats(pred), "fixed": fixed, "best_fixed_action": best_fixed}


def _permutation_importance(predict, x: np.ndarray, y: np.ndarray, names: list[str], seed: int,
                            repeats: int = 20) -> dict:
    """Permutation importance on held-out rows (Breiman, "Random Forests", Machine Learning 45, 2001;
    scikit-learn's ``permutation_importance`` procedure): the input's column is shuffled among the
    rows ``repeats`` times (seeded) and the accuracy drop is averaged. Also the share of decisions
    that change (label-free). An input has *measurable influence* when its mean accuracy drop
    exceeds two standard errors of the repeats and 0.01."""
    rng = np.random.default_rng(seed)
    base_pred = predict(x)
    base = float((base_pred == y).mean())
    out = {}
    for j, name in enumerate(names):
        drops, changed = [], []
        for _ in range(repeats):
            xp = x.copy()
            xp[:, j] = x[rng.permutation(len(x)), j]
            pp = predict(xp)
            drops.append(base - float((pp == y).mean()))
            changed.append(float((pp != base_pred).mean()))
        d = np.array(drops)
        se = float(d.std(ddof=1) / math.sqrt(repeats)) if repeats > 1 else 0.0
        out[name] = {"accuracy_drop_mean": round(float(d.mean()), 4), "accuracy_drop_se": round(se, 4),
                     "decisions_changed": round(float(np.mean(changed)), 4),
                     "measurable": bool(d.mean() > max(0.01, 2 * se))}
    return {"rows": int(len(x)), "repeats": repeats, "base_accuracy": round(base, 4), "inputs": out,
            "rule": "measurable = mean accuracy drop > max(0.01, 2 standard errors)",
            "measurable_inputs": [n for n in names if out[n]["measurable"]]}


def _sla_met(tokens: np.ndarray, data_lat: np.ndarray, data_acc: np.ndarray, spec: Spec) -> float:
    ok = 0
    for r, a in enumerate(tokens):
        lim = spec.actions[a]
        lat, acc = data_lat[r, a], data_acc[r, a]
        ok += (not math.isnan(lat) and (lim.latency_ms is None or lat <= lim.latency_ms)
               and (lim.accuracy_loss_pct is None or (not math.isnan(acc) and acc <= lim.accuracy_loss_pct)))
    return round(float(ok) / max(1, len(tokens)), 4)


def lut_fsm_report(lut_tokens: np.ndarray, rows: HeldOutRows, spec: Spec) -> dict:
    """The deployed LUT-FSM against the network and the labels on the held-out rows (issue 33,
    item 3; docs/training.md, "What build will report").

    ``lut_tokens`` [n]: the LUT's action at each held-out row (the table as ``build`` deploys
    it: distilled, then the property masks). An FSM that reads the same inputs step after step
    decides its LUT entry once hysteresis and cooldown have passed, so this is the LUT-FSM's
    steady-state decision; the delay of a switch is not in it (held-out rows are independent
    measurements, not a sequence). Returns ``{"rows", "agree_with_network", "agreement",
    "accuracy", "regret"`` (as ``held_out.regret``), ``"mean_regret_ms"`` (as
    ``against_fixed_actions``: every row with a candidate), ``"network_mean_regret_ms"`` (the same for
    the network), ``"best_fixed_action"`` (``{"action", "mean_regret_ms", "sla_missed_rows"}``: the fixed
    action of least mean regret, whose SLA misses are counted, not excluded), ``"sla_met_share"``,
    ``"cost_of_disagreement"``: measured latency of the LUT's action minus that of the network's
    action, ms, over the rows where both are measured (0 where they agree): ``mean_ms``,
    ``mean_where_they_differ_ms``, ``min_ms``, ``max_ms``, and the rows where the LUT's action
    misses its SLA or a property while the network's does not (``lut_only_sla_misses``) and the
    reverse (``network_only_sla_misses``)``}``."""
    lut = np.asarray(lut_tokens, dtype=np.int64)
    net, y, cand, lat = rows.network, rows.labels, rows.candidates, rows.latency_ms
    n = len(lut)
    idx = np.arange(n)
    actions = [a.name for a in spec.actions]
    differ = lut != net
    d = lat[idx, lut] - lat[idx, net]
    measured = np.isfinite(d)
    cost = {"rows_they_differ": int(differ.sum()), "rows_measured": int(measured.sum()),
            "lut_only_sla_misses": int((~cand[idx, lut] & cand[idx, net]).sum()),
            "network_only_sla_misses": int((cand[idx, lut] & ~cand[idx, net]).sum())}
    if measured.any():
        dm, dd = d[measured], d[measured & differ]
        cost.update({"mean_ms": round(float(dm.mean()), 3), "min_ms": round(float(dm.min()), 3),
                     "max_ms": round(float(dm.max()), 3),
                     "mean_where_they_differ_ms": round(float(dd.mean()), 3) if len(dd) else 0.0})
    fixed = _fixed_comparison(lut, y, lat, cand, actions)
    best = fixed.get("best_fixed_action")
    return {"rows": int(n), "agree_with_network": int((~differ).sum()),
            "agreement": round(float((~differ).mean()), 4) if n else None,
            "accuracy": round(float((lut == y).mean()), 4) if n else None,
            "regret": _regret(lut, y, lat, cand),
            "mean_regret_ms": fixed.get("controller", {}).get("mean_regret_ms"),
            "network_mean_regret_ms": _fixed_comparison(net, y, lat, cand, actions).get("controller", {}).get(
                "mean_regret_ms"),
            "best_fixed_action": None if best is None else {"action": best, **fixed["fixed"][best]},
            "sla_met_share": _sla_met(lut, lat, rows.accuracy_loss_pct, spec),
            "cost_of_disagreement": cost}


@dataclass(frozen=True)
class _Split:
    """The seeded split of the labelled rows: row indices (sorted) of the training and held-out rows;
    ``stratified`` when every label kept its share on both sides (sklearn ``train_test_split``)."""

    train: np.ndarray
    held_out: np.ndarray
    stratified: bool


@dataclass(frozen=True)
class _Augmented:
    """Synthetic rows inside the properties' guard boxes: ``x`` [n, inputs] physical units, ``y`` [n]
    their labels (action indices), ``report`` one entry per property (module docstring, step 2)."""

    x: np.ndarray
    y: np.ndarray
    report: list


def _split_rows(y: np.ndarray, n_act: int, opts: TrainOptions) -> _Split:
    """Hold out ``opts.holdout`` of the rows (seeded by ``opts.seed``), stratified by label when every
    present label has two rows; a plain seeded split when there are too few rows to stratify."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    counts = np.bincount(y, minlength=n_act)
    strat = y if counts[counts > 0].min() >= 2 and len(np.unique(y)) > 1 else None
    try:
        tr, te = train_test_split(idx, test_size=opts.holdout, random_state=opts.seed, stratify=strat)
    except ValueError:  # too few rows to hold out every label: plain seeded split
        strat = None
        tr, te = train_test_split(idx, test_size=opts.holdout, random_state=opts.seed)
    return _Split(np.sort(tr), np.sort(te), strat is not None)


def _augment(data: ProfileData, spec: Spec, boxes: list, train_rows: np.ndarray, opts: TrainOptions) -> _Augmented:
    """Step 2 (module docstring): per guard box, ``opts.augment`` training rows (default: as many as
    there are training rows) drawn with ``numpy.random.default_rng(opts.seed)``, the box's inputs
    redrawn uniformly inside it, measurements kept, labelled by :func:`label_rows`."""
    actions = [a.name for a in spec.actions]
    lo = np.array([i.min for i in spec.inputs])
    hi = np.array([i.max for i in spec.inputs])
    rng = np.random.default_rng(opts.seed)
    n_aug = len(train_rows) if opts.augment is None else opts.augment
    ax, alat, aacc, aug_report = [], [], [], []
    for pid, blo, bhi, allowed in boxes:
        if n_aug == 0:
            break
        src = rng.choice(train_rows, size=n_aug, replace=True)
        xs = data.x[src].copy()
        sel = (blo > lo) | (bhi < hi)
        xs[:, sel] = blo[sel] + (bhi[sel] - blo[sel]) * rng.random((n_aug, int(sel.sum())))
        ax.append(xs)
        alat.append(data.latency_ms[src])
        aacc.append(data.accuracy_loss_pct[src])
        aug_report.append({"property": pid, "guard_box": {spec.inputs[k].name: [float(blo[k]), float(bhi[k])]
                                                         for k in np.nonzero(sel)[0]},
                           "allowed": sorted(actions[a] for a in allowed), "rows": n_aug})
    if not ax:
        return _Augmented(np.zeros((0, data.x.shape[1])), np.zeros(0, dtype=np.int64), aug_report)
    ax, alat, aacc = np.vstack(ax), np.vstack(alat), np.vstack(aacc)
    ay, _ = label_rows(ax, alat, aacc, spec, opts.tie_ms, boxes)
    for rep, k in zip(aug_report, range(len(aug_report))):
        part = ay[k * n_aug:(k + 1) * n_aug]
        rep["labels"] = {actions[a]: int(c) for a, c in enumerate(np.bincount(part, minlength=len(actions))) if c}
    return _Augmented(ax, ay, aug_report)


def _counterexample_rows(data: ProfileData, spec: Spec, boxes: list, train_rows: np.ndarray,
                         counterexamples, opts: TrainOptions) -> _Augmented:
    """Rows at the verifier's counterexamples (``train`` rounds, docs/training.md): per (property id,
    x), ``COUNTEREXAMPLE_ROWS`` training rows drawn with ``numpy.random.default_rng(opts.seed + 3)``,
    their inputs redrawn uniformly in the LUT cell of x (inside the property's guard box, whose edges
    are cell edges), measurements kept, labelled by :func:`label_rows` (so with an allowed action)."""
    actions = [a.name for a in spec.actions]
    rng = np.random.default_rng(opts.seed + 3)
    xs_all, lat, acc, rep = [], [], [], []
    for pid, x in counterexamples:
        x = np.asarray(x, dtype=np.float64)
        clo, chi = (np.array(e) for e in zip(*(_cell_edges(inp, x[k]) for k, inp in enumerate(spec.inputs))))
        src = rng.choice(train_rows, size=COUNTEREXAMPLE_ROWS, replace=True)
        xs_all.append(clo + (chi - clo) * rng.random((COUNTEREXAMPLE_ROWS, len(x))))
        lat.append(data.latency_ms[src])
        acc.append(data.accuracy_loss_pct[src])
        rep.append({"property": pid, "x": [float(v) for v in x], "rows": COUNTEREXAMPLE_ROWS})
    if not xs_all:
        return _Augmented(np.zeros((0, data.x.shape[1])), np.zeros(0, dtype=np.int64), rep)
    ax = np.vstack(xs_all)
    ay, _ = label_rows(ax, np.vstack(lat), np.vstack(acc), spec, opts.tie_ms, boxes)
    for k, r in enumerate(rep):
        part = ay[k * COUNTEREXAMPLE_ROWS:(k + 1) * COUNTEREXAMPLE_ROWS]
        r["labels"] = {actions[a]: int(c) for a, c in enumerate(np.bincount(part, minlength=len(actions))) if c}
    return _Augmented(ax, ay, rep)


def _check_export(model_bytes: bytes, clf, predict, data: ProfileData, aug: _Augmented, spec: Spec,
                  opts: TrainOptions) -> int:
    """Step 4 (module docstring): onnxruntime must decide like the trainer on every profile row, every
    synthetic row and 2000 random envelope points (``numpy.random.default_rng(opts.seed + 1)``); a
    difference is allowed only where the trainer's top two probabilities are within 1e-4. Returns the
    number of points checked; raises TrainError at the first other difference."""
    actions = [a.name for a in spec.actions]
    lo = np.array([i.min for i in spec.inputs])
    hi = np.array([i.max for i in spec.inputs])
    check_rng = np.random.default_rng(opts.seed + 1)
    xc = np.vstack([data.x, aug.x, lo + (hi - lo) * check_rng.random((2000, len(lo)))])
    logits = _ort_logits(model_bytes, xc)
    ort_tok = logits.argmin(axis=1) if spec.decode == "argmin" else logits.argmax(axis=1)
    sk_tok = predict(xc)
    proba = clf.predict_proba((xc - lo) / (hi - lo))
    top2 = np.sort(proba, axis=1)[:, -2:] if proba.shape[1] > 1 else np.ones((len(xc), 2))
    margin = top2[:, 1] - top2[:, 0]
    differ = ort_tok != sk_tok
    if np.any(differ & (margin > 1e-4)):
        k = int(np.nonzero(differ & (margin > 1e-4))[0][0])
        raise TrainError(f"onnxruntime decides {actions[ort_tok[k]]} but the trainer {actions[sk_tok[k]]} at "
                         f"x={xc[k].tolist()}: the export is wrong")
    return int(len(xc))


def _held_out_report(predict, data: ProfileData, y: np.ndarray, cand: np.ndarray, split: _Split, spec: Spec,
                     opts: TrainOptions) -> dict:
    """Step 5 on the held-out rows: accuracy, confusion matrix, majority-label accuracy, latency regret
    (ms) of the controller, of the conservative action and of every fixed action, permutation
    importance (seed ``opts.seed + 2``) and the share of rows whose chosen action met its SLA."""
    actions = [a.name for a in spec.actions]
    n_act = len(actions)
    tr, te = split.train, split.held_out
    pred_te = predict(data.x[te])
    cm = np.zeros((n_act, n_act), dtype=np.int64)
    for t, p_ in zip(y[te], pred_te):
        cm[t, p_] += 1
    cons_tok = np.full(len(te), spec.conservative)
    lat_te, acc_te = data.latency_ms[te], data.accuracy_loss_pct[te]
    return {
        "accuracy": round(float((pred_te == y[te]).mean()), 4),
        "confusion_matrix": {"rows": "label", "columns": "predicted", "actions": actions,
                             "counts": cm.tolist()},
        "majority_label_accuracy": round(float((y[te] == np.bincount(y[tr], minlength=n_act).argmax()).mean()), 4),
        "regret": _regret(pred_te, y[te], lat_te, cand[te]),
        "regret_always_conservative": _regret(cons_tok, y[te], lat_te, cand[te]),
        "against_fixed_actions": _fixed_comparison(pred_te, y[te], lat_te, cand[te], actions),
        "permutation_importance": _permutation_importance(predict, data.x[te], y[te],
                                                          [i.name for i in spec.inputs], opts.seed + 2),
        "sla_met_share": {"controller": _sla_met(pred_te, lat_te, acc_te, spec),
                          "labels": _sla_met(y[te], lat_te, acc_te, spec),
                          "always_conservative": _sla_met(cons_tok, lat_te, acc_te, spec)},
    }


def _report(clf, predict, data: ProfileData, spec: Spec, opts: TrainOptions, labels: tuple, split: _Split,
            aug: _Augmented, model_bytes: bytes, n_checked: int) -> dict:
    """The training report (step 5, module docstring; ``format`` mi-certify/train-report-v1).
    ``labels`` = (y, why, cand) of :func:`label_rows` on the profile rows."""
    y, why, cand = labels
    actions = [a.name for a in spec.actions]
    tr = split.train
    classes = [int(c) for c in clf.classes_]
    return {
        "format": "mi-certify/train-report-v1",
        "profile": {"file": Path(data.path).name, "sha256": data.sha256, "rows_used": int(len(y)),
                    "rows_dropped": data.dropped},
        "sla": Path(spec.path).name,
        "label_rule": "least measured latency among the actions that meet their SLA (latency_ms and "
                      "accuracy_loss_pct) and that the forbid/require properties allow over their guard boxes; "
                      f"a tie within {opts.tie_ms:g} ms for the least latency, or no such action: the conservative "
                      f"action ({actions[spec.conservative]})",
        "label_distribution": {a: int(c) for a, c in zip(actions, np.bincount(y, minlength=len(actions)))},
        "label_reasons": why,
        "split": {"train_rows": int(len(tr)), "held_out_rows": int(len(split.held_out)), "holdout": opts.holdout,
                  "stratified": split.stratified},
        "augmentation": aug.report,
        "model": {"library": "mi-certify DeterministicMLP (fixed-order float64; scikit-learn's MLP model)",
                  "activation": "relu", "solver": "lbfgs",
                  "layers": [len(spec.inputs), *opts.hidden, len(actions)], "alpha": opts.alpha,
                  "max_iter": opts.max_iter, "iterations": int(clf.n_iter_), "seed": opts.seed,
                  "classes_learned": [actions[c] for c in classes],
                  "absent_actions": [a for k, a in enumerate(actions) if k not in set(classes)],
                  "absent_margin": ABSENT_MARGIN},
        "train_accuracy": round(float((predict(data.x[tr]) == y[tr]).mean()), 4),
        "augmented_accuracy": round(float((predict(aug.x) == aug.y).mean()), 4) if len(aug.y) else None,
        "held_out": _held_out_report(predict, data, y, cand, split, spec, opts),
        "export": {"onnx_sha256": hashlib.sha256(model_bytes).hexdigest(), "checker": "onnx.checker full_check passed",
                   "onnxruntime_vs_trainer": {"points": n_checked,
                                              "rule": "a difference is allowed only where the trainer's top two "
                                                      "probabilities are within 1e-4 (float32 rounding)"}},
        "options": opts.report_options(),
    }


def train_controller(data: ProfileData, spec: Spec, opts: TrainOptions = TrainOptions(),
                     counterexamples=()) -> TrainResult:
    """Label, augment, train, export and check (module docstring, steps 1-5). Deterministic in
    (data, spec, opts, counterexamples) on every machine. ``counterexamples``: (property id, x in
    physical units) pairs of earlier rounds; each adds ``COUNTEREXAMPLE_ROWS`` labelled rows in its
    LUT cell (:func:`_counterexample_rows`), recorded as the report's ``counterexample_rows``. Raises
    TrainError if an option is unusable, every training row has one label, or the checks fail."""
    opts.check()
    actions = [a.name for a in spec.actions]
    lo = np.array([i.min for i in spec.inputs])
    hi = np.array([i.max for i in spec.inputs])
    boxes = guard_boxes(spec)
    y, why, cand = label_rows(data.x, data.latency_ms, data.accuracy_loss_pct, spec, opts.tie_ms, boxes, True)
    split = _split_rows(y, len(actions), opts)
    aug = _augment(data, spec, boxes, split.train, opts)
    cex = _counterexample_rows(data, spec, boxes, split.train, counterexamples, opts) if counterexamples else None
    if cex is not None:
        aug = _Augmented(np.vstack([aug.x, cex.x]), np.concatenate([aug.y, cex.y]), aug.report)
    x_fit = np.vstack([data.x[split.train], aug.x])
    y_fit = np.concatenate([y[split.train], aug.y])
    if len(np.unique(y_fit)) < 2:
        raise TrainError(f"every training row has the label {actions[int(y_fit[0])]}: there is nothing to learn "
                         "(profile more varied conditions)", file=data.path)
    if opts.certify == "cells":
        clf, cert_record = _fit_certified((x_fit - lo) / (hi - lo), y_fit, opts, spec, boxes, x_fit)
    else:
        clf, cert_record = _fit((x_fit - lo) / (hi - lo), y_fit, opts), None

    def predict(x):
        return np.asarray(clf.predict((x - lo) / (hi - lo)), dtype=np.int64)

    meta = {"labels": "measured profile (mi-certify train)", "profile_sha256": data.sha256, "seed": opts.seed,
            "hidden": f"{opts.hidden[0]},{opts.hidden[1]}"}
    if opts.certify != "none":
        meta["certify"] = opts.certify
    model_bytes = _export(_params(clf, spec), spec, meta).SerializeToString()
    n_checked = _check_export(model_bytes, clf, predict, data, aug, spec, opts)
    report = _report(clf, predict, data, spec, opts, (y, why, cand), split, aug, model_bytes, n_checked)
    if cert_record is not None:
        report["certified_training"] = cert_record
    if cex is not None:
        report["counterexample_rows"] = cex.report
    te = split.held_out
    held = HeldOutRows(data.x[te], y[te], data.latency_ms[te], data.accuracy_loss_pct[te], cand[te],
                       predict(data.x[te]))
    return TrainResult(model_bytes, report, clf, held)


def lut_fsm_line(lf: dict) -> str:
    """One line of :func:`lut_fsm_report`'s figures (the CLI's and the Markdown report's)."""
    c, b = lf["cost_of_disagreement"], lf["best_fixed_action"]
    beats = ""
    if b and lf["mean_regret_ms"] is not None and b["mean_regret_ms"] is not None:
        beats = (f", best fixed action ({b['action']}) {b['mean_regret_ms']} ms with {b['sla_missed_rows']} SLA misses: "
                 "the LUT-FSM " + ("beats it" if lf["mean_regret_ms"] < b["mean_regret_ms"] else "does NOT beat it"))
    return (f"the LUT-FSM on the {lf['rows']} held-out rows (steady state): decides as the network on "
            f"{lf['agree_with_network']} ({lf['agreement']:.1%}), accuracy {lf['accuracy']}, mean latency regret "
            f"{lf['mean_regret_ms']} ms (the network {lf['network_mean_regret_ms']} ms{beats}); cost of disagreement with the network {c.get('mean_ms')} ms per row "
            f"({c['rows_they_differ']} rows differ: {c.get('mean_where_they_differ_ms')} ms each on average, "
            f"{c['lut_only_sla_misses']} SLA misses only the LUT makes, {c['network_only_sla_misses']} only the network)")


def report_markdown(rep: dict) -> str:
    """A short human-readable form of the training report."""
    h = rep["held_out"]
    acts = h["confusion_matrix"]["actions"]
    fx = h.get("against_fixed_actions", {})
    pi = h.get("permutation_importance", {"repeats": 0, "rule": "", "inputs": {}, "measurable_inputs": []})
    lines = [f"# Training report: {rep['profile']['file']} → controller", "",
             f"- profile sha256 `{rep['profile']['sha256']}`, {rep['profile']['rows_used']} rows used, dropped "
             f"{rep['profile']['rows_dropped']}",
             f"- model: {rep['model']['library']}, layers {rep['model']['layers']}, seed {rep['model']['seed']}, "
             f"alpha {rep['model']['alpha']}, {rep['model']['iterations']} L-BFGS iterations",
             f"- label rule: {rep['label_rule']}",
             f"- labels: {rep['label_distribution']} ({rep['label_reasons']})",
             f"- split: {rep['split']['train_rows']} train, {rep['split']['held_out_rows']} held out",
             f"- train accuracy {rep['train_accuracy']}, augmented-row accuracy {rep['augmented_accuracy']}",
             f"- **held-out accuracy {h['accuracy']}**; regret vs the best action {h['regret']}; always the "
             f"conservative action: {h['regret_always_conservative']}",
             f"- SLA met on held-out rows: {h['sla_met_share']}",
             f"- majority-label accuracy {h['majority_label_accuracy']}; against fixed actions (mean latency regret, "
             f"ms, {fx.get('rows', 0)} rows): controller {fx.get('controller', {}).get('mean_regret_ms')}, "
             + ", ".join(f"always {a} {v['mean_regret_ms']}" for a, v in fx.get("fixed", {}).items())
             + f"; best fixed action {fx.get('best_fixed_action')}",
             f"- permutation importance (held out, {pi['repeats']} shuffles; {pi['rule']}): "
             + ", ".join(f"{n} {v['accuracy_drop_mean']:+.3f}±{v['accuracy_drop_se']:.3f} "
                         f"({v['decisions_changed']:.0%} decisions change)" for n, v in pi["inputs"].items())
             + f"; measurable: {', '.join(pi['measurable_inputs']) or 'none'}",
             f"- ONNX sha256 `{rep['export']['onnx_sha256']}`; onnxruntime vs the trainer: "
             f"{rep['export']['onnxruntime_vs_trainer']}", "",
             "Confusion matrix (held out; rows = label, columns = predicted):", "",
             "| label \\ predicted | " + " | ".join(acts) + " |", "|---" * (len(acts) + 1) + "|"]
    for a, row in zip(acts, h["confusion_matrix"]["counts"]):
        lines.append(f"| {a} | " + " | ".join(str(c) for c in row) + " |")
    at = next(k for k, ln in enumerate(lines) if ln.startswith("- ONNX sha256")) + 1
    ct = rep.get("certified_training")
    if ct:
        last = ct["stages"][-1]
        lines[at:at] = [f"- certified training ({ct['method']}): {last['cells_certify']} of {ct['cells']} cells trained "
                        f"to be certified, {last['cells_given_up']} given up; IBP certifies "
                        f"{last['ibp_certified_cells']} at the last stage"]
    lp = rep.get("lut_preview")
    if lp:
        lines[at + bool(ct):at + bool(ct)] = [f"- LUT as build will distil it: {lp['proven']} of {lp['cells']} cells proven "
                        f"({lp['proven_share']:.1%}), {lp['resolved']} resolved; agreement with the network "
                        f"{lp['agreement']:.1%} on {lp['points']} points"]
        lf = rep.get("lut_fsm_held_out")
        if lf:
            lines.insert(at + bool(ct) + 1, "- " + lut_fsm_line(lf))
            at += 1
    pr = rep.get("property_rounds")
    extra = []
    if pr:
        extra.append(f"- property rounds (seeded falsifiers, then retraining): {pr['rounds']} of at most {pr['limit']}, "
                     f"{pr['counterexamples']} counterexamples used; still falsified: "
                     f"{', '.join(pr['still_falsified']) or 'none'} (the properties themselves are verified by build)")
    extra += [f"- counterexample of {cx['property']} at {cx['x']}: {cx['rows']} rows in its LUT cell, labels "
              f"{cx['labels']}" for cx in rep.get("counterexample_rows", [])]
    at += bool(ct) + bool(lp)
    lines[at:at] = extra
    for aug in rep["augmentation"]:
        lines.append("")
        lines.append(f"Augmentation {aug['property']}: {aug['rows']} rows in {aug['guard_box']}, allowed "
                     f"{aug['allowed']}, labels {aug['labels']}")
    return "\n".join(lines) + "\n"


def write_outputs(result: TrainResult, out: str | Path) -> tuple[Path, Path]:
    """Write the model and its report (``<out stem>.train.json`` and ``.train.md``); returns the report paths."""
    out = Path(out)
    js = out.with_name(out.stem + ".train.json")
    md = out.with_name(out.stem + ".train.md")
    for path, content in ((js, json.dumps(result.report, indent=2, sort_keys=True) + "\n"),
                          (md, report_markdown(result.report))):
        tmp = path.with_name(path.name + ".partial")
        tmp.write_text(content, encoding="utf-8")
        tmp.replace(path)
    tmp = out.with_name(out.name + ".partial")
    tmp.write_bytes(result.model_bytes)
    tmp.replace(out)
    return js, md
