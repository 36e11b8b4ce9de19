"""Dispatch: (op, device, dtypes) -> the device's kernel, else its kernel-primitive program, else loud CPU fallback.

The route is resolved once per (op, dtypes) and kept on the Device; a warm call is a dict lookup, the kernel call,
checking the result against the op's rule (hwadapter.api.meta) and wrapping it. A kernel's result reaches no one
unchecked: the wrong shape, dtype, array type, device or number of outputs is a KernelExecutionError naming the plugin.
"""
from __future__ import annotations

import functools
import time

import numpy as np

from ..api.config import check_fallback_mode, config
from ..api.errors import HwAdapterError, InvalidArgumentError, KernelExecutionError, KernelNotFoundError, short_repr
from ..api import meta
from ..api.shapes import broadcast
from ..runtime.device import devices
from ..runtime.discovery import registry
from ..runtime.memory import DeviceArray, Lent, transfer
from ..runtime.signature import BoundedCache
from . import fallback
from .tensor import Tensor, wrap

#: Set by hwadapter.profiler while profiling: called with (op, device, dtypes, route, seconds).
profile_hook = None
#: Set by hwadapter.autograd: called with (op, inputs, attrs, result) when an input has autograd state (`_ag`); it
#: records what backward needs, and returns None, or the result to use instead (inside a to_static trace, an op on
#: device state is recorded, not run). Tensors without that state (all of inference) pay one attribute test.
grad_hook = None


def _map(out, fn):
    return type(out)(fn(o) for o in out) if isinstance(out, (tuple, list)) else fn(out)


def _dtype_names(dtypes) -> str:
    return ", ".join(d.name for d in dtypes) or "no inputs"


def device_types_with(op: str, dtypes: tuple) -> list[str]:
    """Device types among the loaded plugins that registered a kernel for op and these dtypes."""
    have = []
    for rec in registry.loaded():  # never load a plugin to word an error: it may crash or hang
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


def own(op: str, dev, dtypes: tuple):
    """The device's own way to run op: its kernel, else its kernel-primitive program, else None."""
    return dev.kernels.find(op, dtypes) or dev.primitive(op) or dev.collective(op)


def native_route(op: str, dev, dtypes: tuple):
    """How `dev` runs op for `dtypes` without fallback: "kernel", "codegen" (its kernel-primitive program) or None.
    The partitioner's question (cold path: nothing is compiled or cached)."""
    if dev.kernels.find(op, dtypes) is not None:
        return "kernel"
    if dev.primitive(op) is not None:
        return "codegen"
    return "kernel" if dev.collective(op) is not None else None


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
    fb_fn = own(op, fb_dev, dtypes)
    if fb_fn is None:
        raise _not_found(op, dev, dtypes, f"nor on the fallback device {fb_dev}")

    def run_on_fallback(*datas, **attrs):
        fallback.record(op, dev, dtypes, fb_dev)
        moved = [transfer(d, dev, fb_dev) for d in datas]
        try:
            out = fb_fn(*moved, **attrs)
        except HwAdapterError:
            raise
        except Exception as err:  # the fallback device's kernel failed: its plugin is the one to name
            raise _failed(op, fb_dev, dtypes, err, via=dev) from err
        # checked before the copy back, which would hide the culprit (or fail on it, blaming dev)
        out = _checked(op, fb_dev, out, moved, dtypes, attrs, via=dev)
        return _map(out, lambda o: transfer(o, fb_dev, dev))

    run_on_fallback.fallback_device = fb_dev
    return run_on_fallback


def route(op: str, dev, dtypes: tuple):
    """The callable that runs `op` for inputs of `dtypes` on `dev`, taking and returning dev's arrays (kept on dev)."""
    fn = dev.routes.get((op, dtypes))
    if fn is None:
        fn = own(op, dev, dtypes) or _fallback(op, dev, dtypes)
        dev.routes[(op, dtypes)] = fn
    return fn


