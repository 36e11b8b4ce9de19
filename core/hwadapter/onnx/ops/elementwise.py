"""Elementwise ONNX ops: arithmetic, comparisons, logic, bitwise, unary math, Cast, Clip, Where and the variadic
Sum/Mean/Max/Min (activations are in activation.py). ONNX broadcasting (opset 7+) is numpy's, as hwadapter's."""
from __future__ import annotations

import numpy as np

from ...api.errors import UnsupportedDTypeError
from ..node import to_dtype
from . import converter

BOOL = np.dtype(np.bool_)
FLOAT64 = np.dtype(np.float64)
INT64 = np.dtype(np.int64)
UINT64 = np.dtype(np.uint64)


# --- helpers shared with activation.py -------------------------------------------------------------------------------
def const(ctx, value, dtype):
    """A 0-d constant of `dtype` (a float rounds to it, as numpy's weak Python scalars do)."""
    with np.errstate(over="ignore"):
        return ctx.constant(np.array(value, dtype=np.dtype(dtype)))


def cast(ctx, ref, dtype):
    """ref as `dtype` (no node when it already is); the dtype by name, as hwadapter's frontend passes it."""
    dtype = np.dtype(dtype)
    return ref if ctx.dtype(ref) == dtype else ctx.op("cast", ref, dtype=dtype.name)


def kinds(ctx, node, refs, allowed: str, what: str):
    """Fail unless every ref's dtype kind is in `allowed` ('f' float, 'i' signed, 'u' unsigned, 'b' bool)."""
    for r in refs:
        if r is not None and ctx.dtype(r).kind not in allowed:
            ctx.fail(node, f"ONNX {node.op_type} takes {what} inputs; this one is {ctx.dtype(r).name}",
                     fix="the model is invalid ONNX for this op, or needs a Cast first")


def same_dtype(ctx, node, refs):
    """Fail unless every ref has one dtype (ONNX's type constraint T)."""
    dts = {ctx.dtype(r) for r in refs if r is not None}
    if len(dts) > 1:
        ctx.fail(node, f"its inputs have different dtypes {sorted(d.name for d in dts)}, which ONNX does not allow",
                 fix="cast the inputs to one dtype")


def floats(ctx, node, *refs):
    kinds(ctx, node, refs, "f", "floating-point")


# --- arithmetic --------------------------------------------------------------------------------------------------
#: ONNX op -> (hwadapter op, the dtype kinds it takes, in words): binary ops of one dtype, converted as they are.
_SAME_DTYPE = {"Add": ("add", "fiu", "numeric"), "Sub": ("sub", "fiu", "numeric"), "Mul": ("mul", "fiu", "numeric"),
               "BitwiseAnd": ("bitwise_and", "iu", "integer"), "BitwiseOr": ("bitwise_or", "iu", "integer"),
               "BitwiseXor": ("bitwise_xor", "iu", "integer")}


@converter(*_SAME_DTYPE)
def same_dtype_binary(ctx, node):
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    op, allowed, what = _SAME_DTYPE[node.op_type]
    kinds(ctx, node, (a, b), allowed, what)
    same_dtype(ctx, node, (a, b))
    return ctx.op(op, a, b)


@converter("Div")
def div(ctx, node):
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    kinds(ctx, node, (a, b), "fiu", "numeric")
    same_dtype(ctx, node, (a, b))
    dt = ctx.dtype(a)
    if dt.kind == "f":
        return ctx.op("div", a, b)
    return int_div(ctx, node, a, b)


def int_div(ctx, node, a, b):
    """Integer division truncating toward zero (C, ONNX). Up to 32 bits in float64, then cast back (which
    truncates): a/b is never rounded across an integer, as its distance to one, relative to it, is >= 1/|a| >=
    2^-31 and float64 division rounds by 2^-53 at most. hwadapter's div is true division and takes floats only."""
    dt = ctx.dtype(a)
    ca, cb = ctx.const(a), ctx.const(b)
    if ca is not None and cb is not None:  # exactly as ONNX's reference, in integers
        with np.errstate(all="ignore"):
            q, r = np.floor_divide(ca, cb), np.remainder(ca, cb)
            return ctx.constant((q + ((r != 0) & ((ca < 0) ^ (cb < 0)))).astype(dt))
    if dt.itemsize > 4:
        return _uint64_div(ctx, a, b) if dt.kind == "u" else _int64_div(ctx, a, b)
    q = ctx.op("div", cast(ctx, a, FLOAT64), cast(ctx, b, FLOAT64))
    return cast(ctx, q, dt)


