"""Sequence ops: a sequence is a list of tensor refs known at conversion (values.Seq), so these ops move refs about
and slice or concatenate tensors; positions are read as values (the model converts per value of the graph input
they come from), and SequenceMap's body is converted once per element, as an unrolled loop's body is."""
from __future__ import annotations

import numpy as np

from ...api.errors import InvalidArgumentError
from ..boundary import value_type
from ..node import to_dtype
from ..values import Seq, is_tensor
from . import converter
from .control import body, inline
from .tensor import axis_of, ints, reshape, slice_axes

#: the most tensors SplitToSequence makes: each is a value of the graph (a longer split is refused, not slow)
MAX_LENGTH = 1024


def _position(ctx, node, i: int, length: int, default: int, inserting: bool = False) -> int:
    """The node's i-th input (a position, known at conversion) as an index in [0, length) (or [0, length] when
    inserting); `default` when it is omitted; an error naming the node when it is out of range."""
    if ctx.input(node, i) is None:
        return default
    values = ints(ctx, node, i, "position")
    if len(values) != 1:
        ctx.fail(node, f"its position holds {len(values)} values; it must hold one")
    pos, hi = values[0], length if inserting else length - 1
    if not -length <= pos <= hi:
        raise InvalidArgumentError(f"onnx: {node.where()}: its position {pos} is out of range for a sequence of "
                                   f"{length} tensors (it must be in [{-length}, {hi}])",
                                   fix="give a position inside the sequence (negative ones count from its end)")
    return pos + length if pos < 0 else pos


def _same_dtype(ctx, node, refs, dtype, what: str):
    """The dtype the tensors `refs` share (`dtype` when known already); an error naming the node when they differ."""
    for r in refs:
        if dtype is None:
            dtype = ctx.dtype(r)
        elif ctx.dtype(r) != dtype:
            raise InvalidArgumentError(f"onnx: {node.where()}: {what} is {ctx.dtype(r)}, the sequence's tensors are "
                                       f"{dtype}: a sequence holds tensors of one dtype", fix="cast it first")
    return dtype


@converter("SequenceConstruct")
def sequence_construct(ctx, node):
    refs = [ctx.input(node, i) for i in range(len(node.inputs))]
    if not refs or any(r is None for r in refs):
        ctx.fail(node, "it has an omitted input or none", fix="give SequenceConstruct one tensor or more")
    return Seq(tuple(refs), _same_dtype(ctx, node, refs, None, "an input"))


@converter("SequenceEmpty")
def sequence_empty(ctx, node):
    return Seq((), to_dtype(node.int("dtype", 1), f"attribute 'dtype' of {node.where()}"))


@converter("SequenceLength")
def sequence_length(ctx, node):
    return ctx.constant(np.array(len(ctx.sequence(node, 0).items), np.int64))


@converter("SequenceAt", values=(1,))
def sequence_at(ctx, node):
    seq = ctx.sequence(node, 0)
    if ctx.input(node, 1) is None:
        ctx.fail(node, "its position is omitted", fix="give SequenceAt a position")
    return seq.items[_position(ctx, node, 1, len(seq.items), 0)]


@converter("SequenceInsert", values=(2,))
def sequence_insert(ctx, node):
    seq, x = ctx.sequence(node, 0), ctx.input(node, 1)
    dtype = _same_dtype(ctx, node, [x], seq.dtype, "the tensor inserted")
    pos = _position(ctx, node, 2, len(seq.items), len(seq.items), inserting=True)
    return Seq(seq.items[:pos] + (x,) + seq.items[pos:], dtype)


@converter("SequenceErase", values=(1,))
def sequence_erase(ctx, node):
    seq = ctx.sequence(node, 0)
    if not seq.items:
        raise InvalidArgumentError(f"onnx: {node.where()}: it erases from an empty sequence",
                                   fix="erase only from a sequence that holds a tensor")
    pos = _position(ctx, node, 1, len(seq.items), len(seq.items) - 1)
    return Seq(seq.items[:pos] + seq.items[pos + 1:], seq.dtype)


