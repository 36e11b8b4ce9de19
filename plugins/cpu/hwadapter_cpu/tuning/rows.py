"""float32 softmax, log_softmax and layer_norm over trailing axes in C (rows.c: one pass per statistic, expf
vectorised where the C library has libmvec), batched products (one BLAS call per batch item) and transposes that move
the last axis (in tiles), in parts on the device's crew; everything else through the reference kernels."""
from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import numpy as np

from hwadapter.plugin import reference

from .clib import CLibrary

SOURCES = tuple(Path(__file__).with_name(name) for name in ("sgemm.c", "rows.c"))
_TASK = (None, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64])
#: least elements a float32 clip runs as its compiled program (hostchain.NUMPY_UP_TO's crossover, two threads' worth)
CLIP_COMPILED = 1 << 16
TASKS = ("hwa_softmax_rows", "hwa_layer_norm_rows", "hwa_batched_matmul", "hwa_transpose", "hwa_transpose_blocks",
         "hwa_mean_rows", "hwa_relu")
#: least float32 elements a ReLU runs in C (rows.c's, on the crew): below it numpy's one call costs less than ours
RELU_C = 1 << 14
#: least bytes a block of trailing axes that stay together must hold for one copy per block (rows.c's
#: hwa_transpose_blocks) to beat numpy's strided copy
BLOCK_BYTES = 64


def library(device) -> CLibrary:
    """rows.c for `device`, compiled on first call after the codegen backend's prelude (its vector math)."""
    return CLibrary(device, SOURCES, dict.fromkeys(TASKS, _TASK), "softmax, layer_norm and batched products run "
                    "in numpy", prelude=True)


