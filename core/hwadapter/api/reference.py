"""numpy reference kernels: the semantics of every op, and the CPU plugin's kernels.

Each kernel is `fn(*arrays, **attrs) -> array | list[array]`; the frontend has already validated
shapes, promoted dtypes (binary ops see equal dtypes) and normalised attributes.

The binary elementwise kernels (BINARY) are bare numpy ufuncs, for speed: for 0-d inputs they return a
numpy scalar, which the dispatcher turns into a 0-d array.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import meta
from .errors import InvalidArgumentError
from .shapes import pool_out
from .shapes import residual as _residual_shape

_ndarray = np.ndarray



def _contiguous(a) -> np.ndarray:
    """a as a C-contiguous array, 0-d staying 0-d (np.ascontiguousarray makes a 0-d array 1-d)."""
    return np.asarray(a, order="C")

def _quiet():
    return np.errstate(all="ignore")  # inf/nan results are the semantics, not a warning (one per call: not reentrant)


def _kernel(fn, quiet=False):
    """fn as a kernel that always returns arrays (numpy ufuncs return scalars for 0-d inputs)."""
    if quiet:
        def kernel(*args, **kwargs):
            with _quiet():
                out = fn(*args, **kwargs)
            return out if out.__class__ is _ndarray or isinstance(out, list) else np.asarray(out)
    else:
        def kernel(*args, **kwargs):
            out = fn(*args, **kwargs)
            return out if out.__class__ is _ndarray or isinstance(out, list) else np.asarray(out)
    kernel.__name__ = kernel.__qualname__ = getattr(fn, "__name__", "kernel")
    kernel.__doc__ = getattr(fn, "__doc__", None)
    # a ufunc writes into out= and returns it, and so does this wrapper: the graph executor may run it in place
    kernel.writes_out = isinstance(fn, np.ufunc)
    return kernel


def _quietly(fn):
    return _kernel(fn, quiet=True)


def _in_float32(fn):
    """float16 is computed in float32 and rounded once at the end."""
    def kernel(x, *args, **kwargs):
        if x.dtype == np.float16:
            return np.asarray(fn(x.astype(np.float32), *args, **kwargs)).astype(np.float16)
        return fn(x, *args, **kwargs)
    kernel.__name__ = fn.__name__
    return kernel


# --- elementwise -------------------------------------------------------------------------------------
_SQRT_PI = math.sqrt(math.pi)
_SERIES_BELOW = 1.5  # |x| below this: Maclaurin series of erf; above: continued fraction of erfc


def _erf_erfc(x):
    """(erf(x), erfc(x)) in float64, each to a few ulp (no cancellation in erfc for large x, nor in erf near 0)."""
    x = np.asarray(x, np.float64)
    erf, erfc = np.empty_like(x), np.empty_like(x)
    ax = np.abs(x)
    small = ax < _SERIES_BELOW
    with _quiet():
        xs = x[small]
        if xs.size:  # 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)); converges to 1 ulp within 40 terms
            x2 = xs * xs
            term = xs.copy()
            total = xs.copy()
            for n in range(1, 40):
                term *= -x2 / n
                total += term / (2 * n + 1)
            total *= 2.0 / _SQRT_PI
            total = np.copysign(total, xs)  # erf is odd: erf(-0.0) is -0.0 (C, math.erf), not -0.0 + 0.0
            erf[small] = total
            erfc[small] = 1.0 - total
        big = ~small  # nan lands here and stays nan
        xb = ax[big]
        if xb.size:  # erfc(x) = exp(-x^2) / sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))), from the tail
            f = xb.copy()
            for k in range(80, 0, -1):
                f = xb + (k / 2.0) / f
            tail = np.exp(-xb * xb) / (_SQRT_PI * f)
            tail[np.isinf(xb)] = 0.0
            neg = x[big] < 0
            erf[big] = np.where(neg, tail - 1.0, 1.0 - tail)
            erfc[big] = np.where(neg, 2.0 - tail, tail)
    return erf, erfc


def erf(x):
    """The error function, computed in float64 and rounded once to x's dtype."""
    return _erf_erfc(x)[0].astype(x.dtype)


def gelu(x, approximate=False):
    """x * Phi(x), in float64 rounded once: x/2 * erfc(-x / sqrt 2) (exact), or the tanh approximation written as
    x / (1 + e^(-2u)) (== x/2 * (1 + tanh u), without the cancellation of 1 + tanh u for negative x).

    Both tend to -0.0 as x goes to -inf (x * Phi(x) is negative there), which is their value at -inf, not -inf * 0."""
    x64 = np.asarray(x, np.float64)
    with _quiet():
        if approximate:
            inner = math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 * x64 * x64)
            out = x64 / (1.0 + np.exp(-2.0 * inner))
        else:
            out = 0.5 * x64 * _erf_erfc(-x64 / math.sqrt(2.0))[1]
    return np.where(x64 == -np.inf, -0.0, out).astype(x.dtype)


