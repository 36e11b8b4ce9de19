"""Creation ops (full, zeros, ones, arange and their *_like forms) and host-generated random values."""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import InvalidArgumentError, UnsupportedDTypeError
from ..tensor import Tensor, to_tensor
from . import shapes
from ._common import _FLOAT, _NUMBER, _op_dtype


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
    if not isinstance(fill_value, _NUMBER):
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


# --- random ----------------------------------------------------------------------------------------------
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
