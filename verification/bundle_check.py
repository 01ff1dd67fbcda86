"""``mi-certify check BUNDLE``: re-check a certificate bundle without trusting its producer.

Every item is one line with a status and the kind of path it takes:

* ``integrity`` — sha256 of every file against manifest.json; the Ed25519 signature.
* ``independent`` — recomputed by code that shares nothing with the build's own
  procedure: the LUT re-derived from the distillation boxes, the partition counted
  cell by cell, the tables parsed back out of the Verilog and the Python runtime,
  every witness and counterexample replayed on **onnxruntime** (not our IR), every
  proven cell evaluated on onnxruntime at its centre and at seeded interior points,
  each SMT-LIB obligation re-run by **Z3** from its stored script.
* ``same code`` — re-run with mi-certify's own procedure from the stored inputs and
  compared with the stored result (network properties, CROWN bounds of every proven
  box, LUT property check, Verilator lint, co-simulation). This catches a tampered or
  stale result, not a bug the procedure shares with itself; docs/certificate.md says
  which is which.

Status: PASS, FAIL or SKIP (a re-run that was not asked for or whose tool is
missing). A check that raises is a FAIL (fail closed). The overall result is ok only
when nothing failed and nothing was skipped.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable

import numpy as np

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
#: Replay tolerance (as the verifier's): a witness decoding differently on onnxruntime
#: is accepted only when the two outputs differ by at most this much.
TOLERANCE = 1e-4
#: Seeded interior points per proven cell evaluated on onnxruntime (plus the centre).
INTERIOR_POINTS = 2
#: Z3 seconds per SMT-LIB obligation.
SMT_TIMEOUT_S = 600


@dataclass
class CheckItem:
    """One line of the check: ``status`` PASS/FAIL/SKIP, ``kind`` integrity, independent
    or same code, ``detail`` says what was compared."""

    name: str
    status: str
    kind: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.status:4s}  {self.name}  [{self.kind}]" + (f"  {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class CheckOptions:
    """rerun_network: re-run the network queries (tens of seconds); rerun_tools: re-run
    lint and co-simulation; pubkey: PEM public key the signature must verify with."""

    rerun_network: bool = True
    rerun_tools: bool = True
    pubkey: str | None = None


class _Checker:
    def __init__(self, bundle: Path, opts: CheckOptions, emit: Callable[[CheckItem], None]):
        self.d = bundle
        self.opts = opts
        self.items: list[CheckItem] = []
        self.emit = emit
        self.manifest: dict = {}

    def add(self, name: str, status: str, kind: str, detail: str = "") -> CheckItem:
        item = CheckItem(name, status, kind, detail)
        self.items.append(item)
        self.emit(item)
        return item

    def run(self, name: str, kind: str, fn: Callable[[], str | tuple[str, str]]) -> bool:
        """Run one check; fn returns a detail (PASS) or (status, detail); raises on failure."""
        try:
            res = fn()
        except _Fail as exc:
            self.add(name, FAIL, kind, str(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - any failure of a check is a FAIL, never a PASS
            self.add(name, FAIL, kind, f"{type(exc).__name__}: {exc}")
            return False
        status, detail = res if isinstance(res, tuple) else (PASS, res)
        self.add(name, status, kind, detail)
        return status != FAIL

    def json(self, rel: str):
        return json.loads((self.d / rel).read_text(encoding="utf-8"))


class _Fail(Exception):
    pass


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise _Fail(msg)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_bundle(bundle: str | Path, opts: CheckOptions | None = None,
                 emit: Callable[[CheckItem], None] | None = None) -> list[CheckItem]:
    """Re-check the bundle in ``bundle``; returns every item (also passed to ``emit`` as it is decided).

    Raises:
        MiCertifyError when ``bundle`` is not a directory or the public key is unusable.
    """
    from mi_certify.generator.errors import MiCertifyError

    d = Path(bundle)
    if not d.is_dir():
        raise MiCertifyError("not a directory", file=str(d))
    if not (d / "manifest.json").is_file():
        raise MiCertifyError("no manifest.json: not a certificate bundle (mi-certify build writes one)", file=str(d))
    opts = opts or CheckOptions()
    pub = None
    if opts.pubkey:
        from mi_certify.generator.signing import load_public_key
        pub = load_public_key(opts.pubkey)
    c = _Checker(d, opts, emit or (lambda item: None))
    if not c.run("manifest", "integrity", lambda: _manifest(c)):
        return c.items
    if pub is not None:
        from mi_certify.generator.signing import verify_bundle_signature
        c.run("signature", "integrity", lambda: verify_bundle_signature(d, pub))
    elif (d / "manifest.json.sig").exists():
        c.add("signature", SKIP, "integrity", "manifest.json.sig is present but was not checked: pass --pubkey KEY.pub")
    if not _hashes(c):
        return c.items  # nothing else is worth reading
    ctx = {}
    if not c.run("inputs: spec and model load", "same code", lambda: _load_inputs(c, ctx)):
        return c.items
    _network(c, ctx)
    _distillation(c, ctx)
    _tables(c, ctx)
    _lut_properties(c, ctx)
    _smt_obligations(c, ctx)
    _tools(c, ctx)
    _hdl_numbers(c, ctx)
    _documents(c, ctx)
    c.run("certificate verdict", "integrity", lambda: _verdict(c))
    return c.items


# --- integrity -------------------------------------------------------------------------------

def _manifest(c: _Checker) -> str:
    from mi_certify.generator.bundle import MANIFEST_FORMAT
    m = c.json("manifest.json")
    _require(isinstance(m, dict) and m.get("format") == MANIFEST_FORMAT,
             f"manifest.json: format is not {MANIFEST_FORMAT}")
    _require(isinstance(m.get("files"), dict) and m["files"], "manifest.json: no files listed")
    c.manifest = m
    src = m.get("mi_certify", {}).get("source", {}).get("sha256", "?")
    return f"{len(m['files'])} hashed files; built by mi-certify {m.get('mi_certify', {}).get('version')} " \
           f"(source sha256 {src[:16]}…)"


def _hashes(c: _Checker) -> bool:
    m = c.manifest
    ok = True
    for rel, digest in sorted(m["files"].items()):
        p = c.d / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            c.add(f"hash {rel}", FAIL, "integrity", "path leaves the bundle")
            ok = False
        elif not p.is_file():
            c.add(f"hash {rel}", FAIL, "integrity", "file missing")
            ok = False
        elif _sha(p) != digest:
            c.add(f"hash {rel}", FAIL, "integrity", f"sha256 {_sha(p)[:16]}… != manifest {digest[:16]}…")
            ok = False
        else:
            c.add(f"hash {rel}", PASS, "integrity", digest[:16] + "…")
    from mi_certify.generator.bundle import UNHASHED
    odd = sorted(set(m.get("not_hashed", {})) - set(UNHASHED))
    c.add("not_hashed lists only the unhashed files", FAIL if odd else PASS, "integrity",
          ("not a file mi-certify leaves unhashed: " + ", ".join(odd[:5])) if odd else ", ".join(UNHASHED))
    ok &= not odd
    allowed = set(m["files"]) | {"manifest.json"} | set(UNHASHED)
    extra = sorted(p.relative_to(c.d).as_posix() for p in c.d.rglob("*") if p.is_file()
                   and p.relative_to(c.d).as_posix() not in allowed)
    c.add("no unlisted files", FAIL if extra else PASS, "integrity",
          ("not in manifest.json: " + ", ".join(extra[:5])) if extra else "")
    for role in ("model", "spec"):
        ent = m.get("inputs", {}).get(role, {})
        good = ent.get("path") in m["files"] and m["files"][ent["path"]] == ent.get("sha256")
        c.add(f"input {role} bound", PASS if good else FAIL, "integrity", ent.get("path", "missing"))
        ok &= good
    return ok and not extra


def _load_inputs(c: _Checker, ctx: dict) -> str:
    from mi_certify.generator.lut import check_shapes
    from mi_certify.generator.onnx_import import cross_check, import_onnx
    from mi_certify.generator.spec import load_spec
    m = c.manifest
    ctx["model"] = c.d / m["inputs"]["model"]["path"]
    ctx["spec"] = spec = load_spec(c.d / m["inputs"]["spec"]["path"])
    ctx["ir"] = ir = import_onnx(ctx["model"])
    check_shapes(spec, ir, str(ctx["model"]))
    lo, hi = np.array([i.min for i in spec.inputs]), np.array([i.max for i in spec.inputs])
    worst = cross_check(ir, ctx["model"], lo, hi)
    ctx["summary"] = c.json("summary.json")
    if (c.d / "lut.hex").exists():
        lb = bytes.fromhex((c.d / "lut.hex").read_text(encoding="ascii").replace("\n", ""))
        _require(len(lb) == 1 << spec.address_bits, f"lut.hex has {len(lb)} entries, not {1 << spec.address_bits}")
        ctx["lut"] = np.frombuffer(lb, dtype=np.uint8)
    return f"{spec.name}: {len(spec.inputs)} inputs, {ir.n_relus} ReLUs; IR = onnxruntime within {worst:.2g}"


# --- network ---------------------------------------------------------------------------------

def _ort(ctx: dict, xs) -> np.ndarray:
    """onnxruntime outputs at float32 points (n, n_inputs)."""
    from mi_certify.generator.onnx_import import evaluate_onnxruntime
    return evaluate_onnxruntime(ctx["model"], np.asarray(xs, dtype=np.float32).astype(np.float64))


def _decoded(spec, y: np.ndarray) -> np.ndarray:
    return np.argmax(y, axis=-1) if spec.decode == "argmax" else np.argmin(y, axis=-1)


def _margin(spec, y: np.ndarray, a: int) -> float:
    """How far action a is from being decoded at y (<= 0: it is decoded; ties to it count)."""
    s = y if spec.decode == "argmax" else -y
    return float(np.max(s) - s[a])


def _in_region(spec, prop, x) -> bool:
    lo = [i.min for i in spec.inputs]
    hi = [i.max for i in spec.inputs]
    for i, a, b in prop.when:
        lo[i], hi[i] = a, b
    return all(lo[i] <= x[i] <= hi[i] for i in range(len(x)))


def _replay_property(spec, prop, x, y) -> str:
    """Independent replay of a property counterexample: returns a detail or raises _Fail."""
    _require(_in_region(spec, prop, x), f"witness {x} lies outside the property region")
    names = [a.name for a in spec.actions]
    if prop.kind in ("forbid", "require"):
        bad = prop.forbid if prop.kind == "forbid" else [a for a in range(len(names)) if a not in prop.require]
        best = min(bad, key=lambda a: _margin(spec, y, a))
        m = _margin(spec, y, best)
        _require(m <= TOLERANCE, f"onnxruntime decodes {names[int(_decoded(spec, y))]} at the witness, "
                                 f"which the property allows (margin {m:.3g})")
        return f"onnxruntime decodes {names[best]} at the witness" + (f" (tie within {m:.2g})" if m > 0 else "")
    for a, mn, mx in prop.output:
        if mx is not None and y[a] >= mx - TOLERANCE:
            return f"{names[a]} output {y[a]:.6g} >= {mx:g} on onnxruntime"
        if mn is not None and y[a] <= mn + TOLERANCE:
            return f"{names[a]} output {y[a]:.6g} <= {mn:g} on onnxruntime"
    raise _Fail(f"no output bound is broken at the witness on onnxruntime: {y.tolist()}")


def _network(c: _Checker, ctx: dict) -> None:
    if not (c.d / "verification.json").exists():
        c.add("network verification", SKIP, "same code", "the build did not verify the network (--no-verify)")
        return
    spec = ctx["spec"]
    ver = c.json("verification.json")
    props = {p.id: p for p in spec.properties}
    _require_ids = [r["id"] for r in ver["properties"]]
    c.run("network: every property has a result", "integrity",
          lambda: _require(sorted(_require_ids) == sorted(props), f"results for {_require_ids}, spec has "
                                                                   f"{sorted(props)}") or f"{len(props)} properties")
    for r in ver["properties"]:
        if r["witness"]:
            def replay(r=r):
                x = np.array(r["witness"]["x_float32"])
                return _replay_property(spec, props[r["id"]], x, _ort(ctx, x[None])[0])
            c.run(f"network.{r['id']}: counterexample replays on onnxruntime", "independent", replay)
    names = [a.name for a in spec.actions]
    for a in ver["output_domain"]["actions"]:
        if a["witness"]:
            def reach(a=a):
                x = np.array(a["witness"]["x_float32"])
                _require(all(i.min <= v <= i.max for i, v in zip(spec.inputs, x)), "witness outside the envelope")
                y = _ort(ctx, x[None])[0]
                m = _margin(spec, y, names.index(a["action"]))
                _require(m <= TOLERANCE, f"onnxruntime decodes {names[int(_decoded(spec, y))]} at the witness")
                return f"onnxruntime decodes {a['action']} at x={np.round(x, 6).tolist()}"
            c.run(f"network.unreachable.{a['action']}: reachability witness replays on onnxruntime", "independent",
                  reach)
    if not c.opts.rerun_network:
        c.add("network: re-run every query from inputs/", SKIP, "same code", "--quick")
        return

    def rerun():
        from mi_certify.verification.network import verify_spec
        from mi_certify.verification.nn_verify import VerifyOptions
        cmd = c.manifest.get("command", [])
        timeout = float(cmd[cmd.index("--verify-timeout") + 1]) if "--verify-timeout" in cmd else 60.0
        res = verify_spec(ctx["ir"], ctx["model"], spec, VerifyOptions(timeout=timeout)).deterministic_json()
        stored = {r["id"]: r["verdict"] for r in ver["properties"]}
        again = {r["id"]: r["verdict"] for r in res["properties"]}
        _require(stored == again, f"re-run verdicts {again} differ from verification.json {stored}")
        reach_s = {a["action"]: a["reachable"] for a in ver["output_domain"]["actions"]}
        reach_a = {a["action"]: a["reachable"] for a in res["output_domain"]["actions"]}
        _require(reach_s == reach_a, f"re-run reachability {reach_a} differs from verification.json {reach_s}")
        return ", ".join(f"{k} {v}" for k, v in again.items()) + "; reachable: " + \
            ", ".join(k for k, v in reach_a.items() if v == "yes")
    c.run("network: re-run every query from inputs/ (same verdicts)", "same code", rerun)


# --- distillation and the LUT -----------------------------------------------------------------

def _addresses(spec, lo, hi) -> np.ndarray:
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


def _distillation(c: _Checker, ctx: dict) -> None:
    if not (c.d / "distillation.json").exists():
        c.add("distillation", SKIP, "independent", "the LUT was sampled (--sample-lut): no cell is proven")
        return
    from mi_certify.generator.bundle import read_distillation
    spec = ctx["spec"]
    try:
        dist = read_distillation(c.d / "distillation.json")
    except (ValueError, KeyError) as exc:
        c.add("distillation.json readable", FAIL, "integrity", str(exc))
        return
    ctx["dist"] = dist
    n = 1 << spec.address_bits
    lut = ctx.get("lut")

    def partition():
        cover = np.zeros(n, dtype=np.int32)
        for b in dist["boxes"]:
            lo, hi = np.array(b["level_lo"]), np.array(b["level_hi"])
            _require(np.all(lo <= hi) and np.all(lo >= 0) and
                     np.all(hi < np.array([1 << i.bits for i in spec.inputs])), f"box {b} outside the grid")
            cover[_addresses(spec, lo, hi)] += 1
        _require(np.all(cover == 1), f"{int(np.sum(cover == 0))} cells in no box, {int(np.sum(cover > 1))} in "
                                     "several")
        return f"{len(dist['boxes'])} boxes cover the {n} cells exactly once"
    if not c.run("lut.partition: boxes partition the grid", "independent", partition):
        return

    def derive():
        tok = np.zeros(n, dtype=np.uint8)
        conf = np.zeros(n, dtype=bool)
        status = np.empty(n, dtype=object)
        for b in dist["boxes"]:
            a = _addresses(spec, b["level_lo"], b["level_hi"])
            tok[a], conf[a], status[a] = b["action"], b["confident"], b["verdict"]
        # cells a sla.yaml property forbids were overridden to the conservative action, confident
        over = (c.json("lut_properties.json").get("overridden_cells", [])
                if (c.d / "lut_properties.json").exists() else [])
        for e in over:
            tok[e["address"]], conf[e["address"]] = spec.conservative, True
            status[e["address"]] = "overridden"
        ctx["status"] = status
        want = tok | (conf.astype(np.uint8) << 7)
        bad = np.nonzero(want != lut)[0]
        _require(bad.size == 0, f"{bad.size} lut.hex entries differ from the boxes, first at address {bad[:1].tolist()}"
                                f": lut.hex {int(lut[bad[0]]) if bad.size else 0:#04x}, boxes "
                                f"{int(want[bad[0]]) if bad.size else 0:#04x}")
        return f"{n} entries re-derived from the boxes equal lut.hex"
    c.run("lut.tables: LUT = distillation boxes", "independent", derive)

    proven = [b for b in dist["boxes"] if b["verdict"] == "proven"]

    def bounds():
        from mi_certify.generator.distill import cell_edges, box_of_cells
        from mi_certify.generator.numerics import softmax_lower
        from mi_certify.verification.bounds import LOWER_SLOPES, crown_bounds, output_matrix_lower
        from mi_certify.verification.properties import decoded_rows
        ir, thr = ctx["ir"], spec.confidence_threshold
        by_bounds = [b for b in proven if b["method"] == "bounds"]
        edges = cell_edges(spec)
        for start in range(0, len(by_bounds), 2048):  # batched, as the build bounds them
            chunk = by_bounds[start:start + 2048]
            lo, hi = box_of_cells(edges, np.array([b["level_lo"] for b in chunk]), np.array([b["level_hi"] for b in chunk]))
            D = np.stack([-decoded_rows(len(spec.actions), b["action"], spec.decode)[0] for b in chunk])
            low, _ = output_matrix_lower(ir, D, lo, hi, crown_bounds(ir, lo, hi, LOWER_SLOPES), LOWER_SLOPES)
            for b, lw in zip(chunk, low):
                _require(np.all(lw > 0), f"box {b['level_lo']}..{b['level_hi']}: CROWN margin lower bound "
                                         f"{float(lw.min()):.3g} is not > 0")
                _require(b.get("margin_lower") == float(lw.min()),  # fixed-order arithmetic: the same bits
                         f"box {b['level_lo']}..{b['level_hi']}: margin_lower {b.get('margin_lower')} recorded, "
                         f"{float(lw.min())} re-computed")
                if b["confident"] and thr is not None:
                    _require(softmax_lower(lw) >= thr, f"box {b['level_lo']}..{b['level_hi']}: confident but the "
                                                        f"softmax bound {softmax_lower(lw):.3g} < {thr:g}")
        k = len(by_bounds)
        others = len(proven) - k
        return f"{k} proven boxes: every margin lower bound > 0" + (f"; {others} proven by other methods "
                                                                    "(see next line)" if others else "")
    c.run("lut.proven_cells: CROWN bounds re-computed per proven box", "same code", bounds)
    others = [b for b in proven if b["method"] != "bounds"]
    if others:
        def rerun_cells():
            from mi_certify.generator.distill import DistillOptions, cell_edges, box_of_cells, bisect_cells
            edges = cell_edges(spec)
            cells = []
            for b in others:
                lo, hi = box_of_cells(edges, np.array(b["level_lo"]), np.array(b["level_hi"]))
                cells.append((lo, hi, b["action"]))
            status, _, _, n_boxes = bisect_cells(spec, ctx["ir"], cells, DistillOptions().cell_boxes)
            bad = [b["level_lo"] for b, st in zip(others, status) if st != "proven"]
            _require(not bad, f"{len(bad)} cells not proven again by bisection, first {bad[:1]}")
            return f"{len(others)} single cells proven again by bisection inside the cell ({n_boxes} boxes)"
        c.run("lut.proven_cells: single cells re-decided", "same code", rerun_cells)

    def onnxruntime_second_path():
        addrs = np.nonzero(ctx["status"] == "proven")[0] if "status" in ctx else np.array([], dtype=np.int64)
        _require(lut is not None, "no lut.hex")
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
            got = _decoded(spec, _ort(ctx, p32))
            wrong = np.nonzero(got != (lut[addrs] & 0x7F))[0]
            bad += wrong.size
            if wrong.size and first is None:
                first = (int(addrs[wrong[0]]), p32[wrong[0]].tolist())
        _require(bad == 0, f"{bad} points in proven cells decode differently on onnxruntime; first: address "
                           f"{first[0] if first else None} x={first[1] if first else None}")
        return f"{addrs.size * len(pts)} points ({len(pts)} per proven cell) decode like the LUT on onnxruntime"
    c.run("lut.proven_cells: onnxruntime agrees in every proven cell", "independent", onnxruntime_second_path)

    def resolved():
        names = [a.name for a in spec.actions]
        res = dist["resolved_cells"]
        status = ctx.get("status")
        addrs = sorted(r["address"] for r in res)
        _require(status is not None and addrs == np.nonzero(status == "resolved")[0].tolist(),
                 "resolved_cells do not list exactly the boxes marked resolved")
        xs, want, where = [], [], []
        on_edge = 0
        for r in res:
            lv = _levels_of(spec, r["address"])
            _require(lv == r["levels"], f"cell {r['address']}: levels {r['levels']} do not match its address")
            _require(set(r["actions"]) == {w["action"] for w in r["witnesses"]} or r["undecided"],
                     f"cell {r['address']}: actions {r['actions']} not all witnessed")
            for w in r["witnesses"]:
                # resolving only costs fidelity, never soundness: a witness on the cell's closed boundary counts
                _require(_in_cell(spec, lv, w["x"], closed=True), f"cell {r['address']}: witness {w['x']} outside "
                                                                    "the cell")
                on_edge += not _in_cell(spec, lv, w["x"])
                xs.append(w["x"])
                want.append(names.index(w["action"]))
                where.append(r["address"])
            if dist["policy"] == "centre":
                entry = names.index(r["actions"][0])
            else:
                entry = spec.conservative | 0x80
            _require(names[entry & 0x7F] == r["resolved_to"] and int(lut[r["address"]]) == entry,
                     f"cell {r['address']}: entry {int(lut[r['address']]):#04x} is not the '{dist['policy']}' "
                     f"policy's {entry:#04x}")
        if xs:
            ys = _ort(ctx, np.array(xs))
            for y, a, addr in zip(ys, want, where):
                m = _margin(spec, y, a)
                _require(m <= TOLERANCE, f"cell {addr}: witness of {names[a]} decodes "
                                         f"{names[int(_decoded(spec, y))]} on onnxruntime (margin {m:.3g})")
        und = sum(1 for r in res if r["undecided"])
        return f"{len(res)} resolved cells ({und} undecided): {len(xs)} witnesses in their cells ({on_edge} on a " \
               f"cell's upper boundary) replay on onnxruntime; entries follow the '{dist['policy']}' policy"
    c.run("lut.resolved_cells: witnesses replay, policy applied", "independent", resolved)


def _tables(c: _Checker, ctx: dict) -> None:
    lut = ctx.get("lut")
    spec = ctx["spec"]
    if lut is None:
        c.add("lut.tables", FAIL, "integrity", "no lut.hex in the bundle")
        return

    def lut_json():
        j = c.json("lut.json")
        _require(j["sha256"] == hashlib.sha256(lut.tobytes()).hexdigest(), "lut.json sha256 is not lut.hex's")
        _require(j["confident_cells"] == int(np.sum(lut >> 7)), "confident cell count differs")
        hist = np.bincount(lut & 0x7F, minlength=len(spec.actions))
        _require(j["tokens"] == {a.name: int(hist[i]) for i, a in enumerate(spec.actions)}, "token histogram differs")
        if "status" in ctx:
            status = np.empty(lut.size, dtype=object)
            for a, b, s in j["cell_status"]:
                status[a:b] = s
            _require(np.array_equal(status, ctx["status"]), "cell_status differs from the distillation boxes")
        return "sha256, histogram, confident cells and cell status agree with lut.hex"
    c.run("lut.tables: lut.json = lut.hex", "independent", lut_json)

    def verilog():
        text = (c.d / f"{spec.module_name}.v").read_text(encoding="utf-8")
        table, how = _verilog_table(c.d, spec, text)
        tw = spec.token_bits
        # Verilog entry = {confident, token}: token in the low tw bits
        as_bytes = (table & ((1 << tw) - 1)) | ((table >> tw) & 1) << 7
        bad = np.nonzero(as_bytes != lut)[0]
        _require(bad.size == 0, f"{bad.size} Verilog LUT entries differ from lut.hex, first at {bad[:1].tolist()}")
        return f"{how} = lut.hex"
    c.run(f"lut.tables: {spec.module_name}.v table = lut.hex", "independent", verilog)

    def python():
        tree = ast.parse((c.d / f"{spec.name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LUT" for t in node.targets):
                call = node.value
                _require(isinstance(call, ast.Call) and len(call.args) == 1, "_LUT is not bytes.fromhex(<literal>)")
                table = bytes.fromhex(ast.literal_eval(call.args[0]))
                _require(table == lut.tobytes(), "the Python runtime's _LUT differs from lut.hex")
                return f"{len(table)} bytes = lut.hex (parsed, not executed)"
        raise _Fail("no _LUT table in the Python runtime")
    c.run(f"lut.tables: {spec.name}.py table = lut.hex", "independent", python)


def _lut_properties(c: _Checker, ctx: dict) -> None:
    def run():
        from mi_certify.verification.lut_check import check_lut_properties
        again = [r.to_json() for r in check_lut_properties(ctx["spec"], ctx["lut"] & 0x7F)]
        _require(again == c.json("lut_properties.json")["properties"], "re-checked LUT properties differ from "
                                                                     "lut_properties.json")
        return ", ".join(f"{r['id']} {r['verdict']}" for r in again) or "no properties"
    c.run("lut properties re-checked on every cell", "same code", run)


def _regenerate_proofs(c: _Checker, ctx: dict, index: dict) -> None:
    """The FSM and RTL obligations are made again from the spec, lut.hex and the .v and must
    equal the stored scripts: a script edited (and re-hashed) to something trivially unsat is caught."""
    import numpy as np

    from mi_certify.generator.lut import property_masks
    from mi_certify.verification.fsm_proofs import entry_alphabet, prove_fsm

    spec = ctx["spec"]
    cfg = spec.fsm_config()
    lut = np.asarray(ctx["lut"], dtype=np.uint8)
    masks, bits = property_masks(spec), [i.bits for i in spec.inputs]
    stored = {o["id"]: o for o in index["obligations"]}

    def same(obs, group):
        for ob in obs:
            o = stored.get(ob.id)
            _require(o is not None, f"{ob.id} is missing from proofs/index.json")
            _require(o["verdict"] == ob.verdict, f"{ob.id}: recorded {o['verdict']}, made again {ob.verdict}")
            if o.get("kind") != "exhaustive":
                text = (c.d / o["evidence"]).read_text(encoding="utf-8")
                _require(text == ob.smt2, f"{o['evidence']} differs from the obligation made again")
        return len(obs)

    def fsm():
        obs = prove_fsm(cfg, lut & 0x7F, (lut >> 7).astype(bool), masks, bits, spec.properties,
                        names=[a.name for a in spec.actions])
        return f"{same(obs, 'fsm')} FSM obligations made again from sla.yaml and lut.hex equal the stored scripts"
    c.run("fsm proofs: made again and compared", "same code", fsm)
    if not any(o["group"] == "rtl" for o in index["obligations"]):
        return
    if shutil.which("yosys") is None:
        c.add("rtl proofs: made again from the Verilog and compared", SKIP, "same code", "yosys is not installed")
        return

    def rtl():
        from mi_certify.verification.rtl_formal import rtl_obligations
        alphabet = entry_alphabet(cfg, lut & 0x7F, (lut >> 7).astype(bool), masks, bits)
        obs, prelude = rtl_obligations(c.d / f"{spec.module_name}.v", spec.module_name, cfg, masks, bits,
                                       spec.token_bits, alphabet, bytes(lut), reset_port=spec.hdl.reset_port,
                                       reset_active_low=spec.hdl.reset_polarity == "low")
        _require(prelude == (c.d / "proofs" / "rtl" / "design.smt2").read_text(encoding="utf-8"),
                 "proofs/rtl/design.smt2 differs from Yosys' reading of the Verilog")
        return (f"{same(obs, 'rtl')} RTL obligations made again from {spec.module_name}.v (Yosys + Z3) equal the "
                "stored ones")
    c.run("rtl proofs: made again from the Verilog and compared", "same code", rtl)


def _sliced_table(d: Path, spec, text: str) -> tuple[np.ndarray, str]:
    """The ``sliced_rom`` encoding read back: the ROM file's columns, the slice case items
    (constants and column bits) and the code dictionary, evaluated at every address."""
    n = 1 << spec.address_bits
    cw = int(re.search(r"^\s*(?:reg|wire) \[(\d+):0\] lut_code\b", text, re.M).group(1)) + 1
    dec = re.search(r"^\s*wire \[\d+:0\] lut_entry =((?: \(lut_code == \d+'d\d+\) \? \d+'d\d+ :)+) \d+'d(\d+);$",
                    text, re.M)
    _require(dec is not None, "sliced ROM: no code dictionary (lut_entry from lut_code) found")
    dictionary = {int(k): int(e) for k, e in re.findall(r"\(lut_code == \d+'d(\d+)\) \? \d+'d(\d+) :", dec.group(1))}
    last = int(dec.group(2))
    rom = re.findall(r'^\s*initial \$readmemh\("([A-Za-z0-9_.]+)", lut_cols\);', text, re.M)
    low = re.search(r"^\s*wire \[(\d+):0\] lut_col = lut_cols\[addr\[(\d+):0\]\];", text, re.M)
    sel = re.search(rf"^\s*case \(addr\[{spec.address_bits - 1}:(\d+)\]\)", text, re.M)
    lb = int(sel.group(1)) if sel else spec.address_bits
    words = np.zeros(1 << lb, dtype=object)
    if rom:
        _require(low is not None and int(low.group(2)) + 1 == lb, "sliced ROM: the column read and the slice select "
                 "do not split the address at the same bit")
        words = [int(w, 16) for w in (d / rom[0]).read_text(encoding="ascii").split()]
        _require(len(words) == 1 << lb, f"{rom[0]} holds {len(words)} words, the slice {1 << lb}")
        words = np.array(words, dtype=object)
    if sel:
        items = re.findall(rf"^\s*{spec.address_bits - lb}'d(\d+): lut_code = (.+);", text, re.M)
    else:
        items = [("0", m) for m in re.findall(r"^\s*wire \[\d+:0\] lut_code = (.+);", text, re.M)]
    _require(len(items) == 1 << (spec.address_bits - lb), f"sliced ROM: {len(items)} slice items, expected "
             f"{1 << (spec.address_bits - lb)}")
    codes = np.zeros((1 << (spec.address_bits - lb), 1 << lb), dtype=np.int64)
    for s_, expr in items:
        terms = [t.strip() for t in expr.strip().strip("{}").split(",")]
        _require(len(terms) == cw, f"sliced ROM: slice {s_} gives {len(terms)} code bits, lut_code has {cw}")
        for b, t in enumerate(reversed(terms)):
            m = re.fullmatch(r"1'b([01])|lut_col\[(\d+)\]", t)
            _require(m is not None, f"sliced ROM: unexpected code bit {t[:40]}")
            col = (np.full(1 << lb, int(m.group(1))) if m.group(1) is not None
                   else np.array([(int(w) >> int(m.group(2))) & 1 for w in words], dtype=np.int64))
            codes[int(s_)] |= col.astype(np.int64) << b
    table = np.array([dictionary.get(c, last) for c in range(1 << cw)], dtype=np.int64)[codes.reshape(-1)]
    _require(len(table) == n, "sliced ROM: the slices do not cover the address space")
    return table, (f"sliced ROM: {len(dictionary) + 1} dictionary entries, {len(items)} slices"
                   + (f", columns from {rom[0]}" if rom else ""))


def _verilog_table(d: Path, spec, text: str) -> tuple[np.ndarray, str]:
    """The LUT entries ({confident, token}) the Verilog holds, read without Yosys: case items
    + default, the ROM file of ``$readmemh``, the sliced ROM (:func:`_sliced_table`), or the box
    tree's nested if/else run at every address."""
    n = 1 << spec.address_bits
    cases = re.findall(rf"^\s*{spec.address_bits}'d(\d+): lut_entry = \d+'d(\d+);", text, re.M)
    default = re.findall(r"^\s*default: lut_entry = \d+'d(\d+);", text, re.M)
    rom = re.findall(r'^\s*initial \$readmemh\("([A-Za-z0-9_.]+)", lut_rom\);', text, re.M)
    tree = re.search(r"^    always @\(\*\) begin\n(\s+if \(q_.*?)^    end$", text, re.M | re.S)
    const = re.findall(r"^\s*wire \[\d+:0\] lut_entry = \d+'d(\d+);$", text, re.M)
    if len(const) == 1:
        return np.full(n, int(const[0]), dtype=np.int64), "one entry for every address (continuous assignment)"
    if re.search(r"^\s*(?:reg|wire) \[\d+:0\] lut_code\b", text, re.M):
        return _sliced_table(d, spec, text)
    if len(default) == 1 and re.search(r"^\s*case \(addr\)$", text, re.M):
        table = np.full(n, int(default[0]), dtype=np.int64)
        for a, e in cases:
            table[int(a)] = int(e)
        return table, f"{len(cases)} case items + default"
    if len(rom) == 1:
        words = (d / rom[0]).read_text(encoding="ascii").split()
        _require(len(words) == n, f"{rom[0]} holds {len(words)} words, the address space {n}")
        return np.array([int(w, 16) for w in words], dtype=np.int64), f"ROM {rom[0]} ({n} words)"
    _require(tree is not None, "no LUT (case table, ROM or box tree) found in the Verilog")
    fields = dict(re.findall(r"^\s*wire \[\d+:0\] q_(\w+) = addr\[(\d+:\d+)\];", text, re.M))
    addrs = np.arange(n, dtype=np.int64)
    table = np.full(n, -1, dtype=np.int64)
    stack = [np.ones(n, dtype=bool)]  # addresses reaching the current branch
    conds: list[np.ndarray] = []
    for line in tree.group(1).splitlines():
        line = line.strip()
        m = re.fullmatch(r"if \(q_(\w+) < \d+'d(\d+)\) begin", line)
        if m:
            hi, lo = map(int, fields[m.group(1)].split(":"))
            cond = ((addrs >> lo) & ((1 << (hi - lo + 1)) - 1)) < int(m.group(2))
            conds.append(cond)
            stack.append(stack[-1] & cond)
        elif line == "end else begin":
            stack.pop()
            stack.append(stack[-1] & ~conds[-1])
        elif line == "end":
            stack.pop()
            conds.pop()
        else:
            m = re.fullmatch(r"lut_entry = \d+'d(\d+);", line)
            _require(m is not None, f"unexpected line in the box tree: {line[:60]}")
            table[stack[-1]] = int(m.group(1))
    _require(bool(np.all(table >= 0)), "the box tree leaves addresses without an entry")
    return table, "box tree run at every address"


