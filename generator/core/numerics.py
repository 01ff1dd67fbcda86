"""Machine-independent float64 arithmetic for everything that reaches a hashed artefact.

Why: numpy hands ``@``, ``dot`` and ``matmul`` to OpenBLAS, which picks a kernel by CPU
(Prescott, Haswell, SkylakeX, Zen …) and by thread count; each kernel sums the products
in another order, so the last digits of a matrix product differ between machines.
numpy's own ``exp`` and ``log`` are dispatched by CPU feature too (AVX-512 has its own
float64 versions). A bound that differs in the last digit is harmless for soundness,
but it changes hashed files and, within an ulp of a threshold, decisions.

What this module guarantees: every function is a fixed sequence of IEEE 754 binary64
additions, subtractions, multiplications, divisions, ``maximum``/``minimum``, ``rint`` and
``ldexp``, issued as separate numpy ufunc calls in an order that depends only on the
shapes. Each of those operations is correctly rounded (IEEE 754-2019, §5.1), whatever
SIMD width evaluates it, and no two are fused (no FMA: a multiply and an add are two
ufunc calls). So the results are bit-identical on every x86-64 machine (and every IEEE
machine), whatever BLAS kernel, SIMD dispatch or thread count it has. Reductions are
sequential along the contracted axis, never numpy's ``sum`` of a strided axis.

Cost: the products and sums of :func:`matmul`, :func:`rowdot` and :func:`sum_last` are
compiled loops (numba, ``fastmath=False``: LLVM keeps IEEE semantics, so it neither
reassociates a sum nor fuses a multiply and an add into an FMA; it may vectorise across
independent outputs, which changes no result). Each output is ``((0 + p_0) + p_1) + …``
over the contracted axis in index order, the same operations the plain numpy loops
(kept as :func:`_matmul_numpy` etc. and used by the tests as the reference) issue one
ufunc call at a time; 7–12× faster than those at the sizes of CROWN's backward passes.
Zero terms are skipped when both operands are finite (a product with a zero factor is then
±0, and ``x + ±0 == x`` bit for bit for every ``x`` a sum from +0 can reach: such a sum is never
-0 under round-to-nearest), so sparse layers (lattice networks, VNN-COMP tllverifybench: under 1 %
nonzero) cost their nonzeros, not their area (a weight matrix passed as :class:`Sparse`); an operand with an infinity or a NaN takes the
plain loop, where ``0 · inf`` stays NaN.
Numba: Lam, Pitrou, Seibert, "Numba: a LLVM-based Python JIT compiler", LLVM-HPC 2015;
the compiled code is cached beside this file (``cache=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

__all__ = ["SPARSE_MAX_DENSITY", "Sparse", "check_gradual_underflow", "exp", "exp_upper", "gram", "held_sparse",
           "log", "matmul", "operand",
           "pair_rows_product", "rowdot", "softmax_lower", "sparse", "sparse_coo", "sum_last", "vdot"]

_F = np.float64
#: Rows (a's elements per contracted index) from which :func:`matmul` goes column by column.
_COLUMN_MIN = 4096


@numba.njit(cache=True, fastmath=False, nogil=True)
def _mm_kernel(a, b, skip):  # pragma: no cover - compiled; a (P, k), b (k, n) -> (P, n)
    P, k = a.shape
    n = b.shape[1]
    out = np.zeros((P, n))
    for p in range(P):
        for i in range(k):
            av = a[p, i]
            if skip and av == 0.0:
                continue
            for j in range(n):
                out[p, j] = out[p, j] + av * b[i, j]
    return out


@numba.njit(cache=True, fastmath=False, nogil=True)
def _mm_skip_kernel(a, indptr, indices, values, n):  # pragma: no cover - compiled; (P, k) @ CSR (k, n)
    P, k = a.shape
    out = np.zeros((P, n))
    for p in range(P):
        for i in range(k):
            av = a[p, i]
            if av == 0.0:
                continue
            for t in range(indptr[i], indptr[i + 1]):
                j = indices[t]
                out[p, j] = out[p, j] + av * values[t]
    return out


@numba.njit(cache=True, fastmath=False, nogil=True)
def _mv_kernel(a, b):  # pragma: no cover - compiled; a (P, k), b (k,) -> (P,)
    P, k = a.shape
    out = np.zeros(P)
    for p in range(P):
        acc = 0.0
        for i in range(k):
            acc = acc + a[p, i] * b[i]
        out[p] = acc
    return out


@numba.njit(cache=True, fastmath=False, nogil=True)
def _rowdot_kernel(a, x):  # pragma: no cover - compiled; a (B, m, n), x (B, n) -> (B, m)
    B, m, n = a.shape
    out = np.zeros((B, m))
    for b in range(B):
        for r in range(m):
            acc = 0.0
            for i in range(n):
                acc = acc + a[b, r, i] * x[b, i]
            out[b, r] = acc
    return out


@numba.njit(cache=True, fastmath=False, nogil=True)
def _sum_kernel(a):  # pragma: no cover - compiled; a (P, n) -> (P,)
    P, n = a.shape
    out = np.zeros(P)
    for p in range(P):
        acc = 0.0
        for i in range(n):
            acc = acc + a[p, i]
        out[p] = acc
    return out


@numba.njit(cache=True, fastmath=False, nogil=True)
def _subnormal_kernel(x, y):  # pragma: no cover - compiled
    return x * y, x / y


def check_gradual_underflow() -> None:
    """Raise FloatingPointError unless this thread's FPU keeps subnormals (IEEE 754 gradual underflow)
    in numpy's and in the compiled kernels' arithmetic.

    Why: the bound passes' underflow pad (:mod:`mi_certify.verification.nn.bounds`) assumes an
    underflowing product errs by at most 2^-1075. A loaded library built with ``-ffast-math`` may set
    the x86 MXCSR flags flush-to-zero (FTZ: subnormal results become 0) and denormals-are-zero (DAZ:
    subnormal operands read as 0: a weight of 5e-324 times 1e300 then gives 0 instead of 4.9e-24);
    the flags are per thread, so this is checked where bounds are computed, each call (about 2 µs).
    Raises:
        FloatingPointError: naming the flag seen.
    """
    tiny = np.array([2.0 ** -1074, 2.0 ** -1030], dtype=_F)
    p, _ = _subnormal_kernel(tiny[1], 2.0 ** -10)  # a subnormal result: 2^-1040
    r, q = _subnormal_kernel(tiny[0], 0.25)        # a subnormal operand: 2^-1076 rounds to 0; 2^-1072
    big, _ = _subnormal_kernel(tiny[0], 2.0 ** 60)  # 2^-1014
    if not (p > 0.0 and q == 4.0 * (2.0 ** -1074) and big > 0.0 and r == 0.0
            and float(tiny[0] * 2.0 ** 60) > 0.0 and float(tiny[1] * 2.0 ** -10) > 0.0):
        raise FloatingPointError(
            "the FPU flushes subnormal floats to zero (the x86 FTZ/DAZ flags are set in this thread, usually by a "
            "library built with -ffast-math); float bounds would not be sound, so none are computed")


def _operands(a, b) -> tuple[np.ndarray, np.ndarray, int]:
    """float64 arrays of matmul's operands and the contracted length; ValueError if they do not fit."""
    a = np.asarray(a, dtype=_F)
    b = np.asarray(b, dtype=_F)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: scalar operand")
    k = a.shape[-1]
    if b.shape[0 if b.ndim == 1 else -2] != k:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not align")
    return a, b, k


