"""VNN-LIB 1.0 property files → :class:`~mi_certify.verification.nn.properties.Query`.

Grammar followed: the VNN-LIB 1.0 standard as used by VNN-COMP 2021–2024 (SMT-LIB 2
subset): ``(declare-const X_i Real)``, ``(declare-const Y_j Real)``, ``(assert F)``
where F is a comparison ``(<= a b)``, ``(>= a b)``, ``(< a b)``, ``(> a b)`` of linear
terms (numbers such as ``-0.0`` or ``1e-3``, variables, ``+``, ``-``, ``*`` by a
constant), or ``and`` / ``or`` of formulas. ``;`` starts a comment. Several asserts are
a conjunction. The formula is expanded to disjunctive normal form; in each disjunct,
constraints on a single input bound it, constraints on outputs only become rows of
``C y <= d``; other input constraints are refused.

Why our own parser: the PyPI package ``vnnlib`` (1.0.2) parses VNN-LIB 2.0 only and
rejects the 1.0 files VNN-COMP publishes (``declare-const``).
"""

from __future__ import annotations

import math
import re
from itertools import product
from pathlib import Path
from typing import Callable

import numpy as np

from mi_certify.generator.core.errors import MiCertifyError

from mi_certify.verification.nn.properties import Disjunct, Query


class VnnlibError(MiCertifyError):
    """The VNN-LIB file cannot be read (syntax, unsupported constraint)."""


_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def _tokens(text: str):
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split(";", 1)[0]
        for m in _TOKEN.finditer(line):
            yield m.group(0), lineno


def _parse(text: str, f: str) -> list:
    stack: list[list] = [[]]
    for tok, ln in _tokens(text):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if len(stack) == 1:
                raise VnnlibError("unbalanced ')'", file=f, where=f"line {ln}")
            done = stack.pop()
            stack[-1].append((done, ln))
        else:
            stack[-1].append((tok, ln))
    if len(stack) != 1:
        raise VnnlibError("unbalanced '(' at end of file", file=f)
    return stack[0]


class _Lin:
    """Linear term: coefficients on ('X', i) / ('Y', j) and a constant."""

    def __init__(self, coef=None, const=0.0):
        self.coef = dict(coef or {})
        self.const = float(const)
        self.strict = False

    def __add__(self, o):
        c = dict(self.coef)
        for k, v in o.coef.items():
            c[k] = c.get(k, 0.0) + v
        return _Lin(c, self.const + o.const)

    def scale(self, s):
        return _Lin({k: v * s for k, v in self.coef.items()}, self.const * s)


def _term(node, f, names) -> _Lin:
    tok, ln = node
    if isinstance(tok, str):
        if tok in names:
            return _Lin({names[tok]: 1.0})
        try:
            value = float(tok)
        except ValueError:
            raise VnnlibError(f"unknown symbol '{tok}'", file=f, where=f"line {ln}") from None
        if not math.isfinite(value) or not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", tok):
            raise VnnlibError(f"'{tok}' is not a finite decimal number", file=f, where=f"line {ln}")
        return _Lin(const=value)
    if not tok:
        raise VnnlibError("empty expression", file=f, where=f"line {ln}")
    op = tok[0][0]
    if not isinstance(op, str) or len(tok) < 2:
        raise VnnlibError("malformed term", file=f, where=f"line {ln}")
    args = [_term(a, f, names) for a in tok[1:]]
    if op == "+":
        out = _Lin()
        for a in args:
            out = out + a
        return out
    if op == "-":
        if len(args) == 1:
            return args[0].scale(-1.0)
        out = args[0]
        for a in args[1:]:
            out = out + a.scale(-1.0)
        return out
    if op == "*":
        out = _Lin(const=1.0)
        for a in args:
            if out.coef and a.coef:
                raise VnnlibError("product of two variables is not linear", file=f, where=f"line {ln}")
            out = a.scale(out.const) if not out.coef else out.scale(a.const)
        return out
    raise VnnlibError(f"unsupported term operator '{op}'", file=f, where=f"line {ln}")


