"""Data movement: reshaping, transposing, joining, splitting, slicing, indexing, gathering, expanding, padding."""
from __future__ import annotations

import builtins
import math
import operator

import numpy as np

from .. import dtypes as _dt
from ..dispatch.dispatcher import dispatch
from ..errors import InvalidArgumentError, UnsupportedDTypeError
from ..tensor import Tensor, to_tensor
from . import shapes
from ._common import _INTEGER, _promote, _tensor, cast


def reshape(x, shape):
    """The same elements in another shape; -1 is inferred, 0 copies the input's dimension (paddle)."""
    x = _tensor("reshape", x)
    return _reshape(x, shapes.reshape("reshape", x.shape, shape))


def _reshape(x: Tensor, target: tuple) -> Tensor:
    """x in a resolved shape of the same size (sizes taken literally: 0 is 0)."""
    target = tuple(target)
    if target == x.shape:
        return x
    return dispatch("reshape", (x,), {"shape": target})


def flatten(x, start_axis=0, stop_axis=-1):
    """Merge the axes from start_axis to stop_axis into one."""
    x = _tensor("flatten", x)
    if x.ndim == 0:
        return _reshape(x, (1,))
    s = shapes.normalize_axis("flatten", start_axis, x.ndim)
    e = shapes.normalize_axis("flatten", stop_axis, x.ndim)
    if s > e:
        raise InvalidArgumentError(f"flatten: start_axis {start_axis} is after stop_axis {stop_axis}")
    return _reshape(x, x.shape[:s] + (math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:])


def squeeze(x, axis=None):
    """Drop axes of size 1 (all of them, or those named; named axes of another size are kept, as in paddle)."""
    x = _tensor("squeeze", x)
    axes = shapes.normalize_axes("squeeze", axis, x.ndim)
    return _reshape(x, tuple(s for i, s in enumerate(x.shape) if not (i in axes and s == 1)))


def unsqueeze(x, axis):
    """Insert axes of size 1 at the given positions of the result."""
    x = _tensor("unsqueeze", x)
    axes = [axis] if shapes._index(axis) is not None else list(axis)
    out = list(x.shape)
    ndim = x.ndim + len(axes)
    for a in sorted(shapes.normalize_axis("unsqueeze", a, ndim) for a in axes):
        out.insert(a, 1)
    return _reshape(x, out)


def transpose(x, perm=None):
    """Permute axes (reverse them when perm is None)."""
    x = _tensor("transpose", x)
    perm = tuple(reversed(range(x.ndim))) if perm is None else tuple(int(p) for p in perm)
    if len(perm) != x.ndim or any(not -x.ndim <= p < x.ndim for p in perm) or \
            sorted(p % x.ndim for p in perm) != list(range(x.ndim)):
        raise InvalidArgumentError(f"transpose: perm {perm} is not a permutation of the {x.ndim} axes of {x.shape}")
    perm = tuple(p % x.ndim for p in perm)
    if perm == tuple(range(x.ndim)):
        return x
    return dispatch("transpose", (x,), {"perm": perm})


def concat(x, axis=0):
    """Join tensors along an existing axis."""
    xs = list(x)
    if not xs:
        raise InvalidArgumentError("concat: needs at least one tensor")
    xs = _promote("concat", *xs)
    ax = shapes.normalize_axis("concat", axis, xs[0].ndim)
    for t in xs[1:]:
        if t.ndim != xs[0].ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, xs[0].shape)) if i != ax):
            raise InvalidArgumentError(f"concat: shapes {[t.shape for t in xs]} differ outside axis {ax}")
    return dispatch("concat", tuple(xs), {"axis": ax})


