"""Quantization ONNX ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul,
ConvInteger, QLinearConv, for the integer types hwadapter has (int8, uint8, int16, uint16; int32 where ONNX allows it;
the integer products take 8-bit types only).

Integer products accumulate in int32 (hwadapter's integer matmul; convolutions as im2col + integer matmul), never
in float. Where the float arithmetic of requantization is not pinned down by the spec, it is done as onnx's reference
implementation does it (the node tests' oracle): its promotions are written out below."""
from __future__ import annotations

import math

import numpy as np

from . import converter
from .elementwise import cast, const
from .nn import _lift, _lift_pads, _spatial_rank, _window_attrs

INT32 = np.dtype(np.int32)
FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
_FLOATS = (np.dtype(np.float16), FLOAT32, FLOAT64)
#: Quantized types hwadapter has, with their ranges (4-bit, 2-bit, float8/4 have no hwadapter dtype).
_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127), np.dtype(np.int16): (-32768, 32767),
           np.dtype(np.uint16): (0, 65535)}
_BIG = float(2 ** 30)  # rounded quotients are clamped to +-2^30 before the int32 cast (exact in float32/64)


# --- shared helpers ----------------------------------------------------------------------------------------------
def _axis(ctx, node, rank):
    """The axis attribute (default 1) made non-negative, or None when it is outside the rank (an error only where a
    per-axis or blocked parameter needs it: a scalar scale ignores it)."""
    axis = node.int("axis", 1)
    return axis % rank if -rank <= axis < rank else None


def _param(ctx, node, p, shape, axis, block, what):
    """Scale or zero point `p` as a ref broadcastable to `shape`: per tensor, per axis, or blocked (ONNX's rules)."""
    pshape = ctx.shape(p)
    if len(pshape) == 0:
        return p
    if math.prod(pshape) == 1 and len(pshape) == 1:
        return ctx.op("reshape", p, shape=())
    if axis is None:
        ctx.fail(node, f"its axis {node.int('axis', 1)} is outside the input's {len(shape)} axes")
    if not block:
        if len(pshape) != 1 or pshape[0] != shape[axis]:
            ctx.fail(node, f"its {what} of shape {pshape} is neither a scalar nor 1-D of the input's size "
                           f"{shape[axis]} along axis {axis}")
        dims = [1] * len(shape)
        dims[axis] = pshape[0]
        return ctx.op("reshape", p, shape=tuple(dims))
    nb = -(-shape[axis] // block)
    want = tuple(nb if i == axis else s for i, s in enumerate(shape))
    if tuple(pshape) != want:
        ctx.fail(node, f"its blocked {what} has shape {pshape}, not {want} (input {shape}, block_size {block} along "
                       f"axis {axis})")
    inner = tuple(pshape[:axis + 1]) + (1,) + tuple(pshape[axis + 1:])
    big = tuple(pshape[:axis + 1]) + (block,) + tuple(pshape[axis + 1:])
    rep = ctx.op("expand", ctx.op("reshape", p, shape=inner), shape=big)
    merged = tuple(pshape[:axis]) + (nb * block,) + tuple(pshape[axis + 1:])
    rep = ctx.op("reshape", rep, shape=merged)
    if nb * block == shape[axis]:
        return rep
    return ctx.op("slice", rep, axes=(axis,), starts=(0,), ends=(shape[axis],), steps=(1,))


def _block(ctx, node):
    block = node.int("block_size", 0)
    if block < 0:
        ctx.fail(node, f"its block_size {block} is negative")
    return block


def _saturate_int(ctx, q, zp, out_dtype):
    """round-half-even(q) + zp clamped to out_dtype's range, the sum in int32 (exact), as out_dtype."""
    lo, hi = _RANGES[out_dtype]
    big = min(_BIG, float(np.finfo(ctx.dtype(q)).max))  # 2^30 is inf in float16: its largest finite value there
    r = ctx.op("clip", ctx.op("round", q), min=-big, max=big)
    # nan has no integer: onnx's reference and onnxruntime both give the type's lowest value (their int32 cast of
    # nan is INT_MIN, then clamped), which is made explicit here rather than left to a device's cast
    r = ctx.op("where", ctx.op("not_equal", r, r), const(ctx, -big, ctx.dtype(r)), r)
    r = cast(ctx, r, INT32)
    if zp is not None:
        r = ctx.op("add", r, cast(ctx, zp, INT32))
    return cast(ctx, ctx.op("clip", r, min=lo, max=hi), out_dtype)


def _int_dtype(ctx, node, ref, what, allowed=tuple(_RANGES)):
    dt = ctx.dtype(ref)
    if dt not in allowed:
        ctx.fail(node, f"its {what} is {dt.name}; hwadapter converts {', '.join(d.name for d in allowed)} here")
    return dt


def _onnx_dtype(ctx, node, elem_type, what):
    from onnx import helper  # lazy: onnx is an optional package, and load_all lists the converters without it
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(elem_type)))
    except Exception:  # noqa: BLE001 - an element type numpy has no dtype for
        ctx.fail(node, f"its {what} {elem_type} is not an element type hwadapter has")


