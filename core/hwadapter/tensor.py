"""Tensors from data: `to_tensor`, `from_dlpack` (the Tensor class itself is dispatch's, hwadapter.dispatch.tensor,
so that the layers below the frontend make and return tensors without importing it)."""
from __future__ import annotations

import numpy as np

from .api import dtypes as _dt
from .api.config import config
from .api.errors import InvalidArgumentError, UnsupportedDTypeError
from .dispatch.tensor import Tensor, wrap as _make
from .runtime import device as _device
from .runtime.memory import DeviceArray


def _device_data(dev, arr: np.ndarray):
    """A host array as `dev`'s data: the array itself on host-memory devices, else a device copy."""
    if dev.host_memory:
        return arr
    if dev.__class__ is not _device.Device:  # a tracing device (hwadapter.trace): the array is a graph constant
        return dev.constant(arr)
    return DeviceArray.from_numpy(dev, arr)


def _exact_ints(data, arr: np.ndarray) -> np.ndarray:
    """Python ints that numpy made float64 (ints beyond int64 beside smaller ones: [1, 2**63 + 1]) as the uint64 array
    that holds them exactly, when one does; float64 would round them."""
    if arr.dtype != np.float64 or isinstance(data, (np.ndarray, np.generic)) or not arr.size \
            or not np.abs(arr).max() >= 2.0 ** 63:
        return arr
    exact = np.array(data, dtype=object)
    if exact.shape != arr.shape or not all(isinstance(v, int) and 0 <= v < 2 ** 64 for v in exact.flat):
        return arr
    return exact.astype(np.uint64)


def _host_array(data, dtype) -> np.ndarray:
    if isinstance(data, Tensor):
        arr = data.numpy()
    else:
        try:
            arr = _exact_ints(data, np.asarray(data))
        except (ValueError, TypeError, OverflowError) as err:
            raise InvalidArgumentError(f"to_tensor: cannot make an array of {type(data).__name__}: {err}. Fix: pass "
                                       f"numbers, (regular) nested lists of numbers or an array") from None
    if dtype is not None:
        try:
            target = _dt.as_dtype(dtype)
        except UnsupportedDTypeError as err:
            raise UnsupportedDTypeError(f"to_tensor: {err}") from None
        if arr.dtype.kind not in "biuf" and arr.size:
            raise UnsupportedDTypeError(f"to_tensor: cannot convert data of dtype {arr.dtype} to {target.name}. "
                                        f"Fix: pass numbers")
        return _dt.fitted("to_tensor", arr, target)
    if arr.dtype.kind == "f" and not isinstance(data, np.ndarray) and arr.dtype == np.float64 \
            and not isinstance(data, (np.generic, Tensor)):
        arr = _dt.fitted("to_tensor", arr, _dt.DEFAULT_FLOAT)  # Python floats default to float32, as in paddle
    elif arr.dtype.kind in "iu" and arr.dtype not in _dt.ALL:  # another byte order: the same values, native
        arr = arr.astype(arr.dtype.newbyteorder("="))
    elif arr.dtype.kind == "u" and not isinstance(data, (np.ndarray, np.generic, Tensor)):
        arr = _dt.fitted("to_tensor", arr, _dt.DEFAULT_INT)  # Python ints are int64: numpy made uint64 of big ones
    if arr.dtype not in _dt.ALL:
        if arr.size == 0 and arr.dtype.kind in "OUS":
            arr = arr.astype(_dt.DEFAULT_FLOAT)
        else:
            names = ", ".join(d.name for d in _dt.ALL)
            raise UnsupportedDTypeError(f"to_tensor: dtype {arr.dtype} is not supported; supported dtypes: {names}. "
                                        f"Fix: convert the data with .astype(...) or pass dtype=")
    return np.array(arr, order="C", copy=True)


def target_device(device):
    """The Device a new tensor goes to: `device`, else the current device."""
    return _device.get(device) if device is not None else _device.current()


def to_tensor(data, dtype=None, device=None) -> Tensor:
    """A tensor holding a copy of `data` (nested lists, numbers, numpy arrays, tensors) on `device`."""
    dev = target_device(device)
    arr = _host_array(data, dtype)
    return _make(_device_data(dev, arr), dev)


def from_dlpack(obj) -> Tensor:
    """A host-memory tensor sharing memory with a DLPack-capable CPU object (numpy, torch, ...)."""
    try:
        arr = np.from_dlpack(obj)
    except (TypeError, ValueError, RuntimeError, BufferError) as err:
        raise InvalidArgumentError(f"from_dlpack: cannot take {type(obj).__name__}: {err}. Fix: pass an object with "
                                   f"__dlpack__ in CPU memory (numpy, torch, ...)") from None
    if arr.dtype not in _dt.ALL:
        names = ", ".join(d.name for d in _dt.ALL)
        raise UnsupportedDTypeError(f"from_dlpack: dtype {arr.dtype} is not supported; supported dtypes: {names}. "
                                    f"Fix: convert it first")
    dev = _device.get(config.fallback_device)
    if not dev.host_memory:
        raise InvalidArgumentError(f"from_dlpack needs a host-memory fallback device, {dev} is not one. Fix: set "
                                   f"HWADAPTER_FALLBACK_DEVICE=cpu")
    return _make(np.ascontiguousarray(arr), dev)
