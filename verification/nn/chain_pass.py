"""CROWN's per-neuron backward passes on a sparse chain network, one compiled loop per batch of neurons.

:func:`~mi_certify.verification.nn.bounds.crown_bounds` bounds every unstable pre-ReLU neuron of
every box by a backward pass (CROWN: Zhang et al., NeurIPS 2018). On a lattice network
(tllverifybench: min/max trees, each neuron reading 8 of the layer below) a neuron's pass reaches
only its subtree, and the batched numpy pass (``bounds._backward_lower_batch``, compacted) spent
most of its time on Python bookkeeping per layer and per group of 8 neurons: N = 64 7_3 made
28,138 such passes, about 1 ms each, 89 % of the query's bound time (line profile, 2026-12-07).

Here each (box, neuron) instance runs its two rows (``e_j`` and ``-e_j``) through the whole chain
in one compiled loop, with sparse coefficient rows (a dense scratch per layer and the list of the
columns it holds). The operations on every nonzero are those of the batched pass, in the same
order: each sum starts at +0 and adds its terms in index order, and a term left out is a product
with an exact zero, which never changes such a sum (it is never -0). So the bounds are bit for bit
those of the batched pass (tests/unit/nn/test_chain_pass.py), which stays the path for every other
network and for any instance whose coefficients leave the finite range (the kernel flags it).

Applies (:func:`chain_plan`) when the IR is a chain: node i's only source is node i - 1, every
affine node has one term, finite weights and biases.
"""

from __future__ import annotations

import numba
import numpy as np

from mi_certify.generator.core.ir import AffineNode, ControllerIR, InputNode, ReluNode, prepared_terms, weight_memo
from mi_certify.generator.core.numerics import SPARSE_MAX_DENSITY, Sparse, sparse

__all__ = ["ChainPlan", "chain_plan", "chain_lower"]


class ChainPlan:
    """The IR flattened for :func:`chain_lower`: per node its kind (0 input, 1 affine, 2 ReLU) and
    size; per affine node its weights (row-compressed nonzeros and their absolute values, rows
    ascending, columns ascending) and bias, at offsets into shared arrays."""

    def __init__(self, ir: ControllerIR):
        n = len(ir.nodes)
        self.kind = np.zeros(n, dtype=np.int64)
        self.size = np.array([node.size for node in ir.nodes], dtype=np.int64)
        self.ip_off = np.zeros(n, dtype=np.int64)   # into indptr (node size + 1 entries, local values)
        self.nz_off = np.zeros(n, dtype=np.int64)   # into indices / values / avalues
        self.b_off = np.zeros(n, dtype=np.int64)    # into bias
        indptr, indices, values, avalues, bias = [], [], [], [], []
        ip = nz = bo = 0
        #: per node: the nonzero weights of the affine nodes before it (an instance's work is below that)
        self.work = np.zeros(n, dtype=np.int64)
        for nid, node in enumerate(ir.nodes):
            self.work[nid] = nz
            if isinstance(node, InputNode):
                continue
            if isinstance(node, ReluNode):
                self.kind[nid] = 2
                continue
            self.kind[nid] = 1
            (_, w), = prepared_terms(ir, nid, "w")
            (_, aw), = prepared_terms(ir, nid, "abs")
            if not isinstance(w, Sparse):   # dense: its nonzeros (a left-out zero weight is a product with
                w, aw = sparse(w), sparse(aw)  # an exact zero); |w| has the same ones
            p, ix, v, av = w.indptr, w.indices, w.values, aw.values
            self.ip_off[nid], self.nz_off[nid], self.b_off[nid] = ip, nz, bo
            indptr.append(np.asarray(p, dtype=np.int64))
            indices.append(np.asarray(ix, dtype=np.int64))
            values.append(np.asarray(v, dtype=np.float64))
            avalues.append(np.asarray(av, dtype=np.float64))
            bias.append(np.asarray(node.bias, dtype=np.float64))
            ip += p.size
            nz += len(ix)
            bo += node.size
        cat = (lambda xs, dt: np.ascontiguousarray(np.concatenate(xs), dtype=dt) if xs else np.zeros(0, dtype=dt))
        self.indptr = cat(indptr, np.int64)
        self.indices = cat(indices, np.int64)
        self.values = cat(values, np.float64)
        self.avalues = cat(avalues, np.float64)
        self.bias = cat(bias, np.float64)
        self.width = int(self.size.max())


