"""Independent numpy oracles for the op tests, and the tolerances they are compared with.

Written plainly (loops where that is clearest) and without looking at hwadapter.api.reference: a test
that compared the reference kernels with themselves would prove nothing.
"""
from __future__ import annotations

import math

import numpy as np

# --- tolerances -------------------------------------------------------------------------------------

TOL = {
    "float16": dict(rtol=2e-3, atol=2e-3),
    "float32": dict(rtol=2e-5, atol=1e-6),
    "float64": dict(rtol=1e-11, atol=1e-12),
}


def assert_close(actual, expected, dtype=None, rtol=None, atol=None, err_msg=""):
    """Equal dtype and shape; values exact for bool/int, within the dtype's tolerance for floats (nan == nan)."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if dtype is not None:
        assert actual.dtype == np.dtype(dtype), f"dtype {actual.dtype}, expected {np.dtype(dtype)} {err_msg}"
    assert actual.shape == expected.shape, f"shape {actual.shape}, expected {expected.shape} {err_msg}"
    if actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected, err_msg=err_msg)
        return
    tol = dict(TOL.get(actual.dtype.name, TOL["float64"]))
    if rtol is not None:
        tol["rtol"] = rtol
    if atol is not None:
        tol["atol"] = atol
    np.testing.assert_allclose(actual.astype(np.float64), np.asarray(expected, np.float64), equal_nan=True,
                               err_msg=err_msg, **tol)


# --- elementwise ---------------------------------------------------------------------------------------

def erf(x):
    """erf by math.erf, element by element, in float64."""
    flat = [math.erf(float(v)) for v in np.asarray(x, np.float64).ravel()]
    return np.array(flat, np.float64).reshape(np.shape(x))


def gelu(x, approximate=False):
    """x * Phi(x) = 0.5 x erfc(-x / sqrt 2) (no cancellation for negative x), or the tanh approximation."""
    x = np.asarray(x, np.float64)
    if approximate:
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)
        return 0.5 * x * (1.0 + np.tanh(inner))

    def one(v):
        if v == -math.inf:
            return 0.0
        return 0.5 * v * math.erfc(-v / math.sqrt(2.0))
    return np.array([one(float(v)) for v in x.ravel()], np.float64).reshape(x.shape)


def sigmoid(x):
    """1 / (1 + e^-x) by math.exp, element by element (no overflow for large |x|)."""
    def one(v):
        if v >= 0:
            return 1.0 / (1.0 + math.exp(-v))
        e = math.exp(v)
        return e / (1.0 + e)
    flat = [one(float(v)) for v in np.asarray(x, np.float64).ravel()]
    return np.array(flat, np.float64).reshape(np.shape(x))


def round_half_even(x):
    """Python's round(): halves go to the even neighbour."""
    flat = [float(round(float(v))) for v in np.asarray(x, np.float64).ravel()]
    return np.array(flat, np.float64).reshape(np.shape(x))


