"""The emitted C runtime checked as an ECU supplier checks it, and co-simulated bit for bit
(docs/c-runtime.md).

:func:`check_c_runtime` makes the whole record of the build's ``c_runtime`` stage
(``c_runtime.json``):

- ``compile``: gcc and clang with ``-std=c99 -Wall -Wextra -Wconversion -pedantic -Werror``
  (:mod:`~mi_certify.verification.tools.c_tools`);
- ``misra``: cppcheck's MISRA C:2012 addon; every finding's rule must be one of the documented
  deviations (:data:`~mi_certify.generator.build.emit_c.MISRA_DEVIATIONS`), else it is unexplained;
- ``cortex_m4``: code size and worst-case stack depth of ``<name>_step`` (arm-none-eabi-gcc);
- ``cosim``: the stimulus of the Verilog co-simulation (:func:`.cocotb_sim.make_stimulus`, same
  seed, cycles and counterexample traces) through the C twice, once from float readings
  (``<name>_step``, each address as its cell's lower edge, a probe fault as NaN) and once from
  addresses (``<name>_step_addr``); every record field (address, fault, LUT entry, states before
  and after, token, reason) against the reference :class:`~mi_certify.runtime.fsm.LutFsm` and,
  when given, the emitted Python runtime's ``step_record``; the float quantizer at every level
  threshold, its float neighbour below, the envelope bounds, their outer neighbours, NaN and
  +-inf against the exact :class:`~mi_certify.runtime.quantize.Quantizer`; the level entry
  (``<name>_address``) at every address (up to 2^16, else 65,536 drawn with the seed) and one
  level out of range per input; the LUT as the step reads it (one step from reset at every address,
  ``<name>_lut_dump`` of the harness: its record's proposal and confident bit) against lut.hex, so a
  changed table entry is caught wherever the stimulus does not reach it.
"""

from __future__ import annotations

import ctypes
import math
import random
import shutil
import tempfile
from pathlib import Path

from mi_certify.runtime.c_step import load_c_library
from mi_certify.runtime.fsm import LutFsm, Reason
from mi_certify.runtime.lut_file import split_entries
from mi_certify.runtime.quantize import Quantizer, split_address
from mi_certify.templates import environment

from mi_certify.generator.build.emit_c import MISRA_DEVIATIONS
from mi_certify.generator.build.emit_python import level_thresholds
from mi_certify.generator.core.lut import LutFsmArtefact
from mi_certify.generator.core.spec import Spec
from mi_certify.verification.cosim.cocotb_sim import load_runtime_module, make_stimulus, with_commands
from mi_certify.verification.tools import c_tools
from mi_certify.verification.tools.registry import ToolMissingError, ToolRunError

__all__ = ["FIELDS", "RECORD_FIELDS", "build_harness", "check_c_runtime", "cosim_c", "misra_verdict"]

#: Words per row written by the harness (templates/c/cosim_harness.c.j2).
FIELDS = 21
#: Their names, in order.
RECORD_FIELDS = ("addr", "probe_fault", "proposal", "confident", "sla_violation",
                 *(f"before.{x}" for x in "tkhdvfr"), *(f"after.{x}" for x in "tkhdvfr"), "token", "reason")


