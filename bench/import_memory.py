"""Benchmark: memory and time of importing a network and cross-checking it, as ``mi-certify verify``
(:func:`~mi_certify.verification.nn.campaign.run_campaign`) prepares an instance: ``load_model``
(read, check, import; with a property, onnxruntime first on its box: ``boxes``), ``parse_vnnlib``, then
``LoadedModel.cross_check`` on the property's box (256 points against onnxruntime).

Each network runs in a fresh interpreter. Per step it prints the wall time, the step's own peak
resident size (VmHWM, reset before the step through ``/proc/self/clear_refs``), the resident size
after it (VmRSS), and both peaks as a multiple of the file size: the total and the part above the
baseline (the interpreter with numpy, numba, onnx and onnxruntime imported, measured first). It also
prints a SHA-256 of the IR (every node's kind, sizes and arrays: dtype, shape and bytes; outputs,
names, notes, head), so that two versions of the importer can be compared bit for bit.

Usage: python bench/import_memory.py [ONNX [VNNLIB]] ...  (default: tllverifybench N = 32, 48, 64
from --tll-dir, default /tmp/tll, with their first property; a network without a property is
cross-checked on [-1, 1] per input)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

MB = 1 << 20


def status() -> dict[str, int]:
    """VmHWM and VmRSS of this process, bytes."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, val = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(val.split()[0]) * 1024
    return out


def reset_peak() -> bool:
    """Reset VmHWM to the current VmRSS (Linux >= 4.0); False when the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def ir_digest(ir) -> str:
    """SHA-256 over every node of ``ir`` (kind, sizes, arrays by dtype, shape and bytes) and its
    outputs, names, notes and head."""
    import numpy as np

    h = hashlib.sha256()

    def arr(a) -> None:
        a = np.asarray(a)
        h.update(repr((a.dtype.str, a.shape)).encode())
        h.update(np.ascontiguousarray(a).tobytes())

    for node in ir.nodes:
        h.update(node.kind.encode())
        if node.kind == "affine":
            for src, w in node.terms:
                h.update(repr(src).encode())
                arr(w)
            arr(node.bias)
        else:
            h.update(repr(node).encode())
    h.update(repr((ir.outputs, ir.input_names, ir.output_names, ir.notes, ir.head)).encode())
    return h.hexdigest()


def one(onnx_path: Path, vnnlib: Path | None) -> dict:
    """The steps in this process; returns the rows."""
    rows = []
    size = onnx_path.stat().st_size

    def step(name: str, fn):
        reset_peak()
        t0 = time.perf_counter()
        out = fn()
        wall = time.perf_counter() - t0
        st = status()
        rows.append({"step": name, "wall": wall, "hwm": st["VmHWM"], "rss": st["VmRSS"]})
        return out

    def imports():
        import numba  # noqa: F401
        import numpy  # noqa: F401
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401

        from mi_certify.generator.frontend.model import load_model  # noqa: F401
        from mi_certify.verification.nn.vnnlib import parse_vnnlib  # noqa: F401

    step("baseline (imports)", imports)
    import numpy as np

    from mi_certify.generator.frontend.model import load_model
    from mi_certify.verification.nn.vnnlib import parse_vnnlib

    from mi_certify.verification.nn.vnnlib import announced_boxes, query_box

    t_all = time.perf_counter()
    if vnnlib is not None:   # as `mi-certify verify --vnnlib`: onnxruntime on the property's box, then the import
        model = step("load_model", lambda: load_model(onnx_path, announced_boxes([vnnlib])))
        query = step("parse_vnnlib", lambda: parse_vnnlib(vnnlib, model.ir.n_inputs, model.ir.n_outputs))
        lo, hi = query_box(query, vnnlib)
    else:
        model = step("load_model", lambda: load_model(onnx_path))
        lo, hi = -np.ones(model.ir.n_inputs), np.ones(model.ir.n_inputs)
    worst = step("cross_check", lambda: model.cross_check(lo, hi))
    total = time.perf_counter() - t_all
    reset_ok = reset_peak()
    return {"file": str(onnx_path), "size": size, "rows": rows, "total_wall": total, "reset": reset_ok,
            "sha256": model.sha256, "ir": ir_digest(model.ir), "worst": worst}


def report(res: dict) -> None:
    size, rows = res["size"], res["rows"]
    base = rows[0]["rss"]
    print(f"{Path(res['file']).name}: {size / MB:,.0f} MB; baseline {base / MB:,.0f} MB resident"
          + ("" if res["reset"] else " (VmHWM not resettable: peaks are cumulative)"))
    print(f"  {'step':<20} {'wall s':>7} {'VmHWM MB':>9} {'VmRSS MB':>9} {'HWM/file':>9} {'(HWM-base)/file':>16}")
    for r in rows:
        print(f"  {r['step']:<20} {r['wall']:>7.2f} {r['hwm'] / MB:>9,.0f} {r['rss'] / MB:>9,.0f} "
              f"{r['hwm'] / size:>9.2f} {(r['hwm'] - base) / size:>16.2f}")
    peak = max(r["hwm"] for r in rows[1:])
    print(f"  import + cross-check: {res['total_wall']:.2f} s, peak VmHWM {peak / MB:,.0f} MB = {peak / size:.2f}x "
          f"the file, {(peak - base) / MB:,.0f} MB = {(peak - base) / size:.2f}x above the baseline")
    print(f"  model sha256 {res['sha256']}\n  IR digest    {res['ir']}\n  cross-check: largest difference "
          f"{res['worst']!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="ONNX [VNNLIB] pairs: a .vnnlib after an .onnx is its property")
    ap.add_argument("--tll-dir", type=Path, default=Path("/tmp/tll"))
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)   # the child process
    ap.add_argument("--json", action="store_true", help="print each network's result as one JSON line too")
    args = ap.parse_args()
    if args.one:
        onnx_path, vnn = Path(args.models[0]), (Path(args.models[1]) if len(args.models) > 1 else None)
        print(json.dumps(one(onnx_path, vnn)))
        return 0
    pairs: list[list[Path]] = []
    for m in args.models:
        if m.endswith(".vnnlib") and pairs:
            pairs[-1].append(Path(m))
        else:
            pairs.append([Path(m)])
    if not pairs:
        for n, k in ((32, 3), (48, 5), (64, 7)):
            pairs.append([args.tll_dir / "onnx" / f"tllBench_n=2_N=M={n}_m=1_instance_{k}_0.onnx",
                          args.tll_dir / "vnnlib" / f"property_N={n}_0.vnnlib"])
    for pair in pairs:
        out = subprocess.run([sys.executable, __file__, "--one", *map(str, pair)], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{pair[0]}: failed\n{out.stderr}", file=sys.stderr)
            return 1
        res = json.loads(out.stdout.strip().splitlines()[-1])
        report(res)
        if args.json:
            print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
