"""Data movement: reshaping, transposing, joining, splitting, slicing, indexing, gathering, expanding, padding."""
from __future__ import annotations

import builtins
import math

import numpy as np

from ..api import dtypes as _dt
from ..dispatch.dispatcher import dispatch
from ..api.errors import InvalidArgumentError, UnsupportedDTypeError
from ..tensor import Tensor, to_tensor
from ..api import shapes
from ._common import _INTEGER, _promote, _tensor, check_size, fill_value, index_int64


def reshape(x, shape):
    """The same elements in another shape; -1 is inferred, 0 copies the input's dimension (paddle)."""
    x = _tensor("reshape", x)
    return _reshape(x, shapes.reshape("reshape", x.shape, shape))


def _reshape(x: Tensor, target: tuple, op: str = "reshape") -> Tensor:
    """x in a resolved shape of the same size (sizes taken literally: 0 is 0); `op` is the op the user called."""
    target = tuple(target)
    if target == x.shape:
        return x
    shapes.check_rank(op, target)  # unsqueeze and x[None, ...] grow the rank here
    return dispatch("reshape", (x,), {"shape": target})


def flatten(x, start_axis=0, stop_axis=-1):
    """Merge the axes from start_axis to stop_axis into one."""
    x = _tensor("flatten", x)
    s = shapes.normalize_axis("flatten", start_axis, builtins.max(x.ndim, 1))  # a 0-d tensor has axis 0 (or -1)
    e = shapes.normalize_axis("flatten", stop_axis, builtins.max(x.ndim, 1))
    if x.ndim == 0:
        return _reshape(x, (1,))
    if s > e:
        raise InvalidArgumentError(f"flatten: start_axis {start_axis} is after stop_axis {stop_axis}. Fix: pass "
                                   f"start_axis <= stop_axis")
    return _reshape(x, x.shape[:s] + (math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:])


def squeeze(x, axis=None):
    """Drop axes of size 1 (all of them, or those named; named axes of another size are kept, as in paddle)."""
    x = _tensor("squeeze", x)
    axes = shapes.normalize_axes("squeeze", axis, x.ndim)
    return _reshape(x, tuple(s for i, s in enumerate(x.shape) if not (i in axes and s == 1)))


def unsqueeze(x, axis):
    """Insert axes of size 1 at the given positions of the result."""
    x = _tensor("unsqueeze", x)
    axes = shapes.int_list("unsqueeze", "axis", axis, scalar_ok=True)
    ndim = x.ndim + len(axes)
    positions = sorted(shapes.normalize_axis("unsqueeze", a, ndim) for a in axes)
    if len(set(positions)) != len(positions):
        raise InvalidArgumentError(f"unsqueeze: repeated axis in {shapes.show(axis)}. Fix: name each new axis once")
    out = list(x.shape)
    for a in positions:
        out.insert(a, 1)
    return _reshape(x, out, "unsqueeze")


def transpose(x, perm=None):
    """Permute axes (reverse them when perm is None)."""
    x = _tensor("transpose", x)
    perm = tuple(reversed(range(x.ndim))) if perm is None else shapes.int_list("transpose", "perm", perm)
    if len(perm) != x.ndim or any(not -x.ndim <= p < x.ndim for p in perm) or \
            sorted(p % x.ndim for p in perm) != list(range(x.ndim)):
        raise InvalidArgumentError(f"transpose: perm {perm} is not a permutation of the {x.ndim} axes of {x.shape}. "
                                   f"Fix: list each axis 0..{x.ndim - 1} once")
    perm = tuple(p % x.ndim for p in perm)
    if perm == tuple(range(x.ndim)):
        return x
    return dispatch("transpose", (x,), {"perm": perm})


def concat(x, axis=0):
    """Join tensors along an existing axis."""
    if not isinstance(x, (list, tuple)):
        raise InvalidArgumentError(f"concat: x must be a list or tuple of tensors, not {type(x).__name__}. Fix: "
                                   f"pass [a, b, ...]")
    if not x:
        raise InvalidArgumentError("concat: needs at least one tensor. Fix: pass [a, b, ...]")
    xs = _promote("concat", *(_tensor("concat", t) for t in x))
    ax = shapes.normalize_axis("concat", axis, xs[0].ndim)
    for t in xs[1:]:
        if t.ndim != xs[0].ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, xs[0].shape)) if i != ax):
            raise InvalidArgumentError(f"concat: shapes {[t.shape for t in xs]} differ outside axis {ax}. Fix: "
                                       f"reshape or pad the inputs so only axis {ax} differs")
    return dispatch("concat", tuple(xs), {"axis": ax})


