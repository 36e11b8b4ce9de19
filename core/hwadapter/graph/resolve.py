"""Which kernel each node outside subgraphs runs with, resolved once when a plan is built, and which of those can
write their output into a given array (`out=`): the memory planner plans in place only for those."""
from __future__ import annotations

import numpy as np

from ..api import meta
from ..api.control import CONTROL
from ..dispatch.dispatcher import route
from ..runtime.fused import fused_kernel
from . import control
from .hostchain import host_chain
from .memory import may_run_in_place
from .steps import Run

_ufunc = np.ufunc


def takes_out(fn, device) -> bool:
    """True when kernel `fn` of `device` accepts `out=` (an array of the device's type with the result's shape and
    dtype, written and returned): it says so with a true `writes_out` attribute, or it is a numpy ufunc on a
    host-memory device (ufuncs take `out=` by definition)."""
    return bool(getattr(fn, "writes_out", False)) or (fn.__class__ is _ufunc and device.host_memory)


def resolve(device, node, values, nested=None) -> tuple:
    """(kernel, Run) for a node outside subgraphs: a fused node's host chain (small, on a host: numpy calls beat a
    program's call) or compiled program, a control node's plans (`nested`: graph -> Plan), else its op's route
    (`dispatch.route`: fallback resolved as when it runs)."""
    if node.op in CONTROL:
        return control.step_call(node, device, nested), Run.CONTROL
    if node.op == "fused":
        chain = host_chain(device, node, values)
        return (chain, Run.HOST_CHAIN) if chain is not None else (fused_kernel(device, node.attrs), Run.PROGRAM)
    fn = route(node.op, device, tuple(values[i].dtype for i in node.inputs))
    single = len(node.outputs) == 1 and node.op not in meta.MULTI_OUTPUT  # a split into one piece is still a list
    return fn, (Run.KERNEL if single else Run.KERNELS)


def kernels(graph, where: dict, subgraphs, nested=None) -> dict:
    """node name -> (kernel, Run) for every node that is neither a copy nor inside a subgraph (`where`: node ->
    Device; `nested`: graph -> Plan, for the branches and bodies of control nodes)."""
    inside = {name for sg in subgraphs for name in sg.nodes}
    return {n.name: resolve(where[n.name], n, graph.values, nested) for n in graph.nodes
            if n.name not in inside and n.op != "copy"}


def writers(graph, where: dict, resolved: dict) -> set:
    """Names of the nodes whose resolved kernel takes `out=` and whose op may run in place: what the planner may plan
    in place (`resolved`: what `kernels` returned)."""
    out = set()
    for node in graph.nodes:
        if node.name not in resolved or not may_run_in_place(node):
            continue
        fn, run = resolved[node.name]
        if run in (Run.KERNEL, Run.PROGRAM) and takes_out(fn, where[node.name]):
            out.add(node.name)
    return out


def opaque(graph, subgraphs) -> set:
    """Values made by subgraph programs and control nodes: their memory is the program's (or a branch's, which may
    hand out one of its inputs), never written over by another step."""
    inside = {name for sg in subgraphs for name in sg.nodes}
    return {v for n in graph.nodes if n.name in inside or n.op in CONTROL for v in n.outputs}
