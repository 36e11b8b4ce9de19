"""The functor library: each functor's type rule, numpy semantics and C-family expression.

A functor's numpy implementation receives arrays in *register* dtypes (float16
values arrive as float32) and returns an array in the register dtype of its
result; its ``render`` returns one C expression over already-computed operands,
using the dialect through ``ctx`` (math names, helpers, literals, types).
"""

import math
import types
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import dtypes as dt
from .errors import KernelError


@dataclass(frozen=True, eq=False)
class Functor:
    """An elementwise operation usable in unary/binary/ternary/any."""

    name: str
    arity: int
    doc: str
    result: Callable = field(repr=False)   # (dtypes, attrs) -> result dtype; raises KernelError
    numpy: Callable = field(repr=False)    # (*register arrays, **attrs) -> register array
    render: Callable = field(repr=False)   # (ctx, args, register dtypes, attrs) -> C expression

    def result_dtype(self, in_dtypes, attrs=None) -> str:
        """Result dtype for operands of ``in_dtypes``; KernelError if not allowed."""
        if len(in_dtypes) != self.arity:
            raise KernelError(f"functor {self.name!r} takes {self.arity} operand(s), got {len(in_dtypes)}")
        return self.result(tuple(in_dtypes), attrs or {})


# --- type rules -------------------------------------------------------------

def _same(name, dts):
    if len(set(dts)) > 1:
        raise KernelError(f"functor {name!r}: operands have different dtypes {list(dts)}; "
                          f"cast them to one dtype first")
    return dts[0]


def _numeric(name):
    def rule(dts, attrs):
        d = _same(name, dts)
        if d == "bool":
            raise KernelError(f"functor {name!r} does not take bool operands; cast to a numeric dtype first")
        return d
    return rule


def _floating(name):
    def rule(dts, attrs):
        d = _same(name, dts)
        if not dt.is_float(d):
            raise KernelError(f"functor {name!r} needs a floating dtype, got {d}; cast first")
        return d
    return rule


def _any_same(name):
    return lambda dts, attrs: _same(name, dts)


def _compare(name):
    def rule(dts, attrs):
        _same(name, dts)
        return "bool"
    return rule


def _to_bool(dts, attrs):
    return "bool"


def _where_rule(dts, attrs):
    if dts[0] != "bool":
        raise KernelError(f"functor 'where': condition must be bool, got {dts[0]}; compare or cast first")
    return _same("where", dts[1:])


def _cast_rule(dts, attrs):
    if "dtype" not in attrs:
        raise KernelError("functor 'cast' needs a dtype= attribute")
    return dt.normalize(attrs["dtype"])


# --- numpy helpers ----------------------------------------------------------

def _zero(x):
    return np.zeros((), x.dtype)


_erf64 = np.vectorize(math.erf, otypes=[np.float64])
_erfc64 = np.vectorize(math.erfc, otypes=[np.float64])


def _erf(x):
    return _erf64(x).astype(x.dtype)


def _sqrt1_2(x):
    return np.asarray(0.7071067811865476, dtype=x.dtype)


def _int_div(a, b):
    return np.floor_divide(a, b)


