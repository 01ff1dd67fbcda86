#!/usr/bin/env python3
"""Generate the shipped reference "meta controller" (controller.onnx).

Run from the repository root:

    python examples/meta_controller/make_controller.py

Needs only numpy and onnx (onnxruntime is optional: when it is installed the
exported model is cross-checked against the numpy forward pass).  The script is
fully deterministic: one fixed seed (numpy ``default_rng(0)``) drives the
training points, the initial weights and the mini-batch order; BLAS runs
single-threaded; the model carries no timestamps.  A rerun writes a
byte-identical controller.onnx (checked by comparing sha256 of two runs).

After export it prints diagnostics: training accuracy, the two safety rules on
the training data, the prediction histogram, a 21^5 grid sweep, the largest
keep logit over the whole input box (with a sound upper bound), and whether the
safety properties P1/P2 of sla.yaml are proved by linear bounds with box
splitting.  It exits non-zero if onnxruntime disagrees with numpy.

What it builds
--------------
A small ReLU MLP that reads 5 hardware-probe features (physical units) and
scores 4 execution actions; the decoded action is the argmax of the logits and
the output index is the action token:

    inputs  (ONNX input "probes", float32 [1, 5], in this order)
        0 compute_util     ratio  [0, 1]
        1 cache_miss_rate  ratio  [0, 1]
        2 mem_bw_util      ratio  [0, 1]
        3 free_sram_kb     KiB    [0, 1024]
        4 temperature_c    degC   [20, 110]
    outputs (ONNX output "logits", float32 [1, 4])
        0 keep  1 merge_conv  2 int4  3 offload_cpu

    architecture: 5 -> 16 -> ReLU -> 16 -> ReLU -> 4
        layer 1: MatMul + Add   (weights absorb the (x - min) / (max - min)
                                 input normalisation, so the model takes
                                 PHYSICAL units)
        layer 2: Gemm (transB=1, the layout torch.onnx uses for nn.Linear)
        layer 3: MatMul + Add

The labels are SYNTHETIC: they come from the hand-written teacher policy
``teacher()`` below, not from profiled measurements.
"""

from __future__ import annotations

import os

# Single-threaded BLAS so that floating-point reductions happen in a fixed
# order (part of the byte-identical-rerun guarantee).  Must precede numpy.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import hashlib  # noqa: E402
import heapq  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT_PATH = HERE / "controller.onnx"

SEED = 0
N_TRAIN = 20_000
HIDDEN = 16
STEPS = 15_000  # Adam steps (~190 passes over the data)
BATCH = 256
LR_MAX = 0.02
LR_MIN = 0.0001

INPUT_NAMES = ["compute_util", "cache_miss_rate", "mem_bw_util", "free_sram_kb", "temperature_c"]
INPUT_UNITS = ["ratio", "ratio", "ratio", "KiB", "degC"]
LO = np.array([0.0, 0.0, 0.0, 0.0, 20.0])
HI = np.array([1.0, 1.0, 1.0, 1024.0, 110.0])

ACTIONS = ["keep", "merge_conv", "int4", "offload_cpu"]
KEEP, MERGE_CONV, INT4, OFFLOAD_CPU = range(4)
CU_IDLE = 0.15


# --------------------------------------------------------------------------
# Teacher policy (hand-written engineering heuristics; first matching rule wins)
# --------------------------------------------------------------------------
def teacher(x: np.ndarray) -> np.ndarray:
    """Label each row of x (physical units, shape [n, 5]) with an action token.

    R1 idle     compute_util < 0.15                     -> keep
                (nothing to gain from re-planning an idle engine; a 0.05 guard
                band above the 0.1 used by safety property P2)
    R2 hot      temperature_c >= 95                     -> offload_cpu if
                compute_util >= 0.5, else keep (never int4 when hot)
    R3 busy+warm compute_util >= 0.7 and temperature_c >= 85
                                                        -> offload_cpu
                (shed accelerator load before the hot limit is reached)
    R4 mem-bound mem_bw_util >= 0.6 and free_sram_kb < 384 and
                temperature_c < 80                      -> int4
                (quartering weight traffic relieves bandwidth/SRAM pressure;
                int4 is only allowed well below the 95 degC hot limit:
                thermal derating guard band)
    R5 fusable  compute_util >= 0.6 and cache_miss_rate < 0.35 -> merge_conv
                (compute-bound with good locality: fuse conv kernels)
    R6 default                                          -> keep
    """
    cu, cmr, bw, sram, temp = (x[:, i] for i in range(5))
    y = np.full(len(x), KEEP, dtype=np.int64)
    undecided = np.ones(len(x), dtype=bool)

    def rule(cond: np.ndarray, action) -> None:
        hit = undecided & cond
        y[hit] = action[hit] if isinstance(action, np.ndarray) else action
        undecided[hit] = False

    rule(cu < CU_IDLE, KEEP)  # R1
    rule(temp >= 95.0, np.where(cu >= 0.5, OFFLOAD_CPU, KEEP))  # R2
    rule((cu >= 0.7) & (temp >= 85.0), OFFLOAD_CPU)  # R3
    rule((bw >= 0.6) & (sram < 384.0) & (temp < 80.0), INT4)  # R4
    rule((cu >= 0.6) & (cmr < 0.35), MERGE_CONV)  # R5
    return y  # R6: the rest stay keep