def _smt_obligations(c: _Checker, ctx: dict) -> None:
    from mi_certify.generator.bundle import PROOF_INDEX
    if not (c.d / PROOF_INDEX).exists():
        return
    import z3
    index = c.json(PROOF_INDEX)
    if "spec" in ctx and "lut" in ctx:
        _regenerate_proofs(c, ctx, index)
    for o in index["obligations"]:
        def run(o=o):
            p = c.d / o["evidence"]
            _require(o["evidence"] in c.manifest["files"], f"{o['evidence']} is not hashed in manifest.json")
            if o.get("kind") == "exhaustive":  # the RTL's LUT, evaluated again at every address
                from mi_certify.verification.rtl_formal import lut_table, yosys_smt2
                spec = ctx["spec"]
                ob = lut_table(yosys_smt2(p, spec.module_name), spec.module_name, bytes(ctx["lut"]),
                               spec.address_bits, spec.token_bits)
                _require(ob.verdict == o["verdict"], f"re-evaluation gives {ob.verdict}: {ob.detail}")
                return f"{ob.detail} (recorded {o['verdict']})"
            s = z3.Solver()
            s.set("timeout", SMT_TIMEOUT_S * 1000)
            text = p.read_text(encoding="utf-8")
            if o.get("prelude"):
                _require(o["prelude"] in c.manifest["files"], f"{o['prelude']} is not hashed in manifest.json")
                text = (c.d / o["prelude"]).read_text(encoding="utf-8") + text
            s.from_string(text)
            ans = str(s.check())
            expect = o.get("expect", "unsat")
            if o["verdict"] == "proved":
                _require(ans == expect, f"z3 answers {ans}, the obligation expects {expect}")
            elif o["verdict"] == "violated":
                _require(ans in ("sat", "unsat") and ans != expect, f"recorded violated but z3 answers {ans}")
                cex = o.get("counterexample")
                _require(bool(cex) and cex in c.manifest["files"], "violated without a hashed counterexample file")
            else:
                return SKIP, f"recorded {o['verdict']}; z3 answers {ans}"
            return f"z3 {z3.get_version_string()} answers {ans} ({o['verdict']}, expect {expect})"
        name = o["id"] if o["id"].startswith(o["group"] + ".") else f"{o['group']}.{o['id']}"
        c.run(f"{name}: {o['evidence']} re-run by z3", "independent", run)


