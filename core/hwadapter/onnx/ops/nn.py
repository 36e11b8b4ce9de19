"""Neural-network ONNX ops: convolution, pooling, normalisation, Gemm/MatMul, softmax family, Dropout, Flatten,
Resize/Upsample, DepthToSpace/SpaceToDepth.

hwadapter has 2-D conv/pool primitives only: 1-D ones run as 2-D with a height of 1; 3-D ones are refused."""
from __future__ import annotations

import math

import numpy as np

from . import converter
from .tensor import axes_of
from .training import batch_norm_training

_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


# --- shared helpers ----------------------------------------------------------------------------------------------
def _float_input(ctx, node, ref, what="input"):
    if ctx.dtype(ref) not in _FLOATS:
        ctx.fail(node, f"its {what} is {ctx.dtype(ref).name}; hwadapter's {node.op_type} takes float16, float32 or "
                       f"float64", fix="cast the input to float32 in the model")
    return ref


def _scalar(ctx, value, like):
    """A 0-d constant of `like`'s dtype."""
    return ctx.constant(np.array(value, dtype=ctx.dtype(like)))


def _axis(ctx, node, name, default, rank):
    """Attribute `name` as an axis in 0..rank-1 (negative counts from the end); outside -rank..rank-1 it fails."""
    axis = node.int(name, default)
    if not -rank <= axis < rank:
        ctx.fail(node, f"its {name} {axis} is outside -{rank}..{rank - 1}")
    return axis % rank


def _spatial_rank(ctx, node, x, what="input"):
    """The number of spatial axes of x (N, C, spatial...): 1 or 2; 3-D and others are refused."""
    rank = len(ctx.shape(x))
    if rank not in (3, 4):
        ctx.fail(node, f"its {what} has {rank} axes ({max(rank - 2, 0)} spatial); hwadapter converts 1-D and 2-D "
                       f"{node.op_type} only (N, C, L) or (N, C, H, W)", fix="use a 2-D model")
    return rank - 2


def _as_2d(ctx, x):
    """(N, C, L) as (N, C, 1, L)."""
    n, c, length = ctx.shape(x)
    return ctx.op("reshape", x, shape=(n, c, 1, length))


def _from_2d(ctx, y):
    n, c, _, length = ctx.shape(y)
    return ctx.op("reshape", y, shape=(n, c, length))


def _ints(node, name, default, k, lo=None):
    """A per-spatial-axis int attribute (k values, each at least `lo`), with `default` for each axis when absent."""
    v = node.ints(name, None, length=k, lo=lo)
    return [default] * k if v is None else v