@dataclass(frozen=True, eq=False)
class Sparse:
    """A 2-D float64 matrix (k, n) held for :func:`matmul` as its row-compressed nonzeros:
    ``indptr`` (k + 1,), ``indices`` and ``values`` (nnz,), each row's columns ascending (the
    order the plain loop visits them). ``kept``: the matrix itself when it holds an infinity or a
    NaN (every product then takes the plain loop), else None: a finite matrix is not kept, its
    :attr:`dense` is made again from the nonzeros when an operand with an infinity or a NaN needs
    the plain loop (the same bits: a zero whose sign was dropped only ever meets sums that start
    at +0, and ``±inf · ±0`` is NaN either way). Build it once per weight matrix with
    :func:`sparse` or :func:`sparse_coo`; products with it are bit for bit those with the matrix."""

    shape: tuple[int, int]
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    finite: bool
    kept: np.ndarray | None = None

    @property
    def dense(self) -> np.ndarray:
        """The matrix (k, n) float64: ``kept``, or a new array made from the nonzeros."""
        if self.kept is not None:
            return self.kept
        out = np.zeros(self.shape, dtype=_F)
        out[np.repeat(np.arange(self.shape[0]), np.diff(self.indptr)), self.indices] = self.values
        return out


#: A weight matrix at most this dense is held as :class:`Sparse` by :func:`operand` (chosen when the sparse
#: products came in: lattice layers are under 1 % nonzero, ACAS Xu's 100 %).
SPARSE_MAX_DENSITY = 0.25


