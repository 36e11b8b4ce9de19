"""Float max, argmax, topk, max pool and softmax as eager computes them at nan and inf: onnxruntime drops those."""
from __future__ import annotations

import numpy as np

_I32, _BOOL = np.dtype("int32"), np.dtype("bool")


def _nan_mask(w, x) -> str:
    return w.cast(w.node("IsNaN", [x]), _I32)


def _nan_where(w, hit, result: str, out: str) -> None:
    """out = nan where hit, else result."""
    w.node("Where", [w.cast(hit, _BOOL), w.const(np.asarray(np.nan, w.dtype(result))), result], [out])


def reduce(w, op_type: str, x, axes, out: str, keep: int) -> None:
    """ReduceMax / ReduceMin, nan where the reduced values hold one (numpy's max and min propagate nan)."""
    result = w.node(op_type, [x, w.ints(axes)], keepdims=keep)
    _nan_where(w, w.node("ReduceMax", [_nan_mask(w, x), w.ints(axes)], keepdims=keep), result, out)


def arg(w, op_type: str, x, out: str, axis: int, keep: int) -> None:
    """ArgMax / ArgMin, the first nan's index where the values hold one (numpy's argmax and argmin)."""
    result = w.node(op_type, [x], axis=axis, keepdims=keep, select_last_index=0)
    mask = _nan_mask(w, x)
    first_nan = w.node("ArgMax", [mask], axis=axis, keepdims=keep, select_last_index=0)
    has_nan = w.cast(w.node("ReduceMax", [mask, w.ints([axis])], keepdims=keep), _BOOL)
    w.node("Where", [has_nan, first_nan, result], [out])


def pool(w, op_type: str, x, out: str, **attrs) -> None:
    """MaxPool / GlobalMaxPool, nan where a window holds one and -inf where it holds only -inf (onnxruntime starts
    from the lowest finite value, and pads with it)."""
    result = w.node(op_type, [x], **attrs)
    c = lambda v, dt=np.float32: w.const(np.asarray(v, dt))  # noqa: E731
    # per element 2 for nan, 0 for -inf, else 1: the window's max says which the window's result is
    kind = w.node("Where", [w.node("IsNaN", [x]), c(2.0),
                            w.node("Where", [w.node("Equal", [x, c(-np.inf, w.dtype(x))]), c(0.0), c(1.0)])])
    worst = w.node(op_type, [kind], **attrs)
    dt = w.dtype(result)
    low = w.node("Where", [w.node("Greater", [worst, c(0.5)]), result, c(-np.inf, dt)])
    w.node("Where", [w.node("Greater", [worst, c(1.5)]), c(np.nan, dt), low], [out])


def topk(w, x, k: int, axis: int, largest: int, outs) -> None:
    """TopK in eager's order: nan above +inf, equal values by lower index. Sorted once with nan as +inf (its ties,
    the lower index first), then stably by nan-ness, which moves the nans to the front (largest) or the back."""
    nan = w.node("IsNaN", [x])
    key = w.node("Where", [nan, w.const(np.asarray(np.inf, w.dtype(x))), x])
    size = w.shape(x)[axis]
    order, pick = w.fresh("order"), w.fresh("pick")
    w.node("TopK", [key, w.ints([size])], [w.fresh("sorted"), order], axis=axis, largest=largest, sorted=1)
    by_nan = w.node("GatherElements", [w.cast(nan, _I32), order], axis=axis)
    w.node("TopK", [by_nan, w.ints([k])], [w.fresh("sorted"), pick], axis=axis, largest=largest, sorted=1)
    index = w.node("GatherElements", [order, pick], [outs[1]], axis=axis)
    w.node("GatherElements", [x, index], [outs[0]], axis=axis)


def softmax(w, op_type: str, x, out: str, axis: int) -> None:
    """Softmax / LogSoftmax, nan along a slice whose max is inf or nan: eager subtracts the max first (inf - inf)."""
    result = w.node(op_type, [x], axis=axis)
    if 0 in w.shape(x):
        w.node("Identity", [result], [out])
        return
    top = w.node("IsInf", [w.node("ReduceMax", [x, w.ints([axis])], keepdims=1)])
    has_nan = w.cast(w.node("ReduceMax", [_nan_mask(w, x), w.ints([axis])], keepdims=1), _BOOL)
    _nan_where(w, w.node("Or", [top, has_nan]), result, out)
