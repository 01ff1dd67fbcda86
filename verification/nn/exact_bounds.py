"""Symbolic (back-substitution) bounds in exact dyadic arithmetic: the confirmation's first pass.

Every float64 is a dyadic rational ``m * 2**-e``, so the IR's weights, biases, the box
corners and the property rows convert to Python integers with a power-of-two scale, with no
rounding. A linear form over one node's values is an integer matrix with one scale;
back-substitution through an affine node multiplies integer matrices, through a ReLU it
applies the CROWN / DeepPoly relaxation (Zhang et al., "Efficient Neural Network Robustness
Certification with General Activation Functions", NeurIPS 2018; Singh et al., "An Abstract
Domain for Certifying Neural Networks", POPL 2019):

- sign known over the box (``l >= 0`` or ``u <= 0``): ``y = z`` or ``y = 0``, exactly;
- otherwise, for a coefficient ``lambda >= 0`` the lower line ``y >= alpha * z`` with
  ``alpha = 1`` when ``u >= -l`` else 0, and for ``lambda < 0`` the upper line
  ``y <= s * (z - l)`` with ``s >= u / (u - l)`` (rounded *up* to a multiple of
  ``2**-SLOPE_BITS``: any such ``s`` keeps the line above the ReLU on ``[l, u]``).

Each node's bounds ``l, u`` come from the same back-substitution and are then rounded outward
to a multiple of ``2**-NODE_BITS`` (``l`` down, ``u`` up): looser, still sound, and the integers stay short. Nothing
is rounded towards the answer anywhere, so a bound this module returns holds for the
network over the rationals (the semantics Z3 decides in :mod:`z3_exact`).

It shares no code with :mod:`bounds` (float CROWN with outward rounding): a wrong PROVED from
the search would have to coincide with a wrong bound here.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where used (see z3_exact: a spawned worker imports this module first)
    from mi_certify.generator.core.ir import ControllerIR

#: Each node's bounds are rounded outward to a multiple of 2**-NODE_BITS (chosen: the integers
#: stay short, and 2**-64 is far below any margin a proof relies on).
NODE_BITS = 64

#: The upper relaxation's slope is rounded up to a multiple of 2**-SLOPE_BITS (chosen: 40 bits
#: keeps the lines within 1e-12 of the tightest ones and the integers short).
SLOPE_BITS = 40


def _dyadic(values) -> tuple[np.ndarray, int]:
    """Exact ``(ints, e)`` with ``values == ints * 2**-e`` (object array of Python ints).

    Raises:
        ValueError: a value that is not finite.
    """
    flat = [float(v) for v in np.asarray(values, dtype=np.float64).ravel()]
    ratios = [v.as_integer_ratio() for v in flat]  # ValueError / OverflowError on inf, nan
    e = max((den.bit_length() - 1 for _, den in ratios), default=0)
    ints = np.empty(len(ratios), dtype=object)
    for k, (num, den) in enumerate(ratios):
        ints[k] = num << (e - (den.bit_length() - 1))
    return ints.reshape(np.shape(values)), e


def _rescale(m: np.ndarray, e: int, to: int) -> np.ndarray:
    return m if to == e else m * (1 << (to - e))


def _add_scaled(a: np.ndarray, ea: int, b: np.ndarray, eb: int) -> tuple[np.ndarray, int]:
    """``a * 2**-ea + b * 2**-eb`` as ``(ints, e)``, at the finer of the two scales (exact)."""
    top = max(ea, eb)
    return _rescale(a, ea, top) + _rescale(b, eb, top), top


def _to_float(v: int, e: int) -> float:
    """``v * 2**-e`` as the nearest float64; +-inf beyond its range (a ranking value only)."""
    try:
        return v / (1 << e)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _floor_scaled(v: int, e: int) -> int:
    """floor(v * 2**-e * 2**NODE_BITS): ``v * 2**-e`` rounded down to a multiple of ``2**-NODE_BITS``,
    as an integer scaled by ``2**NODE_BITS`` (looser, still a lower bound)."""
    return v >> (e - NODE_BITS) if e >= NODE_BITS else v << (NODE_BITS - e)


class ExactBounds:
    """Exact lower bounds of linear forms of a network's outputs over input boxes.

    Args:
        ir: the network (input, affine and ReLU nodes; node ids in topological order).

    Raises:
        ValueError: a weight or bias that is not finite.
    """

    def __init__(self, ir: ControllerIR):
        from mi_certify.generator.core.ir import AffineNode, InputNode
        self.ir = ir
        self._rows: dict = {}
        self._affine: dict[int, tuple[list[tuple[int, np.ndarray]], np.ndarray, int]] = {}
        for nid, node in enumerate(ir.nodes):
            if isinstance(node, InputNode):
                self._input = nid
            elif isinstance(node, AffineNode):
                parts = [_dyadic(w) for _, w in node.terms]
                bias, eb = _dyadic(node.bias)
                e = max([eb] + [pe for _, pe in parts])
                self._affine[nid] = ([(src, _rescale(m, pe, e)) for (src, _), (m, pe) in zip(node.terms, parts)],
                                     _rescale(bias, eb, e), e)

    def _minimum(self, seeds: dict[int, tuple[np.ndarray, int]], box: tuple[np.ndarray, int, np.ndarray],
                 bounds: dict[int, tuple[list[int], list[int]]]) -> tuple[np.ndarray, int, np.ndarray]:
        """Lower bound, per row, of ``sum_n m_n @ v_n * 2**-e_n`` over the box (back-substitution).

        Args:
            seeds: node id -> (integer matrix (rows, node size), scale exponent e).
            box: the input box as exact integers (lo, e, hi).
            bounds: the ReLU sources' bounds found so far: node id -> (l, u), integers scaled by
                ``2**NODE_BITS``.
        Returns:
            (c, e, (m, em)): the bounds ``c * 2**-e`` (object array of ints, one per row), and the
            rows' input coefficients ``m * 2**-em`` (object array (rows, n_inputs)).
        """
        from mi_certify.generator.core.ir import ReluNode
        rows = next(iter(seeds.values()))[0].shape[0]
        const, ec = np.zeros(rows, dtype=object), 0
        pending = dict(seeds)
        coef = (np.zeros((rows, self.ir.nodes[self._input].size), dtype=object), 0)

        def add(nid: int, m: np.ndarray, em: int) -> None:
            pending[nid] = _add_scaled(*pending[nid], m, em) if nid in pending else (m, em)

        def add_const(v: np.ndarray, ev: int) -> None:
            nonlocal const, ec
            const, ec = _add_scaled(const, ec, v, ev)

        for nid in range(max(seeds), -1, -1):
            if nid not in pending:
                continue
            m, em = pending.pop(nid)
            node = self.ir.nodes[nid]
            if nid in self._affine:
                terms, bias, eb = self._affine[nid]
                add_const(m.dot(bias), em + eb)
                for src, w in terms:
                    add(src, m.dot(w), em + eb)
            elif isinstance(node, ReluNode):
                low, up = bounds[node.src]
                out = np.zeros_like(m)
                corr = np.zeros(rows, dtype=object)  # -lambda * s * l of the upper lines, scale em + SLOPE + NODE
                for j in range(m.shape[1]):
                    lj, uj = low[j], up[j]
                    if lj >= 0:
                        out[:, j] = m[:, j] << SLOPE_BITS
                    elif uj > 0:
                        # s = ceil(u / (u - l) * 2**SLOPE_BITS): s * 2**-SLOPE_BITS >= u / (u - l)
                        s_up = -((-(uj << SLOPE_BITS)) // (uj - lj))
                        col = m[:, j]
                        neg = col < 0
                        if neg.any():
                            upper = col * s_up
                            out[:, j] = np.where(neg, upper, (col << SLOPE_BITS) if uj >= -lj else 0)
                            corr -= np.where(neg, upper * lj, 0)
                        elif uj >= -lj:
                            out[:, j] = col << SLOPE_BITS
                    # u <= 0: y = 0, the column stays 0
                add_const(corr, em + SLOPE_BITS + NODE_BITS)
                add(node.src, out, em + SLOPE_BITS)
            else:  # the input: each coefficient takes the box corner that minimises it
                lo, ex, hi = box
                best = np.where(m >= 0, np.broadcast_to(lo, m.shape), np.broadcast_to(hi, m.shape))
                add_const((m * best).sum(axis=1), em + ex)
                coef = (m, em)
        return const, ec, coef

    def node_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[tuple, dict]:
        """Bounds ``(l, u)`` of every ReLU's input over ``[lo, hi]``, as integers scaled by
        ``2**NODE_BITS`` (``l`` rounded down, ``u`` up).

        Returns:
            (box, bounds): the box as exact integers (for :meth:`_minimum`) and a dict
            node id -> (list of l, list of u), one entry per ReLU source node.
        Raises:
            ValueError: a corner that is not finite.
        """
        from mi_certify.generator.core.ir import ReluNode
        both, ex = _dyadic(np.stack([np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)]))
        box = (both[0], ex, both[1])
        bounds: dict[int, tuple[list[int], list[int]]] = {}
        for node in self.ir.nodes:
            if isinstance(node, ReluNode) and node.src not in bounds:
                n = node.size
                eye = np.zeros((2 * n, n), dtype=object)
                for j in range(n):
                    eye[j, j], eye[n + j, j] = 1, -1
                mins, e, _ = self._minimum({node.src: (eye, 0)}, box, bounds)
                down = [_floor_scaled(int(v), e) for v in mins]
                bounds[node.src] = (down[:n], [-v for v in down[n:]])
        return box, bounds

    def lower_bounds(self, C: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[list[Fraction], np.ndarray]:
        """Exact lower bounds of ``C @ y`` over ``x in [lo, hi]`` (y: the outputs, in ``ir.outputs`` order).

        Args:
            C: (rows, n_outputs) float64.
            lo, hi: (n_inputs,) float64, ``lo <= hi``.
        Returns:
            (one Fraction per row, each at most the row's minimum over the box over the rationals;
            the rows' input coefficients of the final linear forms, (rows, n_inputs) float64).
        """
        box, bounds = self.node_bounds(lo, hi)
        ci, ec = _dyadic(np.asarray(C, dtype=np.float64))
        seeds, col = {}, 0
        for nid in self.ir.outputs:
            size = self.ir.nodes[nid].size
            m = ci[:, col:col + size]
            seeds[nid] = (seeds[nid][0] + m, ec) if nid in seeds else (m, ec)
            col += size
        c, e, (m, em) = self._minimum(seeds, box, bounds)
        return ([Fraction(int(v), 1 << e) for v in c],
                np.array([[_to_float(int(v), em) for v in row] for row in m], dtype=np.float64))

    def _combinations(self, C: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, list[Fraction]]:
        """The rows of ``C y <= d`` and the sums of two rows that float64 adds exactly, with their
        exact right-hand sides (cached per (C, d): a confirmation asks for the same rows box after box)."""
        key = (C.shape, C.tobytes(), d.tobytes())
        if key not in self._rows:
            m = C.shape[0]
            pairs = [(i, j) for i in range(m) for j in range(i + 1, m)
                     if all(Fraction(float(C[i, k] + C[j, k])) == Fraction(float(C[i, k])) + Fraction(float(C[j, k]))
                            for k in range(C.shape[1]))]
            rows = np.vstack([C] + [(C[i] + C[j])[None, :] for i, j in pairs])
            rhs = [Fraction(float(v)) for v in d] + [Fraction(float(d[i])) + Fraction(float(d[j])) for i, j in pairs]
            self._rows[key] = (rows, rhs)
        return self._rows[key]

    def closes(self, C: np.ndarray, d: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[bool, np.ndarray]:
        """Whether exact bounds show ``{x in [lo, hi]: C y(x) <= d}`` is empty.

        Tried: each row, and each sum of two rows (a nonnegative combination of the rows holds
        wherever the rows do; the sum is used only when float64 adds its rows exactly).
        Returns:
            (closed, score): score (n_inputs,) ranks the inputs for a bisection when not closed:
            ``|coefficient| * width`` in the linear form of the combination that came nearest
            (the smear heuristic of input-splitting verifiers).
        """
        rows, rhs = self._combinations(np.asarray(C, dtype=np.float64), np.asarray(d, dtype=np.float64))
        lows, coef = self.lower_bounds(rows, lo, hi)
        gaps = [lw - r for lw, r in zip(lows, rhs)]
        k = max(range(len(gaps)), key=lambda i: gaps[i])
        if gaps[k] > 0:
            return True, np.zeros(np.size(lo))
        width = np.asarray(hi, dtype=np.float64) - np.asarray(lo, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            score = np.abs(coef[k]) * width
        return False, np.where(width > 0, np.nan_to_num(score, nan=0.0, posinf=np.inf), 0.0)
