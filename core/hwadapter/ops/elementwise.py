"""Elementwise ops: arithmetic, comparison, logic, math functions, where, cast and clip."""
from __future__ import annotations

import builtins
import math

import numpy as np

from ..api import dtypes as _dt
from ..dispatch.dispatcher import dispatch, dispatch_binary, dispatch_unary
from ..api.errors import InvalidArgumentError
from ..tensor import Tensor
from ..api import shapes
from ._common import (_FLOAT, _FLOAT64_MAX, _INTEGER, _NUMBER, _NUMERIC, _as_float, _check, _check_shapes, _promote,
                      _scalar, _tensor, cast, number_arg, plain_number)

astype = cast  # cast itself sits with the helpers, which promote with it


_BITWISE = {"bitwise": _INTEGER | {_dt.bool_}, "shift": _INTEGER}
_WEAK = (float, int)  # Python numbers that take a float tensor's dtype (bool is not among them: type() is exact)


def _binary(op: str, kind: str, doc: str, name: str = ""):
    """The public function `name` (default: op) running kernel `op`; its errors name `name`, as the user called it."""
    name = name or op

    def fn(x, y):
        if type(x) is Tensor and type(y) is Tensor and x._dtype is y._dtype:  # the hot path: no promotion
            xs = x._data.shape
            if xs != y._data.shape:
                shapes.broadcast(name, xs, y._data.shape)
        elif type(x) is Tensor and type(y) in _WEAK and x._dtype.kind == "f":  # x * 0.5: the number takes x's dtype
            y = _scalar(y, x, x._dtype, name)  # (what _promote decides for a float tensor, without its walk)
        elif type(y) is Tensor and type(x) in _WEAK and y._dtype.kind == "f":
            x = _scalar(x, y, y._dtype, name)
        else:
            x, y = _promote(name, x, y)
            _check_shapes(name, x, y)
        if kind == "arith":
            if x._dtype not in _NUMERIC:
                _check(name, x, _NUMERIC, "numeric (non-bool)")
        elif kind == "float" and x._dtype not in _FLOAT:
            _check(name, x, _NUMERIC, "numeric (non-bool)")
            x, y = _as_float(x), _as_float(y)
        elif kind == "logical" and x._dtype is not _dt.bool_:
            x, y = cast(x, _dt.bool_), cast(y, _dt.bool_)
        elif kind in ("bitwise", "shift") and x._dtype not in _BITWISE[kind]:
            _check(name, x, _BITWISE[kind], "integer" if kind == "shift" else "integer or bool")
        return dispatch_binary(op, x, y)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


def _unary(op: str, kind: str, doc: str):
    def fn(x):
        x = _tensor(op, x)
        if kind == "float":
            x = _as_float(x)
        elif kind == "numeric":
            _check(op, x, _NUMERIC, "numeric (non-bool)")
        elif kind == "rounding" and x._dtype not in _FLOAT:
            _check(op, x, _NUMERIC, "numeric (non-bool)")
            return x  # integers are already whole
        elif kind == "logical" and x._dtype is not _dt.bool_:
            x = cast(x, _dt.bool_)
        elif kind == "bitwise":
            _check(op, x, _BITWISE["bitwise"], "integer or bool")
        return dispatch_unary(op, x)

    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = doc
    return fn


add = _binary("add", "arith", "x + y, broadcast.")
subtract = _binary("sub", "arith", "x - y, broadcast.", "subtract")
multiply = _binary("mul", "arith", "x * y, broadcast.", "multiply")
divide = _binary("div", "float", "x / y, true division (integers promote to float32).", "divide")
pow = _binary("pow", "arith", "x ** y, broadcast.")  # noqa: A001
maximum = _binary("maximum", "arith", "Elementwise maximum (nan propagates).")
minimum = _binary("minimum", "arith", "Elementwise minimum (nan propagates).")
remainder = _binary("mod", "arith", "Floor remainder: the result has the sign of y, as Python's %.", "remainder")
mod = _binary("mod", "arith", "Floor remainder (the same as remainder).", "mod")
equal = _binary("equal", "compare", "x == y as bool.")
not_equal = _binary("not_equal", "compare", "x != y as bool.")
less_than = _binary("less", "compare", "x < y as bool.", "less_than")
less_equal = _binary("less_equal", "compare", "x <= y as bool.")
greater_than = _binary("greater", "compare", "x > y as bool.", "greater_than")
greater_equal = _binary("greater_equal", "compare", "x >= y as bool.")
logical_and = _binary("logical_and", "logical", "x and y (non-zero is true).")
logical_or = _binary("logical_or", "logical", "x or y (non-zero is true).")
logical_xor = _binary("logical_xor", "logical", "x xor y (non-zero is true).")

