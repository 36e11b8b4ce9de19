"""Integer arithmetic as eager computes it: sums, products and powers that wrap, and x % 0 == 0."""
from __future__ import annotations

import numpy as np

from . import export_types

_STEP = {"ReduceSum": ("Add", 0), "ReduceProd": ("Mul", 1), "ReduceMax": ("Max", "min"), "ReduceMin": ("Min", "max")}


def mod(w, a, b, out: str) -> None:
    """numpy's integer mod (the divisor's sign); eager's x % 0 and x % -1 are 0, which is x % 1: onnxruntime fails
    on % 0 and traps on INT_MIN % -1."""
    dt = w.dtype(a)
    zero = w.node("Equal", [b, w.const(np.zeros((), dt))])
    if dt.kind == "i":
        zero = w.node("Or", [zero, w.node("Equal", [b, w.const(np.asarray(-1, dt))])])
    w.node("Mod", [a, w.node("Where", [zero, w.const(np.ones((), dt)), b])], [out], fmod=0)


def power(w, a, b, out: str) -> None:
    """Integer x ** y as eager computes it: by squaring, wrapping as the dtype does (ONNX Pow goes through double,
    which is inexact beyond 2**53 and undefined past the dtype's range); for y < 0, 1 / x**|y| truncated: 1 for
    x == 1, +-1 for x == -1, else 0."""
    dt = w.dtype(a)
    wide = dt if dt in export_types.PORTABLE else np.dtype("int32")  # the low bits of a wider product are dt's
    x, y = (r if dt == wide else w.cast(r, wide) for r in (a, b))
    c = lambda v: w.const(np.asarray(v, wide))  # noqa: E731
    negative = w.node("Less", [y, c(0)]) if dt.kind == "i" else None
    e = y if negative is None else w.node("Where", [negative, c(0), y])
    result, square = c(1), x
    bits = dt.itemsize * 8 - (dt.kind == "i")
    for k in range(bits):  # result *= x ** 2**k where bit k of e is set
        unset = w.node("Equal", [w.node("BitwiseAnd", [e, c(1 << k)]), c(0)])
        result = w.node("Where", [unset, result, w.node("Mul", [result, square])])
        if k + 1 < bits:
            square = w.node("Mul", [square, square])
    if negative is not None:
        odd = w.node("Not", [w.node("Equal", [w.node("BitwiseAnd", [y, c(1)]), c(0)])])
        minus_one = w.node("Where", [odd, c(-1), c(1)])
        one_over = w.node("Where", [w.node("Equal", [x, c(1)]), c(1),
                                    w.node("Where", [w.node("Equal", [x, c(-1)]), minus_one, c(0)])])
        result = w.node("Where", [negative, one_over, result])
    w.node("Cast", [result], [out], to=w.onnx.helper.np_dtype_to_tensor_dtype(dt))


def reduce(w, op_type: str, x, axes, out: str) -> None:
    """ReduceSum / ReduceProd (ReduceMax / ReduceMin) of an integer tensor as a tree of elementwise Add / Mul (Max /
    Min), which wrap where onnxruntime's int64 reductions saturate (and run in uint32 and uint64 themselves, where
    onnxruntime has no such reduction: through int64 its ReduceMax loses values from 2^31 up). Shapes are static: each
    axis is halved until one is left."""
    step, identity = _STEP[op_type]
    dt, shape = w.dtype(x), list(w.shape(x))
    if isinstance(identity, str):  # max's identity is the dtype's lowest value, min's its highest
        identity = getattr(np.iinfo(dt), identity)
    for axis in axes:
        while shape[axis] > 1:
            half = (shape[axis] + 1) // 2
            lo = w.node("Slice", [x, w.ints([0]), w.ints([half]), w.ints([axis])])
            hi = w.node("Slice", [x, w.ints([half]), w.ints([shape[axis]]), w.ints([axis])])
            if shape[axis] % 2:  # an odd length: the upper half gets the identity as its last element
                pads = [0] * (2 * len(shape))
                pads[len(shape) + axis] = 1
                hi = w.node("Pad", [hi, w.ints(pads), w.const(np.asarray(identity, dt))], mode="constant")
            x = w.node(step, [lo, hi])
            shape[axis] = half
        if shape[axis] == 0:  # nothing to fold: the identity
            shape[axis] = 1
            x = w.node("Expand", [w.const(np.asarray(identity, dt)), w.ints(shape)])
    w.node("Reshape", [x, w.ints(w.shape(out))], [out], allowzero=1)
