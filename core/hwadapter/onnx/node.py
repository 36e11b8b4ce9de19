"""One ONNX node as converters read it (`OnnxNode`: attributes typed and checked in one place), and the reading
of tensors and element types every converter shares (a graph input's or output's whole type: boundary.py)."""
from __future__ import annotations

import numpy as np

from ..api import dtypes
from ..api.errors import InvalidArgumentError, UnsupportedDTypeError


class UnsupportedOpError(InvalidArgumentError):
    """A model holds an op (or an op's attribute or input) that hwadapter cannot convert."""


#: The default of an attribute the operator requires: its absence is an error naming the node.
REQUIRED = object()

# AttributeProto types (onnx.AttributeProto.AttributeType), as the messages name them
_UNDEFINED, _FLOAT, _INT, _STRING, _TENSOR, _GRAPH, _FLOATS, _INTS, _STRINGS = 0, 1, 2, 3, 4, 5, 6, 7, 8
_TYPE_PROTO = 13
_TYPE_NAMES = {0: "of no type", 1: "a float", 2: "an int", 3: "a string", 4: "a tensor", 5: "a graph",
               6: "a list of floats", 7: "a list of ints", 8: "a list of strings", 9: "a list of tensors",
               10: "a list of graphs", 11: "a sparse tensor", 12: "a list of sparse tensors", 13: "a type",
               14: "a list of types"}


