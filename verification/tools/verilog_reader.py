"""An independent reader of the emitted RTL: pyverilog's syntax tree, not Yosys.

``mi-certify check`` reads every ``.v`` of a bundle with pyverilog 1.3 (Takamaeda-Yamazaki,
"Pyverilog: A Python-Based Hardware Design Processing Toolkit for Verilog HDL", ARC 2015;
its parser after Icarus Verilog's preprocessor, ``iverilog -E``, when installed: the
generated files use no macros, so without it the text is parsed as it is) and, on the
controller (:func:`check_controller`), confirms

- the module name, every port (direction, width, order), the module parameters (none) and
  the localparams (the FSM parameters and reason codes) against the header comment and the
  spec;
- the decision latency: the pipeline registers between the ports and the decision stage,
  read from the data flow (the stage of the signal registered into ``audit_addr``);
- the LUT (:func:`read_lut`): whatever the encoding (case items, the ROM with its initial
  values, the sliced ROM's columns, slices and dictionary, the box tree's
  comparators), the syntax tree's data flow from ``addr`` to ``lut_entry`` is evaluated at
  every address at once (NumPy), and every path must cross the same number of registers.

The reader shares no code with the emitter or Yosys. Errors: :class:`VerilogReadError`
(file, line, the construct and why); a parse failure names file, line and construct.
"""

from __future__ import annotations

import contextlib
import functools
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mi_certify.generator.core.errors import MiCertifyError

from mi_certify.verification.tools.bitvec import INT64_BITS, narrow, widen
from mi_certify.verification.tools.registry import find_tool, run

#: The pyverilog release the templates are written for (pinned in constraints.txt).
PYVERILOG_VERSION = "1.3.0"


class VerilogReadError(MiCertifyError):
    """The RTL cannot be read, or does not say what the bundle says (file, line or signal, reason)."""


@dataclass(frozen=True)
class Port:
    """A module port: direction ``input`` | ``output``, width in bits, kind ``wire`` | ``reg``."""

    direction: str
    width: int
    kind: str


@dataclass
class RtlModule:
    """One module as read from its syntax tree.

    ports: name -> :class:`Port`, in declaration order (width None when not constant);
    parameters: ``#(...)`` parameters name -> value (None when not a constant); localparams:
    name -> (width or None, value or None); node: the pyverilog
    ``ModuleDef``; file: the source file.
    """

    name: str
    ports: dict[str, Port]
    parameters: dict[str, int | None]
    localparams: dict[str, tuple[int | None, int | None]]
    node: object = field(repr=False)
    file: Path = field(repr=False)


def _table_cache() -> Path:
    """Where PLY's LALR tables for pyverilog's grammar are kept between processes: under the Python
    installation that runs us (``sys.prefix``, as trusted as the code itself; never the bundle, the
    working directory or the home directory), one folder per pyverilog, PLY and table version."""
    import ply
    import ply.yacc
    import pyverilog
    return (Path(sys.prefix) / "var" / "cache" / "mi-certify" /
            f"pyverilog-{pyverilog.__version__}-ply-{ply.__version__}-tab-{ply.yacc.__tabversion__}")


@functools.lru_cache(maxsize=1)
def _parser():
    """pyverilog's parser with its LALR tables read from :func:`_table_cache` when they are there.
    Making the tables takes about 1 s, which every process that read a ``.v`` paid (pyverilog 1.3's
    own cache is never read back: PLY looks for the tables in pyverilog's package, and writes them
    where it is told). Made tables are published there atomically (written in a directory of this
    process, then renamed into place), so a process never reads a half-written file; when the
    folder cannot be written, they are made in a directory of this process, removed at exit."""
    import atexit
    import importlib.util
    import os
    import shutil

    from ply.yacc import NullLogger, yacc
    from pyverilog.vparser.lexer import VerilogLexer
    from pyverilog.vparser.parser import VerilogParser

    name = "mi_certify_pyverilog_parsetab"

    class _Parser(VerilogParser):
        def __init__(self, tabmodule, outputdir):   # VerilogParser.__init__, with the tables' module and place
            self.lexer = VerilogLexer(error_func=self._lexer_error_func)
            self.lexer.build()
            self.tokens = self.lexer.tokens
            self.parser = yacc(module=self, method="LALR", tabmodule=tabmodule, outputdir=outputdir, debug=False,
                               write_tables=isinstance(tabmodule, str), errorlog=NullLogger())

    cached = _table_cache() / f"{name}.py"
    if cached.is_file():
        try:
            spec = importlib.util.spec_from_file_location(name, cached)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return _Parser(module, str(cached.parent))
        except Exception:   # noqa: BLE001 - an unreadable cache is made again below
            pass
    out = tempfile.mkdtemp(prefix="mi-certify-pyverilog-")
    atexit.register(shutil.rmtree, out, True)
    parser = _Parser(name, out)
    tmp = cached.parent / f".{name}.{os.getpid()}.py"
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(out) / f"{name}.py", tmp)
        os.replace(tmp, cached)
    except OSError:   # a read-only installation: the tables are made again by the next process
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return parser


