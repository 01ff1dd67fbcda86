"""Distillation group of ``mi-certify check``: distillation.json against the grid and the network.

Re-derives from distillation.json, lut.hex, lut_properties.json and the network:

* the boxes partition the quantized grid, cell by cell (independent);
* the LUT the boxes (and the overridden cells) give equals lut.hex (independent); the
  cell status this gives is kept in :attr:`.check_common.CheckContext.box_status`;
* every proven box: its CROWN margin lower bound computed again, bit for bit, and its
  confidence bound (same code); single cells proven by bisection decided again (same
  code); onnxruntime decodes the LUT's action at the centre and at
  :data:`INTERIOR_POINTS` seeded interior points of every proven cell (independent);
* every resolved cell: its witnesses lie in the cell (exact rationals) and replay on
  onnxruntime, and its entry follows the recorded policy (independent).

Skipped when the LUT was sampled (no distillation.json).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .check_common import FAIL, SKIP, Checker, CheckContext, require
from .check_network import TOLERANCE, decode_margin, decoded, onnxruntime_outputs

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
    lo, hi = Fraction(inp.min), Fraction(inp.max)
    step = (hi - lo) / (1 << inp.bits)
    return lo + q * step, lo + (q + 1) * step


def _levels_of(spec, addr: int) -> list[int]:
    out = []
    for inp in reversed(spec.inputs):
        out.append(addr & ((1 << inp.bits) - 1))
        addr >>= inp.bits
    return out[::-1]


def _in_cell(spec, levels, x, closed: bool = False) -> bool:
    """x (floats) lies in the cell (half-open, last cell closed; ``closed``: the closed box), in exact rationals."""
    for inp, q, v in zip(spec.inputs, levels, x):
        a, b = _cell_edges(inp, q)
        fv = Fraction(float(v))
        last = q == (1 << inp.bits) - 1
        if not (a <= fv and (fv < b or ((last or closed) and fv <= b))):
            return False
    return True


def check_distillation(c: Checker, ev: CheckContext) -> None:
    """Items ``lut.partition``, ``lut.tables: LUT = distillation boxes``, ``lut.proven_cells: ...``,
    ``lut.resolved_cells: ...``; sets ``ev.box_status``. A SKIP without distillation.json."""
    if not (c.d / "distillation.json").exists():
        c.add("distillation", SKIP, "independent", "the LUT was sampled (--sample-lut): no cell is proven")
        return
    from mi_certify.generator.bundle import read_distillation
    try:
        dist = read_distillation(c.d / "distillation.json")
    except (ValueError, KeyError) as exc:
        c.add("distillation.json readable", FAIL, "integrity", str(exc))
        return
    if not c.run("lut.partition: boxes partition the grid", "independent", lambda: _partition(ev.spec, dist)):
        return
    c.run("lut.tables: LUT = distillation boxes", "independent", lambda: _lut_from_boxes(c, ev, dist))
    proven = [b for b in dist["boxes"] if b["verdict"] == "proven"]
    c.run("lut.proven_cells: CROWN bounds re-computed per proven box", "same code", lambda: _crown_bounds(ev, proven))
    others = [b for b in proven if b["method"] != "bounds"]
    if others:
        c.run("lut.proven_cells: single cells re-decided", "same code", lambda: _bisected_cells(ev, others))
    c.run("lut.proven_cells: onnxruntime agrees in every proven cell", "independent", lambda: _onnxruntime_agrees(ev))
    c.run("lut.resolved_cells: witnesses replay, policy applied", "independent", lambda: _resolved(ev, dist))


def _partition(spec, dist: dict) -> str:
    n = 1 << spec.address_bits
    cover = np.zeros(n, dtype=np.int32)
    for b in dist["boxes"]:
        lo, hi = np.array(b["level_lo"]), np.array(b["level_hi"])
        require(np.all(lo <= hi) and np.all(lo >= 0) and
                np.all(hi < np.array([1 << i.bits for i in spec.inputs])), f"box {b} outside the grid")
        cover[addresses(spec, lo, hi)] += 1
    require(np.all(cover == 1), f"{int(np.sum(cover == 0))} cells in no box, {int(np.sum(cover > 1))} in "
                                "several")
    return f"{len(dist['boxes'])} boxes cover the {n} cells exactly once"


def _lut_from_boxes(c: Checker, ev: CheckContext, dist: dict) -> str:
    spec, lut = ev.spec, ev.lut
    n = 1 << spec.address_bits
    tok = np.zeros(n, dtype=np.uint8)
    conf = np.zeros(n, dtype=bool)
    status = np.empty(n, dtype=object)
    for b in dist["boxes"]:
        a = addresses(spec, b["level_lo"], b["level_hi"])
        tok[a], conf[a], status[a] = b["action"], b["confident"], b["verdict"]
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


def _crown_bounds(ev: CheckContext, proven: list[dict]) -> str:
    from mi_certify.generator.distill import box_of_cells, cell_edges
    from mi_certify.generator.numerics import softmax_lower
    from mi_certify.verification.bounds import LOWER_SLOPES, crown_bounds, output_matrix_lower
    from mi_certify.verification.properties import decoded_rows
    spec, ir, thr = ev.spec, ev.ir, ev.spec.confidence_threshold
    by_bounds = [b for b in proven if b["method"] == "bounds"]
    edges = cell_edges(spec)
    for start in range(0, len(by_bounds), 2048):  # batched, as the build bounds them
        chunk = by_bounds[start:start + 2048]
        lo, hi = box_of_cells(edges, np.array([b["level_lo"] for b in chunk]), np.array([b["level_hi"] for b in chunk]))
        D = np.stack([-decoded_rows(len(spec.actions), b["action"], spec.decode)[0] for b in chunk])
        low, _ = output_matrix_lower(ir, D, lo, hi, crown_bounds(ir, lo, hi, LOWER_SLOPES), LOWER_SLOPES)
        for b, lw in zip(chunk, low):
            require(np.all(lw > 0), f"box {b['level_lo']}..{b['level_hi']}: CROWN margin lower bound "
                                    f"{float(lw.min()):.3g} is not > 0")
            require(b.get("margin_lower") == float(lw.min()),  # fixed-order arithmetic: the same bits
                    f"box {b['level_lo']}..{b['level_hi']}: margin_lower {b.get('margin_lower')} recorded, "
                    f"{float(lw.min())} re-computed")
            if b["confident"] and thr is not None:
                require(softmax_lower(lw) >= thr, f"box {b['level_lo']}..{b['level_hi']}: confident but the "
                                                  f"softmax bound {softmax_lower(lw):.3g} < {thr:g}")
    k = len(by_bounds)
    others = len(proven) - k
    return f"{k} proven boxes: every margin lower bound > 0" + (f"; {others} proven by other methods "
                                                                "(see next line)" if others else "")


def _bisected_cells(ev: CheckContext, others: list[dict]) -> str:
    from mi_certify.generator.distill import DistillOptions, bisect_cells, box_of_cells, cell_edges
    edges = cell_edges(ev.spec)
    cells = []
    for b in others:
        lo, hi = box_of_cells(edges, np.array(b["level_lo"]), np.array(b["level_hi"]))
        cells.append((lo, hi, b["action"]))
    status, _, _, n_boxes = bisect_cells(ev.spec, ev.ir, cells, DistillOptions().cell_boxes)
    bad = [b["level_lo"] for b, st in zip(others, status) if st != "proven"]
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
        wrong = np.nonzero(got != (lut[addrs] & 0x7F))[0]
        bad += wrong.size
        if wrong.size and first is None:
            first = (int(addrs[wrong[0]]), p32[wrong[0]].tolist())
    require(bad == 0, f"{bad} points in proven cells decode differently on onnxruntime; first: address "
                      f"{first[0] if first else None} x={first[1] if first else None}")
    return f"{addrs.size * len(pts)} points ({len(pts)} per proven cell) decode like the LUT on onnxruntime"


def _resolved(ev: CheckContext, dist: dict) -> str:
    spec, status = ev.spec, ev.box_status
    names = [a.name for a in spec.actions]
    res = dist["resolved_cells"]
    addrs = sorted(r["address"] for r in res)
    require(status is not None and addrs == np.nonzero(status == "resolved")[0].tolist(),
            "resolved_cells do not list exactly the boxes marked resolved")
    xs, want, where = [], [], []
    on_edge = 0
    for r in res:
        on_edge += _resolved_cell(spec, ev.lut, dist["policy"], r, xs, want, where)
    if xs:
        ys = onnxruntime_outputs(ev, np.array(xs))
        for y, a, addr in zip(ys, want, where):
            m = decode_margin(spec, y, a)
            require(m <= TOLERANCE, f"cell {addr}: witness of {names[a]} decodes "
                                    f"{names[int(decoded(spec, y))]} on onnxruntime (margin {m:.3g})")
    und = sum(1 for r in res if r["undecided"])
    return f"{len(res)} resolved cells ({und} undecided): {len(xs)} witnesses in their cells ({on_edge} on a " \
           f"cell's upper boundary) replay on onnxruntime; entries follow the '{dist['policy']}' policy"


def _resolved_cell(spec, lut: np.ndarray, policy: str, r: dict, xs: list, want: list, where: list) -> int:
    """One resolved cell's record, witnesses and entry checked; its witnesses appended to
    xs (points), want (action index) and where (address). Returns how many lie on the
    cell's upper boundary."""
    names = [a.name for a in spec.actions]
    lv = _levels_of(spec, r["address"])
    require(lv == r["levels"], f"cell {r['address']}: levels {r['levels']} do not match its address")
    require(set(r["actions"]) == {w["action"] for w in r["witnesses"]} or r["undecided"],
            f"cell {r['address']}: actions {r['actions']} not all witnessed")
    on_edge = 0
    for w in r["witnesses"]:
        # resolving only costs fidelity, never soundness: a witness on the cell's closed boundary counts
        require(_in_cell(spec, lv, w["x"], closed=True), f"cell {r['address']}: witness {w['x']} outside "
                                                         "the cell")
        on_edge += not _in_cell(spec, lv, w["x"])
        xs.append(w["x"])
        want.append(names.index(w["action"]))
        where.append(r["address"])
    entry = names.index(r["actions"][0]) if policy == "centre" else spec.conservative | 0x80
    require(names[entry & 0x7F] == r["resolved_to"] and int(lut[r["address"]]) == entry,
            f"cell {r['address']}: entry {int(lut[r['address']]):#04x} is not the '{policy}' "
            f"policy's {entry:#04x}")
    return on_edge