def _mixed(op: str, tensors: tuple, attrs):
    """The cold path of inputs on different devices: concrete tensors meeting traced ones (hwadapter.trace: a
    device with `lift`) become graph constants and the op is dispatched again; anything else is an error."""
    tracing = {t._device for t in tensors if hasattr(t._device, "lift")}
    if len(tracing) == 1:
        dev = tracing.pop()
        if all(t._device is dev or t._device is dev.base for t in tensors):
            return dispatch(op, tuple(t if t._device is dev else dev.lift(t) for t in tensors), attrs)
        err = _mismatch(op, tensors)
        err.args = (f"{dev.where()}: {err.args[0]}",)  # while tracing: the user's line, not a kernel's
        raise err
    raise _mismatch(op, tensors)


def _mismatch(op: str, tensors) -> InvalidArgumentError:
    devs = ", ".join(sorted({str(t._device) for t in tensors}))
    return InvalidArgumentError(f"op {op!r}: inputs are on different devices ({devs}). Fix: move them to one "
                                f"device with .to(device) first; hwadapter never moves tensors between devices silently")


def _failed(op: str, dev, dtypes: tuple, err: Exception, via=None) -> KernelExecutionError:
    where = f"{dev}" if via is None else f"{dev} (the fallback device, running it for {via})"
    return KernelExecutionError(f"op {op!r} ({_dtype_names(dtypes)}) failed in the kernel of {where}: "
                                f"{type(err).__name__}: {err}. Fix: check the input shapes and attributes; if they "
                                f"are valid, report it to the vendor of {_plugin_of(dev)[1]}")


# --- checking kernel results -----------------------------------------------------------------------------------
def _plugin_of(dev) -> tuple[str, str]:
    """(the plugin of dev with its distribution, whose vendor to report a kernel bug to) in words."""
    try:
        name, version = dev.record.distribution
    except Exception:  # naming the culprit must not fail on a broken METADATA
        name, version = "?", "?"
    plugin = f"the {dev.type!r} plugin"
    if name == "?":
        return plugin, plugin
    return f"{plugin} (distribution {name} {version})", f"{name} {version} ({plugin})"


#: (op, input dtypes, input shapes, attribute items) -> what op's rule says its outputs are.
_EXPECTED = BoundedCache(4096)


def _expected(op: str, shapes: tuple, dtypes: tuple, attrs, key) -> tuple | None:
    """((shape, dtype), ...) that op's rule gives for these inputs (kept under `key` unless it is None), or None when
    there is no rule to judge by."""
    rule = _RULES.get(op)
    if rule is None:  # a custom op: no rule (and its attributes, anything, must not be kept alive in the cache)
        return None
    try:
        expected = rule(shapes, dtypes, attrs or {})
    except Exception:  # attributes the rule cannot read were accepted by the kernel: only it can judge them
        return None
    return _EXPECTED.get_or_make(key, lambda: expected)


@functools.lru_cache(maxsize=1024)
def _broadcast(xs: tuple, ys: tuple) -> tuple | None:
    """The broadcast shape of two input shapes (None when there is none: the full check then judges)."""
    try:
        return broadcast("op", xs, ys)
    except HwAdapterError:
        return None


def _own_memory(a: DeviceArray, dev) -> bool:
    """True when device array `a` is memory of dev that holds its bytes: dev's own allocation, or memory a native
    host lent dev for this call (a view of a lent input, e.g. a reshape)."""
    if a.device is not dev:
        return False
    block, nbytes = a.block, a.nbytes
    if block is None:
        return nbytes == 0
    return (block.allocator is dev._allocator or type(block) is Lent) and block.size >= nbytes


def _array_ok(value, dev, host: bool) -> bool:
    """value is dev's array type: a C-contiguous numpy array on a host-memory device, else a DeviceArray of dev."""
    if host:
        return type(value) is _ndarray and value.flags.c_contiguous
    return isinstance(value, DeviceArray) and _own_memory(value, dev)


