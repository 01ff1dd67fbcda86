"""Versions of external tools, for the manifest and reports."""

from __future__ import annotations

import functools
import shutil
import subprocess


class ToolUnavailable(RuntimeError):
    """An external tool is not installed or does not run."""


_VERSION_ARGS = {"iverilog": ["-V"], "verilator": ["--version"], "yosys": ["-V"]}


@functools.lru_cache(maxsize=None)
def tool_version(name: str) -> str:
    """First line of the tool's version output, or ``"not found"``."""
    exe = shutil.which(name)
    if exe is None:
        return "not found"
    try:
        out = subprocess.run([exe, *_VERSION_ARGS.get(name, ["--version"])], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"error: {exc}"
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0].strip() if text else "unknown"
