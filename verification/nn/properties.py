"""Verification queries: input box + linear output constraints, from sla.yaml or VNN-LIB.

A query is a disjunction of ``Disjunct``s. Each disjunct describes an **unsafe**
region: inputs in the box ``[lo, hi]`` whose outputs satisfy every row of
``C @ y <= d``. The property holds (PROVED, VNN-LIB ``unsat``) iff every disjunct is
empty; it is VIOLATED (``sat``) iff some disjunct holds a point (a counterexample).

Strict comparisons are treated as non-strict: the unsafe region only grows, so a
proof stays sound, and every witness is replayed before it is reported.

sla.yaml forms (docs/sla-yaml.md), with ``dec(a)`` = "a is decoded" = ``y_j - y_a <= 0``
for all j != a (argmax; ``y_a - y_j <= 0`` for argmin):

* ``forbid: [a, ...]`` over ``when`` → one disjunct ``dec(a)`` per forbidden a;
* ``require: [S]`` → one disjunct ``dec(a)`` per action a not in S;
* ``output: {a: {max: M}}`` → disjunct ``-y_a <= -M``; ``{min: m}`` → ``y_a <= m``.

Ties (``y_j == y_a``) belong to every tied action's region here; onnxruntime gives a
tie to the lowest index, so a tie can only make us report a violation we then
confirm on onnxruntime or, if onnxruntime decodes otherwise, report within tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mi_certify.generator.core.spec import PropertySpec, Spec


@dataclass(frozen=True)
class Disjunct:
    """Unsafe region: x in [lo, hi] (each (n_in,)) and C @ y <= d (C (m, n_out), d (m,))."""

    lo: np.ndarray
    hi: np.ndarray
    C: np.ndarray
    d: np.ndarray
    label: str = ""

    def empty_input(self) -> str | None:
        """A message naming the first empty input interval, or None."""
        bad = np.nonzero(~(self.lo <= self.hi))[0]
        if bad.size:
            i = int(bad[0])
            return f"empty input region for X_{i}: [{self.lo[i]:g}, {self.hi[i]:g}]"
        return None


@dataclass(frozen=True)
class Query:
    """A property to decide: it holds iff every disjunct is empty."""

    id: str
    kind: str
    disjuncts: tuple[Disjunct, ...]
    description: str = ""


def envelope(spec: Spec) -> tuple[np.ndarray, np.ndarray]:
    return np.array([i.min for i in spec.inputs]), np.array([i.max for i in spec.inputs])


def decoded_rows(n_out: int, a: int, decode: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows (C, d) of "action a is decoded" (ties included)."""
    rows = []
    for j in range(n_out):
        if j == a:
            continue
        r = np.zeros(n_out)
        if decode == "argmax":
            r[j], r[a] = 1.0, -1.0
        else:
            r[a], r[j] = 1.0, -1.0
        rows.append(r)
    return np.array(rows), np.zeros(len(rows))


def _region(spec: Spec, prop: PropertySpec) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = envelope(spec)
    for i, a, b in prop.when:
        lo[i], hi[i] = a, b
    return lo, hi


def spec_queries(spec: Spec) -> list[Query]:
    """The sla.yaml properties as queries (order of the file)."""
    n = len(spec.actions)
    out = []
    for p in spec.properties:
        lo, hi = _region(spec, p)
        djs = []
        if p.kind in ("forbid", "require"):
            bad = p.forbid if p.kind == "forbid" else [a for a in range(n) if a not in p.require]
            for a in bad:
                C, d = decoded_rows(n, a, spec.decode)
                djs.append(Disjunct(lo, hi, C, d, f"{spec.actions[a].name} decoded"))
        else:
            for a, mn, mx in p.output:
                if mx is not None:
                    r = np.zeros((1, n))
                    r[0, a] = -1.0
                    djs.append(Disjunct(lo, hi, r, np.array([-mx]), f"{spec.actions[a].name} >= {mx:g}"))
                if mn is not None:
                    r = np.zeros((1, n))
                    r[0, a] = 1.0
                    djs.append(Disjunct(lo, hi, r, np.array([mn]), f"{spec.actions[a].name} <= {mn:g}"))
        out.append(Query(p.id, p.kind, tuple(djs), p.description))
    return out


def reachability_queries(spec: Spec) -> list[Query]:
    """One query per action: "a is decoded somewhere in the envelope".

    VIOLATED means reachable (with a witness); PROVED means unreachable.
    """
    lo, hi = envelope(spec)
    n = len(spec.actions)
    out = []
    for a, act in enumerate(spec.actions):
        C, d = decoded_rows(n, a, spec.decode)
        out.append(Query(f"reach:{act.name}", "reachability", (Disjunct(lo, hi, C, d, f"{act.name} decoded"),)))
    return out
