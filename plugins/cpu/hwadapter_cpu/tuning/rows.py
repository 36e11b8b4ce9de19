"""float32 softmax, log_softmax and layer_norm over trailing axes in C (rows.c: one pass per statistic, expf
vectorised where the C library has libmvec), and batched products (one BLAS call per batch item), in parts on the
device's crew; everything else through the reference kernels."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from hwadapter.plugin import reference

from .clib import CLibrary

SOURCE = Path(__file__).with_name("rows.c")
_TASK = (None, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64])
TASKS = ("hwa_softmax_rows", "hwa_layer_norm_rows", "hwa_batched_matmul")


def library(device) -> CLibrary:
    """rows.c for `device`, compiled on first call after the codegen backend's prelude (its vector math)."""
    return CLibrary(device, (SOURCE,), dict.fromkeys(TASKS, _TASK), "softmax, layer_norm and batched products run "
                    "in numpy", prelude=True)


class Rows:
    """Runs rows.c's tasks: in parts on the device's crew (the codegen backend's threads), else on this thread."""

    def __init__(self, device):
        self.device, self.lib = device, library(device)
        self._addresses: dict = {}

    def ready(self) -> bool:
        return self.lib() is not None

    def run(self, name: str, params: np.ndarray, units: int) -> None:
        lib = self.lib()
        fn = getattr(lib, name)
        address = self._addresses.get(name)
        if address is None:
            address = self._addresses[name] = ctypes.cast(fn, ctypes.c_void_p).value
        threads = self.device.codegen.threads if self.device.codegen is not None else None
        if threads is None or not threads.run(address, params, units):
            fn(params.ctypes.data, 0, 1)


def kernels(device) -> dict:
    """{op: kernel} for `device`: float32 rows in C once rows.c compiles (else the reference, saying why once)."""
    rows = Rows(device)

    def _rows(x, axis):
        """x as (rows, cols) with cols the last axis, or None where rows.c does not apply."""
        if not (x.dtype == np.float32 and x.ndim and x.size and axis % x.ndim == x.ndim - 1) or not rows.ready():
            return None
        return np.ascontiguousarray(x)

    def softmax(x, axis=-1):
        return _softmax(x, axis, 0) if _rows(x, axis) is not None else reference.KERNELS["softmax"](x, axis)

    def log_softmax(x, axis=-1):
        return _softmax(x, axis, 1) if _rows(x, axis) is not None else reference.KERNELS["log_softmax"](x, axis)

    def _softmax(x, axis, log):
        x = np.ascontiguousarray(x)
        out = np.empty_like(x)
        cols = x.shape[-1]
        rows.run("hwa_softmax_rows", np.array([x.ctypes.data, out.ctypes.data, x.size // cols, cols, log],
                                              np.int64), x.size)
        return out

    def layer_norm(x, weight, bias, begin_axis=-1, epsilon=1e-5):
        begin = begin_axis % x.ndim if x.ndim else 0
        cols = int(np.prod(x.shape[begin:]))
        if not (x.dtype == weight.dtype == bias.dtype == np.float32 and x.size and weight.size == bias.size == cols
                and weight.shape == bias.shape and weight.shape == x.shape[begin:][-weight.ndim:] and rows.ready()):
            return reference.KERNELS["layer_norm"](x, weight, bias, begin_axis, epsilon)
        x, weight, bias = (np.ascontiguousarray(a) for a in (x, weight, bias))
        out = np.empty_like(x)
        eps = int(np.float32(epsilon).view(np.uint32))
        rows.run("hwa_layer_norm_rows", np.array([x.ctypes.data, out.ctypes.data, weight.ctypes.data,
                                                  bias.ctypes.data, x.size // cols, cols, eps], np.int64), x.size)
        return out

    return {"softmax": softmax, "log_softmax": log_softmax, "layer_norm": layer_norm}