def _tools(c: _Checker, ctx: dict) -> None:
    spec = ctx["spec"]
    v_path = c.d / f"{spec.module_name}.v"
    if (c.d / "lint.json").exists():
        if not c.opts.rerun_tools:
            c.add("rtl.lint: re-run Verilator", SKIP, "same code", "--quick")
        elif shutil.which("verilator") is None:
            c.add("rtl.lint: re-run Verilator", SKIP, "same code", "verilator is not installed")
        else:
            def lint():
                from mi_certify.verification.verilator import lint as run_lint
                res = run_lint(v_path, spec.module_name).to_json()
                stored = c.json("lint.json")
                _require(res["clean"] == stored["clean"] and res["messages"] == stored["messages"],
                         f"lint now {'clean' if res['clean'] else res['messages'][:2]}, lint.json says "
                         f"{'clean' if stored['clean'] else 'not clean'}")
                return "clean" if res["clean"] else "same messages as lint.json"
            c.run("rtl.lint: re-run Verilator", "same code", lint)
    if (c.d / "cosim.json").exists():
        if not c.opts.rerun_tools:
            c.add("cosim: re-run co-simulation", SKIP, "same code", "--quick")
        elif shutil.which("iverilog") is None:
            c.add("cosim: re-run co-simulation", SKIP, "same code", "iverilog is not installed")
        else:
            def cosim():
                from mi_certify.verification.cocotb_sim import run_cosim
                stored = c.json("cosim.json")
                cfg = spec.fsm_config()
                from mi_certify.generator.lut import property_masks
                traces = ()
                if (c.d / "proofs" / "fsm" / "without_rule_3a.json").exists():
                    traces = tuple(c.json("proofs/fsm/without_rule_3a.json")["traces"].values())
                from mi_certify.verification.hdl_adapter import prepare
                with tempfile.TemporaryDirectory(prefix="mi-certify-check-") as work:
                    sim_v, sim_top = prepare(v_path, spec.module_name, spec.hdl.reset_port, spec.address_bits,
                                             spec.token_bits, Path(work))
                    res = run_cosim(sim_v, sim_top, cfg, ctx["lut"].tobytes(), Path(work),
                                    runtime_py=c.d / f"{spec.name}.py", masks=tuple(property_masks(spec)),
                                    traces=traces,
                                    random_cycles=stored["cycles"] - stored["directed_cycles"], seed=stored["seed"])
                again = res.to_json()
                from .bundle_documents import differences
                diff = differences(stored, again)
                _require(not diff, f"re-run gives passed={again['passed']}, {again['mismatches']} mismatches; "
                                   "cosim.json differs in " + "; ".join(diff[:3]))
                return f"{again['cycles']} cycles, {again['mismatches']} mismatches, identical to cosim.json"
            c.run("cosim: re-run co-simulation", "same code", cosim)