def sigmoid(x):
    """1 / (1 + e^-x) in the form that neither overflows nor cancels: e^-|x| is in (0, 1]."""
    xf = x.astype(np.float32) if x.dtype == np.float16 else x
    e = np.exp(-np.abs(xf))
    out = np.where(xf >= 0, 1 / (1 + e), e / (1 + e))
    return out.astype(x.dtype, copy=False)


def rsqrt(x):
    return 1 / np.sqrt(x)


def reciprocal(x):
    return 1 / x


def relu(x):
    return np.maximum(x, 0)


def power(x, y):
    """x ** y; for integers a negative exponent gives 1 / x**|y| truncated toward zero (1, -1 or 0), as C does."""
    if x.dtype.kind == "f":
        return _ieee_pow(x, y)
    if x.dtype.kind != "i":
        return np.power(x, y)
    negative = y < 0
    if not negative.any():
        return np.power(x, y)
    out = np.power(x, np.where(negative, 0, y))  # x ** 0 == 1 where y < 0, filled in below
    one_over = np.where(x == 1, 1, np.where(x == -1, np.where(y % 2 == 0, 1, -1), 0)).astype(x.dtype)
    return np.where(negative, one_over, out)


def _ieee_pow(x, y):
    """IEEE 754's pow, which C and every device compute: numpy takes x ** 0.5 for sqrt when the exponent is one
    number for a whole row (a scalar or broadcast y), so that sqrt(-inf) = nan and sqrt(-0) = -0 would make the result
    depend on y's shape; pow(-inf, 0.5) is +inf and pow(-0, 0.5) is +0."""
    out = np.power(x, y)
    half = np.asarray(y) == 0.5
    if half.any():
        out = np.where(half & ((x == -np.inf) | (x == 0)), np.abs(x), out).astype(out.dtype, copy=False)
    return out


UNARY = {
    "abs": np.abs, "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": rsqrt,
    "reciprocal": reciprocal, "sigmoid": sigmoid, "tanh": np.tanh, "relu": relu, "gelu": gelu, "erf": erf,
    "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil, "round": np.rint, "sign": np.sign,
    "logical_not": np.logical_not,
}
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": power,
    "maximum": np.maximum, "minimum": np.minimum, "mod": np.mod,
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}
# Ops that can produce inf/nan or divide by zero run with numpy's warnings off.
_NOISY = {"log", "sqrt", "rsqrt", "reciprocal", "div", "pow", "mod", "exp", "sigmoid", "tanh", "sin", "cos"}


def where(cond, x, y):
    return np.where(cond, x, y)


def cast(x, dtype):
    with _quiet():
        return x.astype(dtype)


def clip(x, min=None, max=None):
    """Bounds are already clamped to x's dtype by the frontend; nan stays nan."""
    if min is None and max is None:
        return x.copy()
    return np.asarray(np.clip(x, min, max)).astype(x.dtype, copy=False)


# --- reductions ------------------------------------------------------------------------------------
def _reduction(np_fn, accumulate=False):
    def kernel(x, axis, keepdim=False):
        if accumulate and x.dtype == np.float16:  # float16 partial sums lose integers above 2048
            return np.asarray(np_fn(x, axis=axis, keepdims=keepdim, dtype=np.float32)).astype(np.float16)
        if accumulate and x.dtype.kind in "biu":  # numpy would widen bool and small integers to int64: keep the dtype
            return np.asarray(np_fn(x, axis=axis, keepdims=keepdim, dtype=x.dtype))
        return np.asarray(np_fn(x, axis=axis, keepdims=keepdim))
    kernel.__name__ = np_fn.__name__
    return kernel


def mean(x, axis, keepdim=False):
    """The mean of nothing is nan (0 / 0, quietly: np.mean would warn)."""
    acc = np.dtype(np.float32) if x.dtype == np.float16 else x.dtype
    axes = range(x.ndim) if axis is None else ((axis,) if isinstance(axis, int) else axis)
    count = math.prod(x.shape[a] for a in axes)
    with _quiet():
        total = np.asarray(np.sum(x, axis=axis, keepdims=keepdim, dtype=acc))
        return (total / acc.type(count) if count else total * acc.type(np.nan)).astype(x.dtype, copy=False)


def argmax(x, axis=None, keepdim=False):
    return np.asarray(np.argmax(x, axis=axis, keepdims=keepdim), dtype=np.int64)


def argmin(x, axis=None, keepdim=False):
    return np.asarray(np.argmin(x, axis=axis, keepdims=keepdim), dtype=np.int64)