def floor_mod(a, b):
    """Python's % element by element: the result has the sign of b."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    out = [x % y for x, y in zip(a.ravel().tolist(), b.ravel().tolist())]
    return np.array(out, np.float64 if a.dtype.kind == "f" else np.int64).reshape(a.shape)


# --- softmax and normalisation ---------------------------------------------------------------------------

def softmax(x, axis=-1):
    x = np.asarray(x, np.float64)
    if x.size == 0:
        return x.copy()
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    x = np.asarray(x, np.float64)
    if x.size == 0:
        return x.copy()
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def layer_norm(x, n_axes, weight=None, bias=None, eps=1e-5):
    """Normalise each row of the trailing n_axes (flattened), then scale and shift."""
    x = np.asarray(x, np.float64)
    lead, trail = x.shape[:x.ndim - n_axes], x.shape[x.ndim - n_axes:]
    rows = x.reshape(int(np.prod(lead, dtype=np.int64)), int(np.prod(trail, dtype=np.int64)))
    out = np.empty_like(rows)
    for i, row in enumerate(rows):
        mu = row.sum() / row.size
        var = ((row - mu) ** 2).sum() / row.size
        out[i] = (row - mu) / math.sqrt(var + eps)
    out = out.reshape(x.shape)
    if weight is not None:
        out = out * np.asarray(weight, np.float64)
    if bias is not None:
        out = out + np.asarray(bias, np.float64)
    return out


def batch_norm(x, mean, var, weight=None, bias=None, eps=1e-5, channel_axis=1):
    """(x - mean_c) / sqrt(var_c + eps) * w_c + b_c with per-channel statistics along channel_axis."""
    x = np.asarray(x, np.float64)
    moved = np.moveaxis(x, channel_axis, 0).copy()
    for c in range(moved.shape[0]):
        w = 1.0 if weight is None else float(weight[c])
        b = 0.0 if bias is None else float(bias[c])
        moved[c] = (moved[c] - float(mean[c])) / math.sqrt(float(var[c]) + eps) * w + b
    return np.moveaxis(moved, 0, channel_axis)


# --- convolution -------------------------------------------------------------------------------------------

def conv2d(x, w, bias=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """NCHW x, OIHW w; padding is (top, bottom, left, right). A plain loop over every output element."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    sh, sw = stride
    dh, dw = dilation
    pt, pb, pl, pr = padding
    oh = (h + pt + pb - ((kh - 1) * dh + 1)) // sh + 1
    ow = (wd + pl + pr - ((kw - 1) * dw + 1)) // sw + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for b in range(n):
        for oc in range(o):
            g = oc // og
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for ic in range(cg):
                        for ki in range(kh):
                            for kj in range(kw):
                                r = i * sh - pt + ki * dh
                                q = j * sw - pl + kj * dw
                                if 0 <= r < h and 0 <= q < wd:
                                    acc += x[b, g * cg + ic, r, q] * w[oc, ic, ki, kj]
                    out[b, oc, i, j] = acc + (0.0 if bias is None else float(bias[oc]))
    return out


def same_padding(size, k, s, d):
    """(before, after) so that the output has ceil(size / s) elements; the odd element goes after."""
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


# --- pooling ----------------------------------------------------------------------------------------------

def _pool_len(size, k, s, lo, hi, ceil_mode):
    span = size + lo + hi - k
    n = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (n - 1) * s >= size + lo:  # the last window would start in the right padding: dropped
        n -= 1
    return n


def pool2d(x, kernel, stride, padding, ceil_mode=False, kind="max", exclusive=True):
    """NCHW max or average pooling; padding is (top, bottom, left, right) and never wins a max.

    Average: exclusive divides by the real elements in the window; otherwise by kh*kw.
    """
    x = np.asarray(x, np.float64) if kind == "avg" else np.asarray(x)
    n, c, h, w = x.shape
    kh, kw = kernel
    sh, sw = stride
    pt, pb, pl, pr = padding
    oh = _pool_len(h, kh, sh, pt, pb, ceil_mode)
    ow = _pool_len(w, kw, sw, pl, pr, ceil_mode)
    out = np.zeros((n, c, oh, ow), np.float64 if kind == "avg" else x.dtype)
    for i in range(oh):
        for j in range(ow):
            r0, q0 = i * sh - pt, j * sw - pl
            rows = [r for r in range(r0, r0 + kh) if 0 <= r < h]
            cols = [q for q in range(q0, q0 + kw) if 0 <= q < w]
            win = x[:, :, rows][:, :, :, cols]
            if kind == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                count = len(rows) * len(cols) if exclusive else kh * kw
                out[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return out


def adaptive_pool2d(x, out_hw, kind="avg"):
    """Output cell (i, j) covers rows floor(i*H/OH) .. ceil((i+1)*H/OH) and likewise for columns."""
    x = np.asarray(x, np.float64) if kind == "avg" else np.asarray(x)
    n, c, h, w = x.shape
    oh, ow = out_hw
    out = np.zeros((n, c, oh, ow), np.float64 if kind == "avg" else x.dtype)
    for i in range(oh):
        r0, r1 = math.floor(i * h / oh), math.ceil((i + 1) * h / oh)
        for j in range(ow):
            q0, q1 = math.floor(j * w / ow), math.ceil((j + 1) * w / ow)
            win = x[:, :, r0:r1, q0:q1]
            out[:, :, i, j] = win.mean(axis=(2, 3)) if kind == "avg" else win.max(axis=(2, 3))
    return out
