"""What every pass shares: its report, building a graph with constants, and pruning what nothing reads."""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from ...api.errors import InvalidArgumentError
from ...api.ir import Graph


@dataclass(frozen=True)
class PassReport:
    """One pass's effect: node counts before and after, and what it did in words."""
    name: str
    nodes_before: int
    nodes_after: int
    note: str = ""


def constants_of(graph) -> dict:
    """The graph's constants by value name."""
    return graph.constants


def make_graph(nodes, values, inputs, outputs, constants) -> Graph:
    """A Graph of these parts (copied)."""
    return Graph(list(nodes), dict(values), list(inputs), list(outputs), constants=dict(constants))


def prune(graph, nodes, constants) -> Graph:
    """`graph` with `nodes` and `constants`, dropping constants and values that no node, input or output names."""
    used = {i for n in nodes for i in n.inputs} | set(graph.outputs)
    constants = {k: v for k, v in constants.items() if k in used}
    keep = used | set(graph.inputs) | {o for n in nodes for o in n.outputs} | set(constants)
    values = {k: v for k, v in graph.values.items() if k in keep}
    return make_graph(nodes, values, graph.inputs, graph.outputs, constants)


def consumers(nodes) -> dict:
    """value name -> the nodes that read it, in order."""
    readers: dict = {}
    for n in nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)
    return readers


def toposort(nodes) -> list:
    """`nodes` in an order where every value is produced before it is read, keeping the given order where it can
    (Kahn's algorithm, always taking the earliest ready node)."""
    producer = {o: k for k, n in enumerate(nodes) for o in n.outputs}
    waiting = [0] * len(nodes)
    after: dict = {}
    for k, n in enumerate(nodes):
        for src in {producer[i] for i in n.inputs if i in producer and producer[i] != k}:
            waiting[k] += 1
            after.setdefault(src, []).append(k)
    ready = [k for k, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(nodes[k])
        for nxt in after.get(k, ()):
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                heapq.heappush(ready, nxt)
    if len(order) != len(nodes):  # a pass made a cycle: a bug of the pass, never of the user's graph
        raise RuntimeError(f"graph passes: the nodes form a cycle ({len(nodes) - len(order)} unordered)")
    return order


def graph_error(message: str, fix: str):
    """An InvalidArgumentError whose text ends with the fix (as every hwadapter error's does)."""
    return InvalidArgumentError(f"{message}. Fix: {fix}", fix=fix)