# --- linear algebra and normalisation ------------------------------------------------------------------------
def old_positional(bias, transpose_x, transpose_y):
    """(bias, transpose_x, transpose_y) of a matmul kernel call: a bool third argument is the transposes of the form
    before the fused bias, matmul(x, y, transpose_x, transpose_y), which plugins written against it still call."""
    if isinstance(bias, (bool, np.bool_)):
        return None, bool(bias), bool(transpose_x)
    return bias, transpose_x, transpose_y


def matmul(x, y, bias=None, transpose_x=False, transpose_y=False, activation=None):
    """x @ y; graph fusion may add a `bias` (the output's last dimension) and an `activation` (CONV_ACTIVATIONS),
    applied as the unfused add and activation would (a linear layer's epilogue)."""
    bias, transpose_x, transpose_y = old_positional(bias, transpose_x, transpose_y)
    if transpose_x and x.ndim >= 2:
        x = np.swapaxes(x, -1, -2)
    if transpose_y and y.ndim >= 2:
        y = np.swapaxes(y, -1, -2)
    out = np.asarray(np.matmul(x, y), order="C")  # ascontiguousarray would make a 0-d result 1-d
    if bias is not None:
        out = out + bias
    return out if activation is None else _CONV_EPILOGUE[activation](out)


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


def conv2d(x, w, bias=None, residual=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
           activation=None):
    """im2col + one matmul per group; a fused `residual` (the output's shape) is added after the bias, then the
    fused `activation` (CONV_ACTIVATIONS) applies."""
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
    if residual is not None:
        _residual_shape(residual.shape, out.shape)
        out += residual.astype(acc, copy=False)
    if activation is not None:  # on the accumulator, before rounding to x's dtype, as the device kernels do
        out = _CONV_EPILOGUE[activation](out)
    return out.astype(x.dtype, copy=False)


#: The activations conv2d applies as an epilogue (attribute "activation"); a device's conv2d kernel declares the
#: ones it takes as its `epilogues` attribute (graph fusion asks for it before emitting one).
CONV_ACTIVATIONS = frozenset({"relu", "sigmoid", "tanh", "gelu", "relu6", "silu"})


def conv_epilogue(activation: str):
    """The function applying conv2d's fused `activation` (a CONV_ACTIVATIONS member) to an array."""
    return _CONV_EPILOGUE[activation]


def _pool_pad(x, kernel, stride, padding, ceil_mode, value):
    pt, pb, pl, pr = padding
    if ceil_mode:  # room at the end for the last, partial window (or less room, when it is dropped)
        oh = pool_out(x.shape[2], kernel[0], stride[0], pt, pb, True)
        ow = pool_out(x.shape[3], kernel[1], stride[1], pl, pr, True)
        pb = (oh - 1) * stride[0] + kernel[0] - x.shape[2] - pt
        pr = (ow - 1) * stride[1] + kernel[1] - x.shape[3] - pl
    xp = np.pad(x, ((0, 0), (0, 0), (pt, max(pb, 0)), (pl, max(pr, 0))), constant_values=value)
    return xp[:, :, :xp.shape[2] + min(pb, 0) or None, :xp.shape[3] + min(pr, 0) or None], (pt, pb, pl, pr)


def max_pool2d(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False):
    low = -np.inf if x.dtype.kind == "f" else (False if x.dtype == np.bool_ else np.iinfo(x.dtype).min)
    xp, _ = _pool_pad(x, kernel_size, stride, padding, ceil_mode, low)
    return _contiguous(_windows(xp, *kernel_size, stride, (1, 1)).max(axis=(4, 5)))


def avg_pool2d(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False, exclusive=True):
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    xp, pads = _pool_pad(x.astype(acc, copy=False), kernel_size, stride, padding, ceil_mode, 0)
    sums = _windows(xp, *kernel_size, stride, (1, 1)).sum(axis=(4, 5))
    if exclusive:  # divide by the number of real (unpadded) elements in each window
        ones, _ = _pool_pad(np.ones((1, 1) + x.shape[2:], acc), kernel_size, stride, padding, ceil_mode, 0)
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