def _hdl_numbers(c: _Checker, ctx: dict) -> None:
    """The ``hdl`` stage made again (Yosys + nextpnr-ice40, same seed): cell counts and Fmax
    must equal summary.json. Skipped with --quick, without the tools, or when the tool
    versions differ from the manifest's (the numbers depend on them; docs/hdl.md)."""
    name = "hdl: synthesis and place and route made again"
    stage = ctx["summary"].get("stages", {}).get("hdl", {})
    if stage.get("status") != "ok":
        return
    if not c.opts.rerun_tools:
        c.add(name, SKIP, "same code", "--quick")
        return
    from mi_certify.verification import synth
    from mi_certify.verification.tools import tool_version
    if synth.tools_missing():
        c.add(name, SKIP, "same code", f"not installed: {', '.join(synth.tools_missing())}")
        return
    recorded = c.json("manifest.json").get("versions", {}).get("tools", {})
    changed = [t for t in ("yosys", "nextpnr-ice40") if recorded.get(t) != tool_version(t)]
    if changed:
        c.add(name, SKIP, "same code", f"{', '.join(changed)} differ from the build's (manifest.json versions.tools)")
        return

    def again():
        spec = ctx["spec"]
        fresh = synth.hdl_numbers(spec, c.d / f"{spec.module_name}.v")
        stored = {k: ctx["summary"]["hdl"][k] for k in ("fmax_mhz_hx8k", "fmax_mhz_up5k", "lut4", "dff", "bram",
                                                          "goal_met")}
        mine = {k: fresh[k] for k in stored}
        _require(mine == stored, f"made again: {mine}; summary.json hdl: {stored}")
        # every number of the stage record: counts, Fmax, goal and hdl.clock_mhz verdicts per device
        differ = sorted(k for k in set(fresh) | (set(stage) - {"status", "method"}) if fresh.get(k) != stage.get(k))
        _require(not differ, f"summary.json stages.hdl differs from the numbers made again in: {', '.join(differ)}")
        return (f"Fmax {mine['fmax_mhz_hx8k']} / {mine['fmax_mhz_up5k']} MHz (HX8K / UP5K), {mine['lut4']} LUT4, "
                f"{mine['dff']} DFF, {mine['bram']} BRAM: equal to summary.json")
    c.run(name, "same code", again)


