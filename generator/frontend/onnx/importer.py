"""The importer core: walks a checked ONNX graph once, in order, and builds the ControllerIR.

Per graph: bind the non-constant inputs (symbolic or zero leading dimensions bound to 1, noted),
choose the controller outputs (a ZipMap read as the tensor it zips, class labels left out), skip
the nodes that do not feed them (noted), apply each remaining node's handler
(:mod:`~mi_certify.generator.frontend.onnx.registry`; one module per operator family, imported
below), refuse non-finite weights, and materialise each output expression into an
``AffineNode`` (a stripped monotone head recorded as ``ir.head``). Every refusal is a
ModelImportError naming file, node (or graph field) and reason.

The tensors' values are described in :mod:`~mi_certify.generator.frontend.onnx.values`.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from mi_certify.generator.core.errors import ModelImportError
from mi_certify.generator.core.ir import AffineNode, ControllerIR, Head, InputNode, ReluNode
# importing a family module registers its handlers (registry.onnx_handler)
from mi_certify.generator.frontend.onnx import activation, constant, inference, linear, ml, shape  # noqa: F401
from mi_certify.generator.frontend.onnx.head import head_handler
from mi_certify.generator.frontend.onnx.registry import DEFAULT_DOMAINS, ML_DOMAIN, Handler, lookup, registered
from mi_certify.generator.frontend.onnx.values import Eye, Headed, Lin, Refused, is_lin

#: Largest number of (flattened) network inputs the importer accepts.
MAX_INPUTS = 4096

#: What to do instead, for operators exporters often emit that the IR does not hold (yet).
_HINTS = {
    "Tanh": ": it is not piecewise linear, so the affine + ReLU IR has no exact solver for it; train the "
            "controller with ReLU (mi-certify train does)",
    "ArgMax": ": a class-index output is not a controller output; export the scores or probabilities "
              "(the spec's decode picks the action from them)",
}
#: What to do instead, for ai.onnx.ml operators (skl2onnx) the importer does not read.
_ML_HINTS = {
    "ZipMap": "export with options={'zipmap': False}",
    "ArrayFeatureExtractor": "it belongs to the class-label path; the controller reads the probabilities output, "
                             "so export them as a graph output (skl2onnx does)",
    "LabelEncoder": "it belongs to the class-label path; the controller reads the probabilities output",
}
_ML_DEFAULT_HINT = ("export a ReLU MLPClassifier / MLPRegressor or a LogisticRegression / LinearRegression, "
                    "with options={'zipmap': False}")
_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)
#: A TensorProto's data fields, cleared once read when the importer may release them.
_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def supported_ops() -> list[str]:
    """Names of the ONNX operators the importer accepts."""
    return registered("")


def supported_ml_ops() -> list[str]:
    """Names of the ai.onnx.ml operators the importer reads (ZipMap and label outputs are left out, not read)."""
    return registered(ML_DOMAIN)


def backward_slice(graph: onnx.GraphProto, tensors) -> set[int]:
    """Indices of the nodes the ``tensors`` depend on."""
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    need: set[int] = set()
    stack = list(tensors)
    while stack:
        i = producer.get(stack.pop())
        if i is None or i in need:
            continue
        need.add(i)
        stack.extend(graph.node[i].input)
    return need


class Importer:
    """One import of ``model`` (read from ``path``, named in errors): :meth:`run` once.

    What handlers use: ``node`` (the ONNX node being imported), ``node_desc`` (how errors name it),
    ``opset`` (the default-domain opset), ``notes`` (the import notes, in order), :meth:`fail`,
    :meth:`const`, :meth:`input_name`, :meth:`relu`.
    """

    def __init__(self, path: Path, model: onnx.ModelProto):
        self.path = path
        self.model = model
        self.arrays: dict[str, np.ndarray] | None = None   # the initializers, once taken (take_initializers)
        self.uses: dict[str, int] = {}
        self.nodes: list = []
        self.notes: list[str] = []
        self.opset = 0
        for imp in model.opset_import:
            if imp.domain in DEFAULT_DOMAINS:
                self.opset = imp.version
        self.env: dict[str, object] = {}
        self.node_desc = "graph"
        self.node: onnx.NodeProto | None = None

    # ---------------------------------------------------------------- errors
    def fail(self, reason: str, where: str | None = None) -> ModelImportError:
        """The error to raise: file, ``where`` (default: the current node) and reason."""
        return ModelImportError(reason, file=str(self.path), where=where or self.node_desc)

    # --------------------------------------------------------------- values
    def get(self, name: str):
        """The value of tensor ``name`` (None for an omitted optional input "")."""
        if name == "":
            return None
        if name not in self.env:
            raise self.fail(f"input tensor '{name}' is not produced by any earlier node")
        v = self.env[name]
        if isinstance(v, Refused):
            raise self.fail(f"reads '{name}': {v.reason}")
        return v

    def const(self, name: str, what: str) -> np.ndarray:
        """The value of tensor ``name``, which must be a constant (``what`` names it in the error)."""
        v = self.get(name)
        if v is None or is_lin(v):
            raise self.fail(f"{what} must be a constant tensor")
        return np.asarray(v)

    def input_name(self, k: int) -> str:
        """The name of input ``k`` of the current node; raises when the node has fewer inputs."""
        node = self.node
        if k >= len(node.input):
            raise self.fail(f"input {k} is missing")
        return node.input[k]

    # ----------------------------------------------------------- IR nodes
    def materialize(self, lin: Lin) -> int:
        """Node id holding ``lin`` (flattened); reuse a node when lin is its identity."""
        if len(lin.terms) == 1 and not np.any(lin.bias):
            (src, m), = lin.terms.items()
            if isinstance(m, Eye) or (m.shape[0] == m.shape[1] and np.array_equal(m, np.eye(m.shape[0]))):
                return src
        terms = tuple(sorted(((s, np.ascontiguousarray(m, dtype=np.float64)) for s, m in lin.terms.items()),
                             key=lambda t: t[0]))
        self.nodes.append(AffineNode(terms, np.ascontiguousarray(lin.bias, dtype=np.float64)))
        return len(self.nodes) - 1

    def node_lin(self, nid: int, shape: tuple[int, ...]) -> Lin:
        """Node ``nid``'s output as an expression of shape ``shape``."""
        size = self.nodes[nid].size
        return Lin(shape, {nid: Eye(size)}, np.zeros(size))

    def relu(self, x: Lin) -> Lin:
        """max(x, 0) of an expression: materialised operand, one ReluNode."""
        src = self.materialize(x)
        self.nodes.append(ReluNode(src, self.nodes[src].size))
        return self.node_lin(len(self.nodes) - 1, x.shape)

    # ----------------------------------------------------------------- run
    def run(self) -> ControllerIR:
        """The ControllerIR of the graph; raises ModelImportError. NaN or infinite values met while
        folding constants are refused by :meth:`check_finite` with a located error, so numpy's
        floating-point warnings (a second and third stderr line) are silenced here."""
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            return self._run()

    def _run(self) -> ControllerIR:
        graph = self.model.graph
        input_names = self.bind_inputs(graph)
        chosen = self.select_outputs(graph)
        needed = backward_slice(graph, [t for _, t in chosen])
        skipped = [n.op_type for i, n in enumerate(graph.node) if i not in needed]
        if skipped:
            self.notes.append(f"{len(skipped)} node(s) not on the path to the controller output skipped "
                              f"({', '.join(sorted(set(skipped)))})")
        keep = {t for _, t in chosen}
        for i in needed:
            for name in graph.node[i].input:
                self.uses[name] = self.uses.get(name, 0) + 1
        for i, node in enumerate(graph.node):
            if i in needed:
                self.apply(i, node)
                self.drop_consumed(node, keep)
        self.node_desc = "graph"
        self.check_finite()
        return self.read_outputs(chosen, input_names)

    def take_initializers(self) -> None:
        """Read every initializer into an array now (refusing one as :meth:`bind_inputs` would) and
        let the importer hold a copy of the model without their data: once the caller drops its
        reference to the model it gave, the parsed protobuf (one arena, freed only as a whole: 257 MB
        at tllverifybench N = 64) is freed, and the weights live on in one copy, each released once
        consumed (:meth:`drop_consumed`). Clears the data of the given model's initializers."""
        arrays = {}
        for t in self.model.graph.initializer:
            arrays[t.name] = self.initializer(t)
            for field in _DATA_FIELDS:
                t.ClearField(field)
        light = onnx.ModelProto()
        light.CopyFrom(self.model)
        self.model, self.arrays = light, arrays

    def drop_consumed(self, node: onnx.NodeProto, keep: set[str]) -> None:
        """Forget the values ``node`` read for the last time (initializers' arrays, intermediate
        expressions), except the tensors read as controller outputs: at tllverifybench N = 64 each
        layer's weights are released once composed instead of living to the end of the import."""
        for name in node.input:
            left = self.uses.get(name, 0) - 1
            self.uses[name] = left
            if left <= 0 and name not in keep:
                self.env.pop(name, None)

    def initializer(self, t: onnx.TensorProto) -> np.ndarray:
        """An initializer's array; one whose data does not fill its dims (or that numpy cannot read)
        is refused naming it (the checker lets typed ``*_data`` fields of the wrong length through)."""
        try:
            return numpy_helper.to_array(t)
        except (ValueError, TypeError, KeyError) as exc:
            raise self.fail(f"initializer data does not match its dims {list(t.dims)} and type "
                            f"({type(exc).__name__}: {exc})", where=f"initializer '{t.name}'") from None

    def bind_inputs(self, graph: onnx.GraphProto) -> tuple[str, ...]:
        """Initializers as constants, the other graph inputs as one InputNode (node 0, in graph order,
        at most MAX_INPUTS values); returns the input names."""
        inits = self.arrays if self.arrays is not None else {t.name: self.initializer(t) for t in graph.initializer}
        self.arrays = None
        for name, arr in inits.items():
            self.env[name] = arr
        inputs = [vi for vi in graph.input if vi.name not in inits]
        shadowed = [vi.name for vi in graph.input if vi.name in inits]
        if shadowed:
            self.notes.append(f"{len(shadowed)} initializer(s) also listed as graph inputs "
                              f"({', '.join(shadowed[:3])}{', ...' if len(shadowed) > 3 else ''}); treated as constants")
        if not inputs:
            raise self.fail("the graph has no non-constant input", where="graph.input")
        shapes = [self.input_shape(vi) for vi in inputs]
        total = int(sum(np.prod(s, dtype=np.int64) for s in shapes))
        if total > MAX_INPUTS:
            raise self.fail(f"the inputs hold {total} values; at most {MAX_INPUTS} are supported", where="graph.input")
        self.nodes.append(InputNode(total))
        offset = 0
        for vi, shape in zip(inputs, shapes):
            n = int(np.prod(shape, dtype=np.int64))
            m = np.zeros((n, total))
            m[np.arange(n), offset + np.arange(n)] = 1.0
            self.env[vi.name] = Lin(shape, {0: m}, np.zeros(n))
            offset += n
        return tuple(vi.name for vi in inputs)

    def input_shape(self, vi: onnx.ValueInfoProto) -> tuple[int, ...]:
        """Shape of a floating-point graph input; a symbolic or zero leading (batch) dimension is bound to 1
        (noted), any other symbolic dimension refused."""
        tt = vi.type.tensor_type
        if tt.elem_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16):
            raise self.fail(f"input '{vi.name}' has element type {onnx.TensorProto.DataType.Name(tt.elem_type)}; "
                            "a floating-point tensor is required", where=f"graph.input[{vi.name}]")
        if not tt.HasField("shape"):
            raise self.fail(f"input '{vi.name}' has no shape", where=f"graph.input[{vi.name}]")
        dims = []
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            elif axis == 0:
                label = d.dim_param or "?"
                self.notes.append(f"input '{vi.name}': symbolic batch dimension '{label}' bound to 1")
                dims.append(1)
            else:
                raise self.fail(f"input '{vi.name}' has a symbolic dimension at axis {axis} "
                                f"('{d.dim_param}'); only the leading (batch) axis may be symbolic",
                                where=f"graph.input[{vi.name}]")
        return tuple(dims)

    def handler_of(self, node: onnx.NodeProto) -> Handler:
        """The registered handler of ``node``, bound to this importer; raises ModelImportError (with a
        hint where one is known) for an operator or domain without one."""
        if node.domain == ML_DOMAIN:
            handler = lookup(ML_DOMAIN, node.op_type)
            if handler is None:
                raise self.fail(f"operator ai.onnx.ml {node.op_type} is not supported: "
                                f"{_ML_HINTS.get(node.op_type, _ML_DEFAULT_HINT)} (supported ai.onnx.ml: "
                                f"{', '.join(supported_ml_ops())})")
        elif node.domain not in DEFAULT_DOMAINS:
            raise self.fail(f"operator domain '{node.domain}' ({node.op_type}) is not supported")
        else:
            handler = lookup("", node.op_type)
        if handler is None:
            raise self.fail(f"operator {node.op_type} is not supported{_HINTS.get(node.op_type, '')} "
                            f"(supported: {', '.join(supported_ops())})")
        return functools.partial(handler, self)

    def apply(self, i: int, node: onnx.NodeProto) -> None:
        """Import graph node ``i``: its outputs' values into the environment."""
        label = f"'{node.name}'" if node.name else f"#{i}"
        self.node_desc = f"node {label} ({node.op_type})"
        handler = self.handler_of(node)
        self.node = node
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        args = [self.get(n) for n in node.input]
        heads = [v for v in args if isinstance(v, Headed)]
        if heads:
            handler = head_handler(self, node.op_type, handler, heads[0])
        try:
            outs = handler(args, attrs)
        except ModelImportError:
            raise
        except (ValueError, IndexError, TypeError) as exc:
            raise self.fail(f"cannot evaluate: {exc}") from None
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        for name, val in zip(node.output, outs):
            if name:
                self.env[name] = val

    def check_finite(self) -> None:
        """Refuse NaN or infinite weights and biases (after constant folding)."""
        for node in self.nodes:
            if isinstance(node, AffineNode) and not (np.all(np.isfinite(node.bias)) and
                                                     all(np.all(np.isfinite(w)) for _, w in node.terms)):
                raise self.fail("weights or biases contain NaN or infinity (after folding constants)")

    def read_outputs(self, chosen: list[tuple[str, str]], input_names: tuple[str, ...]) -> ControllerIR:
        """Materialise the ``chosen`` outputs (a head stripped to its logits, recorded) into the IR."""
        outputs, head = [], None
        for gname, tname in chosen:
            v = self.env.get(tname)
            if v is None:
                raise self.fail(f"graph output '{gname}' is never produced", where=f"graph.output[{gname}]")
            if isinstance(v, Headed):
                if len(chosen) > 1:
                    raise self.fail(f"a {v.kind} head ({v.node}) on output '{gname}' beside other outputs: the "
                                    "decode over the concatenation is not the decode over the logits; export one "
                                    "output", where=f"graph.output[{gname}]")
                head = Head(v.kind, v.node, tname, v.readout, v.extra_nodes)
                self.notes.append(head.describe() + "; decode argmax/argmin is unchanged (the head is strictly "
                                  "monotone); confidence: softmax is the softmax of these logits")
                v = v.lin
            if not is_lin(v):
                raise self.fail(f"graph output '{gname}' does not depend on the input", where=f"graph.output[{gname}]")
            outputs.append(self.materialize(v))
        return ControllerIR(tuple(self.nodes), tuple(outputs), input_names,
                            tuple(t for _, t in chosen), tuple(self.notes), head)

    def select_outputs(self, graph: onnx.GraphProto) -> list[tuple[str, str]]:
        """(graph output, tensor read) of each controller output: a ZipMap's sequence of maps is read as
        the probability tensor it zips; a non-float output (a class label) is left out, with a note."""
        producers = {o: n for n in graph.node for o in n.output if o}
        chosen = []
        for vo in graph.output:
            kind = vo.type.WhichOneof("value")
            where = f"graph.output[{vo.name}]"
            if kind != "tensor_type":
                prod = producers.get(vo.name)
                if prod is not None and prod.op_type == "ZipMap" and prod.domain == ML_DOMAIN:
                    self.notes.append(f"output '{vo.name}' (ZipMap: per-class maps) read as the probability tensor "
                                      f"'{prod.input[0]}' it zips; actions = class indices in order")
                    chosen.append((vo.name, prod.input[0]))
                    continue
                raise self.fail(f"graph output '{vo.name}' is a {str(kind).replace('_type', '')}, not a tensor; "
                                "export tensors (skl2onnx: options={'zipmap': False})", where=where)
            elem = vo.type.tensor_type.elem_type
            if elem not in _FLOAT_TYPES:
                self.notes.append(f"output '{vo.name}' ({onnx.TensorProto.DataType.Name(elem)}, a class label) "
                                  "ignored: the action is decoded from the other output")
                continue
            chosen.append((vo.name, vo.name))
        if not chosen:
            raise self.fail("no floating-point graph output (only class labels); export the scores or "
                            "probabilities", where="graph.output")
        return chosen
