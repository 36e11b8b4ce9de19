"""Graph IR: typed values, op nodes with normalised attributes, subgraph extraction, and a reference executor."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidArgumentError


@dataclass(frozen=True)
class Value:
    """A named tensor of the graph with its static shape and dtype."""
    name: str
    shape: tuple
    dtype: np.dtype


@dataclass
class Node:
    """One op: kernel attributes are already normalised, as the frontend passes them to kernels."""
    name: str
    op: str
    inputs: tuple
    outputs: tuple
    attrs: dict = field(default_factory=dict)


@dataclass
class Graph:
    """Nodes in topological order over named values; `inputs`/`outputs` name the graph's boundary values."""
    nodes: list
    values: dict
    inputs: list
    outputs: list

    def node(self, name: str) -> Node:
        """The node called `name`."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def subgraph(self, node_names) -> "Graph":
        """The nodes named (kept in order) as a graph: its inputs are what they read from outside, its outputs what
        they produce that the rest of the graph or its outputs use."""
        chosen = [n for n in self.nodes if n.name in set(node_names)]
        produced = {o for n in chosen for o in n.outputs}
        inputs = []
        for n in chosen:
            for i in n.inputs:
                if i not in produced and i not in inputs:
                    inputs.append(i)
        used_outside = {i for n in self.nodes if n not in chosen for i in n.inputs} | set(self.outputs)
        outputs = [o for n in chosen for o in n.outputs if o in used_outside]
        names = set(inputs) | produced
        return Graph(chosen, {k: v for k, v in self.values.items() if k in names}, inputs, outputs)

    def signature(self) -> str:
        """A canonical text of the graph (ops, attributes, shapes, dtypes) for cache keys."""
        return json.dumps({"inputs": [(i, self.values[i].shape, self.values[i].dtype.name) for i in self.inputs],
                           "outputs": self.outputs,
                           "nodes": [(n.op, n.inputs, n.outputs, sorted((k, repr(v)) for k, v in n.attrs.items()))
                                     for n in self.nodes]}, default=str)

    def run(self, inputs: dict, device="cpu") -> dict:
        """Run node by node through eager dispatch on `device`; the reference for subgraph backends."""
        from ..dispatch.dispatcher import dispatch
        from ..tensor import Tensor, to_tensor
        env = {k: v if isinstance(v, Tensor) else to_tensor(v, device=device) for k, v in inputs.items()}
        for n in self.nodes:
            out = dispatch(n.op, tuple(env[i] for i in n.inputs), n.attrs)
            outs = out if isinstance(out, tuple) else (out,)
            env.update(zip(n.outputs, outs))
        return {o: env[o] for o in self.outputs}


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
        from ..ops.reference import KERNELS
        for i in inputs:
            if i not in self._values:
                raise InvalidArgumentError(f"graph: node {op!r} reads unknown value {i!r}")
        out = KERNELS[op](*(self._probe[i] for i in inputs), **attrs)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(outs) != n_outputs:
            raise InvalidArgumentError(f"graph: {op!r} produces {len(outs)} outputs, not {n_outputs}")
        name = f"{op}_{len(self._nodes)}"
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