def build_harness(c_source: Path, workdir: Path, operator: bool = False) -> ctypes.CDLL:
    """The shared library of ``c_source`` (its header beside it) and the co-simulation harness,
    compiled in ``workdir`` and loaded (``<name>_cosim_run``, ``<name>_bench`` and the runtime's own
    functions). ``operator``: the runtime has the operator steps (sla.yaml ``operator:``); the
    harness's run then takes each row's command too. Raises CToolError / ToolMissingError."""
    name = c_source.stem
    workdir.mkdir(parents=True, exist_ok=True)
    for ext in (".c", ".h"):
        if c_source.with_suffix(ext).resolve() != (workdir / f"{name}{ext}").resolve():
            shutil.copyfile(c_source.with_suffix(ext), workdir / f"{name}{ext}")
    harness = workdir / f"{name}_cosim.c"
    harness.write_text(environment().get_template("c/cosim_harness.c.j2").render(p=name, P=name.upper(),
                                                                                  fields=FIELDS, operator=operator),
                       encoding="utf-8")
    so = c_tools.shared_library([workdir / f"{name}.c", harness], workdir / f"lib{name}_cosim.so")
    lib = load_c_library(so, name)
    run = getattr(lib, f"{name}_cosim_run")
    run.restype = None
    run.argtypes = [ctypes.c_size_t, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_char_p,
                    ctypes.c_char_p, ctypes.POINTER(ctypes.c_double), ctypes.c_int, ctypes.POINTER(ctypes.c_uint32)] + \
        ([ctypes.c_char_p, ctypes.c_char_p] if operator else [])
    bench = getattr(lib, f"{name}_bench")
    bench.restype = ctypes.c_uint32
    bench.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_double), ctypes.c_size_t]
    dump = getattr(lib, f"{name}_lut_dump")
    dump.restype = None
    dump.argtypes = [ctypes.c_char_p]
    return lib


def _lower_edges(spec: Spec) -> list[tuple[float, ...]]:
    """Per input: the smallest float of each level (level 0: min; level q: threshold q - 1)."""
    return [(float(i.min), *level_thresholds(i.min, i.max, i.bits)) for i in spec.inputs]


def _readings(spec: Spec, edges, addr: int, fault: bool) -> list[float]:
    levels = split_address(addr, [i.bits for i in spec.inputs])
    out = [e[q] for e, q in zip(edges, levels)]
    if fault:
        out[0] = math.nan
    return out


def _expected(machine: LutFsmArtefact, stimulus, runtime_py: Path | None, spec: Spec, edges) -> tuple[list, dict | None]:
    """Per row the FIELDS words of the reference LutFsm; and the first row where the emitted Python
    runtime's step_record (on the same readings) gives another record, or None."""
    cfg = machine.config
    op = spec.operator.config() if spec.operator else None
    ref = LutFsm(cfg, *split_entries(machine.table), tuple(machine.masks), op)
    mod = load_runtime_module(runtime_py) if runtime_py is not None else None
    py = mod.Controller() if mod is not None else None
    rows, first_py = [], None
    for i, (rst, addr, fault, viol, *command) in enumerate(stimulus):
        if rst:
            ref.reset()
            s = ref.state
            w = [0] * 12 + [s.t, s.k, s.h, s.d, s.v, int(s.f), s.r, cfg.conservative, int(Reason.HOLD)]
            if py is not None:
                py.reset()
        else:
            res = ref.step_op(addr, bool(fault), bool(viol), *command) if command else \
                ref.step(addr, bool(fault), bool(viol))
            b, a = res.before, res.after
            w = [0 if fault else addr, int(bool(fault)), res.proposal if not fault else 0,
                 int(res.confident) if not fault else 0, int(bool(viol)),
                 b.t, b.k, b.h, b.d, b.v, int(b.f), b.r, a.t, a.k, a.h, a.d, a.v, int(a.f), a.r,
                 res.token, int(res.reason)]
            if py is not None and first_py is None:
                rec = py.step_record(_readings(spec, edges, addr, bool(fault)), bool(viol), *command)
                want = (None if fault else addr, bool(fault), None if fault else w[2], None if fault else bool(w[3]),
                        tuple(w[5:12]), tuple(w[12:19]), w[19], w[20])
                if tuple(rec) != want:
                    first_py = {"cycle": i, "python_runtime": [repr(x) for x in rec], "reference": [repr(x) for x in want]}
        rows.append(w)
    return rows, first_py


