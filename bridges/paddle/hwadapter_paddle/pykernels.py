"""The Python side of the Python-kernel path: a phi kernel (shim/paddle_kernels.cc built with -DHWA_PD_PYTHON) has
allocated its output with Paddle's allocator, then takes the GIL and calls run(), which runs the plugin's own way
of doing the op (its kernel, or its kernel-primitive program: hwadapter's dispatch without fallback) on the device
memory Paddle passed.

Memory the host addresses (the cpu plugin's: Runtime.host_memory) is seen as numpy arrays. Other memory (OpenCL's
shared virtual memory, CUDA's) is lent to the plugin's runtime (hwadapter.host.adopt) as DeviceArrays; the result is
copied into Paddle's output by a copy that returns once it, and the kernel queued before it, are done.
"""
from __future__ import annotations

import numpy as np
from hwadapter import host
from hwadapter.plugin import contiguous_strides

from . import training
from .optable import CODE_NAMES

_kernels: dict = {}


def _kernel(device_type: str, op: str, codes: tuple):
    """(device, the plugin's own way to run op for these input dtype codes) on device 0 of device_type, cached by
    the codes: dtype names cost microseconds a call (np.dtype.name is Python code) and this runs per kernel."""
    key = (device_type, op, codes)
    found = _kernels.get(key)
    if found is None:
        dev = host.device(f"{device_type}:0")
        dtypes = tuple(_DTYPES[c] for c in codes)
        fn = host.own_kernel(op, dev, dtypes)
        if fn is None:
            raise RuntimeError(f"the {device_type} plugin has no kernel for {op} of {', '.join(d.name for d in dtypes)}"
                               f" any more; run `hwadapter paddle install {device_type}` again")
        found = _kernels[key] = (dev, fn, dev.host_memory)
    return found


_DTYPES = {code: np.dtype(name) for code, name in CODE_NAMES.items()}


def _array(memory, shape: tuple, strides: tuple, code: int) -> np.ndarray:
    """A numpy view of a tensor in host-addressable device memory: `memory` a memoryview over its span (None when
    it has no elements), strides in elements."""
    dtype = _DTYPES[code]
    if memory is None:
        return np.zeros(shape, dtype)
    return np.ndarray(shape, dtype, buffer=memory, strides=tuple(s * dtype.itemsize for s in strides))


def _lent(dev, op: str, memory, shape: tuple, strides: tuple, code: int):
    """A DeviceArray of `dev` over a dense tensor of the host's memory (memory: a memoryview over its span)."""
    if memory is not None and tuple(strides) != contiguous_strides(shape) and np.prod(shape) > 1:
        raise RuntimeError(f"{op} on {dev}: a strided tensor (strides {list(strides)} for shape {list(shape)}); "
                           f"the plugin's kernels take dense tensors (make it contiguous first)")
    address = np.frombuffer(memory, np.uint8).ctypes.data if memory is not None else 0
    return host.adopt(dev, address, shape, _DTYPES[code])


def run(device_type: str, op: str, inputs: list, output: tuple, attrs: dict) -> None:
    """inputs: [(memoryview, shape, strides, dtype code)], output likewise (a list of them for several outputs, as
    split's): output = the plugin's op(inputs, **attrs), attrs as the C ABI carries them (ints flat). The shim
    passes the error's text to Paddle, so a hwadapter error's fix is made part of it."""
    try:
        _run(device_type, op, inputs, output, attrs)
    except Exception as err:
        fix = getattr(err, "fix", "")
        if fix and fix not in str(err):
            raise RuntimeError(f"{type(err).__name__}: {err} Fix: {fix}") from err
        raise


#: op -> its attribute of (before, after) pairs, which travels flat through the C ABI (HwaAttr ints) and is paired
#: again here, as the op takes it
_PAIRED = {"pad": "pads"}


def _run(device_type: str, op: str, inputs: list, output, attrs: dict) -> None:
    dev, fn, host_memory = _kernel(device_type, op, tuple(t[3] for t in inputs))
    paired = _PAIRED.get(op)
    if paired in attrs:
        flat = attrs[paired]
        attrs = {**attrs, paired: tuple(zip(flat[::2], flat[1::2]))}
    several = isinstance(output, list)  # split's outputs: a list of them, and the kernel returns a list
    if host_memory:
        results = fn(*[_array(*t) for t in inputs], **attrs)
        outs = [_array(*o) for o in (output if several else [output])]
    else:
        results = fn(*[_lent(dev, op, *t) for t in inputs], **attrs)
        outs = [_lent(dev, op, *o) for o in (output if several else [output])]
    results = list(results) if several else [results]
    if len(results) != len(outs):
        raise RuntimeError(f"the {device_type} plugin's {op} gave {len(results)} results, Paddle expects {len(outs)}")
    for result, out in zip(results, outs):
        result = np.asarray(result) if host_memory else result
        if result.shape != out.shape or result.dtype != out.dtype:
            raise RuntimeError(f"the {device_type} plugin's {op} gave {result.dtype}{list(result.shape)}, Paddle "
                               f"expects {out.dtype}{list(out.shape)}")
        if host_memory:
            np.copyto(out, result, casting="no")
        elif out.nbytes:
            # Without a stream the copy returns when it is done, and so is the kernel queued before it: Paddle's
            # next op may read the output through the library, outside our queues.
            dev.runtime.copy_d2d(out.handle, 0, result.handle, 0, out.nbytes)