def _formula(node, f, names) -> list[list[tuple[_Lin, int]]]:
    """DNF: list of conjunctions; each atom is (expr, line) meaning expr <= 0."""
    tok, ln = node
    if isinstance(tok, str) or not tok or not isinstance(tok[0][0], str):
        raise VnnlibError("expected a formula", file=f, where=f"line {ln}")
    op = tok[0][0]
    if op in ("and", "or") and len(tok) < 2:
        raise VnnlibError(f"'{op}' without arguments", file=f, where=f"line {ln}")
    if op == "and":
        parts = [_formula(a, f, names) for a in tok[1:]]
        return [sum(combo, []) for combo in product(*parts)]
    if op == "or":
        return [conj for a in tok[1:] for conj in _formula(a, f, names)]
    if op in ("<=", "<", ">=", ">"):
        if len(tok) != 3:
            raise VnnlibError(f"'{op}' takes two arguments", file=f, where=f"line {ln}")
        a, b = _term(tok[1], f, names), _term(tok[2], f, names)
        expr = a + b.scale(-1.0) if op in ("<=", "<") else b + a.scale(-1.0)
        expr.strict = op in ("<", ">")
        return [[(expr, ln)]]

    raise VnnlibError(f"unsupported formula operator '{op}'", file=f, where=f"line {ln}")


def query_box(query: Query, file: str | Path) -> tuple[np.ndarray, np.ndarray] | None:
    """The input box the import cross-check covers for ``query`` (the hull of its disjuncts' boxes), None
    without disjuncts; raises MiCertifyError (``file``) for bounds beyond 1e15 in magnitude."""
    if not query.disjuncts:
        return None
    lo = np.min([np.minimum(d.lo, d.hi) for d in query.disjuncts], axis=0)
    hi = np.max([np.maximum(d.lo, d.hi) for d in query.disjuncts], axis=0)
    if not (np.all(np.abs(lo) <= 1e15) and np.all(np.abs(hi) <= 1e15)):
        raise MiCertifyError("input bounds beyond 1e15 in magnitude are not supported", file=str(file))
    return lo, hi


def announced_boxes(files: list) -> Callable[[int, int], list]:
    """``boxes`` for :func:`~mi_certify.generator.frontend.model.load_model`: the :func:`query_box` of each
    VNN-LIB file, parsed with the sizes given (the caller parses them again after the import; an error
    here only means no early readout)."""
    def boxes(n_inputs: int, n_outputs: int) -> list:
        out = []
        for f in files:
            try:
                box = query_box(parse_vnnlib(f, n_inputs, n_outputs), f)
            except MiCertifyError:   # reported by the caller's own parse, after the import
                continue
            if box is not None:
                out.append(box)
        return out
    return boxes


def parse_vnnlib(path: str | Path, n_inputs: int | None = None, n_outputs: int | None = None) -> Query:
    """Read a VNN-LIB file as a Query (unsafe region = union of disjuncts).

    Raises:
        VnnlibError naming file, line and reason.
    """
    try:
        return _parse_vnnlib(path, n_inputs, n_outputs)
    except VnnlibError:
        raise
    except (IndexError, TypeError, ValueError, RecursionError) as exc:
        raise VnnlibError(f"malformed file ({type(exc).__name__})", file=str(path)) from None


