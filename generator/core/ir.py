"""ControllerIR: a checked graph of affine maps and ReLUs.

The IR is what every later stage (verification, distillation, emission) reads; it
never depends on ONNX. A network is a list of nodes in topological order, each
producing one flat float64 vector:

* ``InputNode``: the flattened, concatenated graph inputs (size ``n_in``).
* ``AffineNode``: ``y = sum_k W_k @ x_{src_k} + b``. Several terms express skip
  connections and Add/Sub of two tensors exactly; a source that appears twice
  (``Add(x, x)``) is merged into one term with summed weights, so no solver ever
  sees a repeated variable in one equation (Marabou #669).
* ``ReluNode``: ``y = max(x_src, 0)`` elementwise.

A tensor with several consumers is simply a node id referenced several times, so
fan-out stays exact (Marabou's parsers edit equations in place there; see
shared/cases/marabou_add_fanout).

Shapes: ``W_k`` is (size(node), size(src_k)) float64, ``b`` is (size(node),)
float64. The network output is the concatenation of ``outputs`` (node ids).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from mi_certify.generator.core.numerics import held_sparse, matmul, operand, sparse_coo

#: Per IR (by id, dropped with it): matrices prepared from its weights (:func:`weight_memo`).
_MEMO: dict[int, tuple[weakref.ref, dict]] = {}


def weight_memo(ir: "ControllerIR") -> dict:
    """A dict kept for as long as ``ir`` lives, for operands made once from its weights (an IR is
    immutable once checked): :func:`prepared_terms`, and the bound passes' "compactable" in
    :mod:`mi_certify.verification.nn.bounds`."""
    entry = _MEMO.get(id(ir))
    if entry is None or entry[0]() is not ir:
        entry = (weakref.ref(ir), {})
        _MEMO[id(ir)] = entry
        weakref.finalize(ir, _MEMO.pop, id(ir), None)
    return entry[1]


#: The matrices :func:`prepared_terms` makes from a weight matrix w.
_FORMS = {"w": lambda w: w, "abs": np.abs, "wT": lambda w: w.T, "posT": lambda w: np.maximum(w, 0.0).T,
          "negT": lambda w: np.minimum(w, 0.0).T, "absT": lambda w: np.abs(w).T}


def prepared_terms(ir: "ControllerIR", nid: int, form: str) -> list:
    """``(src, m)`` per term ``(src, w)`` of affine node ``nid``, m one of the forms of w as
    :func:`~.numerics.operand` (sparse or contiguous; the products are bit for bit those of the
    plain array): ``"w"``, ``"abs"`` (|w|), ``"wT"``, ``"posT"`` (max(w, 0)ᵀ), ``"negT"`` (min(w, 0)ᵀ),
    ``"absT"`` (|w|ᵀ). Made once per IR and form and shared by every user (``node_values``, the
    bound passes, the falsifier's gradient): a transposed view would be copied, and its finiteness
    checked, at every product (268 MB per call on tllverifybench N = 64). A sparse, finite w's forms
    are made from its nonzeros alone (:func:`_sparse_form`), never as dense arrays. KeyError: another form."""
    memo = weight_memo(ir)
    key = (form, nid)
    if key not in memo:
        make = _FORMS[form]
        out = []
        for t, (src, w) in enumerate(ir.nodes[nid].terms):
            nz = memo.get(("nonzeros", nid, t))
            if nz is None:
                nz = memo[("nonzeros", nid, t)] = _nonzeros(w)
            out.append((src, operand(make(w)) if nz is False else _sparse_form(w.shape, *nz, form)))
        memo[key] = out
    return memo[key]


def _nonzeros(w: np.ndarray):
    """(rows, cols, values) of w's nonzeros in row-major order when w is finite and
    :func:`~.numerics.held_sparse` (then every form of it is as sparse, and :func:`operand` holds it as
    :class:`~.numerics.Sparse`); False otherwise."""
    if not held_sparse(w) or not np.isfinite(w).all():
        return False
    rows, cols = np.nonzero(w)
    return rows, cols, np.asarray(w[rows, cols], dtype=np.float64)


def _sparse_form(shape: tuple[int, int], rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, form: str):
    """The :class:`~.numerics.Sparse` of ``form`` (:data:`_FORMS`) of the finite matrix with these nonzeros:
    the entries :func:`~.numerics.sparse` would find in the dense form, with the same values (max(w, 0)
    keeps w's positive entries, min(w, 0) its negative ones; a transpose reorders them column-major)."""
    if form.endswith("T"):
        order = np.lexsort((rows, cols))
        rows, cols, vals, shape = cols[order], rows[order], vals[order], (shape[1], shape[0])
    if form in ("abs", "absT"):
        vals = np.abs(vals)
    elif form in ("posT", "negT"):
        keep = vals > 0 if form == "posT" else vals < 0
        rows, cols, vals = rows[keep], cols[keep], vals[keep]
    return sparse_coo(shape, rows, cols, vals)


@dataclass(frozen=True)
class InputNode:
    """The network input vector, size ``size``."""

    size: int
    kind: str = field(default="input", init=False)


@dataclass(frozen=True)
class AffineNode:
    """``y = sum_k terms[k][1] @ x[terms[k][0]] + bias``; terms sorted by source id."""

    terms: tuple[tuple[int, np.ndarray], ...]
    bias: np.ndarray
    kind: str = field(default="affine", init=False)

    @property
    def size(self) -> int:
        return int(self.bias.shape[0])


@dataclass(frozen=True)
class ReluNode:
    """``y = max(x[src], 0)``."""

    src: int
    size: int
    kind: str = field(default="relu", init=False)


Node = InputNode | AffineNode | ReluNode


@dataclass(frozen=True)
class Head:
    """A strictly monotone output head the importer stripped (the IR outputs its logits).

    Softmax (last axis), LogSoftmax and Sigmoid keep the order of the logits in each row, so
    argmax/argmin ``decode`` is the same on the logits as on the head's output; the IR and every
    onnxruntime comparison use the logits. Attributes:
        kind: ``softmax``, ``logsoftmax`` or ``sigmoid`` (elementwise).
        node: the ONNX node that applied it (for reports), e.g. ``node 'sm' (Softmax)``.
        output: the ONNX tensor holding the head's output (probabilities), read back to confirm
            that it orders the actions as the logits do.
        readout: how the onnxruntime logits (the IR output, concatenated) are read:
            ``(tensor, sign)`` segments, ``sign`` +1 / -1 (the tensor or its negation) or 0 (zeros of
            its size: skl2onnx's binary ``[1 - sigmoid(z), sigmoid(z)] = softmax([0, z])``).
        extra_nodes: serialized ONNX NodeProtos added to the in-memory copy of the model so that
            onnxruntime computes a logits tensor the graph does not expose (a LinearClassifier's raw
            scores); the shipped file is never changed.
        detail: one line for reports.
    """

    kind: str
    node: str
    output: str
    readout: tuple[tuple[str, int], ...]
    extra_nodes: tuple[bytes, ...] = ()
    detail: str = ""

    def describe(self) -> str:
        return (f"head {self.kind} stripped ({self.node}): the IR outputs its logits, tensor(s) "
                f"{', '.join(('-' if g < 0 else '0·' if g == 0 else '') + repr(t) for t, g in self.readout)}; "
                f"the head's output {self.output!r} is read back to confirm the order")


@dataclass(frozen=True)
class ControllerIR:
    """A checked affine/ReLU network.

    Attributes:
        nodes: topologically ordered; node 0 is the ``InputNode``.
        outputs: node ids whose values, concatenated, are the network output.
        input_names: ONNX graph input names, in order (flattened and concatenated).
        output_names: ONNX graph output names, in order.
        notes: import remarks for the report (bound batch dims, folded constants...).
        head: the monotone output head stripped at import (:class:`Head`), or None.
    """

    nodes: tuple[Node, ...]
    outputs: tuple[int, ...]
    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    head: Head | None = None

    @property
    def n_inputs(self) -> int:
        return self.nodes[0].size

    @property
    def n_outputs(self) -> int:
        return sum(self.nodes[i].size for i in self.outputs)

    @property
    def n_relus(self) -> int:
        return sum(n.size for n in self.nodes if isinstance(n, ReluNode))

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        """Evaluate the network in float64, in fixed order (:mod:`.numerics`: the same bits on
        every machine).

        Args:
            x: (n_inputs,) or (batch, n_inputs) array.
        Returns:
            (n_outputs,) or (batch, n_outputs) float64 array.
        """
        xs = np.asarray(x, dtype=np.float64)
        single = xs.ndim == 1
        if single:
            xs = xs[None, :]
        if xs.shape[1] != self.n_inputs:
            raise ValueError(f"expected {self.n_inputs} inputs, got {xs.shape[1]}")
        vals = self.node_values(xs)
        out = np.concatenate([vals[i] for i in self.outputs], axis=1)
        return out[0] if single else out

    def node_values(self, xs: np.ndarray) -> list[np.ndarray]:
        """Every node's value for the batch ``xs`` (batch, n_inputs), fixed order: a list of
        (batch, size_i) float64 arrays in node order."""
        vals: list[np.ndarray] = []
        for nid, node in enumerate(self.nodes):
            if isinstance(node, InputNode):
                vals.append(xs)
            elif isinstance(node, AffineNode):
                acc = np.broadcast_to(node.bias, (xs.shape[0], node.size)).copy()
                for src, wt in prepared_terms(self, nid, "wT"):
                    acc += matmul(vals[src], wt)
                vals.append(acc)
            else:
                vals.append(np.maximum(vals[node.src], 0.0))
        return vals

    def describe(self) -> list[str]:
        """One line per node, for reports: id, kind, size, sources."""
        lines = []
        for i, node in enumerate(self.nodes):
            if isinstance(node, InputNode):
                lines.append(f"%{i} = input[{node.size}]")
            elif isinstance(node, AffineNode):
                srcs = " + ".join(f"W{w.shape[0]}x{w.shape[1]}·%{s}" for s, w in node.terms)
                lines.append(f"%{i} = affine[{node.size}]({srcs} + b)")
            else:
                lines.append(f"%{i} = relu[{node.size}](%{node.src})")
        lines.append("output = concat(" + ", ".join(f"%{i}" for i in self.outputs) + ")")
        if self.head is not None:
            lines.append(self.head.describe())
        return lines
