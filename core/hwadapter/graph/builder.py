"""GraphBuilder: a Graph written by hand, each node's output shape and dtype found by running it once on the CPU."""
from __future__ import annotations

import numpy as np

from ..api.errors import InvalidArgumentError
from ..api.admit import refusal
from ..api.reference import KERNELS
from ..api.ir import Graph, Node, Value


class GraphBuilder:
    """Builds a Graph by hand: each op's output shape and dtype come from running it once on zeros on the CPU."""

    def __init__(self):
        self._nodes, self._values, self._inputs, self._probe = [], {}, [], {}

    def input(self, name: str, shape, dtype="float32") -> str:
        """Declare a graph input."""
        dtype = np.dtype(dtype)
        self._values[name] = Value(name, tuple(shape), dtype)
        self._inputs.append(name)
        self._probe[name] = np.zeros(shape, dtype)
        return name

    def op(self, op: str, inputs, n_outputs: int = 1, **attrs):
        """Add a node; returns its output name (or names when n_outputs > 1)."""
        for i in inputs:
            if i not in self._values:
                raise InvalidArgumentError(f"graph: node {op!r} reads unknown value {i!r}")
        name = f"{op}_{len(self._nodes)}"
        refused = refusal(op, tuple(self._values[i].dtype for i in inputs))
        if refused is not None:  # the reference kernel may well run it: the frontend never emits it (ops/admit.py)
            kinds = ", ".join(f"{self._values[i].dtype.name}[{','.join(map(str, self._values[i].shape))}]"
                              for i in inputs)
            raise InvalidArgumentError(f"graph: node {name!r} ({op}): {op} does not admit inputs ({kinds}): "
                                       f"{refused[0]}. Fix: {refused[1]}", fix=refused[1])
        out = KERNELS[op](*(self._probe[i] for i in inputs), **attrs)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(outs) != n_outputs:
            raise InvalidArgumentError(f"graph: {op!r} produces {len(outs)} outputs, not {n_outputs}")
        names = tuple(f"{name}:{k}" for k in range(n_outputs))
        for v, arr in zip(names, outs):
            self._values[v] = Value(v, arr.shape, arr.dtype)
            self._probe[v] = arr
        self._nodes.append(Node(name, op, tuple(inputs), names, dict(attrs)))
        return names[0] if n_outputs == 1 else names

    def build(self, outputs) -> Graph:
        """The graph with these outputs."""
        outputs = [outputs] if isinstance(outputs, str) else list(outputs)
        return Graph(list(self._nodes), dict(self._values), list(self._inputs), outputs)
