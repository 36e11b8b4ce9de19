"""The op set's frontend: validate arguments, promote dtypes, and dispatch (paddle's names where paddle has one)."""
from __future__ import annotations

import builtins
import math

import numpy as np

from .. import dtypes as _dt
from ..dispatch.dispatcher import dispatch, dispatch1, dispatch2
from ..errors import InvalidArgumentError, UnsupportedDTypeError
from ..tensor import Tensor, _device_data, _make, to_tensor
from . import shapes

_FLOAT = frozenset(_dt.FLOATING)
_INT_RANGE = {d: (int(np.iinfo(d).min), int(np.iinfo(d).max)) for d in _dt.INTEGER}
_NUMERIC = frozenset(_dt.NUMERIC)
_INTEGER = frozenset(_dt.INTEGER)


# --- helpers ---------------------------------------------------------------------------------------
def _scalar(value, like: Tensor, dtype=None, op: str = "") -> Tensor:
    """A 0-d tensor on `like`'s device (Python numbers are weakly typed: they take the tensor's dtype)."""
    dt = dtype or _dt.scalar_dtype(value, like._dtype)
    bounds = _INT_RANGE.get(dt)
    if bounds is not None and not isinstance(value, float) and not bounds[0] <= value <= bounds[1]:
        raise InvalidArgumentError(
            f"{op or 'op'}: the Python int {value} does not fit in {dt.name}, the dtype it takes next to a "
            f"{like._dtype.name} tensor (valid: {bounds[0]}..{bounds[1]}). Fix: cast the tensor to a wider dtype "
            f"first, e.g. x.astype('int64') or x.astype('float32')")
    if dt is _dt.float16 and builtins.abs(value) > 65504:
        with np.errstate(over="ignore"):  # beyond float16's range is inf, as the arithmetic would make it
            arr = np.array(value, dtype=dt)
    else:
        arr = np.array(value, dtype=dt)
    return _make(_device_data(like._device, arr), like._device)


def _tensor(op: str, x) -> Tensor:
    if type(x) is Tensor:
        return x
    if isinstance(x, Tensor):
        return x
    raise InvalidArgumentError(f"{op}: expected a Tensor, got {type(x).__name__}. Fix: wrap it with hwadapter.to_tensor")


def _check(op: str, x: Tensor, allowed: frozenset, what: str) -> None:
    if x._dtype not in allowed:
        raise UnsupportedDTypeError(f"{op}: {what} inputs are required, got {x._dtype.name} on {x._device}. "
                                    f"Fix: cast first, e.g. x.astype('float32')")


def _as_float(x: Tensor) -> Tensor:
    return x if x._dtype in _FLOAT else cast(x, _dt.DEFAULT_FLOAT)


def _promote(op: str, *xs):
    """Tensors (and Python numbers) brought to one device and one dtype."""
    tensors = [x for x in xs if isinstance(x, Tensor)]
    if not tensors:
        raise InvalidArgumentError(f"{op}: at least one input must be a Tensor")
    dt = _dt.result_type(*(t._dtype for t in tensors))
    out = []
    for x in xs:
        if isinstance(x, Tensor):
            out.append(x if x._dtype == dt else cast(x, dt))
        elif isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating)):
            v = x.item() if isinstance(x, np.generic) else x  # numpy scalars are weak, like Python numbers
            sdt = _dt.scalar_dtype(v, dt)
            out.append(_scalar(v, tensors[0], sdt, op))
        else:
            raise InvalidArgumentError(f"{op}: cannot use {type(x).__name__} as an operand; use a Tensor or a number")
    dt = _dt.result_type(*(t._dtype for t in out))
    return [t if t._dtype == dt else cast(t, dt) for t in out]


def _check_shapes(op: str, *xs: Tensor) -> None:
    first = xs[0]._data.shape
    for x in xs[1:]:
        if x._data.shape != first:
            shapes.broadcast(op, *(t._data.shape for t in xs))
            return


