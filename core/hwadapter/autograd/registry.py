"""The vjp rules, by dispatch-level op name: rule(node, *output_grads) -> one gradient (or None) per input.

A rule returns each input's gradient in the shape of the op's result when the op broadcasts: the engine reduces it
to the input's shape in one place (engine.fit). Rules are written in hwadapter's own ops, so every device runs them."""
from __future__ import annotations

import numpy as np

from ..dispatch.dispatcher import dispatch
from ..tensor import to_tensor

RULES: dict = {}


def reshape(t, shape):
    """t in `shape`, taken literally (paddle's reshape reads a 0 as "keep this axis"; a gradient's 0 is a size)."""
    shape = tuple(int(s) for s in shape)
    return t if tuple(t.shape) == shape else dispatch("reshape", (t,), {"shape": shape})


def along(t, matrix: np.ndarray, axis: int):
    """t with its `axis` (of size matrix.shape[0]) mapped by the host matrix: out[..., j, ...] = sum_i t[..., i, ...]
    * matrix[i, j] (a gradient spread back over an index map, or a window sum), as one matmul."""
    last = t.ndim - 1
    moved = dispatch("transpose", (t,), {"perm": tuple(i for i in range(t.ndim) if i != axis) + (axis,)}) \
        if axis != last else t
    m = to_tensor(np.ascontiguousarray(matrix, dtype=t.dtype), device=getattr(t.device, "base", t.device))
    out = dispatch("matmul", (moved, m))
    if axis == last:
        return out
    perm = list(range(t.ndim - 1))
    perm.insert(axis, t.ndim - 1)
    return dispatch("transpose", (out,), {"perm": tuple(perm)})


def rule(*ops: str):
    """Decorator: the vjp rule of these ops."""
    def register(fn):
        for op in ops:
            RULES[op] = fn
        return fn
    return register


def differentiable() -> frozenset:
    """The ops that have a vjp rule."""
    return frozenset(RULES)