# --- gradients of pooling (training) -------------------------------------------------------------------------
def max_pool2d_grad(x, grad, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False):
    """The gradient of max_pool2d with respect to x: each window's grad goes to its first maximal element in
    row-major window order (PyTorch's choice: a window of equal values, e.g. zeros after relu, gives it all to one
    element; NaN counts as the largest, the first NaN wins); padding never wins; overlapping windows add up (in
    float64, rounded once to x's dtype)."""
    n, c, h, w = x.shape
    if not (x.size and grad.size):
        return np.zeros_like(x)
    (kh, kw), (sh, sw), (pt, _, pl, _) = kernel_size, stride, padding
    xp, _ = _pool_pad(x, kernel_size, stride, padding, ceil_mode, -np.inf)
    win = _windows(xp, kh, kw, stride, (1, 1))
    oh, ow = win.shape[2], win.shape[3]
    first = np.argmax(win.reshape(n, c, oh, ow, kh * kw), axis=-1)  # numpy's argmax: the first max, the first NaN
    top = (np.arange(oh) * sh - pt)[:, None]  # each window's first row and column in x (before padding)
    left = (np.arange(ow) * sw - pl)[None, :]
    rows, cols = top + first // kw, left + first % kw
    # -inf padding comes first only in a window whose elements are all -inf: the first of them is its maximum
    padded = (rows < 0) | (rows >= h) | (cols < 0) | (cols >= w)
    rows = np.where(padded, np.maximum(top, 0), rows)
    cols = np.where(padded, np.maximum(left, 0), cols)
    at = (np.arange(n * c).reshape(n, c, 1, 1) * h + rows) * w + cols
    total = np.bincount(at.ravel(), weights=grad.astype(np.float64).ravel(), minlength=x.size)
    return total.reshape(x.shape).astype(x.dtype)


def adaptive_max_pool2d_grad(x, grad, output_size=(1, 1)):
    """The gradient of adaptive_max_pool2d with respect to x: max_pool2d_grad's rule over adaptive_max_pool2d's
    windows (`_adaptive`), one vectorised step per output position."""
    n, c, h, w = x.shape
    oh, ow = output_size
    planes = np.arange(n * c)
    xs, gs = x.reshape(n * c, h, w), grad.reshape(n * c, oh, ow).astype(np.float64)
    total = np.zeros((n * c, h, w), np.float64)
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            first = np.argmax(xs[:, h0:h1, w0:w1].reshape(n * c, -1), axis=1)
            total[planes, h0 + first // (w1 - w0), w0 + first % (w1 - w0)] += gs[:, i, j]  # one element per plane
    return total.reshape(x.shape).astype(x.dtype)


# --- fused optimizer updates (training) -----------------------------------------------------------------------
# One kernel per parameter: state tensors of param's shape, scalars that change between steps (the learning rate,
# the powers of beta) as one-element tensors of param's dtype, fixed hyper-parameters as attributes. float16 is
# computed in float32 and rounded once; the order of operations is the kernel-primitive programs' (hwadapter_kp's
# library), so that devices agree with this to the last bits their libm allows.
def _compute(param):
    return np.dtype(np.float32) if param.dtype == np.float16 else param.dtype


def _number(a, dtype):
    """A one-element tensor (0-d or shape (1,)) as a 0-d array of `dtype`."""
    return a.reshape(()).astype(dtype)


def _result(value, dtype):
    return _contiguous(np.asarray(value).astype(dtype, copy=False))


def sgd_update(param, grad, lr, weight_decay=0.0):
    """param - lr * (grad + weight_decay * param)."""
    cd = _compute(param)
    p, g = param.astype(cd, copy=False), grad.astype(cd, copy=False)
    if weight_decay:
        g = g + cd.type(weight_decay) * p
    return _result(p - _number(lr, cd) * g, param.dtype)


def momentum_update(param, grad, velocity, lr, momentum=0.9, use_nesterov=False, weight_decay=0.0):
    """[param_new, velocity_new], Paddle's Momentum: g = grad + weight_decay * param; v = momentum * v + g; param -
    lr * (g + momentum * v) with Nesterov, else param - lr * v."""
    cd = _compute(param)
    p, g, v = (a.astype(cd, copy=False) for a in (param, grad, velocity))
    mu = cd.type(momentum)
    if weight_decay:
        g = g + cd.type(weight_decay) * p
    v = mu * v + g
    step = g + mu * v if use_nesterov else v
    return [_result(p - _number(lr, cd) * step, param.dtype), _result(v, param.dtype)]


def adam_update(param, grad, m, v, lr, beta1_pow, beta2_pow, beta1=0.9, beta2=0.999, epsilon=1e-8,
                weight_decay=0.0, decoupled=False):
    """[param_new, m_new, v_new], PyTorch's and Paddle's Adam at step t, beta1_pow = beta1**t and beta2_pow =
    beta2**t: g = grad (+ weight_decay * param unless decoupled: L2); m = beta1 m + (1 - beta1) g; v = beta2 v +
    (1 - beta2) g g; param - lr * m / (1 - beta1_pow) / (sqrt(v / (1 - beta2_pow)) + epsilon), the param first
    scaled by 1 - lr * weight_decay when decoupled (AdamW)."""
    cd = _compute(param)
    p, g, m0, v0 = (a.astype(cd, copy=False) for a in (param, grad, m, v))
    rate, one = _number(lr, cd), cd.type(1)
    if weight_decay and not decoupled:
        g = g + cd.type(weight_decay) * p
    m1 = cd.type(beta1) * m0 + cd.type(1 - beta1) * g
    v1 = cd.type(beta2) * v0 + cd.type(1 - beta2) * g * g
    m_hat = m1 / (one - _number(beta1_pow, cd))
    v_hat = v1 / (one - _number(beta2_pow, cd))
    if weight_decay and decoupled:
        p = p * (one - rate * cd.type(weight_decay))
    p = p - rate * m_hat / (np.sqrt(v_hat) + cd.type(epsilon))
    return [_result(p, param.dtype), _result(m1, param.dtype), _result(v1, param.dtype)]


def _validating(op: str, fn):
    """fn, run after op's rule (hwadapter.api.meta) has checked its inputs and attributes: these ops have no
    frontend function to do it (the autograd engine and the optimizers dispatch them)."""
    rule = meta.RULES[op]

    def kernel(*arrays, **attrs):
        rule(tuple(a.shape for a in arrays), tuple(a.dtype for a in arrays), attrs)
        return fn(*arrays, **attrs)
    kernel.__name__ = kernel.__qualname__ = fn.__name__
    kernel.__doc__ = fn.__doc__
    return kernel


#: The ops training adds: gradients the op set lacked, and fused optimizer updates.
TRAINING = {"max_pool2d_grad": max_pool2d_grad, "adaptive_max_pool2d_grad": adaptive_max_pool2d_grad,
            "sgd_update": sgd_update, "momentum_update": momentum_update, "adam_update": adam_update}


# --- data movement -------------------------------------------------------------------------------------------
def reshape(x, shape):
    return x.reshape(shape)


def transpose(x, perm):
    return _contiguous(np.transpose(x, perm))


def concat(*xs, axis=0):
    return np.concatenate(xs, axis=axis)


def split(x, sections, axis=0):
    bounds = np.cumsum(sections)[:-1]
    return [_contiguous(p) for p in np.split(x, bounds, axis=axis)]


def slice_positions(start, end, step):
    """The Python slice selecting range(start, end, step): bounds are positions, as the OpenCL plan reads them too
    (end None: through the edge).

    Both the frontend's normalised bounds and slice.indices() results are positions, where a negative-step start or
    end of -1 means "before position 0"; a Python slice would read -1 as the last element, so it is never passed on.
    """
    span = range(start, -1 if end is None else end, step)
    if not span:
        return np.s_[0:0]
    stop = span[-1] + step
    return np.s_[span[0]:(stop if stop >= 0 else None):step]


def slice(x, axes, starts, ends, steps):  # noqa: A001  the op's name
    index = [np.s_[:]] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a] = slice_positions(s, e, st)
    return _contiguous(x[tuple(index)])


