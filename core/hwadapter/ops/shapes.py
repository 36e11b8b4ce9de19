"""Shape rules of the op set, shared by the frontend (to validate) and plugins (to size outputs)."""
from __future__ import annotations

import math
import operator

import numpy as np

from ..errors import InvalidArgumentError


def broadcast(op: str, *shapes: tuple) -> tuple:
    """numpy broadcasting of `shapes`, or an InvalidArgumentError naming the op."""
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(-ndim, 0):
        size = 1
        for s in shapes:
            d = s[i] if -i <= len(s) else 1
            if d != 1:
                if size not in (1, d):
                    raise InvalidArgumentError(
                        f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together "
                        f"(dimension {i}: {size} vs {d}). Fix: reshape or expand the inputs so trailing dimensions "
                        f"match or are 1")
                size = d
        out.append(size)
    return tuple(out)


def _index(v):
    """v as a Python int when it is an integer (int, numpy integer, integer 0-d tensor), else None; bools are not."""
    if isinstance(v, (bool, np.bool_)):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def normalize_axes(op: str, axis, ndim: int) -> tuple:
    """Sorted non-negative axes; None means all of them, an empty sequence none of them (as numpy)."""
    if axis is None:
        return tuple(range(ndim))
    if _index(axis) is not None:
        axes = [axis]
    elif isinstance(axis, (list, tuple)):
        axes = list(axis)
    else:
        raise InvalidArgumentError(f"{op}: axis must be an int or a sequence of ints, not {axis!r}")
    out = []
    for a in axes:
        a = _index(a)
        if a is None:
            raise InvalidArgumentError(f"{op}: axis must be an int or a sequence of ints, not {axis!r}")
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise InvalidArgumentError(f"{op}: axis {a} is out of range for a tensor of rank {ndim} "
                                       f"(valid: {-ndim}..{ndim - 1})")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(out)) if ndim else ()


def normalize_axis(op: str, axis: int, ndim: int) -> int:
    """One non-negative axis."""
    a = _index(axis)
    if a is None:
        raise InvalidArgumentError(f"{op}: axis must be an int, not {axis!r}")
    if not -ndim <= a < ndim:
        raise InvalidArgumentError(f"{op}: axis {a} is out of range for a tensor of rank {ndim} "
                                   f"(valid: {-ndim}..{ndim - 1})" if ndim else
                                   f"{op}: axis {a} is out of range for a tensor of rank 0 (it has no axes)")
    return a % ndim


def reduce(shape: tuple, axes: tuple, keepdim: bool) -> tuple:
    """The shape after reducing `axes`."""
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def matmul(x: tuple, y: tuple, transpose_x=False, transpose_y=False) -> tuple:
    """Result shape of a batched, broadcast matmul with numpy's 1-D rules."""
    if not x or not y:
        raise InvalidArgumentError(f"matmul: inputs must be at least 1-D, got shapes {x} and {y}")
    if transpose_x and len(x) >= 2:
        x = x[:-2] + (x[-1], x[-2])
    if transpose_y and len(y) >= 2:
        y = y[:-2] + (y[-1], y[-2])
    xs = (1,) + x if len(x) == 1 else x
    ys = y + (1,) if len(y) == 1 else y
    if xs[-1] != ys[-2]:
        raise InvalidArgumentError(f"matmul: inner dimensions differ: x {x} has {xs[-1]} columns, y {y} has "
                                   f"{ys[-2]} rows (after transposes). Fix: transpose one input or reshape")
    batch = broadcast("matmul", xs[:-2], ys[:-2])
    out = batch + (xs[-2], ys[-1])
    if len(x) == 1:
        out = out[:-2] + out[-1:]
    if len(y) == 1:
        out = out[:-1]
    return out


def reshape(op: str, shape: tuple, target) -> tuple:
    """Resolve -1 (inferred) and 0 (copy that dimension, as in paddle) in a target shape."""
    target = [int(s) for s in target]
    if target.count(-1) > 1:
        raise InvalidArgumentError(f"{op}: at most one -1 in the target shape {target}")
    out = []
    for i, s in enumerate(target):
        if s == 0 and i < len(shape):
            s = shape[i]
        elif s < -1:
            raise InvalidArgumentError(f"{op}: negative size {s} in the target shape {target}")
        out.append(s)
    size = math.prod(shape)
    if -1 in out:
        known = math.prod(s for s in out if s != -1)
        if known == 0 or size % known:
            raise InvalidArgumentError(f"{op}: cannot reshape {tuple(shape)} ({size} elements) to {target}")
        out[out.index(-1)] = size // known
    if math.prod(out) != size:
        raise InvalidArgumentError(f"{op}: cannot reshape {tuple(shape)} ({size} elements) to {tuple(out)} "
                                   f"({math.prod(out)} elements)")
    return tuple(out)


def _pair(op: str, name: str, v) -> tuple:
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(i) for i in v)
    if len(v) != 2:
        raise InvalidArgumentError(f"{op}: {name} must be an int or a pair, not {v!r}")
    return v


def conv_padding(op: str, padding, in_hw, kernel, stride, dilation) -> tuple:
    """(top, bottom, left, right) from an int, a pair, four ints, or "SAME"/"VALID"."""
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return (0, 0, 0, 0)
        if mode != "SAME":
            raise InvalidArgumentError(f"{op}: padding must be 'SAME', 'VALID' or ints, not {padding!r}")
        out = []
        for size, k, s, d in zip(in_hw, kernel, stride, dilation):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            out += [total // 2, total - total // 2]
        return tuple(out)
    if isinstance(padding, int):
        p = (padding,) * 4
    else:
        p = tuple(int(i) for i in padding)
        if len(p) == 2:
            p = (p[0], p[0], p[1], p[1])
        elif len(p) != 4:
            raise InvalidArgumentError(f"{op}: padding must have 1, 2 or 4 values, not {padding!r}")
    if min(p) < 0:
        raise InvalidArgumentError(f"{op}: padding must not be negative, got {padding!r}")
    return p


def window_out(op: str, size: int, k: int, s: int, d: int, pad: int, ceil_mode=False) -> int:
    """Output length of a sliding window along one axis."""
    eff = (k - 1) * d + 1
    span = size + pad - eff
    if span < 0:
        raise InvalidArgumentError(f"{op}: window of {k} (dilation {d}) is larger than the padded input {size + pad}")
    return (-(-span // s) if ceil_mode else span // s) + 1


def pair(op: str, name: str, v) -> tuple:
    """An int or a pair as a pair; positive."""
    p = _pair(op, name, v)
    if min(p) <= 0:
        raise InvalidArgumentError(f"{op}: {name} must be positive, got {v!r}")
    return p


def pool_out(size: int, k: int, s: int, lo: int, hi: int, ceil_mode: bool) -> int:
    """Windows along one axis. ceil_mode keeps a last, partial window, unless it would start in the padding
    after the input (it would see no element): then it is dropped."""
    span = size + lo + hi - k
    n = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (n - 1) * s >= size + lo:
        n -= 1
    return n
