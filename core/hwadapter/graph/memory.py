"""Liveness-based memory planning: when each value dies, which buffer each intermediate uses (in place where safe),
planned vs naive peak."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..runtime.allocator import round_size
from ..runtime.fused import BINARY, UNARY

#: Ops whose kernels compute each output element from the same position of same-shaped inputs (and broadcast ones):
#: writing the output over such an input reads every element before overwriting it.
ELEMENTWISE = UNARY | frozenset(BINARY) | {"gelu", "where"}
#: Ops of the op set whose kernels make new memory. Anything else may return its input or a view of it (reshape does on
#: cpu and opencl; a plugin may do so for expand, slice, transpose, cast, ...; a copy between two host-memory devices
#: hands over the same array), so its outputs count as aliases of its inputs.
FRESH = ELEMENTWISE | {"fused", "matmul", "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
                       "adaptive_max_pool2d", "sum", "mean", "max", "min", "prod", "argmax", "argmin", "softmax",
                       "log_softmax", "layer_norm", "batch_norm", "gather"}


@dataclass
class MemoryPlan:
    """`last_use`: value -> index of the last node reading it (len(nodes) for graph outputs: they outlive the run);
    `buffers`: node output -> buffer id; `sizes`: buffer id -> bytes; `inplace`: node output -> the input whose buffer
    it is written over; peaks in bytes (naive: nothing ever freed, nothing in place)."""
    last_use: dict = field(default_factory=dict)
    buffers: dict = field(default_factory=dict)
    sizes: dict = field(default_factory=dict)
    inplace: dict = field(default_factory=dict)
    planned_peak: int = 0
    naive_peak: int = 0


def nbytes(value) -> int:
    """Bytes of a Value's data, rounded to the caching allocator's size class (what it really costs)."""
    return round_size(math.prod(value.shape) * value.dtype.itemsize)


def may_run_in_place(node) -> bool:
    """True for a node whose one output may be written over a same-shaped input: an elementwise op, or a fused chain
    of them (no reduction) with one output (a fused kernel stores its outputs one by one: a second output's loads
    could come after the first one's store)."""
    if len(node.outputs) != 1:
        return False
    if node.op == "fused":
        return all(fn in UNARY or fn in BINARY.values() or fn in ("gelu", "where", "cast", "identity")
                   for fn, *_ in node.attrs["nodes"])
    return node.op in ELEMENTWISE


def aliases(graph) -> dict:
    """value -> the set of values that may share its memory (itself included): outputs of ops outside FRESH are joined
    with their inputs, transitively."""
    group = {}
    for node in graph.nodes:
        if node.op in FRESH:
            continue
        members = set()
        for v in (*node.inputs, *node.outputs):
            members |= group.get(v, {v})
        for v in members:
            group[v] = members
    return group


def plan_memory(graph, writers=frozenset(), opaque=frozenset()) -> MemoryPlan:
    """Plan the node outputs of `graph` (inputs and constants belong to the caller) into reusable buffers: walk the
    nodes in order, give each output the smallest free buffer that fits it without wasting more than half (the
    allocator's best fit), then free what died at this node. A node named in `writers` (the executor can run it
    writing into a given array) writes its output over an input that dies there when that is safe (see `_in_place`);
    any other node's outputs are placed before its inputs are freed, so it never writes over what it reads. `opaque`:
    values whose memory the executor does not own (a subgraph program's outputs): never written over."""
    n = len(graph.nodes)
    last = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last[v] = i
        for v in node.outputs:
            last.setdefault(v, i)  # never read: dies where it is made
    for v in graph.outputs:
        last[v] = n
    plan = MemoryPlan(last_use=last)
    group = aliases(graph) if writers else {}
    free: list[int] = []  # buffer ids not holding a live value
    for i, node in enumerate(graph.nodes):
        over = _in_place(graph, node, i, plan, group, opaque) if node.name in writers else None
        for v in node.outputs:
            need = nbytes(graph.values[v])
            plan.naive_peak += need
            if over is not None:
                plan.buffers[v] = plan.buffers[over]
                plan.inplace[v] = over
                continue
            fits = [b for b in free if need <= plan.sizes[b] <= 2 * need]
            if fits:
                b = min(fits, key=lambda b: (plan.sizes[b], b))
                free.remove(b)
            else:
                b = len(plan.sizes)
                plan.sizes[b] = need
            plan.buffers[v] = b
        held = {plan.buffers[v] for v in node.outputs if last[v] > i}  # an in-place output keeps its input's buffer
        dead = {v for v in (*node.inputs, *node.outputs) if last.get(v) == i and v in plan.buffers}
        free.extend(sorted({plan.buffers[v] for v in dead} - held))
    plan.planned_peak = sum(plan.sizes.values())
    return plan


def _in_place(graph, node, i: int, plan, group: dict, opaque) -> str | None:
    """The input of `node` (the i-th) its output may be written over, or None. Safe when the node is elementwise with
    one output; the input has the output's shape and dtype, was made by an earlier node (not a graph input or
    constant), is not a subgraph program's, and dies here; and nothing that may share its memory (see `aliases`) is a
    graph input, constant or output, another input of this node, or read after it."""
    if not may_run_in_place(node):
        return None
    out = graph.values[node.outputs[0]]
    consts = getattr(graph, "constants", None) or {}
    ends = set(graph.inputs) | set(consts) | set(graph.outputs)
    for x in dict.fromkeys(node.inputs):
        value = graph.values[x]
        if value.shape != out.shape or value.dtype != out.dtype or x not in plan.buffers or plan.last_use[x] != i:
            continue
        shared = group.get(x, {x})
        if any(v in ends or v in opaque or plan.last_use.get(v, -1) > i or (v != x and v in node.inputs)
               for v in shared):
            continue
        return x
    return None
