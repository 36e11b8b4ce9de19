"""hwadapter.nn.functional: activations, normalisation, convolution and pooling, with paddle's signatures."""
from __future__ import annotations

from ..dispatch.dispatcher import dispatch
from ..errors import InvalidArgumentError
from ..ops import shapes
from ..ops._common import _as_float, _promote, _tensor
from ..ops.creation import full
from ..ops.elementwise import add, gelu, relu, sigmoid, tanh  # noqa: F401  gelu, relu, sigmoid, tanh: re-exported
from ..ops.linalg import matmul
from ..ops.manipulation import _reshape, pad, transpose

__all__ = ["relu", "gelu", "sigmoid", "tanh", "softmax", "log_softmax", "layer_norm", "batch_norm", "conv2d",
           "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "linear", "pad"]


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
        raise InvalidArgumentError(f"{op}: {name} has shape {p.shape}, expected {tuple(shape)}")
    return p if p.dtype == x.dtype else p.astype(x.dtype)


def layer_norm(x, normalized_shape, weight=None, bias=None, epsilon=1e-5):
    """Normalise over the trailing `normalized_shape` axes, then scale and shift."""
    x = _as_float(_tensor("layer_norm", x))
    norm = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not norm or tuple(x.shape[-len(norm):]) != norm or len(norm) > x.ndim:
        raise InvalidArgumentError(f"layer_norm: normalized_shape {norm} is not the trailing shape of {x.shape}")
    w = _param("layer_norm", "weight", weight, x, norm, 1)
    b = _param("layer_norm", "bias", bias, x, norm, 0)
    return dispatch("layer_norm", (x, w, b), {"begin_axis": x.ndim - len(norm), "epsilon": float(epsilon)})


_BN_FORMATS = ("NC", "NCL", "NCHW", "NCDHW", "NLC", "NHWC", "NDHWC")


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.9, epsilon=1e-5,
               data_format="NCHW"):
    """Inference batch normalisation with running statistics (training=True is not supported)."""
    if training:
        raise InvalidArgumentError("batch_norm: only inference (training=False) is supported; hwadapter has no "
                                   "training mode")
    x = _as_float(_tensor("batch_norm", x))
    if x.ndim < 2:
        raise InvalidArgumentError(f"batch_norm: input must be at least 2-D (N, C, ...), got {x.shape}")
    fmt = data_format.upper() if isinstance(data_format, str) else data_format
    if fmt not in _BN_FORMATS:
        raise InvalidArgumentError(f"batch_norm: data_format must be one of {', '.join(_BN_FORMATS)} (channels "
                                   f"second or last), not {data_format!r}")
    axis = 1 if fmt.startswith("NC") else x.ndim - 1
    c = x.shape[axis]
    params = [_param("batch_norm", n, p, x, (c,), f) for n, p, f in
              (("running_mean", running_mean, 0), ("running_var", running_var, 1), ("weight", weight, 1),
               ("bias", bias, 0))]
    return dispatch("batch_norm", (x, *params), {"epsilon": float(epsilon), "channel_axis": axis})


def _nchw(op, x, data_format):
    x = _tensor(op, x)
    if x.ndim != 4:
        raise InvalidArgumentError(f"{op}: input must be 4-D ({data_format}), got shape {x.shape}")
    if data_format == "NHWC":
        return transpose(x, (0, 3, 1, 2)), True
    if data_format != "NCHW":
        raise InvalidArgumentError(f"{op}: data_format must be 'NCHW' or 'NHWC', not {data_format!r}")
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
        raise InvalidArgumentError(f"conv2d: weight must be 4-D (out, in/groups, kh, kw), got {w.shape}")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if groups <= 0 or c % groups or o % groups or cg != c // groups:
        raise InvalidArgumentError(f"conv2d: {c} input channels, weight {w.shape} and groups={groups} do not agree; "
                                   f"need in_channels == groups * weight.shape[1] and out_channels % groups == 0")
    st, dl = shapes.pair("conv2d", "stride", stride), shapes.pair("conv2d", "dilation", dilation)
    pads = shapes.conv_padding("conv2d", padding, (h, wd), (kh, kw), st, dl)
    shapes.window_out("conv2d", h, kh, st[0], dl[0], pads[0] + pads[1])
    shapes.window_out("conv2d", wd, kw, st[1], dl[1], pads[2] + pads[3])
    inputs = (x, w)
    if bias is not None:
        b = _tensor("conv2d", bias).astype(x.dtype)
        if b.shape != (o,):
            raise InvalidArgumentError(f"conv2d: bias must have shape ({o},), got {b.shape}")
        inputs = (x, w, b)
    y = dispatch("conv2d", inputs, {"stride": st, "padding": pads, "dilation": dl, "groups": int(groups)})
    return _back(y, nhwc)


def _pool_args(op, x, kernel_size, stride, padding, ceil_mode):
    k = shapes.pair(op, "kernel_size", kernel_size)
    st = k if stride is None else shapes.pair(op, "stride", stride)
    pads = shapes.conv_padding(op, padding, x.shape[2:], k, st, (1, 1))
    if max(pads[0], pads[1]) > k[0] // 2 or max(pads[2], pads[3]) > k[1] // 2:
        raise InvalidArgumentError(f"{op}: padding {padding} must be at most half the kernel {k}")
    shapes.window_out(op, x.shape[2], k[0], st[0], 1, pads[0] + pads[1], ceil_mode)
    shapes.window_out(op, x.shape[3], k[1], st[1], 1, pads[2] + pads[3], ceil_mode)
    return {"kernel_size": k, "stride": st, "padding": pads, "ceil_mode": bool(ceil_mode)}


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
    attrs["exclusive"] = bool(exclusive)
    return _back(dispatch("avg_pool2d", (x,), attrs), nhwc)


def _adaptive(op, x, output_size, data_format):
    x, nhwc = _nchw(op, x, data_format)
    size = shapes.pair(op, "output_size", output_size)
    if x.shape[2] == 0 or x.shape[3] == 0:
        raise InvalidArgumentError(f"{op}: input spatial size {x.shape[2:]} is empty")
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
