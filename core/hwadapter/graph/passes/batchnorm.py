"""Inference batch norm folded into the convolution before it: conv2d(x, W, b) -> batch_norm(mean, var, scale, shift)
is conv2d(x, W * s, (b - mean) * s + shift) with s = scale / sqrt(var + epsilon), per output channel. A constant
per-channel scale or shift after a convolution (`mul` or `add` by a (C, 1, 1) tensor: Caffe's Scale layer, as
Inception-v2's export writes after each batch norm) folds the same way."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...api.ir import Value
from .common import PassReport, consumers, constants_of, prune


def _foldable(conv, bn, constants, outputs, readers) -> bool:
    y = conv.outputs[0]
    return (bn.op == "batch_norm" and bn.inputs[0] == y and y not in outputs and len(readers.get(y, ())) == 1
            and len(conv.inputs) <= 3
            and conv.attrs.get("activation") is None and bn.attrs.get("channel_axis", 1) % 4 == 1
            and all(i in constants for i in conv.inputs[1:] + bn.inputs[1:]))


def _unique(name: str, taken) -> str:
    k, out = 0, name
    while out in taken:
        k += 1
        out = f"{name}{k}"
    return out


def _per_channel(op, conv, constants, values, outputs, readers):
    """(scale, shift) as float64 per output channel of conv2d `conv` when `op` is a `mul` or `add` of its output by
    a constant that only varies along the channels (or not at all), of the output's dtype; else None."""
    y = conv.outputs[0]
    if op.op not in ("mul", "add") or len(op.inputs) != 2 or len(conv.inputs) > 3 or y not in op.inputs or \
            y in outputs or \
            len(readers.get(y, ())) != 1 or conv.attrs.get("activation") is not None or \
            not all(i in constants for i in conv.inputs[1:]):
        return None
    other = op.inputs[1] if op.inputs[0] == y else op.inputs[0]
    c, w = constants.get(other), constants[conv.inputs[1]]
    if c is None or other == y or c.dtype != w.dtype or c.ndim > 4 or w.ndim != 4:
        return None
    shape = (1,) * (4 - c.ndim) + c.shape
    if shape[0] != 1 or shape[2:] != (1, 1) or shape[1] not in (1, w.shape[0]) or \
            values[y].shape is not None and len(values[y].shape) != 4:
        return None
    k = np.broadcast_to(c.reshape(-1).astype(np.float64), (w.shape[0],))
    return (k, np.zeros_like(k)) if op.op == "mul" else (np.ones_like(k), k)


def fold_batch_norm(graph):
    """Each conv2d with constant weights (and bias) whose only reader is a batch_norm with constant statistics, or a
    `mul` or `add` by a constant per-channel tensor, becomes one conv2d with folded weights and bias, producing that
    reader's output; repeated, so a batch norm and a scale and shift after it all fold."""
    total = {"batch_norm": 0, "scale": 0}
    while True:
        graph, folded = _fold_once(graph)
        for kind, n in folded.items():
            total[kind] += n
        if not any(folded.values()):
            break
    return graph, PassReport("fold_batch_norm", len(graph.nodes) + sum(total.values()), len(graph.nodes),
                             f"{total['batch_norm']} batch_norms and {total['scale']} per-channel scales or shifts "
                             f"folded into conv2d weights")


def _fold_once(graph):
    """(graph, {kind: how many folded}) after one sweep: each conv2d folds at most one reader."""
    constants = dict(constants_of(graph))
    readers = consumers(graph.nodes)
    producer = {o: n for n in graph.nodes for o in n.outputs}
    outputs = set(graph.outputs)
    values = dict(graph.values)
    replaced, dropped = {}, set()
    folded = {"batch_norm": 0, "scale": 0}
    for bn in graph.nodes:
        conv = next((producer[i] for i in bn.inputs if i in producer and producer[i].op == "conv2d"), None)
        if conv is None or conv.name in replaced:
            continue
        affine = _per_channel(bn, conv, constants, values, outputs, readers)
        if affine is not None:
            s, add = affine
            shift, mean = add, 0.0
            folded["scale"] += 1
        elif _foldable(conv, bn, constants, outputs, readers):
            mean, var, scale, shift = (constants[i].astype(np.float64) for i in bn.inputs[1:])
            s = scale / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
            folded["batch_norm"] += 1
        else:
            continue
        w = constants[conv.inputs[1]]  # both checks ask for constant weights (and bias)
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
    return prune(replace(graph, values=values), nodes, constants), folded