# --------------------------------------------------------------------------
# Training (plain numpy, float64, mini-batch Adam, softmax cross-entropy)
# --------------------------------------------------------------------------
def init_params(rng: np.random.Generator) -> list[np.ndarray]:
    """He-normal weights, zero biases, layout [fan_in, fan_out] (x @ W + b)."""
    sizes = [5, HIDDEN, HIDDEN, len(ACTIONS)]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params.append(rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(fan_in, fan_out)))
        params.append(np.zeros(fan_out))
    return params


def train(z: np.ndarray, y: np.ndarray, params: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """Mini-batch Adam on mean softmax cross-entropy; cosine learning-rate decay.

    Batches walk fixed-seed permutations of the training set (reshuffled each
    epoch), so the whole run is a deterministic function of SEED.
    """
    n = len(z)
    onehot = np.eye(len(ACTIONS))[y]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    perm, pos = rng.permutation(n), 0
    for t in range(1, STEPS + 1):
        if pos + BATCH > n:
            perm, pos = rng.permutation(n), 0
        idx = perm[pos : pos + BATCH]
        pos += BATCH
        zb, ob = z[idx], onehot[idx]
        w1, c1, w2, c2, w3, c3 = params
        a1 = zb @ w1 + c1
        h1 = np.maximum(a1, 0.0)
        a2 = h1 @ w2 + c2
        h2 = np.maximum(a2, 0.0)
        logits = h2 @ w3 + c3
        logits = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        g = (p - ob) / BATCH  # d(mean CE)/d(logits)
        gw3, gc3 = h2.T @ g, g.sum(axis=0)
        g = (g @ w3.T) * (a2 > 0)
        gw2, gc2 = h1.T @ g, g.sum(axis=0)
        g = (g @ w2.T) * (a1 > 0)
        gw1, gc1 = zb.T @ g, g.sum(axis=0)
        grads = [gw1, gc1, gw2, gc2, gw3, gc3]
        lr = LR_MIN + 0.5 * (LR_MAX - LR_MIN) * (1.0 + np.cos(np.pi * (t - 1) / STEPS))
        for i, gr in enumerate(grads):
            m[i] = beta1 * m[i] + (1 - beta1) * gr
            v[i] = beta2 * v[i] + (1 - beta2) * gr * gr
            mhat = m[i] / (1 - beta1**t)
            vhat = v[i] / (1 - beta2**t)
            params[i] = params[i] - lr * mhat / (np.sqrt(vhat) + eps)
    return params


def absorb_normalisation(params: list[np.ndarray]) -> list[np.ndarray]:
    """Fold z = (x - LO) / (HI - LO) into layer 1 so the net takes physical units."""
    w1, c1, *rest = params
    scale = 1.0 / (HI - LO)
    w1p = w1 * scale[:, None]
    c1p = c1 - (LO * scale) @ w1
    return [w1p, c1p, *rest]


def forward(x: np.ndarray, params: list[np.ndarray]) -> np.ndarray:
    w1, c1, w2, c2, w3, c3 = params
    h = np.maximum(x @ w1 + c1, 0)
    h = np.maximum(h @ w2 + c2, 0)
    return h @ w3 + c3


# --------------------------------------------------------------------------
# Whole-box analysis: linear-relaxation (CROWN-style) bounds + branch-and-bound.
# Sound in exact arithmetic; run in float64 on the shipped float32 weights.
# This is a diagnostic for the README / sla.yaml (P1, P2, the P3 bound); the
# mi-certify verifier proves the properties itself.
# --------------------------------------------------------------------------
def _relu_back(lam, const, l, u, upper: bool):
    """Push coefficients `lam` [n, k] on relu(a) back onto a, given a in [l, u]."""
    unstable = (l < 0) & (u > 0)
    up_slope = np.where(u <= 0, 0.0, np.where(l >= 0, 1.0, u / np.where(unstable, u - l, 1.0)))
    up_icpt = np.where(unstable, -up_slope * l, 0.0)
    lo_slope = np.where(u <= 0, 0.0, np.where(l >= 0, 1.0, (u > -l).astype(float)))
    use_up = (lam >= 0) if upper else (lam < 0)
    slope = np.where(use_up, up_slope[:, None], lo_slope[:, None])
    icpt = np.where(use_up, up_icpt[:, None], 0.0)
    return lam * slope, const + (lam * icpt).sum(axis=0)


def _concretise(coef, const, lo, hi, upper: bool):
    mid, rad = (lo + hi) / 2, (hi - lo) / 2
    centre = mid @ coef + const
    spread = rad @ np.abs(coef)
    return centre + spread if upper else centre - spread


def linear_upper(lo, hi, params, out_w, out_b):
    """Upper bounds of h2 @ out_w + out_b ([16, k], [k]) over the box [lo, hi]."""
    w1, c1, w2, c2, _, _ = params
    a1_lo = _concretise(w1, c1, lo, hi, False)  # layer 1 is affine: exact bounds
    a1_hi = _concretise(w1, c1, lo, hi, True)
    bounds2 = []
    for upper in (False, True):
        lam, const = _relu_back(w2, c2, a1_lo, a1_hi, upper)
        bounds2.append(_concretise(w1 @ lam, const + c1 @ lam, lo, hi, upper))
    a2_lo, a2_hi = bounds2
    lam, const = _relu_back(out_w, out_b, a2_lo, a2_hi, True)
    lam, const = w2 @ lam, const + c2 @ lam
    lam, const = _relu_back(lam, const, a1_lo, a1_hi, True)
    return _concretise(w1 @ lam, const + c1 @ lam, lo, hi, True)


def _split(lo, hi):
    d = int(np.argmax((hi - lo) / (HI - LO)))
    cut = (lo[d] + hi[d]) / 2
    left_hi, right_lo = hi.copy(), lo.copy()
    left_hi[d], right_lo[d] = cut, cut
    return (lo, left_hi), (right_lo, hi)


def bab_max(lo, hi, params, action: int, tol=1e-3, max_boxes=100_000):
    """(best value seen, certified upper bound, boxes) of logit `action` over [lo, hi]."""
    out_w, out_b = params[4][:, [action]], params[5][[action]]

    def value(pts):
        return forward(np.asarray(pts), params)[:, action].max()

    best = value([(lo + hi) / 2])
    heap = [(-float(linear_upper(lo, hi, params, out_w, out_b)[0]), 0, lo, hi)]
    boxes = 1
    while boxes < max_boxes and -heap[0][0] - best > tol:
        _, _, blo, bhi = heapq.heappop(heap)
        for nlo, nhi in _split(blo, bhi):
            best = max(best, value([nlo, nhi, (nlo + nhi) / 2]))
            ub = float(linear_upper(nlo, nhi, params, out_w, out_b)[0])
            heapq.heappush(heap, (-ub, boxes, nlo, nhi))
            boxes += 1
    return best, max(-heap[0][0], best), boxes


def certify(lo, hi, params, action: int, mode: str, max_boxes=100_000):
    """Prove over [lo, hi] that `action` never wins (mode "forbid") or always
    strictly wins (mode "require") the argmax.  Returns (proved, boxes)."""
    w3, c3 = params[4], params[5]
    others = [j for j in range(len(ACTIONS)) if j != action]
    if mode == "forbid":  # need some j with logit_action - logit_j < 0
        out_w = w3[:, [action]] - w3[:, others]
        out_b = c3[action] - c3[others]
    else:  # need every j with logit_j - logit_action < 0
        out_w = w3[:, others] - w3[:, [action]]
        out_b = c3[others] - c3[action]
    stack, boxes = [(lo, hi)], 0
    while stack:
        blo, bhi = stack.pop()
        boxes += 1
        ub = linear_upper(blo, bhi, params, out_w, out_b)
        if (ub.min() < 0) if mode == "forbid" else (ub.max() < 0):
            continue
        if boxes >= max_boxes:
            return False, boxes
        stack.extend(_split(blo, bhi))
    return True, boxes


# --------------------------------------------------------------------------
# ONNX export
# --------------------------------------------------------------------------
def build_model(params32: list[np.ndarray]) -> onnx.ModelProto:
    w1, c1, w2, c2, w3, c3 = params32
    inits = [
        numpy_helper.from_array(w1, "fc1.weight"),  # [5, 16]  (MatMul layout)
        numpy_helper.from_array(c1, "fc1.bias"),
        numpy_helper.from_array(np.ascontiguousarray(w2.T), "fc2.weight"),  # [16, 16] (Gemm transB=1)
        numpy_helper.from_array(c2, "fc2.bias"),
        numpy_helper.from_array(w3, "fc3.weight"),  # [16, 4]  (MatMul layout)
        numpy_helper.from_array(c3, "fc3.bias"),
    ]
    nodes = [
        helper.make_node("MatMul", ["probes", "fc1.weight"], ["fc1.mm"], name="fc1_matmul"),
        helper.make_node("Add", ["fc1.mm", "fc1.bias"], ["fc1.out"], name="fc1_add"),
        helper.make_node("Relu", ["fc1.out"], ["relu1.out"], name="relu1"),
        helper.make_node(
            "Gemm", ["relu1.out", "fc2.weight", "fc2.bias"], ["fc2.out"], name="fc2_gemm",
            alpha=1.0, beta=1.0, transA=0, transB=1,
        ),
        helper.make_node("Relu", ["fc2.out"], ["relu2.out"], name="relu2"),
        helper.make_node("MatMul", ["relu2.out", "fc3.weight"], ["fc3.mm"], name="fc3_matmul"),
        helper.make_node("Add", ["fc3.mm", "fc3.bias"], ["logits"], name="fc3_add"),
    ]
    graph = helper.make_graph(
        nodes,
        "meta_controller",
        [helper.make_tensor_value_info("probes", TensorProto.FLOAT, [1, 5])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, len(ACTIONS)])],
        initializer=inits,
        doc_string=(
            "inputs (physical units): "
            + ", ".join(f"{n} [{lo:g}, {hi:g}] {u}" for n, u, lo, hi in zip(INPUT_NAMES, INPUT_UNITS, LO, HI))
            + "; outputs (argmax, index = token): "
            + ", ".join(f"{i} {a}" for i, a in enumerate(ACTIONS))
        ),
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 13)],
        producer_name="mi-certify examples/meta_controller/make_controller.py",
        producer_version="1",
        doc_string="mi-certify reference meta controller (synthetic teacher labels)",
    )
    model.ir_version = 8
    model.model_version = 1
    helper.set_model_props(
        model,
        {
            "inputs": ",".join(INPUT_NAMES),
            "actions": ",".join(ACTIONS),
            "decode": "argmax",
            "labels": "synthetic hand-written teacher policy",
            "seed": str(SEED),
        },
    )
    return model


