"""vjp rules of the data-movement ops: reshape, transpose, expand, concat, split, slice, pad, gather and scatter."""
from __future__ import annotations

import numpy as np

from ..api.errors import InvalidArgumentError
from ..api.reference import slice_positions
from ..dispatch.dispatcher import dispatch
from ..ops import api as O
from ..tensor import to_tensor
from .registry import reshape, rule


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
    elsewhere: a one-hot matrix product, exact for any step."""
    onehot = np.zeros((len(positions), size), g.dtype)
    onehot[np.arange(len(positions)), positions] = 1
    last = g.ndim - 1
    moved = O.transpose(g, [i for i in range(g.ndim) if i != axis] + [axis]) if axis != last else g
    placed = O.matmul(moved, to_tensor(onehot, device=getattr(g.device, "base", g.device)))
    if axis == last:
        return placed
    perm = list(range(g.ndim - 1))
    perm.insert(axis, g.ndim - 1)
    return O.transpose(placed, perm)


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


@rule("pad")
def _pad(node, g):
    x = node.inputs[0]
    if node.attrs.get("mode", "constant") != "constant":
        raise _no_rule("pad", f"mode {node.attrs.get('mode')!r}")
    pads = node.attrs["pads"]
    starts = [int(lo) for lo, _ in pads]
    return (dispatch("slice", (g,), {"axes": tuple(range(x.ndim)), "starts": tuple(starts),
                                     "ends": tuple(s + n for s, n in zip(starts, x.shape)),
                                     "steps": (1,) * x.ndim}),)


def _no_rule(op, what):
    return InvalidArgumentError(f"backward: op {op!r} with {what} has no gradient rule. Fix: use mode='constant'")


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


@rule("scatter_elements")
def _scatter_elements(node, g):
    x, index, updates = node.inputs
    axis, reduction = node.attrs.get("axis", 0), node.attrs.get("reduction", "none")
    gu = dispatch("gather_elements", (g, index), {"axis": axis})
    if reduction == "add":
        return g, None, gu
    if reduction == "none":
        gx = dispatch("scatter_elements", (g, index, zeros(updates.shape, g)), {"axis": axis, "reduction": "none"})
        return gx, None, gu
    raise InvalidArgumentError(f"backward: scatter_elements with reduction {reduction!r} has no gradient rule. "
                               f"Fix: use reduction 'add' or 'none' (assign)")


@rule("scatter_nd")
def _scatter_nd(node, g):
    x, index, updates = node.inputs
    reduction = node.attrs.get("reduction", "none")
    gu = dispatch("gather_nd", (g, index), {})
    if reduction == "add":
        return g, None, gu
    if reduction == "none":
        return dispatch("scatter_nd", (g, index, zeros(updates.shape, g)), {"reduction": "none"}), None, gu
    raise InvalidArgumentError(f"backward: scatter_nd with reduction {reduction!r} has no gradient rule. Fix: use "
                               f"reduction 'add' or 'none'")


@rule("topk")
def _topk(node, gv, gi=None):
    x = node.inputs[0]
    if gv is None:
        return (None,)
    axis = node.attrs.get("axis", -1) % x.ndim
    index = wrap_index(node)
    return (dispatch("scatter_elements", (zeros(x.shape, gv), index, gv), {"axis": axis, "reduction": "add"}),)


def wrap_index(node):
    """topk's index output (int64: kept by the node as data)."""
    return node.output(1)
