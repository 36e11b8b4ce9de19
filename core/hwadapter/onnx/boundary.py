"""A model's inputs and outputs of every kind: tensors, sequences and optionals as their types declare them, the
input signature a run gives (a sequence's length and its tensors' shapes, an optional's presence), the graph inputs
they become, and outputs handed back as arrays, lists of arrays or None, as onnxruntime and onnx's runner give them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..api.errors import InvalidArgumentError
from ..api.ir import Value
from .node import UnsupportedOpError, to_dtype
from .values import Opt, Seq, describe, present

_KINDS = {"sequence_type": "a sequence", "map_type": "a map", "optional_type": "an optional",
          "sparse_tensor_type": "a sparse tensor", None: "of no type"}
_PLURALS = {"sequence_type": "sequences", "map_type": "maps", "optional_type": "optionals",
            "sparse_tensor_type": "sparse tensors"}
_MALFORMED = "the model is malformed: check it with onnx.checker.check_model"


@dataclass(frozen=True)
class ValueType:
    """A declared type: `kind` "tensor", "sequence" or "optional"; its tensors' dtype and dims (None: rank unknown;
    a None dim: open); `inner`, what an optional holds ("tensor" or "sequence")."""
    kind: str
    dtype: np.dtype
    dims: tuple | None
    inner: str = "tensor"

    @property
    def holds(self) -> str:
        """What a present value of this type is: "tensor" or "sequence"."""
        return self.inner if self.kind == "optional" else self.kind

    def __str__(self) -> str:
        what = {"tensor": "a tensor", "sequence": "a sequence of tensors"}
        return f"an optional of {what[self.inner]}" if self.kind == "optional" else what[self.kind]


@dataclass(frozen=True)
class SeqShape:
    """A sequence's part of an input signature: its tensors' shapes in order (so its length too)."""
    shapes: tuple


def value_type(tp, what: str) -> ValueType:
    """The ValueType of a TypeProto; an error naming `what` for maps, sparse tensors, nested sequences, no type."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        tt = tp.tensor_type
        dims = None if not tt.HasField("shape") else \
            tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tt.shape.dim)
        return ValueType("tensor", to_dtype(tt.elem_type, what), dims)
    if kind == "sequence_type":
        elem = tp.sequence_type.elem_type
        if elem.WhichOneof("value") != "tensor_type":
            raise UnsupportedOpError(f"onnx: {what} is a sequence of {_PLURALS.get(elem.WhichOneof('value'), 'values')}"
                                     "; hwadapter converts sequences of tensors only",
                                     fix="export the model with sequences of tensors")
        inner = value_type(elem, what)
        return ValueType("sequence", inner.dtype, inner.dims)
    if kind == "optional_type":
        inner = value_type(tp.optional_type.elem_type, what)
        if inner.kind == "optional":
            raise UnsupportedOpError(f"onnx: {what} is an optional of an optional", fix=_MALFORMED)
        return ValueType("optional", inner.dtype, inner.dims, inner.kind)
    raise UnsupportedOpError(f"onnx: {what} is {_KINDS.get(kind, kind)}, and hwadapter converts tensors, sequences "
                             "of tensors and optionals of them only", fix="export the model with tensor inputs and "
                                                                           "outputs")


def element_name(name: str, i: int) -> str:
    """The graph input that the i-th tensor of sequence input `name` becomes."""
    return f"{name}[{i}]"


def tensor_shape(name: str, shape) -> tuple:
    """A given tensor shape as a tuple of non-negative ints, or an error naming the input."""
    try:
        dims = tuple(int(d) for d in shape)
        ok = all(d >= 0 and d == s for d, s in zip(dims, shape))
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise InvalidArgumentError(f"onnx: the shape given for input {name!r} is {shape!r}, not non-negative ints",
                                   fix=f"pass input_shapes={{{name!r}: (2, 3, ...)}}")
    return dims


def given_signature(name: str, vt: ValueType, given):
    """A signature given for input `name` (a shape; for a sequence a list of shapes or a SeqShape; None for an
    empty optional), checked and made hashable."""
    if given is None:
        if vt.kind == "optional":
            return None
        raise InvalidArgumentError(f"onnx: the shape given for input {name!r} is None; only an optional may be "
                                   "empty", fix=f"pass its shape: input_shapes={{{name!r}: (...)}}")
    if vt.holds == "sequence":
        items = given.shapes if isinstance(given, SeqShape) else given
        if not isinstance(items, (list, tuple)) or any(not isinstance(s, (list, tuple)) for s in items):
            raise InvalidArgumentError(f"onnx: input {name!r} is {vt}; the shape given for it ({given!r}) is not a "
                                       "list of its tensors' shapes", fix=f"pass input_shapes={{{name!r}: [(2, 3), "
                                                                          "(4, 3)]}}: one shape per tensor")
        return SeqShape(tuple(tensor_shape(element_name(name, i), s) for i, s in enumerate(items)))
    return tensor_shape(name, given)