def _checked(op: str, dev, out, datas, dtypes: tuple, attrs, via=None):
    """out when it is what op's rule says for `datas` and `attrs` on dev, else `_judged` (which raises, or
    normalises what is fine: a ufunc's numpy scalar, a list of outputs)."""
    shapes = (datas[0].shape,) if len(datas) == 1 else tuple([d.shape for d in datas])
    key = (op, dtypes, shapes, tuple(attrs.items()) if attrs else ())
    try:
        expected = _EXPECTED.get(key) or _expected(op, shapes, dtypes, attrs, key)
    except TypeError:  # an unhashable attribute (a list, from a graph): judged without the cache
        expected = _expected(op, shapes, dtypes, attrs, None)
    cls = datas[0].__class__  # the inputs are of dev's array type: so must the result be
    if out.__class__ is not cls and cls is _ndarray and isinstance(out, np.generic):
        out = np.asarray(out)  # numpy's ufuncs (host kernels) return scalars for 0-d inputs
    if expected is not None and out.__class__ is cls and len(expected) == 1 and op not in _MULTI_OUTPUT:
        shape, dtype = expected[0]
        if out.shape == shape and out.dtype is dtype and (
                out.flags.c_contiguous if cls is _ndarray else _own_memory(out, dev)):
            return out
    return _judged(op, dev, out, datas, expected, via)


def _judged(op: str, dev, out, datas, expected, via):
    """`_checked` in full, for whatever its quick test did not pass."""
    host = (dev._runtime or dev.runtime).host_memory
    multi = isinstance(out, (list, tuple))
    outs = list(out) if multi else [out]
    if host:  # numpy's ufuncs (host kernels) return scalars for 0-d inputs
        outs = [np.asarray(o) if isinstance(o, np.generic) else o for o in outs]
    due = None if expected is None else [(tuple(s), np.dtype(d)) for s, d in expected]
    count_ok = due is None or (multi == (op in _MULTI_OUTPUT) and len(outs) == len(due))
    arrays_ok = all(_array_ok(o, dev, host) for o in outs)
    if not (count_ok and arrays_ok and (due is None or [(o.shape, o.dtype) for o in outs] == due)):
        raise _wrong_result(op, dev, datas, _describe_due(op, dev, due), _describe(out), via)
    return tuple(outs) if multi else outs[0]


def _wrong_result(op: str, dev, datas, expected: str, got: str, via=None) -> KernelExecutionError:
    inputs = ", ".join(f"{d.dtype.name}{list(d.shape)}" for d in datas) or "no inputs"
    where = f"on {dev}" if via is None else f"for {via}, run through fallback on {dev}"
    plugin, vendor = _plugin_of(dev)
    meanwhile = "" if dev.type == config.fallback_device else f", or switch the plugin off with " \
        f"HWADAPTER_DISABLE_PLUGINS={dev.type}"
    return KernelExecutionError(
        f"op {op!r} ({inputs}) {where}: the kernel of {plugin} returned {got}; expected {expected}. This is a bug "
        f"in the plugin, not in your program. Fix: report it to the vendor of {vendor} with this message; meanwhile "
        f"run the op on another device{meanwhile}")


def _array_name(dev) -> str:
    return "a numpy.ndarray (C-contiguous)" if dev.host_memory else f"a DeviceArray on {dev}"


def _describe_due(op: str, dev, due) -> str:
    array = _array_name(dev)
    if due is None:
        return f"{array} or a list of them"
    one = [f"{array} of shape {s} and dtype {d.name}" for s, d in due]
    return f"a list of {len(one)}: [{', '.join(one)}]" if op in _MULTI_OUTPUT else one[0]


def _describe(value) -> str:
    """What a kernel returned, in a few words (never its repr, which a hostile object may make huge or raise)."""
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}: [{', '.join(_describe(v) for v in value[:4])}" + \
            (", ...]" if len(value) > 4 else "]")
    kind = "a numpy.ndarray" if type(value) is _ndarray else (
        f"a DeviceArray on {value.device}" if isinstance(value, DeviceArray) else f"a {type(value).__name__}")
    try:
        return f"{kind} of shape {tuple(value.shape)} and dtype {np.dtype(value.dtype).name}"
    except Exception:
        return f"{kind} ({short_repr(value, 60)})"


