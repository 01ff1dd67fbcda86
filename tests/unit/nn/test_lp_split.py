"""ReLU-split LP leaves (verification/nn/lp_split.py): the safe bound, completeness on small
networks against Z3, the worker path, and the ACAS Xu rows input splitting alone left open."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, ANCHORS
from mi_certify.generator.core.ir import ReluNode
from mi_certify.generator.frontend.model import load_model
from mi_certify.verification.nn.bounds import NodeBounds, crown_bounds
from mi_certify.verification.nn import lp_split
from mi_certify.verification.nn.lp_split import BoxLP, SplitLP, close_leaves, split_leaf
from mi_certify.verification.nn.nn_verify import Verdict, VerifyOptions, decide
from mi_certify.verification.nn.vnnlib import parse_vnnlib
from mi_certify.verification.nn.z3_exact import ExactChecker
from test_verification import _node_values, _random_dag


def _one(nb):
    return NodeBounds([v[0] for v in nb.lower], [v[0] for v in nb.upper])


@pytest.mark.parametrize("kind", ["split", "box"])
@pytest.mark.parametrize("seed", range(8))
def test_safe_bound_holds_on_every_sampled_point_of_the_subdomain_and_is_the_lp_optimum(seed, kind):
    """Any phases, either LP (the whole network's, or the box's over its unstable neurons): the bound
    is below t(x) = max_r (C y(x) - d)_r at every sampled point whose pre-activations have those
    signs; +inf (empty) only when no sampled point has them; and within 1e-6 of HiGHS's optimum (the
    outward rounding costs nothing visible)."""
    rng = np.random.default_rng(seed)
    ir = _random_dag(rng, int(rng.integers(2, 6)), [int(v) for v in rng.integers(4, 14, size=rng.integers(1, 4))],
                     int(rng.integers(2, 5)))
    C = rng.standard_normal((3, ir.n_outputs))
    lo = rng.uniform(-1, 0, ir.n_inputs)
    hi = lo + rng.uniform(0.3, 1.0, ir.n_inputs)
    x = lo + (hi - lo) * rng.random((20000, ir.n_inputs))
    vals = _node_values(ir, x)
    d = np.quantile(vals[ir.outputs[0]] @ C.T, 0.3, axis=0)
    nb = _one(crown_bounds(ir, lo[None], hi[None]))
    lp = SplitLP(ir, C, d) if kind == "split" else BoxLP(ir, C, d, lo, hi, nb)
    assert kind == "split" or lp.ok
    relus = [nid for nid, node in enumerate(ir.nodes) if isinstance(node, ReluNode)]
    seen_finite = 0
    for trial in range(6):
        phases, inside = {}, np.ones(x.shape[0], dtype=bool)
        for nid in relus:
            src = ir.nodes[nid].src
            unstable = np.nonzero((nb.lower[src] < 0) & (nb.upper[src] > 0))[0]
            ph = np.zeros(ir.nodes[nid].size, dtype=np.int8)
            for k in rng.permutation(unstable)[:trial]:
                ph[k] = rng.choice([-1, 1])
                inside &= (vals[src][:, k] >= 0) if ph[k] > 0 else (vals[src][:, k] <= 0)
            phases[nid] = ph
        bound, point, _ = lp.solve(lo, hi, nb, phases)
        t = np.max(vals[ir.outputs[0]][inside] @ C.T - d, axis=1)
        if bound == np.inf:
            assert not inside.any(), "a subdomain with points was called empty"
            continue
        assert np.isfinite(bound)
        assert np.all(t >= bound - 1e-9)
        objective = lp.h.getInfo().objective_function_value
        assert bound <= objective + 1e-12 and objective - bound <= 1e-6 * (1 + abs(objective))
        assert point.shape == (ir.n_inputs,) and np.all(point >= lo - 1e-9) and np.all(point <= hi + 1e-9)
        seen_finite += 1
    assert seen_finite >= 1


@pytest.mark.parametrize("seed", range(6))
def test_the_box_lp_has_the_whole_network_lps_optimum(seed):
    """The box's LP substitutes the stable neurons out of the whole network's LP: the same optimum
    (within 1e-6) on random networks with a skip connection, random subdomains (phases, and bounds
    tightened by CROWN under them), and the same emptiness; with fewer rows."""
    rng = np.random.default_rng(300 + seed)
    ir = _random_dag(rng, int(rng.integers(2, 7)), [int(v) for v in rng.integers(6, 16, size=rng.integers(2, 4))],
                     int(rng.integers(2, 5)))
    C = rng.standard_normal((3, ir.n_outputs))
    lo = rng.uniform(-1, 0, ir.n_inputs)
    hi = lo + rng.uniform(0.2, 1.0, ir.n_inputs)
    d = np.quantile(ir.evaluate(lo + (hi - lo) * rng.random((4000, ir.n_inputs))) @ C.T, 0.2, axis=0)
    root = _one(crown_bounds(ir, lo[None], hi[None]))
    whole, box = SplitLP(ir, C, d), BoxLP(ir, C, d, lo, hi, root)
    assert box.ok and box.n_rows < whole.n_rows
    relus = [nid for nid, node in enumerate(ir.nodes) if isinstance(node, ReluNode)]
    compared = 0
    for trial in range(8):
        phases = {}
        for nid in relus:
            src = ir.nodes[nid].src
            ph = np.zeros(ir.nodes[nid].size, dtype=np.int8)
            unstable = np.nonzero((root.lower[src] < 0) & (root.upper[src] > 0))[0]
            for k in rng.permutation(unstable)[:trial // 2]:
                ph[k] = rng.choice([-1, 1])
            phases[nid] = ph
        nb = root
        if trial % 2:   # a subdomain's own bounds, as split_leaf makes them
            sub = crown_bounds(ir, lo[None], hi[None], init=root, phases={ir.nodes[a].src: p for a, p in phases.items()})
            nb = NodeBounds([np.maximum(a[0], b) for a, b in zip(sub.lower, root.lower)],
                            [np.minimum(a[0], b) for a, b in zip(sub.upper, root.upper)])
        a, _, _ = whole.solve(lo, hi, nb, phases)
        b, _, _ = box.solve(lo, hi, nb, phases)
        assert (a == np.inf) == (b == np.inf), (trial, a, b)
        if np.isfinite(a) and np.isfinite(b):
            assert abs(a - b) <= 1e-6 * (1 + abs(a)), (trial, a, b)
            compared += 1
    assert compared >= 3


@pytest.mark.parametrize("seed", range(3))
def test_crown_from_a_parents_bounds_keeps_them_up_to_the_split_and_contains_every_value_after(seed):
    """``crown_bounds(init=, keep=)``: nodes up to ``keep`` (the split's pre-activation) have the parent's
    bounds, clipped by the phases; every later node's bounds contain the values of sampled points of the
    subdomain (the split neuron's sign imposed)."""
    rng = np.random.default_rng(40 + seed)
    ir = _random_dag(rng, 3, [12, 12, 12], 2)
    lo, hi = -np.ones(3), np.ones(3)
    parent = _one(crown_bounds(ir, lo[None], hi[None]))
    relu = [nid for nid, node in enumerate(ir.nodes) if isinstance(node, ReluNode)][-1]
    src = ir.nodes[relu].src
    k = int(np.nonzero((parent.lower[src] < 0) & (parent.upper[src] > 0))[0][0])
    x = lo + (hi - lo) * rng.random((20000, 3))
    vals = _node_values(ir, x)
    for sign in (-1, 1):
        ph = np.zeros(ir.nodes[relu].size, dtype=np.int8)
        ph[k] = sign
        got = crown_bounds(ir, lo, hi, init=parent, keep=src, phases={src: ph})
        inside = vals[src][:, k] * sign >= 0
        for nid in range(len(ir.nodes)):
            if nid < src:
                assert np.array_equal(got.lower[nid], parent.lower[nid]) and np.array_equal(got.upper[nid], parent.upper[nid])
            assert np.all(vals[nid][inside] >= got.lower[nid] - 1e-9) and np.all(vals[nid][inside] <= got.upper[nid] + 1e-9)
        clipped = got.lower[src][k] if sign > 0 else got.upper[src][k]
        assert clipped == 0.0


def test_a_box_lp_too_large_or_not_finite_leaves_the_box_to_the_whole_network_lp(monkeypatch):
    """Past BOX_LP_MAX_ENTRIES (or with an infinite form, a coefficient HiGHS refuses, a NaN bound) the box
    LP says so (``ok`` False) and split_leaf solves the box with the whole network's LP: the same answers."""
    rng = np.random.default_rng(11)
    ir = _random_dag(rng, 3, [10, 10], 2)
    C = np.array([[1.0, -1.0]])
    lo, hi = -np.ones(3), np.ones(3)
    ys = ir.evaluate(lo + (hi - lo) * rng.random((5000, 3)))
    empty = np.array([float(np.min(ys @ C.T)) - 1.0])    # Z3: unsat over the box
    some = np.array([float(np.min(ys @ C.T)) - 0.3])     # Z3: sat
    nb = _one(crown_bounds(ir, lo[None], hi[None]))
    assert BoxLP(ir, C, empty, lo, hi, nb).ok
    assert not BoxLP(ir, C, np.array([np.inf]), lo, hi, nb).ok
    assert not BoxLP(ir, C * 1e17, empty, lo, hi, nb).ok   # HiGHS refuses coefficients above 1e15
    nan = NodeBounds([v.copy() for v in nb.lower], [v.copy() for v in nb.upper])
    nan.lower[1][0] = np.nan
    assert not BoxLP(ir, C, empty, lo, hi, nan).ok
    for rows, rhs in ((np.zeros((0, 2)), np.zeros(0)), (C, np.array([np.inf]))):   # no row that binds
        kind, x = split_leaf(ir, rows, rhs, lo, hi, float("inf"))
        assert kind == "candidate" and np.array_equal(x, (lo + hi) / 2)
    small = [split_leaf(ir, C, d, lo, hi, float("inf")) for d in (empty, some)]
    monkeypatch.setattr(lp_split, "BOX_LP_MAX_ENTRIES", 10)
    assert not BoxLP(ir, C, empty, lo, hi, nb).ok
    large = [split_leaf(ir, C, d, lo, hi, float("inf")) for d in (empty, some)]
    assert [k for k, _ in small] == [k for k, _ in large] == ["closed", "candidate"]
    assert small[0][1] >= 1 and large[0][1] >= 1


@pytest.mark.parametrize("seed", range(10))
def test_split_leaf_decides_small_networks_as_z3_does(seed):
    """Complete on small networks: "closed" only where Z3 (exact rationals) finds no point,
    and a Z3 counterexample region is never closed but yields an LP point inside it."""
    rng = np.random.default_rng(100 + seed)
    ir = _random_dag(rng, int(rng.integers(2, 4)), [int(v) for v in rng.integers(3, 9, size=rng.integers(1, 3))],
                     2)
    C = np.array([[1.0, -1.0]])
    lo = rng.uniform(-1, 0, ir.n_inputs)
    hi = lo + rng.uniform(0.5, 1.5, ir.n_inputs)
    ys = ir.evaluate(lo + (hi - lo) * rng.random((5000, ir.n_inputs)))
    margin = ys @ C.T
    for d in (np.array([float(np.min(margin)) - 0.05]), np.array([float(np.quantile(margin, 0.02))])):
        exact, _ = ExactChecker(ir, C, d).check(lo, hi, 60.0)
        kind, what = split_leaf(ir, C, d, lo, hi, float("inf"), max_lps=20000)
        assert exact in ("sat", "unsat")
        if exact == "unsat":
            assert kind == "closed" and what >= 1
        else:
            assert kind == "candidate"
            y = ir.evaluate(np.asarray(what)[None])[0]
            assert np.all(what >= lo - 1e-9) and np.all(what <= hi + 1e-9)
            assert float(C[0] @ y - d[0]) <= 1e-6


def _boxes_64():
    """A random 3-input network, the row y0 - y1, 64 boxes tiling [-1, 1]^3 and 5,000 sampled outputs."""
    rng = np.random.default_rng(7)
    ir = _random_dag(rng, 3, [10, 10], 2)
    edges = np.linspace(-1, 1, 5)[:-1]
    boxes = [(np.array([a, b, c]), np.array([a + 0.5, b + 0.5, c + 0.5])) for a in edges for b in edges for c in edges]
    return ir, np.array([[1.0, -1.0]]), boxes, ir.evaluate(-1 + 2 * rng.random((5000, 3)))


def test_leaves_in_worker_processes_give_the_answers_of_this_process():
    ir, C, boxes, ys = _boxes_64()
    # a region empty on every box: all closed, the same LP counts whichever process ran them
    d = np.array([float(np.min(ys @ C.T)) - 0.5])
    one = close_leaves(ir, C, d, boxes, float("inf"), workers=1)
    two = close_leaves(ir, C, d, boxes, float("inf"), workers=2)
    assert len(one) == len(boxes) == 64
    assert [k for k, _ in one] == ["closed"] * 64 == [k for k, _ in two]
    assert [n for _, n in one] == [n for _, n in two]
    # a region Z3 finds points of in boxes 48, 52 and 56 (the minimum sampled margin - 0.02):
    # the search stops at box 48 with an LP point of the region; in this process every box
    # before it is closed; with workers, the chunk still running when the point came back is
    # stopped ("open", not reached), never "closed" without its LPs
    d = np.array([float(np.min(ys @ C.T)) - 0.02])
    assert [k for k, b in enumerate(boxes) if ExactChecker(ir, C, d).check(*b, 60.0)[0] == "sat"] == [48, 52, 56]
    here = close_leaves(ir, C, d, boxes, float("inf"), workers=1)
    there = close_leaves(ir, C, d, boxes, float("inf"), workers=2)
    assert [k for k, _ in here] == ["closed"] * 48 + ["candidate"] + ["open"] * 15
    assert there[48][0] == "candidate" and np.array_equal(there[48][1], here[48][1])
    assert all(there[k] == here[k] or there[k] == ("open", "not reached") for k in range(64) if k != 48)
    assert float(C[0] @ ir.evaluate(here[48][1][None])[0] - d[0]) <= 0


def _stream(ir, C, d, boxes, deadline=float("inf"), pause=0.0, extra=0):
    """LeafStream fed the boxes one by one (``pause`` s after each chunk, as input splitting files its leaves
    while it works); the last ``extra`` boxes go to finish() as the caller's open boxes."""
    s = lp_split.LeafStream(ir, C, d, deadline, workers=2)
    cut = len(boxes) - extra
    for k, b in enumerate(boxes[:cut]):
        s.add(b, None)
        if pause and (k + 1) % lp_split.LEAF_CHUNK == 0:
            time.sleep(pause)
    return s, s.finish(boxes[cut:], None)


def test_the_leaf_stream_gives_the_answers_of_close_leaves():
    """The leaves handed to the workers while the caller goes on (LeafStream): the answers close_leaves gives
    for the same boxes, in the same order; the same LP counts where every box closes; with a point of the
    region, the same candidate, and every other box either the same answer or "not reached" (never a closed
    box without its LPs); the caller's open boxes (``extra``) answered after the leaves."""
    from conftest import spawned_workers
    ir, C, boxes, ys = _boxes_64()
    d = np.array([float(np.min(ys @ C.T)) - 0.5])
    ref = close_leaves(ir, C, d, boxes, float("inf"), workers=1)
    for pause, extra in ((0.0, 0), (0.3, 5), (0.0, 64)):
        stream, got = _stream(ir, C, d, boxes, pause=pause, extra=extra)
        assert got == ref, (pause, extra)
        # 64 boxes, two chunks of 32 (the extra boxes chunked after the leaves); no leaf filed: close_leaves itself
        assert len(stream._items) == (0 if extra == 64 else 2)
    assert spawned_workers(os.getpid()) == []
    d = np.array([float(np.min(ys @ C.T)) - 0.02])   # points of the region in boxes 48, 52 and 56
    here = close_leaves(ir, C, d, boxes, float("inf"), workers=1)
    _, there = _stream(ir, C, d, boxes, pause=0.2)
    assert [k for k, _ in here] == ["closed"] * 48 + ["candidate"] + ["open"] * 15
    assert there[48][0] == "candidate" and np.array_equal(there[48][1], here[48][1])
    assert all(there[k] == here[k] or there[k] == ("open", "not reached") for k in range(64) if k != 48)
    assert all(there[k] == ("open", "not reached") for k in range(49, 64))
    assert spawned_workers(os.getpid()) == []


def test_a_leaf_stream_without_worker_processes_decides_in_this_process(monkeypatch):
    """No worker process can start (WorkersLost): finish() decides every leaf here, the same answers."""
    from mi_certify.verification.tools import workers

    def refuse(fn):
        raise OSError("no processes here")
    ir, C, boxes, ys = _boxes_64()
    d = np.array([float(np.min(ys @ C.T)) - 0.5])
    ref = close_leaves(ir, C, d, boxes, float("inf"), workers=1)
    monkeypatch.setattr(workers, "_start_worker", refuse)
    stream, got = _stream(ir, C, d, boxes)
    assert stream._lost and got == ref


def test_the_leaf_stream_keeps_its_deadline_and_cancel_leaves_no_worker():
    """A stream whose leaves cannot be decided in time: finish() returns by the deadline (+ 2 s) with the
    undecided boxes "not reached" or "open" (never "closed"); cancel() while a chunk runs stops the workers."""
    from conftest import spawned_workers
    rng = np.random.default_rng(3)
    ir = _random_dag(rng, 4, [40, 40, 40], 2)
    C = np.array([[1.0, -1.0]])
    ys = ir.evaluate(-1 + 2 * rng.random((5000, 4)))
    d = np.array([float(np.min(ys @ C.T)) - 0.05])
    boxes = [(-np.ones(4) + 0.01 * k, np.ones(4)) for k in range(96)]
    t0 = time.monotonic()
    stream, got = _stream(ir, C, d, boxes, deadline=t0 + 3.0)
    assert time.monotonic() - t0 < 3.0 + 2.0
    assert len(got) == 96 and all(k != "closed" or n >= 1 for k, n in got)
    assert any(k == "open" for k, _ in got)
    assert spawned_workers(os.getpid()) == []
    s = lp_split.LeafStream(ir, C, d, float("inf"), workers=2)
    for b in boxes[:64]:
        s.add(b, None)
    time.sleep(1.5)   # the workers are on the first chunks
    t0 = time.monotonic()
    s.cancel()
    assert time.monotonic() - t0 < 2.0
    assert spawned_workers(os.getpid()) == []


def test_highs_prints_nothing_on_stdout():
    code = (f"import sys\nsys.path[:0] = [{str(ROOT / 'tests')!r}, {str(Path(__file__).resolve().parent)!r}]\n"
            "import numpy as np\nfrom test_verification import _random_dag\n"
            "from mi_certify.verification.nn.lp_split import split_leaf\n"
            "ir = _random_dag(np.random.default_rng(0), 2, [6], 2)\n"
            "split_leaf(ir, np.array([[1.0, -1.0]]), np.array([-50.0]), -np.ones(2), np.ones(2), float('inf'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=str(Path(__file__).resolve().parent))
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""


@pytest.mark.parametrize("net,prop", [("4_2", 2)])
def test_acasxu_row_input_splitting_left_open_is_proved_by_the_lp_leaves(net, prop):
    """Undecided at 300 s by input splitting alone (3_3/p2 and 4_2/p2); with ReLU-split LP
    leaves in 2 processes: 26 s and 39 s on the reference machine (bench/verify.py)."""
    root = ANCHORS / "acasxu"
    model = load_model(root / "onnx" / f"ACASXU_run2a_{net}_batch_2000.onnx")
    res = decide(model, parse_vnnlib(root / "vnnlib" / f"prop_{prop}.vnnlib", 5, 5),
                 VerifyOptions(timeout=240, use_marabou=False))
    assert res.verdict == Verdict.PROVED, res
    assert res.method == "bounds+lp" and res.stats["lp_leaves"] > 100 and res.stats["lp_calls"] > res.stats["lp_leaves"]



def _crown_closings(monkeypatch, d_of) -> list[int]:
    """Counts, per call of split_leaf's CROWN pre-check, the subdomains its output bound closes
    (``d_of()``: the region's current d)."""
    import mi_certify.verification.nn.lp_split as L
    closed: list[int] = []
    real = L.output_matrix_lower

    def counted(ir, C, lo, hi, nb, **kw):
        low, lin = real(ir, C, lo, hi, nb, **kw)
        closed.append(int(np.sum(np.max(low - d_of(), axis=1) > 0)))
        return low, lin

    monkeypatch.setattr(L, "output_matrix_lower", counted)
    return closed


def test_split_leaf_with_several_rows_decides_as_z3_does(monkeypatch):
    """Regions of three rows (C y <= d, all of them) on random networks: split_leaf closes a subdomain
    without an LP where its CROWN output bound puts some row above its limit everywhere (the pre-check on
    both subdomains of a split). Its answers stay those of Z3 (exact rationals), and the pre-check does
    close subdomains here. Z3 may answer unknown within its budget on a loaded machine (a fresh helper saw
    it on one region): that region is left out; most must be decided."""
    current = [None]
    closed = _crown_closings(monkeypatch, lambda: current[0])
    answers = []
    for seed in range(8):
        rng = np.random.default_rng(500 + seed)
        ir = _random_dag(rng, int(rng.integers(2, 4)),
                         [int(v) for v in rng.integers(4, 10, size=rng.integers(1, 3))], 3)
        C = rng.standard_normal((3, 3))
        lo = rng.uniform(-1, 0, ir.n_inputs)
        hi = lo + rng.uniform(0.5, 1.5, ir.n_inputs)
        m = ir.evaluate(lo + (hi - lo) * rng.random((5000, ir.n_inputs))) @ C.T
        base = np.quantile(m, 0.5, axis=0)
        worst = np.max(m - base, axis=1)   # a point is in the region base + s when worst <= s
        for shift in (float(np.min(worst)) - 0.05, float(np.quantile(worst, 0.03))):
            d = current[0] = base + shift
            exact, _ = ExactChecker(ir, C, d).check(lo, hi, 20.0)
            kind, what = split_leaf(ir, C, d, lo, hi, float("inf"), max_lps=20000)
            answers.append((exact, kind))
            assert exact in ("sat", "unsat", "unknown")
            if exact == "unknown":
                continue
            if exact == "unsat":
                assert kind == "closed", (seed, shift)
            else:
                assert kind == "candidate", (seed, shift)
                # an LP point (HiGHS's tolerances), replayed by the caller before anything is reported
                y = ir.evaluate(np.asarray(what)[None])[0]
                assert np.all(what >= lo - 1e-6) and np.all(what <= hi + 1e-6)
                assert np.all(C @ y - d <= 1e-6)
    decided = [a for a, _ in answers if a != "unknown"]
    assert len(decided) >= 12 and set(decided) == {"sat", "unsat"}, answers
    assert sum(closed) > 0, closed


def test_the_crown_pre_check_closes_subdomains_on_an_acasxu_leaf(monkeypatch):
    """A box of ACAS Xu 4_2 / property 2 that CROWN alone leaves open: ReLU splitting closes it, and
    the CROWN pre-check closes some of its subdomains without an LP."""
    root = ANCHORS / "acasxu"
    ir = load_model(root / "onnx" / "ACASXU_run2a_4_2_batch_2000.onnx").ir
    q = parse_vnnlib(root / "vnnlib" / "prop_2.vnnlib", 5, 5)
    (dj,) = q.disjuncts
    closed = _crown_closings(monkeypatch, lambda: dj.d)
    lo, hi = np.asarray(dj.lo, dtype=float), np.asarray(dj.hi, dtype=float)
    mid = (lo + hi) / 2
    box_lo, box_hi = mid - (hi - lo) / 32, mid + (hi - lo) / 32   # 208 LPs (2026-12-07)
    kind, what = split_leaf(ir, dj.C, dj.d, box_lo, box_hi, float("inf"))
    assert kind == "closed" and what > 1
    # one pre-check per split, two subdomains each: every subdomain it closed went without an LP
    assert sum(closed) > 0 and what <= 1 + 2 * len(closed) - sum(closed), (what, closed)


def test_two_relus_on_one_source_pass_both_phases_to_crown():
    """Two ReLU nodes reading one pre-activation node: the phases CROWN gets for that node are both
    nodes' (one dict entry per source node kept only the last before)."""
    from mi_certify.verification.nn.lp_split import _source_phases
    kids = [{2: np.array([1, 0, 0], dtype=np.int8), 4: np.array([0, -1, 0], dtype=np.int8), 6: np.array([0, 0, 1], np.int8)},
            {2: np.array([-1, 0, 0], dtype=np.int8), 4: np.array([0, 0, 0], dtype=np.int8), 6: np.array([0, 0, 0], np.int8)}]
    got = _source_phases(kids, {2: 1, 4: 1, 6: 5})
    assert sorted(got) == [1, 5]
    assert got[1].tolist() == [[1, -1, 0], [-1, 0, 0]]
    assert got[5].tolist() == [[0, 0, 1], [0, 0, 0]]


def test_an_lp_probe_gives_its_box_back_when_its_budget_runs_out_and_the_other_boxes_go_on():
    """A box with an LP budget (input splitting's LP probe) whose budget runs out is answered ("split", LPs)
    and does not stop the leaves after it (an "open" leaf would); a probe whose budget suffices closes with
    the same LP count as a leaf. The same answers in this process, in worker processes and streamed."""
    from conftest import spawned_workers
    ir, C, boxes, ys = _boxes_64()
    d = np.array([float(np.min(ys @ C.T)) - 0.5])
    ref = close_leaves(ir, C, d, boxes, float("inf"), workers=1)
    assert [n for _, n in ref][48:57:4] == [2, 5, 5]   # boxes 48, 52, 56 need 2, 5, 5 LPs; the others 1
    budgets = [None] * 64
    budgets[48], budgets[52], budgets[56] = 1, 2, 5
    want = list(ref)
    want[48], want[52] = ("split", 1), ("split", 2)
    for workers in (1, 2):
        assert close_leaves(ir, C, d, boxes, float("inf"), workers=workers, budgets=budgets) == want, workers
    s = lp_split.LeafStream(ir, C, d, float("inf"), workers=2)
    for b, n in zip(boxes, budgets):
        s.add(b, None, n)
    assert s.finish() == want
    assert spawned_workers(os.getpid()) == []
    # without give_back the budget running out leaves the box open, as before
    assert split_leaf(ir, C, d, *boxes[52], float("inf"), max_lps=2) == ("open", "2 LPs")
    assert split_leaf(ir, C, d, *boxes[52], float("inf"), max_lps=2, give_back=True) == ("split", 2)
    assert lp_split.ends_leaves("open") and lp_split.ends_leaves("candidate")
    assert not lp_split.ends_leaves("closed") and not lp_split.ends_leaves("split")


def _spike_network(tmp_path, spike: float, name: str):
    """2 inputs, 40 + 40 ReLUs: a random network plus, with ``spike`` > 0, a narrow spike at c (layer-2 neuron 0
    = relu(1 - 500 |x - c|_1)) that lowers y0 - y1 by ``spike`` there (a helper's reproducer, 2026-12-07)."""
    from conftest import save_model, tensor
    from onnx import helper
    rng = np.random.default_rng(7)
    sizes = [2, 40, 40, 2]
    W = [rng.standard_normal((a, b)) * np.sqrt(2.0 / a) for a, b in zip(sizes[:-1], sizes[1:])]
    B = [0.1 * rng.standard_normal(b) for b in sizes[1:]]
    c = np.array([0.3071, -0.4419])
    W[0][:, :4] = 0.0
    for j, (i, sgn) in enumerate([(0, 1), (0, -1), (1, 1), (1, -1)]):
        W[0][i, j], B[0][j] = sgn, -sgn * c[i]
    W[1][:4, :] = 0.0
    W[1][:, 0] = 0.0
    W[1][:4, 0], B[1][0] = -500.0, 1.0
    W[2][0, :] = 0.0
    W[2][0, 0] = -spike
    nodes, inits, cur = [], [], "x"
    for k in range(3):
        inits += [(f"W{k}", W[k]), (f"B{k}", B[k])]
        nodes += [helper.make_node("MatMul", [cur, f"W{k}"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", f"B{k}"], ["y" if k == 2 else f"a{k}"])]
        if k < 2:
            nodes.append(helper.make_node("Relu", [f"a{k}"], [f"r{k}"]))
            cur = f"r{k}"
    path = save_model(tmp_path, name, nodes, [tensor("x", [1, 2])], [tensor("y", [1, 2])], inits)
    return load_model(path), c


def test_the_leaf_lp_cache_tells_networks_apart(tmp_path, monkeypatch):
    """The leaves' SplitLP cache was keyed by the rows alone: after a query on network B, the same rows on
    network A (same sizes, plus a spike that puts points in the region) reused B's LP for leaves whose box LP
    is not usable (here: none is, BOX_LP_MAX_ENTRIES = 0, as for a wide network), and A was PROVED. Keyed by
    the network too: A is VIOLATED after B as alone."""
    from mi_certify.verification.nn.properties import Disjunct, Query
    from mi_certify.verification.nn.nn_verify import VerifyOptions
    monkeypatch.setattr(lp_split, "BOX_LP_MAX_ENTRIES", 0)
    b, c = _spike_network(tmp_path, 0.0, "spike_b")
    a, _ = _spike_network(tmp_path, 10.0, "spike_a")
    lo, hi = -np.ones(2), np.ones(2)
    C = np.array([[1.0, -1.0]])
    x = lo + (hi - lo) * np.random.default_rng(0).random((400000, 2))
    d = np.array([float((b.ir.evaluate(x) @ C.T).min()) - 0.02])
    assert float(C[0] @ a.ir.evaluate(c[None])[0] - d[0]) < -9   # A has points of the region near c
    q = Query("q", "custom", (Disjunct(lo, hi, C, d),))
    opts = VerifyOptions(timeout=60, workers=1, use_marabou=False)
    assert decide(b, q, opts).verdict == Verdict.PROVED
    got = decide(a, q, opts)
    assert got.verdict == Verdict.VIOLATED, got.detail
    assert lp_split.network_key(a.ir) != lp_split.network_key(b.ir)
    assert lp_split.network_key(a.ir) == lp_split.network_key(_spike_network(tmp_path, 10.0, "spike_a2")[0].ir)
