"""Dispatch: (op, device, dtypes) -> the device's kernel, else a codegen program, else loud CPU fallback."""
from __future__ import annotations

import threading
import time

import numpy as np

from ..config import check_fallback_mode, config
from ..errors import HwAdapterError, InvalidArgumentError, KernelExecutionError, KernelNotFoundError, PluginLoadError
from ..runtime import device as _device
from ..runtime.memory import DeviceArray
from . import fallback
from .registry import KernelRegistrar, kernels

_cache: dict = {}
_registered: set = set()
_lock = threading.RLock()
#: Set by hwadapter.profiler while profiling: called with (op, device, dtypes, route, seconds).
profile_hook = None


def clear_cache() -> None:
    """Forget resolved routes (after settings or plugins changed)."""
    with _lock:
        _cache.clear()


def forget_device_type(device_type: str) -> None:
    """Drop a device type's kernels so its plugin registers them again when next used."""
    with _lock:
        _registered.discard(device_type)
        kernels.remove_device_type(device_type)
        _cache.clear()


def forget_all() -> None:
    """Drop every plugin's kernels, resolved routes and codegen backends (after plugin discovery was reset)."""
    from . import codegen
    with _lock:
        for name in list(_registered):
            forget_device_type(name)
        _cache.clear()
    codegen.forget_devices()


def ensure_registered(record) -> None:
    """Have a plugin register its op kernels, once."""
    if record.name in _registered:
        return
    with _lock:
        if record.name in _registered:
            return
        try:
            record.plugin.register_kernels(KernelRegistrar(kernels, record.name))
        except Exception as err:
            kernels.remove_device_type(record.name)
            raise PluginLoadError(f"plugin {record.name!r}: register_kernels raised {type(err).__name__}: {err}. "
                                  f"Fix: report this to the plugin's vendor, or disable it with "
                                  f"HWADAPTER_DISABLE_PLUGINS={record.name}") from err
        _registered.add(record.name)


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


def _not_found(op: str, dev, dtypes: tuple, why: str) -> KernelNotFoundError:
    from ..runtime.discovery import registry
    for rec in registry.all():
        if rec.ok:
            try:
                ensure_registered(rec)
            except PluginLoadError:
                pass
    have = kernels.device_types_with(op, dtypes)
    where = ", ".join(have) if have else "no device"
    return KernelNotFoundError(f"op {op!r} ({_dtype_names(dtypes)}) has no kernel on {dev}; {why}. Devices with this "
                               f"kernel: {where}. Fix: run it on one of those devices, cast to a dtype {dev.type} "
                               f"supports, or allow fallback (HWADAPTER_FALLBACK=warn).")


def _find(op: str, dev, dtypes: tuple):
    ensure_registered(dev.record)
    fn = kernels.lookup(op, dev.type, dtypes)
    if fn is None:
        from . import codegen
        fn = codegen.route(op, dev, dtypes)
    return fn


def resolve(op: str, dev, dtypes: tuple):
    """The callable that runs `op` for inputs of `dtypes` on `dev`, taking and returning dev's arrays."""
    fn = _find(op, dev, dtypes)
    if fn is not None:
        return fn
    check_fallback_mode()
    if config.fallback == "error":
        raise _not_found(op, dev, dtypes, "fallback is off (HWADAPTER_FALLBACK=error / strict mode)")
    try:
        fb_dev = _device.get(config.fallback_device)
    except HwAdapterError as err:
        raise _not_found(op, dev, dtypes, f"and the fallback device {config.fallback_device!r} is unusable ({err})")
    if fb_dev is dev:
        raise _not_found(op, dev, dtypes, "and it is the fallback device")
    fb_fn = _find(op, fb_dev, dtypes)
    if fb_fn is None:
        raise _not_found(op, dev, dtypes, f"nor on the fallback device {fb_dev}")

    def run_on_fallback(*datas, **attrs):
        fallback.record(op, dev, dtypes, fb_dev)
        out = fb_fn(*(transfer(d, dev, fb_dev) for d in datas), **attrs)
        return _map(out, lambda o: transfer(o, fb_dev, dev))

    run_on_fallback.fallback_device = fb_dev
    return run_on_fallback


def lookup(op: str, dev, dtypes: tuple):
    """Cached `resolve`."""
    key = (op, dev, dtypes)
    fn = _cache.get(key)
    if fn is None:
        fn = _cache[key] = resolve(op, dev, dtypes)
    return fn


def _mismatch(op: str, tensors) -> InvalidArgumentError:
    devs = ", ".join(sorted({str(t._device) for t in tensors}))
    return InvalidArgumentError(f"op {op!r}: inputs are on different devices ({devs}). Fix: move them to one "
                                f"device with .to(device) first; hwadapter never moves tensors between devices silently")


def _failed(op: str, dev, tensors, err: Exception) -> KernelExecutionError:
    return KernelExecutionError(f"op {op!r} ({_dtype_names(tuple(t._dtype for t in tensors))}) failed in the kernel of "
                                f"{dev}: {type(err).__name__}: {err}. Fix: check the input shapes and attributes; if "
                                f"they are valid, report it to the {dev.type} plugin's vendor")


def dispatch(op: str, tensors: tuple, attrs: dict | None = None):
    """Run `op` on the device of its inputs and wrap the result(s) as Tensors."""
    dev = tensors[0]._device
    for t in tensors:
        if t._device is not dev:
            raise _mismatch(op, tensors)
    dtypes = tuple(t._dtype for t in tensors)
    fn = _cache.get((op, dev, dtypes)) or lookup(op, dev, dtypes)
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
    """The fast path of attribute-free binary ops."""
    dev = x._device
    if y._device is not dev:
        raise _mismatch(op, (x, y))
    fn = _cache.get((op, dev, (x._dtype, y._dtype)))
    if fn is None or profile_hook:
        return dispatch(op, (x, y))
    try:
        out = fn(x._data, y._data)
    except HwAdapterError:
        raise
    except Exception as err:
        raise _failed(op, dev, (x, y), err) from err
    if type(out) is not _ndarray and isinstance(out, np.generic):
        out = np.asarray(out)  # numpy's ufuncs (host kernels) return scalars for 0-d inputs
    t = _new(_Tensor)
    t._data, t._device, t._dtype = out, dev, out.dtype
    return t


def dispatch_unary(op: str, x):
    """The fast path of attribute-free unary ops."""
    dev = x._device
    fn = _cache.get((op, dev, (x._dtype,)))
    if fn is None or profile_hook:
        return dispatch(op, (x,))
    try:
        out = fn(x._data)
    except HwAdapterError:
        raise
    except Exception as err:
        raise _failed(op, dev, (x,), err) from err
    if type(out) is not _ndarray and isinstance(out, np.generic):
        out = np.asarray(out)  # numpy's ufuncs (host kernels) return scalars for 0-d inputs
    t = _new(_Tensor)
    t._data, t._device, t._dtype = out, dev, out.dtype
    return t


def _wrap(data, dev):
    if type(data) is not _ndarray and isinstance(data, np.generic):
        data = np.asarray(data)  # numpy's ufuncs (host kernels) return scalars for 0-d inputs
    t = _new(_Tensor)
    t._data, t._device, t._dtype = data, dev, data.dtype
    return t


dispatch1, dispatch2 = dispatch_unary, dispatch_binary  # old names, until the frontend moves over
_Tensor = None
_new = object.__new__
_ndarray = np.ndarray


def bind_tensor(cls) -> None:
    """Called once by hwadapter.tensor: the class results are wrapped in."""
    global _Tensor
    _Tensor = cls
