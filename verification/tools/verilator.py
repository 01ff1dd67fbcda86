"""Verilator: the one module that runs it (edalize's tool-wrapper habit).

- :func:`lint`: ``verilator --lint-only -Wall`` (Verilator manual, "Warnings") → LintResult;
- :func:`coverage_run`: build a test bench with ``--cc --exe --build --timing --coverage``
  and the C++ main ``templates/verilator/coverage_main.cpp.j2``, run the model to
  ``$finish`` → CoverageRun (it writes ``coverage.dat``); :func:`parse_coverage` reads that
  file (Verilator manual, "Coverage Analysis");
- :func:`version`: the version line recorded in the manifest.

Debian 12's Verilator 5.006 does both; cocotb 2.1's runner needs
:data:`.tools.COCOTB_VERILATOR_MIN` (5.036), which this module does not use.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from mi_certify.verification.tools.registry import (
    ToolMissingError, memory_error, memory_limit_mb, require_tool, run, tool_version)


def version() -> str:
    """Verilator's version line (``"Verilator 5.006 2023-01-22 rev (Debian 5.006-3)"``), or ``"not found"``."""
    return tool_version("verilator")


@dataclass(frozen=True)
class LintResult:
    """``clean`` is True when Verilator ran and printed no warning or error."""

    clean: bool
    tool: str
    messages: tuple[str, ...]
    error: str | None = None

    def to_json(self) -> dict:
        return {"clean": self.clean, "tool": self.tool, "messages": list(self.messages), "error": self.error}


def lint(verilog: Path, top: str, timeout_s: float = 900.0, extra: tuple[Path, ...] = ()) -> LintResult:
    """Lint one Verilog file (plus ``extra`` files it instantiates) with every warning enabled;
    a timeout is a failed lint."""
    try:
        exe = require_tool("verilator")
    except ToolMissingError as exc:
        return LintResult(False, "verilator not usable" if exc.found else "verilator not found", (), error=str(exc))
    limit = memory_limit_mb()
    try:
        proc = run([exe, "--lint-only", "-Wall", "--top-module", top, str(verilog), *map(str, extra)],
                   capture=True, text=True, timeout=timeout_s, memory_mb=limit)
    except subprocess.TimeoutExpired:
        return LintResult(False, f"verilator {tool_version('verilator')}", (),
                          error=f"verilator did not finish within {timeout_s:.0f} s (its time limit; killed)")
    oom = memory_error("verilator", proc.returncode, proc.stderr + proc.stdout, limit)
    if oom:
        return LintResult(False, f"verilator {tool_version('verilator')}", (), error=oom)
    msgs = tuple(line.replace(str(verilog), verilog.name).replace(str(verilog.parent) + "/", "") for line in (proc.stdout + proc.stderr).splitlines()
                 if line.startswith("%"))
    clean = proc.returncode == 0 and not msgs
    return LintResult(clean, f"verilator {tool_version('verilator')}", msgs,
                      None if clean else f"verilator exit {proc.returncode}")


@dataclass
class CoverageRun:
    """Outcome of :func:`coverage_run`. ``ok``: built and the model exited 0; ``error``: why not
    (None when ok); ``build_seconds`` / ``run_seconds``: wall-clock times; ``model_exit``: the
    model's exit status (None when it did not run); ``coverage``: path of coverage.dat."""

    ok: bool
    error: str | None = None
    build_seconds: float = 0.0
    run_seconds: float = 0.0
    model_exit: int | None = None
    coverage: Path | None = None


#: Warnings and make options of the coverage bench build: warnings do not stop it (lint is
#: :func:`lint`'s job), unoptimised C++ (the model runs once: compile time dominates), two jobs.
COVERAGE_BUILD_OPTIONS = ("-Wno-fatal", "-Wno-lint", "-Wno-style", "-MAKEFLAGS",
                          "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0", "-j", "2")


