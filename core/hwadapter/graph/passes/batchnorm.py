"""Inference batch norm folded into the convolution before it: conv2d(x, W, b) -> batch_norm(mean, var, scale, shift)
is conv2d(x, W * s, (b - mean) * s + shift) with s = scale / sqrt(var + epsilon), per output channel."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...api.ir import Value
from .common import PassReport, consumers, constants_of, prune


def _foldable(conv, bn, constants, outputs, readers) -> bool:
    y = conv.outputs[0]
    return (bn.op == "batch_norm" and bn.inputs[0] == y and y not in outputs and len(readers.get(y, ())) == 1
            and conv.attrs.get("activation") is None and bn.attrs.get("channel_axis", 1) % 4 == 1
            and all(i in constants for i in conv.inputs[1:] + bn.inputs[1:]))


def _unique(name: str, taken) -> str:
    k, out = 0, name
    while out in taken:
        k += 1
        out = f"{name}{k}"
    return out


def fold_batch_norm(graph):
    """Each conv2d with constant weights (and bias) whose only reader is a batch_norm with constant statistics
    becomes one conv2d with folded weights and bias, producing the batch_norm's output."""
    constants = dict(constants_of(graph))
    readers = consumers(graph.nodes)
    producer = {o: n for n in graph.nodes for o in n.outputs}
    outputs = set(graph.outputs)
    values = dict(graph.values)
    replaced, dropped = {}, set()
    for bn in graph.nodes:
        conv = producer.get(bn.inputs[0]) if bn.op == "batch_norm" else None
        if conv is None or conv.op != "conv2d" or not _foldable(conv, bn, constants, outputs, readers):
            continue
        w = constants[conv.inputs[1]]
        mean, var, scale, shift = (constants[i].astype(np.float64) for i in bn.inputs[1:])
        s = scale / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
        bias = constants[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 else 0.0
        w_name = _unique(f"{conv.name}.bn_weight", values)
        b_name = _unique(f"{conv.name}.bn_bias", values.keys() | {w_name})
        constants[w_name] = np.ascontiguousarray((w.astype(np.float64) * s.reshape(-1, 1, 1, 1)).astype(w.dtype))
        constants[b_name] = np.ascontiguousarray(((bias - mean) * s + shift).astype(w.dtype))
        for name in (w_name, b_name):
            values[name] = Value(name, constants[name].shape, constants[name].dtype)
        replaced[conv.name] = replace(conv, inputs=(conv.inputs[0], w_name, b_name), outputs=bn.outputs)
        dropped.add(bn.name)
    nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    new = prune(replace(graph, values=values), nodes, constants)
    return new, PassReport("fold_batch_norm", len(graph.nodes), len(nodes),
                           f"{len(dropped)} batch_norms folded into conv2d weights")