# --- elementwise -------------------------------------------------------------------------------------
def _binary(op: str, kind: str, doc: str):
    allowed = {"arith": _NUMERIC, "float": None, "compare": None, "logical": None}[kind]

    def fn(x, y):
        if type(x) is Tensor and type(y) is Tensor and x._dtype is y._dtype:
            xs = x._data.shape
            if xs != y._data.shape:
                shapes.broadcast(op, xs, y._data.shape)
        else:
            x, y = _promote(op, x, y)
            _check_shapes(op, x, y)
        if kind == "arith":
            if x._dtype not in allowed:
                _check(op, x, allowed, "numeric (non-bool)")
        elif kind == "float" and x._dtype not in _FLOAT:
            _check(op, x, _NUMERIC, "numeric (non-bool)")
            x, y = _as_float(x), _as_float(y)
        elif kind == "logical" and x._dtype is not _dt.bool_:
            x, y = cast(x, _dt.bool_), cast(y, _dt.bool_)
        return dispatch2(op, x, y)

    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = doc
    return fn


def _unary(op: str, kind: str, doc: str):
    def fn(x):
        x = _tensor(op, x)
        if kind == "float":
            x = _as_float(x)
        elif kind == "numeric":
            _check(op, x, _NUMERIC, "numeric (non-bool)")
        elif kind == "rounding" and x._dtype not in _FLOAT:
            _check(op, x, _NUMERIC, "numeric (non-bool)")
            return x  # integers are already whole
        elif kind == "logical" and x._dtype is not _dt.bool_:
            x = cast(x, _dt.bool_)
        return dispatch1(op, x)

    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = doc
    return fn


add = _binary("add", "arith", "x + y, broadcast.")
subtract = _binary("sub", "arith", "x - y, broadcast.")
multiply = _binary("mul", "arith", "x * y, broadcast.")
divide = _binary("div", "float", "x / y, true division (integers promote to float32).")
pow = _binary("pow", "arith", "x ** y, broadcast.")  # noqa: A001
maximum = _binary("maximum", "arith", "Elementwise maximum (nan propagates).")
minimum = _binary("minimum", "arith", "Elementwise minimum (nan propagates).")
remainder = _binary("mod", "arith", "Floor remainder: the result has the sign of y, as Python's %.")
mod = remainder
equal = _binary("equal", "compare", "x == y as bool.")
not_equal = _binary("not_equal", "compare", "x != y as bool.")
less_than = _binary("less", "compare", "x < y as bool.")
less_equal = _binary("less_equal", "compare", "x <= y as bool.")
greater_than = _binary("greater", "compare", "x > y as bool.")
greater_equal = _binary("greater_equal", "compare", "x >= y as bool.")
logical_and = _binary("logical_and", "logical", "x and y (non-zero is true).")
logical_or = _binary("logical_or", "logical", "x or y (non-zero is true).")
logical_xor = _binary("logical_xor", "logical", "x xor y (non-zero is true).")

abs = _unary("abs", "numeric", "|x|.")  # noqa: A001
neg = _unary("neg", "numeric", "-x.")
exp = _unary("exp", "float", "e ** x.")
log = _unary("log", "float", "Natural logarithm.")
sqrt = _unary("sqrt", "float", "Square root.")
rsqrt = _unary("rsqrt", "float", "1 / sqrt(x).")
reciprocal = _unary("reciprocal", "float", "1 / x.")
sigmoid = _unary("sigmoid", "float", "1 / (1 + e ** -x).")
tanh = _unary("tanh", "float", "Hyperbolic tangent.")
relu = _unary("relu", "numeric", "max(x, 0).")
erf = _unary("erf", "float", "The error function.")
sin = _unary("sin", "float", "Sine.")
cos = _unary("cos", "float", "Cosine.")
floor = _unary("floor", "rounding", "Round down.")
ceil = _unary("ceil", "rounding", "Round up.")
round = _unary("round", "rounding", "Round half to even.")  # noqa: A001
sign = _unary("sign", "numeric", "-1, 0 or 1 (0 for nan-free zero).")
logical_not = _unary("logical_not", "logical", "not x (non-zero is true).")


def gelu(x, approximate: bool = False):
    """Gaussian error linear unit; exact (erf) unless approximate=True (tanh form)."""
    x = _as_float(_tensor("gelu", x))
    if not approximate:
        return dispatch1("gelu", x)
    return dispatch("gelu", (x,), {"approximate": True})