def dispatch(op: str, tensors: tuple, attrs: dict | None = None):
    """Run `op` on the device of its inputs and wrap the result(s) as Tensors."""
    dev = tensors[0]._device
    for t in tensors:
        if t._device is not dev:
            return _mixed(op, tensors, attrs)
    dtypes = tuple(t._dtype for t in tensors)
    fn = dev.routes.get((op, dtypes)) or route(op, dev, dtypes)
    datas = [t._data for t in tensors]
    start = time.perf_counter() if profile_hook else 0.0
    try:
        out = fn(*datas, **attrs) if attrs else fn(*datas)
    except HwAdapterError:
        raise
    except Exception as err:
        raise _failed(op, dev, dtypes, err) from err
    if profile_hook:
        profile_hook(op, dev, dtypes, fn, time.perf_counter() - start)
    out = _checked(op, dev, out, datas, dtypes, attrs)
    result = tuple(wrap(o, dev) for o in out) if type(out) is tuple else wrap(out, dev)
    if grad_hook is not None:
        for t in tensors:
            if t._ag is not None:
                instead = grad_hook(op, tensors, attrs, result)
                return result if instead is None else instead
    return result


def dispatch_binary(op: str, x, y):
    """`dispatch` for attribute-free binary ops, without building tuples on the warm path."""
    dev = x._device
    if y._device is not dev:
        return _mixed(op, (x, y), None)
    fn = dev.routes.get((op, (x._dtype, y._dtype)))
    if fn is None or profile_hook:
        return dispatch(op, (x, y))
    try:
        data = fn(x._data, y._data)
        # The rule of every attribute-free binary op, inline (the warm path of every binary op): the device's array
        # type, the dtype of x (or bool), and the broadcast shape, which a numpy ufunc (a host kernel) has by
        # definition. What fails goes to the full check, which accepts a 0-d ufunc's numpy scalar and raises else.
        if data.__class__ is not x._data.__class__ or \
                (dtype := data.dtype) is not (_bool if op in _BOOL_RESULT else x._dtype) or \
                (fn.__class__ is not _ufunc and (data.shape != _broadcast(x._data.shape, y._data.shape) or
                                                 (data.__class__ is _DeviceArray and data.device is not dev))):
            data = _checked_binary(op, dev, fn, data, x, y)
            dtype = data.dtype
        t = _new(Tensor)
        t._data, t._device, t._dtype, t._ag = data, dev, dtype, None
        if (x._ag is not None or y._ag is not None) and grad_hook is not None:
            instead = grad_hook(op, (x, y), None, t)
            return t if instead is None else instead
        return t
    except HwAdapterError:
        raise
    except Exception as err:
        raise _failed(op, dev, (x._dtype, y._dtype), err) from err


def _checked_binary(op: str, dev, fn, data, x, y):
    """dispatch_binary's result when its inline test failed: a ufunc's numpy scalar (0-d inputs) is fine, anything
    else is judged in full (which raises, naming the plugin, or accepts an equal but not identical dtype)."""
    xd, yd = x._data, y._data
    if xd.__class__ is _ndarray and isinstance(data, np.generic):
        data = np.asarray(data)
        if data.dtype is (_bool if op in _BOOL_RESULT else x._dtype) and fn.__class__ is _ufunc:
            return data
    return _checked(op, dev, data, (xd, yd), (x._dtype, y._dtype), None)


def dispatch_unary(op: str, x):
    """`dispatch` for attribute-free unary ops, without building tuples on the warm path."""
    dev = x._device
    fn = dev.routes.get((op, (x._dtype,)))
    if fn is None or profile_hook:
        return dispatch(op, (x,))
    try:
        data = fn(x._data)
        if data.__class__ is not x._data.__class__ or data.dtype is not (_bool if op in _BOOL_RESULT else x._dtype) \
                or data.shape != x._data.shape or (data.__class__ is _DeviceArray and data.device is not dev):
            data = _checked(op, dev, data, (x._data,), (x._dtype,), None)  # as in dispatch_binary
        t = wrap(data, dev)
        if x._ag is not None and grad_hook is not None:
            instead = grad_hook(op, (x,), None, t)
            return t if instead is None else instead
        return t
    except HwAdapterError:
        raise
    except Exception as err:
        raise _failed(op, dev, (x._dtype,), err) from err


_new = object.__new__
_ndarray = np.ndarray
_DeviceArray = DeviceArray
_bool = np.dtype(np.bool_)
_ufunc = np.ufunc
_BOOL_RESULT = meta.BOOL_RESULT
_MULTI_OUTPUT = meta.MULTI_OUTPUT
_RULES = meta.RULES