#: What to do about an index out of range (the kernels check every index: none reads outside its input).
INDEX_FIX = "pass indices within the axis (negative ones count from its end), e.g. clip them to that range"


def gather(x, index, axis=0):
    n = x.shape[axis]
    if index.size and (index.max() >= n or index.min() < -n):
        bad = index.max() if index.max() >= n else index.min()
        raise InvalidArgumentError(f"gather: index {int(bad)} is out of range for axis {axis} of size {n} "
                                   f"(valid: {-n}..{n - 1}). Fix: {INDEX_FIX}")
    return np.take(x, index, axis=axis)


def expand(x, shape):
    return _contiguous(np.broadcast_to(x, shape))


def pad(x, pads, mode="constant", value=0.0):
    if x.ndim == 0:
        return x.copy()
    width = [(int(a), int(b)) for a, b in pads]
    np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    if np_mode == "constant":
        return np.pad(x, width, mode="constant", constant_values=np.asarray(value).astype(x.dtype))
    return np.pad(x, width, mode=np_mode)


KERNELS: dict = {}
KERNELS.update({k: _kernel(v, quiet=k in _NOISY) for k, v in UNARY.items()})
# The hot path: bare ufuncs, without a wrapper's Python frame (the noisy ones need one to silence numpy).
KERNELS.update({k: (_quietly(v) if k in _NOISY else v) for k, v in BINARY.items()})
KERNELS.update({k: _kernel(v) for k, v in {
    "where": where, "cast": cast, "clip": clip,
    "sum": _reduction(np.sum, accumulate=True), "prod": _reduction(np.prod, accumulate=True),
    "max": _reduction(np.max), "min": _reduction(np.min),
    "mean": mean, "argmax": argmax, "argmin": argmin,
    "matmul": matmul, "conv2d": conv2d, "max_pool2d": max_pool2d,
    "adaptive_avg_pool2d": adaptive_avg_pool2d, "adaptive_max_pool2d": adaptive_max_pool2d,
    "reshape": reshape, "transpose": transpose, "concat": concat, "split": split, "slice": slice,
    "gather": gather, "expand": expand, "pad": pad,
}.items()})


def _relu6(x):
    """clip(x, 0, 6): a conv2d epilogue (MobileNet's ReLU6); nan stays nan."""
    return clip(x, 0.0, 6.0)


