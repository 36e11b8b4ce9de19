"""hwadapter.nn.functional: activations, normalisation, convolution and pooling, with paddle's signatures."""
from __future__ import annotations

import math

from .. import autograd
from .. import random as _random
from ..api import dtypes as _dt
from ..dispatch.dispatcher import dispatch
from ..api.errors import InvalidArgumentError, UnsupportedDTypeError
from ..api import shapes
from ..ops._common import _FLOAT, _INTEGER, _as_float, _promote, _tensor, cast, check_size, make_public, number_arg
from ..ops.creation import full
from ..ops.elementwise import (add, gelu, greater_equal, multiply, not_equal, relu, rsqrt, sigmoid,  # noqa: F401
                               subtract, tanh)  # gelu, relu, sigmoid, tanh: re-exported
from ..ops.linalg import matmul
from ..ops.manipulation import _reshape, gather, pad, transpose
from ..ops.reduction import mean
from .loss_functional import cross_entropy, mse_loss  # noqa: F401  re-exported

__all__ = ["relu", "gelu", "sigmoid", "tanh", "softmax", "log_softmax", "layer_norm", "batch_norm", "conv2d",
           "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "linear", "pad",
           "conv2d_transpose", "local_response_norm", "dropout", "embedding", "cross_entropy", "mse_loss"]


def _softmax(op, x, axis):
    x = _as_float(_tensor(op, x))
    if x.ndim == 0:  # one element along its only "axis" (0 or -1): run it as shape (1,)
        shapes.normalize_axis(op, axis, 1)
        return _reshape(dispatch(op, (_reshape(x, (1,)),), {"axis": 0}), ())
    return dispatch(op, (x,), {"axis": shapes.normalize_axis(op, axis, x.ndim)})


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along an axis, computed stably."""
    return _softmax("softmax", x, axis)


def log_softmax(x, axis=-1):
    """log(softmax(x)) along an axis, computed stably."""
    return _softmax("log_softmax", x, axis)


def _param(op, name, p, x, shape, fill):
    if p is None:
        return full(shape, fill, x.dtype, x.device)
    p = _tensor(op, p)
    if tuple(p.shape) != tuple(shape):
        raise InvalidArgumentError(f"{op}: {name} has shape {p.shape}, expected {tuple(shape)}. Fix: pass a {name} "
                                   f"of shape {tuple(shape)}, or None")
    return p if p.dtype == x.dtype else p.astype(x.dtype)


def _epsilon(op, epsilon, dtype) -> float:
    """epsilon as a float that x's dtype holds (kernels compute in it)."""
    eps = number_arg(op, "epsilon", epsilon)
    if isinstance(eps, bool) or not 0 <= eps < math.inf:
        raise InvalidArgumentError(f"{op}: epsilon must be a finite number >= 0, not {epsilon!r}. Fix: pass e.g. 1e-5")
    _dt.check_fits(op, "epsilon", eps, dtype)
    return float(eps)


def layer_norm(x, normalized_shape, weight=None, bias=None, epsilon=1e-5):
    """Normalise over the trailing `normalized_shape` axes, then scale and shift."""
    x = _as_float(_tensor("layer_norm", x))
    norm = shapes.int_list("layer_norm", "normalized_shape", normalized_shape, low=0, scalar_ok=True)
    if not norm or len(norm) > x.ndim or tuple(x.shape[-len(norm):]) != norm:
        raise InvalidArgumentError(f"layer_norm: normalized_shape {norm} is not the trailing shape of {x.shape}. "
                                   f"Fix: pass x.shape[-k:] for the k axes to normalise")
    eps = _epsilon("layer_norm", epsilon, x.dtype)
    w = _param("layer_norm", "weight", weight, x, norm, 1)
    b = _param("layer_norm", "bias", bias, x, norm, 0)
    return dispatch("layer_norm", (x, w, b), {"begin_axis": x.ndim - len(norm), "epsilon": eps})


