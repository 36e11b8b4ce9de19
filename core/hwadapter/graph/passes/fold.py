"""Constant folding: a node whose inputs are all constants runs once, at compile time, on the CPU reference kernels."""
from __future__ import annotations

import numpy as np

from ...api.reference import KERNELS
from .common import PassReport, constants_of, prune

#: A result may be this much larger than its inputs and still folded (beyond, e.g. expanding a scalar to a big
#: tensor, the graph is better off computing it than carrying it).
GROWTH, SLACK = 4, 1 << 16


def _run(node, arrays):
    """The node's outputs from the reference kernels, or None when it cannot fold."""
    if node.op == "fused":
        from ...runtime.fused import interpret  # lazy: it imports hwadapter_kp
        return interpret(node.attrs, arrays)
    kernel = KERNELS.get(node.op)
    if kernel is None:  # a custom kernel-primitive op: it only runs on a device
        return None
    out = kernel(*arrays, **node.attrs)
    return [np.asarray(o) for o in out] if isinstance(out, (list, tuple)) else [np.asarray(out)]


def fold(graph):
    """Every node computable from constants alone becomes constants (chains fold through, so shape-only
    subgraphs over constants vanish); graph outputs keep their names, now bound to constants."""
    constants = dict(constants_of(graph))
    kept, folded = [], 0
    for node in graph.nodes:
        if node.op == "copy" or not all(i in constants for i in node.inputs):
            kept.append(node)
            continue
        arrays = [constants[i] for i in node.inputs]
        try:
            outs = _run(node, arrays)
        except Exception:  # it fails at run time too, where the error names the device: leave it to run
            outs = None
        limit = GROWTH * sum(a.nbytes for a in arrays) + SLACK
        if outs is None or len(outs) != len(node.outputs) or sum(o.nbytes for o in outs) > limit or \
                not all(_fits(graph.values.get(name), o) for name, o in zip(node.outputs, outs)):
            kept.append(node)
            continue
        constants.update(zip(node.outputs, (np.asarray(o, order="C") for o in outs)))  # (ascontiguousarray: 0-d -> 1-d)
        folded += 1
    new = prune(graph, kept, constants)
    return new, PassReport("fold", len(graph.nodes), len(kept), f"{folded} nodes folded into constants")


def _fits(value, array) -> bool:
    return value is None or (tuple(value.shape) == array.shape and np.dtype(value.dtype) == array.dtype)