def _trunc_remainder(ctx, a, b, r):
    """C's a % b from numpy's r = a mod b (the sign of b): r - b where r is non-zero and signed unlike a.
    r and b share a sign there, so r - b cannot overflow."""
    zero = const(ctx, 0, ctx.dtype(a))
    wrong = ctx.op("logical_and", ctx.op("not_equal", r, zero),
                   ctx.op("not_equal", ctx.op("less", r, zero), ctx.op("less", a, zero)))
    return ctx.op("where", wrong, ctx.op("sub", r, b), r)


def _int64_div(ctx, a, b):
    """int64 a / b truncated, exactly, for every quotient that fits (b == 0 and MIN / -1 are undefined in ONNX).

    m = a - (a % b) is an exact multiple of b with |m| <= |a| (no overflow). q0 = trunc(fl(m) / fl(b)) is within
    3 * 2^-53 * |q| + 1 of q = m / b (float64 rounds m, b and the quotient once each; the quotient is clamped below
    2^63, where the cast is defined); then d = m - q0 * b = (q - q0) * b is in int64's range (|b| is small where
    |q - q0| is not), so the wrapping products give it exactly, and q = q0 + rint(fl(d) / fl(b)): d / b is an
    integer below 2^13, which the rounded float quotient misses by far less than 1/2."""
    m = ctx.op("sub", a, _trunc_remainder(ctx, a, b, ctx.op("mod", a, b)))
    fb = cast(ctx, b, FLOAT64)
    fq = ctx.op("clip", ctx.op("div", cast(ctx, m, FLOAT64), fb), min=-(2.0 ** 63), max=2.0 ** 63 - 1024)
    q0 = cast(ctx, fq, INT64)
    d = ctx.op("sub", m, ctx.op("mul", q0, b))
    return ctx.op("add", q0, cast(ctx, ctx.op("round", ctx.op("div", cast(ctx, d, FLOAT64), fb)), INT64))


def _uint64_div(ctx, a, b):
    """uint64 a / b (truncated, which is floored for unsigned values), exactly; b == 0 is undefined in ONNX.

    _int64_div's method without signs: m = a - (a mod b) is an exact multiple of b, q0 = trunc(fl(m) / fl(b)) (clamped
    below 2^64, where the cast is defined) is within 3 * 2^-53 * q + 1 of q = m / b, so d = m - q0 * b (wrapping) is
    (q - q0) * b, which int64 holds (q0 differs from q only for q > 2, so b < 2^63), and q = q0 + rint(fl(d) / fl(b))
    with the correction added modulo 2^64."""
    m = ctx.op("sub", a, ctx.op("mod", a, b))  # unsigned: numpy's remainder is C's
    fb = cast(ctx, b, FLOAT64)
    fq = ctx.op("clip", ctx.op("div", cast(ctx, m, FLOAT64), fb), min=0.0, max=2.0 ** 64 - 2048)
    q0 = cast(ctx, fq, UINT64)
    d = cast(ctx, ctx.op("sub", m, ctx.op("mul", q0, b)), INT64)  # the exact difference, small, with its sign
    fix = cast(ctx, ctx.op("round", ctx.op("div", cast(ctx, d, FLOAT64), fb)), INT64)
    return ctx.op("add", q0, cast(ctx, fix, UINT64))  # a negative correction wraps, as it should


@converter("Mod")
def mod(ctx, node):
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    kinds(ctx, node, (a, b), "fiu", "numeric")
    same_dtype(ctx, node, (a, b))
    fmod = node.int("fmod", 0, choices=(0, 1))
    dt = ctx.dtype(a)
    r = ctx.op("mod", a, b)  # numpy's remainder: the sign of the divisor
    if fmod == 0 or dt.kind == "u":
        return r
    if dt.kind == "i":  # C's %: the sign of the dividend
        return _trunc_remainder(ctx, a, b, r)
    # floats: fmod(a, b) = +-(|a| mod |b|), exact (a remainder of positive numbers is never shifted); the sign is
    # a's, -0.0 included (1/a < 0 finds it)
    m = ctx.op("mod", ctx.op("abs", a), ctx.op("abs", b))
    zero = const(ctx, 0, dt)
    negative = ctx.op("logical_or", ctx.op("less", a, zero), ctx.op("less", ctx.op("reciprocal", a), zero))
    return ctx.op("where", negative, ctx.op("neg", m), m)


