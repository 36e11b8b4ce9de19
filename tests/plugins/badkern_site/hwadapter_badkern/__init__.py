"""Test plugins whose kernels return wrong results on request, for tests/test_kernel_results.py.

Not on sys.path unless a test puts this directory there, so no other test (nor the device parametrisation of the op
suites) ever sees these devices. Two entry points of one distribution (hwadapter-badkern 0.1):

* badkern: two devices with separate memory (results are DeviceArrays);
* badhost: one device with host memory (results are numpy arrays).

Both have kernels for add, neg, exp, sum, split and transpose, right for any dtype until a test puts a fault in
FAULTS (op -> fault).
"""
from __future__ import annotations

import numpy as np

from hwadapter.plugin import DeviceArray, DeviceProperties, HostBufferRuntime, Plugin

#: op -> how its kernel misbehaves: "shape" (one element too many, 1-D), "dtype" (float64), "numpy" (a numpy array
#: where a DeviceArray is due), "none", "list" (a list of one array where one array is due), "count" (split: one
#: part too few), "device" (badkern: an array on the other device), "short" (badkern: an array whose memory block
#: is smaller than its shape), "strided" (badhost: a non-contiguous view), "raise" (a RuntimeError), "hostile" (an
#: object whose shape, dtype and repr raise). Empty: every kernel is right.
FAULTS: dict[str, str] = {}


class BadRuntime(HostBufferRuntime):
    """Separate device memory as numpy byte arrays."""

    def properties(self):
        return DeviceProperties(name=f"badkern {self.index}", vendor="hwadapter tests", total_memory=1 << 24)


class BadHostRuntime(HostBufferRuntime):
    """Host memory: tensors on it are numpy arrays."""

    host_memory = True

    def properties(self):
        return DeviceProperties(name="badhost", vendor="hwadapter tests", total_memory=1 << 24)


def _host(a) -> np.ndarray:
    """The numpy view of a kernel argument (a DeviceArray's memory, or the numpy array itself)."""
    if not isinstance(a, DeviceArray):
        return a
    if a.block is None:
        return np.empty(a.shape, a.dtype)
    return a.block.handle[:a.nbytes].view(a.dtype).reshape(a.shape)


def _on(device, res: np.ndarray):
    """res as an array of `device` (a copy in its memory; numpy itself on a host-memory device)."""
    if device is None:
        return np.ascontiguousarray(res) if res.ndim else np.asarray(res)
    return DeviceArray.from_numpy(device, res)


class Hostile:
    """A result no one can inspect."""

    @property
    def shape(self):
        raise RuntimeError("no shape")

    dtype = shape

    def __repr__(self):
        raise RuntimeError("no repr")


def _faulty(op: str, device, res: np.ndarray):
    """The kernel's result for `op`, wrong as FAULTS says."""
    fault = FAULTS.get(op)
    if fault == "shape":
        return _on(device, np.zeros(res.size + 1, res.dtype))
    if fault == "dtype":
        return _on(device, res.astype(np.float64))
    if fault == "numpy":
        return res
    if fault == "none":
        return None
    if fault == "list":
        return [_on(device, res)]
    if fault == "device":
        from hwadapter.runtime.device import get  # lazy, and only for this fault: the sibling device
        return DeviceArray.from_numpy(get(f"{device.type}:{1 - device.index}"), res)
    if fault == "short":
        return DeviceArray.lend(device, res.shape, res.dtype, 8)  # one small block for all of res
    if fault == "hostile":
        return Hostile()
    if fault == "strided":
        wide = np.zeros(res.shape + (2,), res.dtype)
        wide[..., 0] = res
        return wide[..., 0]
    return _on(device, res)


def _kernel(op: str, fn):
    """A kernel computing fn on the arguments' numpy views, then returning its result as FAULTS says."""
    def kernel(*arrays, **attrs):
        if FAULTS.get(op) == "raise":
            raise RuntimeError(f"{op}: the kernel broke")
        device = arrays[0].device if isinstance(arrays[0], DeviceArray) else None  # None: host memory
        res = fn(*(_host(a) for a in arrays), **attrs)
        if isinstance(res, list):  # split: "count" drops its last part, any other fault spoils the first
            parts = [_faulty(op, device, r) if i == 0 else _on(device, r) for i, r in enumerate(res)]
            return parts[:-1] if FAULTS.get(op) == "count" else parts
        return _faulty(op, device, np.asarray(res))
    kernel.__name__ = op
    return kernel


def _split(x, sections, axis=0):
    return np.split(x, np.cumsum(sections)[:-1], axis=axis)


KERNELS = {
    "add": np.add, "neg": np.negative, "exp": np.exp, "split": _split,
    "transpose": lambda x, perm: np.transpose(x, perm),
    "sum": lambda x, axis, keepdim=False: np.sum(x, axis=axis, keepdims=keepdim, dtype=x.dtype),
}


def _register(kernels) -> None:
    for op, fn in KERNELS.items():
        kernels.register(op, _kernel(op, fn))


class BadKernPlugin(Plugin):
    """badkern:0 and badkern:1, separate memory; kernels misbehave as FAULTS says."""

    api_version = (2, 0)

    def device_count(self):
        return 2

    def create_runtime(self, index):
        return BadRuntime(index)

    def register_kernels(self, kernels):
        _register(kernels)


class BadHostPlugin(Plugin):
    """badhost:0, host memory; kernels misbehave as FAULTS says."""

    api_version = (2, 0)

    def device_count(self):
        return 1

    def create_runtime(self, index):
        return BadHostRuntime(index)

    def register_kernels(self, kernels):
        _register(kernels)