def _first_difference(name: str, a: bytes, b: bytes) -> str:
    la, lb = a.decode("utf-8", "replace").splitlines(), b.decode("utf-8", "replace").splitlines()
    for k, (x, y) in enumerate(zip(la, lb), start=1):
        if x != y:
            return f"{name} line {k}: {x.strip()[:70]!r}, made again {y.strip()[:70]!r}"
    return f"{name}: {len(la)} lines, made again {len(lb)}"


def _documents(c: _Checker, ctx: dict) -> None:
    """What a person reads, re-derived from the evidence (:mod:`.bundle_documents`)."""
    from mi_certify.generator.bundle import collect_obligations, manifest_figures, obligations_status, summarize

    from . import bundle_documents as docs

    spec, lut = ctx["spec"], ctx.get("lut")
    summary = ctx["summary"]
    if lut is None:
        return
    sources: dict = {}

    def regenerate():
        sources.update(docs.regenerate_sources(c.d, spec, c.manifest, summary, lut))
        bad = [_first_difference(rel, (c.d / rel).read_bytes() if (c.d / rel).exists() else b"", text.encode())
               for rel, text in sorted(sources.items())
               if not (c.d / rel).exists() or (c.d / rel).read_bytes() != text.encode("utf-8")]
        _require(not bad, "; ".join(bad[:3]))
        return f"{', '.join(sorted(sources))} emitted again from sla.yaml and lut.hex: byte for byte the same"
    c.run("generated sources: emitted again and compared", "same code", regenerate)

    derived: dict = {}

    def summary_check():
        stages = docs.expected_stages(c.d, spec, ctx["ir"], c.manifest, summary.get("stages", {}), lut,
                                      has_rom=any(rel.endswith("_rom.hex") for rel in sources))
        lut_json = c.json("lut.json")
        counts = docs.lut_counts(lut_json)
        derived.update(summarize(spec, stages, counts, c.manifest.get("mi_certify", {}).get("version", "?")))
        diff = docs.differences(summary, derived)
        diff += [f"lut.json status.{k}: stored {lut_json['status'].get(k)}, cell_status counts {v}"
                 for k, v in counts.items() if lut_json["status"].get(k) != v]
        _require(not diff, f"summary.json differs from the evidence in {len(diff)} field(s): " + "; ".join(diff[:4]))
        return f"status {derived['status']}, {len(derived['stages'])} stage records and every headline figure " \
               "re-derived from the evidence files"
    if not c.run("summary.json: every figure re-derived from the evidence", "independent", summary_check):
        derived.clear()
    stages = derived.get("stages", summary.get("stages", {}))

    def obligations_check():
        stored = c.json("obligations.json")
        again = collect_obligations(spec, c.d, stages)
        diff = docs.differences(stored["obligations"], again, "obligations")
        _require(not diff, "obligations.json differs from the evidence: " + "; ".join(diff[:3]))
        _require(stored["status"] == obligations_status(again),
                 f"obligations.json status: stored {stored['status']}, derived {obligations_status(again)}")
        return f"{len(again)} obligations, {stored['status']}"
    c.run("obligations.json matches the evidence", "same code", obligations_check)

    def records_check():
        want = docs.expected_documents(c.d, spec, ctx["ir"], c.manifest, stages)
        diff = []
        for rel, fields in want.items():
            _require((c.d / rel).is_file(), f"{rel} is missing")
            stored = c.json(rel)
            diff += [f"{rel} {x}" for x in docs.differences({k: stored.get(k) for k in fields}, fields)]
        ver = c.json("verification.json") if (c.d / "verification.json").exists() else None
        if ver:  # every witness's recorded IR outputs are the IR's at its x (fixed-order float64)
            wits = [("properties", r["id"], r["witness"]) for r in ver["properties"]] + \
                   [("output_domain", a["action"], a["witness"]) for a in ver["output_domain"]["actions"]]
            for where, name, w in wits:
                if w is None:
                    continue
                y = ctx["ir"].evaluate(np.array(w["x"])).tolist()
                if w.get("y_ir") != y:
                    diff.append(f"verification.json {where} {name} witness y_ir: stored {w.get('y_ir')}, IR {y}")
        _require(not diff, "; ".join(diff[:4]))
        return f"{', '.join(want)} and the witnesses' IR outputs re-derived from sla.yaml and the network"
    c.run("records: import.json, lut.json, lut_properties.json masks, witnesses re-derived", "independent",
          records_check)

    def manifest_check():
        obligations = collect_obligations(spec, c.d, stages)
        want = manifest_figures(derived or summary, obligations)
        diff = docs.differences({k: c.manifest.get(k) for k in want}, want)
        if c.manifest.get("controller") != spec.name:
            diff.append(f"controller: stored {c.manifest.get('controller')!r}, sla.yaml {spec.name!r}")
        command = c.manifest.get("command", [])
        if (c.d / "cosim.json").exists():
            cos = c.json("cosim.json")
            if c.manifest.get("seeds", {}).get("cosim") != cos["seed"]:
                diff.append("seeds.cosim: not cosim.json's seed")
            if "--seed" not in command or command[command.index("--seed") + 1] != str(cos["seed"]):
                diff.append("command --seed: not cosim.json's seed")
            random = cos["cycles"] - cos["directed_cycles"]
            if "--cosim-cycles" not in command or command[command.index("--cosim-cycles") + 1] != str(random):
                diff.append(f"command --cosim-cycles: not cosim.json's {random} random cycles")
        _require(not diff, "manifest.json differs from the evidence: " + "; ".join(diff[:4]))
        return f"status {want['status']}, obligations {want['obligations']['count']} {want['obligations']['status']}, " \
               "proof figures as derived"
    c.run("manifest.json: status and figures re-derived", "independent", manifest_check)

    def report_check():
        obligations = c.json("obligations.json")["obligations"]
        again = docs.regenerate_report(c.d, spec, obligations)
        stored = {p.relative_to(c.d).as_posix() for p in c.d.rglob("*") if p.is_file()
                  and (p.name in ("report.md", "report.html") or p.relative_to(c.d).parts[0] == "heatmaps")}
        bad = [f"{rel}: not made again" for rel in sorted(stored - set(again))]
        bad += [_first_difference(rel, (c.d / rel).read_bytes() if rel in stored else b"", data)
                if not rel.endswith(".png") else f"{rel}: image differs"
                for rel, data in sorted(again.items()) if rel not in stored or (c.d / rel).read_bytes() != data]
        _require(not bad, "; ".join(bad[:3]))
        return f"{', '.join(sorted(again))} rendered again from the evidence: byte for byte the same"
    c.run("report: rendered again from the evidence and compared", "same code", report_check)


def _verdict(c: _Checker) -> str:
    from mi_certify.generator.bundle import GOOD_VERDICTS
    failed = [i.name for i in c.items if i.status == FAIL]
    _require(not failed, f"{len(failed)} check(s) failed")
    s = c.json("summary.json")
    ob = c.json("obligations.json")
    open_ = [o["id"] for o in ob["obligations"] if o["required"] and o["verdict"] not in GOOD_VERDICTS]
    _require(s["status"] == "ok", f"the build is {s['status']}: " +
             ", ".join(s.get("failed_stages", []) + s.get("skipped_stages", [])))
    _require(not open_, f"open obligations: {', '.join(open_)}")
    return f"build ok, {len(ob['obligations'])} obligations discharged"
