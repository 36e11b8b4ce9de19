"""Loss functions with paddle's signatures and reductions (hw.nn.functional re-exports them): cross_entropy,
computed stably through log_softmax, and mse_loss."""
from __future__ import annotations

import numpy as np

from .. import trace as _trace
from ..api import shapes
from ..api.errors import InvalidArgumentError, UnsupportedDTypeError
from ..dispatch.dispatcher import dispatch
from ..ops._common import _FLOAT, _INTEGER, _tensor, cast, index_int64, number_arg
from ..ops.creation import arange
from ..ops.elementwise import (add, divide, equal, greater_equal, less_than, log, logical_and, logical_or, multiply,
                               neg, not_equal, subtract)
from ..ops.manipulation import _reshape, squeeze, unsqueeze
from ..ops.reduction import mean, sum as _sum

_REDUCTIONS = ("mean", "sum", "none")


def _reduction(op: str, reduction) -> str:
    if reduction not in _REDUCTIONS:
        raise InvalidArgumentError(f"{op}: reduction must be 'mean', 'sum' or 'none', not {shapes.show(reduction)}. "
                                   f"Fix: pass one of those")
    return reduction


def _float_input(op: str, x):
    x = _tensor(op, x)
    if x.dtype not in _FLOAT:
        raise UnsupportedDTypeError(f"{op}: input must be floating-point (logits or values), not {x.dtype.name}. "
                                    f"Fix: cast it, e.g. x.astype('float32')")
    return x


def _guarded_ratio(total, count):
    """total / count, or 0 where count is 0 (paddle divides by count + (count == 0))."""
    return divide(total, add(count, cast(equal(count, 0), count.dtype)))


def cross_entropy(input, label, weight=None, ignore_index=-100, reduction="mean", soft_label=False, axis=-1,  # noqa: A002
                  use_softmax=True, label_smoothing=0.0, name=None):
    """Softmax cross entropy of logits `input` against class indices (integer labels shaped as input without the
    class axis, or with it of size 1) or, with soft_label=True, class probabilities shaped as input. weight scales
    each class; labels equal to ignore_index count nothing. reduction 'mean' follows paddle: over the labels that
    are not ignored when ignore_index >= 0 (weighted: over their weights), else over all of them."""
    op = "cross_entropy"
    x = _float_input(op, input)
    if x.ndim == 0:
        raise InvalidArgumentError(f"{op}: input is 0-d; it needs a class axis. Fix: pass logits of shape [N, C]")
    ax = shapes.normalize_axis(op, axis, x.ndim)
    c = x.shape[ax]
    reduction = _reduction(op, reduction)
    soft = shapes.flag(op, "soft_label", soft_label)
    eps = number_arg(op, "label_smoothing", label_smoothing)
    if isinstance(eps, bool) or not 0 <= eps < 1:
        raise InvalidArgumentError(f"{op}: label_smoothing must be in [0, 1), not {eps!r}. Fix: pass e.g. 0.1")
    ignore_index = shapes.int_arg(op, "ignore_index", ignore_index)
    w = _class_weight(op, weight, x, c)
    logp = dispatch("log_softmax", (x,), {"axis": ax}) if shapes.flag(op, "use_softmax", use_softmax) else log(x)
    label = _tensor(op, label)
    if soft:
        return _soft(op, logp, label, w, eps, ax, reduction)
    return _hard(op, logp, label, w, eps, ax, ignore_index, reduction)


def _class_weight(op: str, weight, x, c: int):
    if weight is None:
        return None
    w = _tensor(op, weight)
    if tuple(w.shape) != (c,) or w.dtype not in _FLOAT:
        raise InvalidArgumentError(f"{op}: weight must be a float tensor of shape [{c}] (one per class), got "
                                   f"{w.dtype.name} {list(w.shape)}. Fix: pass one weight per class")
    return w if w.dtype == x.dtype else cast(w, x.dtype)


def _class_shape(ax: int, ndim: int, c: int) -> tuple:
    return tuple(c if a == ax else 1 for a in range(ndim))


def _soft(op, logp, label, w, eps, ax, reduction):
    """Probabilities as labels: -sum(label * log p) along the class axis (kept, as paddle: [N, 1])."""
    if label.dtype not in _FLOAT:
        raise UnsupportedDTypeError(f"{op}: soft labels (soft_label=True) are class probabilities and must be "
                                    f"floating-point, not {label.dtype.name}. Fix: cast them, or pass integer class "
                                    f"indices with soft_label=False")
    if tuple(label.shape) != tuple(logp.shape):
        raise InvalidArgumentError(f"{op}: soft labels of shape {list(label.shape)} must have the input's shape "
                                   f"{list(logp.shape)}. Fix: one probability per class and sample")
    c = logp.shape[ax]
    label = label if label.dtype == logp.dtype else cast(label, logp.dtype)
    if eps:
        label = add(multiply(label, 1.0 - eps), eps / c)
    loss = neg(_sum(multiply(label, logp), ax, keepdim=True))
    if w is None:
        return _reduce(loss, reduction)
    weighted = _sum(multiply(label, _reshape(w, _class_shape(ax, logp.ndim, c))), ax, keepdim=True)
    loss = multiply(loss, weighted)
    if reduction != "mean":
        return _reduce(loss, reduction)
    return _guarded_ratio(_sum(loss), _sum(weighted))


