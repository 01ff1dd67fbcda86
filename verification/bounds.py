"""Sound bound propagation over ControllerIR: interval arithmetic, then linear (CROWN) bounds.

Method: interval bound propagation, then backward linear relaxation of every ReLU
(CROWN: Zhang et al., "Efficient Neural Network Robustness Certification with General
Activation Functions", NeurIPS 2018; equivalently DeepPoly: Singh et al., POPL 2019),
with the adaptive lower relaxation (slope 1 when u > -l, else 0) and the chord as
upper relaxation. Intermediate (pre-ReLU) bounds are the tighter of interval and
CROWN bounds, node by node, so later layers see tight relaxations. The graph may be a
DAG (skip connections, fan-out): coefficients flow back along every term.

Floating point: everything is computed in float64 and every bound is then moved
outward by ``INFLATION * (M + 1e-300)``, where M is the sum of the absolute values of
all terms that contributed (tracked alongside, with the same operations on absolute
values). Accumulated float64 rounding of a sum of n products is at most
``n * 2**-53 * M`` (Higham, "Accuracy and Stability of Numerical Algorithms", §3.1);
with n ≤ 10^4 terms per row and ≤ 64 layers this is below 1e-10 * M, so the inflation
``INFLATION = 1e-9`` covers it with a factor of 10 to spare. The bounds are therefore
sound for the **real-valued** network whose weights are the float64 values in the IR.
The float32 evaluation of onnxruntime differs from it by rounding (checked to 1e-5 at
import); properties are proved about the real-valued network.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mi_certify.generator.ir import AffineNode, ControllerIR, InputNode, ReluNode

#: Relative outward inflation of every computed bound (see module docstring).
INFLATION = 1e-9


@dataclass
class NodeBounds:
    """Per-node bounds: ``lower[i]``, ``upper[i]`` are (size_i,) float64 arrays."""

    lower: list[np.ndarray]
    upper: list[np.ndarray]

    def unstable(self, ir: ControllerIR) -> int:
        """Number of ReLUs whose input bounds straddle zero."""
        n = 0
        for node in ir.nodes:
            if isinstance(node, ReluNode):
                lo, hi = self.lower[node.src], self.upper[node.src]
                n += int(np.sum((lo < 0) & (hi > 0)))
        return n


def _inflate(value: np.ndarray, mag: np.ndarray, down: bool) -> np.ndarray:
    pad = INFLATION * (mag + 1e-300)
    return value - pad if down else value + pad


def interval_bounds(ir: ControllerIR, lo: np.ndarray, hi: np.ndarray) -> NodeBounds:
    """Interval bounds of every node over the box [lo, hi] (each (n_inputs,))."""
    lower, upper = [], []
    for node in ir.nodes:
        if isinstance(node, InputNode):
            lower.append(np.asarray(lo, dtype=np.float64).copy())
            upper.append(np.asarray(hi, dtype=np.float64).copy())
        elif isinstance(node, AffineNode):
            c = node.bias.copy()
            r = np.zeros(node.size)
            mag = np.abs(node.bias).copy()
            for src, w in node.terms:
                mid = (lower[src] + upper[src]) / 2
                rad = np.maximum(upper[src] - mid, mid - lower[src])
                c += w @ mid
                aw = np.abs(w)
                r += aw @ rad
                mag += aw @ (np.abs(mid) + rad)
            lower.append(_inflate(c - r, mag + r, True))
            upper.append(_inflate(c + r, mag + r, False))
        else:
            lower.append(np.maximum(lower[node.src], 0.0))
            upper.append(np.maximum(upper[node.src], 0.0))
    return NodeBounds(lower, upper)


def _relu_relaxation(l: np.ndarray, u: np.ndarray):
    """(lower slope, upper slope, upper intercept) per neuron; lower intercept is 0."""
    active = l >= 0
    inactive = u <= 0
    unstable = ~active & ~inactive
    denom = np.where(unstable, u - l, 1.0)
    s_up = np.where(active, 1.0, np.where(inactive, 0.0, u / denom))
    b_up = np.where(unstable, -l * s_up, 0.0)
    s_lo = np.where(active, 1.0, np.where(inactive, 0.0, (u > -l).astype(np.float64)))
    return s_lo, s_up, b_up


def backward_lower(ir: ControllerIR, target: int, lam: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   bounds: NodeBounds) -> tuple[np.ndarray, np.ndarray]:
    """Sound lower bound of ``lam @ value(target)`` over the box, by CROWN.

    Args:
        target: node id; lam: (m, size(target)) coefficients.
        bounds: bounds of every node below ``target`` (pre-ReLU bounds are used).
    Returns:
        (lower (m,), input coefficients (m, n_inputs)) — the latter drive split choices.
    """
    m = lam.shape[0]
    coef: dict[int, np.ndarray] = {target: lam}
    acoef: dict[int, np.ndarray] = {target: np.abs(lam)}
    const = np.zeros(m)
    mag = np.zeros(m)
    for nid in range(target, -1, -1):
        if nid not in coef:
            continue
        L = coef.pop(nid)
        A = acoef.pop(nid)
        node = ir.nodes[nid]
        if isinstance(node, InputNode):
            pos, neg = np.maximum(L, 0), np.minimum(L, 0)
            val = pos @ lo + neg @ hi + const
            mag = mag + A @ np.maximum(np.abs(lo), np.abs(hi))
            return _inflate(val, mag, True), L
        if isinstance(node, AffineNode):
            const = const + L @ node.bias
            mag = mag + A @ np.abs(node.bias)
            for src, w in node.terms:
                coef[src] = coef[src] + L @ w if src in coef else L @ w
                acoef[src] = acoef[src] + A @ np.abs(w) if src in acoef else A @ np.abs(w)
        else:
            l, u = bounds.lower[node.src], bounds.upper[node.src]
            s_lo, s_up, b_up = _relu_relaxation(l, u)
            use_lo = L >= 0
            S = np.where(use_lo, s_lo[None, :], s_up[None, :])
            B = np.where(use_lo, 0.0, b_up[None, :])
            const = const + np.sum(L * B, axis=1)
            mag = mag + np.sum(A * np.abs(B), axis=1)
            src = node.src
            coef[src] = coef[src] + L * S if src in coef else L * S
            acoef[src] = acoef[src] + A * np.abs(S) if src in acoef else A * np.abs(S)
    raise AssertionError("the input node was not reached")  # pragma: no cover


def crown_bounds(ir: ControllerIR, lo: np.ndarray, hi: np.ndarray) -> NodeBounds:
    """Bounds of every node over [lo, hi]: interval bounds everywhere, tightened by CROWN
    at every pre-ReLU node that is not a direct affine map of the input (outputs keep
    interval bounds; bound output expressions with :func:`output_matrix_lower`)."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    ib = interval_bounds(ir, lo, hi)
    lower, upper = [None] * len(ir.nodes), [None] * len(ir.nodes)
    nb = NodeBounds(lower, upper)
    # CROWN only where it can help: pre-ReLU nodes that are not a direct affine map of the
    # input (for those, interval bounds are already exact up to the inflation)
    need = {n.src for n in ir.nodes if isinstance(n, ReluNode)
            if not (isinstance(ir.nodes[n.src], AffineNode) and all(s == 0 for s, _ in ir.nodes[n.src].terms))}
    for nid, node in enumerate(ir.nodes):
        if isinstance(node, InputNode):
            lower[nid], upper[nid] = lo.copy(), hi.copy()
        elif isinstance(node, ReluNode):
            lower[nid] = np.maximum(lower[node.src], 0.0)
            upper[nid] = np.maximum(upper[node.src], 0.0)
        else:
            l_i, u_i = ib.lower[nid], ib.upper[nid]
            if nid in need:
                eye = np.eye(node.size)
                both, _ = backward_lower(ir, nid, np.vstack([eye, -eye]), lo, hi, nb)
                cl, cu = both[:node.size], both[node.size:]
                l_i, u_i = np.maximum(l_i, cl), np.minimum(u_i, -cu)
            lower[nid], upper[nid] = l_i, u_i
    return nb


