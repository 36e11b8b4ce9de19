"""The ONNX writer of the exporter: nodes each in a type its schema allows and onnxruntime runs, and ExportError."""
from __future__ import annotations

import hashlib
import re

import numpy as np

from ..api.errors import InvalidArgumentError
from . import export_types
from .export_types import OPSET


class ExportError(InvalidArgumentError):
    """A graph holds an op (an attribute value, a dtype) that has no exact ONNX form onnxruntime runs."""


class Writer:
    """Collects ONNX nodes and initializers: `node` adds a node, `const` an initializer, `child` a subgraph's writer."""

    # A writer of a branch or loop body shares its root's names, initializers and node owners: every name is unique
    # in the model (nothing in a subgraph shadows an outer name), and every initializer is the main graph's, which
    # subgraphs read by name.
    def __init__(self, graph, onnx, parent: "Writer | None" = None, where: str = ""):
        self.graph, self.onnx, self.nodes = graph, onnx, []
        self.root = parent.root if parent is not None else self
        if parent is None:
            self.inits, self._count = [], 0
            self.owner = {}  # ONNX node name -> (the hwadapter node it was written for, where that node is)
            self.taken = set(graph.values) | set(graph.inputs) | set(graph.constants)  # every name in the model
            self._hoisted = None  # digest of an array -> the initializer holding it (subgraphs' constants)
        else:
            self.inits, self.owner, self.taken = parent.inits, parent.owner, parent.taken
        self.where = (parent.where if parent is not None else "") + where  # the branch or body, for errors
        self.current = None  # the hwadapter node being written (names and errors)
        self.types = {k: np.dtype(v.dtype) for k, v in graph.values.items()}  # every ONNX value's dtype
        self.types.update({k: np.asarray(a).dtype for k, a in graph.constants.items()})
        self.shapes = {}  # the static shape of a value made by the exporter that stands for a graph value
        self._casts = {}  # (ref, dtype) -> the value `cast` made: a value widened for several nodes is cast once

    def child(self, graph, where: str) -> "Writer":
        """A writer of a subgraph over `graph` (its names already unique in the model)."""
        return Writer(graph, self.onnx, self, where)

    def fresh(self, stem: str) -> str:
        return self._numbered(f"{self.current.name if self.current else 'export'}/{stem}")

    def unique(self, stem: str) -> str:
        """A name no value or node of the model has yet: `stem`, else `stem_<n>`."""
        if stem in self.root.taken:
            return self._numbered(stem)
        self.root.taken.add(stem)
        return stem

    def _numbered(self, stem: str) -> str:
        root = self.root
        while True:
            root._count += 1
            name = f"{stem}_{root._count}"
            if name not in root.taken:
                root.taken.add(name)
                return name

    def hoist(self, array) -> str:
        """The main graph's initializer holding `array` (one per distinct array): a branch's or body's constant."""
        root, arr = self.root, np.asarray(array)
        if root._hoisted is None:
            root._hoisted = {_digest(a): k for k, a in root.graph.constants.items()}
        key = _digest(arr)
        if key not in root._hoisted:
            name = root._hoisted[key] = self.unique("const")
            root.inits.append(self.onnx.numpy_helper.from_array(arr, name))
        return root._hoisted[key]

    def adopt(self, graph) -> None:
        """Know the dtypes and shapes of `graph`'s values, written into this writer's graph (a loop's first test)."""
        for name, v in graph.values.items():
            if name not in self.types:
                self.types[name], self.shapes[name] = np.dtype(v.dtype), tuple(v.shape)

    def value_info(self, ref: str):
        """The typed ValueInfoProto of `ref` (a graph output, a subgraph's input or output)."""
        helper = self.onnx.helper
        dtype = helper.np_dtype_to_tensor_dtype(self.dtype(ref))
        return helper.make_tensor_value_info(ref, dtype, list(self.shape(ref)))

    def outputs(self, refs, alias) -> list:
        """Value infos of the graph outputs `refs`, each made by a node of this writer (else an Identity `alias(i)`)."""
        # an input, a constant, an outer graph's value or an output listed twice: ONNX outputs are each made by a node
        made = {o for node in self.nodes for o in node.output}
        infos, seen = [], set()
        for i, ref in enumerate(refs):
            if ref in seen or ref not in made:
                name = self.unique(alias(i))
                self.types[name] = self.dtype(ref)
                self.shapes[name] = self.shape(ref)
                self._emit("Identity", [ref], [name], {})
                infos.append(self.value_info(name))
            else:
                infos.append(self.value_info(ref))
            seen.add(ref)
        return infos

    def node(self, op_type: str, inputs, outputs=None, **attrs) -> str:
        """Add an ONNX node computing in a type its schema allows (inputs widened, outputs cast back); its (first)
        output name."""
        inputs, outputs = list(inputs), list(outputs) if outputs is not None else [self.fresh(op_type)]
        if op_type == "Cast":
            self._emit(op_type, inputs, outputs, attrs)
            self.types[outputs[0]] = self.onnx.helper.tensor_dtype_to_np_dtype(attrs["to"])
            return outputs[0]
        in_strs, out_strs, allowed = export_types.signature(self.onnx.defs, op_type)
        in_params = export_types.input_params(in_strs, len(inputs))
        out_params = export_types.input_params(out_strs, len(outputs))
        bound, wide = {}, {}  # type parameter -> eager's dtype, and the dtype the node computes in
        for ref, param in zip(inputs, in_params):
            if ref and param in allowed and param not in bound and self.types.get(ref) is not None:
                bound[param] = self.types[ref]
                wide[param] = export_types.choose(op_type, bound[param], allowed[param])
                if wide[param] is None:
                    self._untyped(op_type, bound[param], allowed[param])
        ins = [self.cast(ref, wide[p]) if ref and p in wide and wide[p] != bound[p] else ref
               for ref, p in zip(inputs, in_params)]
        outs = [self.fresh(op_type) if p in wide and wide[p] != bound[p] else o
                for o, p in zip(outputs, out_params)]
        self._emit(op_type, ins, outs, attrs)
        for o, narrow, p in zip(outs, outputs, out_params):
            if o != narrow:  # computed wider: back to eager's dtype (integers keep their low bits, as eager wraps)
                self.types[o] = wide[p]
                self._emit("Cast", [o], [narrow], {"to": self.onnx.helper.np_dtype_to_tensor_dtype(bound[p])})
            self.types[narrow] = export_types.output_dtype(p, bound, allowed)
        return outputs[0]

    def _untyped(self, op_type: str, dt, allowed) -> None:
        names = ", ".join(d.name for d in allowed if export_types.usable(op_type, d, allowed))
        why = (f"onnxruntime has no {dt.name} kernel for ONNX {op_type}" if dt in allowed else
               f"ONNX {op_type} does not take {dt.name} at opset {OPSET}")
        self.fail(f"{why}, nor a wider type that holds {dt.name} exactly",
                  fix=f"cast the {dt.name} tensor to one of {names or 'the types ONNX allows'} before this op")

    def _emit(self, op_type: str, inputs, outputs, attrs) -> None:
        name = self.fresh(op_type)
        self.owner[name] = (self.current, self.where)
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, outputs, name=name, **attrs))

    def control(self, op_type: str, inputs, outputs, **attrs) -> None:
        """An If or Loop node: its values keep their types (they are the branches' or body's), nothing is widened."""
        self._emit(op_type, list(inputs), list(outputs), attrs)

    def cast(self, ref: str, dt) -> str:
        """ref as dtype dt (a new value, made once per ref and dtype)."""
        key = (ref, np.dtype(dt))
        if key in self._casts:
            return self._casts[key]
        out = self._casts[key] = self.fresh("Cast")
        self._emit("Cast", [ref], [out], {"to": self.onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dt))})
        self.types[out] = np.dtype(dt)
        if ref in self.shapes or ref in self.graph.values:
            self.shapes[out] = self.shape(ref)
        return out

    def const(self, array, dtype=None) -> str:
        """A new initializer holding `array`."""
        arr = np.asarray(array, dtype=dtype)
        name = self.fresh("const")
        self.inits.append(self.onnx.numpy_helper.from_array(arr, name))
        self.types[name] = arr.dtype
        return name

    def ints(self, values) -> str:
        return self.const(np.asarray(list(values), np.int64).reshape(-1))

    def dtype(self, ref) -> np.dtype:
        return self.types[ref]

    def shape(self, ref) -> tuple:
        return self.shapes[ref] if ref in self.shapes else tuple(self.graph.values[ref].shape)

    def fail(self, why: str, fix: str = "", node=None, where: str | None = None) -> None:
        """Raise the ExportError of the node being written (or `node`, in the branch or body `where`)."""
        n = node or self.current
        where = self.where if where is None else where
        raise ExportError(f"onnx export: {where}node {n.name!r} (op {n.op!r}): {why}",
                          fix=fix or "export the function without this op, or write it with ops that have an ONNX "
                                     "form (docs/onnx.md lists them)")


def refuse_checked(w, err: Exception) -> None:
    """onnx.checker's error as an ExportError naming the hwadapter node whose ONNX node it rejects."""
    text = str(err)
    culprit = next((w.owner[t] for t in re.findall(r"[\w./:-]+", text) if w.owner.get(t, (None,))[0] is not None),
                   None)
    if culprit is None:
        raise ExportError(f"onnx export: onnx.checker rejects the written model: {text}",
                          fix="report this as a bug of hwadapter's exporter, with the function exported") from err
    try:
        w.fail(f"onnx.checker rejects the ONNX written for it: {text}",
               fix="report this as a bug of hwadapter's exporter; meanwhile export without this op", node=culprit[0],
               where=culprit[1])
    except ExportError as ours:
        raise ours from err


def _digest(arr) -> tuple:
    arr = np.asarray(arr, order="C")
    return arr.dtype.str, arr.shape, hashlib.sha256(arr.tobytes()).hexdigest()