def where(condition, x, y):
    """x where condition is true, else y, broadcast."""
    cond = _tensor("where", condition)
    if cond._dtype is not _dt.bool_:
        cond = cast(cond, _dt.bool_)
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):  # two numbers: x takes its own default dtype
        if not isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating)):
            raise InvalidArgumentError(f"where: cannot use {type(x).__name__} as an operand; use a Tensor or a number")
        v = x.item() if isinstance(x, np.generic) else x
        x = _scalar(v, cond, _dt.bool_ if isinstance(v, bool) else _dt.DEFAULT_INT if isinstance(v, int)
                    else _dt.DEFAULT_FLOAT, "where")
    x, y = _promote("where", x, y)
    _check_shapes("where", cond, x, y)
    return dispatch("where", (cond, x, y))


def cast(x, dtype):
    """x converted to `dtype` (float to int truncates toward zero)."""
    x = _tensor("cast", x)
    dt = _op_dtype("cast", dtype)
    if dt == x._dtype:
        return x
    return dispatch("cast", (x,), {"dtype": dt.name})


astype = cast


def clip(x, min=None, max=None):  # noqa: A002
    """x limited to [min, max]; either bound may be None."""
    x = _tensor("clip", x)
    _check(x=x, op="clip", allowed=_NUMERIC, what="numeric (non-bool)")
    min, max = (b.item() if isinstance(b, Tensor) and b.size == 1 else b for b in (min, max))  # noqa: A001
    for name, bound in (("min", min), ("max", max)):
        if bound is not None and not isinstance(bound, (int, float, np.integer, np.floating)) or \
                isinstance(bound, (bool, np.bool_)):
            raise InvalidArgumentError(f"clip: {name} must be a number or None, not {bound!r}")
        if bound is not None and bound != bound:
            raise InvalidArgumentError(f"clip: {name} is nan")
    if min is not None and max is not None and min > max:
        raise InvalidArgumentError(f"clip: min {min} is greater than max {max}")
    if x._dtype in _FLOAT:
        lo = None if min is None else float(min)
        hi = None if max is None else float(max)
    else:  # integer bounds, clamped to the dtype's range: rounded inward, so the result stays within [min, max]
        info = np.iinfo(x._dtype)
        lo = None if min is None or min <= info.min else (info.max if min > info.max else math.ceil(min))
        hi = None if max is None or max >= info.max else (info.min if max < info.min else math.floor(max))
    return dispatch("clip", (x,), {"min": lo, "max": hi})


# --- reductions ------------------------------------------------------------------------------------
def _op_dtype(op: str, dtype) -> np.dtype:
    try:
        return _dt.as_dtype(dtype)
    except UnsupportedDTypeError as err:
        raise UnsupportedDTypeError(f"{op}: {err}") from None


def _reduce(op: str, x, axis, keepdim, keepdims):
    x = _tensor(op, x)
    keep = builtins.bool(keepdim or keepdims)
    axes = shapes.normalize_axes(op, axis, x.ndim)
    return x, axes, keep


def _reduced(op: str, x: Tensor, axes: tuple, keep: bool) -> Tensor:
    return dispatch(op, (x,), {"axis": axes, "keepdim": keep})


def _nonempty(op: str, x: Tensor, axes: tuple) -> None:
    if any(x.shape[a] == 0 for a in axes):
        raise InvalidArgumentError(f"{op}: reducing over an empty axis has no identity (shape {x.shape}, axes "
                                   f"{axes}). Fix: check the input is not empty, or use sum/prod")


def sum(x, axis=None, keepdim=False, dtype=None, keepdims=False):  # noqa: A001
    """Sum over axes (all by default); bool and integer inputs sum in int64."""
    x, axes, keep = _reduce("sum", x, axis, keepdim, keepdims)
    if dtype is not None:
        x = cast(x, _op_dtype("sum", dtype))
    elif x._dtype not in _FLOAT and x._dtype != _dt.int64:
        x = cast(x, _dt.int64)
    return _reduced("sum", x, axes, keep)