def split(x, num_or_sections, axis=0):
    """Split into equal parts (an int) or parts of given sizes (a list; one -1 is inferred)."""
    x = _tensor("split", x)
    ax = shapes.normalize_axis("split", axis, x.ndim)
    size = x.shape[ax]
    if isinstance(num_or_sections, int):
        n = num_or_sections
        if n <= 0 or size % n:
            raise InvalidArgumentError(f"split: axis {ax} of size {size} cannot be split into {n} equal parts")
        sections = (size // n,) * n
    else:
        sections = [int(s) for s in num_or_sections]
        if sections.count(-1) > 1 or any(s < -1 for s in sections):
            raise InvalidArgumentError(f"split: bad sections {num_or_sections}")
        if -1 in sections:
            sections[sections.index(-1)] = size - sum(s for s in sections if s != -1)
        if sum(sections) != size or min(sections) < 0:
            raise InvalidArgumentError(f"split: sections {num_or_sections} do not add up to {size} along axis {ax}")
        sections = tuple(sections)
    return list(dispatch("split", (x,), {"sections": sections, "axis": ax}))


def slice(x, axes, starts, ends, strides=None):  # noqa: A001
    """x[starts:ends:strides] along `axes` (Python slice rules: negative and out-of-range bounds clamp)."""
    x = _tensor("slice", x)
    axes = [shapes.normalize_axis("slice", a, x.ndim) for a in axes]
    steps = [1] * len(axes) if strides is None else [int(s) for s in strides]
    if not len(axes) == len(starts) == len(ends) == len(steps):
        raise InvalidArgumentError("slice: axes, starts, ends and strides must have the same length")
    if 0 in steps:
        raise InvalidArgumentError("slice: a stride of 0 is not allowed")
    norm = [builtins.slice(s, e, st).indices(x.shape[a]) for a, s, e, st in zip(axes, starts, ends, steps)]
    return dispatch("slice", (x,), {"axes": tuple(axes), "starts": tuple(n[0] for n in norm),
                                    "ends": tuple(None if n[1] < 0 else n[1] for n in norm),
                                    "steps": tuple(n[2] for n in norm)})


def gather(x, index, axis=0):
    """Elements of x at integer `index` along `axis` (negative indices count from the end)."""
    x = _tensor("gather", x)
    if not isinstance(index, Tensor):
        index = to_tensor(np.asarray(index, dtype=np.int64), device=x._device)
    if index._device is not x._device:
        raise InvalidArgumentError(f"gather: index is on {index._device}, x on {x._device}; move one with .to()")
    if index._dtype not in _INTEGER:
        raise UnsupportedDTypeError(f"gather: index must be an integer tensor, not {index._dtype.name}")
    if index._dtype != _dt.int64:
        index = cast(index, _dt.int64)
    ax = shapes.normalize_axis("gather", axis, x.ndim)
    return dispatch("gather", (x, index), {"axis": ax})


def _as_int(k):
    try:
        return operator.index(k)
    except TypeError:
        return None


def getitem(x: Tensor, key):
    """x[key]: ints, slices (with steps), None and Ellipsis; a 1-D integer tensor or list gathers along axis 0."""
    if (isinstance(key, Tensor) and key.ndim > 0) or isinstance(key, list):
        if (isinstance(key, Tensor) and key.dtype == _dt.bool_) or \
                (isinstance(key, list) and any(isinstance(k, (bool, np.bool_)) for k in key)):
            raise InvalidArgumentError("boolean-mask indexing is not supported (its shape depends on the data). "
                                       "Fix: use hwadapter.where, or .numpy()[mask]")
        if isinstance(key, list) and not all(isinstance(k, (int, np.integer)) for k in key):
            raise InvalidArgumentError(f"unsupported index {key!r}: a list index must hold ints only")
        return gather(x, key, axis=0)
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise InvalidArgumentError("an index can only have a single ellipsis ('...')")
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if n_real > x.ndim:
        raise InvalidArgumentError(f"too many indices ({n_real}) for a tensor of rank {x.ndim}")
    if any(k is Ellipsis for k in key):  # not `in`: it would compare tensors in the key with ==
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (builtins.slice(None),) * (x.ndim - n_real) + key[i + 1:]
    axes, starts, ends, steps, out_shape = [], [], [], [], []
    dim = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        if isinstance(k, Tensor):
            if k.ndim or k.dtype.kind not in "iu":
                raise InvalidArgumentError(f"unsupported index: a tensor inside a tuple index must be a 0-d integer, "
                                           f"not shape {list(k.shape)} {k.dtype.name}")
            k = k.item()
        if isinstance(k, (bool, np.bool_)):
            raise InvalidArgumentError(f"unsupported index {k!r}: boolean indices are not supported; use "
                                       f"hwadapter.where")
        if isinstance(k, builtins.slice):
            if k.step is not None and _as_int(k.step) == 0:
                raise InvalidArgumentError("slice step cannot be zero")
            try:
                start, stop, step = k.indices(x.shape[dim])
            except TypeError:
                raise InvalidArgumentError(f"unsupported index {k!r}: slice bounds must be ints or None") from None
            if (start, stop, step) != (0, x.shape[dim], 1):
                axes.append(dim), starts.append(k.start), ends.append(k.stop), steps.append(step)
            out_shape.append(len(range(start, stop, step)))
        elif _as_int(k) is not None:
            i = _as_int(k)
            size = x.shape[dim]
            if not -size <= i < size:
                raise InvalidArgumentError(f"index {i} is out of bounds for axis {dim} with size {size}")
            i %= size
            axes.append(dim), starts.append(i), ends.append(i + 1), steps.append(1)
        else:
            raise InvalidArgumentError(f"unsupported index {k!r}; use ints, slices, None, ... or an integer tensor")
        dim += 1
    out_shape += list(x.shape[dim:])
    out = slice(x, axes, starts, ends, steps) if axes else x
    return _reshape(out, out_shape)


def expand(x, shape):
    """Broadcast x to `shape` (-1 keeps a dimension)."""
    x = _tensor("expand", x)
    shape = tuple(int(s) for s in shape)
    if len(shape) < x.ndim:
        raise InvalidArgumentError(f"expand: target {shape} has fewer dimensions than {x.shape}")
    lead = len(shape) - x.ndim
    for i, s in enumerate(shape):
        if s < -1 or (s == -1 and i < lead):
            raise InvalidArgumentError(f"expand: size {s} at position {i} of {shape} is not allowed: -1 keeps one "
                                       f"of the input's dimensions {x.shape}, new leading dimensions need a size")
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape))
    if shapes.broadcast("expand", x.shape, shape) != shape:
        raise InvalidArgumentError(f"expand: cannot expand {x.shape} to {shape}")
    if shape == x.shape:
        return x
    return dispatch("expand", (x,), {"shape": shape})


