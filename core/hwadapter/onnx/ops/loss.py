"""Loss ONNX ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opsets 12, 13, 22: the same semantics;
later versions only admit more dtypes), decomposed into gather_elements, where and reductions.

Semantics are the schemas' function bodies (which onnxruntime follows): ignored targets (== ignore_index, in range
or not) contribute neither loss nor weight, and "mean" divides by the sum of the applied weights (the count of
non-ignored targets without a weight input). onnx's Python reference differs in one corner, NLL with
ignore_index == -1 and no weight, where its mean counts ignored targets too; no onnx test case covers it."""
from __future__ import annotations

import numpy as np

from . import converter
from .tensor import reshape

_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_INT64 = np.dtype(np.int64)
_REDUCTIONS = ("none", "sum", "mean")


def _check(ctx, node, x, target, weight):
    """Fail on shapes or dtypes the op does not define; the reduction mode."""
    shape, tshape = ctx.shape(x), ctx.shape(target)
    if ctx.dtype(x) not in _FLOATS:
        ctx.fail(node, f"its input is {ctx.dtype(x).name}; hwadapter converts float16, float32 and float64 losses")
    if len(shape) < 2:
        ctx.fail(node, f"its input has shape {shape}; the op needs (N, C, d1, ..., dk)")
    if tuple(tshape) != (shape[0],) + tuple(shape[2:]):
        ctx.fail(node, f"its target has shape {tshape}, not (N, d1, ..., dk) = {(shape[0],) + tuple(shape[2:])}")
    if np.dtype(ctx.dtype(target)).kind not in "iu":
        ctx.fail(node, f"its target is {ctx.dtype(target).name}, not an integer tensor")
    if weight is not None:
        if tuple(ctx.shape(weight)) != (shape[1],):
            ctx.fail(node, f"its weight has shape {ctx.shape(weight)}, not (C,) = ({shape[1]},)")
        if ctx.dtype(weight) != ctx.dtype(x):
            ctx.fail(node, f"its weight is {ctx.dtype(weight).name} and its input {ctx.dtype(x).name}")
    reduction = node.string("reduction", "mean")
    if reduction not in _REDUCTIONS:
        ctx.fail(node, f"its reduction {reduction!r} is none of {', '.join(_REDUCTIONS)}")
    return reduction


def nll(ctx, node, logp, target, weight):
    """The NegativeLogLikelihoodLoss of log-probabilities `logp` (N, C, d...) for `target` (N, d...)."""
    reduction = _check(ctx, node, logp, target, weight)
    shape, dt = ctx.shape(logp), ctx.dtype(logp)
    n_classes = shape[1]
    zero = ctx.constant(np.zeros((), dt))
    t = ctx.cast(target, _INT64)
    ignore_index = node.int("ignore_index", None)
    known = ctx.const(target)
    if known is not None:  # a constant target out of range is refused here: at run time the kernel would say so
        used = known[known != ignore_index] if ignore_index is not None else known
        if used.size and (used.min() < -n_classes or used.max() >= n_classes):
            ctx.fail(node, f"its target holds class {int(used.max() if used.max() >= n_classes else used.min())}, "
                           f"outside the {n_classes} classes", fix="give targets in 0..C-1, or ignore_index")
    ignored = None
    if ignore_index is not None:
        ignored = ctx.op("equal", t, ctx.constant(np.array(int(ignore_index), _INT64)))
        t = ctx.op("where", ignored, ctx.constant(np.zeros((), _INT64)), t)  # any in-range index: its value is unused
    # negative targets count from the end, as ONNX's GatherElements and Gather do (kernels need them non-negative)
    t = ctx.op("where", ctx.op("less", t, ctx.constant(np.zeros((), _INT64))),
               ctx.op("add", t, ctx.constant(np.array(n_classes, _INT64))), t)
    idx = reshape(ctx, t, (shape[0], 1) + tuple(shape[2:]))
    picked = reshape(ctx, ctx.op("gather_elements", logp, idx, axis=1), ctx.shape(target))
    loss = ctx.op("neg", picked)
    if ignored is not None:
        loss = ctx.op("where", ignored, zero, loss)
    applied = None  # the weight each sample's loss is multiplied by (None: 1 for all)
    if weight is not None:
        applied = ctx.op("gather", weight, t, axis=0)
        if ignored is not None:
            applied = ctx.op("where", ignored, zero, applied)
    elif ignored is not None:
        applied = ctx.op("where", ignored, zero, ctx.constant(np.ones((), dt)))
    if weight is not None:
        loss = ctx.op("mul", loss, applied)
    if reduction == "none":
        return loss
    total = ctx.op("sum", loss, axis=None, keepdim=False)
    if reduction == "sum":
        return total
    if applied is None:
        return ctx.op("mean", loss, axis=None, keepdim=False)
    return ctx.op("div", total, ctx.op("sum", applied, axis=None, keepdim=False))


@converter("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(ctx, node):
    return nll(ctx, node, ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2))


@converter("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx, node):
    """NLL of log_softmax over the class axis (1); the second output, when asked for, is that log_softmax."""
    x, target, weight = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    _check(ctx, node, x, target, weight)
    log_prob = ctx.op("log_softmax", x, axis=1)
    return nll(ctx, node, log_prob, target, weight), log_prob
