"""OnnxModel: a loaded model, converted to a hwadapter Graph per input signature and run on a device list."""
from __future__ import annotations

import numpy as np

from ..api.errors import InvalidArgumentError
from ..graph.partitioner import partition
from .boundary import assemble, flat, given_signature, given_value, signature, value_type
from .convert import Conversion, check_graph, check_opset, check_supported, convert, inline_functions
from .reader import read_model


class OnnxModel:
    """A loaded ONNX model: `.inputs` / `.outputs` (names), `.graph(shapes)`, `.plan(devices)`, `.run(inputs)`.
    A sequence input is a list of arrays (its tensors become graph inputs `name[i]`), an optional one an array, a
    list or None (empty); outputs come back alike."""

    def __init__(self, proto, input_shapes: dict | None = None):
        self.proto = proto = inline_functions(proto)
        inits = {t.name for t in proto.graph.initializer}
        self._inputs = [vi for vi in proto.graph.input if vi.name not in inits]
        self.inputs = [vi.name for vi in self._inputs]
        self.outputs = [vi.name for vi in proto.graph.output]
        self.input_shapes = dict(input_shapes or {})
        self._conversions: dict = {}
        self._plans: dict = {}
        #: graph inputs converted as constants, per value: converters need their values (see convert.ValueNeed)
        self.value_inputs: list = []
        #: (input shapes, devices, partition arguments) -> plan, for models with no value inputs: a run's lookup
        self._runs: dict = {}
        check_graph(proto)
        check_supported(proto)
        check_opset(proto)
        #: the inputs' declared types (boundary.ValueType: kind, dtype, dims), read and checked once
        self.types = {vi.name: value_type(vi.type, f"graph input {vi.name!r}") for vi in self._inputs}
        self._declared = {n: (t.dims if t.kind == "tensor" else None, t.dtype) for n, t in self.types.items()}

    def declared(self) -> dict:
        """{input name: (shape with None for unknown dims, dtype)} as the model declares them; the shape is None
        when the model does not declare the input's rank, and for a sequence or optional input (`types` says what its
        tensors are). A negative dim is unknown, as onnxruntime reads it: exporters write -1 for a dynamic dim."""
        return dict(self._declared)

    def shapes(self, shapes: dict | None = None) -> dict:
        """Concrete input signatures: given ones first, then `input_shapes`, then declared dims (unknown dims: 1). A
        sequence input's is the list of its tensors' shapes (a boundary.SeqShape), an empty optional's None; they
        have no default."""
        shapes = {**self.input_shapes, **(shapes or {})}
        out = {}
        for name, (dims, _) in self._declared.items():
            if name in shapes:
                out[name] = given_signature(name, self.types[name], shapes[name])
            elif self.types[name].kind != "tensor":
                raise InvalidArgumentError(f"onnx: input {name!r} is {self.types[name]}, whose length or presence "
                                           "is known only when it runs", fix=f"pass input_shapes={{{name!r}: "
                                           "[(...), ...]}} (a shape per tensor; None for an empty optional), or run "
                                           "it: each input signature is converted when it first runs")
            elif dims is None:
                raise InvalidArgumentError(f"onnx: input {name!r} has no declared shape, so the model cannot be "
                                           "converted before it runs", fix=f"pass input_shapes={{{name!r}: (...)}} to "
                                           "load, or run it: each input signature is converted when it first runs")
            else:
                out[name] = tuple(1 if d is None else d for d in dims)
        return out

    def conversion(self, shapes: dict | None = None, values: dict | None = None) -> Conversion:
        """The model converted for inputs of these shapes (once per signature): its graph, or the input whose value
        it needs (`need`); `values` ({graph input: array}) makes constants of the inputs whose value a converter needs
        (a Reshape's shape fed as an input)."""
        key = (tuple(sorted(self.shapes(shapes).items())), _values_key(values))
        if key not in self._conversions:
            self._conversions[key] = convert(self.proto, dict(key[0]), values)
        return self._conversions[key]

    def graph(self, shapes: dict | None = None, values: dict | None = None):
        """The hwadapter Graph for inputs of these shapes (converted once per signature); `values` as `conversion`
        takes them. UnsupportedOpError when a converter needs the value of an input not in `values`."""
        conv = self.conversion(shapes, values)
        if conv.graph is None:
            raise conv.need.error()
        return conv.graph

    def plan(self, devices=("cpu",), shapes: dict | None = None, values: dict | None = None, **partition_args):
        """The graph partitioned over `devices` (hwadapter.graph.partition), cached per signature and devices."""
        devices = [devices] if isinstance(devices, str) else list(devices)
        key = (tuple(sorted(self.shapes(shapes).items())), _values_key(values), tuple(devices),
               tuple(sorted(partition_args.items())))
        if key not in self._plans:
            self._plans[key] = partition(self.graph(shapes, values), devices=devices, **partition_args)
        return self._plans[key]

    def run(self, inputs, devices=("cpu",), **partition_args) -> list:
        """Run on `inputs` (a list in input order, or a dict by name: arrays; a list of arrays for a sequence input,
        None for an empty optional); the outputs as numpy arrays (lists of them for sequences, None for an empty
        optional)."""
        given = self._arrays(inputs)
        shapes = {k: signature(v) for k, v in given.items()}
        arrays = {k: a for name, v in given.items() for k, a in flat(name, v).items()}
        key = (tuple(shapes.values()), tuple(devices) if not isinstance(devices, str) else (devices,),
               tuple(sorted(partition_args.items())))
        hit = None if self.value_inputs else self._runs.get(key)
        if hit is None:
            hit = self._planned(arrays, shapes, devices, partition_args)
            if not self.value_inputs:
                self._runs[key] = hit
        plan, layout = hit
        g = plan.graph
        feed = [arrays[name] for name in g.inputs]
        outs = plan.run(feed) if g.nodes else [None] * len(g.outputs)
        got = {}
        for name, out in zip(g.outputs, outs):
            if name in arrays:  # an input returned as is
                got[name] = np.array(arrays[name])
            elif out is None or name in g.constants:
                got[name] = np.array(g.constants[name])
            else:
                got[name] = out.numpy() if hasattr(out, "numpy") else np.asarray(out)
        seen: set = set()
        return [assemble(v, got, seen) for v in layout]

    def _planned(self, arrays: dict, shapes: dict, devices, partition_args: dict) -> tuple:
        """(plan, the outputs' layout) for these inputs: converted (learning which inputs' values the conversion
        needs) and planned."""
        def values():  # a sequence input's tensor need not be there in every run
            return {n: arrays[n] for n in self.value_inputs if n in arrays}
        conv = self.conversion(shapes, values())
        while conv.graph is None:  # learn which inputs' values the conversion needs; then one graph per such value
            if conv.need.input in self.value_inputs or conv.need.input not in arrays:
                raise conv.need.error()
            self.value_inputs.append(conv.need.input)
            conv = self.conversion(shapes, values())
        return self.plan(devices, shapes, values(), **partition_args), conv.outputs

    def _arrays(self, inputs) -> dict:
        if isinstance(inputs, dict):
            unknown = set(inputs) - set(self.inputs)
            if unknown:
                raise InvalidArgumentError(f"onnx: the model has no input {sorted(unknown)[0]!r}",
                                           fix=f"its inputs are {self.inputs}")
            items = inputs
        else:
            inputs = list(inputs)
            if len(inputs) != len(self.inputs):
                raise InvalidArgumentError(f"onnx: the model takes {len(self.inputs)} inputs {self.inputs}, "
                                           f"got {len(inputs)}", fix="pass one array per input, or a dict by name")
            items = dict(zip(self.inputs, inputs))
        out = {}
        for name in self.inputs:
            if name not in items:
                raise InvalidArgumentError(f"onnx: input {name!r} is missing", fix=f"pass all of {self.inputs}")
            out[name] = given_value(name, self.types[name], items[name])
        return out

    def __repr__(self):
        return f"OnnxModel(inputs={self.inputs}, outputs={self.outputs}, nodes={len(self.proto.graph.node)})"


def load(source, input_shapes: dict | None = None) -> OnnxModel:
    """Load an ONNX model (a path, bytes or a ModelProto); `input_shapes` fixes dims the model leaves open."""
    return OnnxModel(read_model(source), input_shapes)


def _values_key(values: dict | None) -> tuple:
    """A hashable key of input values: names, dtypes, shapes and bytes."""
    return tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in sorted((values or {}).items()))

