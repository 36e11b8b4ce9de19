"""float32 conv2d and matmul for the CPU in compiled C (conv2d.c), chosen with HWADAPTER_CPU_KERNELS=codegen.

The C kernel packs the patches once per image (no im2col array, no padded copy) and runs the product with bias,
residual and relu applied as it stores, its threads taking work in turn from shared counters. Measured on a 2-core
EPYC over ResNet-50's 53 convolutions, one thread each: 192 ms against 156 ms for im2col + OpenBLAS (before
blasconv.py, the default now, added Winograd), and on an idle machine OpenBLAS's spinning threads also hand work over faster; on a busy one this kernel's
threads degrade far less (ResNet-50 at 1.1-1.4x onnxruntime's time against about 2x), hence the setting. It is
compiled once per machine through the device's codegen backend and its disk cache; float32 matmul runs through it
too, so that no OpenBLAS thread spins beside its threads.
"""
from __future__ import annotations

import ctypes
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from hwadapter.plugin import OutOfMemoryError, load_source, meta, reference

from .conv import _EPILOGUE, conv2d
from .crew import cores

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("conv2d.c")
MIN_FLOPS = 1 << 21  # below this, handing work to another thread costs more than it saves


class Native:
    """The compiled float32 conv2d of one device (loaded at its first call; None when it cannot be built here) and
    the threads that share its calls.

    Each call is planned in C (hwa_conv2d_new), then worked on by this thread and the pool's: every thread takes
    strips to pack and then tasks from shared counters until none is left (hwa_conv2d_work). So on a busy machine
    a descheduled thread holds back one task, not the whole call, and no thread spins waiting for the others (an
    OpenMP loop or OpenBLAS's threads, splitting the work evenly up front, ran 2-4x slower there).
    """

    def __init__(self, device):
        self.device = device
        self.threads = cores()
        self._lib = None
        self._pool = None
        self._lock = threading.Lock()
        # scratch for the packed patches, kept between calls: allocating megabytes per call (fresh mmap'd pages)
        # cost ResNet-50 171 ms against 128 ms with the buffers kept
        self._scratch: list = []

    def lib(self):
        if self._lib is None:
            with self._lock:
                if self._lib is None:
                    self._lib = self._load() or False
                    if self._lib and self.threads > 1:
                        self._pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix=f"{self.device}-conv")
        return self._lib or None

    def _load(self):
        try:
            lib = load_source(self.device, SOURCE.read_text(), "hwa_conv2d_new").library
        except Exception as err:  # no compiler, or a compiler that fails: the numpy form serves, and says so once
            # the message only: a record holding the exception would keep its frames (and their arrays) alive
            log.warning("%s: conv2d runs in numpy, its C kernel is unavailable: %s", self.device, str(err))
            return None
        lib.hwa_conv2d_new.restype = ctypes.c_void_p
        lib.hwa_conv2d_new.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int64] * 17
        lib.hwa_conv2d_scratch.restype = ctypes.c_int64
        lib.hwa_conv2d_scratch.argtypes = [ctypes.c_int64] * 6
        for name in ("hwa_conv2d_work", "hwa_conv2d_wait", "hwa_conv2d_release"):
            getattr(lib, name).restype = None
            getattr(lib, name).argtypes = [ctypes.c_void_p]
        return lib

    def _take(self, floats: int) -> np.ndarray:
        """A scratch buffer of at least `floats` float32s, 64-byte aligned: one kept from an earlier call if any."""
        with self._lock:
            if self._scratch:
                buf = self._scratch.pop()
                if buf.size >= floats:
                    return buf
        raw = np.empty(floats + 16, np.float32)  # aligned below: the tile loads and the packing assume 64 bytes
        start = (-raw.ctypes.data % 64) // 4
        return raw[start:start + floats]

    def _give(self, buf: np.ndarray) -> None:
        with self._lock:
            if len(self._scratch) < 4:  # one per thread calling at once, a few at most
                self._scratch.append(buf)

    def _work(self, call) -> None:
        """A pool thread's share: it may start after the call is done, and then finds nothing left."""
        self._lib.hwa_conv2d_work(call)
        self._lib.hwa_conv2d_release(call)

    def __call__(self, lib, x, w, bias, residual, stride, padding, dilation, activation):
        n, c, h, wd = x.shape
        o, _, kh, kw = w.shape
        (sh, sw), (dh, dw), (pt, _, pl, _) = stride, dilation, padding
        # the op's own rule: it also refuses a residual of another shape, which C would read past its end
        (((_, _, oh, ow), _),) = meta.result_meta(
            "conv2d", (x.shape, w.shape, *(() if residual is None else ((o,), residual.shape))),
            (x.dtype, w.dtype), {"stride": stride, "padding": padding, "dilation": dilation})
        if kh == kw == 1 and not any(padding) and (sh, sw) != (1, 1):
            x, h, wd, sh, sw = x[:, :, ::sh, ::sw], oh, ow, 1, 1  # a strided 1x1 reads a subsampled copy, densely
        x = np.ascontiguousarray(x)
        wm = np.ascontiguousarray(w.reshape(o, c * kh * kw))
        b = np.ascontiguousarray(bias) if bias is not None else None
        r = np.ascontiguousarray(residual) if residual is not None else None
        out = np.empty((n, o, oh, ow), np.float32)
        if out.size == 0:
            return out
        helpers = self.threads - 1 if self._pool is not None and 2 * o * c * kh * kw * oh * ow * n >= MIN_FLOPS else 0
        scratch = self._take(lib.hwa_conv2d_scratch(n, c, kh, kw, oh, ow))
        call = lib.hwa_conv2d_new(x.ctypes.data, wm.ctypes.data, None if b is None else b.ctypes.data,
                                  None if r is None else r.ctypes.data, out.ctypes.data, scratch.ctypes.data, n, c, h,
                                  wd, o, kh, kw, sh, sw, pt, pl, dh, dw, oh, ow, activation == "relu", helpers + 1)
        if not call:
            raise OutOfMemoryError(f"conv2d on {self.device}: no host memory for the packed patches of a "
                                   f"{x.shape} input. Fix: free memory or run a smaller batch")
        for _ in range(helpers):
            self._pool.submit(self._work, call)
        try:
            lib.hwa_conv2d_work(call)
            lib.hwa_conv2d_wait(call)  # a helper starting later finds nothing left: the scratch is free again
        finally:
            lib.hwa_conv2d_release(call)
            self._give(scratch)
        if activation not in (None, "relu"):
            out = _EPILOGUE[activation](out)
        return out