def output_matrix_lower(ir: ControllerIR, C: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                        bounds: NodeBounds | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sound lower bounds of ``C @ y`` over the box (y = the concatenated outputs).

    Args:
        C: (m, n_outputs).
    Returns:
        (lower (m,), input coefficients (m, n_inputs)).
    """
    bounds = bounds or crown_bounds(ir, lo, hi)
    # outputs may be several nodes: fold them through a virtual sum
    total = np.zeros(C.shape[0])
    coefs = np.zeros((C.shape[0], ir.n_inputs))
    if len(ir.outputs) == 1:
        return backward_lower(ir, ir.outputs[0], C, lo, hi, bounds)
    off = 0
    # several output nodes: bound each block separately (sound, possibly looser)
    for nid in ir.outputs:
        size = ir.nodes[nid].size
        part, lin = backward_lower(ir, nid, C[:, off:off + size], lo, hi, bounds)
        total += part
        coefs += lin
        off += size
    return total, coefs


def output_bounds(ir: ControllerIR, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sound (lower, upper) of every raw output over the box, each (n_outputs,)."""
    n = ir.n_outputs
    eye = np.eye(n)
    bounds = crown_bounds(ir, lo, hi)
    low, _ = output_matrix_lower(ir, eye, lo, hi, bounds)
    neg, _ = output_matrix_lower(ir, -eye, lo, hi, bounds)
    return low, -neg
