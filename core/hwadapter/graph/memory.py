"""Liveness-based memory planning: when each value dies, which buffer each intermediate uses, planned vs naive peak."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..runtime.allocator import round_size


@dataclass
class MemoryPlan:
    """`last_use`: value -> index of the last node reading it (len(nodes) for graph outputs: they outlive the run);
    `buffers`: node output -> buffer id; `sizes`: buffer id -> bytes; peaks in bytes (naive: nothing ever freed)."""
    last_use: dict = field(default_factory=dict)
    buffers: dict = field(default_factory=dict)
    sizes: dict = field(default_factory=dict)
    planned_peak: int = 0
    naive_peak: int = 0


def nbytes(value) -> int:
    """Bytes of a Value's data, rounded to the caching allocator's size class (what it really costs)."""
    return round_size(math.prod(value.shape) * value.dtype.itemsize)


def plan_memory(graph) -> MemoryPlan:
    """Plan the node outputs of `graph` (inputs and constants belong to the caller) into reusable buffers: walk the
    nodes in order, give each output the smallest free buffer that fits it without wasting more than half (the
    allocator's best fit), then free what died at this node. Outputs are placed before inputs are freed, so a node
    never writes over what it reads."""
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
    free: list[int] = []  # buffer ids not holding a live value
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            need = nbytes(graph.values[v])
            fits = [b for b in free if need <= plan.sizes[b] <= 2 * need]
            if fits:
                b = min(fits, key=lambda b: (plan.sizes[b], b))
                free.remove(b)
            else:
                b = len(plan.sizes)
                plan.sizes[b] = need
            plan.buffers[v] = b
            plan.naive_peak += need
        dead = {v for v in (*node.inputs, *node.outputs) if last.get(v) == i and v in plan.buffers}
        free.extend(sorted({plan.buffers[v] for v in dead}))
    plan.planned_peak = sum(plan.sizes.values())
    return plan