def _exact(ctx, op, a, b):
    """a op b correctly rounded in their dtype: float16 goes through float32 (exact for * and correctly rounded
    for /, then rounded once), as devices may keep float16 intermediates in float32 otherwise."""
    if ctx.dtype(a) != np.float16:
        return ctx.op(op, a, b)
    return cast(ctx, ctx.op(op, cast(ctx, a, FLOAT32), cast(ctx, b, FLOAT32)), np.float16)


# --- QuantizeLinear / DequantizeLinear ---------------------------------------------------------------------------
@converter("QuantizeLinear")
def quantize_linear(ctx, node):
    """y = saturate(round_half_even(x / scale) + zero_point): per tensor, per axis or blocked."""
    x, scale, zp = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    xdt, sdt = ctx.dtype(x), ctx.dtype(scale)
    if xdt not in _FLOATS:
        # int32 x (QuantizeLinear-10..) divides in a promoted float that the spec leaves open
        ctx.fail(node, f"its input is {xdt.name}; hwadapter quantizes float16, float32 and float64 inputs")
    out = node.int("output_dtype", 0)
    out = _onnx_dtype(ctx, node, out, "output_dtype") if out else None
    if zp is not None:
        if out is not None and out != ctx.dtype(zp):
            ctx.fail(node, f"its output_dtype {out.name} differs from its zero point's {ctx.dtype(zp).name}")
        out = ctx.dtype(zp)
    out = out or np.dtype(np.uint8)
    if out not in _RANGES:
        ctx.fail(node, f"it quantizes to {out.name}; hwadapter converts uint8, int8, uint16 and int16 quantization")
    precision = node.int("precision", 0)
    if precision:
        work = _onnx_dtype(ctx, node, precision, "precision")
        if work not in _FLOATS:
            ctx.fail(node, f"its precision {work.name} is not a float dtype hwadapter has")
    elif sdt == xdt:
        work = xdt
    else:
        ctx.fail(node, f"its input is {xdt.name} and its scale {sdt.name}: the division's precision is not fixed "
                       f"without the precision attribute")
    if work == np.float16 and ctx.opset < 23:
        # opset 23 fixes the division's precision (the scale's type); before it, float16 or float32 division
        # (onnx's reference, onnxruntime) are both read from the spec, and they round differently
        ctx.fail(node, "float16 quantization before opset 23 (where the division's precision is fixed) is not "
                       "converted", fix="use float32 inputs, or opset 23")
    shape = ctx.shape(x)
    block = _block(ctx, node)
    axis = _axis(ctx, node, len(shape))
    if ctx.opset < 13 and math.prod(ctx.shape(scale)) != 1:
        ctx.fail(node, "QuantizeLinear before opset 13 takes a scalar scale")
    s = _param(ctx, node, scale, shape, axis, block, "scale")
    z = _param(ctx, node, zp, shape, axis, block, "zero point") if zp is not None else None
    q = _exact(ctx, "div", cast(ctx, x, work), cast(ctx, s, work))
    return _saturate_int(ctx, q, z, out)


