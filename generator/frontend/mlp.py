"""A ReLU MLP classifier whose training is the same bits on every machine.

Why not scikit-learn: its ``MLPClassifier`` multiplies through numpy's BLAS and takes
``exp``/``log`` from numpy's CPU-dispatched loops, and L-BFGS amplifies last-digit
differences over thousands of iterations: the same profile gave weights differing by
0.011 on an AVX-512 machine. This trainer follows scikit-learn's model and defaults
(Glorot-uniform initialisation, mean cross-entropy plus ``alpha / (2 n) · ‖W‖²``,
full-batch L-BFGS) but does every float operation through
:mod:`mi_certify.generator.core.numerics` (fixed order, no BLAS, own ``exp``/``log``), so a
seed, a data set and the options give one network on any x86-64 machine.

Method: L-BFGS two-loop recursion with memory 10 (Nocedal & Wright, "Numerical
Optimization", 2nd ed., Algorithm 7.4) and a backtracking Armijo line search
(c1 = 1e-4, halving); stops when the loss improves by less than ``tol`` relative for
10 iterations in a row, the largest gradient entry is below 1e-6, or after ``max_iter``
iterations.
"""

from __future__ import annotations

import numpy as np

from mi_certify.generator.core.numerics import exp, gram, log, matmul, sum_last, vdot as _dot

__all__ = ["DeterministicMLP"]