def chain_plan(ir: ControllerIR) -> ChainPlan | None:
    """The :class:`ChainPlan` of ``ir``, or None when the kernel does not apply (not a chain, an affine
    node with several terms, a non-finite weight or bias, or more than ``SPARSE_MAX_DENSITY`` of all weight
    entries nonzero). Made once per IR (``weight_memo``)."""
    memo = weight_memo(ir)
    if "chain_plan" not in memo:
        ok = isinstance(ir.nodes[0], InputNode)
        for nid, node in enumerate(ir.nodes[1:], start=1):
            if isinstance(node, ReluNode):
                ok = ok and node.src == nid - 1
            elif isinstance(node, AffineNode):
                ok = (ok and len(node.terms) == 1 and node.terms[0][0] == nid - 1
                      and bool(np.isfinite(node.bias).all()) and bool(np.isfinite(node.terms[0][1]).all()))
            else:
                ok = False
            if not ok:
                break
        if ok:   # mostly dense: the batched pass's products are faster (a fresh helper: 3x at width 800)
            nnz = entries = 0
            for nid, node in enumerate(ir.nodes):
                if isinstance(node, AffineNode):
                    (_, w), = prepared_terms(ir, nid, "w")
                    nnz += w.values.size if isinstance(w, Sparse) else int(np.count_nonzero(w))
                    entries += w.shape[0] * w.shape[1]
            ok = nnz <= SPARSE_MAX_DENSITY * entries
        memo["chain_plan"] = ChainPlan(ir) if ok else None
    return memo["chain_plan"]


def chain_lower(plan: ChainPlan, target: int, boxes: np.ndarray, neurons: np.ndarray, lo: np.ndarray,
                hi: np.ndarray, s_lo: np.ndarray, s_up: np.ndarray, b_up: np.ndarray, r_off: np.ndarray,
                inflation: float) -> tuple[np.ndarray, np.ndarray]:
    """CROWN lower bounds of the rows ``e_j`` and ``-e_j`` of affine node ``target`` per instance.

    Args:
        plan: :func:`chain_plan` of the IR.
        target: an affine node id.
        boxes, neurons: (P,) int64: instance p bounds neuron ``neurons[p]`` over box ``boxes[p]``.
        lo, hi: (B, n_inputs) the boxes.
        s_lo, s_up, b_up: (B, R) the ReLU relaxations (lower slope, upper slope, upper intercept) of
            every ReLU node below ``target``, side by side; ``r_off[nid]`` is ReLU node nid's first column.
        inflation: ``bounds.INFLATION``.
    Returns:
        (lower (P, 2) float64: the bound's two rows, inflated outward as the batched pass does;
        flagged (P,) bool: instances whose coefficients left the finite range, whose rows are not
        computed: take the batched pass for them).
    """
    return _chain_kernel(plan.kind, plan.size, plan.ip_off, plan.nz_off, plan.b_off, plan.indptr, plan.indices,
                         plan.values, plan.avalues, plan.bias, plan.width, int(target),
                         np.ascontiguousarray(boxes, dtype=np.int64), np.ascontiguousarray(neurons, dtype=np.int64),
                         np.ascontiguousarray(lo, dtype=np.float64), np.ascontiguousarray(hi, dtype=np.float64),
                         np.ascontiguousarray(s_lo, dtype=np.float64), np.ascontiguousarray(s_up, dtype=np.float64),
                         np.ascontiguousarray(b_up, dtype=np.float64), np.ascontiguousarray(r_off, dtype=np.int64),
                         float(inflation))


