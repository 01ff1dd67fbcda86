"""Bus transactions per second and the full co-simulation of the bus wrappers: N random transactions
(default 100,000) through the AXI4-Lite and the Wishbone wrapper of a build, every read and response
compared with the Python reference (docs/hdl.md, "Bus wrappers"). The build runs 2,000 per wrapper
(generator/pipeline/soc_stage.py, BUS_TRANSACTIONS).

    python bench/bus_cosim.py --build DIR [--transactions N] [--seed S]

DIR is a finished build with raw inputs (e.g. build/meta_controller). Prints per wrapper: transactions,
clock cycles, mismatches, seconds (wall, simulator build included) and transactions per second.
Exit code 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", type=Path, required=True)
    ap.add_argument("--transactions", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    from mi_certify.generator.core.spec import load_spec
    from mi_certify.verification.cosim.bus_cosim import run_bus_cosim
    summary = json.loads((a.build / "summary.json").read_text())
    spec = load_spec(next((a.build / "inputs" / "spec").glob("*.yaml")))
    spec = dataclasses.replace(spec, hdl=spec.hdl.with_latency(summary["stages"]["emit"]["latency"]))
    print(f"load {os.getloadavg()[0]:.2f}")
    bad = False
    with tempfile.TemporaryDirectory(prefix="mi-certify-bus-bench-") as work:
        for bus in ("axil", "wb"):
            r = run_bus_cosim(spec, a.build, a.build / f"{spec.name}.py", bus, a.transactions, Path(work) / bus,
                              seed=a.seed)
            bad |= not r["passed"]
            rate = r["transactions"] / r["seconds"] if r.get("seconds") else 0
            print(f"{bus:5s} transactions {r['transactions']:,}  cycles {r.get('cycles', 0):,}  mismatches "
                  f"{r['mismatches']}  {r.get('seconds', 0):.1f} s  {rate:,.0f} transactions/s"
                  + (f"  error: {r['error']}" if r.get("error") else ""))
    print(f"load {os.getloadavg()[0]:.2f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