def prod(x, axis=None, keepdim=False, dtype=None, keepdims=False):
    """Product over axes; bool and integer inputs multiply in int64."""
    x, axes, keep = _reduce("prod", x, axis, keepdim, keepdims)
    if dtype is not None:
        x = cast(x, _op_dtype("prod", dtype))
    elif x._dtype not in _FLOAT and x._dtype != _dt.int64:
        x = cast(x, _dt.int64)
    return _reduced("prod", x, axes, keep)


def mean(x, axis=None, keepdim=False, keepdims=False):
    """Arithmetic mean over axes; integer inputs give float32. The mean of nothing is nan."""
    x, axes, keep = _reduce("mean", x, axis, keepdim, keepdims)
    return _reduced("mean", _as_float(x), axes, keep)


def max(x, axis=None, keepdim=False, keepdims=False):  # noqa: A001
    """Largest element over axes."""
    x, axes, keep = _reduce("max", x, axis, keepdim, keepdims)
    _nonempty("max", x, axes)
    return _reduced("max", x, axes, keep)


def min(x, axis=None, keepdim=False, keepdims=False):  # noqa: A001
    """Smallest element over axes."""
    x, axes, keep = _reduce("min", x, axis, keepdim, keepdims)
    _nonempty("min", x, axes)
    return _reduced("min", x, axes, keep)


def _arg(op: str, x, axis, keepdim):
    x = _tensor(op, x)
    if axis is not None:
        axis = shapes.normalize_axis(op, axis, builtins.max(x.ndim, 1))  # a 0-d tensor takes axis 0 or -1
        if x.ndim == 0:
            axis = None
    _nonempty(op, x, (axis,) if axis is not None else tuple(range(x.ndim)))
    return dispatch(op, (x,), {"axis": axis, "keepdim": builtins.bool(keepdim)})


def argmax(x, axis=None, keepdim=False):
    """Index (int64) of the first largest element, over the flattened tensor when axis is None."""
    return _arg("argmax", x, axis, keepdim)


def argmin(x, axis=None, keepdim=False):
    """Index (int64) of the first smallest element, over the flattened tensor when axis is None."""
    return _arg("argmin", x, axis, keepdim)


# --- linear algebra ------------------------------------------------------------------------------------
def matmul(x, y, transpose_x=False, transpose_y=False):
    """Matrix product with numpy's batching, broadcasting and 1-D rules."""
    x, y = _promote("matmul", _tensor("matmul", x), _tensor("matmul", y))
    _check("matmul", x, _NUMERIC, "numeric (non-bool)")
    shapes.matmul(x.shape, y.shape, transpose_x, transpose_y)  # validates, naming the op
    if not (transpose_x or transpose_y):
        return dispatch("matmul", (x, y))
    return dispatch("matmul", (x, y), {"transpose_x": builtins.bool(transpose_x),
                                       "transpose_y": builtins.bool(transpose_y)})


# --- data movement -----------------------------------------------------------------------------------
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
            sections[sections.index(-1)] = size - builtins.sum(s for s in sections if s != -1)
        if builtins.sum(sections) != size or builtins.min(sections) < 0:
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
    if builtins.min(p, default=0) < 0:
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
        if mode == "reflect" and builtins.max(a, b) >= s:
            raise InvalidArgumentError(f"pad: reflect padding ({a}, {b}) must be smaller than the padded dimension "
                                       f"{s} of {x.shape}")
        if mode == "circular" and builtins.max(a, b) > s:
            raise InvalidArgumentError(f"pad: circular padding ({a}, {b}) must be at most the padded dimension "
                                       f"{s} of {x.shape}")
    if not any(a or b for a, b in pairs):
        return x  # tensors are immutable: nothing to pad is the input itself
    return dispatch("pad", (x,), {"pads": tuple(pairs), "mode": mode, "value": value})


# --- creation ------------------------------------------------------------------------------------------
def _shape_arg(op: str, shape) -> tuple:
    dims = [shape] if shapes._index(shape) is not None else shape
    try:
        out = tuple(shapes._index(s) for s in dims)
    except TypeError:
        out = (None,)
    if any(s is None or s < 0 for s in out):
        raise InvalidArgumentError(f"{op}: shape must be a non-negative int or a sequence of them, not {shape!r}")
    return out