def cosim_c(lib: ctypes.CDLL, spec: Spec, machine: LutFsmArtefact, random_cycles: int, seed: int,
            traces: tuple = (), runtime_py: Path | None = None) -> dict:
    """The ``cosim`` part of ``c_runtime.json`` (module docstring): cycles, directed cycles, seed,
    mismatches (rows x entries where a C record differs), first_mismatch, quantizer and level-entry
    points checked and their mismatches. ``lib``: :func:`build_harness`."""
    name = spec.name
    stimulus, directed = make_stimulus(machine.config, machine.table, random_cycles, seed, tuple(machine.masks),
                                       tuple(traces))
    if spec.operator is not None:   # the commands of the Verilog co-simulation (same seed), taken by the _op steps
        stimulus, directed = with_commands(machine.config, spec.operator.config(), machine.table, stimulus, directed,
                                           seed, tuple(machine.masks))
    edges = _lower_edges(spec)
    expected, first_py = _expected(machine, stimulus, runtime_py, spec, edges)
    n, k = len(stimulus), len(spec.inputs)
    rst = bytes(r[0] for r in stimulus)
    addr = (ctypes.c_uint32 * n)(*(r[1] for r in stimulus))
    fault, viol = bytes(r[2] for r in stimulus), bytes(r[3] for r in stimulus)
    flat = [x for r in stimulus for x in _readings(spec, edges, r[1], bool(r[2]))]
    readings = (ctypes.c_double * (n * k))(*flat)
    mismatches, first = 0, first_py
    run = getattr(lib, f"{name}_cosim_run")
    for entry, use in (("step", 1), ("step_addr", 0)):
        out = (ctypes.c_uint32 * (n * FIELDS))()
        run(n, rst, addr, fault, viol, readings, use, out,
            *((bytes(r[4] for r in stimulus), bytes(r[5] for r in stimulus)) if spec.operator is not None else ()))
        got = list(out)
        for i, want in enumerate(expected):
            row = got[i * FIELDS:(i + 1) * FIELDS]
            if row != want:
                mismatches += 1
                if first is None:
                    diff = [f for f, a, b in zip(RECORD_FIELDS, row, want) if a != b]
                    first = {"cycle": i, "entry": f"{name}_{entry}{'_op' if spec.operator is not None else ''}",
                             "inputs": dict(zip(("rst", "addr", "probe_fault", "sla_violation", "cmd", "arg"),
                                                stimulus[i])),
                             "fields": diff, "c": dict(zip(RECORD_FIELDS, row)),
                             "reference": dict(zip(RECORD_FIELDS, want))}
    table = bytes(machine.table)
    dumped = ctypes.create_string_buffer(len(table))
    getattr(lib, f"{name}_lut_dump")(dumped)
    lut_bad = [a for a, (x, y) in enumerate(zip(dumped.raw, table)) if x != y]
    q_points, q_bad = _quantizer_sweep(lib, spec)
    a_points, a_bad = _address_sweep(lib, spec, seed)
    if first_py is not None:
        mismatches += 1
    op = "_op" if spec.operator is not None else ""   # the harness calls the _op steps with the commands
    return {"cycles": n, "directed_cycles": directed, "seed": seed, "entries": [f"{name}_step{op}", f"{name}_step_addr{op}"],
            "compared": list(RECORD_FIELDS), "mismatches": mismatches, "first_mismatch": first,
            "python_runtime_compared": runtime_py is not None,
            "lut_entries": len(table), "lut_mismatches": len(lut_bad),
            "first_lut_mismatch": lut_bad[0] if lut_bad else None,
            "quantizer_points": q_points, "quantizer_mismatches": q_bad,
            "address_points": a_points, "address_mismatches": a_bad}


def _quantizer_sweep(lib, spec: Spec) -> tuple[int, int]:
    """Points and mismatches of ``<name>_quantize`` against the exact quantizer (module docstring)."""
    q = getattr(lib, f"{spec.name}_quantize")
    k = len(spec.inputs)
    base = [float(i.min) for i in spec.inputs]
    points = bad = 0
    out = ctypes.c_uint32()
    for j, inp in enumerate(spec.inputs):
        qz = Quantizer.from_floats(inp.min, inp.max, inp.bits)
        lo, hi = float(inp.min), float(inp.max)
        xs = [lo, hi, math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf), math.nan, math.inf, -math.inf]
        for t in level_thresholds(inp.min, inp.max, inp.bits):
            xs += [t, math.nextafter(t, -math.inf)]
        shift = sum(i.bits for i in spec.inputs[j + 1:])
        for x in xs:
            vals = list(base)
            vals[j] = x
            fault = q((ctypes.c_double * k)(*vals), ctypes.byref(out))
            level = qz.level(x)
            points += 1
            if bool(fault) != (level is None) or (level is not None and out.value != level << shift):
                bad += 1
    return points, bad


