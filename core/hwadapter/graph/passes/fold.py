"""Constant folding, the one place hwadapter computes a constant from constants.

`evaluate` runs one node on constant arrays with the CPU reference kernels. The ONNX importer calls it for every op
it adds whose inputs are all constant (`hwadapter.onnx.convert.Context.op`), and the `fold` pass calls it for every
such node of a graph; a check on what may be folded (a size limit) belongs in `evaluate`, and holds for both."""
from __future__ import annotations

import math

import numpy as np

from ...api.reference import KERNELS
from .common import PassReport, constants_of, prune

#: The `fold` pass's limit: a result may be this much larger than its inputs and still folded (beyond, e.g. expanding
#: a scalar to a big tensor, the graph is better off computing it than carrying it). The importer folds without it.
GROWTH, SLACK = 4, 1 << 16


def growth_limit(arrays) -> int:
    """The most bytes the `fold` pass folds a node on `arrays` into: GROWTH times their size, plus SLACK."""
    return GROWTH * sum(a.nbytes for a in arrays) + SLACK


def evaluate(op: str, attrs: dict, arrays, expected=None, limit: int | None = None) -> list | None:
    """The outputs of hwadapter op `op` (its attributes `attrs`) on the constant numpy `arrays`, computed by the CPU
    reference kernels, as numpy arrays; None when it does not fold: an op without a reference kernel (a custom
    kernel-primitive op, which only runs on a device), results other than `expected` (one (shape, dtype) per output,
    None for one not declared), or more than `limit` bytes in all (None: no limit; checked before the kernel runs
    when `expected` gives every output). A kernel's error propagates: the caller decides (the pass leaves the node to
    run, where the error names the device; the importer reports it)."""
    if expected is not None and limit is not None and all(e is not None for e in expected):
        if sum(math.prod(shape) * np.dtype(dt).itemsize for shape, dt in expected) > limit:
            return None
    if op == "fused":
        from ...runtime.fused import interpret  # lazy: it imports hwadapter_kp, which only fused graphs need
        outs = interpret(attrs, arrays)
    else:
        kernel = KERNELS.get(op)
        if kernel is None:
            return None
        outs = kernel(*arrays, **attrs)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
    outs = [np.asarray(o) for o in outs]
    if expected is not None and (len(outs) != len(expected) or not all(
            e is None or (tuple(e[0]) == o.shape and np.dtype(e[1]) == o.dtype) for o, e in zip(outs, expected))):
        return None
    if limit is not None and sum(o.nbytes for o in outs) > limit:
        return None
    return outs


def fold(graph):
    """Every node computable from constants alone becomes constants (chains fold through, so shape-only
    subgraphs over constants vanish); graph outputs keep their names, now bound to constants. A result larger than
    `growth_limit` of its inputs is left to run."""
    constants = dict(constants_of(graph))
    kept, folded = [], 0
    for node in graph.nodes:
        if node.op == "copy" or not all(i in constants for i in node.inputs):
            kept.append(node)
            continue
        arrays = [constants[i] for i in node.inputs]
        expected = [_meta(graph.values.get(name)) for name in node.outputs]
        try:
            outs = evaluate(node.op, node.attrs, arrays, expected, growth_limit(arrays))
        except Exception:  # it fails at run time too, where the error names the device: leave it to run
            outs = None
        if outs is None:
            kept.append(node)
            continue
        constants.update(zip(node.outputs, (np.asarray(o, order="C") for o in outs)))  # (ascontiguousarray: 0-d -> 1-d)
        folded += 1
    new = prune(graph, kept, constants)
    return new, PassReport("fold", len(graph.nodes), len(kept), f"{folded} nodes folded into constants")


def _meta(value):
    """(shape, dtype) of a declared graph value; None for one the graph does not declare."""
    return None if value is None else (tuple(value.shape), np.dtype(value.dtype))
