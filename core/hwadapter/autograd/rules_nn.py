"""vjp rules of matmul, convolution, pooling, softmax and normalisation, in hwadapter ops."""
from __future__ import annotations

import numpy as np

from ..api.errors import InvalidArgumentError
from ..dispatch.dispatcher import dispatch
from ..ops import api as O
from ..tensor import to_tensor
from .registry import along, reshape, rule


def _swap(t):
    """t with its last two axes swapped."""
    perm = list(range(t.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return O.transpose(t, perm)


@rule("matmul")
def _matmul(node, g):
    if node.attrs.get("activation") or len(node.inputs) > 2:
        raise InvalidArgumentError("backward: a matmul with a fused bias or activation (made by graph fusion) has no "
                                   "gradient rule. Fix: differentiate the unfused eager ops")
    x, y = node.inputs
    tx, ty = node.attrs.get("transpose_x", False), node.attrs.get("transpose_y", False)
    x2 = reshape(x, [1, x.shape[0]]) if x.ndim == 1 else x
    y2 = reshape(y, [y.shape[0], 1]) if y.ndim == 1 else y
    a = _swap(x2) if tx and x.ndim > 1 else x2
    b = _swap(y2) if ty and y.ndim > 1 else y2
    g2 = reshape(g, list(g.shape) + [1]) if y.ndim == 1 else g
    if x.ndim == 1:
        g2 = reshape(g2, list(g2.shape[:-1]) + [1, g2.shape[-1]])
    gx = gy = None
    if node.needs[0]:
        ga = O.matmul(g2, b, transpose_y=True)
        gx = _swap(ga) if tx and x.ndim > 1 else ga
        gx = reshape(gx, list(gx.shape[:-2]) + [x.shape[0]]) if x.ndim == 1 else gx
        if x.ndim == 1:
            gx = O.sum(gx, axis=list(range(gx.ndim - 1))) if gx.ndim > 1 else gx
    if node.needs[1]:
        gb = O.matmul(a, g2, transpose_x=True)
        gy = _swap(gb) if ty and y.ndim > 1 else gb
        if y.ndim == 1:
            gy = reshape(gy, list(gy.shape[:-1]))
            gy = O.sum(gy, axis=list(range(gy.ndim - 1))) if gy.ndim > 1 else gy
    return gx, gy


@rule("softmax")
def _softmax(node, g):
    out, axis = node.output(), node.attrs.get("axis", -1)
    return (O.multiply(out, O.subtract(g, O.sum(O.multiply(g, out), axis=axis, keepdim=True))),)


@rule("log_softmax")
def _log_softmax(node, g):
    out, axis = node.output(), node.attrs.get("axis", -1)
    return (O.subtract(g, O.multiply(O.exp(out), O.sum(g, axis=axis, keepdim=True))),)


@rule("layer_norm")
def _layer_norm(node, g):
    x, w, b = node.inputs
    begin, eps = node.attrs.get("begin_axis", -1) % x.ndim, node.attrs.get("epsilon", 1e-5)
    axes = list(range(begin, x.ndim))
    lead = list(range(begin))
    mu = O.mean(x, axis=axes, keepdim=True)
    xc = O.subtract(x, mu)
    rstd = O.rsqrt(O.add(O.mean(O.multiply(xc, xc), axis=axes, keepdim=True), eps))
    xhat = O.multiply(xc, rstd)
    gw = None
    if node.needs[1]:
        gw = O.sum(O.multiply(g, xhat), axis=lead) if lead else O.multiply(g, xhat)
    gb = (O.sum(g, axis=lead) if lead else g) if node.needs[2] else None
    gx = None
    if node.needs[0]:
        gh = O.multiply(g, w)
        term = O.add(O.mean(gh, axis=axes, keepdim=True),
                     O.multiply(xhat, O.mean(O.multiply(gh, xhat), axis=axes, keepdim=True)))
        gx = O.multiply(O.subtract(gh, term), rstd)
    return gx, gw, gb


@rule("batch_norm")
def _batch_norm(node, g):
    """Inference batch norm (given statistics): every input is differentiable."""
    x, mean, var, w, b = node.inputs
    axis, eps = node.attrs.get("channel_axis", 1), node.attrs.get("epsilon", 1e-5)
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    others = [a for a in range(x.ndim) if a != axis]
    rstd = O.rsqrt(O.add(var, eps))
    r, m, wr = (reshape(t, shape) for t in (rstd, mean, w))
    xc = O.subtract(x, m)
    gx = O.multiply(g, O.multiply(wr, r)) if node.needs[0] else None
    gmean = O.neg(O.sum(O.multiply(g, O.multiply(wr, r)), axis=others)) if node.needs[1] else None
    gvar = None
    if node.needs[2]:
        gvar = O.multiply(O.sum(O.multiply(O.multiply(g, xc), wr), axis=others), O.multiply(O.pow(rstd, 3), -0.5))
    gw = O.sum(O.multiply(O.multiply(g, xc), r), axis=others) if node.needs[3] else None
    gb = O.sum(g, axis=others) if node.needs[4] else None
    return gx, gmean, gvar, gw, gb


# --- convolution --------------------------------------------------------------------------------------------------
def _conv_input_grad(g, w, x_shape, stride, pads, dilation, groups):
    """d conv2d / dx as a conv2d (the op every device has, and the CPU's fastest): g with zeros between its
    elements (the stride), padded, against the kernel flipped and with its channel axes swapped per group."""
    n, o, oh, ow = g.shape
    kh, kw = w.shape[2], w.shape[3]
    (sh, sw), (dh, dw) = stride, dilation
    if sh > 1 or sw > 1:  # (N, O, OH, 1, OW, 1) padded to (N, O, OH, sh, OW, sw): each element then sh-1 zeros
        g = reshape(g, [n, o, oh, 1, ow, 1])
        g = dispatch("pad", (g,), {"pads": ((0, 0), (0, 0), (0, 0), (0, sh - 1), (0, 0), (0, sw - 1)),
                                   "mode": "constant", "value": 0.0})
        g = reshape(g, [n, o, oh * sh, ow * sw])
        g = O.slice(g, [2, 3], [0, 0], [(oh - 1) * sh + 1, (ow - 1) * sw + 1])
    edges = []
    for size, length, k, d, before in ((x_shape[2], g.shape[2], kh, dh, pads[0]), (x_shape[3], g.shape[3], kw, dw,
                                                                                   pads[2])):
        top = (k - 1) * d - before
        edges.append((top, size + (k - 1) * d - length - top))
    cuts = [(max(-a, 0), max(-b, 0)) for a, b in edges]
    if any(any(c) for c in cuts):
        g = O.slice(g, [2, 3], [cuts[0][0], cuts[1][0]], [g.shape[2] - cuts[0][1], g.shape[3] - cuts[1][1]])
    grow = tuple((max(a, 0), max(b, 0)) for a, b in edges)
    if any(any(e) for e in grow):
        g = dispatch("pad", (g,), {"pads": ((0, 0), (0, 0)) + grow, "mode": "constant", "value": 0.0})
    c = x_shape[1]
    flipped = O.slice(w, [2, 3], [kh - 1, kw - 1], [-kh - 1, -kw - 1], [-1, -1])  # (O, C/g, kh, kw), reversed
    og, cg = o // groups, c // groups
    wt = O.transpose(reshape(flipped, [groups, og, cg, kh, kw]), [0, 2, 1, 3, 4])
    wt = reshape(wt, [c, og, kh, kw])
    return dispatch("conv2d", (g, wt), {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (dh, dw),
                                        "groups": groups})


def _conv_weight_grad(x, g, w_shape, stride, pads, dilation, groups):
    """d conv2d / dw: per group, the convolution of x (channels as batch) with g (batch as channels), where the
    forward's stride becomes the dilation and its dilation the stride; cropped to the kernel."""
    o, cg, kh, kw = w_shape
    og = o // groups
    parts = []
    for k in range(groups):
        xs = x if groups == 1 else O.slice(x, [1], [k * cg], [(k + 1) * cg])
        gs = g if groups == 1 else O.slice(g, [1], [k * og], [(k + 1) * og])
        xt, gt = O.transpose(xs, [1, 0, 2, 3]), O.transpose(gs, [1, 0, 2, 3])  # (cg, N, H, W), (og, N, OH, OW)
        xt = dispatch("pad", (xt,), {"pads": ((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])),
                                     "mode": "constant", "value": 0.0}) if any(pads) else xt
        out = dispatch("conv2d", (xt, gt), {"stride": tuple(dilation), "padding": (0, 0, 0, 0),
                                            "dilation": tuple(stride), "groups": 1})  # (cg, og, >=kh, >=kw)
        if out.shape[2] != kh or out.shape[3] != kw:
            out = O.slice(out, [2, 3], [0, 0], [kh, kw])
        parts.append(O.transpose(out, [1, 0, 2, 3]))
    return parts[0] if groups == 1 else O.concat(parts, axis=0)


@rule("conv2d")
def _conv2d(node, g):
    a = node.attrs
    if a.get("activation") or len(node.inputs) > 3:
        raise InvalidArgumentError("backward: a conv2d with a fused activation or residual (made by graph fusion) "
                                   "has no gradient rule. Fix: differentiate the unfused eager ops")
    x, w = node.inputs[:2]
    stride, pads, dil, groups = a.get("stride", (1, 1)), a.get("padding", (0, 0, 0, 0)), a.get("dilation", (1, 1)), \
        a.get("groups", 1)
    gx = _conv_input_grad(g, w, x.shape, stride, pads, dil, groups) if node.needs[0] else None
    gw = _conv_weight_grad(x, g, w.shape, stride, pads, dil, groups) if node.needs[1] else None
    grads = [gx, gw]
    if len(node.inputs) == 3:
        grads.append(O.sum(g, axis=[0, 2, 3]) if node.needs[2] else None)
    return tuple(grads)


@rule("conv_transpose2d")
def _conv_transpose2d(node, g):
    a = node.attrs
    x, w = node.inputs[:2]
    stride, pads, dil, groups = a.get("stride", (1, 1)), a.get("padding", (0, 0, 0, 0)), a.get("dilation", (1, 1)), \
        a.get("groups", 1)
    gx = dispatch("conv2d", (g, w), {"stride": tuple(stride), "padding": tuple(pads), "dilation": tuple(dil),
                                     "groups": groups}) if node.needs[0] else None
    if gx is not None and tuple(gx.shape[2:]) != tuple(x.shape[2:]):
        gx = O.slice(gx, [2, 3], [0, 0], list(x.shape[2:]))
    gw = None
    if node.needs[1]:  # conv_transpose2d(x, w) is conv2d(., w)'s input gradient: g plays conv2d's input, x its
        gw = _conv_weight_grad(g, x, tuple(w.shape), stride, pads, dil, groups)  # result's gradient
    grads = [gx, gw]
    if len(node.inputs) == 3:
        grads.append(O.sum(g, axis=[0, 2, 3]) if node.needs[2] else None)
    return tuple(grads)


# --- pooling ------------------------------------------------------------------------------------------------------
@rule("max_pool2d")
def _max_pool2d(node, g):
    return (dispatch("max_pool2d_grad", (node.inputs[0], g), node.attrs),)


@rule("adaptive_max_pool2d")
def _adaptive_max_pool2d(node, g):
    return (dispatch("adaptive_max_pool2d_grad", (node.inputs[0], g), node.attrs),)


@rule("avg_pool2d")
def _avg_pool2d(node, g):
    """Each window's gradient, divided by what the window divided by, spread back by a transposed convolution of
    ones (one group per channel)."""
    x = node.inputs[0]
    a = node.attrs
    (kh, kw), (sh, sw) = a.get("kernel_size", (2, 2)), a.get("stride", (2, 2))
    pt, pb, pl, pr = a.get("padding", (0, 0, 0, 0))
    n, c, h, w = x.shape
    if a.get("exclusive", True):
        ones = O.ones([1, 1, h, w], x.dtype, getattr(x.device, "base", x.device))
        attrs = dict(a, exclusive=False)
        counts = O.multiply(dispatch("avg_pool2d", (ones,), attrs), float(kh * kw))
        g = O.divide(g, counts)
    else:
        g = O.divide(g, float(kh * kw))
    kernel = to_tensor(np.ones((c, 1, kh, kw), x.dtype), device=getattr(x.device, "base", x.device))
    full = ((g.shape[2] - 1) * sh + kh - pt, (g.shape[3] - 1) * sw + kw - pl)  # what the windows cover past pt, pl
    out = _conv_input_grad(g, kernel, (n, c) + full, (sh, sw), (pt, 0, pl, 0), (1, 1), c)
    return (_fit_spatial(out, h, w),)


def _fit_spatial(t, h, w):
    """t cropped or zero-padded at the bottom and right to h x w."""
    th, tw = t.shape[2], t.shape[3]
    if th > h or tw > w:
        t = O.slice(t, [2, 3], [0, 0], [min(th, h), min(tw, w)])
    if t.shape[2] < h or t.shape[3] < w:
        t = dispatch("pad", (t,), {"pads": ((0, 0), (0, 0), (0, h - t.shape[2]), (0, w - t.shape[3])),
                                   "mode": "constant", "value": 0.0})
    return t


def _adaptive_matrix(size, out, dtype):
    """(out, size): row i averages adaptive window i of an axis of `size` (the windows reference.py defines)."""
    m = np.zeros((out, size), dtype)
    for i in range(out):
        lo, hi = (i * size) // out, -(-((i + 1) * size) // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


@rule("adaptive_avg_pool2d")
def _adaptive_avg_pool2d(node, g):
    x = node.inputs[0]
    oh, ow = node.attrs.get("output_size", (1, 1))
    dev = getattr(x.device, "base", x.device)
    ah = to_tensor(_adaptive_matrix(x.shape[2], oh, x.dtype).T, device=dev)  # (H, OH)
    aw = to_tensor(_adaptive_matrix(x.shape[3], ow, x.dtype), device=dev)  # (OW, W)
    return (O.matmul(O.matmul(ah, g), aw),)


# --- local response normalisation ---------------------------------------------------------------------------------
@rule("lrn")
def _lrn(node, g):
    """y = x d^-beta, d = bias + alpha / size * (window sums of x^2 over channels): gx = g d^-beta - 2 alpha beta /
    size * x * (the window sums, transposed, of g x d^(-beta-1)). Window sums are a band matrix on axis 1; float16
    computes in float32, as its forward does."""
    x = node.inputs[0]
    a = node.attrs
    size, alpha, beta, bias = a["size"], a.get("alpha", 1e-4), a.get("beta", 0.75), a.get("bias", 1.0)
    if x.dtype == np.float16:
        x, g = O.cast(x, "float32"), O.cast(g, "float32")
    c = x.shape[1]
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    band = np.zeros((c, c))  # band[j, i] = 1 when x_j is in the window of channel i: i - lo <= j <= i + hi
    for i in range(c):
        band[max(i - lo, 0):i + hi + 1, i] = 1.0
    d = O.add(O.multiply(along(O.multiply(x, x), band, 1), alpha / size), bias)
    scaled = O.multiply(g, O.pow(d, -beta))
    inner = O.divide(O.multiply(scaled, x), d)  # g x d^(-beta-1)
    return (O.subtract(scaled, O.multiply(x, O.multiply(along(inner, band.T, 1), 2 * alpha * beta / size))),)