def _hard(op, logp, label, w, eps, ax, ignore_index, reduction):
    """Class indices as labels: -log p[label], picked by a one-hot product (elementwise ops and a sum, which every
    device runs natively), with label smoothing as paddle's (1 - eps) * one_hot + eps / C."""
    if label.dtype not in _INTEGER:
        raise UnsupportedDTypeError(f"{op}: hard labels must be integer class indices, not {label.dtype.name}. Fix: "
                                    f"cast them with label.astype('int64'), or pass soft_label=True for class "
                                    f"probabilities")
    c, ndim = logp.shape[ax], logp.ndim
    keep_axis = label.ndim == ndim
    lab = label if keep_axis else unsqueeze(label, ax) if label.ndim == ndim - 1 else None
    want = tuple(1 if a == ax else s for a, s in enumerate(logp.shape))
    if lab is None or tuple(lab.shape) != want:
        raise InvalidArgumentError(f"{op}: labels of shape {list(label.shape)} do not fit input {list(logp.shape)} "
                                   f"with classes on axis {ax}. Fix: pass labels of shape "
                                   f"{[s for a, s in enumerate(logp.shape) if a != ax]} (or {list(want)})")
    lab = index_int64(lab)
    valid = not_equal(lab, ignore_index)
    _check_range(op, lab, valid, c, ignore_index)
    classes = arange(0, c, dtype="int64", device=logp.device)
    one_hot = cast(logical_and(equal(lab, _reshape(classes, _class_shape(ax, ndim, c))), valid), logp.dtype)
    loss = neg(_sum(multiply(one_hot, logp), ax, keepdim=True))
    valid_f = cast(valid, logp.dtype)
    if eps:
        loss = add(multiply(loss, 1.0 - eps), multiply(neg(mean(logp, ax, keepdim=True)), eps))
        loss = multiply(loss, valid_f)
    count = valid_f
    if w is not None:
        count = _sum(multiply(one_hot, _reshape(w, _class_shape(ax, ndim, c))), ax, keepdim=True)
        if eps:  # paddle weighs the smoothed label: (1 - eps) * w[label] + eps * mean(w)
            count = multiply(add(multiply(count, 1.0 - eps), multiply(mean(w), eps)), valid_f)
        loss = multiply(loss, count)
    if reduction == "none":
        return loss if keep_axis else squeeze(loss, ax)
    if reduction == "sum":
        return _sum(loss)
    if ignore_index >= 0 or w is not None:
        return _guarded_ratio(_sum(loss), _sum(count))
    return mean(loss)


def _check_range(op: str, lab, valid, c: int, ignore_index: int) -> None:
    """Refuse labels outside [0, c) that are not ignore_index (one value read back; skipped inside a to_static
    trace, which cannot read values: there such a label counts nothing)."""
    if _trace.active() is not None:
        return
    labels, keep = lab._data, valid._data
    if isinstance(labels, np.ndarray) and isinstance(keep, np.ndarray):  # host memory: numpy itself, no ops
        found = bool((keep & ((labels < 0) | (labels >= c))).any())
    else:
        found = bool(_sum(logical_and(valid, logical_or(less_than(lab, 0), greater_equal(lab, c)))).item())
    if found:
        raise InvalidArgumentError(f"{op}: a label is outside the {c} classes [0, {c}) and is not ignore_index "
                                   f"({ignore_index}). Fix: labels must be class indices 0..{c - 1}; mark the ones "
                                   f"to skip with ignore_index")


def _reduce(loss, reduction: str):
    if reduction == "sum":
        return _sum(loss)
    return mean(loss) if reduction == "mean" else loss


def mse_loss(input, label, reduction="mean", name=None):  # noqa: A002
    """(input - label) ** 2, broadcast, reduced by 'mean' (default), 'sum' or 'none'."""
    op = "mse_loss"
    x = _float_input(op, input)
    y = _tensor(op, label)
    reduction = _reduction(op, reduction)
    diff = subtract(x, y if y.dtype == x.dtype else cast(y, x.dtype))
    return _reduce(multiply(diff, diff), reduction)

