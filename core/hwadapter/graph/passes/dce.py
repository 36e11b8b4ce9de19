"""Dead-code elimination: nodes and constants that no graph output depends on are dropped (inputs stay)."""
from __future__ import annotations

from .common import PassReport, constants_of, prune


def dce(graph):
    """`graph` without the nodes none of its outputs need."""
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):  # ops have no side effects: a node matters only through its outputs
        if live.intersection(node.outputs):
            kept.append(node)
            live.update(node.inputs)
    kept.reverse()
    new = prune(graph, kept, constants_of(graph))
    dropped = len(graph.nodes) - len(kept)
    return new, PassReport("dce", len(graph.nodes), len(kept), f"{dropped} dead nodes dropped")
