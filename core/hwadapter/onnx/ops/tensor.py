"""Tensor ONNX ops: shape manipulation, indexing, constants, padding, Einsum, TopK, cumulative ops."""
from __future__ import annotations

import math
import string

import numpy as np

from ...api import dtypes as _dt
from ...api import shapes as _shapes
from ..node import to_dtype
from . import converter

INT64 = np.dtype(np.int64)
DATA_DEPENDENT = "data-dependent output shape: its result's shape depends on its input's values"
FIX_CONST = "hwadapter needs static shapes: this input must be a constant (initializer) for the op to fold"


# --- helpers ---------------------------------------------------------------------------------------------------
def ints(ctx, node, i, what) -> list:
    """The node's i-th input (known at conversion) as a list of Python ints; an error naming the node when it holds
    other than whole numbers."""
    arr = np.asarray(ctx.require_const(node, i, what)).reshape(-1)
    if arr.dtype.kind not in "iub" and not (arr.dtype.kind == "f" and np.all(np.isfinite(arr))
                                             and np.all(arr == np.round(arr))):
        ctx.fail(node, f"its {what} input is {arr.dtype.name} {arr[:8].tolist()}, not integers",
                 fix=f"give {what} as int64, as the onnx operator takes it")
    return [int(v) for v in arr]


def axis_of(ctx, node, axis, ndim: int, what="axis") -> int:
    """axis in [0, ndim), failing on one out of range."""
    if not -ndim <= int(axis) < ndim:
        ctx.fail(node, f"its {what} {axis} is out of range for a tensor of rank {ndim}")
    return int(axis) % ndim


def axes_of(ctx, node, axes, ndim: int, what="axes") -> list:
    out = [axis_of(ctx, node, a, ndim, what) for a in axes]
    if len(set(out)) != len(out):
        ctx.fail(node, f"its {what} {list(axes)} repeat an axis")
    return out


def reshape(ctx, x, shape):
    """x reshaped (no node when the shape is already that)."""
    shape = tuple(int(s) for s in shape)
    return x if tuple(ctx.shape(x)) == shape else ctx.op("reshape", x, shape=shape)


def transpose(ctx, x, perm):
    perm = tuple(int(p) for p in perm)
    return x if perm == tuple(range(len(perm))) else ctx.op("transpose", x, perm=perm)


def slice_axes(ctx, x, spec: dict):
    """x[...] with spec {axis: (start, end, step)} in Python slice semantics (ONNX's clamping is the same)."""
    shape = ctx.shape(x)
    axes, starts, ends, steps = [], [], [], []
    for a, (s, e, st) in sorted(spec.items()):
        b = _shapes.slice_bounds(shape[a], s, e, st)
        if b == (0, shape[a], 1):
            continue
        axes.append(a), starts.append(b[0]), ends.append(b[1]), steps.append(b[2])
    if not axes:
        return x
    return ctx.op("slice", x, axes=tuple(axes), starts=tuple(starts), ends=tuple(ends), steps=tuple(steps))


def scalar_const(ctx, value, dtype):
    return ctx.constant(np.array(value, dtype=dtype))


def fill_value(dtype, value):
    """value as a Python number of dtype's kind (what pad's `value` attribute takes)."""
    v = np.asarray(value).reshape(-1)[0].item() if np.size(value) else 0
    if dtype == _dt.bool_:
        return bool(v)
    return int(v) if dtype.kind in "iu" else float(v)


def check_dtype(ctx, node, dtype, what):
    if np.dtype(dtype) not in _dt.ALL:
        ctx.fail(node, f"its {what} has dtype {np.dtype(dtype).name}, which hwadapter has no dtype for")


def fold(ctx, node, what, fn, *idx):
    """fn(*constant inputs) as a constant when all of the node's inputs `idx` are constant; else fail."""
    arrays = [ctx.const(ctx.input(node, i)) for i in idx]
    if any(a is None for a in arrays):
        ctx.fail(node, f"{DATA_DEPENDENT} ({what})", fix=FIX_CONST)
    out = fn(*arrays)
    if isinstance(out, tuple):
        return tuple(ctx.constant(np.asarray(o)) for o in out)
    return ctx.constant(np.asarray(out))