@converter("DequantizeLinear")
def dequantize_linear(ctx, node):
    """y = (x - zero_point) * scale, in float32 (float64 for a float64 scale) as onnx's reference, rounded once to
    the output dtype (the scale's, or output_dtype)."""
    x, scale, zp = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    xdt = _int_dtype(ctx, node, x, "input", tuple(_RANGES) + (INT32,))
    sdt = ctx.dtype(scale)
    if sdt not in _FLOATS:
        ctx.fail(node, f"its scale is {sdt.name}, not a float dtype hwadapter has")
    out = node.int("output_dtype", 0)
    out = _onnx_dtype(ctx, node, out, "output_dtype") if out else sdt
    if out not in _FLOATS:
        ctx.fail(node, f"its output_dtype {out.name} is not a float dtype hwadapter has")
    if zp is not None and ctx.dtype(zp) != xdt:
        ctx.fail(node, f"its zero point is {ctx.dtype(zp).name} and its input {xdt.name}; ONNX takes one type")
    if xdt == INT32 and zp is not None:
        z = ctx.const(zp)
        if z is None or np.any(z != 0):
            # x - zp would be computed in float64 from a rounded float32 x: refused rather than mimicked
            ctx.fail(node, "an int32 input with a zero point that is not a constant 0 is not converted")
        zp = None
    work = FLOAT64 if sdt == FLOAT64 else FLOAT32
    shape = ctx.shape(x)
    block = _block(ctx, node)
    axis = _axis(ctx, node, len(shape))
    s = _param(ctx, node, scale, shape, axis, block, "scale")
    dx = cast(ctx, x, work)  # 8- and 16-bit integers are exact in float32; int32 rounds as the reference's astype does
    if zp is not None:
        dx = ctx.op("sub", dx, cast(ctx, _param(ctx, node, zp, shape, axis, block, "zero point"), work))
    return cast(ctx, ctx.op("mul", dx, cast(ctx, s, work)), out)


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx, node):
    """uint8 quantization with scale and zero point from x's range (including 0), in float32 as the spec's formula."""
    x = ctx.input(node, 0)
    if ctx.dtype(x) != FLOAT32:
        ctx.fail(node, f"its input is {ctx.dtype(x).name}; ONNX's DynamicQuantizeLinear takes float32")
    if math.prod(ctx.shape(x)) == 0:
        ctx.fail(node, "its input is empty: its range is undefined")
    zero, dt = const(ctx, 0, FLOAT32), FLOAT32
    hi = ctx.op("maximum", ctx.op("max", x, axis=None), zero)
    lo = ctx.op("minimum", ctx.op("min", x, axis=None), zero)
    span = ctx.op("where", ctx.op("equal", hi, lo), const(ctx, 1, dt), ctx.op("sub", hi, lo))
    scale = ctx.op("div", span, const(ctx, 255, dt))
    zp = ctx.op("sub", zero, ctx.op("div", lo, scale))
    zp = ctx.op("round", ctx.op("clip", zp, min=0.0, max=255.0))
    y = ctx.op("add", ctx.op("round", ctx.op("div", x, scale)), zp)
    y = cast(ctx, ctx.op("clip", y, min=0.0, max=255.0), np.uint8)
    return y, scale, cast(ctx, zp, np.uint8)


# --- integer products ----------------------------------------------------------------------------------------------
def _centered(ctx, node, v, zp, what, zp_shape_ok):
    """v - zp in int32 (exact for 8-bit inputs); zp of a shape `zp_shape_ok(shape)` accepts, or a scalar."""
    _int_dtype(ctx, node, v, what, (np.dtype(np.uint8), np.dtype(np.int8)))
    v32 = cast(ctx, v, INT32)
    if zp is None:
        return v32
    if ctx.dtype(zp) != ctx.dtype(v):
        ctx.fail(node, f"its {what} zero point is {ctx.dtype(zp).name} and {what} {ctx.dtype(v).name}")
    zshape = ctx.shape(zp)
    if math.prod(zshape) == 1:
        z = ctx.op("reshape", zp, shape=())
    else:
        target = zp_shape_ok(zshape)
        if target is None:
            ctx.fail(node, f"its {what} zero point of shape {zshape} is not a scalar or a layout hwadapter converts")
        z = ctx.op("reshape", zp, shape=target)
    return ctx.op("sub", v32, cast(ctx, z, INT32))


def _check_accumulation(ctx, node, k):
    """Products of 8-bit values less their zero points are below 2^16 in size: k of them fit int32 if k <= 33025."""
    if k * 255 * 255 > 2 ** 31 - 1:
        ctx.fail(node, f"its reduction length {k} could overflow int32 accumulation")


@converter("MatMulInteger")
def matmul_integer(ctx, node):
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    ash, bsh = ctx.shape(a), ctx.shape(b)
    if len(ash) < 2 or len(bsh) < 2:
        ctx.fail(node, "1-D MatMulInteger operands are not converted")
    m, n = ash[-2], bsh[-1]
    # the spec's per-row a zero point (M, or (..., M, 1)) and per-column b zero point (N, or (..., 1, N))
    a32 = _centered(ctx, node, a, ctx.input(node, 2), "A", lambda s: (m, 1) if tuple(s) == (m,) else (
        tuple(s) if len(s) == len(ash) and tuple(s[-2:]) == (m, 1) else None))
    b32 = _centered(ctx, node, b, ctx.input(node, 3), "B", lambda s: (n,) if tuple(s) == (n,) else (
        tuple(s) if len(s) == len(bsh) and tuple(s[-2:]) == (1, n) else None))
    _check_accumulation(ctx, node, ash[-1])
    return ctx.op("matmul", a32, b32)


