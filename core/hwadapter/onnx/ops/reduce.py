"""Reductions: the Reduce* family (decomposed into hwadapter's sum/prod/max/min/mean) and ArgMax/ArgMin."""
from __future__ import annotations

import numpy as np

from . import converter
from .tensor import axis_of, axes_of, ints, slice_axes

#: op type -> (elementwise step before, hwadapter reduction, elementwise step after); None: no step.
_FAMILY = {
    "ReduceSum": (None, "sum", None),
    "ReduceMean": (None, "mean", None),
    "ReduceMax": (None, "max", None),
    "ReduceMin": (None, "min", None),
    "ReduceProd": (None, "prod", None),
    "ReduceL1": ("abs", "sum", None),
    "ReduceL2": ("square", "sum", "sqrt"),
    "ReduceSumSquare": ("square", "sum", None),
    "ReduceLogSum": (None, "sum", "log"),
    "ReduceLogSumExp": ("exp", "sum", "log"),
}
#: Ops defined through exp/log/sqrt: float inputs only (ONNX's integer versions round a float result unstated).
_FLOAT_ONLY = {"ReduceL2", "ReduceLogSum", "ReduceLogSumExp"}


def _empty_value(op_type: str, dtype: np.dtype):
    """The result of reducing an empty set, as onnx's reference gives it (None: none defined for this dtype)."""
    if op_type == "ReduceMax":
        return False if dtype == np.bool_ else (np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf)
    if op_type == "ReduceMin":
        return True if dtype == np.bool_ else (np.iinfo(dtype).max if dtype.kind in "iu" else np.inf)
    if op_type == "ReduceProd":
        return 1
    if op_type in ("ReduceLogSum", "ReduceLogSumExp"):
        return -np.inf
    if op_type == "ReduceMean":
        return None  # the spec: "undefined" (onnx's reference gives nan, onnxruntime 0)
    return 0


def _axes(ctx, node):
    """The reduced axes as ONNX gives them (None when none are given): attribute before the op's axes became an
    input (opset 13 for ReduceSum, 18 for the rest)."""
    as_input = 13 if node.op_type == "ReduceSum" else 18
    if ctx.opset >= as_input:
        return ints(ctx, node, 1, "axes") if ctx.input(node, 1) is not None else None
    return node.ints("axes", None)


@converter(*_FAMILY, values=(1,))
def reduce(ctx, node):
    x = ctx.input(node, 0)
    shape, dt = ctx.shape(x), np.dtype(ctx.dtype(x))
    pre, red, post = _FAMILY[node.op_type]
    if node.op_type in _FLOAT_ONLY and dt.kind != "f":
        ctx.fail(node, f"{node.op_type} of {dt.name} input: its integer result's rounding is not specified")
    if dt == np.bool_ and red != "max" and red != "min":
        ctx.fail(node, f"{node.op_type} of bool input is not an ONNX type")
    keep = bool(node.int("keepdims", 1))
    axes = _axes(ctx, node)
    if not axes:
        if node.int("noop_with_empty_axes", 0):
            if pre or post:  # the spec says "the input"; onnx's reference applies the elementwise steps
                ctx.fail(node, f"noop_with_empty_axes with {node.op_type}: the spec and onnx's reference differ")
            return x
        axes = list(range(len(shape)))
    axes = sorted(axes_of(ctx, node, axes, len(shape)))
    out_shape = tuple(1 if i in axes else s for i, s in enumerate(shape) if keep or i not in axes)
    if any(shape[a] == 0 for a in axes) or 0 in shape:  # every output is the empty set's value (or none)
        value = _empty_value(node.op_type, dt)
        if value is None:
            ctx.fail(node, f"{node.op_type} of an empty {dt.name} set has no value")
        return ctx.constant(np.full(out_shape, value, dtype=dt))
    y = x
    if pre == "square":
        y = ctx.op("mul", y, y)
    elif pre:
        y = ctx.op(pre, y)
    if axes and red == "mean" and dt.kind in "iu":
        y = _integer_mean(ctx, y, axes, keep, shape)
    elif axes:
        y = ctx.op(red, y, axis=tuple(axes), keepdim=keep)
    if post:
        y = ctx.op(post, y)
    return y


def _integer_mean(ctx, x, axes, keep, shape):
    """numpy's mean of integers (onnx's reference): the sum in x's dtype, divided in float64, truncated back. The
    division in float64 is exactly numpy's; hwadapter's mean op takes floats only."""
    total = ctx.cast(ctx.op("sum", x, axis=tuple(axes), keepdim=keep), np.float64)
    count = ctx.constant(np.array(float(np.prod([shape[a] for a in axes])), np.float64))
    return ctx.cast(ctx.op("div", total, count), ctx.dtype(x))


@converter("ArgMax", "ArgMin")
def arg_reduce(ctx, node):
    """argmax/argmin, whose ties give the first index; select_last_index reverses the axis and counts back."""
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    if not shape:
        ctx.fail(node, "its input is 0-d")
    axis = axis_of(ctx, node, node.int("axis", 0), len(shape))
    keep = bool(node.int("keepdims", 1))
    n = shape[axis]
    if n == 0:
        ctx.fail(node, f"it reduces an empty axis {axis} (shape {shape}), which has no index to give")
    op = "argmax" if node.op_type == "ArgMax" else "argmin"
    if not node.int("select_last_index", 0):
        return ctx.op(op, x, axis=axis, keepdim=keep)
    rev = slice_axes(ctx, x, {axis: (n - 1, -n - 1, -1)})
    idx = ctx.op(op, rev, axis=axis, keepdim=keep)
    return ctx.op("sub", ctx.constant(np.array(n - 1, np.int64)), idx)
