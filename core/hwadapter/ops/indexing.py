"""Ordering, scans and index movement: topk, cumsum, cumprod, take_along_axis, put_along_axis, gather_nd,
scatter_nd_add (paddle's names and signatures)."""
from __future__ import annotations

import numpy as np

from ..api import dtypes as _dt
from ..dispatch.dispatcher import dispatch
from ..api.errors import InvalidArgumentError, UnsupportedDTypeError
from ..tensor import Tensor, to_tensor
from ..api import shapes
from ._common import _INTEGER, _NUMERIC, _check, _tensor, cast, check_size, index_int64
from .manipulation import _reshape, broadcast_to


def topk(x, k, axis=None, largest=True, sorted=True):  # noqa: A002  paddle's name
    """(values, int64 indices) of the k largest (or smallest) elements along axis (default: the last); equal
    values come in index order."""
    x = _tensor("topk", x)
    if x.ndim == 0:
        raise InvalidArgumentError("topk: x is 0-d; it needs an axis to pick from. Fix: x.reshape([1])")
    ax = shapes.normalize_axis("topk", -1 if axis is None else axis, x.ndim)
    k = shapes.int_arg("topk", "k", k, low=0, high=x.shape[ax])
    attrs = {"k": k, "axis": ax, "largest": shapes.flag("topk", "largest", largest),
             "sorted": shapes.flag("topk", "sorted", sorted)}
    return dispatch("topk", (x,), attrs)


def _scan(op: str, x, axis, dtype, exclusive, reverse):
    x = _tensor(op, x)
    if dtype is not None:
        x = cast(x, dtype)
    elif x._dtype == _dt.bool_:  # sums count: as paddle and numpy, bools add up as int64
        x = cast(x, _dt.int64)
    _check(op, x, _NUMERIC, "numeric")
    if axis is None:  # paddle: over the flattened tensor
        x, axis = _reshape(x, (x.size,)), 0
    attrs = {"axis": shapes.normalize_axis(op, axis, max(x.ndim, 1)),
             "exclusive": shapes.flag(op, "exclusive", exclusive), "reverse": shapes.flag(op, "reverse", reverse)}
    return dispatch(op, (x,), attrs)


def cumsum(x, axis=None, dtype=None, exclusive=False, reverse=False):
    """Running sums along axis (None: of the flattened tensor); exclusive leaves each element out of its own sum,
    reverse runs from the end."""
    return _scan("cumsum", x, axis, dtype, exclusive, reverse)


def cumprod(x, dim=None, dtype=None, exclusive=False, reverse=False):
    """Running products along dim (None: of the flattened tensor), as cumsum."""
    return _scan("cumprod", x, dim, dtype, exclusive, reverse)


def _index_tensor(op: str, name: str, index, dev) -> Tensor:
    if not isinstance(index, Tensor):
        arr = np.asarray(index)
        if arr.dtype.kind not in "iu":
            raise UnsupportedDTypeError(f"{op}: {name} must hold integers, not {shapes.show(index)}. Fix: pass ints "
                                        f"or an integer tensor")
        index = to_tensor(arr.astype(np.int64), device=dev)
    if index._dtype not in _INTEGER:
        raise UnsupportedDTypeError(f"{op}: {name} must be an integer tensor, not {index._dtype.name}. Fix: cast it "
                                    f"with .astype('int64') if its values are whole")
    return index_int64(index)


def _along_axis(op: str, arr, indices, axis):
    x = _tensor(op, arr)
    idx = _index_tensor(op, "indices", indices, x._device)
    ax = shapes.normalize_axis(op, axis, max(x.ndim, 1))
    if idx.ndim != x.ndim or x.ndim == 0 or \
            any(i > s for a, (i, s) in enumerate(zip(idx.shape, x.shape)) if a != ax):
        raise InvalidArgumentError(f"{op}: indices of shape {idx.shape} do not fit arr of shape {x.shape} along axis "
                                   f"{ax}: they need arr's number of axes and no larger a size on the other axes. "
                                   f"Fix: reshape indices")
    return x, idx, ax


def take_along_axis(arr, indices, axis):
    """arr's elements at `indices` along axis, at the indices' own positions elsewhere (torch.gather)."""
    x, idx, ax = _along_axis("take_along_axis", arr, indices, axis)
    check_size("take_along_axis", idx.shape, x._dtype, x._device)
    return dispatch("gather_elements", (x, idx), {"axis": ax})


_REDUCE = {"assign": "none", "add": "add", "mul": "mul", "multiply": "mul", "amax": "max", "amin": "min"}


def put_along_axis(arr, indices, values, axis, reduce="assign"):  # noqa: A002  paddle's name
    """arr with `values` written at `indices` along axis (reduce: 'assign', or 'add', 'mul', 'amax', 'amin' to
    combine with what is there); repeated indices with 'assign' keep one of their values."""
    x, idx, ax = _along_axis("put_along_axis", arr, indices, axis)
    if reduce not in _REDUCE:
        raise InvalidArgumentError(f"put_along_axis: reduce must be one of {', '.join(_REDUCE)}, not "
                                   f"{shapes.show(reduce)}. Fix: pass one of those")
    upd = _values("put_along_axis", values, x, idx.shape)
    return dispatch("scatter_elements", (x, idx, upd), {"axis": ax, "reduction": _REDUCE[reduce]})


def _values(op: str, values, x: Tensor, shape: tuple) -> Tensor:
    """values as a tensor of x's dtype and of `shape` (a number or a broadcastable tensor is expanded)."""
    v = values if isinstance(values, Tensor) else to_tensor(np.asarray(values, dtype=x._dtype), device=x._device)
    if v._dtype != x._dtype:
        v = cast(v, x._dtype)
    if v.shape != tuple(shape):
        shapes.broadcast(op, v.shape, tuple(shape))
        v = broadcast_to(v, tuple(shape))
    return v


def _nd_index(op: str, x: Tensor, index) -> Tensor:
    idx = _index_tensor(op, "index", index, x._device)
    if idx.ndim == 0 or not 1 <= idx.shape[-1] <= x.ndim:
        raise InvalidArgumentError(f"{op}: index of shape {idx.shape} must end in an axis of 1..{x.ndim} "
                                   f"coordinates (x has {x.ndim} axes). Fix: index[..., k] addresses x's first k axes")
    return idx


def gather_nd(x, index):
    """The elements (or slices) of x at the coordinates in index's last axis: shape index.shape[:-1] +
    x.shape[index.shape[-1]:]."""
    x = _tensor("gather_nd", x)
    idx = _nd_index("gather_nd", x, index)
    check_size("gather_nd", idx.shape[:-1] + x.shape[idx.shape[-1]:], x._dtype, x._device)
    return dispatch("gather_nd", (x, idx), {"batch_dims": 0})


def scatter_nd_add(x, index, updates):
    """x with updates added at the coordinates in index's last axis (repeated coordinates add up)."""
    x = _tensor("scatter_nd_add", x)
    idx = _nd_index("scatter_nd_add", x, index)
    upd = _values("scatter_nd_add", updates, x, idx.shape[:-1] + x.shape[idx.shape[-1]:])
    return dispatch("scatter_nd", (x, idx, upd), {"reduction": "add"})
