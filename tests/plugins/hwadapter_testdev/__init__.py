"""A test device: its memory is separate from the host's (numpy byte arrays it hands out), has a size limit, and
it has kernels for only a few ops, so everything else exercises CPU fallback."""
from __future__ import annotations

import numpy as np

from hwadapter.plugin import DeviceArray, DeviceProperties, HostBufferRuntime, OutOfMemoryError, Plugin

MEMORY_LIMIT = 16 << 20  # bytes per device; tests change it to provoke out-of-memory


class TestDevRuntime(HostBufferRuntime):
    """Device memory as numpy byte arrays, with a byte budget and live-allocation tracking."""

    def __init__(self, index):
        super().__init__(index)
        self.live = {}
        self.allocate_calls = 0

    def properties(self):
        return DeviceProperties(name=f"testdev {self.index}", vendor="hwadapter tests", total_memory=MEMORY_LIMIT)

    @property
    def used(self) -> int:
        return sum(a.nbytes for a in self.live.values())

    def allocate(self, nbytes):
        self.allocate_calls += 1
        if self.used + nbytes > MEMORY_LIMIT:
            raise OutOfMemoryError(f"testdev:{self.index} has {MEMORY_LIMIT - self.used} bytes free")
        buf = np.zeros(nbytes, np.uint8)
        self.live[id(buf)] = buf
        return buf

    def free(self, handle):
        del self.live[id(handle)]

    def memory_info(self):
        return MEMORY_LIMIT - self.used, MEMORY_LIMIT


def view(a: DeviceArray) -> np.ndarray:
    """The numpy view of a testdev array's memory."""
    if a.block is None:
        return np.empty(a.shape, a.dtype)
    return a.block.handle[:a.nbytes].view(a.dtype).reshape(a.shape)


def _elementwise(fn):
    def kernel(*xs):
        res = fn(*(view(x) for x in xs))
        out = DeviceArray.empty(xs[0].device, res.shape, res.dtype)
        view(out)[...] = res
        return out
    return kernel


def _matmul(x, y, transpose_x=False, transpose_y=False):
    a, b = view(x), view(y)
    a = np.swapaxes(a, -1, -2) if transpose_x and a.ndim > 1 else a
    b = np.swapaxes(b, -1, -2) if transpose_y and b.ndim > 1 else b
    res = np.matmul(a, b)
    out = DeviceArray.empty(x.device, res.shape, res.dtype)
    view(out)[...] = res
    return out


class TestDevPlugin(Plugin):
    """Two test devices with kernels for add, mul, relu and matmul in float32 only."""

    api_version = (2, 1)

    def device_count(self):
        return 2

    def create_runtime(self, index):
        return TestDevRuntime(index)

    def register_kernels(self, kernels):
        kernels.register("add", _elementwise(np.add), dtypes=["float32"])
        kernels.register("mul", _elementwise(np.multiply), dtypes=["float32"])
        kernels.register("relu", _elementwise(lambda x: np.maximum(x, 0)), dtypes=["float32"])
        kernels.register("matmul", _matmul, dtypes=["float32"])
        kernels.register("reshape", lambda x, shape: x.reshape(shape))
