"""conv2d for the CPU as im2col products laid out for NCHW through numpy's BLAS (HWADAPTER_CPU_KERNELS=codegen
runs float32 in compiled C instead: compiled.py).

The weights are on the left, so the product's rows are output channels and no transpose follows (the reference
kernel, hwadapter.plugin.reference.conv2d, transposes the output twice); the bias, a fused residual and the
activation are applied in place; depthwise convolutions accumulate k*k scaled windows instead of running C products
of one row each.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from hwadapter.plugin import reference, shapes

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


def conv2d(x, w, bias=None, residual=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
           activation=None):
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
            out = np.matmul(wm, cols).reshape(n, o, oh, ow)
        else:
            og, k = o // groups, cg * kh * kw
            out = np.empty((n, o, oh * ow), acc)
            for g in range(groups):
                np.matmul(wm[g * og:(g + 1) * og], cols[:, g * k:(g + 1) * k], out=out[:, g * og:(g + 1) * og])
            out = out.reshape(n, o, oh, ow)
    if bias is not None:
        out += bias.astype(acc, copy=False).reshape(1, o, 1, 1)
    if residual is not None:
        shapes.residual(residual.shape, out.shape)
        out += residual.astype(acc, copy=False)
    if activation is not None:
        out = _EPILOGUE[activation](out)
    return out.astype(x.dtype, copy=False)


def _relu(a):
    return np.maximum(a, 0, out=a)  # in place: the accumulator is this call's own


_EPILOGUE = {**{k: reference.KERNELS[k] for k in ("sigmoid", "tanh", "gelu")}, "relu": _relu}
conv2d.epilogues = reference.CONV_ACTIVATIONS
conv2d.residual = True  # takes a fused residual input (graph fusion asks before emitting one)
