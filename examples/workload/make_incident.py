"""Write examples/workload/incident.csv: a recorded-style probe trace for `mi-certify run --probe trace:`.

One row per request, one column per input of the reference controller
(examples/meta_controller), physical units. Phases (rows):

  0-39     idle engine            compute_util 0.05                      -> keep (property P2)
  40-99    busy                   util 0.95, cache misses 0.2            -> merge_conv
  100-159  half busy, memory-bound util 0.5, mem_bw 0.8, 200 KiB free    -> keep
  160-219  busy and hot           util 0.95, 90 degC                     -> merge_conv (P1 forbids only int4)
  220-222  temperature sensor drops out (empty cells)                  -> probe fault
  223-299  idle again, cool                                              -> keep

The arrows are what the shipped controller (trained from examples/meta_controller/profile.csv,
docs/training.md) proposes: it learned keep below about 0.8 utilisation and merge_conv above.

Small deterministic jitter (numpy default_rng(0)) keeps the readings inside their
quantization cells. Usage: python examples/workload/make_incident.py
"""

from pathlib import Path

import numpy as np

PHASES = [  # rows, compute_util, cache_miss_rate, mem_bw_util, free_sram_kb, temperature_c
    (40, 0.05, 0.20, 0.30, 512.0, 50.0),
    (60, 0.95, 0.20, 0.30, 512.0, 60.0),
    (60, 0.50, 0.50, 0.80, 200.0, 60.0),
    (60, 0.95, 0.40, 0.40, 512.0, 90.0),
    (3, 0.95, 0.40, 0.40, 512.0, None),
    (77, 0.05, 0.20, 0.30, 512.0, 45.0),
]
JITTER = (0.01, 0.01, 0.01, 5.0, 0.5)


def main() -> None:
    rng = np.random.default_rng(0)
    lines = ["t_s,compute_util,cache_miss_rate,mem_bw_util,free_sram_kb,temperature_c"]
    row = 0
    for n, *values in PHASES:
        for _ in range(n):
            cells = []
            for v, j in zip(values, JITTER):
                cells.append("" if v is None else f"{v + rng.uniform(-j, j):.4f}")
            lines.append(f"{row * 0.05:.2f}," + ",".join(cells))
            row += 1
    out = Path(__file__).with_name("incident.csv")
    out.write_text("\n".join(lines) + "\n", encoding="ascii")
    print(f"wrote {out} ({row} rows)")


if __name__ == "__main__":
    main()