def _pads(ctx, node, in_sizes, kernel, strides, dilations):
    """(begin..., end...) of the spatial axes, from pads or auto_pad (NOTSET, VALID, SAME_UPPER, SAME_LOWER)."""
    k = len(in_sizes)
    auto = node.string("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return _ints(node, "pads", 0, 2 * k, lo=0)
    if auto == "VALID":
        return [0] * (2 * k)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        ctx.fail(node, f"its auto_pad {auto!r} is not one ONNX defines")
    begin, end = [], []
    for size, kk, s, d in zip(in_sizes, kernel, strides, dilations):
        total = max((-(-size // s) - 1) * s + (kk - 1) * d + 1 - size, 0)
        small = total // 2
        begin.append(small if auto == "SAME_UPPER" else total - small)  # SAME_LOWER: the odd one at the beginning
        end.append(total - small if auto == "SAME_UPPER" else small)
    return begin + end


def _window_attrs(ctx, node, x, kernel=None):
    """(kernel, strides, dilations, pads) of a conv/pool node over x's spatial axes."""
    sizes = ctx.shape(x)[2:]
    k = len(sizes)
    kernel = node.ints("kernel_shape", None, lo=1) or [int(i) for i in kernel or []]
    if len(kernel) != k:
        ctx.fail(node, f"its kernel_shape {kernel} does not match the {k} spatial axes of its input")
    strides, dilations = _ints(node, "strides", 1, k, lo=1), _ints(node, "dilations", 1, k, lo=1)
    return kernel, strides, dilations, _pads(ctx, node, sizes, kernel, strides, dilations)


def _lift(values, k, fill):
    """A per-spatial-axis list for 1-D (k == 1) made 2-D: `fill` for the new height axis first."""
    return values if k == 2 else [fill] + values


def _lift_pads(pads, k):
    return pads if k == 2 else [0, pads[0], 0, pads[1]]


def _tblr(pads):
    """(begin_h, begin_w, end_h, end_w) as the kernels' (top, bottom, left, right)."""
    return (pads[0], pads[2], pads[1], pads[3])


# --- convolution ----------------------------------------------------------------------------------------------------
@converter("Conv")
def conv(ctx, node):
    x, w, b = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    _float_input(ctx, node, x)
    k = _spatial_rank(ctx, node, x)
    kernel, strides, dilations, pads = _window_attrs(ctx, node, x, ctx.shape(w)[2:])
    group = node.int("group", 1, lo=1)
    w = ctx.cast(w, ctx.dtype(x))
    if k == 1:
        x, w = _as_2d(ctx, x), _as_2d(ctx, w)
    inputs = (x, w) if b is None else (x, w, ctx.cast(b, ctx.dtype(x)))
    y = ctx.op("conv2d", *inputs, stride=tuple(_lift(strides, k, 1)), padding=_tblr(_lift_pads(pads, k)),
               dilation=tuple(_lift(dilations, k, 1)), groups=group)
    return _from_2d(ctx, y) if k == 1 else y


@converter("ConvTranspose")
def conv_transpose(ctx, node):
    x, w, b = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    _float_input(ctx, node, x)
    k = _spatial_rank(ctx, node, x)
    sizes = ctx.shape(x)[2:]
    kernel = node.ints("kernel_shape", None, lo=1) or [int(i) for i in ctx.shape(w)[2:]]
    strides, dilations = _ints(node, "strides", 1, k, lo=1), _ints(node, "dilations", 1, k, lo=1)
    out_pad = _ints(node, "output_padding", 0, k, lo=0)
    group = node.int("group", 1, lo=1)
    auto, out_shape = node.string("auto_pad", "NOTSET"), node.ints("output_shape", None, lo=1)
    if out_shape is not None and len(out_shape) not in (k, k + 2):
        node.bad("output_shape", f"has {len(out_shape)} values; it must have one per spatial axis ({k})")
    full = [s * (n - 1) + op + (kk - 1) * d + 1 for n, s, op, kk, d in zip(sizes, strides, out_pad, kernel, dilations)]
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        # ONNX's equations: the total padding makes the requested (or input * stride) output; SAME_UPPER puts the
        # smaller half at the beginning, everything else the larger half
        target = [int(i) for i in out_shape][-k:] if out_shape is not None else [n * s for n, s in zip(sizes, strides)]
        total = [f - t for f, t in zip(full, target)]
        begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        end = [t - bb for t, bb in zip(total, begin)]
    elif auto in ("NOTSET", "", "VALID"):
        pads = [0] * (2 * k) if auto == "VALID" else _ints(node, "pads", 0, 2 * k, lo=0)
        begin, end = pads[:k], pads[k:]
    else:
        ctx.fail(node, f"its auto_pad {auto!r} is not one ONNX defines")
    if min(begin) < 0:
        ctx.fail(node, f"its output_shape needs a negative leading padding {begin}", fix="check output_shape")
    extra = [op + max(-e, 0) for op, e in zip(out_pad, end)]  # a negative end padding grows the output: zeros
    end = [max(e, 0) for e in end]
    w = ctx.cast(w, ctx.dtype(x))
    if k == 1:
        x, w = _as_2d(ctx, x), _as_2d(ctx, w)
    pads2 = _lift_pads(begin + end, k)
    inputs = (x, w) if b is None else (x, w, ctx.cast(b, ctx.dtype(x)))
    y = ctx.op("conv_transpose2d", *inputs, stride=tuple(_lift(strides, k, 1)), padding=_tblr(pads2),
               output_padding=tuple(_lift(extra, k, 0)), dilation=tuple(_lift(dilations, k, 1)), groups=group)
    return _from_2d(ctx, y) if k == 1 else y


# --- pooling -------------------------------------------------------------------------------------------------------
def _out_size(size, kernel, stride, dilation, lo, hi, ceil):
    """Windows along one axis (ceil_mode drops a last window that would start in the end padding)."""
    eff = (kernel - 1) * dilation + 1
    span = size + lo + hi - eff
    n = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (n - 1) * stride >= size + lo:
        n -= 1
    return n


def _pool_setup(ctx, node):
    x = ctx.input(node, 0)
    k = _spatial_rank(ctx, node, x)
    kernel, strides, dilations, pads = _window_attrs(ctx, node, x)
    ceil = bool(node.int("ceil_mode", 0))
    if node.string("auto_pad", "NOTSET") not in ("NOTSET", ""):
        ceil = False  # SAME/VALID fix the output size themselves
    if k == 1:
        x = _as_2d(ctx, x)
    kernel, strides, dilations = _lift(kernel, k, 1), _lift(strides, k, 1), _lift(dilations, k, 1)
    pads = _lift_pads(pads, k)
    h, w = ctx.shape(x)[2:]
    outs = [_out_size(s, kk, st, d, pads[i], pads[i + 2], ceil)
            for i, (s, kk, st, d) in enumerate(zip((h, w), kernel, strides, dilations))]
    if min(outs) < 1:
        ctx.fail(node, f"its window {kernel} is larger than the padded input {(h, w)}")
    return x, k, kernel, strides, dilations, pads, ceil, outs


def _windows(ctx, x, kernel, strides, dilations, pads, outs, value):
    """Each window position's (N, C, OH, OW) slice of x padded with `value` (a list of kh * kw refs): the
    decomposition for what the pool kernels do not take (dilation, Indices, include-pad counts with ceil_mode)."""
    h, w = ctx.shape(x)[2:]
    need = [(o - 1) * s + (kk - 1) * d + 1 for o, s, kk, d in zip(outs, strides, kernel, dilations)]
    hi = [max(n - size - p, 0) for n, size, p in zip(need, (h, w), pads[:2])]
    padded = ctx.op("pad", x, pads=((0, 0), (0, 0), (pads[0], hi[0]), (pads[1], hi[1])), mode="constant",
                    value=value) if any(pads[:2]) or any(hi) else x
    refs = []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            starts = (i * dilations[0], j * dilations[1])
            ends = tuple(s + (o - 1) * st + 1 for s, o, st in zip(starts, outs, strides))
            refs.append(ctx.op("slice", padded, axes=(2, 3), starts=starts, ends=ends, steps=tuple(strides)))
    return refs


def _lowest(dtype):
    return float("-inf") if dtype.kind == "f" else (False if dtype == np.bool_ else int(np.iinfo(dtype).min))


@converter("MaxPool")
def max_pool(ctx, node):
    x, k, kernel, strides, dilations, pads, ceil, outs = _pool_setup(ctx, node)
    want_indices = len(node.outputs) > 1 and bool(node.outputs[1])
    if dilations == [1, 1] and not want_indices:
        y = ctx.op("max_pool2d", x, kernel_size=tuple(kernel), stride=tuple(strides), padding=_tblr(pads),
                   ceil_mode=ceil)
        return _from_2d(ctx, y) if k == 1 else y
    dt = ctx.dtype(x)
    wins = _windows(ctx, x, kernel, strides, dilations, pads, outs, _lowest(dt))
    best = wins[0]
    for win in wins[1:]:
        best = ctx.op("maximum", best, win)
    if not want_indices:
        return _from_2d(ctx, best) if k == 1 else best
    if dt.kind != "f":
        ctx.fail(node, "its Indices output is converted for float inputs only")
    # Indices: the flat position (in x's N, C, spatial layout, or column-major spatially with storage_order=1)
    # of the first window element that holds the maximum
    n, c, h, w = ctx.shape(x)
    order = node.int("storage_order", 0, choices=(0, 1))
    pos = np.arange(h * w, dtype=np.int64).reshape(h, w) if order == 0 else \
        np.arange(h * w, dtype=np.int64).reshape(w, h).T
    base = (np.arange(n * c, dtype=np.int64) * (h * w)).reshape(n, c, 1, 1)
    flat = ctx.constant(np.ascontiguousarray(base + pos[None, None]))
    idx_wins = _windows(ctx, flat, kernel, strides, dilations, pads, outs, -1)
    index, found = None, None
    for win, iwin in zip(wins, idx_wins):
        hit = ctx.op("equal", win, best)
        if index is None:
            index, found = ctx.op("where", hit, iwin, ctx.constant(np.full((), -1, np.int64))), hit
        else:
            take = ctx.op("logical_and", hit, ctx.op("logical_not", found))
            index, found = ctx.op("where", take, iwin, index), ctx.op("logical_or", found, hit)
    if k == 1:
        return _from_2d(ctx, best), _from_2d(ctx, index)
    return best, index


@converter("MaxUnpool", values=(2,))
def max_unpool(ctx, node):
    """Zeros with each x value put back at its MaxPool Indices position (flat over the whole output)."""
    x, idx = ctx.input(node, 0), ctx.input(node, 1)
    k = _spatial_rank(ctx, node, x)
    sizes = ctx.shape(x)[2:]
    kernel = node.ints("kernel_shape", lo=1, length=k)
    strides, pads = _ints(node, "strides", 1, k, lo=1), _ints(node, "pads", 0, 2 * k, lo=0)
    shape = tuple(ctx.shape(x)[:2]) + tuple((n - 1) * s + kk - pads[i] - pads[i + k]
                                            for i, (n, s, kk) in enumerate(zip(sizes, strides, kernel)))
    if min(shape[2:]) < 1:
        ctx.fail(node, f"its kernel_shape, strides and pads make an empty output of shape {shape}")
    ctx.fits(shape, ctx.dtype(x))
    flat = ctx.constant(np.zeros((math.prod(shape),), ctx.dtype(x)))
    where = ctx.op("reshape", ctx.cast(idx, np.int64), shape=(math.prod(ctx.shape(idx)), 1))
    values = ctx.op("reshape", x, shape=(math.prod(ctx.shape(x)),))
    y = ctx.op("reshape", ctx.op("scatter_nd", flat, where, values, reduction="none"), shape=shape)
    if ctx.input(node, 2) is None:
        return y
    # a larger output_shape: the indices still address the inferred shape, which is padded with zeros at the end
    # (as onnx's reference implementation, whose results the node cases hold)
    out = tuple(int(s) for s in ctx.require_const(node, 2, "output_shape"))
    if len(out) != len(shape) or any(o < s for o, s in zip(out, shape)):
        ctx.fail(node, f"its output_shape {out} is smaller than the unpooled shape {shape}")
    if out == shape:
        return y
    return ctx.op("pad", y, pads=tuple((0, o - s) for o, s in zip(out, shape)), mode="constant", value=0.0)


def _window_counts(h, w, kernel, strides, dilations, pads, outs, include_pad):
    """How many elements each window averages: real ones, plus the padding with count_include_pad (never the
    room ceil_mode adds past the padded input)."""
    mask = np.zeros((h + pads[0] + pads[2], w + pads[1] + pads[3]), np.float64)
    if include_pad:
        mask[:] = 1
    else:
        mask[pads[0]:pads[0] + h, pads[1]:pads[1] + w] = 1
    need = [(o - 1) * s + (kk - 1) * d + 1 for o, s, kk, d in zip(outs, strides, kernel, dilations)]
    mask = np.pad(mask, ((0, max(need[0] - mask.shape[0], 0)), (0, max(need[1] - mask.shape[1], 0))))
    counts = np.zeros(outs)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            si, sj = i * dilations[0], j * dilations[1]
            counts += mask[si:si + (outs[0] - 1) * strides[0] + 1:strides[0],
                           sj:sj + (outs[1] - 1) * strides[1] + 1:strides[1]]
    return counts


@converter("AveragePool")
def average_pool(ctx, node):
    _float_input(ctx, node, ctx.input(node, 0))
    x, k, kernel, strides, dilations, pads, ceil, outs = _pool_setup(ctx, node)
    # without padding there is none to count: count_include_pad changes nothing (and the window decomposition
    # below makes kh * kw nodes: EfficientNet's AvgPool2d(1280, ceil_mode=True) exported as AveragePool made 1.6M)
    include = bool(node.int("count_include_pad", 0)) and any(pads)
    if dilations == [1, 1] and not include:
        y = ctx.op("avg_pool2d", x, kernel_size=tuple(kernel), stride=tuple(strides), padding=_tblr(pads),
                   ceil_mode=ceil, exclusive=True)
        return _from_2d(ctx, y) if k == 1 else y
    y = _window_sum(ctx, x, kernel, strides, dilations, pads, outs)
    h, w = ctx.shape(x)[2:]
    counts = _window_counts(h, w, kernel, strides, dilations, pads, outs, include)
    y = ctx.op("div", y, ctx.constant(counts.reshape(1, 1, *outs).astype(ctx.dtype(x))))
    return _from_2d(ctx, y) if k == 1 else y


def _window_sum(ctx, x, kernel, strides, dilations, pads, outs):
    wins = _windows(ctx, x, kernel, strides, dilations, pads, outs, 0.0)
    total = wins[0]
    for win in wins[1:]:
        total = ctx.op("add", total, win)
    return total


@converter("LpPool")
def lp_pool(ctx, node):
    _float_input(ctx, node, ctx.input(node, 0))
    x, k, kernel, strides, dilations, pads, ceil, outs = _pool_setup(ctx, node)
    p = _lp(node)
    powered = _lp_power(ctx, x, p)
    y = ctx.op("pow", _window_sum(ctx, powered, kernel, strides, dilations, pads, outs), _scalar(ctx, 1.0 / p, x))
    return _from_2d(ctx, y) if k == 1 else y


def _lp(node) -> float:
    """The p of an Lp pool: positive (1/p is the root taken)."""
    p = node.float("p", 2.0)
    if not p > 0:
        node.bad("p", f"is {p!r}; it must be positive")
    return p


def _lp_power(ctx, x, p):
    """|x| ** p (x * x for p = 2: exact, as the reference squares)."""
    if p == 2:
        return ctx.op("mul", x, x)
    return ctx.op("pow", ctx.op("abs", x), _scalar(ctx, p, x))


@converter("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(ctx, node):
    x = ctx.input(node, 0)
    axes = tuple(range(2, len(ctx.shape(x))))
    if node.op_type == "GlobalMaxPool":
        return ctx.op("max", x, axis=axes, keepdim=True)
    _float_input(ctx, node, x)
    if node.op_type == "GlobalAveragePool":
        return ctx.op("mean", x, axis=axes, keepdim=True)
    p = _lp(node)
    total = ctx.op("sum", _lp_power(ctx, x, p), axis=axes, keepdim=True)
    return ctx.op("pow", total, _scalar(ctx, 1.0 / p, x))


# --- normalisation -----------------------------------------------------------------------------------------------
@converter("BatchNormalization")
def batch_norm(ctx, node):
    x, scale, bias, mean, var = (ctx.input(node, i) for i in range(5))
    _float_input(ctx, node, x)
    if ctx.opset >= 14 and node.int("training_mode", 0):  # any non-zero value is true, as onnx's reference reads it
        return batch_norm_training(ctx, node, x, scale, bias, mean, var)
    if any(node.outputs[1:]):
        if ctx.opset < 14:  # opsets 9-13 leave what their saved_mean/saved_var (or opset 7's) hold unspecified
            ctx.fail(node, f"its optional outputs are opset {ctx.opset}'s training outputs, whose contents onnx does "
                           "not pin down; hwadapter converts training mode from opset 14 on (training_mode=1)",
                     fix="export the model at opset 14 or newer, or in eval mode (one output)")
        ctx.fail(node, "it has running-statistics outputs with training_mode=0, which the operator makes only in "
                       "training mode", fix="set training_mode=1, or drop the extra outputs")
    if not node.int("spatial", 1) and ctx.opset < 9:  # per-activation statistics: (C, H, W)-shaped parameters
        return _batch_norm_elementwise(ctx, node, x, scale, bias, mean, var)
    dt = ctx.dtype(x)
    c = ctx.shape(x)[1]
    params = [ctx.cast(p, dt) for p in (mean, var, scale, bias)]
    if any(ctx.shape(p) != (c,) for p in params):
        ctx.fail(node, f"its parameters are not of shape ({c},)")
    return ctx.op("batch_norm", x, *params, epsilon=node.float("epsilon", 1e-5), channel_axis=1)


def _batch_norm_elementwise(ctx, node, x, scale, bias, mean, var):
    """(x - mean) / sqrt(var + eps) * scale + bias with parameters shaped as x without its batch axis."""
    dt = ctx.dtype(x)
    shape = (1,) + tuple(ctx.shape(x)[1:])
    p = [ctx.op("reshape", ctx.cast(r, dt), shape=shape) for r in (scale, bias, mean, var)]
    inv = ctx.op("rsqrt", ctx.op("add", p[3], _scalar(ctx, node.float("epsilon", 1e-5), x)))
    return ctx.op("add", ctx.op("mul", ctx.op("mul", ctx.op("sub", x, p[2]), inv), p[0]), p[1])


def _normalized(ctx, x, begin, eps):
    """(x - mean) / sqrt(var + eps) over the axes from `begin` on (hwadapter's layer_norm, unit scale)."""
    shape = tuple(ctx.shape(x)[begin:])
    dt = ctx.dtype(x)
    return ctx.op("layer_norm", x, ctx.constant(np.ones(shape, dt)), ctx.constant(np.zeros(shape, dt)),
                  begin_axis=begin, epsilon=float(eps))


def _per_channel(ctx, node, p, x, what):
    """A (C,) parameter shaped (C, 1, ...) to broadcast over x's channel axis."""
    if len(ctx.shape(x)) < 2 or tuple(ctx.shape(p)) != (ctx.shape(x)[1],):
        ctx.fail(node, f"its {what} has shape {ctx.shape(p)}, not (C,) for its input of shape {ctx.shape(x)}")
    return ctx.op("reshape", ctx.cast(p, ctx.dtype(x)), shape=(ctx.shape(x)[1],) + (1,) * (len(ctx.shape(x)) - 2))


@converter("InstanceNormalization")
def instance_norm(ctx, node):
    x, scale, bias = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    _float_input(ctx, node, x)
    y = _normalized(ctx, x, 2, node.float("epsilon", 1e-5))
    return ctx.op("add", ctx.op("mul", y, _per_channel(ctx, node, scale, x, "scale")), _per_channel(ctx, node, bias, x, "bias"))


@converter("LayerNormalization")
def layer_norm(ctx, node):
    x, scale, bias = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    _float_input(ctx, node, x)
    if node.int("stash_type", 1) != 1:
        ctx.fail(node, f"its stash_type {node.int('stash_type')} is not 1 (float32 statistics)")
    shape = ctx.shape(x)
    begin = _axis(ctx, node, "axis", -1, len(shape))
    eps = node.float("epsilon", 1e-5)
    dt = ctx.dtype(x)
    norm = tuple(shape[begin:])
    w = ctx.op("expand", ctx.cast(scale, dt), shape=norm) if ctx.shape(scale) != norm else ctx.cast(scale, dt)
    b = ctx.constant(np.zeros(norm, dt)) if bias is None else ctx.cast(bias, dt)
    if bias is not None and ctx.shape(b) != norm:
        b = ctx.op("expand", b, shape=norm)
    y = ctx.op("layer_norm", x, w, b, begin_axis=begin, epsilon=eps)
    if not any(node.outputs[1:]):
        return y
    # Mean and InvStdDev (float32 statistics, kept axes of size 1), as the ONNX function computes them
    xf = ctx.cast(x, np.float32)
    axes = tuple(range(begin, len(shape)))
    mean = ctx.op("mean", xf, axis=axes, keepdim=True)
    diff = ctx.op("sub", xf, mean)
    var = ctx.op("mean", ctx.op("mul", diff, diff), axis=axes, keepdim=True)
    inv = ctx.op("rsqrt", ctx.op("add", var, ctx.constant(np.array(eps, np.float32))))
    return y, mean, inv


@converter("GroupNormalization")
def group_norm(ctx, node):
    x, scale, bias = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    _float_input(ctx, node, x)
    if node.int("stash_type", 1) != 1:
        ctx.fail(node, f"its stash_type {node.int('stash_type')} is not 1 (float32 statistics)")
    shape = ctx.shape(x)
    groups = node.int("num_groups", lo=1)
    n, c = shape[:2]
    if c % groups:
        ctx.fail(node, f"its {c} channels do not split into {groups} groups")
    grouped = ctx.op("reshape", x, shape=(n, groups, -1))
    y = ctx.op("reshape", _normalized(ctx, grouped, 2, node.float("epsilon", 1e-5)), shape=shape)
    if ctx.shape(scale) == (groups,) and groups != c:  # opset 18: one scale and bias per group
        per = ctx.constant(np.repeat(np.arange(groups, dtype=np.int64), c // groups))
        scale, bias = ctx.op("gather", scale, per, axis=0), ctx.op("gather", bias, per, axis=0)
    return ctx.op("add", ctx.op("mul", y, _per_channel(ctx, node, scale, x, "scale")), _per_channel(ctx, node, bias, x, "bias"))


@converter("RMSNormalization")
def rms_norm(ctx, node):
    x, scale = ctx.input(node, 0), ctx.input(node, 1)
    _float_input(ctx, node, x)
    if node.int("stash_type", 1) != 1:
        ctx.fail(node, f"its stash_type {node.int('stash_type')} is not 1 (float32 statistics)")
    shape = ctx.shape(x)
    begin = _axis(ctx, node, "axis", -1, len(shape))
    xf = ctx.cast(x, np.float32)
    ms = ctx.op("mean", ctx.op("mul", xf, xf), axis=tuple(range(begin, len(shape))), keepdim=True)
    inv = ctx.op("rsqrt", ctx.op("add", ms, ctx.constant(np.array(node.float("epsilon", 1e-5), np.float32))))
    y = ctx.cast(ctx.op("mul", xf, inv), ctx.dtype(x))
    return ctx.op("mul", y, ctx.cast(scale, ctx.dtype(x)))


@converter("MeanVarianceNormalization")
def mean_variance_norm(ctx, node):
    x = _float_input(ctx, node, ctx.input(node, 0))
    rank = len(ctx.shape(x))
    axes = tuple(sorted(axes_of(ctx, node, node.ints("axes", [0, 2, 3]), rank)))
    mean = ctx.op("mean", x, axis=axes, keepdim=True)
    mean_sq = ctx.op("mean", ctx.op("mul", x, x), axis=axes, keepdim=True)
    var = ctx.op("sub", mean_sq, ctx.op("mul", mean, mean))  # E[x^2] - E[x]^2, as the ONNX function
    std = ctx.op("sqrt", var)
    return ctx.op("div", ctx.op("sub", x, mean), ctx.op("add", std, _scalar(ctx, 1e-9, x)))


@converter("LpNormalization")
def lp_norm(ctx, node):
    x = _float_input(ctx, node, ctx.input(node, 0))
    axis = _axis(ctx, node, "axis", -1, len(ctx.shape(x)))
    p = node.int("p", 2)
    if p == 2:
        norm = ctx.op("sqrt", ctx.op("sum", ctx.op("mul", x, x), axis=(axis,), keepdim=True))
    elif p == 1:
        norm = ctx.op("sum", ctx.op("abs", x), axis=(axis,), keepdim=True)
    else:
        ctx.fail(node, f"its p {p} is not 1 or 2")
    # a zero norm means a vector of zeros: it stays zeros (onnx's expected outputs), not 0/0 = NaN
    zero = ctx.constant(np.zeros((), ctx.dtype(x)))
    return ctx.op("where", ctx.op("equal", norm, zero), zero, ctx.op("div", x, norm))


@converter("LRN")
def lrn(ctx, node):
    x = _float_input(ctx, node, ctx.input(node, 0))
    return ctx.op("lrn", x, size=node.int("size", lo=1), alpha=node.float("alpha", 1e-4),
                  beta=node.float("beta", 0.75), bias=node.float("bias", 1.0))


# --- products ----------------------------------------------------------------------------------------------------
@converter("Gemm")
def gemm(ctx, node):
    a, b, c = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    alpha, beta = node.float("alpha", 1.0), node.float("beta", 1.0)
    dt = ctx.dtype(a)
    if dt not in _FLOATS and (alpha != 1 or beta != 1):
        ctx.fail(node, f"alpha/beta other than 1 on {dt.name} inputs are not converted")
    y = ctx.op("matmul", a, ctx.cast(b, dt), transpose_x=bool(node.int("transA", 0)),
               transpose_y=bool(node.int("transB", 0)))
    if alpha != 1:
        y = ctx.op("mul", y, _scalar(ctx, alpha, y))
    if c is None or beta == 0:
        return y
    c = ctx.cast(c, dt)
    if beta != 1:
        c = ctx.op("mul", c, _scalar(ctx, beta, c))
    return ctx.op("add", y, c)


@converter("MatMul")
def matmul(ctx, node):
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    if ctx.dtype(a) != ctx.dtype(b):
        ctx.fail(node, f"its inputs are {ctx.dtype(a).name} and {ctx.dtype(b).name}")
    if ctx.dtype(a) == np.bool_:
        ctx.fail(node, "bool MatMul is not converted")
    return ctx.op("matmul", a, b)


# --- softmax family --------------------------------------------------------------------------------------------------
def _coerced(ctx, node, x, fn):
    """fn(x2, axis) applied ONNX's way: before opset 13 over x flattened to 2-D at `axis` (default 1), from 13 along
    `axis` (default -1)."""
    shape = ctx.shape(x)
    rank = max(len(shape), 1)
    if ctx.opset >= 13:
        return fn(x, _axis(ctx, node, "axis", -1, rank))
    axis = _axis(ctx, node, "axis", 1, rank)  # the default 1 on a 1-D input too: the schema and onnxruntime refuse it
    flat = ctx.op("reshape", x, shape=(math.prod(shape[:axis]), math.prod(shape[axis:])))
    return ctx.op("reshape", fn(flat, 1), shape=shape)


@converter("Softmax", "LogSoftmax")
def softmax(ctx, node):
    x = _float_input(ctx, node, ctx.input(node, 0))
    op = "softmax" if node.op_type == "Softmax" else "log_softmax"
    if not ctx.shape(x):
        ctx.fail(node, "its input is 0-d")
    if ctx.dtype(x) == np.float16 and op == "softmax":
        return _coerced(ctx, node, x, lambda v, axis: _softmax_steps(ctx, v, axis))
    return _coerced(ctx, node, x, lambda v, axis: ctx.op(op, v, axis=axis))


def _softmax_steps(ctx, x, axis):
    """Softmax as ONNX defines it (its function body), each step rounded to x's dtype: for float16 the fused softmax
    (float32 throughout, rounded once) is closer to the truth but a float16 ulp off the spec's result."""
    e = ctx.op("exp", ctx.op("sub", x, ctx.op("max", x, axis=(axis,), keepdim=True)))
    return ctx.op("div", e, ctx.op("sum", e, axis=(axis,), keepdim=True))


@converter("Hardmax")
def hardmax(ctx, node):
    x = ctx.input(node, 0)
    if not ctx.shape(x):
        ctx.fail(node, "its input is 0-d")

    def one_hot(v, axis):
        shape = ctx.shape(v)
        first = ctx.op("argmax", v, axis=axis, keepdim=True)  # the first of equal maxima, as ONNX says
        iota = np.arange(shape[axis], dtype=np.int64).reshape([-1 if a == axis else 1 for a in range(len(shape))])
        return ctx.cast(ctx.op("equal", first, ctx.constant(iota)), ctx.dtype(v))
    return _coerced(ctx, node, x, one_hot)


# --- Dropout, Flatten ----------------------------------------------------------------------------------------------
def _dropout_values(ctx, node) -> tuple:
    """Its training_mode (input 2, from opset 12) is read when given, and its ratio (input 1) when that is true."""
    if ctx.opset < 12:
        return ()
    mode = ctx.const(ctx.input(node, 2))
    return (2, 1) if mode is not None and mode.size == 1 and bool(mode.reshape(-1)[0]) else (2,)


def _one_value(ctx, node, i, what):
    """The node's i-th input, known at conversion, as its one value."""
    arr = np.asarray(ctx.require_const(node, i, what))
    if arr.size != 1:
        ctx.fail(node, f"its {what} has shape {arr.shape}; it must be a scalar")
    return arr.reshape(-1)[0]


@converter("Dropout", values=_dropout_values)
def dropout(ctx, node):
    """Inference, or training with a ratio of 0: the identity, and a mask of all true (opset 7-11 have no training
    mode; from 12 training_mode with a non-zero ratio drops at random, which is refused: onnx's expected outputs are
    draws of numpy's generator, which hwadapter's does not reproduce)."""
    x = ctx.input(node, 0)
    if ctx.opset >= 12:
        if ctx.input(node, 2) is not None:
            mode = _one_value(ctx, node, 2, "training_mode")
            if bool(mode) and (ctx.input(node, 1) is None or float(_one_value(ctx, node, 1, "ratio")) != 0):
                ctx.fail(node, "training_mode=True with a non-zero ratio drops at random, and hwadapter has no "
                               "random generator matching onnx's", fix="export the model in eval mode")
    if len(node.outputs) < 2 or not node.outputs[1]:
        return x
    mask_dtype = np.bool_ if ctx.opset >= 10 else ctx.dtype(x)  # before opset 10 the mask has x's type
    return x, ctx.constant(np.ones(ctx.shape(x), mask_dtype))


@converter("Flatten")
def flatten(ctx, node):
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    axis = node.int("axis", 1, lo=-len(shape), hi=len(shape))
    axis = axis + len(shape) if axis < 0 else axis
    return ctx.op("reshape", x, shape=(math.prod(shape[:axis]), math.prod(shape[axis:])))


# --- DepthToSpace, SpaceToDepth ------------------------------------------------------------------------------------
@converter("DepthToSpace")
def depth_to_space(ctx, node):
    x = ctx.input(node, 0)
    n, c, h, w = ctx.shape(x)
    b = node.int("blocksize", lo=1)
    mode = node.string("mode", "DCR", choices=("DCR", "CRD"))
    if mode == "DCR":
        t = ctx.op("reshape", x, shape=(n, b, b, c // (b * b), h, w))
        t = ctx.op("transpose", t, perm=(0, 3, 4, 1, 5, 2))
    else:  # CRD
        t = ctx.op("reshape", x, shape=(n, c // (b * b), b, b, h, w))
        t = ctx.op("transpose", t, perm=(0, 1, 4, 2, 5, 3))
    return ctx.op("reshape", t, shape=(n, c // (b * b), h * b, w * b))


@converter("SpaceToDepth")
def space_to_depth(ctx, node):
    x = ctx.input(node, 0)
    n, c, h, w = ctx.shape(x)
    b = node.int("blocksize", lo=1)
    mode = node.string("mode", "DCR", choices=("DCR", "CRD"))
    t = ctx.op("reshape", x, shape=(n, c, h // b, b, w // b, b))
    t = ctx.op("transpose", t, perm=(0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
    return ctx.op("reshape", t, shape=(n, c * b * b, h // b, w // b))


# --- Resize, Upsample ----------------------------------------------------------------------------------------------
_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                "tf_crop_and_resize", "tf_half_pixel_for_nn")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_op(ctx, node, x, sizes, scales, mode, **attrs):
    if mode not in ("nearest", "linear", "cubic"):
        ctx.fail(node, f"its mode {mode!r} is not nearest, linear or cubic")
    if mode != "nearest":
        _float_input(ctx, node, x, "input (for linear and cubic modes)")
    if any(s <= 0 for s in sizes):
        ctx.fail(node, f"its output shape {tuple(sizes)} is empty")
    return ctx.op("resize", x, sizes=tuple(int(s) for s in sizes), scales=tuple(float(s) for s in scales), mode=mode,
                  **attrs)


@converter("Upsample", values=(1,))
def upsample(ctx, node):
    x = ctx.input(node, 0)
    scales = node.floats("scales") if ctx.opset < 9 else ctx.require_const(node, 1, "scales")
    return _resize_10(ctx, node, x, np.asarray(scales, np.float32))


def _resize_10(ctx, node, x, scales):
    """Upsample and opset-10 Resize: asymmetric coordinates; nearest takes the sample at or before each position
    (enlarging only: shrinking rounds another way there)."""
    mode = node.string("mode", "nearest")
    if mode in ("bilinear",):
        mode = "linear"
    shape = ctx.shape(x)
    if len(scales) != len(shape):
        ctx.fail(node, f"its scales {list(scales)} do not have one value per axis of its {len(shape)}-D input")
    if mode == "nearest" and any(s < 1 for s in scales):
        ctx.fail(node, "nearest downscaling of opset-10 Resize/Upsample rounds differently; not converted",
                 fix="use Resize of opset 11 or newer")
    sizes = [int(float(s) * n) for s, n in zip(scales, shape)]
    return _resize_op(ctx, node, x, sizes, [float(s) for s in scales], mode,
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@converter("Resize", values=(1, 2, 3))
def resize(ctx, node):
    x = ctx.input(node, 0)
    if ctx.opset < 11:
        return _resize_10(ctx, node, x, np.asarray(ctx.require_const(node, 1, "scales"), np.float32))
    shape = ctx.shape(x)
    r = len(shape)
    antialias = bool(node.int("antialias", 0))
    if antialias and node.string("mode", "nearest") == "nearest":
        ctx.fail(node, "antialias=1 with mode nearest is not defined")
    coord = node.string("coordinate_transformation_mode", "half_pixel")
    nearest = node.string("nearest_mode", "round_prefer_floor")
    if coord not in _COORD_MODES or nearest not in _NEAREST_MODES:
        ctx.fail(node, f"its coordinate_transformation_mode {coord!r} or nearest_mode {nearest!r} is unknown")
    axes = axes_of(ctx, node, node.ints("axes", list(range(r))), r)
    roi = ctx.input(node, 1)
    roi = None if roi is None else np.asarray(ctx.require_const(node, 1, "roi"), np.float64).ravel()
    scales_ref, sizes_ref = ctx.input(node, 2), ctx.input(node, 3)
    scales = None if scales_ref is None else np.asarray(ctx.require_const(node, 2, "scales"), np.float32).ravel()
    sizes = None if sizes_ref is None else np.asarray(ctx.require_const(node, 3, "sizes"), np.int64).ravel()
    if scales is not None and scales.size == 0:
        scales = None
    if sizes is not None and sizes.size == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        ctx.fail(node, "it needs exactly one of scales and sizes")
    full_roi = None
    if coord == "tf_crop_and_resize":
        if roi is None or roi.size != 2 * len(axes):
            ctx.fail(node, "tf_crop_and_resize needs an roi of (start, end) for each resized axis")
        full_roi = [0.0] * r + [1.0] * r
        for i, a in enumerate(axes):
            full_roi[a], full_roi[a + r] = float(roi[i]), float(roi[i + len(axes)])
    if scales is not None:
        if scales.size != len(axes):
            ctx.fail(node, f"its scales {scales.tolist()} do not have one value per resized axis")
        all_scales = [1.0] * r
        for a, s in zip(axes, scales):
            all_scales[a] = float(s)
        out = [int(all_scales[i] * shape[i]) for i in range(r)]  # truncated, as the reference implementation
    else:
        if sizes.size != len(axes):
            ctx.fail(node, f"its sizes {sizes.tolist()} do not have one value per resized axis")
        out = list(shape)
        for a, s in zip(axes, sizes):
            out[a] = int(s)
        all_scales = [out[i] / shape[i] if shape[i] else 1.0 for i in range(r)]
        policy = node.string("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                ctx.fail(node, f"its keep_aspect_ratio_policy {policy!r} is unknown")
            picked = [all_scales[a] for a in axes]
            scale = min(picked) if policy == "not_larger" else max(picked)
            all_scales = [scale if i in axes else 1.0 for i in range(r)]
            out = [int(scale * shape[i] + 0.5) if i in axes else shape[i] for i in range(r)]
    return _resize_op(ctx, node, x, out, all_scales, node.string("mode", "nearest"),
                      coordinate_transformation_mode=coord, nearest_mode=nearest,
                      cubic_coeff_a=node.float("cubic_coeff_a", -0.75),
                      exclude_outside=bool(node.int("exclude_outside", 0)),
                      extrapolation_value=node.float("extrapolation_value", 0.0),
                      roi=None if full_roi is None else tuple(full_roi), **({"antialias": True} if antialias else {}))
