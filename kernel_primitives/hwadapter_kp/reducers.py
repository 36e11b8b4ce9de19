"""Reductions: accumulator dtype, identity, combining functor and numpy semantics."""

import math
import types
from dataclasses import dataclass

import numpy as np

from . import dtypes as dt
from .errors import KernelError
from .functors import Functor


@dataclass(frozen=True)
class Reducer:
    """A reduction usable in kp.reduce: sum, prod, max, min or mean."""

    name: str
    combine: str    # name of the binary functor folding a value into the accumulator
    doc: str

    def acc_dtype(self, dtype: str) -> str:
        """Logical dtype of the accumulator (and of the reduced value)."""
        if self.name in ("sum", "prod") and (dt.is_int(dtype) or dtype == "bool"):
            # numpy: sum/prod of small ints and bool accumulate in int64, of unsigned ints in uint64
            return "uint64" if dt.is_unsigned(dtype) else "int64"
        if self.name == "mean" and not dt.is_float(dtype):
            raise KernelError(f"reduction 'mean' needs a floating dtype, got {dtype}; cast first")
        return dtype

    def identity(self, acc_dtype: str):
        """Starting value of the accumulator."""
        if self.name in ("sum", "mean"):
            return 0
        if self.name == "prod":
            return 1
        if acc_dtype == "bool":
            return self.name == "min"
        if dt.is_float(acc_dtype):
            return -np.inf if self.name == "max" else np.inf
        info = np.iinfo(acc_dtype)
        return int(info.min if self.name == "max" else info.max)

    def numpy(self, x: np.ndarray, axes: tuple, acc_dtype: str) -> np.ndarray:
        """Reduce register array ``x`` over ``axes`` keeping dims, in the accumulator dtype."""
        reg = np.dtype(dt.register(acc_dtype))
        if self.name in ("max", "min"):
            if x.size == 0:
                # unobservable unless stored, and Program.bind rejects storing it
                return np.full(_kept_shape(x, axes), self.identity(acc_dtype), reg)
            fn = np.max if self.name == "max" else np.min
            return fn(x, axis=axes, keepdims=True)
        if self.name == "sum":
            return np.sum(x, axis=axes, dtype=reg, keepdims=True)
        if self.name == "prod":
            return np.prod(x, axis=axes, dtype=reg, keepdims=True)
        count = math.prod(x.shape[a] for a in axes)
        total = np.sum(x, axis=axes, dtype=reg, keepdims=True)
        return (total / reg.type(count)).astype(reg) if count else np.full(total.shape, np.nan, reg)


def _kept_shape(x, axes):
    return tuple(1 if i in axes else s for i, s in enumerate(x.shape))


_REDUCERS = [
    Reducer("sum", "add", "sum (ints/bool accumulate in int64, float16 in float32)"),
    Reducer("prod", "mul", "product (ints/bool accumulate in int64)"),
    Reducer("max", "max", "maximum (NaN propagates; error over an empty extent)"),
    Reducer("min", "min", "minimum (NaN propagates; error over an empty extent)"),
    Reducer("mean", "add", "arithmetic mean; floats only"),
]
REDUCERS = {r.name: r for r in _REDUCERS}
reducers = types.SimpleNamespace(**REDUCERS)
_BY_COMBINE = {"add": "sum", "mul": "prod", "max": "max", "min": "min"}


def lookup_reducer(op) -> Reducer:
    """The reducer for a name, a Reducer, or a combining functor (add→sum, mul→prod, max, min)."""
    if isinstance(op, Reducer):
        return op
    if isinstance(op, Functor):
        op = _BY_COMBINE.get(op.name, op.name)
    if isinstance(op, str) and op in REDUCERS:
        return REDUCERS[op]
    raise KernelError(f"unknown reduction {op!r}; known: {', '.join(REDUCERS)}")
