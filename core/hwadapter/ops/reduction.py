"""Reductions: sum, prod, mean, max, min, argmax and argmin."""
from __future__ import annotations

import builtins

from ..api import dtypes as _dt
from ..dispatch.dispatcher import dispatch
from ..api.errors import InvalidArgumentError
from ..tensor import Tensor
from ..api import shapes
from ._common import _FLOAT, _as_float, _op_dtype, _tensor, cast


def _reduce(op: str, x, axis, keepdim, keepdims):
    x = _tensor(op, x)
    keep = shapes.flag(op, "keepdim", keepdim) or shapes.flag(op, "keepdims", keepdims)
    axes = shapes.normalize_axes(op, axis, x.ndim)
    return x, axes, keep


def _reduced(op: str, x: Tensor, axes: tuple, keep: bool) -> Tensor:
    return dispatch(op, (x,), {"axis": axes, "keepdim": keep})


def _nonempty(op: str, x: Tensor, axes: tuple) -> None:
    if any(x.shape[a] == 0 for a in axes):
        raise InvalidArgumentError(f"{op}: reducing over an empty axis has no identity (shape {x.shape}, axes "
                                   f"{axes}). Fix: check the input is not empty, or use sum/prod")


def _accumulate(op: str, x, axis, keepdim, dtype, keepdims) -> Tensor:
    """sum and prod: in `dtype` when given, else bool and integer inputs accumulate in int64 (uint64 in uint64: int64
    cannot hold its values above 2^63)."""
    x, axes, keep = _reduce(op, x, axis, keepdim, keepdims)
    if dtype is not None:
        x = cast(x, _op_dtype(op, dtype))
    elif x._dtype not in _FLOAT and x._dtype not in (_dt.int64, _dt.uint64):
        x = cast(x, _dt.int64)
    return _reduced(op, x, axes, keep)


def sum(x, axis=None, keepdim=False, dtype=None, keepdims=False):  # noqa: A001
    """Sum over axes (all by default); bool and integer inputs sum in int64 (uint64 in uint64)."""
    return _accumulate("sum", x, axis, keepdim, dtype, keepdims)


def prod(x, axis=None, keepdim=False, dtype=None, keepdims=False):
    """Product over axes; bool and integer inputs multiply in int64 (uint64 in uint64)."""
    return _accumulate("prod", x, axis, keepdim, dtype, keepdims)


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
    return dispatch(op, (x,), {"axis": axis, "keepdim": shapes.flag(op, "keepdim", keepdim)})


def argmax(x, axis=None, keepdim=False):
    """Index (int64) of the first largest element, over the flattened tensor when axis is None."""
    return _arg("argmax", x, axis, keepdim)


def argmin(x, axis=None, keepdim=False):
    """Index (int64) of the first smallest element, over the flattened tensor when axis is None."""
    return _arg("argmin", x, axis, keepdim)