abs = _unary("abs", "numeric", "|x|.")  # noqa: A001
neg = _unary("neg", "numeric", "-x.")
exp = _unary("exp", "float", "e ** x.")
log = _unary("log", "float", "Natural logarithm.")
sqrt = _unary("sqrt", "float", "Square root.")
rsqrt = _unary("rsqrt", "float", "1 / sqrt(x).")
reciprocal = _unary("reciprocal", "float", "1 / x.")
sigmoid = _unary("sigmoid", "float", "1 / (1 + e ** -x).")
tanh = _unary("tanh", "float", "Hyperbolic tangent.")
relu = _unary("relu", "numeric", "max(x, 0).")
erf = _unary("erf", "float", "The error function.")
sin = _unary("sin", "float", "Sine.")
cos = _unary("cos", "float", "Cosine.")
floor = _unary("floor", "rounding", "Round down.")
ceil = _unary("ceil", "rounding", "Round up.")
round = _unary("round", "rounding", "Round half to even.")  # noqa: A001
sign = _unary("sign", "numeric", "-1, 0 or 1 (0 for nan-free zero).")
logical_not = _unary("logical_not", "logical", "not x (non-zero is true).")
tan = _unary("tan", "float", "Tangent.")
asin = _unary("asin", "float", "Inverse sine (nan outside [-1, 1]).")
acos = _unary("acos", "float", "Inverse cosine (nan outside [-1, 1]).")
atan = _unary("atan", "float", "Inverse tangent.")
sinh = _unary("sinh", "float", "Hyperbolic sine.")
cosh = _unary("cosh", "float", "Hyperbolic cosine.")
asinh = _unary("asinh", "float", "Inverse hyperbolic sine.")
acosh = _unary("acosh", "float", "Inverse hyperbolic cosine (nan below 1).")
atanh = _unary("atanh", "float", "Inverse hyperbolic tangent (nan outside [-1, 1]).")
bitwise_not = _unary("bitwise_not", "bitwise", "~x: every bit flipped (not x for bool).")
bitwise_and = _binary("bitwise_and", "bitwise", "x & y of integers (and for bool), broadcast.")
bitwise_or = _binary("bitwise_or", "bitwise", "x | y of integers (or for bool), broadcast.")
bitwise_xor = _binary("bitwise_xor", "bitwise", "x ^ y of integers (xor for bool), broadcast.")
bitwise_left_shift = _binary("left_shift", "shift", "x << y of integers (bits past the width are lost).",
                             "bitwise_left_shift")
bitwise_right_shift = _binary("right_shift", "shift", "x >> y of integers: logical for unsigned, arithmetic for "
                              "signed dtypes.", "bitwise_right_shift")


def gelu(x, approximate: bool = False):
    """Gaussian error linear unit; exact (erf) unless approximate=True (tanh form)."""
    approximate = shapes.flag("gelu", "approximate", approximate)
    x = _as_float(_tensor("gelu", x))
    if not approximate:
        return dispatch_unary("gelu", x)
    return dispatch("gelu", (x,), {"approximate": True})


def where(condition, x, y):
    """x where condition is true, else y, broadcast."""
    cond = _tensor("where", condition)
    if cond._dtype is not _dt.bool_:
        cond = cast(cond, _dt.bool_)
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):  # two numbers: x takes its own default dtype
        if not isinstance(x, (_NUMBER, np.generic)):
            raise InvalidArgumentError(f"where: cannot use {type(x).__name__} as an operand. Fix: use a Tensor or a "
                                       f"number")
        v = plain_number("where", x, cond._dtype)
        x = _scalar(v, cond, _dt.bool_ if isinstance(v, bool) else _dt.DEFAULT_INT if isinstance(v, int)
                    else _dt.DEFAULT_FLOAT, "where")
    x, y = _promote("where", x, y)
    _check_shapes("where", cond, x, y)
    return dispatch("where", (cond, x, y))


def clip(x, min=None, max=None):  # noqa: A002
    """x limited to [min, max]; either bound may be None."""
    x = _tensor("clip", x)
    _check("clip", x, _NUMERIC, "numeric (non-bool)")
    min, max = (None if b is None else _bound(name, b) for name, b in (("min", min), ("max", max)))  # noqa: A001
    if min is not None and max is not None and min > max:
        raise InvalidArgumentError(f"clip: min {min} is greater than max {max}. Fix: pass min <= max")
    if x._dtype in _FLOAT:
        lo, hi = _in_float(min, x._dtype), _in_float(max, x._dtype)
        lo = None if lo == -math.inf else lo  # no bound at all: the kernel is spared a constant it cannot hold
        hi = None if hi == math.inf else hi
    else:  # integer bounds, clamped to the dtype's range: rounded inward, so the result stays within [min, max]
        info = np.iinfo(x._dtype)
        lo = None if min is None or min <= info.min else (info.max if min > info.max else math.ceil(min))
        hi = None if max is None or max >= info.max else (info.min if max < info.min else math.floor(max))
    return dispatch("clip", (x,), {"min": lo, "max": hi})


def _bound(name: str, bound):
    """A clip bound as a Python int or float (not bool, not nan)."""
    bound = number_arg("clip", name, bound)
    if isinstance(bound, bool):
        raise InvalidArgumentError(f"clip: {name} must be a number or None, not {bound!r}. Fix: pass an int or float")
    if bound != bound:
        raise InvalidArgumentError(f"clip: {name} is nan. Fix: pass a number, or None for no bound")
    return bound


def _in_float(bound, dtype: np.dtype):
    """A bound rounded to `dtype` as the arithmetic would round it (beyond its range: inf), as a Python float."""
    if bound is None:
        return None
    if builtins.abs(bound) > _FLOAT64_MAX:  # an int beyond every float
        return math.inf if bound > 0 else -math.inf
    with np.errstate(over="ignore"):
        return float(np.asarray(float(bound), dtype=dtype))
