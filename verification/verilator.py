"""Verilator lint: ``verilator --lint-only -Wall`` (Verilator manual, "Warnings")."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .tools import tool_version


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
    exe = shutil.which("verilator")
    if exe is None:
        return LintResult(False, "verilator not found", (), error="verilator not found on PATH")
    try:
        proc = subprocess.run([exe, "--lint-only", "-Wall", "--top-module", top, str(verilog),
                               *map(str, extra)],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return LintResult(False, f"verilator {tool_version('verilator')}", (),
                          error=f"verilator did not finish within {timeout_s:.0f} s")
    msgs = tuple(line.replace(str(verilog), verilog.name).replace(str(verilog.parent) + "/", "") for line in (proc.stdout + proc.stderr).splitlines()
                 if line.startswith("%"))
    clean = proc.returncode == 0 and not msgs
    return LintResult(clean, f"verilator {tool_version('verilator')}", msgs,
                      None if clean else f"verilator exit {proc.returncode}")