class OnnxNode:
    """One NodeProto, read once: op type, name, input and output names ('' for an omitted one), attributes (read
    through the typed accessors `int`, `float`, `ints`, `floats`, `string`, `strings`, `tensor`, which check them)."""

    def __init__(self, proto, index: int, opset: int):
        self.proto, self.op_type, self.domain, self.opset = proto, proto.op_type, proto.domain, opset
        self.name = proto.name or f"{proto.op_type}_{index}"
        self.inputs, self.outputs = list(proto.input), list(proto.output)
        self.attrs = {a.name: a for a in proto.attribute}  # name -> AttributeProto, decoded by the accessors

    # --- typed attributes: one place that checks what a converter reads -------------------------------------------
    def int(self, name: str, default=REQUIRED, *, lo: int | None = None, hi: int | None = None,
            choices: tuple = ()):
        """An INT attribute, within lo..hi and among `choices` when given; `default` when absent."""
        a = self._proto(name, default)
        if a is None:
            return default
        self._want(a, (_INT,), "an int")
        return self._check(name, int(a.i), lo, hi, choices)

    def float(self, name: str, default=REQUIRED, *, lo: float | None = None):
        """A FLOAT attribute (an INT is taken as its value), at least `lo` when given; `default` when absent."""
        a = self._proto(name, default)
        if a is None:
            return default
        self._want(a, (_FLOAT, _INT), "a float")
        value = float(a.f) if a.type == _FLOAT else float(a.i)
        if lo is not None and not value >= lo:
            self.bad(name, f"is {value!r}; it must be at least {lo}")
        return value

    def ints(self, name: str, default=REQUIRED, *, lo: int | None = None, length: int | None = None):
        """An INTS attribute as a list, each at least `lo` and `length` long when given; `default` when absent."""
        a = self._proto(name, default)
        if a is None:
            return default
        self._want(a, (_INTS,), "a list of ints")
        values = [int(i) for i in a.ints]
        if length is not None and len(values) != length:
            self.bad(name, f"has {len(values)} values {values[:8]}; it must have {length}")
        if lo is not None and any(v < lo for v in values):
            self.bad(name, f"is {values[:8]}; each value must be at least {lo}")
        return values

    def floats(self, name: str, default=REQUIRED):
        """A FLOATS attribute as a list of floats; `default` when absent."""
        a = self._proto(name, default)
        if a is None:
            return default
        self._want(a, (_FLOATS,), "a list of floats")
        return [float(f) for f in a.floats]

    def string(self, name: str, default=REQUIRED, *, choices: tuple = ()):
        """A STRING attribute, decoded, among `choices` when given; `default` when absent."""
        a = self._proto(name, default)
        if a is None:
            return default
        self._want(a, (_STRING,), "a string")
        return self._check(name, self._decode(name, a.s), None, None, choices)

    def strings(self, name: str, default=REQUIRED):
        """A STRINGS attribute as a list of str; `default` when absent."""
        a = self._proto(name, default)
        if a is None:
            return default
        self._want(a, (_STRINGS,), "a list of strings")
        return [self._decode(name, s) for s in a.strings]

    def tensor(self, name: str, default=REQUIRED) -> np.ndarray:
        """A TENSOR attribute as a numpy array; `default` when absent."""
        a = self._proto(name, default)
        if a is None:
            return default
        self._want(a, (_TENSOR,), "a tensor")
        return tensor_array(a.t, f"attribute {name!r} of {self.where()}")

    def has(self, name: str) -> bool:
        return name in self.attrs

    def graph(self, name: str, default=REQUIRED):
        """A GRAPH attribute (an If branch, a Loop or Scan body) as its GraphProto; `default` when absent."""
        a = self._proto(name, default)
        if a is None:
            return default
        self._want(a, (_GRAPH,), "a graph")
        return a.g

    def type_proto(self, name: str, default=REQUIRED):
        """A TYPE_PROTO attribute (Optional's `type`) as its TypeProto; `default` when absent."""
        a = self._proto(name, default)
        if a is None:
            return default
        self._want(a, (_TYPE_PROTO,), "a type")
        return a.tp

    def bad(self, name: str, why: str, fix: str = "") -> None:
        """Raise InvalidArgumentError: attribute `name` of this node `why` (what it got and what it must be)."""
        raise InvalidArgumentError(f"onnx: {self.where()}: attribute {name!r} {why}",
                                   fix=fix or "the model is malformed: check it with onnx.checker.check_model; the "
                                              f"onnx operator docs say what {self.op_type}'s {name} may be")

    def where(self) -> str:
        return f"node {self.name!r} ({self.op_type}, opset {self.opset})"

    def _proto(self, name: str, default):
        a = self.attrs.get(name)
        if a is None and default is REQUIRED:
            self.bad(name, "is missing; the operator requires it", fix=f"give the node its {name} attribute")
        return a

    def _want(self, a, types: tuple, what: str) -> None:
        if a.type not in types:
            self.bad(a.name, f"is {_TYPE_NAMES.get(a.type, 'of type ' + str(a.type))}{_shown(a)}; it must be {what}")

    def _check(self, name: str, value, lo, hi, choices):
        if choices and value not in choices:
            self.bad(name, f"is {value!r}; it must be one of {', '.join(map(repr, choices))}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f"between {lo} and {hi}" if lo is not None and hi is not None else \
                (f"at least {lo}" if lo is not None else f"at most {hi}")
            self.bad(name, f"is {value!r}; it must be {bounds}")
        return value

    def _decode(self, name: str, raw: bytes) -> str:
        try:
            return raw.decode()
        except UnicodeDecodeError:
            self.bad(name, f"holds bytes that are not UTF-8 ({raw[:20]!r})")


def _shown(a) -> str:
    """' (value)' of an attribute of a simple type, for messages; '' for tensors, graphs and untyped ones."""
    value = {_FLOAT: lambda: a.f, _INT: lambda: a.i, _STRING: lambda: a.s.decode(errors="replace"),
             _FLOATS: lambda: list(a.floats)[:8], _INTS: lambda: list(a.ints)[:8],
             _STRINGS: lambda: [s.decode(errors="replace") for s in a.strings][:8]}.get(a.type)
    return f" ({value()!r})" if value is not None else ""


def tensor_array(tensor, what: str) -> np.ndarray:
    """A TensorProto's numpy array; an error naming `what` when its data does not fit its shape and type, and never
    a read of external data (the reader loads that, from beside the model only)."""
    # lazy: onnx is an optional package (the onnx extra); `import hwadapter.onnx` works without it
    from onnx import numpy_helper
    from onnx.external_data_helper import uses_external_data
    if any(d < 0 for d in tensor.dims):
        raise InvalidArgumentError(f"onnx: {what} has a negative dimension in its shape {tuple(tensor.dims)}",
                                   fix="the model is malformed: check it with onnx.checker.check_model")
    if uses_external_data(tensor):
        raise InvalidArgumentError(f"onnx: {what} keeps its data in an external file that was not loaded",
                                   fix="load the model with hwadapter.onnx.load(path), its data files beside it")
    try:
        return numpy_helper.to_array(tensor)
    except Exception as err:  # noqa: BLE001 - protobuf fields that disagree: a malformed model
        raise InvalidArgumentError(f"onnx: {what} of shape {tuple(tensor.dims)} holds data that does not fit it "
                                   f"({type(err).__name__}: {str(err).strip()[:200]})",
                                   fix="the model is malformed: check it with onnx.checker.check_model") from None


def to_dtype(elem_type: int, what: str) -> np.dtype:
    """The numpy dtype of an ONNX element type, or UnsupportedDTypeError naming `what`."""
    # lazy: onnx is an optional package (the onnx extra); `import hwadapter.onnx` works without it
    from onnx import helper
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        dt = None
    if dt is None or dt not in dtypes.ALL:
        from onnx import TensorProto  # lazy: onnx is an optional package (the onnx extra)
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
        raise UnsupportedDTypeError(f"onnx: {what} has element type {name}, which hwadapter has no dtype for",
                                    fix="hwadapter supports " + ", ".join(d.name for d in dtypes.ALL))
    return dt
