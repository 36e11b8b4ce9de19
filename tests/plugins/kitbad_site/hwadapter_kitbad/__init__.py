"""Test plugins for tests/test_conformance.py: kitgood keeps every contract the kit checks; each other type breaks one.

Not on sys.path unless a test puts this directory there (as PYTHONPATH of the processes it starts), so no other test
sees these devices. Every type: one device with separate memory (numpy byte arrays it hands out, 64 MiB stated and
enforced) and float32 kernels for add, neg, relu and matmul.

* kitnumpy: `add` returns a raw numpy array where a DeviceArray is due;
* kitnooom: `allocate` never raises OutOfMemoryError (it hands out any size);
* kitfree: `free` gives back twice the bytes, so the accounting goes negative;
* kitabort: `neg` aborts the process (os.abort);
* kithang: `neg` never returns;
* kitdoublefree: `free` of a buffer already freed (or never allocated) returns without an error;
* kitoffset: `copy_h2d` ignores its offset (writes at the start of the buffer);
* kitsize: `allocate` ignores its size (always 64 bytes);
* kitnokernels: registers no kernel (its op level is empty).
* kitinplace: its relu kernel writes its result into its input.
"""
from __future__ import annotations

import os
import time

import numpy as np

from hwadapter.plugin import DeviceArray, DeviceProperties, HostBufferRuntime, InvalidArgumentError, OutOfMemoryError
from hwadapter.plugin import Plugin

CAPACITY = 64 << 20


class GoodRuntime(HostBufferRuntime):
    """Separate memory with a byte budget; frees are checked."""

    def __init__(self, index):
        super().__init__(index)
        self.live, self.used = {}, 0

    def properties(self):
        return DeviceProperties(name=f"kitbad {self.index}", vendor="hwadapter tests", total_memory=CAPACITY)

    def allocate(self, nbytes):
        if self.used + nbytes > CAPACITY:
            raise OutOfMemoryError(f"kitbad: {nbytes} bytes asked, {CAPACITY - self.used} free")
        buf = np.zeros(nbytes, np.uint8)
        self.live[id(buf)] = buf
        self.used += nbytes
        return buf

    def free(self, handle):
        if self.live.pop(id(handle), None) is not handle:
            raise InvalidArgumentError("kitbad: free of a buffer that is not allocated")
        self.used -= handle.nbytes

    def memory_info(self):
        return CAPACITY - self.used, CAPACITY


class NoOomRuntime(GoodRuntime):
    def allocate(self, nbytes):
        buf = np.zeros(nbytes, np.uint8)
        self.live[id(buf)] = buf
        self.used += nbytes
        return buf


class BadFreeRuntime(GoodRuntime):
    def free(self, handle):
        super().free(handle)
        self.used -= handle.nbytes  # a second time: live bytes go negative


class SilentFreeRuntime(GoodRuntime):
    def free(self, handle):
        buf = self.live.pop(id(handle), None)
        if buf is handle:
            self.used -= handle.nbytes


class NoOffsetRuntime(GoodRuntime):
    def copy_h2d(self, dst, dst_offset, src, stream=None):
        super().copy_h2d(dst, 0, src, stream)


class FixedSizeRuntime(GoodRuntime):
    def allocate(self, nbytes):
        buf = super().allocate(64)
        self.used += nbytes - buf.nbytes  # the accounting counts what was asked: only the buffer is short
        self.asked[id(buf)] = nbytes
        return buf

    def free(self, handle):
        super().free(handle)
        self.used += handle.nbytes - self.asked.pop(id(handle))

    @property
    def asked(self):
        return self.__dict__.setdefault("_asked", {})


def _view(a: DeviceArray) -> np.ndarray:
    if a.block is None:
        return np.empty(a.shape, a.dtype)
    return a.block.handle[:a.nbytes].view(a.dtype).reshape(a.shape)


def _kernel(fn, numpy_result=False):
    def kernel(*xs, **attrs):
        res = np.asarray(fn(*(_view(x) for x in xs), **attrs))
        if numpy_result:
            return res
        out = DeviceArray.empty(xs[0].device, res.shape, res.dtype)
        _view(out)[...] = res
        return out
    return kernel


def _matmul(x, y, transpose_x=False, transpose_y=False):
    x = np.swapaxes(x, -1, -2) if transpose_x and x.ndim > 1 else x
    y = np.swapaxes(y, -1, -2) if transpose_y and y.ndim > 1 else y
    return np.matmul(x, y)


def _abort(x):
    os.abort()


def _hang(x):
    while True:
        time.sleep(1)


class GoodPlugin(Plugin):
    api_version = (2, 0)
    runtime = GoodRuntime
    faults: dict = {}

    def device_count(self):
        return 1

    def create_runtime(self, index):
        return self.runtime(index)

    def register_kernels(self, kernels):
        ops = {"add": np.add, "neg": np.negative, "relu": lambda x: np.maximum(x, np.float32(0)), "matmul": _matmul}
        for op, fn in ops.items():
            fault = self.faults.get(op)
            code = fault if callable(fault) else fn
            kernels.register(op, _kernel(code, numpy_result=fault == "numpy"), dtypes=["float32"])


class NumpyResultPlugin(GoodPlugin):
    faults = {"add": "numpy"}


class NoOomPlugin(GoodPlugin):
    runtime = NoOomRuntime


class BadFreePlugin(GoodPlugin):
    runtime = BadFreeRuntime


class AbortPlugin(GoodPlugin):
    faults = {"neg": _abort}


class HangPlugin(GoodPlugin):
    faults = {"neg": _hang}


class SilentFreePlugin(GoodPlugin):
    runtime = SilentFreeRuntime


class NoOffsetPlugin(GoodPlugin):
    runtime = NoOffsetRuntime


class FixedSizePlugin(GoodPlugin):
    runtime = FixedSizeRuntime


def _relu_in_place(x):
    np.maximum(x, np.float32(0), out=x)  # written into its input: tensors are immutable, so this changes a caller's
    return x.copy()


class InPlacePlugin(GoodPlugin):
    faults = {"relu": _relu_in_place}


class NoKernelsPlugin(GoodPlugin):
    def register_kernels(self, kernels):
        pass
