"""Common-subexpression elimination: a node equal to an earlier one (op, inputs, attributes) reuses its outputs."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...runtime.signature import freeze
from .common import PassReport, constants_of, prune


def _key(node, rename):
    try:
        attrs = tuple(sorted((k, freeze(v)) for k, v in node.attrs.items()))
        key = (node.op, tuple(rename.get(i, i) for i in node.inputs), attrs)
        hash(key)
        return key
    except TypeError:  # an attribute that cannot hash: never merged
        return None


def cse(graph):
    """Merge repeated nodes and identical constants; a node producing a graph output keeps it (outputs are named)."""
    outputs = set(graph.outputs)
    rename: dict = {}
    same_constant: dict = {}
    for name, array in constants_of(graph).items():
        if name in outputs:
            continue
        key = (array.dtype.str, array.shape, np.ascontiguousarray(array).tobytes())
        rename[name] = same_constant.setdefault(key, name)
        if rename[name] == name:
            del rename[name]
    seen, kept, merged = {}, [], 0
    for node in graph.nodes:
        node = replace(node, inputs=tuple(rename.get(i, i) for i in node.inputs))
        key = _key(node, rename)
        first = seen.get(key) if key is not None else None
        if first is not None and not outputs.intersection(node.outputs):
            rename.update(zip(node.outputs, first.outputs))
            merged += 1
            continue
        if key is not None:
            seen.setdefault(key, node)
        kept.append(node)
    new = prune(graph, kept, constants_of(graph))
    return new, PassReport("cse", len(graph.nodes), len(kept), f"{merged} repeated nodes merged")
