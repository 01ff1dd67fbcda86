"""Synthesis numbers of the generated Verilog: Yosys cell counts and nextpnr-ice40 Fmax.

Three measurements, each a subprocess with a timeout (docs/hdl.md, "Numbers"); Yosys runs
through :mod:`.yosys` (script ``templates/yosys/synth.ys.j2``), nextpnr-ice40 through
:func:`.tools.run`:

1. **Generic synthesis** (``yosys: synth -top <module>; stat -json``): the cell count
   by type, technology-independent (Yosys internal gates ``$_AND_``, ``$_MUX_`` ...).
2. **iCE40 synthesis** (``synth_ice40 -top <module>``): ``SB_LUT4`` (4-input LUTs),
   ``SB_DFF*`` (every flip-flop variant), ``SB_RAM40_4K*`` (4 Kbit block RAMs),
   ``SB_CARRY``, of the controller alone.
3. **Place and route** (``synth_ice40 -nodffe`` of the wrapper: clock enables become LUT
   logic, which kept the enable nets off the critical path of this FSM; then
   ``nextpnr-ice40 --hx8k --package ct256`` and ``--up5k --package sg48``, ``--seed 1``,
   ``--report``): Fmax of the clock from nextpnr's JSON
   report (``fmax.<clock>.achieved``, MHz), measured on a wrapper
   (:func:`fmax_wrapper`) that loads every input of the controller from a shift register
   and XOR-folds its outputs into one registered pin: all inputs are registered, so the
   LUT path from ``addr`` to the state registers is a timed register-to-register path
   (without it nextpnr leaves that path out of its figure), and the wrapper needs three
   pins whatever the address width (the UP5K SG48 package has 39).

Limits (docs/hdl.md, "Designs that cannot fit"): a wrapper over a device's :data:`CAPACITY`
is recorded ``fits: false`` without running nextpnr-ice40 (:func:`fit_problem`); a ROM above
:func:`max_rom_kbit` is not synthesised at all (:func:`rom_refusal`); every tool runs with a
time limit and the address-space limit of :func:`.tools.memory_limit_mb`.

Place and route is deterministic for a fixed seed and inputs; the Fmax figure is still
kept out of hashed build outputs (it depends on the nextpnr version and its timing model).

:func:`estimate` is the ``auto`` encoding's metric: iCE40 logic cells after ``synth_ice40``
of the registered-input wrapper = ``SB_LUT4`` + ``SB_CARRY`` + :data:`BRAM_LUT4_COST` x
``SB_RAM40_4K`` (a block RAM charged as the LUT4 share of one BRAM on the UP5K, 5280 / 30;
docs/hdl.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from . import yosys
from .tools import TOOLS, ToolMissingError, find_tool, memory_error, memory_limit_mb, require_tool, run

#: nextpnr-ice40 targets: name -> (device flag, package, Fmax goal for the reference controller in MHz).
DEVICES = {"hx8k": ("--hx8k", "ct256", 130.0), "up5k": ("--up5k", "sg48", 50.0)}

#: Placement seed (fixed: the same inputs give the same placement and the same Fmax).
SEED = 1

#: LUT4-equivalents charged per block RAM by :func:`estimate` (HX8K: 7680 LUT4, 32 BRAM → 240;
#: UP5K: 5280 LUT4, 30 BRAM → 176; the smaller share is used so a BRAM is never "free").
BRAM_LUT4_COST = 176

WRAPPER = "mi_certify_fmax_wrapper"

#: What each device holds (iCE40 LP/HX and UltraPlus data sheets): logic cells (one SB_LUT4
#: each) and 4 Kbit block RAMs (SB_RAM40_4K). A wrapper netlist needing more of either is
#: recorded ``fits: false`` without running nextpnr-ice40 (:func:`fit_problem`).
CAPACITY = {"hx8k": {"lut4": 7680, "bram": 32}, "up5k": {"lut4": 5280, "bram": 30}}

#: Cell names of the :data:`CAPACITY` resources, in the ``does not fit`` detail.
_CELL_NAMES = {"bram": "SB_RAM40_4K", "lut4": "SB_LUT4"}

#: Default of :func:`max_rom_kbit` (Kbit). Measured with the reference network's sliced ROM
#: (Yosys 0.23): 16-bit address, 48 Kbit: the whole stage 18 s; 20-bit, 768 Kbit: generic
#: ``synth`` 75 s / 0.48 GB, ``synth_ice40`` 32 s / 0.51 GB, the wrapper 53 s / 0.10 GB; 24-bit,
#: 5,632 Kbit: generic ``synth`` past 4 GB resident within 80 s.
MAX_ROM_KBIT = 1024

#: Environment variable overriding :data:`MAX_ROM_KBIT` (Kbit; ``0`` or ``none``: no limit).
MAX_ROM_ENV = "MI_CERTIFY_HDL_MAX_ROM_KBIT"

#: iCE40 4 Kbit block RAM modes (depth, width) for read-only use.
_BRAM_MODES = ((256, 16), (512, 8), (1024, 4), (2048, 2))


#: The external tools of this module (:data:`mi_certify.verification.tools.TOOLS`).
REQUIRED_TOOLS = ("yosys", "nextpnr-ice40")


class SynthError(RuntimeError):
    """A synthesis or place-and-route tool failed (the message holds the tail of its log)."""


def tools_missing() -> list[str]:
    """The tools of :data:`REQUIRED_TOOLS` that are not installed (no override, not on PATH), in
    that order. One that is there but too old is not missing: the build refuses it up front
    (:func:`mi_certify.verification.tools.misconfigured`) and :func:`hdl_numbers` fails on it."""
    return [t for t in REQUIRED_TOOLS if find_tool(t) is None and not os.environ.get(TOOLS[t].env_var)]


def _nextpnr(args: list[str], cwd: Path, timeout_s: float) -> str:
    """``nextpnr-ice40 <args>`` in ``cwd``; its stdout. Raises SynthError (missing, timeout, exit)."""
    try:
        exe = require_tool("nextpnr-ice40")
    except ToolMissingError as exc:
        raise SynthError(str(exc)) from exc
    limit = memory_limit_mb()
    try:
        proc = run([exe, *args], cwd=cwd, capture=True, text=True, timeout=timeout_s, memory_mb=limit)
    except subprocess.TimeoutExpired:
        raise SynthError(f"nextpnr-ice40 timed out after {timeout_s:.0f} s (its time limit; killed)") from None
    oom = memory_error("nextpnr-ice40", proc.returncode, proc.stderr or proc.stdout, limit)
    if oom:
        raise SynthError(oom)
    if proc.returncode != 0:
        raise SynthError(f"nextpnr-ice40 failed: {(proc.stderr or proc.stdout).strip()[-600:]}")
    return proc.stdout


def _yosys_cells(sources: list[str], top: str, cwd: Path, timeout_s: float, **options) -> dict:
    """:func:`.yosys.cell_stats` with its errors as SynthError (same messages)."""
    try:
        return yosys.cell_stats(sources, top, cwd, timeout_s, **options)
    except yosys.YosysError as exc:
        raise SynthError(str(exc)) from None


def fmax_wrapper(top: str, address_bits: int, token_bits: int, reason_bits: int, reset_port: str) -> str:
    """Verilog of the Fmax wrapper around module ``top`` (ports ``clk``, ``din``, ``dout``).

    ``din`` shifts into a register holding {reset, probe_fault, sla_violation, addr}; the
    controller reads that register (registered inputs); ``dout`` is the registered XOR of
    token, reason, audit_valid and audit_addr (audit_token / audit_reason are copies of
    token / reason and would cancel).
    """
    n = address_bits + 3
    return f"""// Fmax wrapper generated by mi-certify (not part of the controller): registered inputs, one output pin.
