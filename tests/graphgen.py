"""Random graphs for the partitioner, memory-planner and executor tests (hypothesis strategies over GraphBuilder)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from hwadapter.conformance.graphs import convnet  # noqa: F401 (the kit's fixed CNN, for the tests that import it here)
from hwadapter.graph import GraphBuilder

UNARY = ["relu", "tanh", "sigmoid", "neg"]
BINARY = ["add", "mul", "sub", "maximum"]
ROWS, COLS = 4, 6


@st.composite
def graphs(draw, max_nodes: int = 12):
    """A random graph over (4, 6) float32 values: unary, binary (with broadcast), row sums, matmul, concat+slice, and
    a unary op between two reshapes (a view: its memory may be its input's, which the memory planner must see)."""
    b = GraphBuilder()
    full = [b.input("x0", (ROWS, COLS)), b.input("x1", (ROWS, COLS))]
    w, bias = b.input("w", (COLS, COLS)), b.input("bias", (COLS,))
    cols = []
    for _ in range(draw(st.integers(1, max_nodes))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "bias", "sum", "matmul", "concat", "view"]))
        a = draw(st.sampled_from(full))
        if kind == "unary":
            full.append(b.op(draw(st.sampled_from(UNARY)), [a]))
        elif kind == "binary":
            other = draw(st.sampled_from(full + cols))
            full.append(b.op(draw(st.sampled_from(BINARY)), [a, other]))
        elif kind == "bias":
            full.append(b.op("add", [a, bias]))
        elif kind == "sum":
            cols.append(b.op("sum", [a], axis=(1,), keepdim=True))
        elif kind == "matmul":
            full.append(b.op("matmul", [a, w]))
        elif kind == "view":
            mid = b.op(draw(st.sampled_from(UNARY)), [b.op("reshape", [a], shape=(COLS, ROWS))])
            full.append(b.op("reshape", [mid], shape=(ROWS, COLS)))
        else:
            both = b.op("concat", [a, draw(st.sampled_from(full))], axis=1)
            full.append(b.op("slice", [both], axes=(1,), starts=(2,), ends=(2 + COLS,), steps=(1,)))
    made = full[2:] + cols
    if not made:
        made = [b.op("relu", [full[0]])]
    outs = draw(st.lists(st.sampled_from(made), min_size=1, max_size=3, unique=True))
    if made[-1] not in outs:
        outs.append(made[-1])
    return b.build(outs)





def inputs_for(graph, seed: int = 0) -> list:
    """Random float32 arrays for the graph's inputs, in order."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(graph.values[n].shape).astype(graph.values[n].dtype) for n in graph.inputs]