def broadcast_to(x, shape):
    """Same as expand."""
    return expand(x, shape)


def pad(x, pad, mode="constant", value=0.0):  # noqa: A002
    """Pad with pairs (before, after): for every axis from the first when len(pad) == 2*ndim, else from the last."""
    x = _tensor("pad", x)
    p = [int(v) for v in pad]
    if len(p) % 2 or len(p) > 2 * x.ndim:
        raise InvalidArgumentError(f"pad: needs an even number of values, at most {2 * x.ndim}, got {len(p)}")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise InvalidArgumentError(f"pad: mode {mode!r} is not one of constant, reflect, replicate, circular")
    if min(p, default=0) < 0:
        raise InvalidArgumentError("pad: negative padding is not supported; use slice to crop")
    pairs = [(0, 0)] * x.ndim
    if len(p) == 2 * x.ndim:
        pairs = [(p[2 * i], p[2 * i + 1]) for i in range(x.ndim)]
    else:  # torch/paddle style: pairs start at the last axis
        for i in range(len(p) // 2):
            pairs[x.ndim - 1 - i] = (p[2 * i], p[2 * i + 1])
    for (a, b), s in zip(pairs, x.shape):
        if not (a or b) or mode == "constant":
            continue
        if s == 0:
            raise InvalidArgumentError(f"pad: {mode} padding of an empty dimension (shape {x.shape}) has nothing to "
                                       f"copy; use mode='constant'")
        if mode == "reflect" and max(a, b) >= s:
            raise InvalidArgumentError(f"pad: reflect padding ({a}, {b}) must be smaller than the padded dimension "
                                       f"{s} of {x.shape}")
        if mode == "circular" and max(a, b) > s:
            raise InvalidArgumentError(f"pad: circular padding ({a}, {b}) must be at most the padded dimension "
                                       f"{s} of {x.shape}")
    if not any(a or b for a, b in pairs):
        return x  # tensors are immutable: nothing to pad is the input itself
    return dispatch("pad", (x,), {"pads": tuple(pairs), "mode": mode, "value": value})
