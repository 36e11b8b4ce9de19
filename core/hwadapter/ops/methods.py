"""Tensor's operators and methods, bound to the frontend functions."""
from __future__ import annotations

import builtins
import operator

import numpy as np

from ..errors import InvalidArgumentError
from ..tensor import Tensor
from . import api


def _reflected(fn):
    return lambda self, other: fn(other, self)


def _as_int(k):
    try:
        return operator.index(k)
    except TypeError:
        return None


def _getitem(self: Tensor, key):
    """Basic indexing: ints, slices (with steps), None, Ellipsis; a 1-D integer tensor or list gathers along axis 0."""
    if (isinstance(key, Tensor) and key.ndim > 0) or isinstance(key, list):
        if (isinstance(key, Tensor) and key.dtype == api._dt.bool_) or \
                (isinstance(key, list) and any(isinstance(k, (bool, np.bool_)) for k in key)):
            raise InvalidArgumentError("boolean-mask indexing is not supported (its shape depends on the data). "
                                       "Fix: use hwadapter.where, or .numpy()[mask]")
        if isinstance(key, list) and not all(isinstance(k, (int, np.integer)) for k in key):
            raise InvalidArgumentError(f"unsupported index {key!r}: a list index must hold ints only")
        return api.gather(self, key, axis=0)
    key = key if isinstance(key, tuple) else (key,)
    if builtins.sum(k is Ellipsis for k in key) > 1:
        raise InvalidArgumentError("an index can only have a single ellipsis ('...')")
    n_real = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if n_real > self.ndim:
        raise InvalidArgumentError(f"too many indices ({n_real}) for a tensor of rank {self.ndim}")
    if any(k is Ellipsis for k in key):  # not `in`: it would compare tensors in the key with ==
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (builtins.slice(None),) * (self.ndim - n_real) + key[i + 1:]
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
                start, stop, step = k.indices(self.shape[dim])
            except TypeError:
                raise InvalidArgumentError(f"unsupported index {k!r}: slice bounds must be ints or None") from None
            if (start, stop, step) != (0, self.shape[dim], 1):
                axes.append(dim), starts.append(k.start), ends.append(k.stop), steps.append(step)
            out_shape.append(len(range(start, stop, step)))
        elif _as_int(k) is not None:
            i = _as_int(k)
            size = self.shape[dim]
            if not -size <= i < size:
                raise InvalidArgumentError(f"index {i} is out of bounds for axis {dim} with size {size}")
            i %= size
            axes.append(dim), starts.append(i), ends.append(i + 1), steps.append(1)
        else:
            raise InvalidArgumentError(f"unsupported index {k!r}; use ints, slices, None, ... or an integer tensor")
        dim += 1
    out_shape += list(self.shape[dim:])
    out = self
    if axes:
        out = api.slice(self, axes, starts, ends, steps)
    return api._reshape(out, out_shape)


_METHODS = {
    "__add__": api.add, "__radd__": _reflected(api.add), "__sub__": api.subtract,
    "__rsub__": _reflected(api.subtract), "__mul__": api.multiply, "__rmul__": _reflected(api.multiply),
    "__truediv__": api.divide, "__rtruediv__": _reflected(api.divide), "__pow__": api.pow,
    "__rpow__": _reflected(api.pow), "__mod__": api.remainder, "__rmod__": _reflected(api.remainder),
    "__matmul__": api.matmul, "__rmatmul__": _reflected(api.matmul), "__neg__": api.neg, "__abs__": api.abs,
    "__eq__": api.equal, "__ne__": api.not_equal, "__lt__": api.less_than, "__le__": api.less_equal,
    "__gt__": api.greater_than, "__ge__": api.greater_equal, "__and__": api.logical_and,
    "__or__": api.logical_or, "__xor__": api.logical_xor, "__invert__": api.logical_not,
    "__getitem__": _getitem,
}
for _name in ("add", "subtract", "multiply", "divide", "pow", "maximum", "minimum", "remainder", "equal",
              "not_equal", "abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu",
              "erf", "sin", "cos", "floor", "ceil", "round", "sign", "cast", "astype", "clip", "sum", "prod", "mean",
              "max", "min", "argmax", "argmin", "matmul", "reshape", "flatten", "squeeze", "unsqueeze", "transpose",
              "split", "gather", "expand", "broadcast_to", "logical_not"):
    _METHODS[_name] = getattr(api, _name)

for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
Tensor.T = property(lambda self: api.transpose(self))
Tensor.__hash__ = object.__hash__