class Rows:
    """Runs rows.c's tasks: in parts on the device's crew (the codegen backend's threads), else on this thread."""

    def __init__(self, device):
        self.device, self.lib = device, library(device)
        self._addresses: dict = {}

    def ready(self) -> bool:
        return self.lib() is not None

    def address(self, name: str) -> int:
        """The address of rows.c's task `name`."""
        address = self._addresses.get(name)
        if address is None:
            address = self._addresses[name] = ctypes.cast(getattr(self.lib(), name), ctypes.c_void_p).value
        return address

    def run(self, name: str, params: np.ndarray, units: int) -> None:
        lib = self.lib()
        fn = getattr(lib, name)
        address = self.address(name)
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

    def transpose(x, perm):
        shape = _as_swap(x.shape, tuple(int(a) for a in perm))
        if shape is None or not rows.ready():
            return reference.KERNELS["transpose"](x, perm)
        batch, m, n, inner = shape
        bytes_ = inner * x.dtype.itemsize
        if not (inner == 1 and x.dtype.itemsize == 4 or inner > 1 and bytes_ >= BLOCK_BYTES and x.dtype != object):
            return reference.KERNELS["transpose"](x, perm)
        x = np.ascontiguousarray(x)
        out = np.empty(tuple(x.shape[a] for a in perm), x.dtype)
        if inner == 1:
            rows.run("hwa_transpose", np.array([x.ctypes.data, out.ctypes.data, batch, m, n], np.int64), x.size)
        else:
            # copies gain from the crew only when large: a unit per 32 bytes puts the crossover near 1 MB
            rows.run("hwa_transpose_blocks", np.array([x.ctypes.data, out.ctypes.data, batch, m, n, bytes_],
                                                      np.int64), x.nbytes // 32)
        return out

    def _trailing(shape, axis):
        """(rows, cols, first reduced axis) where `axis` (an int, a sequence or None) is the trailing axes of `shape`,
        else None."""
        if not shape:
            return None
        axes = range(len(shape)) if axis is None else (axis,) if isinstance(axis, int) else axis
        try:
            axes = sorted({int(a) % len(shape) for a in axes})
        except (TypeError, ValueError):
            return None
        if not axes or axes != list(range(len(shape) - len(axes), len(shape))):
            return None
        cols = math.prod(shape[axes[0]:])
        return (math.prod(shape) // cols, cols, axes[0]) if cols else None

    def mean(x, axis=None, keepdim=False):
        found = _trailing(x.shape, axis) if x.dtype == np.float32 and x.size and rows.ready() else None
        if found is None:
            return reference.KERNELS["mean"](x, axis, keepdim)
        n, cols, first = found
        x = np.ascontiguousarray(x)
        out = np.empty(n, np.float32)
        rows.run("hwa_mean_rows", np.array([x.ctypes.data, out.ctypes.data, n, cols], np.int64), x.size)
        return out.reshape(x.shape[:first] + ((1,) * (x.ndim - first) if keepdim else ()))

    def lower_mean(ins, outs, attrs, consts):
        (shape, dtype), = ins
        found = _trailing(tuple(shape), attrs.get("axis")) if dtype == np.float32 and 0 not in consts else None
        if found is None or not math.prod(shape):
            return None
        n, cols, _ = found
        return lowered("hwa_mean_rows", [0, 0, n, cols], math.prod(shape), [(0, ("in", 0), 0), (1, ("out", 0), 0)])

    def relu(x):
        if x.dtype != np.float32 or x.size < RELU_C or not rows.ready():
            return reference.KERNELS["relu"](x)
        x = np.ascontiguousarray(x)
        out = np.empty_like(x)
        rows.run("hwa_relu", np.array([x.ctypes.data, out.ctypes.data, x.size], np.int64), x.size)
        return out

    def lower_relu(ins, outs, attrs, consts):
        (shape, dtype), = ins
        if dtype != np.float32 or not math.prod(shape) or 0 in consts:  # inside a segment C costs nothing to call
            return None
        return lowered("hwa_relu", [0, 0, math.prod(shape)], math.prod(shape), [(0, ("in", 0), 0), (1, ("out", 0), 0)])

    def clip(x, min=None, max=None):
        # a large float32 clip (ReLU6 between convolutions) as the compiled program: one vectorised pass in parts on
        # the crew, where numpy's clip is one slower pass on one thread; the same selects, so the same results
        program = device.primitive("clip") if x.dtype == np.float32 and x.size >= CLIP_COMPILED else None
        if program is None or (min is None and max is None):
            return reference.KERNELS["clip"](x, min, max)
        return program(np.ascontiguousarray(x), min=min, max=max)

    def lowered(name, template, units, patches):
        """rows.c's task `name` as a segment's record (segments.py), or None."""
        threads = device.codegen.threads if device.codegen is not None else None
        if threads is None or not rows.ready():
            return None
        return threads.lowered(rows.address(name), np.array(template, np.int64), units, patches)

    def lower_softmax(log):
        def lower(ins, outs, attrs, consts):
            (shape, dtype), = ins
            if dtype != np.float32 or not shape or 0 in consts or attrs.get("axis", -1) % len(shape) != len(shape) - 1 \
                    or not math.prod(shape):
                return None
            cols = shape[-1]
            return lowered("hwa_softmax_rows", [0, 0, math.prod(shape) // cols, cols, log], math.prod(shape),
                           [(0, ("in", 0), 0), (1, ("out", 0), 0)])
        return lower

    def lower_transpose(ins, outs, attrs, consts):
        (shape, dtype), = ins
        if 0 in consts or not math.prod(shape) or "perm" not in attrs:
            return None
        found = _as_swap(tuple(shape), tuple(int(a) for a in attrs["perm"]))
        if found is None:
            return None
        batch, m, n, inner = found
        size, patches = np.dtype(dtype).itemsize, [(0, ("in", 0), 0), (1, ("out", 0), 0)]
        if inner == 1 and size == 4:
            return lowered("hwa_transpose", [0, 0, batch, m, n], math.prod(shape), patches)
        if inner > 1 and inner * size >= BLOCK_BYTES:
            return lowered("hwa_transpose_blocks", [0, 0, batch, m, n, inner * size], math.prod(shape) * size // 32,
                           patches)
        return None

    softmax.lower, log_softmax.lower, transpose.lower = lower_softmax(0), lower_softmax(1), lower_transpose
    mean.lower, relu.lower = lower_mean, lower_relu
    return {"softmax": softmax, "log_softmax": log_softmax, "layer_norm": layer_norm, "transpose": transpose,
            "clip": clip, "mean": mean, "relu": relu}


@functools.lru_cache(maxsize=1024)
def _as_swap(shape: tuple, perm: tuple):
    """(batch, m, n, inner) where transposing `shape` by `perm` is y[b] = x[b].T of x viewed as (batch, m, n, inner),
    blocks of `inner` elements (trailing axes that do not move) kept together; else None."""
    perm = [int(a) % len(shape) for a in perm] if shape else []
    axes = [a for a in perm if shape[a] != 1]  # axes of size 1 move nothing
    groups = []  # runs of input axes that stay together, in output order
    for a in axes:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    size = [math.prod(shape[a] for a in g) for g in groups]
    batch = inner = 1
    if len(groups) >= 3 and groups[0][0] < min(g[0] for g in groups[1:]):  # leading axes that stay first
        batch, groups, size = size[0], groups[1:], size[1:]
    if len(groups) == 3 and groups[2][0] > max(g[-1] for g in groups[:2]):  # trailing axes that stay last
        inner, groups, size = size[2], groups[:2], size[:2]
    if len(groups) == 2 and groups[0][0] > groups[1][0]:
        return batch, size[1], size[0], inner
    return None