@converter("Pow")
def pow_(ctx, node):
    """ONNX's Pow(T, T1) -> T: numpy's power in the promoted dtype, cast to T, as onnx's reference computes it
    (float32 ** int32 in float64; integer powers wrap, and wrapped in a wider dtype they agree modulo 2^bits)."""
    x, y = ctx.input(node, 0), ctx.input(node, 1)
    kinds(ctx, node, (x, y), "fiu", "numeric")
    tx, ty = ctx.dtype(x), ctx.dtype(y)
    if tx == ty:
        return ctx.op("pow", x, y)
    work = np.result_type(tx, ty)
    out = ctx.op("pow", cast(ctx, x, work), cast(ctx, y, work))
    return cast(ctx, out, tx)


# --- comparisons and logic -----------------------------------------------------------------------------------------
_COMPARE = {"Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
            "GreaterOrEqual": "greater_equal"}
_LOGICAL = {"And": "logical_and", "Or": "logical_or", "Xor": "logical_xor"}


@converter(*_COMPARE)
def compare(ctx, node):
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    same_dtype(ctx, node, (a, b))
    return ctx.op(_COMPARE[node.op_type], a, b)


@converter(*_LOGICAL)
def logical(ctx, node):
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    kinds(ctx, node, (a, b), "b", "bool")
    return ctx.op(_LOGICAL[node.op_type], a, b)


@converter("Not")
def logical_not(ctx, node):
    x = ctx.input(node, 0)
    kinds(ctx, node, (x,), "b", "bool")
    return ctx.op("logical_not", x)


# --- bitwise (primitives bitwise_*, left_shift, right_shift) ----------------------------------------------------
@converter("BitwiseNot")
def bitwise_not(ctx, node):
    x = ctx.input(node, 0)
    kinds(ctx, node, (x,), "iu", "integer")
    return ctx.op("bitwise_not", x)


@converter("BitShift")
def bit_shift(ctx, node):
    """Shifts by less than the width are the primitives'; by a negative amount or the width or more, ONNX's
    reference gives 0 (a right shift of a negative signed value: -1), which no C shift defines: made explicit."""
    x, s = ctx.input(node, 0), ctx.input(node, 1)
    kinds(ctx, node, (x, s), "iu", "integer")
    same_dtype(ctx, node, (x, s))
    direction = node.string("direction", choices=("LEFT", "RIGHT"))
    dt = ctx.dtype(x)
    bits = dt.itemsize * 8
    zero, top = const(ctx, 0, dt), const(ctx, bits - 1, dt)
    inside = ctx.op("logical_and", ctx.op("greater_equal", s, zero), ctx.op("less_equal", s, top))
    amount = ctx.op("where", inside, s, zero)  # every shift the kernel sees is defined
    shifted = ctx.op("left_shift" if direction == "LEFT" else "right_shift", x, amount)
    if direction == "RIGHT" and dt.kind == "i":
        outside = ctx.op("where", ctx.op("less", x, zero), const(ctx, -1, dt), zero)
    else:
        outside = zero
    return ctx.op("where", inside, shifted, outside)


# --- unary math ------------------------------------------------------------------------------------------------
_FLOAT_UNARY = {"Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Sigmoid": "sigmoid",
                "Tanh": "tanh", "Erf": "erf", "Sin": "sin", "Cos": "cos", "Floor": "floor", "Ceil": "ceil",
                "Round": "round", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh",
                "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh"}
_NUMERIC_UNARY = {"Abs": "abs", "Neg": "neg", "Sign": "sign"}


@converter(*_FLOAT_UNARY)
def float_unary(ctx, node):
    x = ctx.input(node, 0)
    floats(ctx, node, x)  # ONNX defines these for floats only (Erf: the integer results would all truncate)
    return ctx.op(_FLOAT_UNARY[node.op_type], x)


@converter(*_NUMERIC_UNARY)
def numeric_unary(ctx, node):
    x = ctx.input(node, 0)
    kinds(ctx, node, (x,), "fiu" if node.op_type != "Neg" else "fi", "numeric" if node.op_type != "Neg"
          else "signed numeric")
    return ctx.op(_NUMERIC_UNARY[node.op_type], x)


@converter("IsNaN")
def is_nan(ctx, node):
    x = ctx.input(node, 0)
    floats(ctx, node, x)
    return ctx.op("not_equal", x, x)


@converter("IsInf")
def is_inf(ctx, node):
    x = ctx.input(node, 0)
    floats(ctx, node, x)
    dt = ctx.dtype(x)
    tests = []
    if node.int("detect_positive", 1):
        tests.append(ctx.op("equal", x, const(ctx, np.inf, dt)))
    if node.int("detect_negative", 1):
        tests.append(ctx.op("equal", x, const(ctx, -np.inf, dt)))
    if not tests:
        return ctx.constant(np.zeros(ctx.shape(x), BOOL))
    return tests[0] if len(tests) == 1 else ctx.op("logical_or", *tests)


