"""conv2d for the CPU: im2col laid out for NCHW, so each group is one BLAS product written straight into the output.

The reference kernel (hwadapter.plugin.reference.conv2d) multiplies (N*OH*OW, C*k*k) by the transposed weights and
transposes the result back to NCHW: two copies of the output per call. Here the weights are on the left, so the
product's rows are output channels and no transpose follows; 1x1 convolutions (most of a ResNet) need no im2col at
all, and depthwise convolutions accumulate k*k scaled windows instead of running C products of one row each.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from hwadapter.plugin import reference


def _columns(x, kh, kw, stride, dilation):
    """(N, C*kh*kw, OH*OW) patches of a padded NCHW array (a view when no copy is needed)."""
    (sh, sw), (dh, dw) = stride, dilation
    n, c = x.shape[:2]
    if kh == kw == 1:
        xs = x[:, :, ::sh, ::sw]
        return xs.reshape(n, c, xs.shape[2] * xs.shape[3]), xs.shape[2], xs.shape[3]
    win = sliding_window_view(x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
    oh, ow = win.shape[2], win.shape[3]
    return win.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * kh * kw, oh * ow), oh, ow


def _depthwise(xp, w, stride, dilation, acc):
    """One filter per channel: the sum over the kh*kw taps of a strided window times that tap's weight."""
    (sh, sw), (dh, dw) = stride, dilation
    o, _, kh, kw = w.shape
    n, c, hp, wp = xp.shape
    oh, ow = (hp - (kh - 1) * dh - 1) // sh + 1, (wp - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, o, oh, ow), acc)
    taps = w.astype(acc, copy=False).reshape(o, kh * kw)
    for i in range(kh):
        for j in range(kw):
            view = xp[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            out += view * taps[:, i * kw + j].reshape(1, o, 1, 1)
    return out


def kernel(workers):
    """conv2d whose large products run on `workers` (the device's Workers)."""
    def conv2d_kernel(x, w, bias=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
                      activation=None):
        return conv2d(x, w, bias, stride, padding, dilation, groups, activation, matmul=workers.matmul)
    conv2d_kernel.__name__ = conv2d_kernel.__qualname__ = "conv2d"
    conv2d_kernel.epilogues = conv2d.epilogues
    return conv2d_kernel


def conv2d(x, w, bias=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, activation=None,
           matmul=np.matmul):
    """The reference conv2d's semantics (float16 accumulates in float32; the epilogue runs before rounding)."""
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    acc = np.dtype(np.float32) if x.dtype == np.float16 else x.dtype
    pt, pb, pl, pr = padding
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr))) if any(padding) else x
    xp = xp.astype(acc, copy=False)
    if groups > 1 and cg == 1 and o == groups:
        out = _depthwise(xp, w, stride, dilation, acc)
    else:
        cols, oh, ow = _columns(xp, kh, kw, stride, dilation)
        wm = w.astype(acc, copy=False).reshape(o, cg * kh * kw)
        if groups == 1:
            out = matmul(wm, cols).reshape(n, o, oh, ow)
        else:
            og, k = o // groups, cg * kh * kw
            out = np.empty((n, o, oh * ow), acc)
            for g in range(groups):
                np.matmul(wm[g * og:(g + 1) * og], cols[:, g * k:(g + 1) * k], out=out[:, g * og:(g + 1) * og])
            out = out.reshape(n, o, oh, ow)
    if bias is not None:
        out += bias.astype(acc, copy=False).reshape(1, o, 1, 1)
    if activation is not None:
        out = _EPILOGUE[activation](out)
    return out.astype(x.dtype, copy=False)


def _relu(a):
    return np.maximum(a, 0, out=a)  # in place: the accumulator is this call's own


_EPILOGUE = {**{k: reference.KERNELS[k] for k in ("sigmoid", "tanh", "gelu")}, "relu": _relu}
conv2d.epilogues = reference.CONV_ACTIVATIONS
