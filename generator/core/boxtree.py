"""Compressed box tree: the LUT as a binary tree of comparators on the quantized input fields.

The distillation partition (:mod:`mi_certify.generator.build.distill`, ``DistillResult.boxes``:
inclusive level ranges per input) cuts the grid into boxes that each hold one LUT entry
(up to the property overrides applied afterwards). The tree splits the grid recursively
at box boundaries, ``level[field] < threshold`` going left; a region whose LUT entries
are all equal becomes one leaf, so adjacent boxes with the same entry merge. The split
at each node is chosen greedily: the most cells in constant halves, then the fewest
partition boxes cut, then the most balanced. Without boxes (a sampled LUT) every grid
line is a candidate; a region no box boundary can split is split along any grid line
where its entries change.

The tree is built from the LUT itself, so it is exact by construction; the RTL proof
``rtl.lut_table`` (:mod:`mi_certify.verification.rtl.rtl_formal`) re-checks the emitted
Verilog at every address anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Leaf:
    """A region of the grid where every LUT entry equals ``entry``."""

    entry: int


@dataclass(frozen=True)
class Split:
    """``level[field] < threshold`` → ``below``, else ``above`` (field: input index)."""

    field: int
    threshold: int
    below: "Leaf | Split"
    above: "Leaf | Split"


def tree_size(node) -> tuple[int, int]:
    """(comparators, leaves) of a tree."""
    if isinstance(node, Leaf):
        return 0, 1
    a, b = tree_size(node.below), tree_size(node.above)
    return a[0] + b[0] + 1, a[1] + b[1]


def evaluate(node, levels: np.ndarray) -> np.ndarray:
    """Entries of the tree at many level vectors (shape (N, n_inputs)) → (N,) int64."""
    out = np.zeros(len(levels), dtype=np.int64)
    stack = [(node, np.arange(len(levels)))]
    while stack:
        nd, idx = stack.pop()
        if isinstance(nd, Leaf):
            out[idx] = nd.entry
            continue
        low = levels[idx, nd.field] < nd.threshold
        stack.append((nd.below, idx[low]))
        stack.append((nd.above, idx[~low]))
    return out


def build_tree(entries: np.ndarray, bits: list[int], boxes: list[tuple[list[int], list[int]]] | None = None):
    """The box tree of a LUT.

    Args:
        entries: (2^sum(bits),) int LUT entries by address (input 0 most significant).
        bits: bits per input.
        boxes: the distillation partition as (level_lo, level_hi) pairs (inclusive), or None.
    Returns:
        the root (:class:`Leaf` or :class:`Split`).
    """
    grid = np.asarray(entries, dtype=np.int64).reshape([1 << b for b in bits])
    n = len(bits)
    if boxes:
        LO = np.array([b[0] for b in boxes], dtype=np.int64)
        HI = np.array([b[1] for b in boxes], dtype=np.int64)
    else:
        LO = HI = np.zeros((0, n), dtype=np.int64)

    def build(lo: list[int], hi: list[int], box_idx: np.ndarray):
        sub = grid[tuple(slice(l, h + 1) for l, h in zip(lo, hi))]
        first = int(sub.flat[0])
        if np.all(sub == first):
            return Leaf(first)
        best, best_key = None, None
        for f in range(n):
            if lo[f] == hi[f]:
                continue
            # min / max of each slab along f; a side is constant when its running min == max
            other = tuple(a for a in range(n) if a != f)
            smin, smax = sub.min(axis=other), sub.max(axis=other)
            lmin, lmax = np.minimum.accumulate(smin), np.maximum.accumulate(smax)
            rmin, rmax = np.minimum.accumulate(smin[::-1])[::-1], np.maximum.accumulate(smax[::-1])[::-1]
            size = sub.size // sub.shape[f]
            if box_idx.size:
                cand = np.unique(LO[box_idx, f])
                cand = cand[(cand > lo[f]) & (cand <= hi[f])]
            else:
                cand = np.arange(lo[f] + 1, hi[f] + 1)
            if cand.size == 0:  # no box boundary: any grid line where the slab entries change
                cand = lo[f] + 1 + np.nonzero((smin[1:] != smin[:-1]) | (smax[1:] != smax[:-1]))[0]
            if cand.size == 0:  # slab minima and maxima all equal (e.g. a checkerboard): every grid line
                cand = np.arange(lo[f] + 1, hi[f] + 1)
            for t in cand.tolist():
                k = t - lo[f]  # slabs 0..k-1 below
                const = size * (k * (lmin[k - 1] == lmax[k - 1]) + (hi[f] + 1 - t) * (rmin[k] == rmax[k]))
                cut = int(np.count_nonzero((LO[box_idx, f] < t) & (HI[box_idx, f] >= t))) if box_idx.size else 0
                balance = abs(2 * k - (hi[f] - lo[f] + 1))
                key = (-int(const), cut, balance, f, t)
                if best_key is None or key < best_key:
                    best_key, best = key, (f, t)
        if best is None:  # cannot happen: a non-constant region spans at least two levels of some input
            raise AssertionError("box tree: no split for a non-constant region")  # pragma: no cover
        f, t = best
        hi_b, lo_a = list(hi), list(lo)
        hi_b[f], lo_a[f] = t - 1, t
        if box_idx.size:
            below = box_idx[LO[box_idx, f] < t]
            above = box_idx[HI[box_idx, f] >= t]
        else:
            below = above = box_idx
        return Split(f, t, build(lo, hi_b, below), build(lo_a, hi, above))

    import sys
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10_000))
    try:
        inside = np.arange(len(LO))
        return build([0] * n, [(1 << b) - 1 for b in bits], inside)
    finally:
        sys.setrecursionlimit(old)
