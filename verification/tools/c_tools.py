"""The C compilers and cppcheck, as the C runtime's checks use them (docs/c-runtime.md).

- :func:`compile_check`: gcc or clang with :data:`WARN_FLAGS` (``-std=c99 -Wall -Wextra
  -Wconversion -pedantic -Werror``), object only; the diagnostics are the result.
- :func:`misra`: cppcheck (Debian) with its MISRA C:2012 addon (``--addon=misra``). Debian ships
  the addon without the rule texts (they are MISRA's copyright), so findings are rule numbers.
- :func:`cortex_m4`: ``arm-none-eabi-gcc -mcpu=cortex-m4 -mthumb -Os`` with ``-fstack-usage`` and
  ``-fcallgraph-info=su``: the size of every section (``arm-none-eabi-size -A``) and the
  worst-case stack depth of each exported function over the call graph (no recursion in the
  emitted C, so the graph is acyclic); library callees (libgcc's soft-float compares) are
  named, their stack is not in the figure.
- :func:`shared_library`: gcc ``-O2 -shared -fPIC`` (the co-simulation and ``mi-certify run``).

Every process goes through :func:`~.registry.run`; a tool that exits non-zero where a result is
needed raises :class:`CToolError` (a :class:`~.registry.ToolRunError`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from mi_certify.verification.tools.registry import ToolRunError, require_tool, run, tool_version

__all__ = ["CToolError", "M4_FLAGS", "WARN_FLAGS", "compile_check", "cortex_m4", "misra", "shared_library"]

#: The warning flags an ECU supplier compiles with; a warning is an error.
WARN_FLAGS = ("-std=c99", "-Wall", "-Wextra", "-Wconversion", "-pedantic", "-Werror")
#: The Cortex-M4 build whose size and stack are reported (soft-float ABI: the float entry's
#: comparisons are libgcc calls, there is no floating-point arithmetic to run on an FPU).
M4_FLAGS = ("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=soft", "-Os", "-ffunction-sections", "-fdata-sections")
_TIMEOUT = 300.0


class CToolError(ToolRunError):
    """A C tool failed where its output is needed (compiler crash, no object, unreadable report)."""


def compile_check(compiler: str, source: Path, workdir: Path) -> dict:
    """Compile ``source`` (its header beside it) with ``compiler`` ("gcc" or "clang") and
    :data:`WARN_FLAGS` to an object in ``workdir``.

    Returns {"compiler", "version", "flags", "clean", "messages"}: clean is True when the compiler
    exited 0 (with -Werror: no warning); messages are its diagnostics with the directory removed.
    Raises ToolMissingError when the compiler is not installed."""
    exe = require_tool(compiler)
    source, workdir = Path(source).resolve(), Path(workdir).resolve()  # the compiler runs in source's folder
    workdir.mkdir(parents=True, exist_ok=True)
    out = run([exe, *WARN_FLAGS, "-c", source.name, "-o", str(workdir / f"{source.stem}.{compiler}.o")],
              cwd=source.parent, capture=True, text=True, timeout=_TIMEOUT)
    messages = [ln for ln in (out.stderr or "").splitlines() if ln.strip()]
    return {"compiler": compiler, "version": tool_version(compiler), "flags": list(WARN_FLAGS),
            "clean": out.returncode == 0 and not messages, "messages": messages[:50]}


_FINDING = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<id>[\w.-]+)$")


def misra(source: Path) -> dict:
    """cppcheck with the MISRA C:2012 addon over ``source`` (its header included).

    Returns {"tool", "findings"}: findings sorted by (file, line, rule), each {"file", "line",
    "rule"} (rule: "8.9", ... ; other cppcheck findings keep their id, e.g. "style:..."). Raises
    CToolError when cppcheck fails (exit code not 0) or prints a line it cannot read."""
    exe = require_tool("cppcheck")
    out = run([exe, "--addon=misra", "--std=c99", "--enable=warning,style,portability", "--quiet",
               "--error-exitcode=0", "--template={file}:{line}:{id}", source.name],
              cwd=source.parent, capture=True, text=True, timeout=_TIMEOUT)
    if out.returncode != 0:
        raise CToolError(f"cppcheck exited {out.returncode}", log=(out.stderr or out.stdout).strip())
    findings = []
    for ln in (out.stderr or "").splitlines():
        ln = ln.strip()
        if not ln or ln.startswith(("Checking ", "MISRA rules", "\t")):
            continue
        m = _FINDING.match(ln)
        if m is None:
            raise CToolError(f"cppcheck: cannot read {ln[:120]!r}", log=out.stderr)
        rid = m["id"]
        rule = rid[len("misra-c2012-"):] if rid.startswith("misra-c2012-") else f"cppcheck:{rid}"
        findings.append({"file": Path(m["file"]).name, "line": int(m["line"]), "rule": rule})
    findings.sort(key=lambda f: (f["file"], f["line"], f["rule"]))
    return {"tool": tool_version("cppcheck"), "findings": findings}


_NODE = re.compile(r'node: \{ title: "(?P<fn>[^"]+)" label: "[^"\\]*(?:\\n[^"\\]*)*?\\n(?P<bytes>\d+) bytes \((?P<kind>\w+)\)')
_EXTERN = re.compile(r'node: \{ title: "(?P<fn>[^"]+)" label: "[^"]*<built-in>"')
_EDGE = re.compile(r'edge: \{ sourcename: "(?P<src>[^"]+)" targetname: "(?P<dst>[^"]+)"')


def _worst(fn: str, frames: dict[str, int], edges: dict[str, set[str]], seen: tuple[str, ...] = ()) -> tuple[int, list]:
    """(bytes, path) of the deepest call chain from ``fn`` (frames of unknown callees count 0)."""
    if fn in seen:
        raise CToolError(f"recursion through {fn} in the call graph")
    best, path = 0, []
    for callee in sorted(edges.get(fn, ())):
        b, p = _worst(callee, frames, edges, seen + (fn,))
        if b > best or not path:
            best, path = b, p
    return frames.get(fn, 0) + best, [fn, *path]


def cortex_m4(source: Path, workdir: Path, entries: Sequence[str]) -> dict:
    """Cross-compile ``source`` for a Cortex-M4 (:data:`M4_FLAGS`, -fstack-usage, -fcallgraph-info=su).

    Returns {"compiler", "flags", "sections" {name: bytes}, "code_bytes" (.text*), "const_bytes"
    (.rodata*), "ram_bytes" (.data* + .bss*), "stack" {function: frame bytes}, "worst_stack"
    {entry: {"bytes", "path"}}, "external" [library callees, stack not counted]}. Raises CToolError
    when the compile fails, a frame is not static (dynamic stack) or the call graph has a cycle."""
    exe, size = require_tool("arm-none-eabi-gcc"), require_tool("arm-none-eabi-size")
    source, workdir = Path(source).resolve(), Path(workdir).resolve()  # the compiler runs in workdir
    workdir.mkdir(parents=True, exist_ok=True)
    obj = workdir / f"{source.stem}.m4.o"
    out = run([exe, "-std=c99", *M4_FLAGS, "-fstack-usage", "-fcallgraph-info=su", "-c", str(source), "-o", str(obj)],
              cwd=workdir, capture=True, text=True, timeout=_TIMEOUT)
    if out.returncode != 0:
        raise CToolError("arm-none-eabi-gcc failed", log=out.stderr.strip())
    graph = obj.with_suffix(".ci").read_text(encoding="utf-8")
    frames, edges, external = {}, {}, set()

    def fn(name: str) -> str:   # GCC names a static function "<source path>:<name>": the path goes
        return name.rsplit(":", 1)[-1]   # (it is the build's directory; the record must not depend on it)
    for m in _NODE.finditer(graph):
        if m["kind"] != "static":
            raise CToolError(f"{fn(m['fn'])}: stack frame is {m['kind']}, not static")
        frames[fn(m["fn"])] = int(m["bytes"])
    for m in _EXTERN.finditer(graph):
        external.add(fn(m["fn"]))
    for m in _EDGE.finditer(graph):
        edges.setdefault(fn(m["src"]), set()).add(fn(m["dst"]))
    sz = run([size, "-A", str(obj)], capture=True, text=True, timeout=_TIMEOUT)
    if sz.returncode != 0:
        raise CToolError("arm-none-eabi-size failed", log=sz.stderr.strip())
    sections = {}
    for ln in sz.stdout.splitlines():
        parts = ln.split()
        if len(parts) == 3 and parts[0].startswith(".") and parts[1].isdigit() and int(parts[1]) > 0:
            if parts[0].startswith((".text", ".rodata", ".data", ".bss")):
                sections[parts[0]] = int(parts[1])
    total = lambda *prefixes: sum(v for k, v in sections.items() if k.startswith(prefixes))  # noqa: E731
    worst = {}
    for e in entries:
        b, path = _worst(e, frames, edges)
        worst[e] = {"bytes": b, "path": path}
    return {"compiler": tool_version("arm-none-eabi-gcc"), "flags": ["-std=c99", *M4_FLAGS],
            "sections": dict(sorted(sections.items())), "code_bytes": total(".text"), "const_bytes": total(".rodata"),
            "ram_bytes": total(".data", ".bss"), "stack": dict(sorted(frames.items())), "worst_stack": worst,
            "external": sorted(external)}


def shared_library(sources: Sequence[Path], out: Path) -> Path:
    """``gcc -std=c99 -O2 -shared -fPIC`` of ``sources`` into ``out``; raises CToolError when it fails."""
    exe = require_tool("gcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    res = run([exe, "-std=c99", "-O2", "-shared", "-fPIC", *map(str, sources), "-o", str(out)],
              capture=True, text=True, timeout=_TIMEOUT)
    if res.returncode != 0:
        raise CToolError("gcc -shared failed", log=res.stderr.strip())
    return out
