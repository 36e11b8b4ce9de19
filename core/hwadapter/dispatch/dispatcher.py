"""Dispatch: (op, device, dtypes) -> the device's kernel, else its kernel-primitive program, else loud CPU fallback.

The route is resolved once per (op, dtypes) and kept on the Device; a warm call is a dict lookup, the kernel call
and wrapping the result.
"""
from __future__ import annotations

import time

import numpy as np

from ..config import check_fallback_mode, config
from ..errors import HwAdapterError, InvalidArgumentError, KernelExecutionError, KernelNotFoundError
from ..runtime.device import devices
from ..runtime.discovery import registry
from ..runtime.memory import DeviceArray
from . import fallback

#: Set by hwadapter.profiler while profiling: called with (op, device, dtypes, route, seconds).
profile_hook = None


def transfer(data, src, dst):
    """Move a device array from device `src` to device `dst` (host-memory devices share numpy arrays)."""
    if src is dst:
        return data
    host = np.asarray(data) if isinstance(data, (np.ndarray, np.generic)) else data.numpy()
    return host if dst.host_memory else DeviceArray.from_numpy(dst, host)


def _map(out, fn):
    return type(out)(fn(o) for o in out) if isinstance(out, (tuple, list)) else fn(out)


def _dtype_names(dtypes) -> str:
    return ", ".join(d.name for d in dtypes) or "no inputs"


def device_types_with(op: str, dtypes: tuple) -> list[str]:
    """Device types whose plugin registered a kernel for op and these dtypes (loading every plugin)."""
    have = []
    for rec in registry.all():
        if rec.ok:
            try:
                if devices.get(f"{rec.name}:0").kernels.find(op, dtypes) is not None:
                    have.append(rec.name)
            except HwAdapterError:
                pass
    return sorted(have)


def _not_found(op: str, dev, dtypes: tuple, why: str) -> KernelNotFoundError:
    where = ", ".join(device_types_with(op, dtypes)) or "no device"
    return KernelNotFoundError(f"op {op!r} ({_dtype_names(dtypes)}) has no kernel on {dev}; {why}. Devices with this "
                               f"kernel: {where}. Fix: run it on one of those devices, cast to a dtype {dev.type} "
                               f"supports, or allow fallback (HWADAPTER_FALLBACK=warn).")


def _own(op: str, dev, dtypes: tuple):
    """The device's own way to run op: its kernel, else its kernel-primitive program, else None."""
    return dev.kernels.find(op, dtypes) or dev.primitive(op)


def _fallback(op: str, dev, dtypes: tuple):
    """A kernel that runs op on the fallback device with copies in and out, counted and announced."""
    check_fallback_mode()
    if config.fallback == "error":
        raise _not_found(op, dev, dtypes, "fallback is off (HWADAPTER_FALLBACK=error / strict mode)")
    try:
        fb_dev = devices.get(config.fallback_device)
    except HwAdapterError as err:
        raise _not_found(op, dev, dtypes, f"and the fallback device {config.fallback_device!r} is unusable ({err})")
    if fb_dev is dev:
        raise _not_found(op, dev, dtypes, "and it is the fallback device")
    fb_fn = _own(op, fb_dev, dtypes)
    if fb_fn is None:
        raise _not_found(op, dev, dtypes, f"nor on the fallback device {fb_dev}")

    def run_on_fallback(*datas, **attrs):
        fallback.record(op, dev, dtypes, fb_dev)
        out = fb_fn(*(transfer(d, dev, fb_dev) for d in datas), **attrs)
        return _map(out, lambda o: transfer(o, fb_dev, dev))

    run_on_fallback.fallback_device = fb_dev
    return run_on_fallback


def route(op: str, dev, dtypes: tuple):
    """The callable that runs `op` for inputs of `dtypes` on `dev`, taking and returning dev's arrays (kept on dev)."""
    fn = dev.routes.get((op, dtypes))
    if fn is None:
        fn = _own(op, dev, dtypes) or _fallback(op, dev, dtypes)
        dev.routes[(op, dtypes)] = fn
    return fn


def _mismatch(op: str, tensors) -> InvalidArgumentError:
    devs = ", ".join(sorted({str(t._device) for t in tensors}))
    return InvalidArgumentError(f"op {op!r}: inputs are on different devices ({devs}). Fix: move them to one "
                                f"device with .to(device) first; hwadapter never moves tensors between devices silently")


def _failed(op: str, dev, tensors, err: Exception) -> KernelExecutionError:
    return KernelExecutionError(f"op {op!r} ({_dtype_names(tuple(t._dtype for t in tensors))}) failed in the kernel of "
                                f"{dev}: {type(err).__name__}: {err}. Fix: check the input shapes and attributes; if "
                                f"they are valid, report it to the {dev.type} plugin's vendor")


def _wrap(data, dev):
    if type(data) is not _ndarray and isinstance(data, np.generic):
        data = np.asarray(data)  # numpy's ufuncs (host kernels) return scalars for 0-d inputs
    t = _new(_Tensor)
    t._data, t._device, t._dtype = data, dev, data.dtype
    return t


def dispatch(op: str, tensors: tuple, attrs: dict | None = None):
    """Run `op` on the device of its inputs and wrap the result(s) as Tensors."""
    dev = tensors[0]._device
    for t in tensors:
        if t._device is not dev:
            raise _mismatch(op, tensors)
    dtypes = tuple(t._dtype for t in tensors)
    fn = dev.routes.get((op, dtypes)) or route(op, dev, dtypes)
    start = time.perf_counter() if profile_hook else 0.0
    try:
        out = fn(*[t._data for t in tensors], **attrs) if attrs else fn(*[t._data for t in tensors])
    except HwAdapterError:
        raise
    except Exception as err:
        raise _failed(op, dev, tensors, err) from err
    if profile_hook:
        profile_hook(op, dev, dtypes, fn, time.perf_counter() - start)
    if isinstance(out, (tuple, list)):
        return tuple(_wrap(o, dev) for o in out)
    return _wrap(out, dev)


def dispatch_binary(op: str, x, y):
    """`dispatch` for attribute-free binary ops, without building tuples on the warm path."""
    dev = x._device
    if y._device is not dev:
        raise _mismatch(op, (x, y))
    fn = dev.routes.get((op, (x._dtype, y._dtype)))
    if fn is None or profile_hook:
        return dispatch(op, (x, y))
    try:
        data = fn(x._data, y._data)
        if type(data) is not _ndarray and isinstance(data, np.generic):
            data = np.asarray(data)  # _wrap, inline: the warm path of every binary op
        t = _new(_Tensor)
        t._data, t._device, t._dtype = data, dev, data.dtype
        return t
    except HwAdapterError:
        raise
    except Exception as err:
        raise _failed(op, dev, (x, y), err) from err


def dispatch_unary(op: str, x):
    """`dispatch` for attribute-free unary ops, without building tuples on the warm path."""
    dev = x._device
    fn = dev.routes.get((op, (x._dtype,)))
    if fn is None or profile_hook:
        return dispatch(op, (x,))
    try:
        return _wrap(fn(x._data), dev)
    except HwAdapterError:
        raise
    except Exception as err:
        raise _failed(op, dev, (x,), err) from err


_Tensor = None
_new = object.__new__
_ndarray = np.ndarray


def bind_tensor(cls) -> None:
    """Called once by hwadapter.tensor: the class results are wrapped in (the frontend sits above dispatch)."""
    global _Tensor
    _Tensor = cls
