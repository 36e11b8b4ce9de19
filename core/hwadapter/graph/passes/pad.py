"""A zero pad of the image's rows and columns folded into the convolution after it: pad(x, 0) -> conv2d is conv2d
of x with that much more padding (conv2d pads with zeros too), one copy of the image less (TensorFlow-style "same"
padding, as exported MobileNets and EfficientNets do it)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .common import PassReport, consumers, constants_of, prune


def _spatial(pad, ndim: int):
    """(top, bottom, left, right) a constant zero pad adds to the last two axes of a 4-D tensor, or None."""
    pads = [tuple(int(v) for v in p) for p in pad.attrs.get("pads", ())]
    value = pad.attrs.get("value", 0.0)
    if pad.attrs.get("mode", "constant") != "constant" or ndim != 4 or len(pads) != 4 or any(v < 0 for p in pads
                                                                                               for v in p):
        return None
    if any(v for p in pads[:2] for v in p):
        return None  # batch or channels padded: not the convolution's padding
    v = np.asarray(value, np.float64)
    if v.size != 1 or float(v) != 0.0 or np.signbit(v):
        return None  # conv2d pads with +0
    return pads[2][0], pads[2][1], pads[3][0], pads[3][1]


def fold_pad(graph):
    """Each constant zero pad of a 4-D tensor's last two axes whose only reader is a conv2d (as its image) becomes
    that conv2d's padding."""
    readers = consumers(graph.nodes)
    outputs = set(graph.outputs)
    replaced, dropped = {}, set()
    producer = {o: n for n in graph.nodes for o in n.outputs}
    for conv in graph.nodes:
        pad = producer.get(conv.inputs[0]) if conv.op == "conv2d" and conv.inputs else None
        if pad is None or pad.op != "pad" or pad.name in dropped:
            continue
        y = pad.outputs[0]
        if y in outputs or len(readers.get(y, ())) != 1 or conv.inputs.count(y) != 1:
            continue
        add = _spatial(pad, len(graph.values[pad.inputs[0]].shape))
        if add is None:
            continue
        padding = tuple(int(p) + a for p, a in zip(conv.attrs.get("padding", (0, 0, 0, 0)), add))
        replaced[conv.name] = replace(conv, inputs=(pad.inputs[0], *conv.inputs[1:]),
                                      attrs={**conv.attrs, "padding": padding})
        dropped.add(pad.name)
    nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    new = prune(graph, nodes, dict(constants_of(graph)))
    return new, PassReport("fold_pad", len(graph.nodes), len(nodes), f"{len(dropped)} zero pads folded into conv2d")