# --- constants and identity ------------------------------------------------------------------------------------
@converter("Constant")
def constant(ctx, node):
    """The value attribute (one of value, value_float(s), value_int(s)) as a constant."""
    if node.has("value"):
        arr = np.asarray(node.tensor("value"))
    elif node.has("value_float"):
        arr = np.array(node.float("value_float"), np.float32)
    elif node.has("value_floats"):
        arr = np.array(node.floats("value_floats"), np.float32)
    elif node.has("value_int"):
        arr = np.array(node.int("value_int"), np.int64)
    elif node.has("value_ints"):
        arr = np.array(node.ints("value_ints"), np.int64)
    else:
        ctx.fail(node, f"its value attribute ({', '.join(node.attrs) or 'none'}) is a string or sparse tensor, "
                       "which hwadapter has no dtype for")
    check_dtype(ctx, node, arr.dtype, "value")
    return ctx.constant(arr)


@converter("Identity")
def identity(ctx, node):
    return ctx.value(node, 0)  # a tensor, sequence or optional alike


@converter("ConstantOfShape", values=(0,))
def constant_of_shape(ctx, node):
    shape = ints(ctx, node, 0, "shape")
    if any(s < 0 for s in shape):
        ctx.fail(node, f"its shape {shape} has a negative dimension")
    value = node.tensor("value", None)
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    if value.size != 1:
        node.bad("value", f"holds {value.size} values; it must hold one")
    check_dtype(ctx, node, value.dtype, "value")
    ctx.fits(shape, value.dtype)
    return ctx.constant(np.full(shape, value.reshape(-1)[0], dtype=value.dtype))


@converter("Shape")
def shape_op(ctx, node):
    dims = list(ctx.shape(ctx.input(node, 0)))
    start, end = node.int("start", 0), node.int("end", None)
    return ctx.constant(np.array(dims[start:end], INT64))  # Python slicing clamps exactly as ONNX does


@converter("Size")
def size_op(ctx, node):
    return ctx.constant(np.array(math.prod(ctx.shape(ctx.input(node, 0))), INT64))


@converter("EyeLike")
def eye_like(ctx, node):
    """A constant: the input's shape is static and its values are not read."""
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    if len(shape) != 2:
        ctx.fail(node, f"its input must be 2-D, not of shape {shape}")
    dt = ctx.dtype(x)
    if node.has("dtype"):
        dt = to_dtype(node.int("dtype"), f"node {node.name!r} dtype attribute")
    return ctx.constant(np.eye(shape[0], shape[1], k=node.int("k", 0), dtype=dt))


@converter("Range", values=(0, 1, 2))
def range_op(ctx, node):
    """A constant computed as ONNX's reference does (np.arange) from start, limit and delta."""
    stash = node.int("stash_type", None)

    def run(start, limit, delta):
        dtype = start.dtype
        if stash is not None and dtype == np.float16:
            comp = {1: np.float32, 11: np.float64}.get(stash)
            if comp is None:
                ctx.fail(node, f"its stash_type {stash} is neither FLOAT nor DOUBLE")
            return np.arange(start.astype(comp).item(), float(limit), float(delta), dtype=comp).astype(dtype)
        if float(delta) == 0:
            ctx.fail(node, "its delta is 0")
        count = (float(limit) - float(start)) / float(delta)
        if not math.isfinite(count):
            ctx.fail(node, f"its range from {start.item()} to {limit.item()} by {delta.item()} has no finite length")
        ctx.fits((max(0, math.ceil(count)),), dtype)
        return np.arange(start.item(), limit.item(), delta.item()).astype(dtype)
    # its output's shape is its inputs' values: known at conversion (per value, when they are graph inputs)
    start, limit, delta = (ctx.require_const(node, i, what) for i, what in enumerate(("start", "limit", "delta")))
    for what, arr in (("start", start), ("limit", limit), ("delta", delta)):
        if np.asarray(arr).size != 1:  # one element of any shape, as onnx's reference takes it (a function's (1,))
            ctx.fail(node, f"its {what} has shape {np.shape(arr)}; Range takes scalars")
    start, limit, delta = (np.asarray(a).reshape(()) for a in (start, limit, delta))
    return ctx.constant(np.asarray(run(start, limit, delta)))


