"""Distillation group of ``mi-certify check``: distillation.json and its tables against the grid and the network.

Re-derives from distillation.json, distillation_boxes.npy, distillation_witnesses.npy,
lut.hex, lut_properties.json and the network:

* the boxes partition the quantized grid, cell by cell (independent);
* the LUT the boxes (and the overridden cells) give equals lut.hex (independent); the
  cell status this gives is kept in :attr:`.common.CheckContext.box_status`;
* every proven box: its CROWN margin lower bound computed again, bit for bit, and its
  confidence bound (same code); single cells proven by bisection decided again (same
  code); onnxruntime decodes the LUT's action at the centre and at
  :data:`INTERIOR_POINTS` seeded interior points of every proven cell (independent);
* every resolved cell: its witnesses lie in the cell (exact rationals) and replay on
  onnxruntime, and its entry follows the recorded policy (independent).

Skipped when the LUT was sampled (no distillation.json).
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np

from mi_certify.generator.core.lut import split_table
from mi_certify.runtime.lut_file import pack_entry
from mi_certify.verification.check.common import FAIL, SKIP, Checker, CheckContext, require
from mi_certify.verification.check.network import TOLERANCE, decode_margin, decoded, onnxruntime_outputs

#: Seeded interior points per proven cell evaluated on onnxruntime (plus the centre).
INTERIOR_POINTS = 2


def addresses(spec, lo, hi) -> np.ndarray:
    """LUT addresses (int64, ascending) of the box of grid levels lo..hi (inclusive, one
    level per input, input 0 most significant)."""
    addr = np.zeros(1, dtype=np.int64)
    for i, inp in enumerate(spec.inputs):
        lv = np.arange(lo[i], hi[i] + 1, dtype=np.int64)
        addr = (addr[:, None] << inp.bits | lv[None, :]).reshape(-1)
    return addr


def _cell_edges(inp, q: int) -> tuple[Fraction, Fraction]:
    return _edges(float(inp.min), float(inp.max), int(inp.bits), int(q))


@functools.lru_cache(maxsize=1 << 16)
def _edges(lo_f: float, hi_f: float, bits: int, q: int) -> tuple[Fraction, Fraction]:
    """Cell ``q``'s edges of an input over [lo_f, hi_f] at ``bits`` bits, exact rationals (cached:
    a resolved cell's witnesses share their cell's edges)."""
    lo, hi = Fraction(lo_f), Fraction(hi_f)
    step = (hi - lo) / (1 << bits)
    return lo + q * step, lo + (q + 1) * step


def _levels_of(spec, addr: int) -> list[int]:
    out = []
    for inp in reversed(spec.inputs):
        out.append(addr & ((1 << inp.bits) - 1))
        addr >>= inp.bits
    return out[::-1]


def _where_in_cell(spec, levels, x) -> tuple[bool, bool]:
    """(x in the half-open cell (last cell closed), x in the closed box), in exact rationals."""
    half_open = closed = True
    for inp, q, v in zip(spec.inputs, levels, x):
        a, b = _cell_edges(inp, q)
        fv = Fraction(float(v))
        last = q == (1 << inp.bits) - 1
        closed = closed and a <= fv <= b
        half_open = half_open and a <= fv and (fv < b or (last and fv == b))
        if not closed:
            break
    return half_open and closed, closed


def check_distillation(c: Checker, ev: CheckContext) -> None:
    """Items ``lut.partition``, ``lut.tables: LUT = distillation boxes``, ``lut.proven_cells: ...``,
    ``lut.resolved_cells: ...``; sets ``ev.box_status``. A SKIP without distillation.json."""
    if not (c.d / "distillation.json").exists():
        c.add("distillation", SKIP, "independent", "the LUT was sampled (--sample-lut): no cell is proven")
        return
    from mi_certify.generator.bundle.distillation_file import read_distillation
    try:
        dist = read_distillation(c.d)
        n = len(ev.spec.inputs)
        require(dist["boxes"]["level_lo"].shape[1:] == (n,) and dist["witnesses"]["x"].shape[1:] == (n,),
                f"the tables do not hold {n} inputs per record")
    except (ValueError, KeyError) as exc:
        c.add("distillation tables readable", FAIL, "integrity", str(exc))
        return
    boxes = dist["boxes"]
    if not c.run("lut.partition: boxes partition the grid", "independent", lambda: _partition(ev.spec, boxes)):
        return
    c.run("lut.tables: LUT = distillation boxes", "independent", lambda: _lut_from_boxes(c, ev, boxes))
    proven = boxes[boxes["verdict"] == 0]
    c.run("lut.proven_cells: CROWN bounds re-computed per proven box", "same code", lambda: _crown_bounds(ev, proven))
    others = proven[proven["method"] != 0]
    if len(others):
        c.run("lut.proven_cells: single cells re-decided", "same code", lambda: _bisected_cells(ev, others))
    c.run("lut.proven_cells: onnxruntime agrees in every proven cell", "independent", lambda: _onnxruntime_agrees(ev))
    c.run("lut.resolved_cells: witnesses replay, policy applied", "independent", lambda: _resolved(ev, dist))


def _box_cells(spec, boxes: np.ndarray):
    """Yield (box indices, their addresses (k, cells per box)), boxes grouped by their extent."""
    lo = boxes["level_lo"].astype(np.int64)
    span = boxes["level_hi"].astype(np.int64) - lo
    base = np.zeros(len(boxes), dtype=np.int64)
    for i, inp in enumerate(spec.inputs):
        base = (base << inp.bits) + lo[:, i]
    extents, which = np.unique(span, axis=0, return_inverse=True)
    which = which.reshape(-1)
    for k, ext in enumerate(extents):
        idx = np.nonzero(which == k)[0]
        yield idx, base[idx, None] + addresses(spec, np.zeros_like(ext), ext)[None, :]


def _partition(spec, boxes: np.ndarray) -> str:
    # independent re-computation (deliberately not the build's code): every cell counted over the boxes
    n = 1 << spec.address_bits
    lo, hi = boxes["level_lo"].astype(np.int64), boxes["level_hi"].astype(np.int64)
    top = np.array([1 << i.bits for i in spec.inputs])
    bad = np.nonzero(~(np.all(lo <= hi, axis=1) & np.all(hi < top, axis=1)))[0]
    require(bad.size == 0, f"box {lo[bad[:1]].tolist()}..{hi[bad[:1]].tolist()} outside the grid")
    cover = np.zeros(n, dtype=np.int32)
    for _, addr in _box_cells(spec, boxes):
        np.add.at(cover, addr.reshape(-1), 1)
    require(np.all(cover == 1), f"{int(np.sum(cover == 0))} cells in no box, {int(np.sum(cover > 1))} in "
                                "several")
    return f"{len(boxes)} boxes cover the {n} cells exactly once"


def _lut_from_boxes(c: Checker, ev: CheckContext, boxes: np.ndarray) -> str:
    # independent re-computation (deliberately not the build's code, down to the entry byte of
    # docs/certificate.md, token | confident << 7): the LUT made again from the boxes and the overrides
    spec, lut = ev.spec, ev.lut
    n = 1 << spec.address_bits
    tok = np.zeros(n, dtype=np.uint8)
    conf = np.zeros(n, dtype=bool)
    code = np.zeros(n, dtype=np.uint8)
    for idx, addr in _box_cells(spec, boxes):
        tok[addr] = boxes["action"][idx, None]
        conf[addr] = boxes["confident"][idx, None] != 0
        code[addr] = boxes["verdict"][idx, None]
    status = np.array(["proven", "resolved", "overridden"], dtype=object)[code]
    # cells a sla.yaml property forbids were overridden to the conservative action, confident
    over = (c.read_json("lut_properties.json").get("overridden_cells", [])
            if (c.d / "lut_properties.json").exists() else [])
    for e in over:
        tok[e["address"]], conf[e["address"]] = spec.conservative, True
        status[e["address"]] = "overridden"
    ev.box_status = status
    want = tok | (conf.astype(np.uint8) << 7)
    bad = np.nonzero(want != lut)[0]
    require(bad.size == 0, f"{bad.size} lut.hex entries differ from the boxes, first at address {bad[:1].tolist()}"
                           f": lut.hex {int(lut[bad[0]]) if bad.size else 0:#04x}, boxes "
                           f"{int(want[bad[0]]) if bad.size else 0:#04x}")
    return f"{n} entries re-derived from the boxes equal lut.hex"


def _crown_bounds(ev: CheckContext, proven: np.ndarray) -> str:
    from mi_certify.generator.build.distill import BOUND_CHUNK, bound_boxes, box_of_cells, cell_edges
    from mi_certify.generator.core.numerics import softmax_lower
    spec, ir, thr = ev.spec, ev.ir, ev.spec.confidence_threshold
    by_bounds = proven[proven["method"] == 0]
    edges = cell_edges(spec)
    for start in range(0, len(by_bounds), 16 * BOUND_CHUNK):  # batched, as the build bounds them
        chunk = by_bounds[start:start + 16 * BOUND_CHUNK]
        lo, hi = box_of_cells(edges, chunk["level_lo"].astype(np.int64), chunk["level_hi"].astype(np.int64))
        single = np.all(chunk["level_lo"] == chunk["level_hi"], axis=1)  # as the partition marks them
        low, _, _ = bound_boxes(spec, ir, lo, hi, chunk["action"].astype(np.int64), retry=single)
        for b, lw in zip(chunk, low):
            where = f"box {b['level_lo'].tolist()}..{b['level_hi'].tolist()}"
            require(np.all(lw > 0), f"{where}: CROWN margin lower bound {float(lw.min()):.3g} is not > 0")
            # fixed-order arithmetic: the same bits
            require(float(b["margin_lower"]) == float(lw.min()),
                    f"{where}: margin_lower {float(b['margin_lower'])} recorded, {float(lw.min())} re-computed")
            if b["confident"] and thr is not None:
                require(softmax_lower(lw) >= thr, f"{where}: confident but the softmax bound "
                                                  f"{softmax_lower(lw):.3g} < {thr:g}")
    k = len(by_bounds)
    others = len(proven) - k
    return f"{k} proven boxes: every margin lower bound > 0" + (f"; {others} proven by other methods "
                                                                "(see next line)" if others else "")


def _bisected_cells(ev: CheckContext, others: np.ndarray) -> str:
    from mi_certify.generator.build.distill import DistillOptions, bisect_cells, box_of_cells, cell_edges
    edges = cell_edges(ev.spec)
    lo, hi = box_of_cells(edges, others["level_lo"].astype(np.int64), others["level_hi"].astype(np.int64))
    cells = [(l, h, int(a)) for l, h, a in zip(lo, hi, others["action"])]
    status, _, _, n_boxes = bisect_cells(ev.spec, ev.ir, cells, DistillOptions().cell_boxes)
    bad = [b["level_lo"].tolist() for b, st in zip(others, status) if st != "proven"]
    require(not bad, f"{len(bad)} cells not proven again by bisection, first {bad[:1]}")
    return f"{len(others)} single cells proven again by bisection inside the cell ({n_boxes} boxes)"


def _onnxruntime_agrees(ev: CheckContext) -> str:
    spec, lut = ev.spec, ev.lut
    addrs = (np.nonzero(ev.box_status == "proven")[0] if ev.box_status is not None
             else np.array([], dtype=np.int64))
    require(lut is not None, "no lut.hex")
    rng = np.random.default_rng(0)
    lows = np.empty((addrs.size, len(spec.inputs)))
    highs = np.empty_like(lows)
    for k, inp in enumerate(spec.inputs):
        edges = np.array([float(_cell_edges(inp, q)[0]) for q in range(1 << inp.bits)] + [inp.max])
        shift = sum(i.bits for i in spec.inputs[k + 1:])
        lv = (addrs >> shift) & ((1 << inp.bits) - 1)
        lows[:, k], highs[:, k] = edges[lv], edges[lv + 1]
    pts = [(lows + highs) / 2] + [lows + (highs - lows) * rng.uniform(0.05, 0.95, lows.shape)
                                  for _ in range(INTERIOR_POINTS)]
    bad = 0
    first = None
    for p in pts:
        p32 = np.clip(p.astype(np.float32), lows.astype(np.float32), highs.astype(np.float32))
        got = decoded(spec, onnxruntime_outputs(ev, p32))
        wrong = np.nonzero(got != split_table(lut[addrs])[0])[0]
        bad += wrong.size
        if wrong.size and first is None:
            first = (int(addrs[wrong[0]]), p32[wrong[0]].tolist())
    require(bad == 0, f"{bad} points in proven cells decode differently on onnxruntime; first: address "
                      f"{first[0] if first else None} x={first[1] if first else None}")
    return f"{addrs.size * len(pts)} points ({len(pts)} per proven cell) decode like the LUT on onnxruntime"


def _resolved(ev: CheckContext, dist: dict) -> str:
    from mi_certify.generator.build.distill import UNDECIDED
    spec, status = ev.spec, ev.box_status
    names = [a.name for a in spec.actions]
    boxes, wit = dist["boxes"], dist["witnesses"]
    res = boxes[boxes["verdict"] == 1]
    require(np.all(res["level_lo"] == res["level_hi"]), "a resolved box is not a single cell")
    addrs = np.sort(addresses_of_levels(spec, res["level_lo"]))
    require(status is not None and np.array_equal(addrs, np.nonzero(status == "resolved")[0]),
            "the resolved boxes are not exactly the cells marked resolved")
    require(np.all(np.diff(wit["address"].astype(np.int64)) >= 0), "witnesses not in address order")
    require(np.all(np.isin(wit["address"], addrs)), "a witness names a cell that is not resolved")
    require(np.all(wit["action"] < len(names)), "a witness names an undeclared action")
    starts = np.searchsorted(wit["address"], addrs, side="left")
    ends = np.searchsorted(wit["address"], addrs, side="right")
    order = np.argsort(addresses_of_levels(spec, res["level_lo"]), kind="stable")
    on_edge = 0
    for b, a, s, e in zip(res[order], addrs, starts, ends):
        r = {"address": int(a), "undecided": int(b["method"]) == UNDECIDED,
             "actions": [names[int(t)] for t in wit["action"][s:e]], "resolved_to": names[int(b["action"])],
             "levels": b["level_lo"].astype(int).tolist(),
             "witnesses": [{"action": names[int(w["action"])], "x": w["x"].tolist()} for w in wit[s:e]]}
        require(r["undecided"] or len(set(r["actions"])) >= 2,
                f"cell {r['address']}: resolved without witnesses of two actions")
        require(e > s, f"cell {r['address']}: no witness")
        on_edge += _resolved_cell(spec, ev.lut, dist["policy"], r)
    if len(wit):
        ys = onnxruntime_outputs(ev, wit["x"].astype(np.float64))
        for y, w in zip(ys, wit):
            m = decode_margin(spec, y, int(w["action"]))
            require(m <= TOLERANCE, f"cell {int(w['address'])}: witness of {names[int(w['action'])]} decodes "
                                    f"{names[int(decoded(spec, y))]} on onnxruntime (margin {m:.3g})")
    und = int(np.sum(res["method"] == UNDECIDED))
    return f"{len(res)} resolved cells ({und} undecided): {len(wit)} witnesses in their cells ({on_edge} on a " \
           f"cell's upper boundary) replay on onnxruntime; entries follow the '{dist['policy']}' policy"


def addresses_of_levels(spec, levels: np.ndarray) -> np.ndarray:
    """LUT addresses (int64) of single cells given as levels (B, n)."""
    addr = np.zeros(len(levels), dtype=np.int64)
    for i, inp in enumerate(spec.inputs):
        addr = (addr << inp.bits) + levels[:, i].astype(np.int64)
    return addr


def _resolved_cell(spec, lut: np.ndarray, policy: str, r: dict) -> int:
    """One resolved cell's witnesses (in the cell, exact rationals) and entry checked.
    Returns how many witnesses lie on the cell's upper boundary."""
    names = [a.name for a in spec.actions]
    lv = _levels_of(spec, r["address"])
    require(lv == r["levels"], f"cell {r['address']}: levels {r['levels']} do not match its address")
    on_edge = 0
    for w in r["witnesses"]:
        # resolving only costs fidelity, never soundness: a witness on the cell's closed boundary counts
        inside, in_box = _where_in_cell(spec, lv, w["x"])
        require(in_box, f"cell {r['address']}: witness {w['x']} outside the cell")
        on_edge += not inside
    token, confident = (names.index(r["actions"][0]), False) if policy == "centre" else (spec.conservative, True)
    entry = pack_entry(token, confident)
    require(names[token] == r["resolved_to"] and int(lut[r["address"]]) == entry,
            f"cell {r['address']}: entry {int(lut[r['address']]):#04x} is not the '{policy}' "
            f"policy's {entry:#04x}")
    return on_edge