def held_sparse(m: np.ndarray) -> bool:
    """Whether :func:`operand` holds ``m`` as :class:`Sparse`: at most ``SPARSE_MAX_DENSITY`` of it nonzero."""
    return np.count_nonzero(m) <= SPARSE_MAX_DENSITY * m.size


def operand(m) -> "Sparse | np.ndarray":
    """A matrix prepared once for many :func:`matmul` products: :class:`Sparse` when :func:`held_sparse`,
    else a contiguous float64 copy (a strided view would be copied at every product). The products are
    bit for bit the same either way."""
    m = np.asarray(m, dtype=_F)
    return sparse(m) if held_sparse(m) else np.ascontiguousarray(m)


def sparse(b) -> Sparse:
    """:class:`Sparse` of a 2-D array ``b`` (k, n); ValueError if ``b`` is not 2-D."""
    b = np.asarray(b, dtype=_F)
    if b.ndim != 2:
        raise ValueError(f"sparse: a 2-D matrix is needed, got shape {b.shape}")
    rows, cols = np.nonzero(b)
    finite = bool(np.isfinite(b).all())
    return sparse_coo(b.shape, rows, cols, b[rows, cols], finite, None if finite else np.ascontiguousarray(b))


def sparse_coo(shape: tuple[int, int], rows: np.ndarray, cols: np.ndarray, values: np.ndarray, finite: bool = True,
               kept: np.ndarray | None = None) -> Sparse:
    """:class:`Sparse` of the (k, n) matrix whose nonzeros are ``values`` at (``rows``, ``cols``), sorted
    by row, then column (``np.nonzero``'s order); ``finite`` and ``kept`` as in :class:`Sparse` (the
    matrix itself is needed when it is not finite). ValueError: entries out of that order or shape."""
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= shape[0] or cols.min() < 0 or cols.max() >= shape[1]
                      or np.any(np.diff(rows * shape[1] + cols) <= 0)):
        raise ValueError(f"sparse_coo: entries outside a {shape} matrix or out of row-major order")
    if not finite and kept is None:
        raise ValueError("sparse_coo: a matrix with an infinity or a NaN is kept whole")
    indptr = np.zeros(shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=shape[0]), out=indptr[1:])
    return Sparse((int(shape[0]), int(shape[1])), indptr, cols, np.ascontiguousarray(values, dtype=_F), finite, kept)


@numba.njit(cache=True, fastmath=False, nogil=True)
def _pair_rows_kernel(a1, a2, rows, indptr, indices, v1, v2, n):  # pragma: no cover - compiled
    P, k = a1.shape
    used = np.zeros(n, dtype=np.bool_)
    for i in range(k):
        nonzero = False
        for p in range(P):
            if a1[p, i] != 0.0 or a2[p, i] != 0.0:
                nonzero = True
                break
        if nonzero:
            r = rows[i]
            for t in range(indptr[r], indptr[r + 1]):
                used[indices[t]] = True
    cols = np.nonzero(used)[0]
    where = np.full(n, -1, dtype=np.int64)
    for c in range(cols.size):
        where[cols[c]] = c
    o1 = np.zeros((P, cols.size))
    o2 = np.zeros((P, cols.size))
    for p in range(P):
        for i in range(k):
            x1 = a1[p, i]
            x2 = a2[p, i]
            r = rows[i]
            if x1 != 0.0:
                for t in range(indptr[r], indptr[r + 1]):
                    j = where[indices[t]]
                    o1[p, j] = o1[p, j] + x1 * v1[t]
            if x2 != 0.0:
                for t in range(indptr[r], indptr[r + 1]):
                    j = where[indices[t]]
                    o2[p, j] = o2[p, j] + x2 * v2[t]
    return o1, o2, cols


