"""numpy reference kernels: the semantics of every op, and the CPU plugin's kernels.

Each kernel is `fn(*arrays, **attrs) -> array | list[array]`; the frontend has already validated
shapes, promoted dtypes (binary ops see equal dtypes) and normalised attributes.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

def _quiet():
    return np.errstate(all="ignore")  # inf/nan results are the semantics, not a warning (one per call: not reentrant)


def _quietly(fn):
    def kernel(*args, **kwargs):
        with _quiet():
            return fn(*args, **kwargs)
    kernel.__name__ = kernel.__qualname__ = getattr(fn, "__name__", "kernel")
    return kernel


def _in_float32(fn):
    """float16 is computed in float32 and rounded once at the end."""
    def kernel(x, *args, **kwargs):
        if x.dtype == np.float16:
            return fn(x.astype(np.float32), *args, **kwargs).astype(np.float16)
        return fn(x, *args, **kwargs)
    kernel.__name__ = fn.__name__
    return kernel


# --- elementwise -------------------------------------------------------------------------------------
def _erf_approx(x):
    # Abramowitz & Stegun 7.1.26 refined to |error| < 1.5e-7: exact to float32 rounding.
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


_erf64 = np.frompyfunc(math.erf, 1, 1)


@_in_float32
def erf(x):
    if x.dtype == np.float64:
        return _erf64(x).astype(np.float64) if x.size else x.copy()
    return _erf_approx(x).astype(x.dtype)


@_in_float32
def gelu(x, approximate=False):
    if approximate:
        return (0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))).astype(x.dtype)
    return (0.5 * x * (1 + erf(x / np.sqrt(2).astype(x.dtype)))).astype(x.dtype)


def sigmoid(x):
    return (0.5 * (1 + np.tanh(0.5 * x))).astype(x.dtype)  # tanh form never overflows


def rsqrt(x):
    return 1 / np.sqrt(x)


def reciprocal(x):
    return 1 / x


def relu(x):
    return np.maximum(x, 0)


def identity_rounding(x):
    return x.copy()


UNARY = {
    "abs": np.abs, "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": rsqrt,
    "reciprocal": reciprocal, "sigmoid": sigmoid, "tanh": np.tanh, "relu": relu, "gelu": gelu, "erf": erf,
    "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil, "round": np.rint, "sign": np.sign,
    "logical_not": np.logical_not,
}
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "mod": np.mod,
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}
# Ops that can produce inf/nan or divide by zero run with numpy's warnings off.
_NOISY = {"log", "sqrt", "rsqrt", "reciprocal", "div", "pow", "mod", "exp"}


def where(cond, x, y):
    return np.where(cond, x, y)


def cast(x, dtype):
    with _quiet():
        return x.astype(dtype)


def clip(x, min=None, max=None):
    if min is None and max is None:
        return x.copy()
    return np.clip(x, min, max).astype(x.dtype, copy=False)


# --- reductions ------------------------------------------------------------------------------------
def _reduction(np_fn):
    def kernel(x, axis, keepdim=False):
        return np.asarray(np_fn(x, axis=axis, keepdims=keepdim))
    kernel.__name__ = np_fn.__name__
    return kernel


def mean(x, axis, keepdim=False):
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    return np.asarray(np.mean(x, axis=axis, keepdims=keepdim, dtype=acc)).astype(x.dtype, copy=False)


def argmax(x, axis=None, keepdim=False):
    return np.asarray(np.argmax(x, axis=axis, keepdims=keepdim), dtype=np.int64)


def argmin(x, axis=None, keepdim=False):
    return np.asarray(np.argmin(x, axis=axis, keepdims=keepdim), dtype=np.int64)


# --- linear algebra and normalisation ------------------------------------------------------------------------
def matmul(x, y, transpose_x=False, transpose_y=False):
    if transpose_x and x.ndim >= 2:
        x = np.swapaxes(x, -1, -2)
    if transpose_y and y.ndim >= 2:
        y = np.swapaxes(y, -1, -2)
    return np.ascontiguousarray(np.matmul(x, y))


@_in_float32
def softmax(x, axis=-1):
    if x.size == 0:
        return x.copy()
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype, copy=False)


@_in_float32
def log_softmax(x, axis=-1):
    if x.size == 0:
        return x.copy()
    shifted = x - x.max(axis=axis, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))).astype(x.dtype, copy=False)


def layer_norm(x, weight, bias, begin_axis=-1, epsilon=1e-5):
    dt = x.dtype
    xf = x.astype(np.float32) if dt == np.float16 else x
    axes = tuple(range(begin_axis % x.ndim, x.ndim))
    mu = xf.mean(axis=axes, keepdims=True)
    var = ((xf - mu) ** 2).mean(axis=axes, keepdims=True)
    out = (xf - mu) / np.sqrt(var + epsilon) * weight.astype(xf.dtype) + bias.astype(xf.dtype)
    return out.astype(dt, copy=False)


def batch_norm(x, mean_, var, weight, bias, epsilon=1e-5, channel_axis=1):
    dt = x.dtype
    xf = x.astype(np.float32) if dt == np.float16 else x
    shape = [1] * x.ndim
    shape[channel_axis] = x.shape[channel_axis]
    p = [a.astype(xf.dtype).reshape(shape) for a in (mean_, var, weight, bias)]
    out = (xf - p[0]) / np.sqrt(p[1] + epsilon) * p[2] + p[3]
    return out.astype(dt, copy=False)


# --- convolution and pooling ---------------------------------------------------------------------------------
def _windows(x, kh, kw, stride, dilation):
    """(N, C, OH, OW, kh, kw) view of all sliding windows of an NCHW array (already padded)."""
    (sh, sw), (dh, dw) = stride, dilation
    eff_h, eff_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    win = sliding_window_view(x, (eff_h, eff_w), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw]


def conv2d(x, w, bias=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """im2col + one matmul per group."""
    n, c, _, _ = x.shape
    o, cg, kh, kw = w.shape
    pt, pb, pl, pr = padding
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    win = _windows(xp, kh, kw, stride, dilation)
    oh, ow = win.shape[2], win.shape[3]
    og = o // groups
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    out = np.empty((n, o, oh, ow), acc)
    for g in range(groups):
        cols = win[:, g * cg:(g + 1) * cg].transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, cg * kh * kw)
        wg = w[g * og:(g + 1) * og].reshape(og, cg * kh * kw)
        res = cols.astype(acc, copy=False) @ wg.T.astype(acc, copy=False)
        out[:, g * og:(g + 1) * og] = res.reshape(n, oh, ow, og).transpose(0, 3, 1, 2)
    if bias is not None:
        out += bias.astype(acc).reshape(1, o, 1, 1)
    return out.astype(x.dtype, copy=False)


def _pool_pad(x, kernel, stride, padding, ceil_mode, value):
    pt, pb, pl, pr = padding
    if ceil_mode:  # extra room at the end so the last, partial window exists
        for axis, (k, s, lo, hi) in enumerate(((kernel[0], stride[0], pt, pb), (kernel[1], stride[1], pl, pr))):
            size = x.shape[2 + axis] + lo + hi
            extra = (-(size - k) % s) if size >= k else 0
            if axis == 0:
                pb += extra
            else:
                pr += extra
    return np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=value), (pt, pb, pl, pr)


def max_pool2d(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False):
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp, _ = _pool_pad(x, kernel_size, stride, padding, ceil_mode, low)
    return np.ascontiguousarray(_windows(xp, *kernel_size, stride, (1, 1)).max(axis=(4, 5)))


def avg_pool2d(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False, exclusive=True):
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    xp, pads = _pool_pad(x.astype(acc, copy=False), kernel_size, stride, padding, ceil_mode, 0)
    sums = _windows(xp, *kernel_size, stride, (1, 1)).sum(axis=(4, 5))
    if exclusive:  # divide by the number of real (unpadded) elements in each window
        ones = np.pad(np.ones((1, 1) + x.shape[2:], acc), ((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])))
        counts = _windows(ones, *kernel_size, stride, (1, 1)).sum(axis=(4, 5))
    else:
        counts = kernel_size[0] * kernel_size[1]
    return (sums / counts).astype(x.dtype)


def _adaptive(x, output_size, reducer):
    n, c, h, w = x.shape
    oh, ow = output_size
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    out = np.empty((n, c, oh, ow), acc)
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            out[:, :, i, j] = reducer(x[:, :, h0:h1, w0:w1].astype(acc, copy=False), axis=(2, 3))
    return out.astype(x.dtype)


def adaptive_avg_pool2d(x, output_size=(1, 1)):
    return _adaptive(x, output_size, np.mean)


def adaptive_max_pool2d(x, output_size=(1, 1)):
    return _adaptive(x, output_size, np.max)


# --- data movement -------------------------------------------------------------------------------------------
def reshape(x, shape):
    return x.reshape(shape)


def transpose(x, perm):
    return np.ascontiguousarray(np.transpose(x, perm))


def concat(*xs, axis=0):
    return np.concatenate(xs, axis=axis)


def split(x, sections, axis=0):
    bounds = np.cumsum(sections)[:-1]
    return [np.ascontiguousarray(p) for p in np.split(x, bounds, axis=axis)]


def slice(x, axes, starts, ends, steps):  # noqa: A001  the op's name
    index = [np.s_[:]] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a] = np.s_[s:e:st]
    return np.ascontiguousarray(x[tuple(index)])


def gather(x, index, axis=0):
    return np.take(x, index, axis=axis)


def expand(x, shape):
    return np.ascontiguousarray(np.broadcast_to(x, shape))


def pad(x, pads, mode="constant", value=0.0):
    width = [(int(a), int(b)) for a, b in pads]
    np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    if np_mode == "constant":
        return np.pad(x, width, mode="constant", constant_values=np.asarray(value).astype(x.dtype))
    return np.pad(x, width, mode=np_mode)


KERNELS: dict = {}
KERNELS.update({k: (_quietly(v) if k in _NOISY else v) for k, v in UNARY.items()})
KERNELS.update({k: (_quietly(v) if k in _NOISY else v) for k, v in BINARY.items()})
KERNELS.update({
    "where": where, "cast": cast, "clip": clip,
    "sum": _reduction(np.sum), "prod": _reduction(np.prod), "max": _reduction(np.max), "min": _reduction(np.min),
    "mean": mean, "argmax": argmax, "argmin": argmin,
    "matmul": matmul, "softmax": _quietly(softmax), "log_softmax": _quietly(log_softmax),
    "layer_norm": _quietly(layer_norm), "batch_norm": _quietly(batch_norm),
    "conv2d": conv2d, "max_pool2d": max_pool2d, "avg_pool2d": _quietly(avg_pool2d),
    "adaptive_avg_pool2d": adaptive_avg_pool2d, "adaptive_max_pool2d": adaptive_max_pool2d,
    "reshape": reshape, "transpose": transpose, "concat": concat, "split": split, "slice": slice,
    "gather": gather, "expand": expand, "pad": pad,
})