module {WRAPPER} (
    input  wire clk,
    input  wire din,
    output reg  dout
);
    reg  [{n - 1}:0] sh;
    wire [{token_bits - 1}:0] token, audit_token;
    wire [{reason_bits - 1}:0] reason, audit_reason;
    wire audit_valid;
    wire [{address_bits - 1}:0] audit_addr;
    always @(posedge clk) begin
        sh   <= {{sh[{n - 2}:0], din}};
        // audit_token / audit_reason equal token / reason: folding both in would cancel them
        dout <= ^{{token, reason, audit_valid, audit_addr}};
    end
    {top} dut (
        .clk(clk), .{reset_port}(sh[{n - 1}]), .probe_fault(sh[{n - 2}]), .sla_violation(sh[{n - 3}]),
        .addr(sh[{address_bits - 1}:0]),
        .token(token), .reason(reason), .audit_valid(audit_valid), .audit_token(audit_token),
        .audit_reason(audit_reason), .audit_addr(audit_addr)
    );
endmodule
"""


def max_rom_kbit() -> int | None:
    """The largest ``$readmemh`` ROM (Kbit, words x width) that Yosys is asked to synthesise:
    :data:`MAX_ROM_ENV` when set (``0`` / ``none``: None, no limit), else :data:`MAX_ROM_KBIT`.
    Raises ValueError on another value."""
    from .tools import env_limit
    return env_limit(MAX_ROM_ENV, MAX_ROM_KBIT, "Kbit")


def rom_shapes(verilog: Path) -> list[tuple[str, int, int]]:
    """The ``$readmemh`` ROMs of ``verilog``: (name, words, width) per ``reg [W-1:0] name [0:N-1]``
    that an ``initial $readmemh(..., name)`` fills (the ``rom`` / ``sliced_rom`` encodings)."""
    text = verilog.read_text(encoding="utf-8", errors="replace")
    filled = set(re.findall(r"\$readmemh\s*\(\s*\"[^\"]*\"\s*,\s*(\w+)", text))
    return [(name, int(last) + 1, int(hi) + 1)
            for hi, name, last in re.findall(r"\breg\s*\[(\d+):0\]\s*(\w+)\s*\[0:(\d+)\]", text) if name in filled]


def ice40_brams(words: int, width: int) -> int:
    """The fewest 4 Kbit block RAMs holding a ``words`` x ``width``-bit ROM (modes 256x16 ... 2048x2;
    Yosys' ``memory_bram`` mapping of the registered-address ROM needs this many)."""
    return min(-(-words // d) * -(-width // w) for d, w in _BRAM_MODES)


def rom_refusal(verilog: Path) -> str | None:
    """Why Yosys is not run on ``verilog`` (None: it is): its ROMs hold more than :func:`max_rom_kbit`."""
    limit = max_rom_kbit()
    shapes = rom_shapes(verilog)
    bits = sum(w * n for _, w, n in shapes)
    if limit is None or bits <= limit * 1024:
        return None
    desc = ", ".join(f"{name} {words:,} x {width} bits" for name, words, width in shapes)
    return (f"not run: the ROM ({desc} = {bits // 1024:,} Kbit) is above the limit of {limit:,} Kbit for "
            f"Yosys ({MAX_ROM_ENV}; read as logic it takes minutes and GBs)")


def rom_brams(verilog: Path) -> int:
    """:func:`ice40_brams` summed over the ROMs of ``verilog`` (0 without one)."""
    return sum(ice40_brams(words, width) for _, words, width in rom_shapes(verilog))


def fit_problem(device: str, counts: dict) -> str | None:
    """``"does not fit: needs 192 SB_RAM40_4K, HX8K has 32"`` when ``counts`` (``bram``, ``lut4``)
    exceed :data:`CAPACITY` of ``device``; None when they fit (or a count is unknown)."""
    over = [f"needs {counts[k]:,} {_CELL_NAMES[k]}, {device.upper()} has {cap:,}"
            for k, cap in CAPACITY[device].items() if counts.get(k) is not None and counts[k] > cap]
    return "does not fit: " + "; ".join(over) if over else None


def _ice40_counts(cells: dict) -> dict:
    return {"lut4": int(cells.get("SB_LUT4", 0)),
            "dff": int(sum(v for k, v in cells.items() if k.startswith("SB_DFF"))),
            "bram": int(sum(v for k, v in cells.items() if k.startswith("SB_RAM40_4K"))),
            "carry": int(cells.get("SB_CARRY", 0))}


#: Cell counts of ``stat -json`` output (:func:`.yosys.stat_cells`).
_stat = yosys.stat_cells


def generic_stats(verilog: Path, top: str, timeout_s: float = 900.0) -> dict:
    """Yosys generic ``synth`` of the controller: {"cells", "by_type"}. Raises SynthError."""
    return _yosys_cells([verilog.name], top, verilog.resolve().parent, timeout_s, target="generic")


def ice40_stats(verilog: Path, top: str, timeout_s: float = 900.0) -> dict:
    """``synth_ice40`` of the controller alone: {"lut4", "dff", "bram", "carry", "by_type"}. Raises SynthError."""
    st = _yosys_cells([verilog.name], top, verilog.resolve().parent, timeout_s, target="ice40")
    return {**_ice40_counts(st["by_type"]), "by_type": st["by_type"]}


def _copy_design(verilog: Path, work: Path) -> None:
    """The design and any ``$readmemh`` file beside it, copied to ``work``."""
    for f in verilog.resolve().parent.iterdir():
        if f.is_file() and f.suffix in (".v", ".hex"):
            shutil.copy(f, work / f.name)


def _wrapper_counts(verilog: Path, top: str, address_bits: int, token_bits: int, reason_bits: int, reset_port: str,
                    work: Path, timeout_s: float) -> dict:
    """``synth_ice40 -nodffe`` of :func:`fmax_wrapper` around ``top`` in ``work`` (writes wrapper.json):
    {"lut4", "dff", "bram", "carry"}."""
    (work / "wrapper.v").write_text(fmax_wrapper(top, address_bits, token_bits, reason_bits, reset_port))
    st = _yosys_cells([verilog.name, "wrapper.v"], WRAPPER, work, timeout_s, target="ice40", nodffe=True,
                      json_out="wrapper.json")
    return _ice40_counts(st["by_type"])


def estimate(verilog: Path, top: str, address_bits: int, token_bits: int, reason_bits: int, reset_port: str,
             timeout_s: float = 900.0) -> int:
    """The ``auto`` encoding's size metric: SB_LUT4 + SB_CARRY + BRAM_LUT4_COST x SB_RAM40_4K after
    ``synth_ice40`` of the registered-input wrapper (:func:`fmax_wrapper`: how an integrator
    instantiates the controller; a ROM then maps to block RAM). The wrapper's own cells are the
    same for every encoding of one spec, so the comparison is between the encodings. A ROM above
    :func:`max_rom_kbit` is not synthesised: its estimate is BRAM_LUT4_COST x :func:`rom_brams`
    (the block RAMs it needs at least)."""
    if rom_refusal(verilog):
        return BRAM_LUT4_COST * rom_brams(verilog)
    with tempfile.TemporaryDirectory(prefix="mi-certify-estimate-") as work:
        _copy_design(verilog, Path(work))
        c = _wrapper_counts(verilog, top, address_bits, token_bits, reason_bits, reset_port, Path(work), timeout_s)
    return c["lut4"] + c["carry"] + BRAM_LUT4_COST * c["bram"]


def place_and_route(verilog: Path, top: str, address_bits: int, token_bits: int, reason_bits: int,
                    reset_port: str, devices: tuple[str, ...] = tuple(DEVICES), timeout_s: float = 1800.0,
                    seed: int = SEED) -> dict:
    """Fmax per device on the wrapper (:func:`fmax_wrapper`).

    Returns {device: {"fits", "fmax_mhz", "goal_mhz", "meets_goal", "lut4", "dff", "bram", "carry",
    "seed", "package", "time_s"}}; the cell counts are those of the wrapper (the controller
    plus the input shift register; Yosys folds the registered address into a ROM's block
    RAMs). A design the device cannot hold gets ``fits`` false, ``fmax_mhz`` None and a
    ``detail``: when the wrapper's counts exceed :data:`CAPACITY` (:func:`fit_problem`),
    nextpnr-ice40 is not run for that device. A ROM above :func:`max_rom_kbit` is not
    synthesised (:func:`rom_refusal`): the counts are then None but ``bram``, the block RAMs
    it needs (:func:`rom_brams`), and ``synthesised`` is False. Raises SynthError on any other
    tool failure.
    """
    out: dict = {}
    refused = rom_refusal(verilog)
    if refused:
        counts = {"lut4": None, "dff": None, "bram": rom_brams(verilog), "carry": None}
        for dev in devices:
            _flag, package, goal = DEVICES[dev]
            problem = fit_problem(dev, counts)
            out[dev] = {"fits": False if problem else None, "fmax_mhz": None, "goal_mhz": goal, "meets_goal": False,
                        **counts, "seed": seed, "package": package, "synthesised": False,
                        "detail": f"{problem or 'not measured'} (block RAMs from the ROM's shape; the wrapper was "
                                  f"not synthesised: the ROM is above {MAX_ROM_ENV})",
                        "time_s": 0.0}
        return out
    with tempfile.TemporaryDirectory(prefix="mi-certify-pnr-") as work:
        w = Path(work)
        _copy_design(verilog, w)
        t0 = time.monotonic()
        counts = _wrapper_counts(verilog, top, address_bits, token_bits, reason_bits, reset_port, w, timeout_s)
        synth_s = time.monotonic() - t0
        for dev in devices:
            flag, package, goal = DEVICES[dev]
            t1 = time.monotonic()
            problem = fit_problem(dev, counts)
            if problem:  # known from the synthesis: nextpnr-ice40 would only fail on it
                out[dev] = {"fits": False, "fmax_mhz": None, "goal_mhz": goal, "meets_goal": False, **counts,
                            "seed": seed, "package": package, "detail": problem,
                            "time_s": round(time.monotonic() - t1 + synth_s, 1)}
                continue
            try:
                _nextpnr([flag, "--package", package, "--json", "wrapper.json", "--seed", str(seed),
                          "--freq", str(goal), "--timing-allow-fail", "--pcf-allow-unconstrained",
                          "--report", f"report_{dev}.json", "--quiet"], w, timeout_s)
            except SynthError as exc:
                full = re.search(r"Unable to place cell '[^']*', no BELs remaining to implement cell type '(\w+)'",
                                 str(exc))
                if not full:
                    raise
                # a measurement, not a tool failure: the design needs more of a resource than the device has
                out[dev] = {"fits": False, "fmax_mhz": None, "goal_mhz": goal, "meets_goal": False, **counts,
                            "seed": seed, "package": package, "detail": f"does not fit: not enough {full.group(1)} "
                            f"for {counts['bram']} block RAMs / {counts['lut4']} LUT4",
                            "time_s": round(time.monotonic() - t1 + synth_s, 1)}
                continue
            rep = json.loads((w / f"report_{dev}.json").read_text())
            fmax = [v["achieved"] for v in rep.get("fmax", {}).values()]
            if not fmax:
                raise SynthError(f"nextpnr-ice40 ({dev}): no clock in the timing report")
            out[dev] = {"fits": True, "fmax_mhz": round(min(fmax), 2), "goal_mhz": goal, "meets_goal": min(fmax) >= goal,
                        **counts, "seed": seed, "package": package,
                        "time_s": round(time.monotonic() - t1 + synth_s, 1)}
    return out


def hdl_numbers(spec, v_path: Path) -> dict:
    """The build's ``hdl`` stage record for ``v_path`` (the controller of ``spec``, a
    :class:`mi_certify.generator.spec.Spec`): generic and iCE40 cell counts of the controller
    alone, Fmax and cells per device on the wrapper, the goal, ``hdl.clock_mhz``. Raises SynthError."""
    from mi_certify.runtime.fsm import REASON_BITS
    refused = rom_refusal(v_path)
    if refused:  # the two measurements of the ROM read as logic: not run, said so
        generic = {"cells": None, "by_type": {}, "detail": refused}
        ice = {"lut4": None, "dff": None, "bram": None, "carry": None, "by_type": {}}
    else:
        generic = generic_stats(v_path, spec.module_name)
        ice = ice40_stats(v_path, spec.module_name)
    pnr = place_and_route(v_path, spec.module_name, spec.address_bits, spec.token_bits, REASON_BITS,
                                spec.hdl.reset_port)
    clock = spec.hdl.clock_mhz
    return {"fmax_mhz_hx8k": pnr["hx8k"]["fmax_mhz"], "fmax_mhz_up5k": pnr["up5k"]["fmax_mhz"],
            "lut4": ice["lut4"], "dff": ice["dff"], "bram": ice["bram"], "carry": ice["carry"],
            "goal_met": all(p["meets_goal"] for p in pnr.values()),
            "generic": {"cells": generic["cells"], "by_type": generic["by_type"],
                        **({"detail": generic["detail"]} if "detail" in generic else {})},
            "ice40_by_type": ice["by_type"],
            **({"not_measured": refused} if refused else {}),
            "wrapper": "registered inputs (shift register) around the controller; Yosys may fold the registered "
                       "address into a ROM's block RAMs",
            "place_and_route": {dev: {k: v for k, v in p.items() if k != "time_s"} for dev, p in pnr.items()},
            **({"clock_mhz": clock, "meets_clock_hx8k": (pnr["hx8k"]["fmax_mhz"] or 0) >= clock,
                "meets_clock_up5k": (pnr["up5k"]["fmax_mhz"] or 0) >= clock} if clock is not None else {})}