# ---- composite kernels (training.py): a phi kernel as hwadapter's ops on the device ----

def run_composite(device_type: str, index: int, phi: str, inputs: dict, attrs: dict, outputs: dict) -> None:
    """inputs/outputs: {name: (memoryview, shape, strides, dtype code, on the host) or None or a list of them}:
    outputs = training.BY_PHI[phi].fn on the device's tensors, hwadapter's dispatch never falling back. The error's
    text reaches Paddle, a hwadapter error's fix part of it."""
    try:
        _run_composite(device_type, index, phi, inputs, attrs, outputs)
    except training.Refused as err:
        raise RuntimeError(f"{phi} on {device_type}:{index}: {err}; this call cannot run on the device and Paddle has "
                           f"no per-call fallback: move its tensors to the CPU for it") from err
    except Exception as err:
        fix = getattr(err, "fix", "")
        if fix and fix not in str(err):
            raise RuntimeError(f"{type(err).__name__}: {err} Fix: {fix}") from err
        raise


_devices: dict = {}


def _device(device_type: str, index: int):
    key = (device_type, index)
    dev = _devices.get(key)
    if dev is None:
        dev = _devices[key] = host.device(f"{device_type}:{index}")
    return dev


def _input(dev, phi: str, t, arrays: bool):
    """A Paddle tensor as the composite takes it: the device's array (arrays) or a Tensor of dev over it, a numpy
    array when Paddle keeps it on the CPU, a Meta when Paddle passed no buffer."""
    if t is None:
        return None
    if isinstance(t, list):
        return [_input(dev, phi, x, arrays) for x in t]
    memory, shape, strides, code, on_host = t
    if memory is None and any(d < 0 for d in shape):
        return None  # a tensor Paddle never shaped (batch_norm_grad's reserve_space)
    if memory is None and int(np.prod(shape)) > 0:
        return training.Meta(tuple(shape), _DTYPES[code])
    if on_host:
        return _array(memory, shape, strides, code)
    if dev.host_memory:  # kernels take dense arrays (a strided view of Paddle's is copied)
        data = np.ascontiguousarray(_array(memory, shape, strides, code))
    else:
        data = _lent(dev, phi, memory, shape, strides, code)
    return data if arrays else host.tensor(dev, data)


def _run_composite(device_type: str, index: int, phi: str, inputs: dict, attrs: dict, outputs: dict) -> None:
    kernel = training.BY_PHI[phi]
    dev = _device(device_type, index)
    ins = {name: _input(dev, phi, t, kernel.arrays) for name, t in inputs.items()}
    want = {name: (tuple(t[1]), _DTYPES[t[3]]) for name, t in outputs.items() if t is not None}
    with host.strict():
        results = kernel.fn(training.ops(dev) if kernel.arrays else dev, ins, attrs, want)
    for name, t in outputs.items():
        if t is None:
            continue
        if name not in results:
            raise RuntimeError(f"{phi} on {dev}: no result for its output {name} (hwadapter-paddle's training.py)")
        _write(dev, phi, name, results[name], t)


def _write(dev, phi: str, name: str, result, t) -> None:
    """Copy one result (a Tensor of dev or a numpy array) into Paddle's output t."""
    memory, shape, strides, code, on_host = t
    dtype = _DTYPES[code]
    data = result if isinstance(result, (np.ndarray, host.DeviceArray)) else host.data(result)
    if tuple(data.shape) != tuple(shape):
        if int(np.prod(data.shape)) != int(np.prod(shape)) or max(len(data.shape), len(shape)) > 1:
            raise RuntimeError(f"{phi} on {dev}: its {name} came out {np.dtype(data.dtype).name}{list(data.shape)}, "
                               f"Paddle expects {dtype.name}{list(shape)}")
    if np.dtype(data.dtype) != dtype:
        raise RuntimeError(f"{phi} on {dev}: its {name} came out {np.dtype(data.dtype).name}, Paddle expects "
                           f"{dtype.name}")
    if memory is None:
        return
    if on_host or dev.host_memory:
        out = _array(memory, shape, strides, code)
        np.copyto(out, (data if isinstance(data, np.ndarray) else data.numpy()).reshape(shape), casting="no")
        return
    out = _lent(dev, phi, memory, shape, strides, code)
    if isinstance(data, np.ndarray):
        dev.runtime.copy_h2d(out.handle, 0, np.ascontiguousarray(data))
    elif out.nbytes:
        # without a stream the copy returns when it is done, and so is the kernel queued before it
        dev.runtime.copy_d2d(out.handle, 0, data.handle, 0, out.nbytes)