def pair_rows_product(a1: np.ndarray, a2: np.ndarray, rows: np.ndarray, w1: Sparse, w2: Sparse):
    """``a1 @ w1[rows]`` and ``a2 @ w2[rows]`` on the columns either can reach, for a backward pass
    that keeps only the columns it needs (CROWN's Λ and its magnitudes on a sparse network).

    Args:
        a1, a2: (P, k) float64, finite; rows: (k,) ascending row indices of w1/w2 (the columns of a1
            and a2 are those rows); w1, w2: (K, n) :class:`Sparse` with the same nonzero pattern
            (a matrix and its absolute values), finite.
    Returns:
        (o1 (P, c), o2 (P, c), cols (c,)): the columns of w1[rows] met by a row i where a1[:, i] or
        a2[:, i] has a nonzero, ascending; every other column of both products is exactly zero.
        Each kept entry is the fixed-order sum over ``rows`` of :func:`matmul` with the zero terms
        skipped, so it is bit for bit the corresponding entry of ``matmul(a1_full, w1)`` where
        ``a1_full`` holds ``a1`` at ``rows`` and zeros elsewhere.
    """
    return _pair_rows_kernel(np.ascontiguousarray(a1, dtype=_F), np.ascontiguousarray(a2, dtype=_F),
                             np.ascontiguousarray(rows, dtype=np.int64), w1.indptr, w1.indices, w1.values,
                             w2.values, w1.shape[1])


def matmul(a, b) -> np.ndarray:
    """``a @ b`` (numpy matmul semantics, broadcasting batch axes) in fixed order.

    Args:
        a: (..., n, k) or (k,); b: (..., k, m) or (k,).
    Returns:
        float64 array of numpy matmul's shape; ``out[..., i, j] = (((0 + a_i0 b_0j) + a_i1 b_1j) + …)``,
        bit for bit what :func:`_matmul_numpy` gives (compiled when b is 2-D or 1-D).
    Raises:
        ValueError: a scalar operand or shapes that do not align.
    """
    if isinstance(b, Sparse):
        a = np.asarray(a, dtype=_F)
        if a.ndim == 0 or a.shape[-1] != b.shape[0]:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not align")
        flat = np.ascontiguousarray(a.reshape(-1, b.shape[0]))
        if not (b.finite and np.isfinite(flat).all()) or flat.size == 0 or b.shape[0] * b.shape[1] == 0:
            return matmul(a, b.dense)
        return _mm_skip_kernel(flat, b.indptr, b.indices, b.values, b.shape[1]).reshape(a.shape[:-1] + (b.shape[1],))
    a, b, k = _operands(a, b)
    if k == 0 or a.size == 0 or b.size == 0:
        return _matmul_numpy(a, b)
    if b.ndim == 1:
        flat = np.ascontiguousarray(a.reshape(-1, k))
        return _mv_kernel(flat, np.ascontiguousarray(b)).reshape(a.shape[:-1])
    if b.ndim == 2:
        flat = np.ascontiguousarray(a.reshape(-1, k))
        out = _mm_kernel(flat, np.ascontiguousarray(b), bool(np.isfinite(b).all()))
        return out.reshape(a.shape[:-1] + (b.shape[1],))
    if a.ndim == 2 and b.ndim == 3:  # a matrix times a stack of matrices (the importer composing MatMul
        # chains): one compiled product per matrix of the stack, the same sums in the same order
        if not b.shape[0]:
            return _matmul_numpy(a, b)
        flat = np.ascontiguousarray(a)
        if b.shape[0] == 1:   # the product itself, not a stacked copy of it (268 MB at tllverifybench N = 64)
            return _mm_kernel(flat, np.ascontiguousarray(b[0]), bool(np.isfinite(b[0]).all()))[None]
        return np.stack([_mm_kernel(flat, np.ascontiguousarray(m), bool(np.isfinite(m).all())) for m in b])
    return _matmul_numpy(a, b)


