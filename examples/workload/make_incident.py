"""Write examples/workload/incident.csv: a recorded-style probe trace for `mi-certify run --probe trace:`.

One row per request, one column per input of the reference controller
(examples/meta_controller), physical units. Phases (rows):

  0-39     idle engine                 compute_util 0.05                          -> keep (property P2)
  40-99    lightly used                util 0.30, 700 KiB SRAM free                -> merge_conv
  100-159  a neighbour takes a core    util 0.53, chase 172 ns, 26 GB/s, 300 KiB  -> int4
  160-219  the same, hot               96 degC                                    -> keep (P1 forbids int4)
  220-222  temperature sensor drops out (empty cells)                           -> probe fault
  223-299  idle again, cool                                                       -> keep

The arrows are what the shipped controller's LUT (trained from
examples/meta_controller/profile.csv, docs/training.md) proposes with its confident bit set
in those cells. The values are chosen where it is confident: its decisions also depend on
free_sram_kb, which the profile drew at random (the network fitted that noise:
examples/meta_controller/README.md), so the SRAM reading differs between phases.

Small deterministic jitter (numpy default_rng(0)) keeps the readings inside their
quantization cells. Usage: python examples/workload/make_incident.py
"""

from pathlib import Path

import numpy as np

PHASES = [  # rows, compute_util, cache_chase_ns, mem_bw_avail_gbs, free_sram_kb, temperature_c
    (40, 0.05, 165.0, 36.0, 300.0, 45.0),
    (60, 0.30, 165.0, 36.0, 700.0, 50.0),
    (60, 0.53, 172.0, 26.0, 300.0, 40.0),
    (60, 0.53, 172.0, 26.0, 300.0, 96.0),
    (3, 0.53, 172.0, 26.0, 300.0, None),
    (77, 0.05, 165.0, 36.0, 300.0, 45.0),
]
JITTER = (0.01, 3.0, 1.0, 5.0, 0.5)


def main() -> None:
    rng = np.random.default_rng(0)
    lines = ["t_s,compute_util,cache_chase_ns,mem_bw_avail_gbs,free_sram_kb,temperature_c"]
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
