"""What an ONNX tensor holds while the importer reads the graph, and the algebra of expressions.

A tensor is one of:

- a constant: a numpy array (initializers, Constant nodes, folded shape arithmetic);
- a :class:`Lin`, a *linear expression*: a tensor of known shape whose row-major flattened value
  is ``sum_k M_k @ node_k + bias`` over nodes of the IR being built. Affine operators compose
  expressions without creating IR nodes, so fan-out, skip connections and ``Add(x, x)`` stay
  exact by construction;
- a :class:`Headed` output: a strictly monotone head (Softmax, LogSoftmax, Sigmoid) of an
  expression, which only order-preserving operators may pass on to the graph output;
- a :class:`Refused` tensor: one the IR cannot hold (a class label), refused only if read.

The ``lin_*`` functions follow numpy semantics (broadcasting, ``numpy.matmul``, row-major
reshapes) on expressions and constants alike; every constant product goes through
:func:`~mi_certify.generator.core.numerics.matmul` (fixed summation order), so a folded constant
is the same on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from mi_certify.generator.core.numerics import matmul


class Eye:
    """The identity matrix of size ``n``, unmade: the term of a node's own output (``Importer.node_lin``),
    which a wide ReLU layer would otherwise make as an ``np.eye`` (537 MB at width 8,192, tllverifybench
    N = 64). A product with a finite constant is that constant (:func:`lin_matmul`); any other use makes the
    matrix first (``__array__``, and the operators below), so every result is the one ``np.eye(n)`` gives."""

    __array_priority__ = 1000   # numpy defers to the operators below

    def __init__(self, n: int):
        self.n = int(n)

    shape = property(lambda self: (self.n, self.n))
    ndim = 2
    dtype = np.dtype(np.float64)

    def dense(self) -> np.ndarray:
        return np.eye(self.n)

    def __array__(self, dtype=None, copy=None):
        return self.dense() if dtype is None else self.dense().astype(dtype)

    def __getitem__(self, idx):
        if isinstance(idx, np.ndarray) and idx.ndim == 1 and idx.dtype.kind in "iu":   # rows, as eye[idx]
            rows = np.zeros((idx.size, self.n))
            rows[np.arange(idx.size), np.where(idx < 0, idx + self.n, idx)] = 1.0
            return rows
        return self.dense()[idx]

    def reshape(self, *shape):
        return self.dense().reshape(*shape)

    def __mul__(self, other):
        return self.dense() * other

    def __rmul__(self, other):
        return other * self.dense()

    def __add__(self, other):
        return self.dense() + other

    def __radd__(self, other):
        return other + self.dense()

    def __neg__(self):
        return -self.dense()


def _times_eye(w: np.ndarray, transpose: bool) -> np.ndarray | None:
    """``matmul(w.T or w, eye)`` without the eye, for a finite 2-D ``w``: the fixed-order sum of each
    entry is its one term ``w_ij · 1`` among products ``· 0`` (each ±0), from +0, so it is ``w_ij``
    with -0.0 made +0.0 (``+ 0.0``). None when ``w`` has an infinity or a NaN (``inf · 0`` is NaN: the
    caller makes the product as before)."""
    if not np.isfinite(w).all():
        return None
    return (w.T if transpose else w) + 0.0


@dataclass(frozen=True)
class Lin:
    """A tensor of shape ``shape`` equal to ``sum M @ node + bias`` (flattened row-major)."""

    shape: tuple[int, ...]
    terms: dict[int, np.ndarray]  # node id -> (numel, node size)
    bias: np.ndarray  # (numel,)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def is_lin(v) -> bool:
    """Whether ``v`` is an expression (depends on the network input) rather than a constant."""
    return isinstance(v, Lin)


@dataclass(frozen=True)
class Headed:
    """``kind(lin)``: the output of a monotone head (Softmax over the whole tensor, LogSoftmax, or
    elementwise Sigmoid); ``readout`` = the onnxruntime tensors giving ``lin`` (see ir.Head)."""

    kind: str
    lin: Lin
    node: str
    readout: tuple[tuple[str, int], ...]
    extra_nodes: tuple[bytes, ...] = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return self.lin.shape


@dataclass(frozen=True)
class Refused:
    """A tensor the importer cannot represent (a class label): refused only if something reads it."""

    reason: str


def shape_of(v) -> tuple[int, ...]:
    """Shape of an expression or a constant."""
    return v.shape if is_lin(v) else tuple(np.shape(v))


def lin_take(lin: Lin, idx: np.ndarray) -> Lin:
    """Rearrange: ``idx`` (output shape) holds flat indices into ``lin``."""
    flat = idx.reshape(-1)
    return Lin(tuple(int(d) for d in idx.shape), {s: m[flat] for s, m in lin.terms.items()}, lin.bias[flat])


def lin_index(lin: Lin) -> np.ndarray:
    """The flat index of every entry of ``lin``, int64, shaped like ``lin``."""
    return np.arange(lin.numel, dtype=np.int64).reshape(lin.shape)


def lin_scale(lin: Lin, scale: np.ndarray) -> Lin:
    """Elementwise multiply by a constant broadcastable to ``lin.shape``."""
    s = np.broadcast_to(np.asarray(scale, dtype=np.float64), lin.shape).reshape(-1)
    return Lin(lin.shape, {k: m * s[:, None] for k, m in lin.terms.items()}, lin.bias * s)


def lin_broadcast(lin: Lin, shape: tuple[int, ...]) -> Lin:
    """``lin`` broadcast to ``shape`` (numpy rules)."""
    if tuple(lin.shape) == tuple(shape):
        return lin
    return lin_take(lin, np.broadcast_to(lin_index(lin), shape))


def lin_add(a, b, sign_b: float = 1.0):
    """a + sign_b * b, either may be constant; numpy broadcasting."""
    if not is_lin(a) and not is_lin(b):
        return np.asarray(a) + sign_b * np.asarray(b)
    shape = tuple(np.broadcast_shapes(np.shape(a) if not is_lin(a) else a.shape,
                                      np.shape(b) if not is_lin(b) else b.shape))
    terms: dict[int, np.ndarray] = {}
    bias = np.zeros(int(np.prod(shape, dtype=np.int64)))
    for val, sign in ((a, 1.0), (b, sign_b)):
        if is_lin(val):
            v = lin_broadcast(val, shape)
            for s, m in v.terms.items():
                # 1.0 · m is m, bit for bit: no copy of a term (268 MB at tllverifybench N = 64); terms
                # are never changed in place
                term = m if sign == 1.0 else sign * m
                terms[s] = terms[s] + term if s in terms else term
            bias = bias + sign * v.bias
        else:
            bias = bias + sign * np.broadcast_to(np.asarray(val, dtype=np.float64), shape).reshape(-1)
    return Lin(shape, terms, bias)


#: Entries of a float64 block of a constant operand in :func:`_blocked_product` (32 MB).
_BLOCK_ENTRIES = 1 << 22


def _blocked_product(a: Lin, b) -> Lin | None:
    """``a @ b`` for a flat (rank-1, or one-row) expression ``a`` and a finite rank-2 constant ``b`` whose
    sizes are all nonzero, made from float64 copies of blocks of ``b`` (``_BLOCK_ENTRIES`` entries each)
    instead of a float64 copy of all of it and of its transpose (268 MB each for a 4,096 × 8,192 float32
    layer), each block's product (at most ``_BLOCK_ENTRIES`` entries too: it was 134 MB beside the 268 MB
    result at tllverifybench N = 64) written into the result. Each entry of a product is its own fixed-order sum of one row of ``b.T`` (or one column of
    ``b``) with the same operand, so the blocks give the bits of the whole product. None otherwise
    (the caller makes the product as before)."""
    w = np.asarray(b)
    if w.ndim != 2 or w.dtype.kind != "f" or len(a.shape) > 2 or (len(a.shape) == 2 and a.shape[0] != 1):
        return None
    n, m = w.shape
    if a.shape[-1] != n or n * m == 0 or w.size <= _BLOCK_ENTRIES or not np.isfinite(w).all():
        return None
    step = max(1, _BLOCK_ENTRIES // n)
    terms = {}
    for s, mm in a.terms.items():
        if isinstance(mm, Eye):   # _times_eye: w.T + 0.0, the float64 sum of each entry alone
            terms[s] = np.add(w.T, 0.0, dtype=np.float64, order="C")
            continue
        mm = np.ascontiguousarray(mm.reshape(n, -1))   # once, not once a block
        if mm.shape[1] == 0:
            return None
        out = np.empty((m, mm.shape[1]))
        rows = max(1, _BLOCK_ENTRIES // max(n, mm.shape[1]))   # the block's product too is at most 32 MB
        for i in range(0, m, rows):
            out[i:i + rows] = matmul(np.ascontiguousarray(w[:, i:i + rows].T, dtype=np.float64), mm)
        terms[s] = out
    bias = np.empty(m)
    row = a.bias.reshape(1, n)
    for i in range(0, m, step):
        bias[i:i + step] = matmul(row, np.asarray(w[:, i:i + step], dtype=np.float64)).reshape(-1)
    return Lin(a.shape[:-1] + (m,), terms, bias)


def lin_matmul(a, b, fail: Callable[[str], Exception]):
    """numpy.matmul semantics where at most one operand is an expression (the expression by a rank-2
    constant, or a rank-2 constant by a rank-2 expression). ``fail(reason)`` makes the error raised
    otherwise (the importer's located ModelImportError)."""
    if is_lin(a) and is_lin(b):
        raise fail("product of two variable tensors (x·y) is not piecewise linear")
    if not is_lin(a) and not is_lin(b):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            return matmul(a, b)  # fixed order: the folded constant is the same on every machine
        return np.matmul(a, b)
    if is_lin(a):
        blocked = _blocked_product(a, b)
        if blocked is not None:
            return blocked
        w = np.asarray(b, dtype=np.float64)
        if w.ndim != 2:
            raise fail(f"MatMul with a constant of rank {w.ndim} is not supported (need rank 2)")
        shape = a.shape
        if len(shape) == 1:
            shape = (1,) + shape
        n = shape[-1]
        if w.shape[0] != n:
            raise fail(f"MatMul shapes {a.shape} and {w.shape} do not match")
        r = int(np.prod(shape[:-1], dtype=np.int64))
        m = w.shape[1]
        terms = {}
        for s, mm in a.terms.items():
            fast = _times_eye(w, True) if isinstance(mm, Eye) and r == 1 else None
            terms[s] = fast if fast is not None else matmul(w.T, mm.reshape(r, n, -1)).reshape(r * m, -1)
        bias = matmul(a.bias.reshape(r, n), w).reshape(-1)
        out_shape = shape[:-1] + (m,) if len(a.shape) > 1 else (m,)
        return Lin(tuple(out_shape), terms, bias)
    w = np.asarray(a, dtype=np.float64)
    if w.ndim != 2 or len(b.shape) != 2:
        raise fail("MatMul of a constant by a variable needs two rank-2 operands")
    n, m = b.shape
    if w.shape[1] != n:
        raise fail(f"MatMul shapes {w.shape} and {b.shape} do not match")
    p = w.shape[0]
    terms = {}
    for s, mm in b.terms.items():
        fast = _times_eye(w, False) if isinstance(mm, Eye) and m == 1 else None
        terms[s] = fast if fast is not None else matmul(w, mm.reshape(n, -1)).reshape(p * m, -1)
    bias = matmul(w, b.bias.reshape(n, m)).reshape(-1)
    return Lin((p, m), terms, bias)


def lin_transpose(v, perm=None):
    """numpy.transpose of an expression or a constant."""
    if not is_lin(v):
        return np.transpose(v, perm)
    return lin_take(v, np.transpose(lin_index(v), perm))


def lin_reshape(v, shape: tuple[int, ...]):
    """Row-major reshape of an expression or a constant."""
    if is_lin(v):
        return lin_take(v, lin_index(v).reshape(shape))
    return np.reshape(v, shape)


def lin_stack(parts: list) -> tuple[Lin, list[np.ndarray]]:
    """All ``parts`` (expressions or constants) as one flat expression, and per part the
    indices of its entries in it (shaped like the part): for Concat and Split."""
    total = sum(int(np.prod(shape_of(v), dtype=np.int64)) for v in parts)
    terms: dict[int, np.ndarray] = {}
    bias = np.zeros(total)
    idx, off = [], 0
    for v in parts:
        n = int(np.prod(shape_of(v), dtype=np.int64))
        if is_lin(v):
            for src, m in v.terms.items():
                if src not in terms:
                    terms[src] = np.zeros((total, m.shape[1]))
                terms[src][off:off + n] = m
            bias[off:off + n] = v.bias
        else:
            bias[off:off + n] = np.asarray(v, dtype=np.float64).reshape(-1)
        idx.append(off + np.arange(n, dtype=np.int64).reshape(shape_of(v)))
        off += n
    return Lin((total,), terms, bias), idx