_BN_FORMATS = ("NC", "NCL", "NCHW", "NCDHW", "NLC", "NHWC", "NDHWC")


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.9, epsilon=1e-5,
               data_format="NCHW", use_global_stats=None, name=None):
    """Batch normalisation. training=True (unless use_global_stats=True) normalises with the batch's statistics
    and updates running_mean / running_var in place, as paddle: running = momentum * running + (1 - momentum) *
    batch, with the biased batch variance; otherwise the running statistics normalise."""
    training = shapes.flag("batch_norm", "training", training)
    momentum = number_arg("batch_norm", "momentum", momentum)
    if isinstance(momentum, bool) or not 0 <= momentum <= 1:
        raise InvalidArgumentError(f"batch_norm: momentum must be a number in [0, 1], not {momentum!r}. Fix: pass "
                                   f"e.g. 0.9 (paddle's convention: the weight of the running statistics)")
    x = _as_float(_tensor("batch_norm", x))
    eps = _epsilon("batch_norm", epsilon, x.dtype)
    if x.ndim < 2:
        raise InvalidArgumentError(f"batch_norm: input must be at least 2-D (N, C, ...), got {x.shape}. Fix: add "
                                   f"a batch axis, e.g. x.unsqueeze(0)")
    fmt = data_format.upper() if isinstance(data_format, str) else None
    if fmt not in _BN_FORMATS:
        raise InvalidArgumentError(f"batch_norm: data_format must be one of {', '.join(_BN_FORMATS)} (channels "
                                   f"second or last), not {shapes.show(data_format)}. Fix: pass one of those")
    axis = 1 if fmt.startswith("NC") else x.ndim - 1
    c = x.shape[axis]
    use_batch = training if use_global_stats is None else not shapes.flag("batch_norm", "use_global_stats",
                                                                          use_global_stats)
    if use_batch:
        return _batch_norm_train(x, running_mean, running_var, weight, bias, momentum, eps, axis)
    params = [_param("batch_norm", n, p, x, (c,), f) for n, p, f in
              (("running_mean", running_mean, 0), ("running_var", running_var, 1), ("weight", weight, 1),
               ("bias", bias, 0))]
    return dispatch("batch_norm", (x, *params), {"epsilon": eps, "channel_axis": axis})


def _batch_norm_train(x, running_mean, running_var, weight, bias, momentum: float, eps: float, axis: int):
    """Normalise with the batch's statistics (computed in float32 for float16 input), composed of ops that have
    gradients; then the running statistics' update, outside the gradient."""
    c = x.shape[axis]
    for n, r in (("running_mean", running_mean), ("running_var", running_var)):
        if r is not None and tuple(_tensor("batch_norm", r).shape) != (c,):
            raise InvalidArgumentError(f"batch_norm: {n} has shape {r.shape}, expected ({c},). Fix: pass one value "
                                       f"per channel, or None")
    axes = tuple(a for a in range(x.ndim) if a != axis)
    if any(x.shape[a] == 0 for a in axes):
        raise InvalidArgumentError(f"batch_norm: the batch {x.shape} is empty; training needs its statistics. Fix: "
                                   f"pass a non-empty batch")
    xs = x if x.dtype != _dt.float16 else cast(x, _dt.float32)
    batch_mean = mean(xs, axes, keepdim=True)
    centred = subtract(xs, batch_mean)
    batch_var = mean(multiply(centred, centred), axes, keepdim=True)
    y = multiply(centred, rsqrt(add(batch_var, eps)))
    y = y if y.dtype == x.dtype else cast(y, x.dtype)
    per_channel = tuple(c if a == axis else 1 for a in range(x.ndim))
    if weight is not None:
        y = multiply(y, _reshape(_param("batch_norm", "weight", weight, x, (c,), 1), per_channel))
    if bias is not None:
        y = add(y, _reshape(_param("batch_norm", "bias", bias, x, (c,), 0), per_channel))
    with autograd.no_grad():
        for running, stat in ((running_mean, batch_mean), (running_var, batch_var)):
            if running is not None:
                now = running
                stat = _reshape(stat.detach(), (c,))
                stat = stat if stat.dtype == now.dtype else cast(stat, now.dtype)
                running.set_value(add(multiply(now, momentum), multiply(stat, 1.0 - momentum)))
    return y


def dropout(x, p=0.5, axis=None, training=True, mode="upscale_in_train", name=None):
    """Zero each element with probability p in training (axis: one draw shared along the other axes);
    'upscale_in_train' (paddle's default) scales what is kept by 1 / (1 - p) and is the identity outside
    training, 'downscale_in_infer' keeps values in training and scales by (1 - p) outside it. The mask comes from
    the device's seeded stream (hwadapter.random), so it differs at each call, inside to_static too."""
    x = _as_float(_tensor("dropout", x))
    p = dropout_args(p, mode)
    axes = None if axis is None else shapes.normalize_axes("dropout", axis, x.ndim)
    if not shapes.flag("dropout", "training", training):
        return x if mode == "upscale_in_train" else multiply(x, 1.0 - p)
    if p == 0:
        return x
    if p == 1:
        return multiply(x, 0.0)  # still a result of x, so that its gradient (zero) flows
    mask_shape = x.shape if axes is None else tuple(s if a in axes else 1 for a, s in enumerate(x.shape))
    keep = cast(greater_equal(_random.uniform(mask_shape, "float32", x.device), p), x.dtype)
    return multiply(x, multiply(keep, 1.0 / (1.0 - p)) if mode == "upscale_in_train" else keep)


