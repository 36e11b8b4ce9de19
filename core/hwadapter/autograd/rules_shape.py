"""vjp rules of the data-movement ops: reshape, transpose, expand, concat, split, slice, pad, gather and scatter."""
from __future__ import annotations

import math

import numpy as np

from ..api.errors import InvalidArgumentError
from ..api.reference import resize as resize_reference, slice_positions
from ..dispatch.dispatcher import dispatch
from ..ops import api as O
from ..tensor import to_tensor
from .registry import along, reshape, rule


def zeros(shape, like):
    """Zeros of `shape` in like's dtype on like's device (inside a trace: a constant of the graph)."""
    return O.zeros(list(shape), like.dtype, getattr(like.device, "base", like.device))


@rule("reshape")
def _reshape(node, g):
    return (dispatch("reshape", (g,), {"shape": tuple(node.inputs[0].shape)}),)


@rule("transpose")
def _transpose(node, g):
    perm = node.attrs["perm"]
    return (dispatch("transpose", (g,), {"perm": tuple(int(i) for i in np.argsort(perm))}),)


@rule("expand")
def _expand(node, g):
    return (g,)  # the engine sums it back to the input's shape


@rule("concat")
def _concat(node, g):
    axis = node.attrs.get("axis", 0)
    sizes = tuple(t.shape[axis] for t in node.inputs)
    parts = dispatch("split", (g,), {"sections": sizes, "axis": axis})
    return tuple(parts)


@rule("split")
def _split(node, *grads):
    x = node.inputs[0]
    axis = node.attrs.get("axis", 0)
    full = [gr if gr is not None else zeros(node.meta[i][0], x) for i, gr in enumerate(grads)]
    return (dispatch("concat", tuple(full), {"axis": axis}),)


def _scatter_axis(g, positions, size, axis):
    """g (whose `axis` holds the elements at `positions`) placed at those positions of an axis of `size`, zeros
    elsewhere, repeated positions adding up: a one-hot matrix product, exact for any index map."""
    onehot = np.zeros((len(positions), size))
    np.add.at(onehot, (np.arange(len(positions)), np.asarray(positions, np.int64)), 1.0)
    return along(g, onehot, axis)


@rule("slice")
def _slice(node, g):
    x = node.inputs[0]
    a = node.attrs
    pads = [[0, 0] for _ in range(x.ndim)]
    for axis, start, end, step in zip(a["axes"], a["starts"], a["ends"], a["steps"]):
        axis = axis % x.ndim
        span = np.arange(x.shape[axis])[slice_positions(start, end, step)]
        if step == 1 and len(span):
            pads[axis] = [int(span[0]), int(x.shape[axis] - span[-1] - 1)]
        else:
            g = _scatter_axis(g, span, x.shape[axis], axis)
    if any(p != [0, 0] for p in pads):
        g = dispatch("pad", (g,), {"pads": tuple(tuple(p) for p in pads), "mode": "constant", "value": 0.0})
    return (g,)


_NUMPY_PAD = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@rule("pad")
def _pad(node, g):
    """constant: the inner block; reflect, replicate, circular: each padded axis is an index map of the input's
    (np.pad of its positions), whose gradient adds every copy back onto the element it copied."""
    x = node.inputs[0]
    pads = node.attrs["pads"]
    mode = node.attrs.get("mode", "constant")
    if x.ndim == 0:
        return (g,)
    if mode != "constant":
        for axis, (lo, hi) in enumerate(pads):
            if lo or hi:
                positions = np.pad(np.arange(x.shape[axis]), (int(lo), int(hi)), mode=_NUMPY_PAD[mode])
                g = _scatter_axis(g, positions, x.shape[axis], axis)
        return (g,)
    starts = [int(lo) for lo, _ in pads]
    return (dispatch("slice", (g,), {"axes": tuple(range(x.ndim)), "starts": tuple(starts),
                                     "ends": tuple(s + n for s, n in zip(starts, x.shape)),
                                     "steps": (1,) * x.ndim}),)


_RESIZE_OWN = ("sizes", "scales", "roi", "extrapolation_value")


