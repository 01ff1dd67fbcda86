"""Checked co-simulation cycles per second: per-cycle cocotb, vector bench under Icarus (cocotb
orchestrating) and under Verilator, on the same FSM and the same vectors, in one run.

    python bench/cosim.py [--build DIR] [--cycles N]

Without --build, the reference network on a reduced grid (2 bits per input, --sample-lut, no
verification) is built in a temporary directory: the RTL structure is the same, the LUT case
smaller. With --build, the FSM of that build (e.g. build/meta_controller) is used. Printed:
seconds and checked cycles per second of each simulator, run time only (simulator build
excluded, shown separately), and the ratios to per-cycle cocotb.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _small_build(tmp: Path) -> Path:
    from mi_certify.generator.pipeline.runner import BuildOptions, build
    text = (ROOT / "examples" / "meta_controller" / "sla.yaml").read_text().split("\ncosim:")[0]
    for b in ("bits: 4", "bits: 3"):
        text = text.replace(b, "bits: 2")
    sla = tmp / "sla.yaml"
    sla.write_text(text)
    out = tmp / "build"
    build(ROOT / "examples" / "meta_controller" / "controller.onnx", sla, out,
          BuildOptions(verify=False, distill=False, skip_rtl_proofs=True, skip_cosim=True, skip_lint=True))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, help="a build directory (default: a small build in a temporary directory)")
    ap.add_argument("--cycles", type=int, default=20_000, help="random cycles after the directed ones (default 20000)")
    args = ap.parse_args(argv)

    from mi_certify.generator.core.lut import property_masks
    from mi_certify.generator.core.spec import load_spec
    from mi_certify.runtime.lut_file import decode_lut_hex
    from mi_certify.verification.cosim.cocotb_sim import (expected_trace, fsm_job, make_stimulus,
                                                    run_cosim_per_cycle)
    from mi_certify.verification.cosim.vector_sim import run_icarus, run_verilator_coverage

    with tempfile.TemporaryDirectory(prefix="mi-certify-bench-") as tmp:
        tmp = Path(tmp)
        d = args.build or _small_build(tmp)
        spec = load_spec(next((d / "inputs" / "spec").iterdir()))
        cfg, masks = spec.fsm_config(), tuple(property_masks(spec))
        lut = decode_lut_hex((d / "lut.hex").read_text())
        top = getattr(spec, "module_name", spec.name)
        v = d / f"{spec.name}.v"
        stim, _ = make_stimulus(cfg, lut, args.cycles, 1, masks)
        exp, _ = expected_trace(cfg, lut, stim, None, masks)
        job = fsm_job(v, top, stim, exp, cfg)
        n = len(stim)
        print(f"FSM {v.name}: {len(lut)} LUT cells, {n} cycles (directed + {args.cycles} random)")

        t0 = time.perf_counter()
        per = run_cosim_per_cycle(v, top, stim, [e[:2] for e in exp], tmp / "percycle")
        t_per = time.perf_counter() - t0
        if per.get("mismatches") != 0:
            print("per-cycle cocotb bench failed:", per)
            return 1
        icarus = run_icarus(job, tmp / "icarus")
        if not icarus.ok:
            print("Icarus vector bench failed:", icarus.error)
            return 1
        t0 = time.perf_counter()
        ver, cov = run_verilator_coverage(job, tmp / "verilator")
        t_ver_all = time.perf_counter() - t0
        if not ver.ok:
            print("Verilator vector bench failed:", ver.error)
            return 1
        rows = [("cocotb per cycle (Icarus, Python drives and checks)", t_per, None),
                ("vector bench, Icarus (cocotb orchestrating)", icarus.seconds, None),
                ("vector bench, Verilator --coverage (run only)", ver.seconds, ver.build_seconds)]
        base = n / t_per
        print(f"{'simulator':58s} {'seconds':>8s} {'cycles/s':>10s} {'ratio':>7s}")
        for name, sec, _ in rows:
            print(f"{name:58s} {sec:8.2f} {n / sec:10.0f} {n / sec / base:6.1f}x")
        print(f"(the per-cycle and Icarus figures include simulator start-up; Verilator build "
              f"{ver.build_seconds:.1f} s, total {t_ver_all:.1f} s; line coverage "
              f"{cov['line']['share']:.3f}, toggle {cov['toggle']['share']:.3f}, branch {cov['branch']['share']:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