def coverage_run(sources: list[Path], top: str, workdir: Path, log, timeout_s: float = 1800.0,
                 defines: tuple[str, ...] = (), control: tuple[str, ...] = ()) -> CoverageRun:
    """Build ``sources`` (top module ``top``) with ``--coverage`` in ``workdir`` (obj_dir/,
    main.cpp) and run the model there until ``$finish``; it writes ``workdir/coverage.dat``.

    Args:
        log: open text file for Verilator's, make's and the model's output (named in errors).
        timeout_s: limit for the build and for the run, each (seconds).
        defines: ``+define+`` names; control: Verilator control files (``.vlt``) in ``workdir``,
            given before the sources.
    Returns:
        CoverageRun; a missing tool, a failed build, a timeout or a model exit other than 0
        is ``ok`` False with ``error`` saying which (nothing is raised).
    """
    from mi_certify.templates import environment

    try:
        exe = require_tool("verilator")
    except ToolMissingError as exc:
        return CoverageRun(False, str(exc))
    (workdir / "main.cpp").write_text(environment().get_template("verilator/coverage_main.cpp.j2").render(top=top),
                                      encoding="ascii")
    (workdir / "coverage.dat").unlink(missing_ok=True)
    cmd = [exe, "--cc", "--exe", "--build", "--timing", "--coverage", *COVERAGE_BUILD_OPTIONS,
           *[f"+define+{d}" for d in defines], "--top-module", top, "-Mdir", "obj_dir",
           *control, *[str(Path(s).resolve()) for s in sources], "main.cpp"]
    t0 = time.perf_counter()
    limit, step = memory_limit_mb(), "build"
    try:
        proc = run(cmd, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, memory_mb=limit)
        if proc.returncode != 0:
            oom = memory_error("verilator (build: make, g++)", proc.returncode, _tail(log), limit)
            return CoverageRun(False, oom or f"verilator build failed (exit {proc.returncode}), see "
                               f"{Path(log.name).name}", build_seconds=time.perf_counter() - t0)
        t1, step = time.perf_counter(), "model run"
        proc = run([str(workdir / "obj_dir" / f"V{top}")], cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
                   timeout=timeout_s, memory_mb=limit)
    except subprocess.TimeoutExpired:
        return CoverageRun(False, f"verilator did not finish within {timeout_s:.0f} s (its time limit, {step}; "
                                  f"killed)")
    oom = memory_error("verilated model", proc.returncode, _tail(log), limit)
    if oom:
        return CoverageRun(False, oom, t1 - t0, time.perf_counter() - t1, proc.returncode, None)
    dat, ok = workdir / "coverage.dat", proc.returncode == 0
    return CoverageRun(ok, None if ok else f"verilated model exit {proc.returncode}", t1 - t0,
                       time.perf_counter() - t1, proc.returncode, dat if dat.exists() else None)


def _tail(log, size: int = 4000) -> str:
    """The last ``size`` characters written to the open log file ``log`` ("" when unreadable)."""
    try:
        log.flush()
        with open(log.name, encoding="utf-8", errors="replace") as fh:
            return fh.read()[-size:]
    except (OSError, AttributeError, TypeError):
        return ""


def parse_coverage(path: Path, hierarchy: str) -> dict:
    """Line / toggle / branch points of ``coverage.dat`` under ``hierarchy``: points, hit, share.

    Format: Verilator's SystemC::Coverage-3 text, one ``C '<key>\\x02<value>\\x01...' count``
    line per point; ``page`` is ``v_line/<module>``, ``v_toggle/...`` or ``v_branch/...``,
    ``h`` the instance."""
    kinds = {"line": [0, 0], "toggle": [0, 0], "branch": [0, 0]}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith("C '"):
            continue
        body, count = line[3:].rsplit("' ", 1)
        kv = dict(item.split("\x02", 1) for item in body.split("\x01") if "\x02" in item)
        if not kv.get("h", "").startswith(hierarchy):
            continue
        kind = kv.get("page", "").split("/", 1)[0].removeprefix("v_")
        if kind in kinds:
            kinds[kind][0] += 1
            kinds[kind][1] += int(count) > 0
    return {k: {"points": p, "hit": h, "share": round(h / p, 6) if p else None} for k, (p, h) in kinds.items()}