@converter("SplitToSequence", values=(1,))
def split_to_sequence(ctx, node):
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    if not shape:
        ctx.fail(node, "its input is 0-d: there is no axis to split")
    axis = axis_of(ctx, node, node.int("axis", 0), len(shape))
    keepdims = node.int("keepdims", 1, choices=(0, 1))
    dim = shape[axis]
    if ctx.input(node, 1) is None:
        sizes = [1] * dim
    else:
        keepdims, rank = 1, np.ndim(ctx.require_const(node, 1, "split"))  # keepdims: ignored with a split
        split = ints(ctx, node, 1, "split")
        if rank == 0:
            if split[0] < 1:
                ctx.fail(node, f"its split {split[0]} is not a positive size")
            sizes = [split[0]] * (dim // split[0]) + ([dim % split[0]] if dim % split[0] else [])
        elif rank == 1:
            if sum(split) != dim or any(s < 0 for s in split):
                ctx.fail(node, f"its split {split[:8]} does not add up to the dimension {dim} of axis {axis}")
            sizes = split
        else:
            ctx.fail(node, f"its split has {rank} axes; it must be a scalar or 1-D")
    if len(sizes) > MAX_LENGTH:
        ctx.fail(node, f"it would make a sequence of {len(sizes)} tensors; hwadapter converts sequences of up to "
                       f"{MAX_LENGTH} (each tensor is a value of the graph)", fix="split into fewer, larger parts")
    parts, start = [], 0
    for size in sizes:
        part = slice_axes(ctx, x, {axis: (start, start + size, 1)})
        parts.append(part if keepdims else reshape(ctx, part, shape[:axis] + shape[axis + 1:]))
        start += size
    return Seq(tuple(parts), ctx.dtype(x))


@converter("ConcatFromSequence")
def concat_from_sequence(ctx, node):
    seq = ctx.sequence(node, 0)
    new_axis = node.int("new_axis", 0, choices=(0, 1))
    axis = node.int("axis")
    if not seq.items:
        raise InvalidArgumentError(f"onnx: {node.where()}: it concatenates an empty sequence",
                                   fix="concatenate a sequence that holds a tensor")
    rank = len(ctx.shape(seq.items[0]))
    if not new_axis and rank == 0:
        ctx.fail(node, "it concatenates 0-d tensors along an existing axis, which they do not have",
                 fix="set new_axis=1 to stack them")
    a = axis_of(ctx, node, axis, rank + new_axis)
    parts = list(seq.items)
    if new_axis:
        parts = [reshape(ctx, r, ctx.shape(r)[:a] + (1,) + ctx.shape(r)[a:]) for r in parts]
    return parts[0] if len(parts) == 1 else ctx.op("concat", *parts, axis=a)


@converter("SequenceMap")
def sequence_map(ctx, node):
    proto = node.graph("body")
    first = ctx.sequence(node, 0)
    extra = [ctx.value(node, i) for i in range(1, len(node.inputs))]
    n = len(first.items)
    if len(proto.input) != 1 + len(extra) or len(proto.output) != len(node.outputs):
        ctx.fail(node, f"its body takes {len(proto.input)} inputs and gives {len(proto.output)} outputs for "
                       f"{1 + len(extra)} inputs and {len(node.outputs)} outputs: they must agree")
    for k, v in enumerate(extra, 1):
        if isinstance(v, Seq) and len(v.items) != n:
            raise InvalidArgumentError(f"onnx: {node.where()}: its input {k} is a sequence of {len(v.items)} "
                                       f"tensors, its input 0 of {n}: they must be as long",
                                       fix="map sequences of one length")
        if v is None:
            ctx.fail(node, f"its input {k} is omitted", fix="give SequenceMap every input its body takes")
        if not isinstance(v, Seq):
            ctx.input(node, k)  # an optional: the error that says so
    outs: list = [[] for _ in proto.output]
    for i in range(n):
        bound = {0: first.items[i], **{k: v.items[i] if isinstance(v, Seq) else v for k, v in enumerate(extra, 1)}}
        scope, got = body(ctx, proto, f"element_{i}", bound)
        for k, ref in enumerate(got):
            if not is_tensor(ref):
                ctx.fail(node, f"its body's output {k} ({proto.output[k].name!r}) is not a tensor; SequenceMap's "
                               "body gives tensors")
            outs[k].append(ref)
        inline(ctx, scope)
    return tuple(Seq(tuple(refs), _out_dtype(ctx, node, proto.output[k], refs)) for k, refs in enumerate(outs))


def _out_dtype(ctx, node, vi, refs):
    """The dtype of a SequenceMap output's tensors: theirs (one dtype), or the body's declared one when there are
    none (None when it declares none)."""
    if refs:
        return _same_dtype(ctx, node, refs, None, f"its body's output {vi.name!r}")
    if vi.type.WhichOneof("value") != "tensor_type":
        return None
    return value_type(vi.type, f"the body output {vi.name!r} of {node.where()}").dtype
