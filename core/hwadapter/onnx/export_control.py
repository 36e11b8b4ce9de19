"""cond and while_loop nodes as ONNX If and Loop, whose branches and body read the outer values by name.

A branch or body graph is written with its names made unique in the model: its inputs become the names of the values
the node hands it (the operands, the loop's carried values), its constants the main graph's initializers (one per
distinct array), every value its nodes make a new name, so that nothing in it shadows an outer name.

`while_loop` is written as a Loop without a trip count. Its `max_iters` (and hw.configure's max_loop_iters) is a limit
past which hwadapter raises LoopLimitError, not a number of iterations, and no ONNX op raises: a trip count would end
the loop there and hand out that iteration's values as if the condition had turned false. So the model loops for as
long as its condition holds, as a hwadapter loop without a limit does; the node's doc_string names the limit.
"""
from __future__ import annotations

import numpy as np

from ..api.ir import Graph, Node, Value

_I64, _BOOL = np.dtype("int64"), np.dtype("bool")


def renamed(w, graph: Graph, bound: list, label: str) -> Graph:
    """`graph` with its inputs named `bound`, its constants hoisted and its nodes' values given new names."""
    names = dict(zip(graph.inputs, bound))
    for k, arr in graph.constants.items():
        names[k] = w.hoist(arr)
    for n in graph.nodes:
        for o in n.outputs:
            names[o] = w.unique(f"{label}/{o}")
    values = {names[k]: Value(names[k], tuple(v.shape), np.dtype(v.dtype)) for k, v in graph.values.items()
              if k in names}
    nodes = [Node(n.name, n.op, tuple(names[i] for i in n.inputs), tuple(names[o] for o in n.outputs), n.attrs)
             for n in graph.nodes]
    return Graph(nodes, values, [names[i] for i in graph.inputs], [names[o] for o in graph.outputs])


def _where(n, key: str) -> str:
    return f"node {n.name!r} (op {n.op!r}), its {key} graph: "


def _scalar(w, ref: str) -> str:
    """A one-element bool as a 0-d value, as Loop's condition input and its body's condition output are."""
    if w.shape(ref) == ():
        return ref
    out = w.node("Reshape", [ref, w.ints([])])
    w.shapes[out] = ()
    return out


def _typed(helper, name: str, dtype, shape):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), list(shape))


def cond(w, n, write) -> None:
    """cond(pred, *operands) as If; each branch takes no inputs and reads the operands by name."""
    helper, operands, protos = w.onnx.helper, list(n.inputs[1:]), {}
    for key, attr in (("then", "then_branch"), ("else", "else_branch")):
        graph = renamed(w, n.attrs[key], operands, f"{n.name}/{key}")
        sub = w.child(graph, _where(n, key))
        write(sub, graph.nodes)
        sub.current = n
        outs = sub.outputs(graph.outputs, lambda i, key=key: f"{n.name}/{key}/output_{i}")
        protos[attr] = helper.make_graph(sub.nodes, f"{n.name}/{key}", [], outs)
    w.current = n
    w.control("If", [n.inputs[0]], n.outputs, **protos)


def while_loop(w, n, write) -> None:
    """while_loop(*carried, *operands) as Loop('', the cond graph on the initial values, *carried)."""
    helper, k = w.onnx.helper, int(n.attrs["carried"])
    carried, operands = list(n.inputs[:k]), list(n.inputs[k:])
    first = renamed(w, n.attrs["cond"], list(n.inputs), f"{n.name}/first_cond")  # the test before any iteration
    w.adopt(first)
    outer, w.where = w.where, w.where + _where(n, "cond")
    try:
        write(w, first.nodes)
        w.current = n
        start = _scalar(w, first.outputs[0])
    finally:
        w.where = outer
    # the body: (iteration number, unused; condition in, unused; *carried) -> (the cond graph on the body graph's
    # results, *the body graph's results); the operands are read by name
    formals = [w.unique(f"{n.name}/carried_{i}") for i in range(k)]
    body = renamed(w, n.attrs["body"], formals + operands, f"{n.name}/body")
    test = renamed(w, n.attrs["cond"], list(body.outputs) + operands, f"{n.name}/cond")
    sub = w.child(Graph(body.nodes + test.nodes, {**body.values, **test.values}, formals + operands, []),
                  _where(n, "body"))
    write(sub, body.nodes)
    sub.where = w.where + _where(n, "cond")
    write(sub, test.nodes)
    sub.current = n
    outs = sub.outputs([_scalar(sub, test.outputs[0]), *body.outputs], lambda i: f"{n.name}/body/output_{i}")
    ins = [_typed(helper, w.unique(f"{n.name}/iteration"), _I64, ()),
           _typed(helper, w.unique(f"{n.name}/cond_in"), _BOOL, ()), *(sub.value_info(f) for f in formals)]
    proto = helper.make_graph(sub.nodes, f"{n.name}/body", ins, outs)
    limit, at = n.attrs.get("max_iters"), n.attrs.get("source")
    note = (f"hwadapter while_loop{' at ' + at if at else ''}, written without a trip count: hwadapter raises "
            f"LoopLimitError past {f'its max_iters ({limit}) or ' if limit is not None else ''}"
            f"hw.configure(max_loop_iters) iterations, which no ONNX op can do")
    w.current = n
    w.control("Loop", ["", start, *carried], n.outputs, body=proto, doc_string=note)
