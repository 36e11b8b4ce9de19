"""vjp rules of the control-flow nodes (they are only recorded while tracing, so these run inside a trace and record
graph control flow themselves).

cond: a cond on the same predicate whose branches are the vjps of the forward's branches (each branch graph replayed
under autograd on stand-ins of its inputs, then differentiated).
while_loop: the iterations are counted by running the loop again, then a loop over them backwards; the carried
values each backward step needs are recomputed from the loop's start (iteration j runs the body j times): no stack of
values of unknown length is kept, at the price of O(n^2) body runs for n iterations."""
from __future__ import annotations

import numpy as np

from ..dispatch.dispatcher import dispatch
from ..dispatch.tensor import GradState, wrap
from ..ops.api import zeros_like
from ..static import nn as static_nn
from ..tensor import to_tensor
from .engine import enable_grad, grad, no_grad
from .registry import rule


def replay(graph, inputs: list) -> list:
    """`graph` run op by op (dispatch) on the tensors `inputs`: its outputs (recorded like any op, here in a trace)."""
    env = dict(zip(graph.inputs, inputs))
    device = inputs[0]._device if inputs else None
    for name, arr in (graph.constants or {}).items():
        env[name] = to_tensor(np.asarray(arr), device=getattr(device, "base", device))
    for n in graph.nodes:
        out = dispatch(n.op, tuple(env[i] for i in n.inputs), n.attrs)
        env.update(zip(n.outputs, out if isinstance(out, (tuple, list)) else (out,)))
    return [env[o] for o in graph.outputs]


def _float(t) -> bool:
    return t._dtype.kind == "f"


def graph_vjp(graph, inputs: list, cotangents: list) -> list:
    """The gradient of `graph`'s outputs, weighted by `cotangents`, with respect to each float input (zeros where
    none flows; None for other inputs)."""
    leaves = []
    for t in inputs:
        leaf = wrap(t._data, t._device)
        if _float(t):
            leaf._ag = GradState(stop=False)
        leaves.append(leaf)
    with enable_grad():
        outs = replay(graph, leaves)
    pairs = [(o, c) for o, c in zip(outs, cotangents) if o._ag is not None and o._ag.node is not None]
    wanted = [leaf for leaf in leaves if leaf._ag is not None]
    found = grad([o for o, _ in pairs], wanted, [c for _, c in pairs], allow_unused=True) if pairs and wanted \
        else [None] * len(wanted)
    it = iter(found)
    out = []
    for t, leaf in zip(inputs, leaves):
        if leaf._ag is None:
            out.append(None)
            continue
        g = next(it)
        out.append(zeros_like(t) if g is None else g)
    return out


@rule("cond")
def cond_vjp(node, *grads):
    pred, operands = node.inputs[0], list(node.inputs[1:])
    outs = [node.output(i) for i in range(len(node.meta))]
    cts = [g if g is not None else zeros_like(o) for g, o in zip(grads, outs)]
    wants = [i for i, t in enumerate(operands) if _float(t) and node.needs[1 + i]]
    if not wants:
        return (None,) * len(node.inputs)

    def branch(key):
        def run():
            found = graph_vjp(node.attrs[key], operands, cts)
            return [found[i] for i in wants]
        return run
    with no_grad():
        got = static_nn.cond(pred, branch("then"), branch("else"))
    result = [None] * len(node.inputs)
    for i, g in zip(wants, got if isinstance(got, list) else [got]):
        result[1 + i] = g
    return tuple(result)


@rule("while_loop")
def while_vjp(node, *grads):
    k = node.attrs["carried"]
    start, operands = list(node.inputs[:k]), list(node.inputs[k:])
    test, body = node.attrs["cond"], node.attrs["body"]
    outs = [node.output(i) for i in range(k)]
    cts = [g if g is not None else zeros_like(o) for g, o in zip(grads, outs)]
    op_floats = [i for i, t in enumerate(operands) if _float(t)]

    def step(xs):
        return replay(body, list(xs) + operands)

    with no_grad():
        zero = to_tensor(np.array(0, np.int64), device=getattr(start[0]._device, "base", start[0]._device))
        count = static_nn.while_loop(lambda i, *xs: replay(test, list(xs) + operands)[0],
                                     lambda i, *xs: [i + 1, *step(xs)], [zero, *start])[0]

        def back(j, *state):
            ct, acc = list(state[:k]), list(state[k:])
            xs = static_nn.while_loop(lambda t, *v: t < j - 1, lambda t, *v: [t + 1, *step(v)], [zero, *start])[1:]
            found = graph_vjp(body, list(xs) + operands, ct)
            new_ct = [f if f is not None else c for f, c in zip(found[:k], ct)]
            new_acc = [a + found[k + i] for a, i in zip(acc, op_floats)]
            return [j - 1, *new_ct, *new_acc]
        final = static_nn.while_loop(lambda j, *s: j > 0, back,
                                     [count, *cts, *(zeros_like(operands[i]) for i in op_floats)])
    ct0, acc = final[1:1 + k], final[1 + k:]
    result = [g if _float(t) and node.needs[i] else None for i, (g, t) in enumerate(zip(ct0, start))]
    extra = [None] * len(operands)
    for i, g in zip(op_floats, acc):
        extra[i] = g if node.needs[k + i] else None
    return tuple(result + extra)