# --- Cast, CastLike, Where, Clip -------------------------------------------------------------------------------
def _target(ctx, node, elem_type: int) -> np.dtype:
    try:
        return to_dtype(elem_type, "its target type")
    except UnsupportedDTypeError as err:
        ctx.fail(node, str(err).splitlines()[0].replace("onnx: ", ""),
                 fix="hwadapter casts between bool, int8-int64, uint8-uint64, float16, float32 and float64")


def _convert(ctx, node, x, to: np.dtype):
    """x as `to`, as ONNX's Cast: float -> int truncates toward zero, -> bool is x != 0 (nan is true), float64 ->
    float16 rounds once. Out-of-range float -> int and nan -> int are undefined in ONNX (and C)."""
    round_mode = node.string("round_mode", "up")
    if round_mode != "up":  # only for float8e8m0 targets, which hwadapter lacks
        ctx.fail(node, f"round_mode {round_mode!r} applies to float8e8m0 only")
    return cast(ctx, x, to)


@converter("Cast")
def cast_op(ctx, node):
    return _convert(ctx, node, ctx.input(node, 0), _target(ctx, node, node.int("to")))


@converter("CastLike")
def cast_like(ctx, node):
    return _convert(ctx, node, ctx.input(node, 0), ctx.dtype(ctx.input(node, 1)))


@converter("Where")
def where(ctx, node):
    c, x, y = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    kinds(ctx, node, (c,), "b", "bool condition")
    same_dtype(ctx, node, (x, y))
    return ctx.op("where", c, x, y)


def _bound_value(ctx, node, ref):
    """A constant 0-d or one-element bound as a Python number; None when it is not constant."""
    arr = ctx.const(ref)
    if arr is None:
        return None
    if arr.size != 1:
        ctx.fail(node, f"its bound has shape {arr.shape}; ONNX Clip takes a scalar")
    return arr.reshape(()).item()


@converter("Clip")
def clip(ctx, node):
    x = ctx.input(node, 0)
    kinds(ctx, node, (x,), "fiu", "numeric")
    dt = ctx.dtype(x)
    if ctx.opset < 11:  # float attributes, defaulting to float32's extremes (which clip float64's inf); x float
        floats(ctx, node, x)
        big = float(np.finfo(np.float32).max)
        # rounding a bound to T clips exactly as comparing in float32 would: T's values lie on the same side of both
        lo, hi = const(ctx, node.float("min", -big), dt), const(ctx, node.float("max", big), dt)
    else:
        lo, hi = ctx.input(node, 1), ctx.input(node, 2)
        same_dtype(ctx, node, (x, lo, hi))
    vals = [None if r is None else _bound_value(ctx, node, r) for r in (lo, hi)]
    if dt.kind == "f":  # hwadapter's clip takes finite float bounds, None for none: min -inf and max +inf are none
        vals = [None if v is not None and v == (-np.inf, np.inf)[i] else v for i, v in enumerate(vals)]
    known = all(r is None or v is not None for r, v in zip((lo, hi), vals))
    plain = all(v is None or np.isfinite(v) for v in vals) and not (None not in vals and vals[0] > vals[1])
    if known and plain:
        vals = [None if v is None else (float(v) if dt.kind == "f" else int(v)) for v in vals]
        if vals[0] is None and vals[1] is None:
            return x
        return ctx.op("clip", x, min=vals[0], max=vals[1])
    # bounds known only at run time, nan, inf the wrong way or min > max: numpy's clip, min(max(x, lo), hi) (max
    # wins), nan propagating
    out = x
    if lo is not None:
        out = ctx.op("maximum", out, lo)
    if hi is not None:
        out = ctx.op("minimum", out, hi)
    return out


# --- variadic -----------------------------------------------------------------------------------------------------
_VARIADIC = {"Sum": "add", "Mean": "add", "Max": "maximum", "Min": "minimum"}


@converter(*_VARIADIC)
def variadic(ctx, node):
    """Folded left to right, broadcasting, as onnx's reference; Mean divides the sum by the count."""
    refs = [r for r in ctx.inputs(node) if r is not None]
    if not refs:
        ctx.fail(node, "it has no inputs")
    kinds(ctx, node, refs, "f" if node.op_type == "Mean" else "fiu",
          "floating-point" if node.op_type == "Mean" else "numeric")
    same_dtype(ctx, node, refs)
    out = refs[0]
    for r in refs[1:]:
        out = ctx.op(_VARIADIC[node.op_type], out, r)
    if node.op_type == "Mean" and len(refs) > 1:
        out = ctx.op("div", out, const(ctx, len(refs), ctx.dtype(out)))
    return out