def dropout_args(p, mode) -> float:
    """dropout's p as a float in [0, 1], once p and mode are checked."""
    p = number_arg("dropout", "p", p)
    if isinstance(p, bool) or not 0 <= p <= 1:
        raise InvalidArgumentError(f"dropout: p must be a probability in [0, 1], not {p!r}. Fix: pass e.g. 0.5")
    if mode not in ("upscale_in_train", "downscale_in_infer"):
        raise InvalidArgumentError(f"dropout: mode must be 'upscale_in_train' or 'downscale_in_infer', not "
                                   f"{shapes.show(mode)}. Fix: pass one of those")
    return float(p)


def embedding(x, weight, padding_idx=None, max_norm=None, norm_type=2.0, sparse=False, scale_grad_by_freq=False,
              name=None):
    """The rows of weight at the integer ids in x: shape x.shape + [embedding_dim]; ids equal to padding_idx give
    zeros (and no gradient to that row)."""
    x, w = _tensor("embedding", x), _tensor("embedding", weight)
    if x.dtype not in _INTEGER:
        raise UnsupportedDTypeError(f"embedding: ids must be integers, not {x.dtype.name}. Fix: cast them, e.g. "
                                    f"x.astype('int64')")
    if w.ndim != 2 or w.dtype not in _FLOAT:
        raise InvalidArgumentError(f"embedding: weight must be a 2-D float tensor (num_embeddings, embedding_dim), "
                                   f"got {w.dtype.name} {list(w.shape)}. Fix: pass the embedding table")
    if max_norm is not None or scale_grad_by_freq:
        raise InvalidArgumentError("embedding: max_norm and scale_grad_by_freq are not supported. Fix: leave them "
                                   "at None and False")
    rows = w.shape[0]
    if padding_idx is not None:
        padding_idx = shapes.int_arg("embedding", "padding_idx", padding_idx, low=-rows, high=rows - 1) % rows
    ids = _reshape(x, (x.size,)) if x.ndim != 1 else x
    out = _reshape(gather(w, ids, 0), x.shape + (w.shape[1],))
    if padding_idx is None:
        return out
    keep = cast(not_equal(x, padding_idx), w.dtype)
    return multiply(out, _reshape(keep, x.shape + (1,)))


def _nchw(op, x, data_format):
    x = _tensor(op, x)
    if x.ndim != 4:
        raise InvalidArgumentError(f"{op}: input must be 4-D ({shapes.show(data_format)}), got shape {x.shape}. "
                                   f"Fix: reshape it to (N, C, H, W), or (N, H, W, C) with data_format='NHWC'")
    if isinstance(data_format, str) and data_format == "NHWC":
        return transpose(x, (0, 3, 1, 2)), True
    if not isinstance(data_format, str) or data_format != "NCHW":
        raise InvalidArgumentError(f"{op}: data_format must be 'NCHW' or 'NHWC', not {shapes.show(data_format)}. "
                                   f"Fix: pass one of those")
    return x, False


