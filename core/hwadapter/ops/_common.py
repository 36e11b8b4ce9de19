"""Argument checks and dtype promotion shared by every op family (the bottom of the ops package)."""
from __future__ import annotations

import builtins

import numpy as np

from .. import dtypes as _dt
from ..dispatch.dispatcher import dispatch
from ..errors import InvalidArgumentError, UnsupportedDTypeError
from ..tensor import Tensor, _device_data, _make
from . import shapes

_FLOAT = frozenset(_dt.FLOATING)
_NUMERIC = frozenset(_dt.NUMERIC)
_INTEGER = frozenset(_dt.INTEGER)
_NUMBER = (bool, int, float, np.bool_, np.integer, np.floating)
_INT_RANGE = {d: (int(np.iinfo(d).min), int(np.iinfo(d).max)) for d in _dt.INTEGER}


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
    if isinstance(x, Tensor):
        return x
    raise InvalidArgumentError(f"{op}: expected a Tensor, got {type(x).__name__}. Fix: wrap it with hwadapter.to_tensor")


def _check(op: str, x: Tensor, allowed: frozenset, what: str) -> None:
    if x._dtype not in allowed:
        raise UnsupportedDTypeError(f"{op}: {what} inputs are required, got {x._dtype.name} on {x._device}. "
                                    f"Fix: cast first, e.g. x.astype('float32')")


def _op_dtype(op: str, dtype) -> np.dtype:
    try:
        return _dt.as_dtype(dtype)
    except UnsupportedDTypeError as err:
        raise UnsupportedDTypeError(f"{op}: {err}") from None


def cast(x, dtype):
    """x converted to `dtype` (float to int truncates toward zero)."""
    x = _tensor("cast", x)
    dt = _op_dtype("cast", dtype)
    if dt == x._dtype:
        return x
    return dispatch("cast", (x,), {"dtype": dt.name})


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
        elif isinstance(x, _NUMBER):
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