def given_value(name: str, vt: ValueType, value):
    """A run's value for input `name` as its type says (an array; a list of arrays for a sequence; None for an empty
    optional), each array checked against the declared dtype and dims; an error naming the input otherwise."""
    if value is None:
        if vt.kind == "optional":
            return None
        raise InvalidArgumentError(f"onnx: input {name!r} is None; the model declares it {vt}",
                                   fix="pass a value: only an optional input may be None (empty)")
    if vt.holds == "sequence":
        if not isinstance(value, (list, tuple)):
            raise InvalidArgumentError(f"onnx: input {name!r} is a {type(value).__name__}; the model declares it {vt}",
                                       fix="pass a list of arrays")
        return [_array(element_name(name, i), vt, v) for i, v in enumerate(value)]
    return _array(name, vt, value)


def _array(name: str, vt: ValueType, value) -> np.ndarray:
    arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if arr.dtype != vt.dtype:
        raise InvalidArgumentError(f"onnx: input {name!r} is {arr.dtype}, the model declares {vt.dtype}",
                                   fix=f"pass it as .astype({vt.dtype.name!r})")
    dims = vt.dims
    if dims is not None and (len(dims) != arr.ndim or any(d is not None and d != s for d, s in zip(dims, arr.shape))):
        raise InvalidArgumentError(f"onnx: input {name!r} has shape {arr.shape}, the model declares "
                                   f"{tuple('?' if d is None else d for d in dims)}",
                                   fix="pass an array of the declared shape")
    return arr


def signature(value):
    """The signature of a checked input value: its shape, a SeqShape, or None (an empty optional)."""
    if value is None:
        return None
    if isinstance(value, list):
        return SeqShape(tuple(a.shape for a in value))
    return value.shape


def flat(name: str, value) -> dict:
    """{graph input: array} of a checked input value: a tensor under its name, a sequence's under element_name."""
    if value is None:
        return {}
    if isinstance(value, list):
        return {element_name(name, i): a for i, a in enumerate(value)}
    return {name: value}


def bind_input(ctx, name: str, vt: ValueType, sig, values: dict, inputs: list):
    """The conversion value of graph input `name` of signature `sig`: its tensors added to ctx as graph inputs
    (appended to `inputs`), or as constants where `values` ({graph input: array}) gives them."""
    if vt.kind == "optional":
        return Opt(None if sig is None else _bind(ctx, name, vt, sig, values, inputs), vt.inner == "sequence")
    return _bind(ctx, name, vt, sig, values, inputs)


def _bind(ctx, name, vt, sig, values, inputs):
    if vt.holds == "sequence":
        refs = [_tensor(ctx, element_name(name, i), vt.dtype, s, values, inputs) for i, s in enumerate(sig.shapes)]
        return Seq(tuple(refs), vt.dtype)
    return _tensor(ctx, name, vt.dtype, sig, values, inputs)


def _tensor(ctx, ref: str, dtype, shape, values: dict, inputs: list) -> str:
    if ref in ctx.values:
        raise InvalidArgumentError(f"onnx: graph input {ref!r} is named twice (a sequence input's tensors are "
                                   "named name[i]: another input or initializer has that name)", fix=_MALFORMED)
    if ref in values:
        arr = np.asarray(values[ref], dtype)
        ctx.values[ref] = Value(ref, tuple(arr.shape), dtype)
        ctx.constants[ref] = arr
        return ref
    ctx.values[ref] = Value(ref, tuple(shape), dtype)
    ctx.graph_inputs.add(ref)
    inputs.append(ref)
    return ref


def output_value(name: str, vt: ValueType, value):
    """Graph output `name`'s value checked against its declared type: what the model hands back for it (a present
    optional declared a tensor or sequence is its value)."""
    inner = present(value)
    if inner is None and vt.kind != "optional":
        raise InvalidArgumentError(f"onnx: the model's graph output {name!r} is declared {vt}, but it is an empty "
                                   "optional", fix=_MALFORMED)
    if inner is not None and (isinstance(inner, Seq)) != (vt.holds == "sequence"):
        raise InvalidArgumentError(f"onnx: the model's graph output {name!r} is declared {vt}, but it is "
                                   f"{describe(value)}", fix=_MALFORMED)
    return value if vt.kind == "optional" else inner


def assemble(value, arrays: dict, seen: set):
    """A graph output's value as the model hands it back: an array, a list of arrays, or None (empty optional); a
    ref met again (in `seen`) is handed back as a copy, so that no two outputs share memory."""
    if isinstance(value, Seq):
        return [assemble(r, arrays, seen) for r in value.items]
    if isinstance(value, Opt):
        return None if value.value is None else assemble(value.value, arrays, seen)
    if value in seen:
        return np.array(arrays[value])
    seen.add(value)
    return arrays[value]
