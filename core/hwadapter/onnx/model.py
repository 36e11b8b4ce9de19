"""OnnxModel: a loaded model, converted to a hwadapter Graph per input signature and run on a device list."""
from __future__ import annotations

import numpy as np

from ..api.errors import InvalidArgumentError
from ..graph.partitioner import partition
from .convert import Conversion, check_graph, check_opset, check_supported, convert, inline_functions
from .node import value_dtype
from .reader import read_model


class OnnxModel:
    """A loaded ONNX model: `.inputs` / `.outputs` (names), `.graph(shapes)`, `.plan(devices)`, `.run(inputs)`."""

    def __init__(self, proto, input_shapes: dict | None = None):
        self.proto = proto = inline_functions(proto)
        inits = {t.name for t in proto.graph.initializer}
        self._inputs = [vi for vi in proto.graph.input if vi.name not in inits]
        self.inputs = [vi.name for vi in self._inputs]
        self.outputs = [vi.name for vi in proto.graph.output]
        self.input_shapes = dict(input_shapes or {})
        self._conversions: dict = {}
        self._plans: dict = {}
        #: inputs converted as constants, per value: converters need their values (see convert.ValueNeed)
        self.value_inputs: list = []
        #: (input shapes, devices, partition arguments) -> plan, for models with no value inputs: a run's lookup
        self._runs: dict = {}
        check_graph(proto)
        check_supported(proto)
        check_opset(proto)
        self._declared = self._read_declared()  # the inputs' declared types and shapes, read and checked once

    def declared(self) -> dict:
        """{input name: (shape with None for unknown dims, dtype)} as the model declares them; the shape is None
        when the model does not declare the input's rank. A negative dim is unknown, as onnxruntime reads it:
        exporters write -1 for a dynamic dim."""
        return dict(self._declared)

    def _read_declared(self) -> dict:
        out = {}
        for vi in self._inputs:
            tt = vi.type.tensor_type
            dims = None if not tt.HasField("shape") else \
                tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tt.shape.dim)
            out[vi.name] = (dims, value_dtype(vi, f"graph input {vi.name!r}"))
        return out

    def shapes(self, shapes: dict | None = None) -> dict:
        """Concrete input shapes: given ones first, then `input_shapes`, then declared dims (unknown dims: 1)."""
        shapes = {**self.input_shapes, **(shapes or {})}
        out = {}
        for name, (dims, _) in self._declared.items():
            if name in shapes:
                out[name] = _shape(name, shapes[name])
            elif dims is None:
                raise InvalidArgumentError(f"onnx: input {name!r} has no declared shape, so the model cannot be "
                                           "converted before it runs", fix=f"pass input_shapes={{{name!r}: (...)}} to "
                                           "load, or run it: each input signature is converted when it first runs")
            else:
                out[name] = tuple(1 if d is None else d for d in dims)
        return out

    def conversion(self, shapes: dict | None = None, values: dict | None = None) -> Conversion:
        """The model converted for inputs of these shapes (once per signature): its graph, or the input whose value
        it needs (`need`); `values` ({input: array}) makes constants of the inputs whose value a converter needs (a
        Reshape's shape fed as an input)."""
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
        """Run on `inputs` (a list in input order, or a dict by name, of arrays); the outputs as numpy arrays."""
        arrays = self._arrays(inputs)
        shapes = {k: a.shape for k, a in arrays.items()}
        key = (tuple(shapes.values()), tuple(devices) if not isinstance(devices, str) else (devices,),
               tuple(sorted(partition_args.items())))
        plan = None if self.value_inputs else self._runs.get(key)
        if plan is None:
            plan = self._planned(arrays, shapes, devices, partition_args)
            if not self.value_inputs:
                self._runs[key] = plan
        g = plan.graph
        feed = [arrays[name] for name in g.inputs]
        outs = plan.run(feed) if g.nodes else [None] * len(g.outputs)
        result = []
        for name, out in zip(g.outputs, outs):
            if name in arrays:  # an input returned as is
                result.append(np.array(arrays[name]))
            elif out is None or name in g.constants:
                result.append(np.array(g.constants[name]))
            else:
                result.append(out.numpy() if hasattr(out, "numpy") else np.asarray(out))
        return result

    def _planned(self, arrays: dict, shapes: dict, devices, partition_args: dict):
        """The plan for these inputs: converted (learning which inputs' values the conversion needs) and planned."""
        conv = self.conversion(shapes, {n: arrays[n] for n in self.value_inputs})
        while conv.graph is None:  # learn which inputs' values the conversion needs; then one graph per such value
            if conv.need.input in self.value_inputs or conv.need.input not in arrays:
                raise conv.need.error()
            self.value_inputs.append(conv.need.input)
            conv = self.conversion(shapes, {n: arrays[n] for n in self.value_inputs})
        return self.plan(devices, shapes, {n: arrays[n] for n in self.value_inputs}, **partition_args)

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
        declared = self._declared
        out = {}
        for name in self.inputs:
            if name not in items:
                raise InvalidArgumentError(f"onnx: input {name!r} is missing", fix=f"pass all of {self.inputs}")
            arr = np.asarray(items[name].numpy() if hasattr(items[name], "numpy") else items[name])
            dims, dtype = declared[name]
            if arr.dtype != dtype:
                raise InvalidArgumentError(f"onnx: input {name!r} is {arr.dtype}, the model declares {dtype}",
                                           fix=f"pass it as .astype({dtype.name!r})")
            if dims is not None and (len(dims) != arr.ndim or
                                     any(d is not None and d != s for d, s in zip(dims, arr.shape))):
                raise InvalidArgumentError(f"onnx: input {name!r} has shape {arr.shape}, the model declares "
                                           f"{tuple('?' if d is None else d for d in dims)}",
                                           fix="pass an array of the declared shape")
            out[name] = arr
        return out

    def __repr__(self):
        return f"OnnxModel(inputs={self.inputs}, outputs={self.outputs}, nodes={len(self.proto.graph.node)})"


def load(source, input_shapes: dict | None = None) -> OnnxModel:
    """Load an ONNX model (a path, bytes or a ModelProto); `input_shapes` fixes dims the model leaves open."""
    return OnnxModel(read_model(source), input_shapes)


def _shape(name: str, shape) -> tuple:
    """A given input shape as a tuple of non-negative ints, or an error naming the input."""
    try:
        dims = tuple(int(d) for d in shape)
        ok = all(d >= 0 and d == s for d, s in zip(dims, shape))
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise InvalidArgumentError(f"onnx: the shape given for input {name!r} is {shape!r}, not non-negative ints",
                                   fix=f"pass input_shapes={{{name!r}: (2, 3, ...)}}")
    return dims


def _values_key(values: dict | None) -> tuple:
    """A hashable key of input values: names, dtypes, shapes and bytes."""
    return tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in sorted((values or {}).items()))