def _ipow(a, b):
    """Integer power wrapping in the dtype; negative exponents truncate like 1 / a**-b."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    result = np.ones(a.shape, a.dtype)
    base = a.copy()
    e = np.where(b < 0, 0, b).astype(np.int64)
    while np.any(e > 0):
        result = np.where((e & 1) == 1, result * base, result)
        base = base * base
        e >>= 1
    negative = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0)).astype(a.dtype)
    return np.where(b < 0, negative, result)


def _cast(x, dtype):
    target = dt.normalize(dtype)
    if target == "float16":
        return x.astype(np.float16).astype(np.float32)
    return x.astype(dt.register(target))


# --- C rendering helpers ----------------------------------------------------

def _wrapping(op):
    """Signed int32/int64 arithmetic goes through unsigned types so overflow wraps like numpy; so does uint16's, which
    C promotes to int (65535 * 65535 overflows it)."""
    def render(ctx, a, dts, attrs):
        d = dts[0]
        if d in ("int32", "int64", "uint16"):
            u = ctx.utype(d)
            return f"({ctx.ctype(d)})(({u}){a[0]} {op} ({u}){a[1]})"
        return f"{a[0]} {op} {a[1]}"
    return render


def _neg(ctx, a, dts, attrs):
    d = dts[0]
    if d in ("int32", "int64") or dt.is_unsigned(d):  # unsigned: -a wraps like numpy, in the dtype
        return f"({ctx.ctype(d)})(({ctx.utype(d)})0 - ({ctx.utype(d)}){a[0]})"
    return f"-{a[0]}"


def _select(op):
    # numpy's maximum/minimum: (a >= b || isnan(a)) ? a : b, so NaN propagates from either side
    def render(ctx, a, dts, attrs):
        if dt.is_float(dts[0]) and a[0].isidentifier():    # a numeric literal is never NaN
            return f"({a[0]} {op} {a[1]} || {a[0]} != {a[0]}) ? {a[0]} : {a[1]}"
        return f"{a[0]} {op} {a[1]} ? {a[0]} : {a[1]}"
    return render


_maximum, _minimum = _select(">="), _select("<=")


def _div(ctx, a, dts, attrs):
    if dt.is_float(dts[0]):
        return f"{a[0]} / {a[1]}"
    return f"{ctx.helper('floordiv', dts[0])}({a[0]}, {a[1]})"


def _mod(ctx, a, dts, attrs):
    return f"{ctx.helper('floormod', dts[0])}({a[0]}, {a[1]})"


def _pow(ctx, a, dts, attrs):
    if dt.is_float(dts[0]):
        return ctx.call("pow", dts[0], *a)
    return f"{ctx.helper('ipow', dts[0])}({a[0]}, {a[1]})"


def _abs(ctx, a, dts, attrs):
    d = dts[0]
    if dt.is_float(d):
        return ctx.call("fabs", d, a[0])
    if dt.is_unsigned(d):
        return a[0]
    return f"{a[0]} < 0 ? {_neg(ctx, a, dts, attrs)} : {a[0]}"


def _math(fn):
    return lambda ctx, a, dts, attrs: ctx.call(fn, dts[0], *a)


def _rsqrt(ctx, a, dts, attrs):
    return ctx.call("rsqrt", dts[0], a[0])


def _reciprocal(ctx, a, dts, attrs):
    return f"{ctx.lit(1, dts[0])} / {a[0]}"


def _sigmoid(ctx, a, dts, attrs):
    one = ctx.lit(1, dts[0])
    return f"{one} / ({one} + {ctx.call('exp', dts[0], '-' + a[0])})"


def _gelu(ctx, a, dts, attrs):
    # 0.5 a erfc(-a / sqrt 2) == 0.5 a (1 + erf(a / sqrt 2)) without the cancellation of 1 + erf for a < 0
    d = dts[0]
    # below -40 the product underflows to -0.0 in every precision (as it does just above -40), and at -inf it would
    # be -inf * 0 = nan: the limit, -0.0, is written out
    erfc = ctx.call("erfc", d, f"-{a[0]} * {ctx.lit(0.7071067811865476, d)}")
    return f"({a[0]} < {ctx.lit(-40, d)} ? {ctx.lit(-0.0, d)} : {ctx.lit(0.5, d)} * {a[0]} * {erfc})"


def _relu(ctx, a, dts, attrs):
    if dt.is_unsigned(dts[0]):
        return a[0]
    zero = ctx.lit(0, dts[0])
    return _maximum(ctx, [a[0], zero], dts, attrs)


def _sign(ctx, a, dts, attrs):
    d = dts[0]
    if dt.is_unsigned(d):
        return f"{a[0]} > 0 ? {ctx.lit(1, d)} : {a[0]}"
    if not dt.is_float(d):
        return f"{a[0]} > 0 ? {ctx.lit(1, d)} : ({a[0]} < 0 ? {ctx.lit(-1, d)} : {a[0]})"
    # numpy: sign(-0.0) == +0.0 (not x itself), sign(nan) == nan
    return (f"{a[0]} > 0 ? {ctx.lit(1, d)} : ({a[0]} < 0 ? {ctx.lit(-1, d)} : "
            f"({a[0]} == 0 ? {ctx.lit(0, d)} : {a[0]}))")


def _where(ctx, a, dts, attrs):
    return f"{a[0]} ? {a[1]} : {a[2]}"


def _cast_render(ctx, a, dts, attrs):
    target = dt.normalize(attrs["dtype"])
    source = dts[0]
    if target == "bool":
        return a[0] if source == "bool" else f"{a[0]} != 0"
    if target == "float16" and source == "float64":  # rounded once: through float, 65519.99 would become inf
        return f"{ctx.helper('round_half', 'float64')}({a[0]})"
    if target == "float16":  # integers are exact in float up to 2^24, and beyond 65519 all round to inf
        value = a[0] if source == "float32" else f"({ctx.ctype('float32')}){a[0]}"
        return f"{ctx.helper('round_half', 'float32')}({value})"
    if dt.register(target) == source:
        return a[0]
    if source.startswith("float") and target in ("int8", "int16", "int32", "uint8", "uint16", "uint32"):
        # float -> narrow int is undefined out of range in C (CUDA clamps, x86 wraps): through int64 it wraps on
        # every device, as numpy does
        return f"({ctx.ctype(dt.register(target))})({ctx.ctype('int64')}){a[0]}"
    if source.startswith("float") and target == "uint64":
        # C converts [0, 2^64) to uint64 exactly; a negative value wraps through int64, as numpy's does
        return (f"({a[0]} < {ctx.lit(0, source)} ? ({ctx.ctype(target)})({ctx.ctype('int64')}){a[0]} : "
                f"({ctx.ctype(target)}){a[0]})")
    return f"({ctx.ctype(dt.register(target))}){a[0]}"


def _infix(op):
    return lambda ctx, a, dts, attrs: f"{a[0]} {op} {a[1]}"


def _truth(a, d):
    return a if d == "bool" else f"({a} != 0)"


def _logical(op):
    def render(ctx, a, dts, attrs):
        return f"{_truth(a[0], dts[0])} {op} {_truth(a[1], dts[1])}"
    return render


def _logical_not(ctx, a, dts, attrs):
    return f"!{a[0]}" if dts[0] == "bool" else f"{a[0]} == 0"


# --- the library --------------------------------------------------------------

def _f(name, arity, doc, result, numpy, render):
    return Functor(name, arity, doc, result, numpy, render)


def _float_fn(name, doc, numpy, render=None):
    return _f(name, 1, doc, _floating(name), numpy, render or _math(name))


def _fpow(a, b):
    """C's (IEEE 754's) pow: numpy's x ** 0.5 for a broadcast exponent is sqrt, whose sqrt(-inf) = nan and
    sqrt(-0) = -0 are not pow's +inf and +0."""
    out = np.power(a, b)
    half = np.asarray(b) == 0.5
    if half.any():
        out = np.where(half & ((a == -np.inf) | (a == 0)), np.abs(a), out).astype(out.dtype, copy=False)
    return out