def _scalar_scale(ctx, node, s, what):
    if math.prod(ctx.shape(s)) != 1 or ctx.dtype(s) not in _FLOATS:
        ctx.fail(node, f"its {what} of shape {ctx.shape(s)} ({ctx.dtype(s).name}) is not a float scalar")
    return ctx.op("reshape", s, shape=())


def _requantize(ctx, node, acc, multiplier, yzp, out_dtype):
    """round_half_even(acc * multiplier + y_zero_point) clamped to out_dtype, in float64: onnx's reference
    multiplies the int32 accumulator by a float scale in float64 (numpy's int32 x float promotion)."""
    lo, hi = _RANGES[out_dtype]
    d = ctx.op("mul", cast(ctx, acc, FLOAT64), cast(ctx, multiplier, FLOAT64))
    if yzp is not None:
        d = ctx.op("add", d, cast(ctx, yzp, FLOAT64))
    d = ctx.op("clip", ctx.op("round", d), min=float(lo), max=float(hi))
    return cast(ctx, d, out_dtype)


@converter("QLinearMatMul")
def qlinear_matmul(ctx, node):
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = (ctx.input(node, i) for i in range(8))
    if ctx.shape(a) == () or ctx.shape(b) == () or len(ctx.shape(a)) < 2 or len(ctx.shape(b)) < 2:
        ctx.fail(node, "1-D QLinearMatMul operands are not converted")
    scalar_zp = (lambda s: None)  # per-row/column zero points: refused (the reference only broadcasts scalars)
    a32 = _centered(ctx, node, a, a_zp, "a", scalar_zp)
    b32 = _centered(ctx, node, b, b_zp, "b", scalar_zp)
    _check_accumulation(ctx, node, ctx.shape(a)[-1])
    sa, sb, sy = (_scalar_scale(ctx, node, s, w) for s, w in ((a_s, "a_scale"), (b_s, "b_scale"), (y_s, "y_scale")))
    if len({ctx.dtype(sa), ctx.dtype(sb), ctx.dtype(sy)}) != 1:
        ctx.fail(node, "its scales have different dtypes")
    out = ctx.dtype(y_zp) if y_zp is not None else ctx.dtype(a)
    _int_dtype(ctx, node, y_zp if y_zp is not None else a, "output", (np.dtype(np.uint8), np.dtype(np.int8)))
    if y_zp is not None and math.prod(ctx.shape(y_zp)) != 1:
        ctx.fail(node, f"its y_zero_point of shape {ctx.shape(y_zp)} is not a scalar")
    mult = _exact(ctx, "div", _exact(ctx, "mul", sa, sb), sy)  # in the scales' dtype, as the reference
    acc = ctx.op("matmul", a32, b32)
    yz = ctx.op("reshape", y_zp, shape=()) if y_zp is not None else None
    return _requantize(ctx, node, acc, mult, yz, out)


