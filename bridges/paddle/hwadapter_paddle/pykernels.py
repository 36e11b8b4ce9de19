"""The Python side of the Python-kernel path: a phi kernel (shim/paddle_kernels.cc built with -DHWA_PD_PYTHON) has
allocated its output with Paddle's allocator, then takes the GIL and calls run(), which runs the plugin's own
kernel (hwadapter's kernel table of the device type) on numpy arrays over the device pointers.

Only for devices whose memory the host addresses directly (the cpu plugin's host memory): `host_addressable`.
"""
from __future__ import annotations

import numpy as np

from .optable import CODE_NAMES

_kernels: dict = {}


def _kernel(device_type: str, op: str, codes: tuple):
    """The plugin's kernel for (op, input dtype codes) on device 0 of device_type (hwadapter's kernel table), cached
    by the codes: dtype names cost microseconds a call (np.dtype.name is Python code) and this runs per kernel."""
    key = (device_type, op, codes)
    fn = _kernels.get(key)
    if fn is None:
        from hwadapter.device import devices  # lazy: only when Paddle runs a Python kernel
        dtypes = tuple(_DTYPES[c] for c in codes)
        fn = devices.get(f"{device_type}:0").kernels.find(op, dtypes)
        if fn is None:
            raise RuntimeError(f"the {device_type} plugin has no kernel for {op} of {', '.join(d.name for d in dtypes)}"
                               f" any more; run `hwadapter paddle install {device_type}` again")
        _kernels[key] = fn
    return fn


_DTYPES = {code: np.dtype(name) for code, name in CODE_NAMES.items()}


def _array(memory, shape: tuple, strides: tuple, code: int) -> np.ndarray:
    """A numpy view of a tensor in host-addressable device memory: `memory` a memoryview over its span (None when
    it has no elements), strides in elements."""
    dtype = _DTYPES[code]
    if memory is None:
        return np.zeros(shape, dtype)
    return np.ndarray(shape, dtype, buffer=memory, strides=tuple(s * dtype.itemsize for s in strides))


def run(device_type: str, op: str, inputs: list, output: tuple, attrs: dict) -> None:
    """inputs: [(memoryview, shape, strides, dtype code)], output likewise: output = the plugin's op(inputs,
    **attrs)."""
    arrays = [_array(*t) for t in inputs]
    fn = _kernel(device_type, op, tuple(t[3] for t in inputs))
    result = np.asarray(fn(*arrays, **attrs))
    out = _array(*output)
    if result.shape != out.shape or result.dtype != out.dtype:
        raise RuntimeError(f"the {device_type} plugin's {op} gave {result.dtype}{list(result.shape)}, Paddle expects "
                           f"{out.dtype}{list(out.shape)}")
    np.copyto(out, result, casting="no")