def _back(y, nhwc):
    if not nhwc:
        return y
    return transpose(y, (0, 2, 3, 1))


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, data_format="NCHW"):
    """2-D convolution of NCHW input with OIHW weights (stride, padding, dilation, groups)."""
    x, nhwc = _nchw("conv2d", x, data_format)
    x, w = _promote("conv2d", x, _tensor("conv2d", weight))
    x, w = _as_float(x), _as_float(w)
    if w.ndim != 4:
        raise InvalidArgumentError(f"conv2d: weight must be 4-D (out, in/groups, kh, kw), got {w.shape}. Fix: "
                                   f"reshape it to (out_channels, in_channels // groups, kh, kw)")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    groups = shapes.int_arg("conv2d", "groups", groups, low=1)
    if c % groups or o % groups or cg != c // groups:
        raise InvalidArgumentError(f"conv2d: {c} input channels, weight {w.shape} and groups={groups} do not agree. "
                                   f"Fix: need in_channels == groups * weight.shape[1] and out_channels % groups == 0")
    st, dl = shapes.pair("conv2d", "stride", stride), shapes.pair("conv2d", "dilation", dilation)
    pads = shapes.conv_padding("conv2d", padding, (h, wd), (kh, kw), st, dl)
    (oh, sh), (ow, sw) = _windows(h, kh, st[0], dl[0], pads[:2]), _windows(wd, kw, st[1], dl[1], pads[2:])
    check_size("conv2d", (n, c, h + pads[0] + pads[1], wd + pads[2] + pads[3]), x.dtype, x.device,
               what="the padded input (kernels pad x first)")
    check_size("conv2d", (n, o, oh, ow), x.dtype, x.device)
    inputs = (x, w)
    if bias is not None:
        b = _tensor("conv2d", bias)
        if b.shape != (o,):
            raise InvalidArgumentError(f"conv2d: bias must have shape ({o},), got {b.shape}. Fix: pass one value "
                                       f"per output channel, or None")
        inputs = (x, w, b.astype(x.dtype))
    attrs = {"stride": (sh, sw), "padding": pads, "dilation": dl, "groups": groups}
    return _back(dispatch("conv2d", inputs, attrs), nhwc)


def conv2d_transpose(x, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                     data_format="NCHW"):
    """2-D transposed convolution of NCHW input with (in, out/groups, kh, kw) weights (paddle's signature)."""
    op = "conv2d_transpose"
    x, nhwc = _nchw(op, x, data_format)
    x, w = _promote(op, x, _tensor(op, weight))
    x, w = _as_float(x), _as_float(w)
    if w.ndim != 4:
        raise InvalidArgumentError(f"{op}: weight must be 4-D (in, out/groups, kh, kw), got {w.shape}. Fix: reshape "
                                   f"it to (in_channels, out_channels // groups, kh, kw)")
    n, c, h, wd = x.shape
    ci, og, kh, kw = w.shape
    groups = shapes.int_arg(op, "groups", groups, low=1)
    if ci != c or c % groups:
        raise InvalidArgumentError(f"{op}: {c} input channels, weight {w.shape} and groups={groups} do not agree. "
                                   f"Fix: need weight.shape[0] == in_channels, a multiple of groups")
    st, dl = shapes.pair(op, "stride", stride), shapes.pair(op, "dilation", dilation)
    pads = shapes.conv_padding(op, padding, (h, wd), (kh, kw), (1, 1), dl) if not isinstance(padding, str) else None
    if pads is None:
        raise InvalidArgumentError(f"{op}: padding must be ints, not {shapes.show(padding)}. Fix: pass an int, a "
                                   f"pair or four ints")
    outpad = shapes.int_list(op, "output_padding", output_padding, length=(1, 2), low=0, scalar_ok=True)
    outpad = outpad * 2 if len(outpad) == 1 else outpad
    if outpad[0] >= max(st[0], dl[0]) or outpad[1] >= max(st[1], dl[1]):
        raise InvalidArgumentError(f"{op}: output_padding {outpad} must be smaller than the stride or the dilation. "
                                   f"Fix: pass a smaller output_padding")
    oh = (h - 1) * st[0] + (kh - 1) * dl[0] + 1 - pads[0] - pads[1] + outpad[0]
    ow = (wd - 1) * st[1] + (kw - 1) * dl[1] + 1 - pads[2] - pads[3] + outpad[1]
    if oh <= 0 or ow <= 0:
        raise InvalidArgumentError(f"{op}: padding {pads} leaves an output of {oh}x{ow}. Fix: pad less")
    check_size(op, (n, og * groups, oh, ow), x.dtype, x.device)
    inputs = (x, w)
    if bias is not None:
        b = _tensor(op, bias)
        if b.shape != (og * groups,):
            raise InvalidArgumentError(f"{op}: bias must have shape ({og * groups},), got {b.shape}. Fix: pass one "
                                       f"value per output channel, or None")
        inputs = (x, w, b.astype(x.dtype))
    attrs = {"stride": st, "padding": pads, "output_padding": outpad, "dilation": dl, "groups": groups}
    return _back(dispatch("conv_transpose2d", inputs, attrs), nhwc)