def _address_sweep(lib, spec: Spec, seed: int) -> tuple[int, int]:
    """Points and mismatches of ``<name>_address`` (every address up to 2^16, else 65,536 drawn;
    then one level out of range per input, which must be a fault)."""
    fn = getattr(lib, f"{spec.name}_address")
    bits = [i.bits for i in spec.inputs]
    cells = 1 << sum(bits)
    k = len(bits)
    addrs = range(cells) if cells <= 1 << 16 else random.Random(seed).sample(range(cells), 1 << 16)
    out = ctypes.c_uint32()
    points = bad = 0
    for a in addrs:
        fault = fn((ctypes.c_uint8 * k)(*split_address(a, bits)), ctypes.byref(out))
        points += 1
        bad += bool(fault) or out.value != a
    for j, b in enumerate(bits):
        if b < 8:
            levels = [0] * k
            levels[j] = 1 << b
            points += 1
            bad += not fn((ctypes.c_uint8 * k)(*levels), ctypes.byref(out)) or out.value != 0
    return points, bad


def misra_verdict(found: dict) -> dict:
    """The ``misra`` part of ``c_runtime.json`` from :func:`c_tools.misra`'s result: findings counted
    per rule, each with its deviation reason (:data:`MISRA_DEVIATIONS`) or listed as unexplained."""
    per_rule: dict[str, int] = {}
    for f in found["findings"]:
        per_rule[f["rule"]] = per_rule.get(f["rule"], 0) + 1
    rules = sorted(per_rule, key=lambda r: [int(x) if x.isdigit() else x for x in r.replace(":", ".").split(".")])
    deviations = [{"rule": r, "findings": per_rule[r], **MISRA_DEVIATIONS[r]} for r in rules if r in MISRA_DEVIATIONS]
    unexplained = [f for f in found["findings"] if f["rule"] not in MISRA_DEVIATIONS]
    return {"tool": found["tool"], "addon": "misra (MISRA C:2012; rule texts not shipped by Debian: rule numbers)",
            "findings": len(found["findings"]), "deviations": deviations, "unexplained": unexplained}


def check_c_runtime(spec: Spec, machine: LutFsmArtefact, c_source: Path, random_cycles: int, seed: int,
                    traces: tuple = (), runtime_py: Path | None = None) -> dict:
    """The whole ``c_runtime.json`` (module docstring) for the emitted ``c_source`` (``<name>.c``,
    ``<name>.h`` beside it). ``status`` is ``ok`` when both compilers are clean, no MISRA finding is
    unexplained, the Cortex-M4 build succeeds and the co-simulation has 0 mismatches; else
    ``failed``, with ``error`` naming a missing tool or a tool failure (fails closed)."""
    name = spec.name
    out: dict = {"files": [f"{name}.h", f"{name}.c"]}
    with tempfile.TemporaryDirectory(prefix="mi-certify-c-") as work:
        w = Path(work)
        try:
            out["compile"] = [c_tools.compile_check(cc, c_source, w) for cc in ("gcc", "clang")]
            out["misra"] = misra_verdict(c_tools.misra(c_source))
            entries = [f"{name}_step", f"{name}_step_addr"] + \
                ([f"{name}_step_op", f"{name}_step_addr_op"] if spec.operator is not None else [])
            out["cortex_m4"] = c_tools.cortex_m4(c_source, w, entries)
            lib = build_harness(c_source, w / "cosim", spec.operator is not None)
            out["cosim"] = cosim_c(lib, spec, machine, random_cycles, seed, traces, runtime_py)
        except (ToolMissingError, ToolRunError, OSError) as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"[:400]
    ok = ("error" not in out and all(c["clean"] for c in out["compile"]) and not out["misra"]["unexplained"]
          and out["cosim"]["mismatches"] == 0 and out["cosim"]["quantizer_mismatches"] == 0
          and out["cosim"]["address_mismatches"] == 0 and out["cosim"]["lut_mismatches"] == 0)
    return {"status": "ok" if ok else "failed", **out}
