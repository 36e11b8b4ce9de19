"""Integer sums and products that wrap as eager's do: onnxruntime's ReduceSum and ReduceProd saturate int64 instead."""
from __future__ import annotations

import numpy as np

_STEP = {"ReduceSum": ("Add", 0), "ReduceProd": ("Mul", 1)}


def reduce(w, op_type: str, x, axes, out: str, keep: int) -> None:
    """ReduceSum / ReduceProd of an integer tensor as a tree of elementwise Add / Mul, which wrap (shapes are static:
    each axis is halved until one is left)."""
    step, identity = _STEP[op_type]
    dt, shape = w.dtype(x), list(w.shape(x))
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
    final = [s for i, s in enumerate(shape) if keep or i not in axes]
    w.node("Reshape", [x, w.ints(final)], [out], allowzero=1)