def local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1.0, data_format="NCHW"):
    """x / (k + alpha / size * the sum of x**2 over `size` neighbouring channels) ** beta (paddle's, ONNX LRN)."""
    op = "local_response_norm"
    x = _as_float(_tensor(op, x))
    if x.ndim < 3:
        raise InvalidArgumentError(f"{op}: input must be at least 3-D (N, C, ...), got {x.shape}. Fix: add axes")
    if data_format not in ("NCHW", "NCL", "NCDHW"):
        raise InvalidArgumentError(f"{op}: data_format must be channels-first (NCL, NCHW, NCDHW), not "
                                   f"{shapes.show(data_format)}. Fix: transpose to channels-first")
    size = shapes.int_arg(op, "size", size, low=1)
    attrs = {"size": size}
    for name, v in (("alpha", alpha), ("beta", beta), ("bias", k)):
        v = number_arg(op, name, v)
        if isinstance(v, bool) or not math.isfinite(v):
            raise InvalidArgumentError(f"{op}: {name} must be a finite number, not {v!r}. Fix: pass a float")
        attrs[name] = float(v)
    return dispatch("lrn", (x,), attrs)


def _windows(size: int, k: int, stride: int, dilation: int, pads: tuple) -> tuple:
    """(windows, stride) along one axis of conv2d, the stride no longer than the padded input: a longer one gives
    the same single window, and kernels need not hold an absurd number."""
    out = shapes.window_out("conv2d", size, k, stride, dilation, pads[0] + pads[1])
    return out, min(stride, size + pads[0] + pads[1] - (k - 1) * dilation)


def _pool_args(op, x, kernel_size, stride, padding, ceil_mode):
    k = shapes.pair(op, "kernel_size", kernel_size)
    st = k if stride is None else shapes.pair(op, "stride", stride)
    ceil_mode = shapes.flag(op, "ceil_mode", ceil_mode)
    pads = shapes.conv_padding(op, padding, x.shape[2:], k, st, (1, 1))
    if max(pads[0], pads[1]) > k[0] // 2 or max(pads[2], pads[3]) > k[1] // 2:
        raise InvalidArgumentError(f"{op}: padding {shapes.show(padding)} must be at most half the kernel {k}. Fix: "
                                   f"pad less, or use a larger kernel")
    shapes.window_out(op, x.shape[2], k[0], st[0], 1, pads[0] + pads[1], ceil_mode)
    shapes.window_out(op, x.shape[3], k[1], st[1], 1, pads[2] + pads[3], ceil_mode)
    return {"kernel_size": k, "stride": st, "padding": pads, "ceil_mode": ceil_mode}


def max_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, data_format="NCHW"):
    """Max over sliding windows (padding never wins)."""
    x, nhwc = _nchw("max_pool2d", x, data_format)
    return _back(dispatch("max_pool2d", (x,), _pool_args("max_pool2d", x, kernel_size, stride, padding, ceil_mode)),
                 nhwc)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True, data_format="NCHW"):
    """Mean over sliding windows; exclusive=True divides by the unpadded element count (paddle's default)."""
    x, nhwc = _nchw("avg_pool2d", x, data_format)
    x = _as_float(x)
    attrs = _pool_args("avg_pool2d", x, kernel_size, stride, padding, ceil_mode)
    attrs["exclusive"] = shapes.flag("avg_pool2d", "exclusive", exclusive)
    return _back(dispatch("avg_pool2d", (x,), attrs), nhwc)


def _adaptive(op, x, output_size, data_format):
    x, nhwc = _nchw(op, x, data_format)
    size = shapes.pair(op, "output_size", output_size)
    if x.shape[2] == 0 or x.shape[3] == 0:
        raise InvalidArgumentError(f"{op}: input spatial size {x.shape[2:]} is empty. Fix: pool a non-empty input")
    check_size(op, x.shape[:2] + size, x.dtype, x.device)
    return x, size, nhwc


def adaptive_avg_pool2d(x, output_size, data_format="NCHW"):
    """Average pooling to a fixed output size (output_size=1 is global average pooling)."""
    x, size, nhwc = _adaptive("adaptive_avg_pool2d", x, output_size, data_format)
    return _back(dispatch("adaptive_avg_pool2d", (_as_float(x),), {"output_size": size}), nhwc)


def adaptive_max_pool2d(x, output_size, data_format="NCHW"):
    """Max pooling to a fixed output size (output_size=1 is global max pooling)."""
    x, size, nhwc = _adaptive("adaptive_max_pool2d", x, output_size, data_format)
    return _back(dispatch("adaptive_max_pool2d", (x,), {"output_size": size}), nhwc)


def linear(x, weight, bias=None):
    """x @ weight + bias, with weight of shape (in_features, out_features) as in paddle."""
    y = matmul(x, weight)
    return y if bias is None else add(y, bias)


make_public(globals(), __all__)  # a misspelt keyword (dim= for axis=) is our error, with the fix