# --- reshaping -------------------------------------------------------------------------------------------------
@converter("Reshape", values=(1,))
def reshape_op(ctx, node):
    x = ctx.input(node, 0)
    shape = list(ctx.shape(x))
    target = ints(ctx, node, 1, "shape")
    allowzero = node.int("allowzero", 0) if ctx.opset >= 14 else 0
    if allowzero and 0 in target and -1 in target:
        ctx.fail(node, "allowzero with both 0 and -1 in the shape is invalid")
    out = []
    for i, s in enumerate(target):
        if s == 0 and not allowzero:
            if i >= len(shape):
                ctx.fail(node, f"its shape {target} copies dimension {i}, which the input of rank {len(shape)} "
                               "lacks")
            s = shape[i]
        out.append(s)
    if out.count(-1) > 1 or any(s < -1 for s in out):
        ctx.fail(node, f"its shape {target} is invalid")
    size = math.prod(shape)
    if -1 in out:
        known = math.prod(s for s in out if s != -1)
        if known == 0 or size % known:
            ctx.fail(node, f"its shape {target} cannot hold the input's {size} elements")
        out[out.index(-1)] = size // known
    if math.prod(out) != size:
        ctx.fail(node, f"its shape {target} cannot hold the input's {size} elements (shape {tuple(shape)})")
    return reshape(ctx, x, out)


@converter("Squeeze", values=(1,))
def squeeze(ctx, node):
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    if ctx.opset >= 13:
        axes = ints(ctx, node, 1, "axes") if ctx.input(node, 1) is not None else None
    else:
        axes = node.ints("axes", None)
    if axes is None:
        axes = [i for i, s in enumerate(shape) if s == 1]
    axes = axes_of(ctx, node, axes, len(shape))
    if any(shape[a] != 1 for a in axes):
        ctx.fail(node, f"it squeezes axes {axes} of shape {shape}, not all of size 1")
    return reshape(ctx, x, [s for i, s in enumerate(shape) if i not in axes])


@converter("Unsqueeze", values=(1,))
def unsqueeze(ctx, node):
    x = ctx.input(node, 0)
    shape = list(ctx.shape(x))
    axes = ints(ctx, node, 1, "axes") if ctx.opset >= 13 else node.ints("axes", [])
    rank = len(shape) + len(axes)
    axes = axes_of(ctx, node, axes, rank)
    out, it = [], iter(shape)
    for i in range(rank):
        out.append(1 if i in axes else next(it))
    return reshape(ctx, x, out)


@converter("Transpose")
def transpose_op(ctx, node):
    x = ctx.input(node, 0)
    n = len(ctx.shape(x))
    perm = node.ints("perm", None)
    perm = list(range(n))[::-1] if perm is None else axes_of(ctx, node, perm, n, "perm")
    if len(perm) != n:
        ctx.fail(node, f"its perm {perm} does not name each of the {n} axes once")
    return transpose(ctx, x, perm)


@converter("Concat")
def concat(ctx, node):
    xs = [r for r in ctx.inputs(node) if r is not None]
    if not xs:
        ctx.fail(node, "it has no inputs (every one is omitted)", fix="give Concat at least one input")
    n = len(ctx.shape(xs[0]))
    if n == 0:
        ctx.fail(node, "it concatenates 0-d tensors, which ONNX does not allow")
    axis = axis_of(ctx, node, node.int("axis"), n)
    return ctx.op("concat", *xs, axis=axis)