def split(x, num_or_sections, axis=0):
    """Split into equal parts (an int) or parts of given sizes (a list; one -1 is inferred)."""
    x = _tensor("split", x)
    ax = shapes.normalize_axis("split", axis, x.ndim)
    size = x.shape[ax]
    n = shapes._index(num_or_sections)
    if n is not None:
        if n <= 0 or size % n:
            raise InvalidArgumentError(f"split: axis {ax} of size {size} cannot be split into {n} equal parts. Fix: "
                                       f"pass a divisor of {size}, or a list of section sizes")
        sections = (size // n,) * n
    else:
        sections = _sections(num_or_sections, size, ax)
    return list(dispatch("split", (x,), {"sections": sections, "axis": ax}))


def _sections(num_or_sections, size: int, ax: int) -> tuple:
    """Section sizes adding up to `size`, one -1 inferred."""
    sections = list(shapes.int_list("split", "num_or_sections", num_or_sections, low=-1, scalar_ok=True))
    if sections.count(-1) > 1:
        raise InvalidArgumentError(f"split: at most one -1 in sections {sections}. Fix: give the other sizes")
    if -1 in sections:
        sections[sections.index(-1)] = size - sum(s for s in sections if s != -1)
    if not sections or sum(sections) != size or min(sections) < 0:
        raise InvalidArgumentError(f"split: sections {shapes.show(num_or_sections)} do not add up to {size} along "
                                   f"axis {ax}. Fix: pass sizes that add up to {size} (one may be -1)")
    return tuple(sections)


def slice(x, axes, starts, ends, strides=None):  # noqa: A001
    """x[starts:ends:strides] along `axes` (Python slice rules: negative and out-of-range bounds clamp; None is an
    open end)."""
    x = _tensor("slice", x)
    axes = [shapes.normalize_axis("slice", a, x.ndim) for a in shapes.int_list("slice", "axes", axes)]
    starts, ends = _bounds("starts", starts), _bounds("ends", ends)
    steps = [1] * len(axes) if strides is None else shapes.int_list("slice", "strides", strides, low=-math.inf,
                                                                      high=math.inf)
    if not len(axes) == len(starts) == len(ends) == len(steps):
        raise InvalidArgumentError(f"slice: axes, starts, ends and strides must have the same length, got "
                                   f"{len(axes)}, {len(starts)}, {len(ends)} and {len(steps)}. Fix: one value of "
                                   f"each per sliced axis")
    if 0 in steps:
        raise InvalidArgumentError("slice: a stride of 0 is not allowed. Fix: use a positive or negative stride")
    if len(set(axes)) != len(axes):
        raise InvalidArgumentError(f"slice: axis repeated in axes {axes}. Fix: slice each axis once")
    bounds = [shapes.slice_bounds(x.shape[a], s, e, st) for a, s, e, st in zip(axes, starts, ends, steps)]
    return _slice(x, axes, bounds)


def _bounds(name: str, values) -> list:
    """Slice starts or ends: ints of any size (they clamp to the axis, as Python's) or None."""
    return [None if v is None else shapes.int_arg("slice", f"{name}[{i}]", v, low=-math.inf, high=math.inf)
            for i, v in enumerate(shapes.sequence("slice", name, values))]


def _slice(x: Tensor, axes: list, bounds: list) -> Tensor:
    """The slice kernel on normalised bounds (shapes.slice_bounds): each (start, stop, step) in kernels' form."""
    return dispatch("slice", (x,), {"axes": tuple(axes), "starts": tuple(b[0] for b in bounds),
                                    "ends": tuple(b[1] for b in bounds), "steps": tuple(b[2] for b in bounds)})


def gather(x, index, axis=0):
    """Elements of x at integer `index` along `axis` (negative indices count from the end)."""
    x = _tensor("gather", x)
    ax = shapes.normalize_axis("gather", axis, x.ndim)
    if not isinstance(index, Tensor):
        index = to_tensor(_host_index(index, x.shape[ax], ax, x._device), device=x._device)
    # an index on another device is the dispatcher's to refuse (or, while tracing, to take as a constant)
    if index._dtype not in _INTEGER:
        raise UnsupportedDTypeError(f"gather: index must be an integer tensor, not {index._dtype.name}. Fix: cast "
                                    f"it with index.astype('int64') if its values are whole")
    check_size("gather", x.shape[:ax] + index.shape + x.shape[ax + 1:], x._dtype, x._device)
    return dispatch("gather", (x, index_int64(index)), {"axis": ax})


def _host_index(index, size: int, ax: int, dev) -> np.ndarray:
    """A list (or array) of indices into an axis of `size` as int64, refusing floats, bools, anything else that is
    not an integer, and indices outside the axis (checked here: they are on the host already)."""
    try:
        arr = np.asarray(index)
    except (ValueError, TypeError, OverflowError):  # ragged nesting, objects numpy cannot hold
        arr = None
    if arr is None or arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind in "fO"):
        raise UnsupportedDTypeError(f"gather: index must hold integers, not {shapes.show(index)}. Fix: pass ints, "
                                    f"e.g. [0, 2], or an integer tensor")
    if arr.size and not (-size <= arr.min() and arr.max() < size):
        bad = arr.min() if arr.min() < -size else arr.max()
        raise InvalidArgumentError(f"gather on {dev}: index {bad} is out of range for axis {ax} of size {size} "
                                   f"(valid: {-size}..{size - 1}). Fix: pass indices within the axis")
    return arr.astype(np.int64)