_CONSTRUCTS = (("module", "the module header"), ("input", "a port declaration"), ("output", "a port declaration"),
               ("localparam", "a localparam"), ("parameter", "a parameter"), ("reg", "a reg declaration"),
               ("wire", "a wire declaration"), ("assign", "a continuous assignment"),
               ("always", "an always block"), ("initial", "an initial block"), ("case", "a case statement"),
               ("if", "an if statement"), ("end", "a begin/end block"), ("function", "a function"),
               ("generate", "a generate block"), ("`", "a compiler directive"))


def _construct(line: str) -> str:
    text = line.strip()
    for key, what in _CONSTRUCTS:
        if text.startswith(key):
            return what
    return "a statement" if text else "the end of the file"


def preprocess(path: Path) -> str:
    """The text of ``path`` after ``iverilog -E`` (line numbers kept); the file as it is when
    Icarus is not installed. Raises VerilogReadError when the preprocessor fails."""
    exe = find_tool("iverilog")
    if exe is None:
        return path.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="mi-certify-vpp-") as tmp:
        out = Path(tmp) / "pp.v"
        try:
            proc = run([exe, "-E", "-o", str(out), path.name], cwd=path.parent, capture=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            raise VerilogReadError("iverilog -E timed out after 120 s (killed)", file=path.name) from None
        if proc.returncode != 0 or not out.exists():
            raise VerilogReadError(f"iverilog -E failed: {proc.stderr.strip()[:300]}", file=path.name)
        return out.read_text(encoding="utf-8")


def parse(path: Path):
    """pyverilog syntax tree (``Source``) of ``path``. Raises VerilogReadError naming the file,
    the line and the construct pyverilog 1.3 could not parse."""
    from pyverilog.vparser.parser import ParseError
    text = preprocess(path)
    parser = _parser()
    parser.lexer.lexer.lineno = 1   # PLY keeps counting lines across texts
    try:
        return parser.parse(text)
    except ParseError as exc:
        m = re.search(r"line:(\d+): before: (.*)", str(exc))
        line_no = int(m.group(1)) if m else 0
        lines = text.splitlines()
        line = lines[line_no - 1] if 0 < line_no <= len(lines) else ""
        before = m.group(2).strip() if m else str(exc)
        raise VerilogReadError(f"pyverilog {PYVERILOG_VERSION} cannot parse {_construct(line)} (syntax error before "
                               f"{before}): {line.strip()[:100]}", file=path.name, where=f"line {line_no}") from None


def _const(text: str) -> tuple[int, int | None]:
    """(value, width or None) of a Verilog integer literal (``3``, ``2'd3``, ``4'b1011``, ``8'hff``)."""
    m = re.fullmatch(r"(\d+)?'([sS]?)([bdhoBDHO])([0-9a-fA-F_]+)", text.strip())
    if m is None:
        if not re.fullmatch(r"\d+", text.strip()):
            raise ValueError(f"not an integer constant: {text}")
        return int(text), None
    base = {"b": 2, "d": 10, "h": 16, "o": 8}[m.group(3).lower()]
    return int(m.group(4).replace("_", ""), base), int(m.group(1)) if m.group(1) else None


def _width_of(width) -> int | None:
    """Bits of a ``[msb:lsb]`` range (1 without one; None when it is not two constants, as in
    the parameterised hand-written modules)."""
    if width is None:
        return 1
    try:
        msb, _ = _const(width.msb.value)
        lsb, _ = _const(width.lsb.value)
    except (AttributeError, ValueError):
        return None
    return abs(msb - lsb) + 1


def _value(rvalue) -> int | None:
    """The value of a parameter's constant initialiser (None for an expression)."""
    try:
        return _const(rvalue.var.value)[0]
    except (AttributeError, ValueError):
        return None


def read_modules(path: Path) -> dict[str, RtlModule]:
    """Every module of ``path`` (:class:`RtlModule` by name). Raises VerilogReadError."""
    from pyverilog.vparser import ast as A
    tree = parse(path)
    out = {}
    for mod in tree.description.definitions:
        if not isinstance(mod, A.ModuleDef):
            continue
        ports = {}
        for p in mod.portlist.ports:
            if not isinstance(p, A.Ioport):
                raise VerilogReadError("ports must be declared in the module header (ANSI style)", file=path.name,
                                       where=f"line {p.lineno}")
            ports[p.first.name] = Port("input" if isinstance(p.first, A.Input) else "output",
                                       _width_of(p.first.width),
                                       "reg" if isinstance(p.second, A.Reg) else "wire")
        params = {}
        for p in mod.paramlist.params:
            for x in p.list:
                params[x.name] = _value(x.value)
        local = {}
        for it in mod.items:
            if isinstance(it, A.Decl):
                for x in it.list:
                    if isinstance(x, A.Localparam):
                        local[x.name] = (_width_of(x.width) if x.width is not None else None, _value(x.value))
        out[mod.name] = RtlModule(mod.name, ports, params, local, mod, path)
    return out


# --- the data flow of the LUT ----------------------------------------------------------------

def _alike(a, b):
    """Both operands as exact integers (object dtype) when either is wider than int64 lanes."""
    if getattr(a, "dtype", None) == object or getattr(b, "dtype", None) == object:
        return widen(a, INT64_BITS + 1), widen(b, INT64_BITS + 1)
    return a, b


class _Flow:
    """Evaluates a module's signals as functions of ``addr`` at every address (NumPy int64
    vectors; the other inputs 0), with the number of registers each value crossed (its stage).
    Constants have stage None; an operation on values of two different stages is an error."""

    def __init__(self, mod: RtlModule, address_bits: int):
        from pyverilog.vparser import ast as A
        self.A, self.mod, self.file = A, mod, mod.file
        self.n = 1 << address_bits
        self.widths: dict[str, int] = {n: p.width for n, p in mod.ports.items()}
        self.memories: dict[str, tuple[int, int]] = {}   # name -> (width, depth)
        self.mem_inits: dict[str, dict[int, tuple[int, int | None, int]]] = {}
        self.rom_words: dict[str, np.ndarray] = {}
        self.drivers: dict[str, object] = {}
        self.values: dict[str, tuple[np.ndarray, int | None]] = {}
        self.busy: set[str] = set()
        for name, p in mod.ports.items():
            if p.direction == "input":
                self.values[name] = (np.arange(self.n, dtype=np.int64) if name == "addr"
                                     else np.zeros(self.n, dtype=np.int64), 0)
        for name, (w, v) in mod.localparams.items():
            self.values[name] = (np.int64(v), None)
            self.widths[name] = w or 32
        for it in mod.node.items:
            if isinstance(it, A.Decl):
                for x in it.list:
                    if isinstance(x, (A.Reg, A.Wire)):
                        self.widths[x.name] = _width_of(x.width)
                        if getattr(x, "dimensions", None) is not None:
                            ln = x.dimensions.lengths[0]
                            depth = abs(_const(ln.msb.value)[0] - _const(ln.lsb.value)[0]) + 1
                            self.memories[x.name] = (self.widths[x.name], depth)
                    elif isinstance(x, A.Assign):
                        self._drive(self._target(x.left), x)
            elif isinstance(it, A.Assign):
                self._drive(self._target(it.left), it)
            elif isinstance(it, A.Always):
                for t in self._assigned(it.statement):
                    self._drive(t, it)
            elif isinstance(it, A.Initial):
                self._initial(it.statement)

    def fail(self, node, why: str):
        raise VerilogReadError(why, file=self.file.name, where=f"line {getattr(node, 'lineno', '?')}")

    def _drive(self, name: str, node) -> None:
        if name in self.drivers and self.drivers[name] is not node:
            self.fail(node, f"{name} is driven in two places")
        self.drivers[name] = node

    def _target(self, lvalue) -> str:
        var = lvalue.var
        if not isinstance(var, self.A.Identifier):
            self.fail(lvalue, "only whole signals are assigned in the generated RTL")
        return var.name

    def _assigned(self, stmt) -> list[str]:
        A = self.A
        if stmt is None:
            return []
        if isinstance(stmt, (A.BlockingSubstitution, A.NonblockingSubstitution)):
            return [self._target(stmt.left)]
        if isinstance(stmt, A.Block):
            return [t for s in stmt.statements for t in self._assigned(s)]
        if isinstance(stmt, A.IfStatement):
            return self._assigned(stmt.true_statement) + self._assigned(stmt.false_statement)
        if isinstance(stmt, A.CaseStatement):
            return [t for c in stmt.caselist for t in self._assigned(c.statement)]
        return []

    def _initial(self, stmt) -> None:
        """Record a ROM's initial values: ``initial begin <memory>[<address>] = <constant>; ... end``,
        the only initial blocks the emitter writes."""
        A = self.A
        stmts = stmt.statements if isinstance(stmt, A.Block) else [stmt]
        for s in stmts:
            left = s.left.var if isinstance(s, A.BlockingSubstitution) else None
            if not (isinstance(left, A.Pointer) and isinstance(left.var, A.Identifier)
                    and isinstance(left.ptr, A.IntConst) and isinstance(s.right.var, A.IntConst)):
                self.fail(s, "the only initial blocks allowed give a ROM its contents: <memory>[<address>] = <constant>;")
            inits = self.mem_inits.setdefault(left.var.name, {})
            try:
                addr, value = _const(left.ptr.value)[0], _const(s.right.var.value)
            except ValueError as exc:   # x / z digits, or a literal the reader does not know
                self.fail(s, f"an initial value of {left.var.name}: {exc}")
            if addr in inits:
                self.fail(s, f"{left.var.name}[{addr}] is given a second initial value")
            inits[addr] = (*value, s.lineno)

    # -- values --
    def value(self, name: str, node=None) -> tuple[np.ndarray, int | None]:
        if name in self.values:
            return self.values[name]
        drv = self.drivers.get(name)
        if drv is None:
            self.fail(node, f"{name} has no driver")
        if name in self.busy:
            self.fail(drv, f"{name} depends on itself: not part of a table read")
        self.busy.add(name)
        if isinstance(drv, self.A.Assign):
            self.values[name] = self.expr(drv.right.var)
        else:
            self._always(drv, name)
        self.busy.discard(name)
        return self.values[name]

    def _always(self, node, name: str) -> None:
        A = self.A
        sens = node.sens_list.list
        clocked = any(s.type == "posedge" for s in sens)
        if clocked and not (len(sens) == 1 and sens[0].sig.name == "clk"):
            self.fail(node, "a register with a reset is not part of a table read")
        env: dict[str, tuple[np.ndarray, int | None]] = {}
        stmt = node.statement
        if clocked and isinstance(stmt, A.Block) and all(isinstance(x, A.NonblockingSubstitution)
                                                         for x in stmt.statements):
            # a block of plain register loads (a pipeline stage): only the one asked for
            stmt = A.Block([x for x in stmt.statements if self._target(x.left) == name])
        self._stmt(stmt, env, np.ones(self.n, dtype=bool))
        for t, (v, st) in env.items():
            if np.any(v < 0):
                self.fail(node, f"{t} is not assigned for every address (a latch)")
            self.values[t] = (v, (st + 1) if (clocked and st is not None) else st)
        _ = A

    def _stmt(self, stmt, env: dict, mask: np.ndarray, ctl: int | None = None) -> None:
        """Run ``stmt`` where ``mask`` holds; ``ctl``: the stage of the conditions that lead here
        (an assignment under a condition depends on it as on its right-hand side)."""
        A = self.A
        if isinstance(stmt, A.Block):
            for s in stmt.statements:
                self._stmt(s, env, mask, ctl)
        elif isinstance(stmt, (A.BlockingSubstitution, A.NonblockingSubstitution)):
            t = self._target(stmt.left)
            v, st = self.expr(stmt.right.var, env if isinstance(stmt, A.BlockingSubstitution) else None)
            st = self._stage(stmt, st, ctl)
            old, ost = env.get(t, (np.full(self.n, -1, dtype=np.int64), st))
            v, old = _alike(v, old)
            env[t] = (np.where(mask, v, old), self._stage(stmt, st, ost))
        elif isinstance(stmt, A.IfStatement):
            c, sc = self.expr(stmt.cond, env)
            c = np.broadcast_to(c != 0, (self.n,))
            sc = self._stage(stmt, sc, ctl)
            self._stmt(stmt.true_statement, env, mask & c, sc)
            if stmt.false_statement is not None:
                self._stmt(stmt.false_statement, env, mask & ~c, sc)
        elif isinstance(stmt, A.CaseStatement):
            comp, sc = self.expr(stmt.comp, env)
            comp = np.broadcast_to(comp, (self.n,))
            ctl = self._stage(stmt, sc, ctl)
            if self._table_case(stmt, comp, env, mask, ctl):
                return
            left = mask.copy()
            for item in stmt.caselist:
                if item.cond is None:
                    m = left
                else:
                    m = np.zeros(self.n, dtype=bool)
                    for c in item.cond:
                        m |= comp == self.expr(c, env)[0]
                    m &= left
                if m.any() or item.cond is None:
                    self._stmt(item.statement, env, m, ctl)
                left = left & ~m
        else:
            self.fail(stmt, f"unexpected statement {type(stmt).__name__} in a table read")

    def _table_case(self, stmt, comp: np.ndarray, env: dict, mask: np.ndarray, ctl: int | None) -> bool:
        """A case whose items are constants each assigning a constant to one signal (a table),
        evaluated by one lookup instead of one pass per item; False when it is not one."""
        A = self.A
        target, items, default = None, {}, None
        for item in stmt.caselist:
            s = item.statement
            if not (isinstance(s, A.BlockingSubstitution) and isinstance(s.right.var, A.IntConst)):
                return False
            t = self._target(s.left)
            if target not in (None, t):
                return False
            target, val = t, _const(s.right.var.value)[0]
            if item.cond is None:
                default = val
                continue
            for c in item.cond:
                if not isinstance(c, A.IntConst):
                    return False
                items.setdefault(_const(c.value)[0], val)   # the first matching item wins
        if target is None or int(comp.max(initial=0)) >= 1 << 24:
            return False
        size = max([int(comp.max(initial=0)) + 1] + [k + 1 for k in items])
        wide = max([abs(v) for v in items.values()] + [abs(default or 0)]).bit_length() > INT64_BITS
        table = np.full(size, -1 if default is None else default, dtype=object if wide else np.int64)
        for k, v in items.items():
            table[k] = v
        old, ost = env.get(target, (np.full(self.n, -1, dtype=np.int64), ctl))
        new, old = _alike(table[comp], old)
        env[target] = (np.where(mask, new, old), self._stage(stmt, ctl, ost))
        return True

    def _stage(self, node, a, b):
        if a is None:
            return b
        if b is None or a == b:
            return a
        self.fail(node, f"mixes inputs of different cycles (after {a} and {b} registers)")

    def expr(self, e, env: dict | None = None) -> tuple[np.ndarray, int | None]:
        """(value, stage) of expression ``e``; ``env``: values assigned earlier in the same block."""
        A = self.A
        if isinstance(e, A.IntConst):
            v, w = _const(e.value)
            return narrow(v, w or 32), None
        if isinstance(e, A.Identifier):
            if env is not None and e.name in env:
                return env[e.name]
            return self.value(e.name, e)
        if isinstance(e, A.Pointer):
            idx, si = self.expr(e.ptr, env)
            if e.var.name in self.memories:
                return self._memory(e, idx), si
            v, sv = self.expr(e.var, env)
            return narrow((v >> idx) & 1, 1), self._stage(e, sv, si)
        if isinstance(e, A.Partselect):
            v, sv = self.expr(e.var, env)
            hi, lo = _const(e.msb.value)[0], _const(e.lsb.value)[0]
            return narrow((v >> lo) & ((1 << (hi - lo + 1)) - 1), hi - lo + 1), sv
        if isinstance(e, A.Concat):
            total = self._width(e)
            out, st = widen(np.int64(0), total), None
            for part in e.list:
                v, sv = self.expr(part, env)
                out = (out << self._width(part)) | widen(v, total)
                st = self._stage(e, st, sv)
            return out, st
        if isinstance(e, A.Cond):
            c, sc = self.expr(e.cond, env)
            a, sa = self.expr(e.true_value, env)
            b, sb = self.expr(e.false_value, env)
            a, b = _alike(a, b)
            return np.where(c != 0, a, b), self._stage(e, self._stage(e, sc, sa), sb)
        ops = {A.LessThan: np.less, A.GreaterThan: np.greater, A.LessEq: np.less_equal,
               A.GreaterEq: np.greater_equal, A.Eq: np.equal, A.NotEq: np.not_equal, A.Land: np.logical_and,
               A.Lor: np.logical_or, A.And: np.bitwise_and, A.Or: np.bitwise_or}
        for cls, fn in ops.items():
            if isinstance(e, cls):
                a, sa = self.expr(e.left, env)
                b, sb = self.expr(e.right, env)
                if cls in (A.Land, A.Lor):
                    return fn(a != 0, b != 0).astype(np.int64), self._stage(e, sa, sb)
                a, b = _alike(a, b)
                if cls in (A.And, A.Or):   # bitwise: exact at any width
                    out = fn(a, b)
                    return (out if getattr(out, "dtype", None) == object else np.asarray(out, dtype=np.int64)), \
                        self._stage(e, sa, sb)
                return np.asarray(fn(a, b), dtype=np.int64), self._stage(e, sa, sb)
        if isinstance(e, A.Ulnot):
            v, sv = self.expr(e.right, env)
            return (v == 0).astype(np.int64), sv
        self.fail(e, f"unexpected expression {type(e).__name__} in a table read")

    def _width(self, e) -> int:
        A = self.A
        if isinstance(e, A.IntConst):
            w = _const(e.value)[1]
            if w is None:
                self.fail(e, "an unsized constant in a concatenation")
            return w
        if isinstance(e, A.Identifier):
            return self.widths[e.name]
        if isinstance(e, A.Pointer):
            return self.memories[e.var.name][0] if e.var.name in self.memories else 1
        if isinstance(e, A.Partselect):
            return _const(e.msb.value)[0] - _const(e.lsb.value)[0] + 1
        if isinstance(e, A.Concat):
            return sum(self._width(p) for p in e.list)
        if isinstance(e, (A.And, A.Or)):   # bitwise: the wider operand (Verilog-2001 5.4.1)
            return max(self._width(e.left), self._width(e.right))
        self.fail(e, f"width of {type(e).__name__} unknown")

    def words(self, name: str) -> np.ndarray:
        """The contents of ROM ``name`` from its initial values: one per address, each a constant of
        the memory's width (an unsized constant must fit it)."""
        if name in self.rom_words:
            return self.rom_words[name]
        width, depth = self.memories[name]
        inits = self.mem_inits.get(name)
        if not inits:
            raise VerilogReadError(f"ROM {name} has no initial values", file=self.file.name)
        if sorted(inits) != list(range(depth)):
            outside = sorted(a for a in inits if a >= depth)
            raise VerilogReadError(f"ROM {name} has initial values for {len(inits)} addresses, not one for each of "
                                   f"its {depth} words" + (f" (address {outside[0]} is beyond it)" if outside else ""),
                                   file=self.file.name)
        for a, (value, bits, line) in inits.items():
            if (bits is not None and bits != width) or value >> width:
                raise VerilogReadError(f"{name}[{a}] = a {bits or 'unsized'}-bit constant {value:#x}; the ROM's words "
                                       f"are {width} bits", file=self.file.name, where=f"line {line}")
        words = narrow(np.array([inits[a][0] for a in range(depth)], dtype=object), width)
        self.rom_words[name] = words
        return words

    def _memory(self, e, idx) -> np.ndarray:
        words = self.words(e.var.name)
        idx = np.broadcast_to(idx, (self.n,))
        if idx.max(initial=0) >= len(words):
            self.fail(e, f"{e.var.name} is read beyond its depth")
        return words[idx]


@dataclass(frozen=True)
class LutReading:
    """The LUT read back from the syntax tree: entries (2**address_bits,) int64 ``{c, p}``;
    latency (registers from ``addr`` to the decision, + 1); how (which encoding was read)."""

    entries: np.ndarray
    latency: int
    how: str


def _how(mod: RtlModule, flow: _Flow) -> str:
    A = flow.A
    roms = [f"initial values ({d} words of {w} bits in {m})" for m, (w, d) in flow.memories.items()]
    kinds = set()

    def walk(node):
        if isinstance(node, A.CaseStatement):
            kinds.add(f"case ({len(node.caselist)} items)")
        elif isinstance(node, A.IfStatement):
            kinds.add("if")
        for c in node.children():
            walk(c)
    for name in ("lut_entry", "lut_read", "lut_code"):
        drv = flow.drivers.get(name)
        if isinstance(drv, A.Always):
            walk(drv.statement)
    parts = ["ROM " + ", ".join(roms)] if roms else []
    parts += sorted(k for k in kinds if k != "if") + (["box tree (nested if)"] if "if" in kinds else [])
    return "; ".join(parts) or "a continuous assignment"


def read_lut(path: Path, address_bits: int, module: str | None = None) -> LutReading:
    """The LUT of the generated controller in ``path`` (module ``module``, default the only one),
    read from the syntax tree at every address: the data flow into ``lut_entry``, a ROM's initial
    values included. Raises VerilogReadError (unparsable, missing or malformed ROM word, a LUT path
    that mixes cycles or leaves an address without an entry)."""
    mods = read_modules(path)
    mod = mods[module] if module else next(iter(mods.values()))
    flow = _Flow(mod, address_bits)
    entries, stage = flow.value("lut_entry")
    entries = np.array(np.broadcast_to(entries, (flow.n,)), dtype=np.int64)
    src = _audit_source(flow)
    addr, astage = flow.value(src)
    if not np.array_equal(np.broadcast_to(addr, (flow.n,)), np.arange(flow.n)):
        raise VerilogReadError(f"audit_addr is loaded from {src}, which is not the address", file=path.name)
    if stage is not None and stage != astage:
        raise VerilogReadError(f"the decision reads the LUT entry of the address {stage} cycles ago but reports "
                               f"(audit_addr) the address {astage} cycles ago", file=path.name)
    return LutReading(entries, astage + 1, _how(mod, flow))


def _audit_source(flow: _Flow) -> str:
    """The signal the decision stage registers into ``audit_addr`` (its non-constant source)."""
    A = flow.A
    found = []

    def walk(node):
        if isinstance(node, A.NonblockingSubstitution) and isinstance(node.left.var, A.Identifier) \
                and node.left.var.name == "audit_addr" and isinstance(node.right.var, A.Identifier):
            found.append(node.right.var.name)
        for c in node.children():
            walk(c)
    walk(flow.mod.node)
    if len(set(found)) != 1:
        raise VerilogReadError("audit_addr is not loaded from one address signal", file=flow.file.name)
    return found[0]


_HEADER_PORT = re.compile(r"^//   (\w+)\s+(in|out)\s+(\d+)\s", re.M)


def check_controller(path: Path, spec, reason_names: list[str], reason_bits: int) -> dict:
    """Confirm the controller ``path`` against its header comment and ``spec``: module name,
    ports (order, direction, width, reg/wire), no module parameters, the localparams
    (CONSERVATIVE, HYST_LAST when hysteresis > 1, COOLDOWN, VIOL_LAST, RECOV_LAST, R_<reason>),
    the latency (read from the data flow; ``spec.hdl.latency``, "auto" accepting any) and the
    header's "Latency:" line. Returns {"module", "ports", "latency", "localparams"}. Raises
    VerilogReadError naming the first difference."""
    mods = read_modules(path)
    name = spec.module_name
    if name not in mods:
        raise VerilogReadError(f"no module {name} (found {', '.join(mods) or 'none'})", file=path.name)
    mod = mods[name]
    ab, tw = spec.address_bits, spec.token_bits
    reset = spec.hdl.reset_port
    want = {"clk": ("input", 1), reset: ("input", 1), "addr": ("input", ab), "probe_fault": ("input", 1),
            "sla_violation": ("input", 1), "step": ("input", 1), "token": ("output", tw),
            "reason": ("output", reason_bits),
            "audit_valid": ("output", 1), "audit_token": ("output", tw), "audit_reason": ("output", reason_bits),
            "audit_addr": ("output", ab)}
    op = getattr(spec, "operator", None)
    if op is not None:   # the command port after step (docs/hdl.md, "Operator command port")
        items = list(want.items())
        want = dict(items[:6] + [("op_cmd", ("input", 2)), ("op_arg", ("input", tw))] + items[6:])
    got = {n: (p.direction, p.width) for n, p in mod.ports.items()}
    if list(got) != list(want) or got != want:
        diff = [n for n in dict.fromkeys(list(want) + list(got)) if got.get(n) != want.get(n)]
        raise VerilogReadError(f"ports differ from the spec's: {', '.join(f'{n} {got.get(n)} (spec {want.get(n)})' for n in diff[:3]) or 'order'}",
                               file=path.name, where=f"module {name}")
    text = path.read_text(encoding="utf-8")
    header = {m.group(1): ("input" if m.group(2) == "in" else "output", int(m.group(3)))
              for m in _HEADER_PORT.finditer(text.split("module ", 1)[0])}
    if header != want:
        diff = [n for n in dict.fromkeys(list(want) + list(header)) if header.get(n) != want.get(n)]
        raise VerilogReadError(f"the header's port list differs from the module's: {', '.join(diff[:3])}",
                               file=path.name, where="header")
    if mod.parameters:
        raise VerilogReadError(f"module parameters {sorted(mod.parameters)}: the controller has none",
                               file=path.name, where=f"module {name}")
    f = spec.fsm
    params = {"CONSERVATIVE": spec.conservative, "COOLDOWN": f.cooldown, "VIOL_LAST": f.violations_to_fallback - 1,
              "RECOV_LAST": f.recovery - 1}
    if f.hysteresis > 1:
        params["HYST_LAST"] = f.hysteresis - 1
    if op is not None:
        params.update(OP_STEPS=op.max_lock_steps, OP_LOCKABLE=op.config().lockable)
    params.update({f"R_{r}": i for i, r in enumerate(reason_names)})
    values = {k: v for k, (_, v) in mod.localparams.items()}
    if values != params:
        diff = sorted(k for k in set(values) | set(params) if values.get(k) != params.get(k))
        raise VerilogReadError(f"localparams differ from the spec: {', '.join(f'{k} = {values.get(k)} (spec {params.get(k)})' for k in diff[:3])}",
                               file=path.name, where=f"module {name}")
    lut = read_lut(path, ab, name)
    # "auto": the latency the build chose (summary.json stages.emit.latency, read back by check)
    declared = spec.hdl.latency_cycles if spec.hdl.latency != "auto" or spec.hdl.latency_resolved else "auto"
    if declared != "auto" and lut.latency != declared:
        raise VerilogReadError(f"the data flow has latency {lut.latency}, the spec's hdl.latency is "
                               f"{spec.hdl.latency}{' (chosen: %d)' % declared if spec.hdl.latency == 'auto' else ''}",
                               file=path.name, where="audit_addr")
    m = re.search(r"^// Latency: (\d+) cycles?\b", text, re.M)
    if m is None or int(m.group(1)) != lut.latency:
        raise VerilogReadError(f"the header's latency ({m.group(1) if m else 'missing'}) is not the data flow's "
                               f"({lut.latency})", file=path.name, where="header")
    return {"module": name, "ports": len(got), "latency": lut.latency, "localparams": len(values)}


def check_all(directory: Path) -> dict[str, list[str]]:
    """Parse every ``.v`` of ``directory`` with pyverilog: file name -> its module names.
    Raises VerilogReadError on the first file that does not parse."""
    return {p.name: sorted(read_modules(p)) for p in sorted(directory.glob("*.v"))}
