"""float32 batch_norm for the CPU in C (norm.c, one pass, instead of the reference's four numpy passes with a
temporary each); the rest through the reference kernel."""
from __future__ import annotations

import ctypes
import math
from pathlib import Path

import numpy as np

from hwadapter.plugin import reference

from .clib import CLibrary
from .threads import Threads

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
        template = _template(x.shape, axis, epsilon)
        if not threads.call(task(), template, x.size, 0, x, 1, out, 2, mean, 3, var, 4, weight, 5, bias):
            outer, inner = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis + 1:]))
            lib().hwa_batch_norm(x.ctypes.data, out.ctypes.data, mean.ctypes.data, var.ctypes.data,
                                 weight.ctypes.data, bias.ctypes.data, float(np.float32(epsilon)), outer,
                                 x.shape[axis], inner)
        return out

    def task() -> int:
        return ctypes.cast(lib().hwa_batch_norm_task, ctypes.c_void_p).value

    def lower(ins, outs, attrs, consts):
        """The step as a segment's record (segments.py), parameters constant or not; None where the kernel would run
        the reference."""
        (shape, dtype), *rest = ins
        axis = attrs.get("channel_axis", 1) % len(shape) if shape else 0
        if dtype != np.float32 or not shape or 0 in consts or lib() is None or not math.prod(shape) or \
                any(d != np.float32 or tuple(s) != (shape[axis],) for s, d in rest) or len(rest) != 4:
            return None
        where = [("const", np.ascontiguousarray(consts[j])) if j in consts else ("in", j) for j in range(1, 5)]
        return threads.lowered(task(), _template(shape, axis, attrs.get("epsilon", 1e-5)), math.prod(shape),
                               [(0, ("in", 0), 0), (1, ("out", 0), 0)] + [(1 + j, w, 0) for j, w in
                                                                          enumerate(where, 1)])

    threads = Threads(device)
    batch_norm.lower = lower
    return {"batch_norm": batch_norm}


def _template(shape, axis: int, epsilon) -> np.ndarray:
    """hwa_batch_norm_task's parameters but the arrays."""
    eps = int(np.float32(epsilon).view(np.int32))
    return np.array([0] * 6 + [eps, math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])], np.int64)


def library(device) -> CLibrary:
    """norm.c for `device`, compiled on first call."""
    args = [ctypes.c_void_p] * 6 + [ctypes.c_float] + [ctypes.c_int64] * 3
    return CLibrary(device, (SOURCE,), {"hwa_batch_norm": (None, args),
                                        "hwa_batch_norm_task": (None, [ctypes.c_void_p, ctypes.c_int64,
                                                                       ctypes.c_int64])},
                    "batch_norm runs in numpy")