@converter("Split", values=(1,))
def split(ctx, node):
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    axis = axis_of(ctx, node, node.int("axis", 0), len(shape))
    dim, n_out = shape[axis], len(node.outputs)
    if ctx.opset >= 13:
        sections = ints(ctx, node, 1, "split") if ctx.input(node, 1) is not None else None
    else:
        sections = node.ints("split", None) or None
    num = node.int("num_outputs", None, lo=1) if ctx.opset >= 18 else None
    if sections is None:
        if num is not None:
            if num != n_out:
                node.bad("num_outputs", f"is {num}; the node has {n_out} outputs")
            chunk = -(-dim // num)
            sections = [chunk] * (num - 1) + [dim - chunk * (num - 1)]
            if sections[-1] < 0:
                ctx.fail(node, f"num_outputs {num} cannot split a dimension of {dim}")
        else:
            if dim % n_out:
                ctx.fail(node, f"{n_out} outputs cannot split a dimension of {dim} equally")
            sections = [dim // n_out] * n_out
    if sum(sections) != dim or any(s < 0 for s in sections):
        ctx.fail(node, f"its split {sections} does not add up to the dimension {dim} of axis {axis}")
    if len(sections) != n_out:
        ctx.fail(node, f"its split {sections} has {len(sections)} parts for {n_out} outputs")
    if len(sections) == 1:
        return (x,)  # one part: the input itself (the split op's one-part list is no single-output op)
    return ctx.op("split", x, n_outputs=len(sections), sections=tuple(sections), axis=axis)


@converter("Slice", values=(1, 2, 3, 4))
def slice_op(ctx, node):
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    if ctx.opset < 10:
        starts, ends = node.ints("starts"), node.ints("ends")
        axes, steps = node.ints("axes", None), None
    else:
        starts, ends = ints(ctx, node, 1, "starts"), ints(ctx, node, 2, "ends")
        axes = ints(ctx, node, 3, "axes") if ctx.input(node, 3) is not None else None
        steps = ints(ctx, node, 4, "steps") if ctx.input(node, 4) is not None else None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        ctx.fail(node, "its starts, ends, axes and steps differ in length")
    if 0 in steps:
        ctx.fail(node, "a step is 0")
    axes = axes_of(ctx, node, axes, len(shape))
    return slice_axes(ctx, x, {a: (s, e, st) for a, s, e, st in zip(axes, starts, ends, steps)})


@converter("Expand", values=(1,))
def expand(ctx, node):
    x = ctx.input(node, 0)
    target = ints(ctx, node, 1, "shape")
    try:
        out = np.broadcast_shapes(tuple(ctx.shape(x)), tuple(target))
    except ValueError:
        ctx.fail(node, f"shape {target} does not broadcast with the input's {ctx.shape(x)}")
    return x if tuple(out) == tuple(ctx.shape(x)) else ctx.op("expand", x, shape=tuple(out))


@converter("Tile", values=(1,))
def tile(ctx, node):
    """x of shape (d...) -> (1, d, ...) expanded to (r, d, ...) -> reshaped (r*d, ...)."""
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    reps = ints(ctx, node, 1, "repeats")
    if len(reps) != len(shape) or any(r < 0 for r in reps):
        ctx.fail(node, f"its repeats {reps} must be {len(shape)} non-negative values")
    if all(r == 1 for r in reps):
        return x
    inter = [v for s in shape for v in (1, s)]
    big = [v for r, s in zip(reps, shape) for v in (r, s)]
    y = ctx.op("expand", reshape(ctx, x, inter), shape=tuple(big))
    return reshape(ctx, y, [r * s for r, s in zip(reps, shape)])


@converter("CenterCropPad", values=(1,))
def center_crop_pad(ctx, node):
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    target = ints(ctx, node, 1, "shape")
    axes = node.ints("axes", None)
    axes = list(range(len(shape))) if axes is None else axes_of(ctx, node, axes, len(shape))
    if len(axes) != len(target):
        ctx.fail(node, f"its shape {target} does not give one size per axis {axes}")
    crop, pads = {}, [(0, 0)] * len(shape)
    for a, t in zip(axes, target):
        d = shape[a]
        if t < d:
            lo = (d - t) // 2
            crop[a] = (lo, lo + t, 1)
        elif t > d:
            lo = (t - d) // 2
            pads[a] = (lo, t - d - lo)
    y = slice_axes(ctx, x, crop)
    if any(p != (0, 0) for p in pads):
        y = ctx.op("pad", y, pads=tuple(pads), mode="constant", value=fill_value(ctx.dtype(x), 0))
    return y


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


@converter("Pad", values=(1, 2, 3))
def pad(ctx, node):
    x = ctx.input(node, 0)
    shape, dt = ctx.shape(x), ctx.dtype(x)
    mode = node.string("mode", "constant")
    if mode not in _PAD_MODES or (mode == "wrap" and ctx.opset < 19):
        ctx.fail(node, f"its mode {mode!r} is not one of {sorted(_PAD_MODES)}")
    if ctx.opset < 11:
        raw = node.ints("pads", None) if node.has("pads") else node.ints("paddings", [])
        value, axes = node.float("value", 0.0), None
    else:
        raw = ints(ctx, node, 1, "pads")
        v = ctx.input(node, 2)
        value = 0 if v is None else ctx.require_const(node, 2, "constant_value")
        axes = ints(ctx, node, 3, "axes") if ctx.opset >= 18 and ctx.input(node, 3) is not None else None
    axes = list(range(len(shape))) if axes is None else axes_of(ctx, node, axes, len(shape))
    if len(raw) != 2 * len(axes):
        ctx.fail(node, f"its pads {raw} are not two per padded axis ({len(axes)} axes)")
    if not shape:
        return x
    before, after = [0] * len(shape), [0] * len(shape)
    for i, a in enumerate(axes):
        before[a], after[a] = raw[i], raw[len(axes) + i]
    if min(before + after) < 0:  # negative pads crop: exact for constant padding, undefined by np.pad otherwise
        if mode != "constant":
            ctx.fail(node, f"negative pads {raw} with mode {mode!r} (only constant padding may crop)")
        x = slice_axes(ctx, x, {a: (max(-before[a], 0), shape[a] - max(-after[a], 0), 1) for a in range(len(shape))
                                if before[a] < 0 or after[a] < 0})
        shape = ctx.shape(x)
        before, after = [max(b, 0) for b in before], [max(a, 0) for a in after]
    pairs = tuple(zip(before, after))
    if not any(b or a for b, a in pairs):
        return x
    for (b, a), s in zip(pairs, shape):
        if mode == "constant" or not (a or b):
            continue
        if s == 0:
            ctx.fail(node, f"{mode} padding of an empty dimension (shape {shape}) has nothing to copy")
        if mode == "reflect" and max(a, b) >= s:
            ctx.fail(node, f"reflect padding {(b, a)} must be smaller than the dimension {s}")
        if mode == "wrap" and max(a, b) > s:
            ctx.fail(node, f"wrap padding {(b, a)} beyond the dimension {s} (it would wrap more than once)")
    value = fill_value(dt, value)
    return ctx.op("pad", x, pads=pairs, mode=_PAD_MODES[mode], value=value if mode == "constant" else 0.0)


# --- indexing --------------------------------------------------------------------------------------------------
def index_int64(ctx, node, ref, size=None):
    """An integer index tensor as int64 (negative constant indices made non-negative when `size` is given)."""
    if np.dtype(ctx.dtype(ref)).kind not in "iu":
        ctx.fail(node, f"its indices are {ctx.dtype(ref)}, not integers")
    arr = ctx.const(ref)
    if arr is not None and size is not None:
        arr = arr.astype(INT64)
        if arr.size and (arr.min() < -size or arr.max() >= size):
            ctx.fail(node, f"an index is out of range for an axis of size {size}")
        return ctx.constant(np.where(arr < 0, arr + size, arr).astype(INT64))
    return ctx.cast(ref, INT64)


@converter("Gather")
def gather(ctx, node):
    x, idx = ctx.input(node, 0), ctx.input(node, 1)
    shape = ctx.shape(x)
    axis = axis_of(ctx, node, node.int("axis", 0), len(shape))
    return ctx.op("gather", x, index_int64(ctx, node, idx, shape[axis]), axis=axis)


@converter("GatherElements")
def gather_elements(ctx, node):
    x, idx = ctx.input(node, 0), ctx.input(node, 1)
    shape = ctx.shape(x)
    axis = axis_of(ctx, node, node.int("axis", 0), len(shape))
    return ctx.op("gather_elements", x, index_int64(ctx, node, idx, shape[axis]), axis=axis)


@converter("GatherND")
def gather_nd(ctx, node):
    x, idx = ctx.input(node, 0), ctx.input(node, 1)
    batch = node.int("batch_dims", 0, lo=0)
    shape, known = ctx.shape(x), ctx.const(idx)
    if known is not None and known.ndim and np.dtype(known.dtype).kind in "iu":  # constant indices: checked here
        depth = known.shape[-1]
        if batch + depth > len(shape):
            ctx.fail(node, f"its indices address {depth} axes after {batch} batch axes of a rank-{len(shape)} input")
        sizes = np.array(shape[batch:batch + depth], np.int64)
        if known.size and (np.any(known < -sizes) or np.any(known >= sizes)):
            ctx.fail(node, f"an index is out of range for the axes {tuple(sizes.tolist())} it addresses")
    return ctx.op("gather_nd", x, index_int64(ctx, node, idx), batch_dims=batch)


_REDUCTIONS = ("none", "add", "mul", "max", "min")


@converter("ScatterElements", "Scatter")
def scatter_elements(ctx, node):
    x, idx, upd = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    shape = ctx.shape(x)
    axis = axis_of(ctx, node, node.int("axis", 0), len(shape))
    reduction = node.string("reduction", "none")
    if reduction not in _REDUCTIONS:
        ctx.fail(node, f"its reduction {reduction!r} is not one of {_REDUCTIONS}")
    return ctx.op("scatter_elements", x, index_int64(ctx, node, idx, shape[axis]), upd, axis=axis,
                  reduction=reduction)


@converter("ScatterND")
def scatter_nd(ctx, node):
    x, idx, upd = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    reduction = node.string("reduction", "none")
    if reduction not in _REDUCTIONS:
        ctx.fail(node, f"its reduction {reduction!r} is not one of {_REDUCTIONS}")
    return ctx.op("scatter_nd", x, index_int64(ctx, node, idx), upd, reduction=reduction)


@converter("TopK", values=(1,))
def topk(ctx, node):
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    k = node.int("k") if ctx.opset < 10 else ints(ctx, node, 1, "K")[0]
    axis = axis_of(ctx, node, node.int("axis", -1), len(shape))
    if not 0 <= k <= shape[axis]:
        ctx.fail(node, f"its k {k} is outside [0, {shape[axis]}] of axis {axis}")
    # sorted=0 leaves the order unspecified: the sorted order is one valid order (the one onnx's reference gives)
    return ctx.op("topk", x, n_outputs=2, k=int(k), axis=axis, largest=bool(node.int("largest", 1)), sorted=True)


@converter("CumSum", "CumProd", values=(1,))
def cumulative(ctx, node):
    x = ctx.input(node, 0)
    axis = axis_of(ctx, node, ints(ctx, node, 1, "axis")[0], len(ctx.shape(x)))
    op = "cumsum" if node.op_type == "CumSum" else "cumprod"
    return ctx.op(op, x, axis=axis, exclusive=bool(node.int("exclusive", 0)),
                  reverse=bool(node.int("reverse", 0)))


@converter("Trilu", values=(1,))
def trilu(ctx, node):
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    if len(shape) < 2:
        ctx.fail(node, f"its input must be at least 2-D, not of shape {shape}")
    k = ints(ctx, node, 1, "k")[0] if ctx.input(node, 1) is not None else 0
    ones = np.ones(shape[-2:], bool)
    mask = np.triu(ones, k) if node.int("upper", 1) else np.tril(ones, k)
    if mask.all():
        return x
    return ctx.op("where", ctx.constant(mask), x, scalar_const(ctx, 0, ctx.dtype(x)))


@converter("OneHot", values=(1,))
def one_hot(ctx, node):
    """equal(indices at the axis, arange(depth)) selecting on/off values. Float indices are compared as they are
    (a non-integral one matches nothing), as onnx's reference and onnxruntime do."""
    idx, values = ctx.input(node, 0), ctx.input(node, 2)
    depth_arr = ctx.require_const(node, 1, "depth").reshape(-1)
    if depth_arr.size != 1:
        ctx.fail(node, "its depth is not one value")
    depth = int(depth_arr[0])
    if depth < 1 or depth != depth_arr[0]:
        ctx.fail(node, f"its depth {depth_arr[0]} is not a positive integer")
    if ctx.shape(values) != (2,):
        ctx.fail(node, f"its values must be [off, on], not of shape {ctx.shape(values)}")
    rank = len(ctx.shape(idx))
    axis = axis_of(ctx, node, node.int("axis", -1), rank + 1)
    dt = np.dtype(ctx.dtype(idx))
    if dt.kind == "b":
        ctx.fail(node, "its indices are bool")
    if dt == np.uint64:  # above 2^63 the cast to int64 would wrap to a negative index: held at depth, out of range
        idx = ctx.op("minimum", idx, scalar_const(ctx, depth, dt))
    if dt.kind in "iu":
        idx, dt = ctx.cast(idx, INT64), INT64
    elif depth > 2 ** (np.finfo(dt).nmant + 1):
        ctx.fail(node, f"its depth {depth} is beyond the integers {dt.name} indices hold exactly")
    idx = ctx.op("where", ctx.op("less", idx, scalar_const(ctx, 0, dt)),
                 ctx.op("add", idx, scalar_const(ctx, depth, dt)), idx)
    shape = list(ctx.shape(idx))
    idx = reshape(ctx, idx, shape[:axis] + [1] + shape[axis:])
    rng = np.arange(depth).astype(dt).reshape([1] * axis + [depth] + [1] * (rank - axis))
    hit = ctx.op("equal", idx, ctx.constant(rng))
    off, on = ctx.op("split", values, n_outputs=2, sections=(1, 1), axis=0)
    return ctx.op("where", hit, reshape(ctx, on, []), reshape(ctx, off, []))


@converter("ReverseSequence", values=(1,))
def reverse_sequence(ctx, node):
    """Per batch entry: its first len steps reversed (a slice of step -1), the rest as they are, concatenated."""
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    lens = ints(ctx, node, 1, "sequence_lens")
    b_ax = axis_of(ctx, node, node.int("batch_axis", 1), len(shape))
    t_ax = axis_of(ctx, node, node.int("time_axis", 0), len(shape))
    if b_ax == t_ax or len(lens) != shape[b_ax] or any(not 0 <= n <= shape[t_ax] for n in lens):
        ctx.fail(node, f"its sequence_lens {lens} or axes do not fit the input of shape {shape}")
    rows = []
    for b, n in enumerate(lens):
        row = slice_axes(ctx, x, {b_ax: (b, b + 1, 1)})
        parts = [slice_axes(ctx, row, {t_ax: (n - 1, -shape[t_ax] - 1, -1)})] if n else []
        if n < shape[t_ax]:
            parts.append(slice_axes(ctx, row, {t_ax: (n, shape[t_ax], 1)}))
        rows.append(parts[0] if len(parts) == 1 else ctx.op("concat", *parts, axis=t_ax))
    return rows[0] if len(rows) == 1 else ctx.op("concat", *rows, axis=b_ax)


# --- data-dependent shapes: folded when constant ----------------------------------------------------------------
@converter("NonZero")
def non_zero(ctx, node):
    return fold(ctx, node, "its input must be constant", lambda x: np.array(np.nonzero(x), INT64), 0)


@converter("Compress")
def compress(ctx, node):
    axis = node.int("axis", None)
    return fold(ctx, node, "its condition and input must be constant",
                lambda x, c: np.compress(c.astype(bool), x, axis=axis), 0, 1)


@converter("Unique")
def unique(ctx, node):
    """onnx's reference semantics: sorted (np.unique) or in first-occurrence order."""
    axis, is_sorted = node.int("axis", None), node.int("sorted", 1)

    def run(x):
        y, ind, inv, cnt = np.unique(x, True, True, True, axis=axis)
        if not is_sorted:
            order = np.argsort(ind, kind="stable")
            y = np.take(y, order, axis=0 if axis is None else axis)
            remap = np.empty_like(order)
            remap[order] = np.arange(len(order))
            ind, cnt, inv = ind[order], cnt[order], remap[inv.reshape(-1)]
        return y, ind.astype(INT64), inv.reshape(-1).astype(INT64), cnt.astype(INT64)
    return fold(ctx, node, "its input must be constant", run, 0)


# --- Einsum ----------------------------------------------------------------------------------------------------
@converter("Einsum")
def einsum(ctx, node):
    """Diagonals by a strided slice, letters used nowhere else summed out, operands contracted pairwise by matmul."""
    eq = node.string("equation").replace(" ", "")
    refs = [r for r in ctx.inputs(node)]
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(refs) or not all(ch in string.ascii_letters + ".," for ch in lhs) or \
            (arrow and not all(ch in string.ascii_letters + "." for ch in rhs)):
        ctx.fail(node, f"its equation {eq!r} is malformed for {len(refs)} inputs")
    ell_rank = 0
    for t, r in zip(terms, refs):
        n = len(ctx.shape(r))
        if "..." in t:
            ell_rank = max(ell_rank, n - len(t.replace("...", "")))
        elif len(t) != n:
            ctx.fail(node, f"its term {t!r} does not name the {n} axes of its input")
    ell = [chr(0x100 + i) for i in range(ell_rank)]  # fresh letters for the ellipsis' axes

    def expand_term(t, n):
        if "..." not in t:
            return list(t)
        k = n - len(t.replace("...", ""))
        if k < 0 or t.count("...") > 1:
            ctx.fail(node, f"its term {t!r} does not fit an input of rank {n}")
        head, tail = t.split("...")
        return list(head) + ell[ell_rank - k:] + list(tail)

    ops = [(r, expand_term(t, len(ctx.shape(r)))) for t, r in zip(terms, refs)]
    if arrow:
        if "..." in rhs:
            head, tail = rhs.split("...")
            out = list(head) + ell + list(tail)
        else:
            out = list(rhs)
    else:
        counts = {}
        for _, letters in ops:
            for ch in letters:
                counts[ch] = counts.get(ch, 0) + 1
        out = ell + sorted(ch for ch, c in counts.items() if c == 1 and ch not in ell)
    sizes = {}
    for r, letters in ops:
        for ch, s in zip(letters, ctx.shape(r)):
            if sizes.setdefault(ch, s) != s:
                if ch not in ell or 1 not in (s, sizes[ch]):
                    ctx.fail(node, f"its index {ch!r} has sizes {sizes[ch]} and {s}, which do not broadcast")
                sizes[ch] = max(s, sizes[ch])
    # the ellipsis' axes broadcast: expand the size-1 ones
    ops = [(r if all(sizes[c] == s for c, s in zip(l, ctx.shape(r)))
            else ctx.op("expand", r, shape=tuple(sizes[c] for c in l)), l) for r, l in ops]
    if len(set(out)) != len(out) or any(ch not in sizes for ch in out):
        ctx.fail(node, f"its output {rhs!r} repeats an index or names one no input has")
    ops = [_diagonals(ctx, r, letters) for r, letters in ops]
    cur, cur_l = ops[0]
    for i in range(1, len(ops) + 1):
        later = set(out).union(*(set(l) for _, l in ops[i:]))
        cur, cur_l = _sum_out(ctx, cur, cur_l, [c for c in cur_l if c not in later])
        if i == len(ops):
            break
        b, b_l = ops[i]
        later_b = set(out).union(*(set(l) for _, l in ops[i + 1:]))
        b, b_l = _sum_out(ctx, b, b_l, [c for c in b_l if c not in later_b and c not in cur_l])
        cur, cur_l = _contract(ctx, cur, cur_l, b, b_l, later_b, sizes)
    return transpose(ctx, cur, [cur_l.index(c) for c in out])


def _diagonals(ctx, x, letters):
    """x with each repeated letter's axes reduced to their diagonal: the two axes moved last, flattened, and
    every (n+1)-th element taken."""
    letters = list(letters)
    while len(set(letters)) != len(letters):
        ch = next(c for c in letters if letters.count(c) > 1)
        i = letters.index(ch)
        j = letters.index(ch, i + 1)
        rest = [k for k in range(len(letters)) if k not in (i, j)]
        x = transpose(ctx, x, rest + [i, j])
        shape = ctx.shape(x)
        n = shape[-1]
        x = reshape(ctx, x, list(shape[:-2]) + [n * n])
        x = slice_axes(ctx, x, {len(shape) - 2: (0, n * n, n + 1)}) if n > 1 else x
        letters = [letters[k] for k in rest] + [ch]
    return x, letters


def _sum_out(ctx, x, letters, gone):
    if not gone:
        return x, letters
    axes = tuple(letters.index(c) for c in gone)
    return ctx.op("sum", x, axis=axes, keepdim=False), [c for c in letters if c not in gone]


def _contract(ctx, a, a_l, b, b_l, later, sizes):
    """a, b contracted over their shared letters not needed later; batched over shared ones that are."""
    batch = [c for c in a_l if c in b_l and c in later]
    red = [c for c in a_l if c in b_l and c not in later]
    a_only = [c for c in a_l if c not in b_l]
    b_only = [c for c in b_l if c not in a_l]
    size = lambda ls: math.prod(sizes[c] for c in ls)  # noqa: E731
    a = transpose(ctx, a, [a_l.index(c) for c in batch + a_only + red])
    a = reshape(ctx, a, [size(batch), size(a_only), size(red)])
    b = transpose(ctx, b, [b_l.index(c) for c in batch + red + b_only])
    b = reshape(ctx, b, [size(batch), size(red), size(b_only)])
    y = ctx.op("matmul", a, b)
    letters = batch + a_only + b_only
    return reshape(ctx, y, [sizes[c] for c in letters]), letters
