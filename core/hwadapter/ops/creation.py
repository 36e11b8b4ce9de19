"""Creation ops (full, zeros, ones, arange and their *_like forms) and host-generated random values."""
from __future__ import annotations

import math

import numpy as np

from ..api import dtypes as _dt
from ..api.errors import InvalidArgumentError, OutOfMemoryError, UnsupportedDTypeError
from ..tensor import _device_data, _make, target_device
from ..api import shapes
from ._common import _FLOAT, _NUMERIC, _op_dtype, _tensor, check_size, number_arg
from ._common import fill_value as _held


def _shape_arg(op: str, shape) -> tuple:
    return shapes.dims(op, "shape", shape)


def _host(op: str, dims: tuple, dt: np.dtype, dev, make):
    """The tensor `make()` builds on the host, on `dev`, once its size is known to fit."""
    check_size(op, dims, dt, dev, staged=True)
    try:
        arr = make()
    except MemoryError:  # the size fits the device, but the host has not that much free now
        raise OutOfMemoryError(f"{op}: no host memory for a {dims} {dt.name} result on {dev}. Fix: free memory "
                               f"or use a smaller shape") from None
    return _make(_device_data(dev, arr), dev)


def _default_dtype(value) -> np.dtype:
    if isinstance(value, bool):
        return _dt.bool_
    return _dt.DEFAULT_INT if isinstance(value, int) else _dt.DEFAULT_FLOAT


def full(shape, fill_value, dtype=None, device=None):
    """A tensor of `shape` filled with one value (refused when `dtype` cannot hold it)."""
    return _full("full", shape, fill_value, dtype, device)


def _full(op: str, shape, fill_value, dtype, device):
    dims = _shape_arg(op, shape)
    number = number_arg(op, "fill_value", fill_value)
    dt = _op_dtype(op, dtype) if dtype is not None else _default_dtype(number)
    value = _held(op, "fill_value", number, dt)
    return _host(op, dims, dt, target_device(device), lambda: np.full(dims, value, dt))


def zeros(shape, dtype="float32", device=None):
    """A tensor of zeros."""
    return _full("zeros", shape, 0, dtype, device)


def ones(shape, dtype="float32", device=None):
    """A tensor of ones."""
    return _full("ones", shape, 1, dtype, device)


def zeros_like(x, dtype=None):
    """Zeros with x's shape, device and (by default) dtype."""
    x = _tensor("zeros_like", x)
    return _full("zeros_like", x.shape, 0, x.dtype if dtype is None else dtype, x.device)


def ones_like(x, dtype=None):
    """Ones with x's shape, device and (by default) dtype."""
    x = _tensor("ones_like", x)
    return _full("ones_like", x.shape, 1, x.dtype if dtype is None else dtype, x.device)


def full_like(x, fill_value, dtype=None):
    """`fill_value` with x's shape, device and (by default) dtype."""
    x = _tensor("full_like", x)
    return _full("full_like", x.shape, fill_value, x.dtype if dtype is None else dtype, x.device)


def arange(start, end=None, step=1, dtype=None, device=None):
    """Evenly spaced values in [start, end)."""
    if end is None:
        start, end = 0, start
    start, end, step = (_finite("arange", n, v) for n, v in (("start", start), ("end", end), ("step", step)))
    if step == 0:
        raise InvalidArgumentError("arange: step must not be 0. Fix: pass a non-zero step")
    dt = _op_dtype("arange", dtype) if dtype is not None else _dt.DEFAULT_FLOAT if any(
        isinstance(v, float) for v in (start, end, step)) else _dt.DEFAULT_INT
    if dt not in _NUMERIC:
        raise UnsupportedDTypeError(f"arange: needs a numeric dtype, not {dt.name}. Fix: pass e.g. dtype='int64'")
    if dt.kind in "iu" and not all(float(v).is_integer() for v in (start, step)):
        raise InvalidArgumentError(f"arange: an integer dtype ({dt.name}) needs an integer start and step, got "
                                   f"start={start!r}, step={step!r}. Fix: pass ints, or a float dtype")
    n = _arange_length(start, end, step)
    for name, value in (("start", start), ("last value", start + (n - 1) * step)) if n else ():
        _dt.check_fits("arange", name, value, dt)
    return _host("arange", (n,), dt, target_device(device), lambda: _arange_values(start, step, n, dt))


def _finite(op: str, name: str, value):
    value = number_arg(op, name, value)
    if value != value or value in (math.inf, -math.inf):
        raise InvalidArgumentError(f"{op}: {name} must be finite, not {value}. Fix: pass a finite number")
    return value


def _arange_values(start, step, n: int, dt: np.dtype) -> np.ndarray:
    """start + i * step for i < n, as dt: in float64 for floats; for integers in int64, whose wrap-around cannot
    change a result that fits (every value was checked to fit dt)."""
    if dt.kind == "f":
        return (start + np.arange(n, dtype=np.float64) * step).astype(dt)
    wrapped_step = (step + (1 << 63)) % (1 << 64) - (1 << 63)  # step as int64 holds it, modulo 2**64
    with np.errstate(over="ignore"):
        return (np.int64(start) + np.arange(n, dtype=np.int64) * np.int64(wrapped_step)).astype(dt)


def _arange_length(start, end, step) -> int:
    """numpy's element count, exact for ints."""
    if all(isinstance(v, int) for v in (start, end, step)):
        return max(-((start - end) // step), 0)
    count = (end - start) / step
    if not math.isfinite(count):
        raise InvalidArgumentError(f"arange: ({end!r} - {start!r}) / {step!r} is not a finite count of elements. "
                                   f"Fix: use a larger step or a shorter range")
    return max(math.ceil(count), 0)


# --- random ----------------------------------------------------------------------------------------------
_rng = np.random.default_rng(0)


#: Called with the seed by `seed` (hwadapter.random restarts its device streams, read by captured plans too).
on_seed: list = []


def seed(value: int) -> None:
    """Seed the random-number generator behind rand and randn, and the device streams of hwadapter.random."""
    global _rng
    value = shapes.int_arg("seed", "value", value, low=0, high=(1 << 128) - 1)
    _rng = np.random.default_rng(value)
    for hook in on_seed:
        hook(value)


def _random_dtype(op: str, dtype) -> np.dtype:
    dt = _op_dtype(op, dtype)
    if dt not in _FLOAT:
        raise UnsupportedDTypeError(f"{op}: random values need a floating dtype, not {dt.name}. Fix: pass "
                                    f"dtype='float32'")
    return dt


def rand(shape, dtype="float32", device=None):
    """Uniform [0, 1) random values (generated on the host)."""
    dims, dt = _shape_arg("rand", shape), _random_dtype("rand", dtype)
    return _host("rand", dims, dt, target_device(device), lambda: _rng.random(dims).astype(dt))


def randn(shape, dtype="float32", device=None):
    """Standard normal random values (generated on the host)."""
    dims, dt = _shape_arg("randn", shape), _random_dtype("randn", dtype)
    return _host("randn", dims, dt, target_device(device), lambda: _rng.standard_normal(dims).astype(dt))
