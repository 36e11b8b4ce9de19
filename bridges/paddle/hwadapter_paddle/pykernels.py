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