_FUNCTORS = [
    _f("add", 2, "a + b", _numeric("add"), np.add, _wrapping("+")),
    _f("sub", 2, "a - b", _numeric("sub"), np.subtract, _wrapping("-")),
    _f("mul", 2, "a * b", _numeric("mul"), np.multiply, _wrapping("*")),
    _f("div", 2, "a / b for floats; floor division (numpy //, x // 0 == 0) for ints", _numeric("div"),
       lambda a, b: np.true_divide(a, b) if a.dtype.kind == "f" else _int_div(a, b), _div),
    _f("max", 2, "numpy.maximum (NaN propagates)", _any_same("max"), np.maximum, _maximum),
    _f("min", 2, "numpy.minimum (NaN propagates)", _any_same("min"), np.minimum, _minimum),
    _f("pow", 2, "a ** b (ints: wrapping; negative exponent truncates toward 0)", _numeric("pow"),
       lambda a, b: _fpow(a, b) if a.dtype.kind == "f" else _ipow(a, b), _pow),
    _f("mod", 2, "floor modulo, sign of the divisor (numpy %, x % 0 == 0 for ints)", _numeric("mod"),
       np.remainder, _mod),
    _f("neg", 1, "-a", _numeric("neg"), np.negative, _neg),
    _f("abs", 1, "|a|", _numeric("abs"), np.abs, _abs),
    _float_fn("exp", "e ** a", np.exp),
    _float_fn("log", "natural logarithm", np.log),
    _float_fn("sqrt", "square root", np.sqrt),
    _float_fn("rsqrt", "1 / sqrt(a)", lambda x: np.reciprocal(np.sqrt(x)), _rsqrt),
    _float_fn("reciprocal", "1 / a", np.reciprocal, _reciprocal),
    _float_fn("tanh", "hyperbolic tangent", np.tanh),
    _float_fn("sigmoid", "1 / (1 + exp(-a))", lambda x: 1 / (1 + np.exp(-x)), _sigmoid),
    _f("relu", 1, "maximum(a, 0)", _numeric("relu"), lambda x: np.maximum(x, _zero(x)), _relu),
    _float_fn("gelu", "exact GELU: 0.5 a (1 + erf(a / sqrt 2)), computed as 0.5 a erfc(-a / sqrt 2)",
              lambda x: np.where(x < -40, -0.0, 0.5 * x * _erfc64(-x * _sqrt1_2(x))).astype(x.dtype), _gelu),
    _float_fn("erf", "error function", _erf),
    _float_fn("sin", "sine", np.sin),
    _float_fn("cos", "cosine", np.cos),
    _float_fn("floor", "round toward -inf", np.floor),
    _float_fn("ceil", "round toward +inf", np.ceil),
    _float_fn("round", "round half to even (rint)", np.rint, _math("rint")),
    _f("sign", 1, "-1, 0 or 1 (NaN stays NaN)", _numeric("sign"), np.sign, _sign),
    _f("where", 3, "cond ? a : b (cond bool)", _where_rule, np.where, _where),
    _f("cast", 1, "convert to attrs dtype= (numpy astype)", _cast_rule, _cast, _cast_render),
    _f("eq", 2, "a == b", _compare("eq"), np.equal, _infix("==")),
    _f("ne", 2, "a != b", _compare("ne"), np.not_equal, _infix("!=")),
    _f("lt", 2, "a < b", _compare("lt"), np.less, _infix("<")),
    _f("le", 2, "a <= b", _compare("le"), np.less_equal, _infix("<=")),
    _f("gt", 2, "a > b", _compare("gt"), np.greater, _infix(">")),
    _f("ge", 2, "a >= b", _compare("ge"), np.greater_equal, _infix(">=")),
    _f("logical_and", 2, "truth(a) and truth(b)", _to_bool, np.logical_and, _logical("&&")),
    _f("logical_or", 2, "truth(a) or truth(b)", _to_bool, np.logical_or, _logical("||")),
    _f("logical_xor", 2, "truth(a) != truth(b)", _to_bool, np.logical_xor, _logical("!=")),
    _f("logical_not", 1, "not truth(a)", _to_bool, np.logical_not, _logical_not),
    _f("identity", 1, "a", _any_same("identity"), lambda x: x, lambda ctx, a, dts, attrs: a[0]),
]

FUNCTORS = {f.name: f for f in _FUNCTORS}
UNARY = tuple(f.name for f in _FUNCTORS if f.arity == 1 and f.name not in ("cast", "identity"))
BINARY = tuple(f.name for f in _FUNCTORS if f.arity == 2)

ops = types.SimpleNamespace(**FUNCTORS)
ops.__doc__ = "Namespace of every library functor: kp.ops.add, kp.ops.gelu, ..."


def lookup(op) -> Functor:
    """The functor named ``op`` (or ``op`` itself); KernelError if unknown."""
    if isinstance(op, Functor):
        return op
    if isinstance(op, str) and op in FUNCTORS:
        return FUNCTORS[op]
    raise KernelError(f"unknown functor {op!r}; known: {', '.join(sorted(FUNCTORS))}")