def _advanced(x: Tensor, key):
    """x[list] or x[integer tensor]: gather along axis 0."""
    if (isinstance(key, (Tensor, np.ndarray)) and key.dtype == _dt.bool_) or \
            (isinstance(key, list) and any(isinstance(k, (bool, np.bool_)) for k in key)):
        raise InvalidArgumentError("boolean-mask indexing is not supported (its shape depends on the data). "
                                   "Fix: use hwadapter.where, or .numpy()[mask]")
    if isinstance(key, list) and not all(isinstance(k, (int, np.integer)) for k in key):
        raise InvalidArgumentError(f"unsupported index {shapes.show(key)}: a list index must hold ints only. Fix: "
                                   f"pass a list of ints or an integer tensor")
    return gather(x, key, axis=0)


def _expand_ellipsis(x: Tensor, key: tuple) -> tuple:
    """The key with its one `...` replaced by full slices."""
    if sum(k is Ellipsis for k in key) > 1:
        raise InvalidArgumentError("an index can only have a single ellipsis ('...'). Fix: keep one")
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if n_real > x.ndim:
        raise InvalidArgumentError(f"too many indices ({n_real}) for a tensor of rank {x.ndim}. Fix: index at most "
                                   f"{x.ndim} axes")
    if any(k is Ellipsis for k in key):  # not `in`: it would compare tensors in the key with ==
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (builtins.slice(None),) * (x.ndim - n_real) + key[i + 1:]
    return key


def _scalar_key(k):
    """A 0-d integer tensor in a tuple key as its int; bools refused."""
    if isinstance(k, Tensor):
        if k.ndim or k.dtype.kind not in "iu":
            raise InvalidArgumentError(f"unsupported index: a tensor inside a tuple index must be a 0-d integer, "
                                       f"not shape {list(k.shape)} {k.dtype.name}. Fix: use k.item() or gather")
        return k.item()
    if isinstance(k, (bool, np.bool_)):
        raise InvalidArgumentError(f"unsupported index {k!r}: boolean indices are not supported. Fix: use "
                                   f"hwadapter.where")
    return k


def _slice_key(k: builtins.slice, size: int) -> tuple:
    """A slice of a key as normalised bounds (shapes.slice_bounds)."""
    if k.step is not None and shapes._index(k.step) == 0:
        raise InvalidArgumentError("slice step cannot be zero. Fix: use a positive or negative step")
    if any(v is not None and shapes._index(v) is None for v in (k.start, k.stop, k.step)):
        raise InvalidArgumentError(f"unsupported index {shapes.show(k)}: slice bounds must be ints or None. Fix: "
                                   f"pass ints")
    return shapes.slice_bounds(size, k.start, k.stop, k.step)


def getitem(x: Tensor, key):
    """x[key]: ints, slices (with steps), None and Ellipsis; a 1-D integer tensor or list gathers along axis 0."""
    if (isinstance(key, (Tensor, np.ndarray)) and key.ndim > 0) or isinstance(key, list):
        return _advanced(x, key)
    key = _expand_ellipsis(x, key if isinstance(key, tuple) else (key,))
    axes, bounds, out_shape = [], [], []
    dim = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        k, size = _scalar_key(k), x.shape[dim]
        if isinstance(k, builtins.slice):
            b = _slice_key(k, size)
            if b != (0, size, 1):
                axes.append(dim), bounds.append(b)
            out_shape.append(len(range(b[0], -1 if b[1] is None else b[1], b[2])))
        elif shapes._index(k) is not None:
            i = shapes._index(k)
            if not -size <= i < size:
                raise InvalidArgumentError(f"index {i} is out of bounds for axis {dim} with size {size}. Fix: use an "
                                           f"index in {-size}..{size - 1}")
            axes.append(dim), bounds.append((i % size, i % size + 1, 1))
        else:
            raise InvalidArgumentError(f"unsupported index {shapes.show(k)}. Fix: use ints, slices, None, ... or an "
                                       f"integer tensor")
        dim += 1
    out_shape += list(x.shape[dim:])
    out = _slice(x, axes, bounds) if axes else x
    return _reshape(out, out_shape, "indexing")