@numba.njit(cache=True, fastmath=False, nogil=True)
def _relu_entry(cur, e, slo, sup, bup):  # pragma: no cover - compiled
    """One row's entry (coefficient ``cur[e]``, its magnitude ``cur[e + 1]``) through a ReLU step, in place:
    (L·s, A·|s|) with s the lower slope where L >= 0, else the upper one; returns (L·Bc, A·|Bc|), Bc the
    upper intercept where L < 0, else 0 (``bounds._relu_back``'s operations)."""
    lv = cur[e]
    av = cur[e + 1]
    if lv >= 0:
        sv = slo
        bc = 0.0
    else:
        sv = sup
        bc = bup
    cur[e] = lv * sv
    cur[e + 1] = av * abs(sv)
    return lv * bc, av * abs(bc)


@numba.njit(cache=True, fastmath=False, nogil=True)
def _finite(cur, c):  # pragma: no cover - compiled
    """Whether column c's four entries (two rows and their magnitudes) are finite."""
    return (np.isfinite(cur[4 * c]) and np.isfinite(cur[4 * c + 1]) and np.isfinite(cur[4 * c + 2])
            and np.isfinite(cur[4 * c + 3]))


@numba.njit(cache=True, fastmath=False, nogil=True)
def _chain_kernel(kind, size, ip_off, nz_off, b_off, indptr, indices, values, avalues, bias, width, target,
                  boxes, neurons, lo, hi, s_lo, s_up, b_up, r_off, inflation):  # pragma: no cover - compiled
    P = boxes.size
    n_in = lo.shape[1]
    out = np.zeros((P, 2))
    flagged = np.zeros(P, dtype=np.bool_)
    # an instance's two rows (e_j: 0, -e_j: 1) and their magnitudes on the columns ``cols[:cnt]``
    # (dense scratch, zero elsewhere), and the next node's
    cur = np.zeros(4 * width)   # per column: row 0, its magnitude, row 1, its magnitude (one cache line)
    nxt = np.zeros(4 * width)
    cols = np.zeros(width, dtype=np.int64)
    ncols = np.zeros(width, dtype=np.int64)
    mark = np.zeros(width, dtype=np.bool_)
    for p in range(P):
        b = boxes[p]
        j = neurons[p]
        # the first step: [e_j; -e_j] @ w is exactly [w_j; -w_j]; constants [bias_j; -bias_j]
        ipo = ip_off[target]
        nzo = nz_off[target]
        cnt = 0
        for t in range(nzo + indptr[ipo + j], nzo + indptr[ipo + j + 1]):
            c = indices[t]
            cur[4 * c] = values[t]
            cur[4 * c + 2] = -values[t]
            cur[4 * c + 1] = avalues[t]
            cur[4 * c + 3] = avalues[t]
            cols[cnt] = c
            cnt += 1
        bj = bias[b_off[target] + j]
        const0 = bj
        const1 = -bj
        mag0 = abs(const0)
        mag1 = abs(const1)
        bad = False
        nid = target - 1
        while nid > 0:
            if kind[nid] == 2:   # ReLU: the relaxation of box b, read in place (bounds._relu_back)
                ro = r_off[nid]
                dc0 = 0.0
                dm0 = 0.0
                dc1 = 0.0
                dm1 = 0.0
                for q in range(cnt):
                    c = cols[q]
                    slo = s_lo[b, ro + c]
                    sup = s_up[b, ro + c]
                    bup = b_up[b, ro + c]
                    x, y = _relu_entry(cur, 4 * c, slo, sup, bup)
                    dc0 = dc0 + x
                    dm0 = dm0 + y
                    x, y = _relu_entry(cur, 4 * c + 2, slo, sup, bup)
                    dc1 = dc1 + x
                    dm1 = dm1 + y
                const0 = const0 + dc0
                mag0 = mag0 + dm0
                const1 = const1 + dc1
                mag1 = mag1 + dm1
            else:   # affine: the bias terms, then the rows times the weights (numerics.pair_rows_product)
                for q in range(cnt):
                    c = cols[q]
                    if not _finite(cur, c):
                        bad = True
                if bad:
                    break
                bo = b_off[nid]
                t0 = 0.0
                u0 = 0.0
                t1 = 0.0
                u1 = 0.0
                for q in range(cnt):
                    c = cols[q]
                    bv = bias[bo + c]
                    t0 = t0 + cur[4 * c] * bv
                    u0 = u0 + cur[4 * c + 1] * abs(bv)
                    t1 = t1 + cur[4 * c + 2] * bv
                    u1 = u1 + cur[4 * c + 3] * abs(bv)
                const0 = const0 + t0
                mag0 = mag0 + u0
                const1 = const1 + t1
                mag1 = mag1 + u1
                ipo = ip_off[nid]
                nzo = nz_off[nid]
                ncnt = 0
                for q in range(cnt):
                    c = cols[q]
                    x0 = cur[4 * c]
                    y0 = cur[4 * c + 1]
                    x1 = cur[4 * c + 2]
                    y1 = cur[4 * c + 3]
                    if x0 != 0.0 or y0 != 0.0 or x1 != 0.0 or y1 != 0.0:
                        # a term x * v with x == 0 adds an exact zero to a sum that starts at +0 and is never
                        # -0 (finite weights): the same bits as the batched pass, which skips it
                        for t in range(nzo + indptr[ipo + c], nzo + indptr[ipo + c + 1]):
                            k = indices[t]
                            if not mark[k]:
                                mark[k] = True
                                ncols[ncnt] = k
                                ncnt += 1
                            v = values[t]
                            av = avalues[t]
                            nxt[4 * k] = nxt[4 * k] + x0 * v
                            nxt[4 * k + 1] = nxt[4 * k + 1] + y0 * av
                            nxt[4 * k + 2] = nxt[4 * k + 2] + x1 * v
                            nxt[4 * k + 3] = nxt[4 * k + 3] + y1 * av
                    cur[4 * c] = 0.0
                    cur[4 * c + 1] = 0.0
                    cur[4 * c + 2] = 0.0
                    cur[4 * c + 3] = 0.0
                if ncnt * 8 >= size[nid - 1]:   # most columns met: the marks in order (a sort costs more)
                    q = 0
                    for k in range(size[nid - 1]):
                        if mark[k]:
                            ncols[q] = k
                            q += 1
                else:
                    ncols[:ncnt].sort()
                for q in range(ncnt):
                    k = ncols[q]
                    mark[k] = False
                    cur[4 * k] = nxt[4 * k]
                    cur[4 * k + 1] = nxt[4 * k + 1]
                    cur[4 * k + 2] = nxt[4 * k + 2]
                    cur[4 * k + 3] = nxt[4 * k + 3]
                    nxt[4 * k] = 0.0
                    nxt[4 * k + 1] = 0.0
                    nxt[4 * k + 2] = 0.0
                    nxt[4 * k + 3] = 0.0
                    cols[q] = k
                cnt = ncnt
            nid -= 1
        if not bad:
            for q in range(cnt):
                c = cols[q]
                if not _finite(cur, c):
                    bad = True
        if bad:
            flagged[p] = True
        else:   # the input node: rowdot(max(L, 0), lo) + rowdot(min(L, 0), hi) + const, per row
            for side in range(2):
                r1 = 0.0
                r2 = 0.0
                r3 = 0.0
                for i in range(n_in):
                    r1 = r1 + max(cur[4 * i + 2 * side], 0.0) * lo[b, i]
                for i in range(n_in):
                    r2 = r2 + min(cur[4 * i + 2 * side], 0.0) * hi[b, i]
                for i in range(n_in):
                    r3 = r3 + cur[4 * i + 2 * side + 1] * max(abs(lo[b, i]), abs(hi[b, i]))
                const = const0 if side == 0 else const1
                mag = mag0 if side == 0 else mag1
                out[p, side] = (r1 + r2 + const) - inflation * ((mag + r3) + 1e-300)
        for q in range(cnt):   # leave the scratch zero
            c = cols[q]
            cur[4 * c] = 0.0
            cur[4 * c + 1] = 0.0
            cur[4 * c + 2] = 0.0
            cur[4 * c + 3] = 0.0
    return out, flagged