def main() -> int:
    rng = np.random.default_rng(SEED)
    x = LO + (HI - LO) * rng.random((N_TRAIN, 5))
    y = teacher(x)
    z = (x - LO) / (HI - LO)

    params = train(z, y, init_params(rng), rng)
    params = absorb_normalisation(params)
    params32 = [p.astype(np.float32) for p in params]
    params64 = [p.astype(np.float64) for p in params32]  # exactly what is shipped

    # ---- training-set report (float32 forward, physical units) -------------
    x32 = x.astype(np.float32)
    pred = forward(x32, params32).argmax(axis=1)
    acc = float((pred == y).mean())
    hot = x[:, 4] >= 95.0
    idle = x[:, 0] <= 0.1
    int4_hot = float((pred[hot] == INT4).mean())
    keep_idle = float((pred[idle] == KEEP).mean())
    print(f"training points            : {N_TRAIN}")
    print(f"training accuracy          : {acc:.4f}")
    for a, name in enumerate(ACTIONS):
        print(f"  per-class recall {name:12s}: {float((pred[y == a] == a).mean()):.4f}"
              f"  (teacher {int((y == a).sum())}, predicted {int((pred == a).sum())})")
    print(f"int4 when temp>=95 (train) : {int4_hot:.4f}  ({int((pred[hot] == INT4).sum())}/{int(hot.sum())})")
    print(f"keep when util<=0.1 (train): {keep_idle:.4f}  ({int((pred[idle] == KEEP).sum())}/{int(idle.sum())})")
    hist = {name: int((pred == a).sum()) for a, name in enumerate(ACTIONS)}
    print(f"prediction histogram       : {hist}")

    # ---- export + checks -------------------------------------------------
    model = build_model(params32)
    onnx.checker.check_model(model, full_check=True)
    data = model.SerializeToString()
    OUT_PATH.write_bytes(data)
    print(f"wrote {OUT_PATH}  sha256 {hashlib.sha256(data).hexdigest()}")

    check_rng = np.random.default_rng(1)
    xc = (LO + (HI - LO) * check_rng.random((1000, 5))).astype(np.float32)
    ref = forward(xc, params32)
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime not installed: skipped the runtime cross-check")
    else:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        got = np.concatenate([sess.run(None, {"probes": xc[i : i + 1]})[0] for i in range(len(xc))])
        diff = float(np.abs(got - ref).max())
        print(f"onnxruntime vs numpy       : max |diff| = {diff:.3e} over {len(xc)} points")
        if diff >= 1e-5:
            print("ERROR: onnxruntime disagrees with the numpy forward pass", file=sys.stderr)
            return 1
        if not np.array_equal(got.argmax(axis=1), ref.argmax(axis=1)):
            print("ERROR: onnxruntime argmax differs from numpy", file=sys.stderr)
            return 1

    # ---- whole-box diagnostics (float64 on the shipped float32 weights) --
    # Dense grid of 21 points per axis (4,084,101 points), one compute_util
    # slice at a time to bound memory.
    axes = [np.linspace(lo, hi, 21) for lo, hi in zip(LO, HI)]
    counts = np.zeros(len(ACTIONS), dtype=np.int64)
    keep_max, agree, total = -np.inf, 0, 0
    hot_int4 = hot_n = idle_keep = idle_n = 0
    for cu in axes[0]:
        rest = np.stack(np.meshgrid(*axes[1:], indexing="ij"), axis=-1).reshape(-1, 4)
        grid = np.hstack([np.full((len(rest), 1), cu), rest])
        glog = forward(grid, params64)
        gpred = glog.argmax(axis=1)
        counts += np.bincount(gpred, minlength=len(ACTIONS))
        keep_max = max(keep_max, float(glog[:, KEEP].max()))
        agree += int((gpred == teacher(grid)).sum())
        total += len(grid)
        ghot = grid[:, 4] >= 95.0
        hot_int4 += int((gpred[ghot] == INT4).sum())
        hot_n += int(ghot.sum())
        if cu <= 0.1:
            idle_keep += int((gpred == KEEP).sum())
            idle_n += len(grid)
    print(f"dense grid (21^5 = {total} pts): prediction histogram "
          f"{ {name: int(counts[a]) for a, name in enumerate(ACTIONS)} }")
    print(f"  grid max keep logit         : {keep_max:.4f}")
    print(f"  grid agreement with teacher : {agree / total:.4f}")
    print(f"  grid int4 when temp>=95     : {hot_int4}/{hot_n}")
    print(f"  grid keep when util<=0.1    : {idle_keep}/{idle_n}")

    best, upper, nbox = bab_max(LO.copy(), HI.copy(), params64, KEEP)
    print(f"keep logit over whole box  : max found {best:.4f}, certified upper bound {upper:.4f} "
          f"({nbox} boxes)")
    hot_lo, idle_hi = LO.copy(), HI.copy()
    hot_lo[4], idle_hi[0] = 95.0, 0.1
    ok1, n1 = certify(hot_lo, HI.copy(), params64, INT4, "forbid")
    ok2, n2 = certify(LO.copy(), idle_hi, params64, KEEP, "require")
    print(f"P1 temperature_c in [95,110] -> never int4 : {'PROVED' if ok1 else 'not proved'} ({n1} boxes)")
    print(f"P2 compute_util in [0,0.1]  -> always keep : {'PROVED' if ok2 else 'not proved'} ({n2} boxes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