def full(shape, fill_value, dtype=None, device=None):
    """A tensor of `shape` filled with one value."""
    if isinstance(fill_value, Tensor) and fill_value.size == 1:
        fill_value = fill_value.item()
    if not isinstance(fill_value, (bool, int, float, np.bool_, np.integer, np.floating)):
        raise InvalidArgumentError(f"full: fill_value must be a number, not {type(fill_value).__name__}")
    dt = _op_dtype("full", dtype) if dtype is not None else (
        _dt.bool_ if isinstance(fill_value, (bool, np.bool_)) else _dt.DEFAULT_INT
        if isinstance(fill_value, (int, np.integer)) else _dt.DEFAULT_FLOAT)
    value = fill_value.item() if isinstance(fill_value, np.generic) else fill_value
    if dt.kind in "iu" and isinstance(value, int) and not np.iinfo(dt).min <= value <= np.iinfo(dt).max:
        raise InvalidArgumentError(f"full: fill_value {value} does not fit in {dt.name}")
    with np.errstate(over="ignore", invalid="ignore"):
        return to_tensor(np.full(_shape_arg("full", shape), value, dt), device=device)


def zeros(shape, dtype="float32", device=None):
    """A tensor of zeros."""
    return full(shape, 0, dtype, device)


def ones(shape, dtype="float32", device=None):
    """A tensor of ones."""
    return full(shape, 1, dtype, device)


def zeros_like(x, dtype=None):
    """Zeros with x's shape, device and (by default) dtype."""
    return full(x.shape, 0, dtype or x.dtype, x.device)


def ones_like(x, dtype=None):
    """Ones with x's shape, device and (by default) dtype."""
    return full(x.shape, 1, dtype or x.dtype, x.device)


def full_like(x, fill_value, dtype=None):
    """`fill_value` with x's shape, device and (by default) dtype."""
    return full(x.shape, fill_value, dtype or x.dtype, x.device)


def arange(start, end=None, step=1, dtype=None, device=None):
    """Evenly spaced values in [start, end)."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise InvalidArgumentError("arange: step must not be 0")
    if dtype is None:
        dtype = _dt.DEFAULT_FLOAT if any(isinstance(v, float) for v in (start, end, step)) else _dt.DEFAULT_INT
    return to_tensor(np.arange(start, end, step, dtype=_dt.as_dtype(dtype)), device=device)


_rng = np.random.default_rng(0)


def seed(value: int) -> None:
    """Seed the random-number generator behind rand and randn."""
    global _rng
    _rng = np.random.default_rng(value)


def _random_dtype(op: str, dtype) -> np.dtype:
    dt = _op_dtype(op, dtype)
    if dt not in _FLOAT:
        raise UnsupportedDTypeError(f"{op}: random values need a floating dtype, not {dt.name}")
    return dt


def rand(shape, dtype="float32", device=None):
    """Uniform [0, 1) random values (generated on the host)."""
    dt = _random_dtype("rand", dtype)
    return to_tensor(_rng.random(_shape_arg("rand", shape)).astype(dt), device=device)


def randn(shape, dtype="float32", device=None):
    """Standard normal random values (generated on the host)."""
    dt = _random_dtype("randn", dtype)
    return to_tensor(_rng.standard_normal(_shape_arg("randn", shape)).astype(dt), device=device)


__all__ = [
    "add", "subtract", "multiply", "divide", "pow", "maximum", "minimum", "remainder", "mod", "equal", "not_equal",
    "less_than", "less_equal", "greater_than", "greater_equal", "logical_and", "logical_or", "logical_xor",
    "logical_not", "abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu", "gelu",
    "erf", "sin", "cos", "floor", "ceil", "round", "sign", "where", "cast", "astype", "clip", "sum", "prod", "mean",
    "max", "min", "argmax", "argmin", "matmul", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "concat",
    "split", "slice", "gather", "expand", "broadcast_to", "pad", "full", "zeros", "ones", "zeros_like",
    "ones_like", "full_like", "arange", "seed", "rand", "randn",
]
