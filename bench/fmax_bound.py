"""Where the Fmax of a build's LUT-FSM goes: the shipped design against bounds, in one run.

    python bench/fmax_bound.py [--build DIR] [--seeds N]

Every variant is placed and routed with the build's own flow
(:func:`mi_certify.verification.rtl.synth.place_and_route`: the registered-input wrapper,
``synth_ice40 -nodffe`` / ``synth_ecp5``, nextpnr-ice40 HX8K ct256 / UP5K sg48, nextpnr-ecp5
LFE5U-25F CABGA256: every device of :data:`mi_certify.verification.rtl.synth.DEVICES`), on seeds 1..N:

- **shipped**: the build's ``<module>.v`` as it is;
- **table read alone**: the same file with the FSM's next-state logic replaced by
  "token <= the LUT entry's token, reason <= its confident bit" (no FSM logic behind
  the LUT read: an upper bound for any one-cycle design that reads this LUT);
- **FSM alone**: the same file with the LUT replaced by a one-level function of the
  address (``addr[2:0] ^ addr[5:3]``): what the FSM costs on its own.
- with ``--slices LOW_BITS`` (``sliced_rom`` builds): the table read alone with that
  slicing instead of the chosen one (e.g. 13 = 8 slices of 8,192 cells).

Prints Fmax per device (min / max over the seeds) and the ratio to the goal
(130 MHz HX8K, 50 MHz UP5K, 200 MHz ECP5-25F; docs/hdl.md). Per latency: run it on builds made
with ``hdl.latency`` 1, 2, 3 and 4 (``--build``). Takes about 30 s per variant and seed (YoWASP).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TABLE_ONLY = """    // bench: the FSM removed; the registers take the LUT entry directly
    reg [TW:0] n_token; reg [CW:0] n_cand; reg [HW:0] n_hcnt; reg [DW:0] n_dcnt; reg [VW:0] n_vcnt; reg n_fb;
    reg [RW:0] n_rcnt; reg [3:0] n_reason;
    always @(*) begin
        n_token = lut_p; n_reason = {3'd0, lut_c}; n_cand = cand; n_hcnt = hcnt; n_dcnt = dcnt; n_vcnt = vcnt;
        n_fb = fb; n_rcnt = rcnt;
    end
"""


def _width(src: str, name: str) -> str:
    m = re.search(rf"reg\s+\[(\d+):0\]\s+{name};", src)
    return m.group(1) if m else "0"


def table_only(src: str) -> str:
    """``src`` with the next-state block replaced by a direct register of the LUT entry."""
    a, b = src.index("    // ---- next state"), src.index("    // ---- registers")
    body = TABLE_ONLY
    for key, name in (("TW", "token"), ("CW", "cand"), ("HW", "hcnt"), ("DW", "dcnt"), ("VW", "vcnt"),
                      ("RW", "rcnt")):
        body = body.replace(f"[{key}:0]", f"[{_width(src, name) if name != 'token' else _width_out(src)}:0]")
    return src[:a] + body + src[b:]


def _width_out(src: str) -> str:
    return re.search(r"output reg  \[(\d+):0\]\s+token,", src).group(1)


def fsm_only(src: str) -> str:
    """``src`` with the LUT replaced by one LUT level on the address."""
    a = src.index("    // ---- LUT:")
    b = src.index("    assign lut_p")   # the LUT's declarations, logic and (pipelined) entry register
    tw = int(_width_out(src)) + 1
    one = (f"    wire [{tw}:0] lut_entry = addr[{tw}:0] ^ addr[{2 * tw + 1}:{tw + 1}];\n"
           f"    wire [{tw - 1}:0] lut_p;\n    wire lut_c;\n")
    return src[:a] + one + src[b:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(ROOT / "certs" / "meta_controller"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--slices", type=int, default=None, help="low bits of an alternative sliced_rom layout")
    args = ap.parse_args(argv)

    from mi_certify.generator.build import lut_sliced_rom
    from mi_certify.generator.core.spec import load_spec
    from mi_certify.runtime.fsm import REASON_BITS
    from mi_certify.verification.rtl import synth

    build = Path(args.build)
    spec = load_spec(build / "inputs" / "spec" / "sla.yaml")
    src = (build / f"{spec.module_name}.v").read_text(encoding="utf-8")
    variants = {"shipped": src, "table read alone": table_only(src), "FSM alone": fsm_only(src)}
    if args.slices is not None:
        import numpy as np
        from mi_certify.generator.build.emit_common import SourceHashes
        from mi_certify.generator.build.emit_verilog import emit_verilog
        from mi_certify.generator.core.lut import Lut, LutFsmArtefact, property_masks
        from mi_certify.generator.core.lut import split_table
        from mi_certify.runtime.lut_file import decode_lut_hex
        raw = decode_lut_hex((build / "lut.hex").read_text())
        lut = Lut(*split_table(raw), np.full(len(raw), "proven", dtype=object))
        real = lut_sliced_rom.sliced_rom
        lut_sliced_rom.sliced_rom = lambda e, a, low_bits=None: real(e, a, args.slices)
        try:
            alt = emit_verilog(spec, LutFsmArtefact.from_lut(spec, lut, property_masks(spec)),
                               SourceHashes("0" * 64, "0" * 64, "0" * 64), "bench", encoding="sliced_rom")
        finally:
            lut_sliced_rom.sliced_rom = real
        variants[f"table read alone, {args.slices} low bits"] = table_only(alt)

    rows = {}
    with tempfile.TemporaryDirectory(prefix="mi-certify-fmax-") as work:
        for k, (name, text) in enumerate(variants.items()):
            d = Path(work) / str(k)
            d.mkdir()
            (d / f"{spec.module_name}.v").write_text(text, encoding="utf-8")
            res = [synth.place_and_route(d / f"{spec.module_name}.v", spec.module_name, spec.address_bits,
                                         spec.token_bits, REASON_BITS, spec.hdl.reset_port, seed=s)
                   for s in range(1, args.seeds + 1)]
            rows[name] = {dev: [r[dev]["fmax_mhz"] for r in res] for dev in synth.DEVICES}
            rows[name]["cells"] = {dev: {x: res[0][dev][x] for x in ("lut4", "dff", "bram")} for dev in synth.DEVICES}
            print(f"{name:36s} " + "   ".join(
                f"{dev.upper()} " + ("does not fit" if None in v else
                                     f"{min(v):7.2f}-{max(v):7.2f} MHz ({min(v) / synth.DEVICES[dev].goal_mhz:.2f}-"
                                     f"{max(v) / synth.DEVICES[dev].goal_mhz:.2f}x goal)")
                for dev, v in rows[name].items() if dev != "cells")
                + f"   {rows[name]['cells']}", flush=True)
    print(json.dumps({"build": str(build), "seeds": list(range(1, args.seeds + 1)), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