def _silu(x):
    """x * sigmoid(x), each rounded as the unfused mul and sigmoid round: a conv2d epilogue (SiLU, swish)."""
    return x * sigmoid(x)


_CONV_EPILOGUE = {"relu": relu, "sigmoid": sigmoid, "tanh": np.tanh, "gelu": gelu, "relu6": _relu6, "silu": _silu}
KERNELS.update({k: _quietly(v) for k, v in {
    "softmax": softmax, "log_softmax": log_softmax, "layer_norm": layer_norm, "batch_norm": batch_norm,
    "avg_pool2d": avg_pool2d,
}.items()})
KERNELS["conv2d"].epilogues = CONV_ACTIVATIONS  # the CPU plugin registers this very function
KERNELS["conv2d"].residual = True  # it takes a fused residual input too
KERNELS["matmul"].epilogues = CONV_ACTIVATIONS  # and matmul a fused bias and activation (a linear layer)


# --- more math, bitwise, ordering, scans, index movement (the ONNX import's primitives) -----------------------------
UNARY_MATH = {"tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
              "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh}
BITWISE = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}


def bitwise_not(x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def left_shift(x, y):
    """x << y in x's dtype (bits shifted out are lost; a shift by the width or more is 0)."""
    return np.left_shift(x, y).astype(x.dtype, copy=False)


def right_shift(x, y):
    """x >> y: logical for unsigned dtypes, arithmetic (sign-filling) for signed ones."""
    return np.right_shift(x, y).astype(x.dtype, copy=False)


def topk(x, k, axis=-1, largest=True, sorted=True):  # noqa: A002  ONNX's name
    """[the k largest (smallest) values along axis, their int64 indices]; equal values: the lower index first.
    The result is always in order (sorted=False allows any order, so this one too)."""
    axis = axis % x.ndim
    n = x.shape[axis]
    if largest:  # a stable ascending sort of the reversed axis, read backwards: descending, ties by lower index
        order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        order = (n - 1) - np.flip(order, axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    index = _contiguous(np.take(order, np.arange(k), axis=axis)).astype(np.int64)
    return [_contiguous(np.take_along_axis(x, index, axis=axis)), index]


def _scan(ufunc, identity):
    def kernel(x, axis=0, exclusive=False, reverse=False):
        axis = axis % x.ndim if x.ndim else 0
        if x.ndim == 0:
            return (np.full((), identity, x.dtype) if exclusive else x.copy())
        if x.shape[axis] == 0:
            return x.copy()
        acc = np.float32 if x.dtype == np.float16 else x.dtype  # float16 running totals in float32, rounded once
        xs = np.flip(x, axis) if reverse else x
        out = ufunc.accumulate(xs.astype(acc, copy=False), axis=axis, dtype=acc)
        if exclusive:  # each element's result leaves itself out: shift by one, the identity first
            first = np.full(x.shape[:axis] + (1,) + x.shape[axis + 1:], identity, acc)
            out = np.concatenate([first, np.take(out, np.arange(x.shape[axis] - 1), axis=axis)], axis=axis)
        if reverse:
            out = np.flip(out, axis)
        return _contiguous(out).astype(x.dtype, copy=False)
    kernel.__name__ = f"cum{ufunc.__name__}"
    return kernel


cumsum = _scan(np.add, 0)
cumprod = _scan(np.multiply, 1)


def _checked_index(op, index, n, axis):
    """index with negative entries wrapped (index + n); out-of-range entries are an error naming op and axis."""
    if index.size and (index.max() >= n or index.min() < -n):
        bad = index.max() if index.max() >= n else index.min()
        raise InvalidArgumentError(f"{op}: index {int(bad)} is out of range for axis {axis} of size {n} "
                                   f"(valid: {-n}..{n - 1}). Fix: {INDEX_FIX}")
    return np.where(index < 0, index + n, index)


def _element_positions(op, x, indices, axis):
    """The full index tuple that addresses x at `indices` along axis and at the indices' own position elsewhere."""
    axis = axis % x.ndim
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = _checked_index(op, indices, x.shape[axis], axis)
    return tuple(grid)


def gather_elements(x, indices, axis=0):
    """out[i, j, ...] = x[..., indices[i, j, ...] (along axis), ...] (ONNX GatherElements, torch.gather)."""
    return _contiguous(x[_element_positions("gather_elements", x, indices, axis)])


_SCATTER = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(op, x, where, updates, reduction):
    out = x.copy()
    if reduction == "none":  # repeated indices: the last update wins (ONNX leaves it undefined)
        out[where] = updates
    else:
        _SCATTER[reduction].at(out, where, updates)
    return out


def scatter_elements(x, indices, updates, axis=0, reduction="none"):
    """x with updates written (or combined by `reduction`) where gather_elements would read them."""
    return _scatter("scatter_elements", x, _element_positions("scatter_elements", x, indices, axis), updates,
                    reduction)


def _nd_positions(op, shape, indices):
    """The index tuple of indices (..., m) into the first m axes of `shape`, negative entries wrapped."""
    m = indices.shape[-1]
    return tuple(_checked_index(op, indices[..., a], shape[a], a) for a in range(m))


def gather_nd(x, indices, batch_dims=0):
    """ONNX GatherND: slices of x picked by the last axis of indices, after `batch_dims` shared leading axes."""
    b = batch_dims
    m = indices.shape[-1]
    shape = indices.shape[:-1] + x.shape[b + m:]
    if math.prod(indices.shape[:-1]) == 0:
        return np.zeros(shape, x.dtype)
    batch = math.prod(x.shape[:b])
    xb = x.reshape((batch,) + x.shape[b:])
    ib = indices.reshape((batch, -1, m))
    where = _nd_positions("gather_nd", xb.shape[1:], ib)
    out = xb[(np.arange(batch)[:, None],) + where]  # (batch, picks) + the rest of x's axes
    return _contiguous(out.reshape(shape))


def scatter_nd(x, indices, updates, reduction="none"):
    """ONNX ScatterND: x with updates written (or combined by `reduction`) at the slices indices address."""
    return _scatter("scatter_nd", x, _nd_positions("scatter_nd", x.shape, indices), updates, reduction)


# --- transposed convolution, local response normalisation, resize -------------------------------------------------
def conv_transpose2d(x, w, bias=None, stride=(1, 1), padding=(0, 0, 0, 0), output_padding=(0, 0), dilation=(1, 1),
                     groups=1):
    """The gradient of conv2d with respect to its input: every input pixel adds w (times it) into the output at
    stride steps; w is (C_in, C_out / groups, kh, kw). The full result is cropped by padding (top, bottom, left,
    right) and extended by output_padding (zeros past the full result) at the bottom and right."""
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    pt, pb, pl, pr = padding
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    full_h, full_w = (h - 1) * sh + (kh - 1) * dh + 1, (wd - 1) * sw + (kw - 1) * dw + 1
    oh, ow = full_h - pt - pb + output_padding[0], full_w - pl - pr + output_padding[1]
    full = np.zeros((n, og * groups, max(full_h, pt + oh), max(full_w, pl + ow)), acc)
    cg = c // groups
    xa, wa = x.astype(acc, copy=False), w.astype(acc, copy=False)
    for g in range(groups):
        xg, wg = xa[:, g * cg:(g + 1) * cg], wa[g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("nchw,co->nohw", xg, wg[:, :, i, j])
                full[:, g * og:(g + 1) * og, i * dh:i * dh + (h - 1) * sh + 1:sh,
                     j * dw:j * dw + (wd - 1) * sw + 1:sw] += contrib
    out = full[:, :, pt:pt + oh, pl:pl + ow]
    if bias is not None:
        out = out + bias.astype(acc).reshape(1, -1, 1, 1)
    return _contiguous(out).astype(x.dtype, copy=False)


def lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """ONNX LRN over axis 1: x / (bias + alpha / size * the sum of squares of `size` neighbouring channels) ** beta,
    the window from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2)."""
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    xf = x.astype(acc, copy=False)
    c = x.shape[1]
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    sq = np.square(xf)
    padded = np.pad(sq, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    total = sum(padded[:, k:k + c] for k in range(size))
    return (xf / (bias + alpha / size * total) ** beta).astype(x.dtype, copy=False)


def _source_coords(mode, out_len, in_len, scale, roi):
    """Where each output position along one axis samples the input (ONNX Resize's coordinate_transformation_mode),
    and which positions lie outside it (only tf_crop_and_resize extrapolates; else None)."""
    y = np.arange(out_len, dtype=np.float64)
    length = scale * in_len  # ONNX's length_resized: the scaled input length, not the rounded output length
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if mode == "half_pixel_symmetric":  # the centre of the input maps to the centre of the output
        offset = in_len / 2 * (1 - out_len / length)
        return offset + (y + 0.5) / scale - 0.5, None
    if mode == "pytorch_half_pixel":
        return (np.full(out_len, -0.5) if length == 1 else (y + 0.5) / scale - 0.5), None
    if mode == "align_corners":
        return (np.zeros(out_len) if length == 1 else y * (in_len - 1) / (length - 1)), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "tf_half_pixel_for_nn":  # opset 11-12
        return (y + 0.5) / scale, None
    start, end = roi  # tf_crop_and_resize: sample the roi box of the input (as fractions of in_len - 1)
    if length == 1:
        src = np.full(out_len, (end - start) * (in_len - 1) / 2)
    else:
        src = y * (end - start) * (in_len - 1) / (length - 1)
    src = src + start * (in_len - 1)
    return src, (src < 0) | (src > in_len - 1)


def _cubic(d, a):
    """Keys' cubic convolution kernel at distances d."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _resize_axis(x, axis, out_len, scale, roi, mode, coord_mode, nearest_mode, a, exclude_outside, extrapolation,
                 antialias):
    in_len = x.shape[axis]
    if out_len == 0 or in_len == 0:
        shape = list(x.shape)
        shape[axis] = out_len
        return np.zeros(shape, x.dtype)
    src, outside = _source_coords(coord_mode, out_len, in_len, scale, roi)
    left = np.floor(src).astype(np.int64)
    exact = src == left
    left = np.where(exact, left - 1, left)  # a whole coordinate takes the sample on its left, weight 1 on the right
    t = np.where(exact, 1.0, src - left)
    if mode == "nearest":
        up = {"round_prefer_floor": t > 0.5, "round_prefer_ceil": t >= 0.5, "floor": exact,
              "ceil": np.ones_like(exact)}[nearest_mode]
        pick = np.clip(np.where(exact | up, left + 1, left), 0, in_len - 1)
        out = np.take(x, pick, axis=axis)
    else:
        # the kernel (triangle or cubic) over the samples around each position; antialias widens it by 1 / scale
        # when shrinking (the samples then weigh kernel(distance * scale), normalised to sum to 1)
        stretch = min(scale, 1.0) if antialias else 1.0
        reach = 1 if mode == "linear" else 2
        first = int(np.floor(-reach / stretch)) + 1 if antialias else 1 - reach  # taps relative to left + 1
        n = 2 - 2 * first
        taps = left[:, None] + first + np.arange(n)
        dist = (taps - src[:, None]) * stretch
        weights = np.clip(1 - np.abs(dist), 0, 1) if mode == "linear" else _cubic(dist, a)
        if antialias:
            weights = weights / weights.sum(axis=1, keepdims=True)
        if exclude_outside:  # samples past the edges weigh nothing; the rest are renormalised to sum to 1
            weights = np.where((taps < 0) | (taps >= in_len), 0.0, weights)
            total = weights.sum(axis=1, keepdims=True)
            weights = weights / np.where(total == 0, 1.0, total)
        samples = np.take(x, np.clip(taps, 0, in_len - 1), axis=axis)  # past the edges: the edge sample
        shape = (1,) * axis + weights.shape + (1,) * (x.ndim - axis - 1)
        out = (samples * weights.reshape(shape)).sum(axis=axis + 1)
    if outside is not None and outside.any():
        mask = outside.reshape((1,) * axis + (out_len,) + (1,) * (x.ndim - axis - 1))
        out = np.where(mask, np.asarray(extrapolation, out.dtype), out)
    return out


def resize(x, sizes, scales, mode="nearest", coordinate_transformation_mode="half_pixel",
           nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75, exclude_outside=False, extrapolation_value=0.0,
           roi=None, antialias=False):
    """ONNX Resize (opset 11+) over every axis, one axis after another: `sizes` is the output shape, `scales` the
    scale of each axis (output / input, or as the model gave it), `roi` (start..., end...) fractions of the input for
    tf_crop_and_resize, `antialias` (linear and cubic) low-pass filters when shrinking. Linear and cubic compute in
    float64 and round once to x's dtype."""
    out = x if mode == "nearest" or x.dtype == np.float64 else x.astype(np.float64)
    r = x.ndim
    for axis in range(r):
        box = (0.0, 1.0) if roi is None else (float(roi[axis]), float(roi[axis + r]))
        if math.isclose(scales[axis], 1.0) and sizes[axis] == x.shape[axis] and \
                math.isclose(box[0], 0.0) and math.isclose(box[1], 1.0):
            continue  # the identity along this axis (whatever the coordinate mode would say of it)
        with _quiet():
            out = _resize_axis(out, axis, int(sizes[axis]), float(scales[axis]), box, mode,
                               coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside,
                               extrapolation_value, antialias)
    return _contiguous(out).astype(x.dtype, copy=False)


KERNELS.update({k: _quietly(v) for k, v in UNARY_MATH.items()})
KERNELS.update({k: _kernel(v) for k, v in {**BITWISE, "bitwise_not": bitwise_not, "left_shift": left_shift,
                                           "right_shift": right_shift}.items()})
KERNELS.update({k: _kernel(v) for k, v in {
    "topk": topk, "gather_elements": gather_elements, "scatter_elements": scatter_elements,
    "gather_nd": gather_nd, "scatter_nd": scatter_nd, "resize": resize,
}.items()})
KERNELS.update({k: _quietly(v) for k, v in {
    "cumsum": cumsum, "cumprod": cumprod, "conv_transpose2d": conv_transpose2d, "lrn": lrn}.items()})
KERNELS.update({op: _quietly(_validating(op, fn)) for op, fn in TRAINING.items()})
