"""float32 batch_norm for the CPU in C (norm.c, one pass, instead of the reference's four numpy passes with a
temporary each); the rest through the reference kernel."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from hwadapter.plugin import reference

from .clib import CLibrary

SOURCE = Path(__file__).with_name("norm.c")


def kernels(device) -> dict:
    """{op: kernel} for `device`: float32 through norm.c once it compiles (else the reference, saying why once)."""
    lib = library(device)

    def batch_norm(x, mean, var, weight, bias, epsilon=1e-5, channel_axis=1):
        params = (mean, var, weight, bias)
        axis = channel_axis % x.ndim if x.ndim else 0
        if not (x.dtype == np.float32 and x.ndim and all(p.dtype == np.float32 and p.shape == (x.shape[axis],)
                                                         for p in params)) or lib() is None:
            return reference.KERNELS["batch_norm"](x, mean, var, weight, bias, epsilon, channel_axis)
        x = np.ascontiguousarray(x)
        mean, var, weight, bias = (np.ascontiguousarray(p) for p in params)
        out = np.empty_like(x)
        outer, inner = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis + 1:]))
        lib().hwa_batch_norm(x.ctypes.data, out.ctypes.data, mean.ctypes.data, var.ctypes.data, weight.ctypes.data,
                             bias.ctypes.data, float(np.float32(epsilon)), outer, x.shape[axis], inner)
        return out

    return {"batch_norm": batch_norm}


def library(device) -> CLibrary:
    """norm.c for `device`, compiled on first call."""
    args = [ctypes.c_void_p] * 6 + [ctypes.c_float] + [ctypes.c_int64] * 3
    return CLibrary(device, (SOURCE,), {"hwa_batch_norm": (None, args)}, "batch_norm runs in numpy")
