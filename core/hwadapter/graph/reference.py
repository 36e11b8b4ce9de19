"""The reference executor: a graph run node by node through eager dispatch, the oracle plans are tested against."""
from __future__ import annotations

import numpy as np

from ..api.control import CONTROL
from ..api.errors import InvalidArgumentError
from ..dispatch.dispatcher import dispatch
from ..dispatch.tensor import unwrap, wrap
from ..runtime.device import devices
from ..runtime.fused import fused_kernel
from ..runtime.memory import to_device
from .control import limit_of, stopped


def run(graph, inputs: dict, device="cpu") -> dict:
    """Run `graph` on `device` with inputs by name (tensors or array-likes); its outputs by name, as tensors."""
    dev = devices.get(device)
    env = {k: v if unwrap(v) is not None else _tensor(v, dev) for k, v in inputs.items()}
    for k, arr in (getattr(graph, "constants", None) or {}).items():
        env.setdefault(k, _tensor(arr, dev))
    for n in graph.nodes:
        ins = tuple(env[i] for i in n.inputs)
        if n.op in CONTROL:
            out = run_control(n, ins, device)
        else:
            out = run_fused(n, ins) if n.op == "fused" else dispatch(n.op, ins, n.attrs)
        env.update(zip(n.outputs, out if isinstance(out, (tuple, list)) else (out,)))
    return {o: env[o] for o in graph.outputs}


def run_control(node, tensors: tuple, device) -> list:
    """A cond or while_loop node: its branch, or its body while its cond graph says so, run node by node."""
    def call(graph, args):
        out = run(graph, dict(zip(graph.inputs, args)), device)
        return [out[o] for o in graph.outputs]

    def truth(t):
        return bool(np.asarray(t.numpy()).reshape(-1)[0])
    if node.op == "cond":
        return call(node.attrs["then" if truth(tensors[0]) else "else"], tensors[1:])
    k, own = node.attrs["carried"], node.attrs.get("max_iters")
    carried, operands, done = list(tensors[:k]), list(tensors[k:]), 0
    while truth(call(node.attrs["cond"], carried + operands)[0]):
        if done == limit_of(own):
            raise stopped(node.name, node.attrs.get("source"), device, own)
        carried, done = call(node.attrs["body"], carried + operands), done + 1
    return carried


def run_fused(node, tensors: tuple) -> tuple:
    """A "fused" graph node run on the device of its input tensors: its output tensors, in node.outputs order."""
    held = [unwrap(t) for t in tensors]
    dev = held[0][1]
    if any(d is not dev for _, d in held):
        raise InvalidArgumentError(f"fused node {node.name!r}: inputs are on different devices. Fix: copy them "
                                   f"to {dev} first (the partitioner inserts copy nodes)", fix="copy inputs")
    outs = fused_kernel(dev, node.attrs)(*(data for data, _ in held))
    return tuple(wrap(o, dev) for o in outs)


def _tensor(value, dev):
    """An array-like as a tensor on `dev`."""
    arr = np.asarray(value, order="C")  # not ascontiguousarray: it makes a 0-d array 1-d
    return wrap(to_device(arr, dev), dev)
