"""Pooling for the CPU: float32 max_pool2d and avg_pool2d in C (pool.c, separable: across the columns, then the
rows), the rest in numpy.

numpy's max_pool2d takes the maximum of kh*kw strided views, one elementwise pass each: the reference kernel's
(N, C, OH, OW, kh, kw) window view, which numpy walks with a stride per element, is many times slower.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from hwadapter.plugin import BoundedCache, meta, reference, shapes

from . import rows
from .clib import CLibrary
from .threads import Threads

SOURCE = Path(__file__).with_name("pool.c")


def max_pool2d(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False):
    """The reference max_pool2d's semantics: padding never wins (it is the dtype's lowest value)."""
    (kh, kw), (sh, sw) = kernel_size, stride
    pt, pb, pl, pr = padding
    n, c, h, w = x.shape
    oh, ow = shapes.pool_out(h, kh, sh, pt, pb, ceil_mode), shapes.pool_out(w, kw, sw, pl, pr, ceil_mode)
    low = -np.inf if x.dtype.kind == "f" else (False if x.dtype == np.bool_ else np.iinfo(x.dtype).min)
    need_h, need_w = (oh - 1) * sh + kh, (ow - 1) * sw + kw  # rows and columns the windows span, padding included
    xp = np.full((n, c, max(need_h, pt + h), max(need_w, pl + w)), low, x.dtype)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    out = None
    for i in range(kh):
        for j in range(kw):
            view = xp[:, :, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
            out = view.copy() if out is None else np.maximum(out, view, out=out)
    return out


def kernels(device) -> dict:
    """{op: kernel} for `device`: float32 through pool.c once it compiles (else numpy, saying why once)."""
    lib, crew = library(device), Threads(device)
    mean = rows.kernels(device)["mean"]  # a global average: rows.c's mean over the image

    plans = BoundedCache(256)  # signature -> (output shape, pool.c's parameters but the arrays)

    def plan(name, shape, kernel_size, stride, padding, ceil_mode, exclusive):
        (kh, kw), (sh, sw), (pt, pb, pl, pr) = kernel_size, stride, padding
        n, c, h, w = shape
        oh, ow = shapes.pool_out(h, kh, sh, pt, pb, ceil_mode), shapes.pool_out(w, kw, sw, pl, pr, ceil_mode)
        # one window along an axis: its stride is never used, and a huge one would overflow pool.c's row arithmetic
        sh, sw = (1 if oh == 1 else sh), (1 if ow == 1 else sw)
        return (n, c, max(oh, 0), max(ow, 0)), np.array([0, 0, n * c, h, w, kh, kw, sh, sw, pt, pl, oh, ow,
                                                         int(name == "avg_pool2d"), int(bool(exclusive)), 0], np.int64)

    def planned(name, shape, kernel_size, stride, padding, ceil_mode, exclusive):
        key = (name, tuple(shape), tuple(kernel_size), tuple(stride), tuple(padding), ceil_mode, exclusive)
        return plans.get_or_make(key, lambda: plan(name, shape, kernel_size, stride, padding, ceil_mode, exclusive))

    addresses: list = []  # pool.c's task, found once

    def task_address() -> int:
        if not addresses:
            addresses.append(ctypes.cast(lib().hwa_pool_task, ctypes.c_void_p).value)
        return addresses[0]

    def run(name, x, kernel_size, stride, padding, ceil_mode, exclusive=False):
        shape, template = planned(name, x.shape, kernel_size, stride, padding, ceil_mode, exclusive)
        out = np.empty(shape, np.float32)
        if not out.size:
            return out
        x = np.ascontiguousarray(x)
        failed = np.zeros(1, np.int64)
        if not crew.call(task_address(), template, out.size, Q_X, x, Q_OUT, out, Q_FAILED, failed):
            task = lib().hwa_pool_task
            params = template.copy()
            params[[Q_X, Q_OUT, Q_FAILED]] = [x.ctypes.data, out.ctypes.data, failed.ctypes.data]
            task(params.ctypes.data, 0, 1)
        if failed[0]:
            raise MemoryError(f"{name}: {device} could not allocate its scratch ({x.shape[2]} x {shape[3]} floats). "
                              f"Fix: free host memory")
        return out

    def tiled(x, g, kernel_size, stride, padding) -> bool:  # (in a segment pool.c's general loops run them: equal)
        """Windows that tile x exactly (stride = kernel, no padding, whole windows): pool.c's branch-free loops."""
        (kh, kw), h, w = kernel_size, x.shape[2], x.shape[3]
        return tuple(kernel_size) == tuple(stride) and not any(padding) and h % kh == 0 and w % kw == 0 and \
            x.size > 0 and (g is None or g.dtype == np.float32)

    def run_tiled(x, g, kernel_size):
        (kh, kw), (n, c, h, w) = kernel_size, x.shape
        x = np.ascontiguousarray(x)
        out = np.empty(x.shape if g is not None else (n, c, h // kh, w // kw), np.float32)
        gd = 0 if g is None else np.ascontiguousarray(g).ctypes.data
        if lib().hwa_max_pool_tiled(x.ctypes.data, gd, out.ctypes.data, n * c, h, w, kh, kw, int(g is not None)):
            raise MemoryError(f"max_pool2d: {device} could not allocate its scratch ({w} floats). Fix: free host "
                              f"memory")
        return out

    def max_pool(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False):
        if x.dtype != np.float32 or x.ndim != 4 or lib() is None:
            return max_pool2d(x, kernel_size, stride, padding, ceil_mode)
        if tiled(x, None, kernel_size, stride, padding):
            return run_tiled(x, None, kernel_size)
        return run("max_pool2d", x, kernel_size, stride, padding, ceil_mode)

    def avg_pool(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False, exclusive=True):
        if x.dtype != np.float32 or x.ndim != 4 or lib() is None:
            return reference.KERNELS["avg_pool2d"](x, kernel_size, stride, padding, ceil_mode, exclusive)
        if exclusive and x.size and _one_window(x.shape[2:], kernel_size, stride, padding, ceil_mode):
            # a global average however large the window (EfficientNet's AvgPool2d(1280) over 7 x 7): pool.c would
            # walk all of the window's padding
            return mean(x, (2, 3), True)
        return run("avg_pool2d", x, kernel_size, stride, padding, ceil_mode, exclusive)

    def max_pool_grad(*arrays, **attrs):
        if len(arrays) != 2 or lib() is None or not all(type(a) is np.ndarray and a.dtype == np.float32 and
                                                       a.ndim == 4 and a.size for a in arrays):
            return reference.KERNELS["max_pool2d_grad"](*arrays, **attrs)
        x, grad = arrays
        meta.RULES["max_pool2d_grad"]((x.shape, grad.shape), (x.dtype, grad.dtype), attrs)  # raises for bad calls
        kernel_size, stride = attrs.get("kernel_size", (2, 2)), attrs.get("stride", (2, 2))
        padding = attrs.get("padding", (0, 0, 0, 0))
        if tiled(x, grad, kernel_size, stride, padding) and grad.shape == (x.shape[0], x.shape[1],
                                                                             x.shape[2] // kernel_size[0],
                                                                             x.shape[3] // kernel_size[1]):
            return run_tiled(x, grad, kernel_size)
        (kh, kw), (sh, sw), (pt, _, pl, _) = kernel_size, stride, padding
        n, c, h, w = x.shape
        x, grad = np.ascontiguousarray(x), np.ascontiguousarray(grad)
        out = np.empty_like(x)
        if lib().hwa_max_pool_grad(x.ctypes.data, grad.ctypes.data, out.ctypes.data, n * c, h, w, kh, kw, sh, sw,
                                   pt, pl, grad.shape[2], grad.shape[3]):
            raise MemoryError(f"max_pool2d_grad: {device} could not allocate its scratch ({h} x {w} doubles). Fix: "
                              f"free host memory")
        return out

    def lowerer(name):
        def lower(ins, outs, attrs, consts):
            (shape, dtype), = ins
            if dtype != np.float32 or len(shape) != 4 or 0 in consts or lib() is None or not outs[0][0] or \
                    not all(outs[0][0]):
                return None
            kernel_size, stride = tuple(attrs.get("kernel_size", (2, 2))), tuple(attrs.get("stride", (2, 2)))
            padding, ceil_mode = tuple(attrs.get("padding", (0, 0, 0, 0))), attrs.get("ceil_mode", False)
            exclusive = attrs.get("exclusive", True) if name == "avg_pool2d" else False
            if name == "avg_pool2d" and exclusive and _one_window(shape[2:], kernel_size, stride, padding, ceil_mode):
                return mean.lower(ins, outs, {"axis": (2, 3), "keepdim": True}, consts)
            out_shape, template = planned(name, shape, kernel_size, stride, padding, ceil_mode, exclusive)
            if tuple(out_shape) != tuple(outs[0][0]):
                return None
            return crew.lowered(task_address(), template, int(np.prod(out_shape)),
                                [(Q_X, ("in", 0), 0), (Q_OUT, ("out", 0), 0), (Q_FAILED, "flag", 0)])
        return lower

    max_pool.lower, avg_pool.lower = lowerer("max_pool2d"), lowerer("avg_pool2d")
    max_pool.__name__ = max_pool.__qualname__ = "max_pool2d"
    max_pool_grad.__name__ = max_pool_grad.__qualname__ = "max_pool2d_grad"
    avg_pool.__name__ = avg_pool.__qualname__ = "avg_pool2d"
    return {"max_pool2d": max_pool, "avg_pool2d": avg_pool, "max_pool2d_grad": max_pool_grad}


#: pool.c's parameter slots of the arrays (its Q_X, Q_OUT, Q_FAILED)
Q_X, Q_OUT, Q_FAILED = 0, 1, 15


def _one_window(size, kernel_size, stride, padding, ceil_mode) -> bool:
    """True when pooling has one output per image whose window holds all of it."""
    (h, w), (kh, kw), (sh, sw), (pt, pb, pl, pr) = size, kernel_size, stride, padding
    one = shapes.pool_out(h, kh, sh, pt, pb, ceil_mode) == 1 == shapes.pool_out(w, kw, sw, pl, pr, ceil_mode)
    return one and kh - pt >= h and kw - pl >= w


def library(device) -> CLibrary:
    """pool.c for `device`, compiled on first call."""
    return CLibrary(device, (SOURCE,), {"hwa_pool_task": (None, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]),
                                     "hwa_max_pool_grad": (ctypes.c_int64, [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 11),
                                     "hwa_max_pool_tiled": (ctypes.c_int64, [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 5
                                                            + [ctypes.c_int])},
                    "pooling runs in numpy")