def rowdot(a, x) -> np.ndarray:
    """``einsum("bmn,bn->bm", a, x)`` in fixed order: a (B, m, n), x (B, n) → (B, m)
    (other batch shapes broadcast as in :func:`_rowdot_numpy`)."""
    a = np.asarray(a, dtype=_F)
    x = np.asarray(x, dtype=_F)
    if a.ndim != 3 or x.ndim != 2 or a.size == 0:
        return _rowdot_numpy(a, x)
    B = max(a.shape[0], x.shape[0])
    a3 = np.ascontiguousarray(np.broadcast_to(a, (B,) + a.shape[1:]))
    x2 = np.ascontiguousarray(np.broadcast_to(x, (B, x.shape[1])))
    return _rowdot_kernel(a3, x2)


def sum_last(a) -> np.ndarray:
    """Sum over the last axis, sequentially: (..., n) → (...)."""
    a = np.asarray(a, dtype=_F)
    if a.ndim == 0:
        raise ValueError("sum_last: scalar operand")
    if a.size == 0:
        return _sum_last_numpy(a)
    flat = np.ascontiguousarray(a.reshape(-1, a.shape[-1]))
    return _sum_kernel(flat).reshape(a.shape[:-1])


def _matmul_numpy(a, b) -> np.ndarray:
    """``a @ b`` (numpy matmul semantics, broadcasting batch axes) in fixed order.

    Args:
        a: (..., n, k) or (k,); b: (..., k, m) or (k,).
    Returns:
        float64 array of numpy matmul's shape; ``out[..., i, j] = (((0 + a_i0 b_0j) + a_i1 b_1j) + …)``.
    """
    a, b, k = _operands(a, b)
    if b.ndim == 1:
        out = np.zeros(a.shape[:-1], dtype=_F)
        for i in range(k):
            out += a[..., i] * b[i]
        return out
    if a.ndim == 1:
        out = np.zeros(b.shape[:-2] + b.shape[-1:], dtype=_F)
        for i in range(k):
            out += a[i] * b[..., i, :]
        return out
    if b.ndim == 2 and a.size // k >= _COLUMN_MIN:
        # the same products and sums in the same order, one output column at a time over
        # contiguous rows (a batch of boxes times a short matrix: ~3x faster than below)
        at = np.ascontiguousarray(np.moveaxis(a, -1, 0))
        out = np.zeros((b.shape[1],) + a.shape[:-1], dtype=_F)
        tmp = np.empty(a.shape[:-1], dtype=_F)
        for j in range(b.shape[1]):
            col = out[j]
            for i in range(k):
                np.multiply(at[i], b[i, j], out=tmp)
                col += tmp
        return np.ascontiguousarray(np.moveaxis(out, 0, -1))
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    out = np.zeros(shape, dtype=_F)
    for i in range(k):
        out += a[..., i:i + 1] * b[..., i:i + 1, :]
    return out


def _rowdot_numpy(a, x) -> np.ndarray:
    """``einsum("bmn,bn->bm", a, x)`` in fixed order: a (B, m, n), x (B, n) → (B, m)."""
    a = np.asarray(a, dtype=_F)
    x = np.asarray(x, dtype=_F)
    out = np.zeros(a.shape[:-1], dtype=_F)
    for i in range(a.shape[-1]):
        out += a[..., i] * x[..., None, i]
    return out


def _sum_last_numpy(a) -> np.ndarray:
    """Sum over the last axis, sequentially: (..., n) → (...)."""
    a = np.asarray(a, dtype=_F)
    out = np.zeros(a.shape[:-1], dtype=_F)
    for i in range(a.shape[-1]):
        out += a[..., i]
    return out


# exp: Cody–Waite reduction x = k ln2 + r, |r| <= ln2/2, then the Taylor series of e^r to
# degree 13 (remainder < 0.347^14 / 14! < 5e-18, below 2^-56) by Horner, then 2^k exactly.
# The ln2 split is fdlibm's (k * _LN2_HI is exact for |k| < 2^11).
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e+00
_TAYLOR = [1.0 / float(np.prod(np.arange(1, n + 1, dtype=np.float64))) for n in range(14)]
#: Relative error bound of :func:`exp` on [-745, 709] (reduction and Horner rounding,
#: ~15 roundings of 2^-53 each, and the series remainder), with a wide margin.
EXP_REL_ERROR = 2.0 ** -44