def kernels(device) -> dict:
    """conv2d and matmul for `device` under HWADAPTER_CPU_KERNELS=codegen, sharing one Native: float32 in C, the rest
    in numpy."""
    native = Native(device)
    return {"conv2d": conv_kernel(native), "matmul": matmul_kernel(native)}


def matmul_kernel(native):
    """matmul: float32 products with a 2-D right operand as the C kernel's 1x1 convolution (its rows the left
    operand's, every batch stacked), the rest, and small ones, through numpy.

    Why not numpy's BLAS: OpenBLAS's threads spin for a while after each product, and on a machine with as many
    cores as threads they took a core from the convolutions that followed (a quarter of ResNet-50's CPU time went to
    the spinning threads after its one Gemm)."""
    def matmul(x, y, transpose_x=False, transpose_y=False):
        if x.dtype == y.dtype == np.float32 and x.ndim >= 2 and y.ndim == 2 and x.size and y.size:
            if transpose_x:
                x = np.swapaxes(x, -1, -2)
            if transpose_y:
                y = y.T
            k, n = y.shape
            rows = x.size // k
            lib = native.lib() if 2 * rows * k * n >= MIN_FLOPS else None
            if lib is not None and x.shape[-1] == k:
                a = np.ascontiguousarray(x).reshape(rows, k)
                b = np.ascontiguousarray(y).reshape(1, k, 1, n)
                out = native(lib, b, a.reshape(rows, k, 1, 1), None, None, (1, 1), (0, 0, 0, 0), (1, 1), None)
                return out.reshape(*x.shape[:-1], n)
            return reference.matmul(x, y)
        return reference.matmul(x, y, transpose_x, transpose_y)
    matmul.__name__ = matmul.__qualname__ = "matmul"
    return matmul


def conv_kernel(native):
    """conv2d: float32 ungrouped convolutions through `native`, the rest in numpy."""
    def conv2d_kernel(x, w, bias=None, residual=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                      groups=1, activation=None):
        if x.dtype == w.dtype == np.float32 and groups == 1 and x.size and w.size and all(
                a is None or a.dtype == np.float32 for a in (bias, residual)):
            lib = native.lib()
            if lib is not None:
                return native(lib, x, w, bias, residual, tuple(stride), tuple(padding), tuple(dilation), activation)
        return conv2d(x, w, bias, residual, stride, padding, dilation, groups, activation)
    conv2d_kernel.__name__ = conv2d_kernel.__qualname__ = "conv2d"
    conv2d_kernel.epilogues = reference.CONV_ACTIVATIONS
    conv2d_kernel.residual = True  # takes a fused residual input (graph fusion asks before emitting one)
    return conv2d_kernel
