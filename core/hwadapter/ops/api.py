"""The public op set (paddle's names where paddle has one), assembled from the op families of this package.

`hwadapter` re-exports `__all__`; Tensor's operators and methods are bound to these functions by name. Each is
wrapped by `public`, so that a call Python would refuse (torch's dim= for axis=, say) is our error with the fix.
"""
from __future__ import annotations

from ..dispatch import tensor
from ._common import make_public
from .creation import arange, full, full_like, ones, ones_like, rand, randn, seed, zeros, zeros_like
from .elementwise import (abs, acos, acosh, add, asin, asinh, astype, atan, atanh, bitwise_and,  # noqa: A004
                          bitwise_left_shift, bitwise_not, bitwise_or, bitwise_right_shift, bitwise_xor, cast, ceil,
                          clip, cos, cosh, divide, equal, erf, exp, floor, gelu, greater_equal, greater_than,
                          less_equal, less_than, log, logical_and, logical_not, logical_or, logical_xor, maximum,
                          minimum, mod, multiply, neg, not_equal, pow, reciprocal, relu, remainder, round, rsqrt,
                          sigmoid, sign, sin, sinh, sqrt, subtract, tan, tanh, where)
from .indexing import cumprod, cumsum, gather_nd, put_along_axis, scatter_nd_add, take_along_axis, topk
from .linalg import matmul
from .manipulation import (broadcast_to, concat, expand, flatten, gather, pad, reshape, slice, split,  # noqa: A004
                           squeeze, transpose, unsqueeze)
from .manipulation import getitem  # noqa: F401  Tensor.__getitem__, not a top-level op
from .reduction import argmax, argmin, max, mean, min, prod, sum  # noqa: A004

__all__ = [
    "add", "subtract", "multiply", "divide", "pow", "maximum", "minimum", "remainder", "mod", "equal", "not_equal",
    "less_than", "less_equal", "greater_than", "greater_equal", "logical_and", "logical_or", "logical_xor",
    "logical_not", "abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu", "gelu",
    "erf", "sin", "cos", "floor", "ceil", "round", "sign", "where", "cast", "astype", "clip", "sum", "prod", "mean",
    "max", "min", "argmax", "argmin", "matmul", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "concat",
    "split", "slice", "gather", "expand", "broadcast_to", "pad", "full", "zeros", "ones", "zeros_like",
    "ones_like", "full_like", "arange", "seed", "rand", "randn",
    "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "bitwise_and", "bitwise_or",
    "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift", "topk", "cumsum", "cumprod",
    "take_along_axis", "put_along_axis", "gather_nd", "scatter_nd_add",
]

make_public(globals(), __all__)
tensor.bind_ops(globals())  # Tensor's operators and methods are these functions