def expand(x, shape):
    """Broadcast x to `shape` (-1 keeps a dimension)."""
    return _expand("expand", x, shape)


def broadcast_to(x, shape):
    """Same as expand."""
    return _expand("broadcast_to", x, shape)


def _expand(op: str, x, shape) -> Tensor:
    x = _tensor(op, x)
    shape = shapes.int_list(op, "shape", shape, low=-1, scalar_ok=True)
    if len(shape) < x.ndim:
        raise InvalidArgumentError(f"{op}: target {shape} has fewer dimensions than {x.shape}. Fix: give a size "
                                   f"(or -1) for each of x's dimensions")
    lead = len(shape) - x.ndim
    for i, s in enumerate(shape):
        if s == -1 and i < lead:
            raise InvalidArgumentError(f"{op}: size -1 at position {i} of {shape} is not allowed: -1 keeps one "
                                       f"of the input's dimensions {x.shape}. Fix: give new leading dimensions a size")
    shape = shapes.dims(op, "shape", tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape)))
    if shapes.broadcast(op, x.shape, shape) != shape:
        raise InvalidArgumentError(f"{op}: cannot expand {x.shape} to {shape}. Fix: only dimensions of size 1 can "
                                   f"grow")
    if shape == x.shape:
        return x
    check_size(op, shape, x._dtype, x._device)
    return dispatch("expand", (x,), {"shape": shape})


_MODES = ("constant", "reflect", "replicate", "circular")


def pad(x, pad, mode="constant", value=0.0):  # noqa: A002
    """Pad with pairs (before, after): for every axis from the first when len(pad) == 2*ndim, else from the last."""
    x = _tensor("pad", x)
    p = shapes.int_list("pad", "pad", pad)
    if len(p) % 2 or len(p) > 2 * x.ndim:
        raise InvalidArgumentError(f"pad: needs an even number of values, at most {2 * x.ndim}, got {len(p)}. Fix: "
                                   f"pass (before, after) pairs, one per padded axis")
    if not isinstance(mode, str) or mode not in _MODES:
        raise InvalidArgumentError(f"pad: mode {shapes.show(mode)} is not one of {', '.join(_MODES)}. Fix: pass "
                                   f"one of those")
    if min(p, default=0) < 0:
        raise InvalidArgumentError("pad: negative padding is not supported. Fix: use slice to crop")
    value = fill_value("pad", "value", value, x._dtype)
    pairs = _pad_pairs(p, x.ndim)
    _check_pad_mode(mode, pairs, x.shape)
    if not any(a or b for a, b in pairs):
        return x  # tensors are immutable: nothing to pad is the input itself
    out = shapes.dims("pad", "result shape", tuple(s + a + b for s, (a, b) in zip(x.shape, pairs)))
    check_size("pad", out, x._dtype, x._device)
    return dispatch("pad", (x,), {"pads": tuple(pairs), "mode": mode, "value": value})


def _pad_pairs(p: tuple, ndim: int) -> list:
    """(before, after) per axis: from the first axis when p has 2*ndim values, else from the last (torch/paddle)."""
    if len(p) == 2 * ndim:
        return [(p[2 * i], p[2 * i + 1]) for i in range(ndim)]
    pairs = [(0, 0)] * ndim
    for i in range(len(p) // 2):
        pairs[ndim - 1 - i] = (p[2 * i], p[2 * i + 1])
    return pairs


def _check_pad_mode(mode: str, pairs: list, shape: tuple) -> None:
    """Refuse padding the mode cannot fill: non-constant padding of empty axes, reflect/circular beyond the axis."""
    for (a, b), s in zip(pairs, shape):
        if not (a or b) or mode == "constant":
            continue
        if s == 0:
            raise InvalidArgumentError(f"pad: {mode} padding of an empty dimension (shape {shape}) has nothing to "
                                       f"copy. Fix: use mode='constant'")
        if mode == "reflect" and max(a, b) >= s:
            raise InvalidArgumentError(f"pad: reflect padding ({a}, {b}) must be smaller than the padded dimension "
                                       f"{s} of {shape}. Fix: pad less, or use mode='constant' or 'replicate'")
        if mode == "circular" and max(a, b) > s:
            raise InvalidArgumentError(f"pad: circular padding ({a}, {b}) must be at most the padded dimension "
                                       f"{s} of {shape}. Fix: pad less, or use mode='constant' or 'replicate'")