@rule("resize")
def _resize(node, g):
    """Resize is linear and separable (every mode, extrapolated points aside, which are constants): axis by axis, the
    matrix that the reference resize makes of the identity, transposed. The axes it leaves alone stay alone."""
    x = node.inputs[0]
    a = node.attrs
    sizes, scales, roi = a["sizes"], a["scales"], a.get("roi")
    rest = {k: v for k, v in a.items() if k not in _RESIZE_OWN}
    r = x.ndim
    for axis in range(r):
        box = (0.0, 1.0) if roi is None else (float(roi[axis]), float(roi[axis + r]))
        n = x.shape[axis]
        if math.isclose(scales[axis], 1.0) and sizes[axis] == n and math.isclose(box[0], 0.0) and \
                math.isclose(box[1], 1.0):
            continue  # as reference.resize: the identity along this axis
        weights = resize_reference(np.eye(n), sizes=(int(sizes[axis]), n), scales=(float(scales[axis]), 1.0),
                                   roi=(box[0], 0.0, box[1], 1.0), extrapolation_value=0.0, **rest)
        g = along(g, weights, axis)  # weights[i, j]: how much output i takes of input j
    return (g,)


@rule("gather")
def _gather(node, g):
    x, index = node.inputs
    axis = node.attrs.get("axis", 0) % x.ndim
    flat = reshape(index, [index.size])
    g = reshape(g, list(x.shape[:axis]) + [index.size] + list(x.shape[axis + 1:]))
    idx = O.broadcast_to(reshape(flat, [1] * axis + [index.size] + [1] * (x.ndim - axis - 1)), g.shape)
    out = dispatch("scatter_elements", (zeros(x.shape, g), idx, g), {"axis": axis, "reduction": "add"})
    return out, None


@rule("gather_elements")
def _gather_elements(node, g):
    x, index = node.inputs
    axis = node.attrs.get("axis", 0)
    return dispatch("scatter_elements", (zeros(x.shape, g), index, g), {"axis": axis, "reduction": "add"}), None


@rule("gather_nd")
def _gather_nd(node, g):
    x, index = node.inputs
    if node.attrs.get("batch_dims", 0):
        raise InvalidArgumentError("backward: gather_nd with batch_dims has no gradient rule. Fix: use batch_dims=0")
    return dispatch("scatter_nd", (zeros(x.shape, g), index, g), {"reduction": "add"}), None


def _ids(updates, like):
    """Each update's number (int64, in updates' shape) on like's device."""
    return to_tensor(np.arange(updates.size, dtype=np.int64).reshape(updates.shape),
                     device=getattr(like.device, "base", like.device))


def _unowned(x_shape, like):
    return O.full(list(x_shape), -1, "int64", getattr(like.device, "base", like.device))


@rule("scatter_elements")
def _scatter_elements(node, g):
    x, index, updates = node.inputs
    axis, reduction = node.attrs.get("axis", 0), node.attrs.get("reduction", "none")
    gu = dispatch("gather_elements", (g, index), {"axis": axis})
    if reduction == "add":
        return g, None, gu
    if reduction == "none":
        gx = dispatch("scatter_elements", (g, index, zeros(updates.shape, g)), {"axis": axis, "reduction": "none"})
        if node.needs[2]:  # of updates written to one place, only the one the scatter kept gets its gradient
            ids = _ids(updates, g)
            owner = dispatch("scatter_elements", (_unowned(x.shape, g), index, ids), {"axis": axis,
                                                                                       "reduction": "none"})
            won = O.equal(dispatch("gather_elements", (owner, index), {"axis": axis}), ids)
            gu = O.where(won, gu, O.zeros_like(gu))
        return gx, None, gu
    raise InvalidArgumentError(f"backward: scatter_elements with reduction {reduction!r} has no gradient rule. "
                               f"Fix: use reduction 'add' or 'none' (assign)")


@rule("scatter_nd")
def _scatter_nd(node, g):
    x, index, updates = node.inputs
    reduction = node.attrs.get("reduction", "none")
    gu = dispatch("gather_nd", (g, index), {"batch_dims": 0})
    if reduction == "add":
        return g, None, gu
    if reduction == "none":
        gx = dispatch("scatter_nd", (g, index, zeros(updates.shape, g)), {"reduction": "none"})
        if node.needs[2]:  # as scatter_elements: repeated coordinates, one update kept
            ids = _ids(updates, g)
            owner = dispatch("scatter_nd", (_unowned(x.shape, g), index, ids), {"reduction": "none"})
            won = O.equal(dispatch("gather_nd", (owner, index), {"batch_dims": 0}), ids)
            gu = O.where(won, gu, O.zeros_like(gu))
        return gx, None, gu
    raise InvalidArgumentError(f"backward: scatter_nd with reduction {reduction!r} has no gradient rule. Fix: use "
                               f"reduction 'add' or 'none'")


@rule("topk")
def _topk(node, gv, gi=None):
    x = node.inputs[0]
    if gv is None:
        return (None,)
    axis = node.attrs.get("axis", -1) % x.ndim
    index = node.output(1)  # topk's int64 indices, kept by the node
    return (dispatch("scatter_elements", (zeros(x.shape, gv), index, gv), {"axis": axis, "reduction": "add"}),)