def _int_conv(ctx, node, x32, w32):
    """ONNX Conv of int32 x (N, C, L) or (N, C, H, W) and w, accumulated in int32: im2col (pad, strided slices)
    and one batched integer matmul per group; the padding is 0 (the zero point, after it is subtracted)."""
    k = _spatial_rank(ctx, node, x32)
    kernel, strides, dilations, pads = _window_attrs(ctx, node, x32, ctx.shape(w32)[2:])
    if k == 1:
        n_, c_, l_ = ctx.shape(x32)
        x32 = ctx.op("reshape", x32, shape=(n_, c_, 1, l_))
        o_, cw_, kl_ = ctx.shape(w32)
        w32 = ctx.op("reshape", w32, shape=(o_, cw_, 1, kl_))
    kernel, strides, dilations = _lift(kernel, k, 1), _lift(strides, k, 1), _lift(dilations, k, 1)
    pads = _lift_pads(pads, k)  # (begin_h, begin_w, end_h, end_w)
    n, c, h, w = ctx.shape(x32)
    m, cg, kh, kw = ctx.shape(w32)
    groups = node.int("group", 1)
    if groups < 1 or c != cg * groups or m % groups:
        ctx.fail(node, f"its group {groups} does not fit {c} input channels, weights {ctx.shape(w32)}")
    if (kh, kw) != tuple(kernel):
        ctx.fail(node, f"its kernel_shape {kernel} differs from the weights' {(kh, kw)}")
    _check_accumulation(ctx, node, cg * kh * kw)
    if any(pads):
        x32 = ctx.op("pad", x32, pads=((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), mode="constant",
                     value=0)
    hp, wp = h + pads[0] + pads[2], w + pads[1] + pads[3]
    oh = (hp - ((kh - 1) * dilations[0] + 1)) // strides[0] + 1
    ow = (wp - ((kw - 1) * dilations[1] + 1)) // strides[1] + 1
    if oh < 1 or ow < 1:
        ctx.fail(node, f"its output would be empty ({oh} x {ow})")
    cols = []
    for i in range(kh):
        for j in range(kw):
            top, left = i * dilations[0], j * dilations[1]
            win = ctx.op("slice", x32, axes=(2, 3), starts=(top, left),
                         ends=(top + (oh - 1) * strides[0] + 1, left + (ow - 1) * strides[1] + 1),
                         steps=tuple(strides))
            cols.append(ctx.op("reshape", win, shape=(n, c, 1, oh * ow)))
    col = cols[0] if len(cols) == 1 else ctx.op("concat", *cols, axis=2)  # (N, C, KH*KW, L): W's (C, KH, KW) order
    col = ctx.op("reshape", col, shape=(n, groups, cg * kh * kw, oh * ow))
    wm = ctx.op("reshape", w32, shape=(groups, m // groups, cg * kh * kw))
    y = ctx.op("matmul", wm, col)  # (N, G, M/G, L)
    y = ctx.op("reshape", y, shape=(n, m, oh, ow))
    return ctx.op("reshape", y, shape=(n, m, ow)) if k == 1 else y


def _w_zp_shape(m, rank):
    """Per-output-channel weight zero point (M) as (M, 1, ..., 1)."""
    return lambda s: (m,) + (1,) * (rank - 1) if len(s) == 1 and s[0] == m else None


@converter("ConvInteger")
def conv_integer(ctx, node):
    x, w, xzp, wzp = (ctx.input(node, i) for i in range(4))
    x32 = _centered(ctx, node, x, xzp, "x", lambda s: None)  # x's zero point is a scalar
    w32 = _centered(ctx, node, w, wzp, "w", _w_zp_shape(ctx.shape(w)[0], len(ctx.shape(w))))
    return _int_conv(ctx, node, x32, w32)


@converter("QLinearConv")
def qlinear_conv(ctx, node):
    x, xs, xzp, w, ws, wzp, ys, yzp, bias = (ctx.input(node, i) for i in range(9))
    x32 = _centered(ctx, node, x, xzp, "x", lambda s: None)
    m, wrank = ctx.shape(w)[0], len(ctx.shape(w))
    w32 = _centered(ctx, node, w, wzp, "w", _w_zp_shape(m, wrank))
    acc = _int_conv(ctx, node, x32, w32)
    rank = len(ctx.shape(acc))
    if bias is not None:
        if ctx.dtype(bias) != INT32 or tuple(ctx.shape(bias)) != (m,):
            ctx.fail(node, f"its bias is {ctx.dtype(bias).name} of shape {ctx.shape(bias)}, not int32 ({m},)")
        acc = ctx.op("add", acc, ctx.op("reshape", bias, shape=(m,) + (1,) * (rank - 2)))
    sx, sy = _scalar_scale(ctx, node, xs, "x_scale"), _scalar_scale(ctx, node, ys, "y_scale")
    if ctx.dtype(ws) not in _FLOATS or len({ctx.dtype(sx), ctx.dtype(ws), ctx.dtype(sy)}) != 1:
        ctx.fail(node, "its scales are not of one float dtype")
    wshape = ctx.shape(ws)
    if math.prod(wshape) == 1:
        sw = ctx.op("reshape", ws, shape=())
    elif tuple(wshape) == (m,):
        sw = ctx.op("reshape", ws, shape=(m,) + (1,) * (rank - 2))
    else:
        ctx.fail(node, f"its w_scale of shape {wshape} is neither a scalar nor per output channel ({m},)")
    out_ref = yzp if yzp is not None else x
    out = _int_dtype(ctx, node, out_ref, "output", (np.dtype(np.uint8), np.dtype(np.int8)))
    if yzp is not None and math.prod(ctx.shape(yzp)) != 1:
        ctx.fail(node, f"its y_zero_point of shape {ctx.shape(yzp)} is not a scalar")
    mult = _exact(ctx, "div", _exact(ctx, "mul", sx, sw), sy)  # in the scales' dtype, as the reference
    yz = ctx.op("reshape", yzp, shape=()) if yzp is not None else None
    return _requantize(ctx, node, acc, mult, yz, out)
