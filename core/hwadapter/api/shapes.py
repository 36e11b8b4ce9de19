"""Shape rules of the op set, shared by the frontend (to validate) and plugins (to size outputs)."""
from __future__ import annotations

import math
import operator

import numpy as np

from .errors import InvalidArgumentError


#: The most axes a tensor has: numpy's limit (NPY_MAXDIMS), which host kernels and every tensor's .numpy() share.
MAX_RANK = 64


def check_rank(op: str, shape: tuple, what: str = "the result") -> tuple:
    """`shape`, refused before anything runs when it has more axes than any tensor can have."""
    if len(shape) > MAX_RANK:
        raise InvalidArgumentError(f"{op}: {what} would have {len(shape)} axes; a tensor has at most {MAX_RANK} "
                                   f"(numpy's limit). Fix: merge axes with reshape, or add fewer new axes")
    return shape


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


#: The largest size, index or attribute an op accepts: numpy's (and every kernel's) index type.
INDEX_MAX = int(np.iinfo(np.intp).max)
_WIDEST = 8  # bytes of the widest element (int64, float64)


def _index(v):
    """v as a Python int when it is an integer (int, numpy integer, integer 0-d tensor), else None; bools are not."""
    if isinstance(v, (bool, np.bool_)):
        return None
    try:
        return operator.index(v)
    except (TypeError, ValueError):  # ValueError: a tensor of several elements says it has no single value
        return None