class DeterministicMLP:
    """ReLU MLP, softmax output over the classes present in ``y``.

    After :meth:`fit`: ``coefs_`` [(in, h1), (h1, h2), (h2, classes)], ``intercepts_``,
    ``classes_`` (sorted labels), ``n_iter_``, ``loss_`` (as scikit-learn names them).
    """

    def __init__(self, hidden_layer_sizes=(16, 16), alpha: float = 1.0, max_iter: int = 3000, random_state: int = 0,
                 tol: float = 1e-7, memory: int = 10):
        self.hidden_layer_sizes = tuple(hidden_layer_sizes)
        self.alpha = float(alpha)
        self.max_iter = int(max_iter)
        self.random_state = int(random_state)
        self.tol = float(tol)
        self.memory = int(memory)

    # -- parameters as one flat vector ------------------------------------------------
    def _shapes(self, n_in: int, n_out: int) -> list[tuple[int, int]]:
        sizes = [n_in, *self.hidden_layer_sizes, n_out]
        return list(zip(sizes[:-1], sizes[1:]))

    def _unpack(self, theta: np.ndarray, shapes) -> tuple[list[np.ndarray], list[np.ndarray]]:
        ws, bs, off = [], [], 0
        for fi, fo in shapes:
            ws.append(theta[off:off + fi * fo].reshape(fi, fo))
            off += fi * fo
            bs.append(theta[off:off + fo])
            off += fo
        return ws, bs

    def _init(self, shapes) -> np.ndarray:
        """Glorot uniform, bound sqrt(6 / (fan_in + fan_out)), weights then biases per layer."""
        rng = np.random.default_rng(self.random_state)
        parts = []
        for fi, fo in shapes:
            bound = np.sqrt(6.0 / (fi + fo))
            parts.append((rng.random(fi * fo) * 2.0 - 1.0) * bound)
            parts.append((rng.random(fo) * 2.0 - 1.0) * bound)
        return np.concatenate(parts)

    def _forward(self, x: np.ndarray, ws, bs) -> list[np.ndarray]:
        acts = [x]
        for k, (w, b) in enumerate(zip(ws, bs)):
            z = matmul(acts[-1], w) + b
            acts.append(z if k == len(ws) - 1 else np.maximum(z, 0.0))
        return acts

    def _loss_grad(self, theta: np.ndarray, x: np.ndarray, onehot: np.ndarray, shapes,
                   extra=None) -> tuple[float, np.ndarray]:
        n = x.shape[0]
        ws, bs = self._unpack(theta, shapes)
        acts = self._forward(x, ws, bs)
        logits = acts[-1]
        top = logits.max(axis=1, keepdims=True)
        e = exp(logits - top)
        s = sum_last(e)
        logp = logits - top - log(s)[:, None]
        penalty = sum(_dot(w.reshape(-1), w.reshape(-1)) for w in ws)
        loss = -_dot(sum_last(onehot * logp), np.ones(n)) / n + self.alpha * penalty / (2.0 * n)
        delta = (e / s[:, None] - onehot) / n
        grads_w, grads_b = [None] * len(ws), [None] * len(ws)
        for k in range(len(ws) - 1, -1, -1):
            grads_w[k] = gram(acts[k], delta) + (self.alpha / n) * ws[k]
            grads_b[k] = gram(np.ones((n, 1)), delta)[0]
            if k:
                delta = matmul(delta, ws[k].T) * (acts[k] > 0)
        if extra is not None:  # an added term (certified training): its loss and gradients, added last
            e_loss, e_w, e_b = extra(ws, bs)
            loss = loss + e_loss
            grads_w = [g + eg for g, eg in zip(grads_w, e_w)]
            grads_b = [g + eg for g, eg in zip(grads_b, e_b)]
        return loss, np.concatenate([p for gw, gb in zip(grads_w, grads_b) for p in (gw.reshape(-1), gb)])

    # -- training -----------------------------------------------------------------------
    def fit(self, x, y, extra=None, warm_start: bool = False) -> "DeterministicMLP":
        """x (n, in) float64, y (n,) integer labels; returns self.

        ``extra``: None, or a function ``(ws, bs) -> (loss, [grad of each W], [grad of each b])``
        whose value is added to the loss (certified training, :mod:`.certified`); it must be a
        fixed-order computation for the result to stay the same on every machine.
        ``warm_start``: start from the fitted parameters (the same classes) instead of the seeded
        initialisation."""
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y)
        self.classes_ = np.unique(y)
        onehot = (y[:, None] == self.classes_[None, :]).astype(np.float64)
        shapes = self._shapes(x.shape[1], len(self.classes_))
        if warm_start:
            theta = np.concatenate([p for w, b in zip(self.coefs_, self.intercepts_) for p in (w.reshape(-1), b)])
        else:
            theta = self._init(shapes)
        f, g = self._loss_grad(theta, x, onehot, shapes, extra)
        hist: list[tuple[np.ndarray, np.ndarray, float]] = []
        stalled, it = 0, 0
        for it in range(1, self.max_iter + 1):
            q = g.copy()
            alphas = []
            for s, yv, rho in reversed(hist):
                a = rho * _dot(s, q)
                alphas.append(a)
                q = q - a * yv
            if hist:
                s, yv, _ = hist[-1]
                q = q * (_dot(s, yv) / _dot(yv, yv))
            for (s, yv, rho), a in zip(hist, reversed(alphas)):
                q = q + s * (a - rho * _dot(yv, q))
            p = -q
            gtp = _dot(g, p)
            if not gtp < 0:  # not a descent direction: restart from the gradient
                hist.clear()
                p, gtp = -g, -_dot(g, g)
            t = 1.0
            while True:
                theta_n = theta + t * p
                f_n, g_n = self._loss_grad(theta_n, x, onehot, shapes, extra)
                if f_n <= f + 1e-4 * t * gtp or t < 1e-12:
                    break
                t *= 0.5
            if not f_n <= f:  # no decrease even at the smallest step
                break
            s, yv = theta_n - theta, g_n - g
            sy = _dot(s, yv)
            if sy > 1e-12 * _dot(yv, yv):
                hist.append((s, yv, 1.0 / sy))
                if len(hist) > self.memory:
                    hist.pop(0)
            stalled = stalled + 1 if f - f_n <= self.tol * max(abs(f), abs(f_n), 1.0) else 0
            theta, f, g = theta_n, f_n, g_n
            if stalled >= 10 or float(np.max(np.abs(g))) < 1e-6:
                break
        ws, bs = self._unpack(theta, shapes)
        self.coefs_ = [w.copy() for w in ws]
        self.intercepts_ = [b.copy() for b in bs]
        self.n_iter_ = it
        self.loss_ = f
        return self

    def _logits(self, x) -> np.ndarray:
        return self._forward(np.asarray(x, dtype=np.float64), self.coefs_, self.intercepts_)[-1]

    def predict_proba(self, x) -> np.ndarray:
        """(n, classes) softmax probabilities."""
        z = self._logits(x)
        e = exp(z - z.max(axis=1, keepdims=True))
        return e / sum_last(e)[:, None]

    def predict(self, x) -> np.ndarray:
        """(n,) labels; ties to the lowest class."""
        return self.classes_[np.argmax(self._logits(x), axis=1)]