def exp(x) -> np.ndarray:
    """e^x elementwise, float64, relative error below ``EXP_REL_ERROR``; +inf above 709,
    and below -745 the value at -745 (the smallest subnormal)."""
    x = np.asarray(x, dtype=_F)
    xc = np.clip(x, -745.0, 709.0)
    k = np.rint(xc * _INV_LN2)
    r = (xc - k * _LN2_HI) - k * _LN2_LO
    p = np.full_like(r, _TAYLOR[13])
    for c in reversed(_TAYLOR[:13]):
        p = p * r + c
    return np.where(x > 709.0, np.inf, np.ldexp(p, k.astype(np.int64)))


def exp_upper(x) -> np.ndarray:
    """A sound upper bound of e^x elementwise (:func:`exp` moved out by its error bound)."""
    e = exp(x)
    return e * (1.0 + EXP_REL_ERROR) + 5e-324


def softmax_lower(margin_low) -> np.ndarray:
    """Certified lower bound of a winner's softmax probability from lower bounds of its
    margins ``y_win - y_j`` (last axis): ``1 / (1 + sum_j e^{-m_j})`` with every rounding
    taken against the bound. (..., n) → (...)."""
    m = np.asarray(margin_low, dtype=_F)
    s = 1.0 + sum_last(exp_upper(-m))
    # n additions of non-negative terms, each off by at most 2^-53 relative (Higham, §4.2)
    s = s * (1.0 + (m.shape[-1] + 2) * 2.0 ** -52)
    return (1.0 / s) * (1.0 - 2.0 ** -52)


def gram(a, b) -> np.ndarray:
    """``a.T @ b`` for row-major data (n, p) and (n, q) → (p, q), summing the n rows in order.

    The rows' outer products are added by numpy's reduction over axis 0 of a C-contiguous
    (n, p, q) array: an elementwise binary add of row after row (the reduced axis is the
    outer loop), an order fixed by the shapes alone."""
    a = np.ascontiguousarray(a, dtype=_F)
    b = np.ascontiguousarray(b, dtype=_F)
    out = np.zeros((a.shape[1], b.shape[1]), dtype=_F)
    for start in range(0, a.shape[0], 4096):  # bounded temporaries; blocks added in order
        prod = a[start:start + 4096, :, None] * b[start:start + 4096, None, :]
        out += np.add.reduce(prod, axis=0)
    return out


_SQRT_HALF = 0.70710678118654752440
_LN2 = 0.69314718055994530942


def log(x) -> np.ndarray:
    """Natural logarithm elementwise for x > 0 (float64; about 2 ulp): x = m 2^e with m in
    [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.172, series to s^27."""
    x = np.asarray(x, dtype=_F)
    m, e = np.frexp(x)
    low = m < _SQRT_HALF
    m = np.where(low, m * 2.0, m)
    e = np.where(low, e - 1, e).astype(_F)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    p = np.full_like(s, 1.0 / 27.0)
    for k in range(25, 0, -2):
        p = p * s2 + 1.0 / k
    return e * _LN2 + 2.0 * s * p


def vdot(a, b) -> float:
    """Dot product of two 1-D arrays: the products summed by numpy's float64 add reduction
    of a contiguous array (pairwise summation with eight partial sums per block of 128,
    an order fixed by the length alone; plain C additions, not BLAS)."""
    return float(np.add.reduce(np.ascontiguousarray(np.asarray(a, dtype=_F) * np.asarray(b, dtype=_F)).reshape(-1)))


#: Largest corner set enumerated in full; beyond it a fixed seeded sample (no cost 2^n).
MAX_CORNERS = 64


def corner_signs(n: int, limit: int = MAX_CORNERS, seed: int = 0) -> np.ndarray:
    """(m, n) bool: which end of each of ``n`` intervals a box corner takes (True = upper).
    Every corner (m = 2^n, in binary order of the index, bit k for interval k) when 2^n <=
    ``limit``; else ``limit`` corners drawn once from ``numpy.random.default_rng(seed)``
    (the all-lower and all-upper corners first), the same on every call and machine."""
    if n < 63 and (1 << n) <= limit:
        return np.array([[(c >> k) & 1 for k in range(n)] for c in range(1 << n)], dtype=bool).reshape(1 << n, n)
    rng = np.random.default_rng(seed)
    drawn = rng.random((max(limit - 2, 0), n)) < 0.5
    return np.vstack([np.zeros((1, n), dtype=bool), np.ones((1, n), dtype=bool), drawn])[:limit]
