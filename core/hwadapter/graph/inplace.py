"""Which plan steps can write their output into a given array (`out=`): the memory planner plans in place only for
those, and the executor runs exactly those in place."""
from __future__ import annotations

import numpy as np

from .memory import may_run_in_place

_ufunc = np.ufunc


def takes_out(fn, device) -> bool:
    """True when kernel `fn` of `device` accepts `out=` (an array of the device's type with the result's shape and
    dtype, written and returned): it says so with a true `writes_out` attribute, or it is a numpy ufunc on a
    host-memory device (ufuncs take `out=` by definition)."""
    return bool(getattr(fn, "writes_out", False)) or (fn.__class__ is _ufunc and device.host_memory)


def step_kernel(device, node, values):
    """(kernel, how) the executor runs a node outside subgraphs with: "fused (numpy)" for a fused node's host chain,
    "fused" for its program, else its route (`dispatch.route`, so fallback is resolved as when it runs)."""
    from ..dispatch.dispatcher import route  # lazy: the planner asks only when a plan is built
    if node.op == "fused":
        from .hostchain import host_chain
        from .passes.fused_op import fused_kernel
        chain = host_chain(device, node, values)  # small on a host: numpy calls beat a program's call
        return (chain, "fused (numpy)") if chain is not None else (fused_kernel(device, node.attrs), "fused")
    return route(node.op, device, tuple(values[i].dtype for i in node.inputs)), None


def writers(graph, where: dict, subgraphs) -> set:
    """Names of the nodes (outside subgraphs, `where`: node -> Device) whose kernel takes `out=` and whose op may run
    in place: what the planner may plan in place."""
    inside = {name for sg in subgraphs for name in sg.nodes}
    out = set()
    for node in graph.nodes:
        if node.name in inside or node.op == "copy" or not may_run_in_place(node):
            continue
        value = graph.values[node.outputs[0]]
        if not any(graph.values[i].shape == value.shape and graph.values[i].dtype == value.dtype for i in node.inputs):
            continue  # no input to write over: the kernel need not be resolved
        try:
            fn, how = step_kernel(where[node.name], node, graph.values)
        except Exception:  # a kernel that cannot be resolved now fails when the plan runs, where it is reported
            continue
        if how != "fused (numpy)" and takes_out(fn, where[node.name]):
            out.add(node.name)
    return out


def opaque(graph, subgraphs) -> set:
    """Values made by subgraph programs: their memory is the program's, never written over by another step."""
    inside = {name for sg in subgraphs for name in sg.nodes}
    return {v for n in graph.nodes if n.name in inside for v in n.outputs}