def show(value, limit: int = 60) -> str:
    """repr(value) cut to `limit` characters, for error messages (junk arguments can be huge)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _int_hint(value) -> str:
    if isinstance(value, str):
        return f"pass the number itself, e.g. int({value!r}) if it is one"
    if isinstance(value, (float, np.floating)):
        return "pass an int; round or truncate the float explicitly first if that is what you mean"
    return "pass a Python int"


def int_arg(op: str, name: str, value, low: int = -INDEX_MAX, high: int = INDEX_MAX) -> int:
    """`value` as a Python int in [low, high]: ints, numpy integers and integer 0-d tensors; bool, float and str
    are refused, never truncated or parsed."""
    i = _index(value)
    if i is None:
        raise InvalidArgumentError(f"{op}: {name} must be an int, not {show(value)} ({type(value).__name__}). "
                                   f"Fix: {_int_hint(value)}")
    if not low <= i <= high:
        raise InvalidArgumentError(f"{op}: {name} = {show(i)} is out of range (valid: {_bound(low, '-inf')}.."
                                   f"{_bound(high, 'inf')}). Fix: pass a {name} in that range")
    return i


def flag(op: str, name: str, value) -> bool:
    """A yes/no attribute: True, False (numpy's bools, and the ints 0 and 1, too); anything else is refused, as
    a string such as 'False' would otherwise count as true."""
    if isinstance(value, (bool, np.bool_)) or (_index(value) in (0, 1) and not hasattr(value, "ndim")):
        return bool(value)
    raise InvalidArgumentError(f"{op}: {name} must be True or False, not {show(value)} ({type(value).__name__}). "
                               f"Fix: pass a bool")


def _bound(b: int, unbounded: str) -> str:
    return unbounded if abs(b) >= INDEX_MAX else str(b)


def sequence(op: str, name: str, value) -> tuple:
    """The elements of a list, tuple, 1-D integer array or tensor, unchecked."""
    return _items(op, name, value, False)


def _items(op: str, name: str, value, scalar_ok: bool) -> tuple:
    """The elements of a list, tuple, 1-D integer array or tensor (or one int, when scalar_ok)."""
    if isinstance(value, (list, tuple)):
        return tuple(value)
    if scalar_ok and (type(value) is int or _index(value) is not None):
        return (value,)
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    if kind in ("i", "u") and getattr(value, "ndim", None) == 1:  # a numpy array or a Tensor of ints
        return tuple(value.tolist())
    what = "an int or a sequence of ints" if scalar_ok else "a list or tuple of ints"
    raise InvalidArgumentError(f"{op}: {name} must be {what}, not {show(value)} ({type(value).__name__}). "
                               f"Fix: pass e.g. [2, 3]")


def int_list(op: str, name: str, value, length=None, low: int = -INDEX_MAX, high: int = INDEX_MAX,
             scalar_ok: bool = False) -> tuple:
    """`value` as a tuple of Python ints, each in [low, high]: a list, tuple, 1-D integer array or tensor (or one
    int when scalar_ok); `length` is the required length, or a tuple of the allowed ones."""
    items = _items(op, name, value, scalar_ok)
    allowed = (length,) if isinstance(length, int) else length
    if allowed is not None and len(items) not in allowed:
        counts = " or ".join(str(n) for n in allowed)
        raise InvalidArgumentError(f"{op}: {name} must have {counts} values, not {len(items)} ({show(value)}). "
                                   f"Fix: pass {counts} ints")
    if _plain(items, low, high):  # the usual case, without a call per element
        return items
    return tuple(int_arg(op, f"{name}[{i}]", v, low, high) for i, v in enumerate(items))


def _plain(items: tuple, low: int, high: int) -> bool:
    """True when every item is a Python int (not a bool) in [low, high]."""
    for v in items:
        if type(v) is not int or not low <= v <= high:
            return False
    return True


def dims(op: str, name: str, value, scalar_ok: bool = True) -> tuple:
    """A shape: non-negative ints (one int when scalar_ok) whose element count numpy can index."""
    return _indexable(op, name, check_rank(op, int_list(op, name, value, low=0, scalar_ok=scalar_ok), name))


def _indexable(op: str, name: str, shape: tuple) -> tuple:
    """`shape`, refused when numpy could not index its elements (its bound counts the dimensions of empty arrays)."""
    count = math.prod(d for d in shape if d) if 0 in shape else math.prod(shape)
    if count * _WIDEST > INDEX_MAX:
        raise InvalidArgumentError(f"{op}: {name} {show(shape)} has more elements than any array can index "
                                   f"(at most {INDEX_MAX // _WIDEST}). Fix: use a smaller shape")
    return shape


def normalize_axes(op: str, axis, ndim: int) -> tuple:
    """Sorted non-negative axes; None means all of them, an empty sequence none of them (as numpy)."""
    if axis is None:
        return tuple(range(ndim))
    out = [_in_range(op, a, ndim, max(ndim, 1)) for a in int_list(op, "axis", axis, scalar_ok=True)]
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"{op}: repeated axis in {show(axis)}. Fix: name each axis once")
    return tuple(sorted(out)) if ndim else ()


def normalize_axis(op: str, axis, ndim: int) -> int:
    """One non-negative axis."""
    return _in_range(op, int_arg(op, "axis", axis), ndim, ndim)


def _in_range(op: str, a: int, ndim: int, limit: int) -> int:
    """Axis `a` of a rank-`ndim` tensor, non-negative; `limit` axes are accepted (1 for reductions of a 0-d)."""
    if not -limit <= a < limit:
        valid = f"valid: {-ndim}..{ndim - 1}" if ndim else "it has no axes"
        raise InvalidArgumentError(f"{op}: axis {a} is out of range for a tensor of rank {ndim} ({valid}). "
                                   f"Fix: pass an axis in that range (negative axes count from the end)")
    return a % limit


def reduce(shape: tuple, axes: tuple, keepdim: bool) -> tuple:
    """The shape after reducing `axes`."""
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def matmul(x: tuple, y: tuple, transpose_x=False, transpose_y=False) -> tuple:
    """Result shape of a batched, broadcast matmul with numpy's 1-D rules."""
    if not x or not y:
        raise InvalidArgumentError(f"matmul: inputs must be at least 1-D (as numpy's), got shapes {x} and {y}. Fix: "
                                   f"to scale by a 0-d tensor use multiply (x * y); else reshape it to [1] or [1, 1]")
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
    target = check_rank(op, int_list(op, "shape", target, scalar_ok=True), "the target shape")
    size = math.prod(shape)
    if min(target, default=1) > 0 and math.prod(target) == size:
        return target  # the usual case: every size given
    return _resolve(op, shape, list(target), size)


def _resolve(op: str, shape: tuple, target: list, size: int) -> tuple:
    if min(target, default=0) < -1:
        raise InvalidArgumentError(f"{op}: negative size {min(target)} in the target shape {target}. Fix: sizes are "
                                   f">= 0, with one -1 to infer a size")
    if target.count(-1) > 1:
        raise InvalidArgumentError(f"{op}: at most one -1 in the target shape {target}. Fix: give every other "
                                   f"size explicitly")
    out = [shape[i] if s == 0 and i < len(shape) else s for i, s in enumerate(target)]
    if -1 in out:
        known = math.prod(s for s in out if s != -1)
        if known == 0 or size % known:
            raise InvalidArgumentError(f"{op}: cannot reshape {tuple(shape)} ({size} elements) to {target}. "
                                       f"Fix: the known sizes must divide {size}")
        out[out.index(-1)] = size // known
    if math.prod(out) != size:
        raise InvalidArgumentError(f"{op}: cannot reshape {tuple(shape)} ({size} elements) to {tuple(out)} "
                                   f"({math.prod(out)} elements). Fix: pick a shape with {size} elements, or -1 "
                                   f"for one size to be inferred")
    return _indexable(op, "shape", tuple(out))  # an empty result's other sizes are not bounded by its count


def _pair(op: str, name: str, v, low: int) -> tuple:
    p = int_list(op, name, v, length=(1, 2), low=low, scalar_ok=True)
    return p * 2 if len(p) == 1 else p


def conv_padding(op: str, padding, in_hw, kernel, stride, dilation) -> tuple:
    """(top, bottom, left, right) from an int, a pair, four ints, or "SAME"/"VALID"."""
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return (0, 0, 0, 0)
        if mode != "SAME":
            raise InvalidArgumentError(f"{op}: padding must be 'SAME', 'VALID' or ints, not {show(padding)}. "
                                       f"Fix: pass 'SAME', 'VALID', an int, a pair or four ints")
        out = []
        for size, k, s, d in zip(in_hw, kernel, stride, dilation):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            out += [total // 2, total - total // 2]
        return tuple(out)
    p = int_list(op, "padding", padding, length=(1, 2, 4), low=0, scalar_ok=True)
    if len(p) == 1:
        return p * 4
    if len(p) == 2:
        return (p[0], p[0], p[1], p[1])
    return p


def residual(shape, out) -> None:
    """conv2d's fused residual input is added to the output as it is: it must have the output's shape."""
    if tuple(shape) != tuple(out):
        raise InvalidArgumentError(f"conv2d: the residual input has shape {tuple(shape)}, the output {tuple(out)}. "
                                   "Fix: fuse only an add of the output's own shape")


def bias(op: str, shape, out) -> None:
    """A fused bias adds one value per element of the output's last dimension: its shape is that dimension's."""
    if len(out) == 0 or tuple(shape) != (out[-1],):
        raise InvalidArgumentError(f"{op}: the fused bias has shape {tuple(shape)}, the output {tuple(out)}. "
                                   f"Fix: fuse only an add of a vector as long as the output's last dimension")


def window_out(op: str, size: int, k: int, s: int, d: int, pad: int, ceil_mode=False) -> int:
    """Output length of a sliding window along one axis."""
    eff = (k - 1) * d + 1
    span = size + pad - eff
    if span < 0:
        raise InvalidArgumentError(f"{op}: window of {k} (dilation {d}) is larger than the padded input {size + pad}. "
                                   f"Fix: pad the input, or use a smaller kernel or dilation")
    return (-(-span // s) if ceil_mode else span // s) + 1


def pair(op: str, name: str, v) -> tuple:
    """An int or a pair as a pair of positive ints."""
    return _pair(op, name, v, 1)


def pool_out(size: int, k: int, s: int, lo: int, hi: int, ceil_mode: bool) -> int:
    """Windows along one axis. ceil_mode keeps a last, partial window, unless it would start in the padding
    after the input (it would see no element): then it is dropped."""
    span = size + lo + hi - k
    n = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (n - 1) * s >= size + lo:
        n -= 1
    return n


def slice_bounds(size: int, start, stop, step: int) -> tuple:
    """(start, stop, step) of `x[start:stop:step]` on an axis of `size`, in the one form kernels receive: Python's
    slice rules applied, an empty slice as (0, 0, 1), else 0 <= start < size and stop in [0, size] or None (past
    the beginning, for a negative step); a step beyond the axis (any int: Python's) takes one element, as step 1."""
    start, stop, step = slice(start, stop, step).indices(size)
    n = len(range(start, stop, step))
    if not n:
        return (0, 0, 1)
    if n == 1:  # the one form of a one-element slice, whatever its step: kernels' attributes stay within int64
        return (start, start + 1, 1)
    return (start, None if stop < 0 else stop, step)
