"""Small fixed graphs the kit compiles on a subgraph backend (and hwadapter's own tests reuse)."""
from __future__ import annotations

from hwadapter.graph import GraphBuilder


def mlp():
    """matmul -> add bias -> relu -> softmax, with the hidden activation as a second output."""
    b = GraphBuilder()
    x, w, bias = b.input("x", (8, 40)), b.input("w", (40, 70)), b.input("bias", (70,))
    h = b.op("relu", [b.op("add", [b.op("matmul", [x, w]), bias])])
    return b.build([b.op("softmax", [h], axis=1), h])


def convnet(argmax: bool = False):
    """conv (bias, padding) -> relu -> max pool -> flatten -> matmul (-> argmax)."""
    b = GraphBuilder()
    x, w, bias = b.input("x", (2, 3, 12, 12)), b.input("w", (8, 3, 3, 3)), b.input("bias", (8,))
    fc = b.input("fc", (8 * 6 * 6, 5))
    h = b.op("conv2d", [x, w, bias], stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    h = b.op("max_pool2d", [b.op("relu", [h])], kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0),
             ceil_mode=False)
    logits = b.op("matmul", [b.op("reshape", [h], shape=(2, 8 * 6 * 6)), fc])
    return b.build([logits, b.op("argmax", [logits], axis=1, keepdim=False)] if argmax else [logits])
