"""One op's input gradients by its vjp rule, outside any tape: what a plugin's fused backward kernel `<op>_vjp` must
return (the conformance kit's reference)."""
from __future__ import annotations

from ..api.errors import InvalidArgumentError
from ..dispatch.dispatcher import dispatch
from ..dispatch.tensor import Tensor
from .engine import Node, enable_grad, fit, no_grad
from .registry import RULES


def op_vjp(op: str, inputs, output_grads, attrs: dict | None = None, outputs=None, needs=None) -> list:
    """The gradients of op's inputs (tensors, as the frontend dispatches them, with `attrs`) for the gradients of its
    outputs (a tensor or None per output), by op's rule, never by a device's fused kernel: one per input, None for an
    integer input or where none flows (or where `needs`, a bool per input, says none is wanted).

    `outputs`, the forward's results as tensors when the caller has them (a host framework's grad kernel), spares
    running the forward again; rules that read no output need only their shapes and dtypes right."""
    rule = RULES.get(op)
    if rule is None:
        raise InvalidArgumentError(f"op_vjp: op {op!r} has no vjp rule. Fix: pass an op of "
                                   f"hwadapter.autograd.differentiable()")
    ts = []
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise InvalidArgumentError(f"op_vjp: input {i} of {op!r} is a {type(t).__name__}. Fix: pass tensors")
        t = t.detach()
        t.stop_gradient = t.dtype.kind != "f"
        ts.append(t)
    if needs is not None:
        for t, need in zip(ts, needs):
            t.stop_gradient = t.stop_gradient or not need
    if outputs is None:
        with enable_grad():
            out = dispatch(op, tuple(ts), attrs or {})
        outs = out if isinstance(out, (tuple, list)) else (out,)
    else:
        outs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
    grads = list(output_grads) if isinstance(output_grads, (tuple, list)) else [output_grads]
    if len(grads) != len(outs):
        raise InvalidArgumentError(f"op_vjp: {op!r} has {len(outs)} output(s), {len(grads)} gradient(s) given. Fix: "
                                   f"pass one per output (None for none)")
    if outputs is None:
        node = next((o._ag.node for o in outs if o._ag is not None and o._ag.node is not None), None)
    else:
        wanted = tuple(not t.stop_gradient for t in ts)
        node = Node(op, tuple(ts), attrs or {}, wanted, tuple(o._data for o in outs)) if any(wanted) else None
    if node is None:  # no float input: nothing is differentiable
        return [None] * len(ts)
    for i, (g, o) in enumerate(zip(grads, outs)):
        if g is not None and (not isinstance(g, Tensor) or tuple(g.shape) != tuple(o.shape)):
            raise InvalidArgumentError(f"op_vjp: the gradient of output {i} of {op!r} must be a tensor of shape "
                                       f"{list(o.shape)}. Fix: pass one of that shape")
    with no_grad():
        in_grads = rule(node, *[None if g is None else g.astype(o.dtype) for g, o in zip(grads, outs)])
        return [None if g is None or not need else fit(g, t.shape, t._dtype)
                for g, need, t in zip(in_grads, node.needs, ts)]