def _parse_vnnlib(path, n_inputs, n_outputs) -> Query:
    path = Path(path)
    f = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise VnnlibError(f"cannot read ({exc})", file=f) from None
    names: dict[str, tuple[str, int]] = {}
    asserts = []
    for node in _parse(text, f):
        tok, ln = node
        if isinstance(tok, str) or not tok or not isinstance(tok[0][0], str):
            raise VnnlibError("expected (declare-const ...) or (assert ...)", file=f, where=f"line {ln}")
        head = tok[0][0]
        if head == "declare-const":
            if len(tok) != 3 or not isinstance(tok[1][0], str):
                raise VnnlibError("expected (declare-const NAME Real)", file=f, where=f"line {ln}")
            name = tok[1][0]
            m = re.fullmatch(r"([XY])_(0|[1-9]\d*)", name)
            if not m:
                raise VnnlibError(f"variable '{name}' is neither X_i nor Y_j", file=f, where=f"line {ln}")
            names[name] = (m.group(1), int(m.group(2)))
        elif head == "assert":
            if len(tok) != 2:
                raise VnnlibError("assert takes exactly one formula", file=f, where=f"line {ln}")
            asserts.append(tok[1])
        else:
            raise VnnlibError(f"unsupported command '{head}'", file=f, where=f"line {ln}")
    nx = n_inputs if n_inputs is not None else 1 + max([i for k, i in names.values() if k == "X"], default=-1)
    ny = n_outputs if n_outputs is not None else 1 + max([i for k, i in names.values() if k == "Y"], default=-1)
    for k, i in names.values():
        if (k == "X" and i >= nx) or (k == "Y" and i >= ny):
            raise VnnlibError(f"{k}_{i} is declared but the network has {nx} inputs and {ny} outputs", file=f)
    declared = sum(1 for kind, _ in names.values() if kind == "X")
    if n_inputs is not None and declared < nx:  # (an undeclared output is only unconstrained)
        raise VnnlibError(f"declares {declared} inputs (X_*) but the network has {nx}", file=f)
    dnf: list[list] = [[]]
    for a in asserts:
        part = _formula(a, f, names)
        dnf = [x + y for x in dnf for y in part]
    disjuncts = []
    for conj in dnf:
        lo, hi = np.full(nx, -np.inf), np.full(nx, np.inf)
        rows, rhs = [], []
        trivially_false = False
        for expr, ln in conj:
            xs = {k: v for k, v in expr.coef.items() if k[0] == "X" and v != 0}
            ys = {k: v for k, v in expr.coef.items() if k[0] == "Y" and v != 0}
            if xs and ys:
                raise VnnlibError("constraints mixing inputs and outputs are not supported", file=f, where=f"line {ln}")
            if len(xs) > 1:
                raise VnnlibError("only bounds on single inputs are supported", file=f, where=f"line {ln}")
            if xs:
                (_, i), c = next(iter(xs.items()))
                bound = -expr.const / c
                if c > 0:
                    hi[i] = min(hi[i], bound)
                else:
                    lo[i] = max(lo[i], bound)
            elif ys:
                r = np.zeros(ny)
                for (_, j), v in ys.items():
                    r[j] = v
                rows.append(r)
                rhs.append(-expr.const)
            elif expr.const > 0 or (expr.strict and expr.const >= 0):
                trivially_false = True  # a constant constraint that is false (exactly, strictness kept)
        if trivially_false:
            continue
        unbounded = [i for i in range(nx) if not (np.isfinite(lo[i]) and np.isfinite(hi[i]))]
        if unbounded:
            raise VnnlibError(f"input X_{unbounded[0]} is not bounded on both sides", file=f)
        C = np.array(rows).reshape(len(rows), ny)
        disjuncts.append(Disjunct(lo, hi, C, np.array(rhs)))
    return Query(path.stem, "vnnlib", tuple(disjuncts))


def write_counterexample(path: str | Path, x: np.ndarray, y: np.ndarray) -> None:
    """VNN-COMP counterexample file: ``((X_0 v) ... (Y_0 v) ...)``, full float precision."""
    lines = [f"(X_{i} {float(v)!r})" for i, v in enumerate(x)] + [f"(Y_{j} {float(v)!r})" for j, v in enumerate(y)]
    Path(path).write_text("(" + "\n".join(lines) + ")\n", encoding="utf-8")


def read_counterexample(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a VNN-COMP counterexample file into (x, y)."""
    xs, ys = {}, {}
    for name, val in re.findall(r"\(\s*([XY]_\d+)\s+([^\s()]+)\s*\)", Path(path).read_text()):
        kind, idx = name.split("_")
        (xs if kind == "X" else ys)[int(idx)] = float(val)
    return np.array([xs[i] for i in sorted(xs)]), np.array([ys[j] for j in sorted(ys)])
