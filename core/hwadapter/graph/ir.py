"""Graph IR as plain data: typed values, op nodes with normalised attributes, subgraph extraction, and the one JSON
form every plugin serialises graphs and compiled subgraphs in."""
from __future__ import annotations

import hashlib
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

    def to_json(self) -> dict:
        """The graph as JSON-ready data; tuples are tagged so they come back as tuples (kernels hash attributes)."""
        return {"inputs": list(self.inputs), "outputs": list(self.outputs),
                "values": {k: [list(v.shape), v.dtype.name] for k, v in self.values.items()},
                "nodes": [[n.name, n.op, list(n.inputs), list(n.outputs), {k: _enc(a) for k, a in n.attrs.items()}]
                          for n in self.nodes]}

    @classmethod
    def from_json(cls, doc: dict) -> "Graph":
        """The graph `to_json` wrote; KeyError, TypeError or ValueError when `doc` is not one."""
        values = {k: Value(k, tuple(int(d) for d in shape), np.dtype(dtype)) for k, (shape, dtype) in doc["values"].items()}
        nodes = [Node(str(name), str(op), tuple(ins), tuple(outs), {k: _dec(a) for k, a in attrs.items()})
                 for name, op, ins, outs, attrs in doc["nodes"]]
        return cls(nodes, values, list(doc["inputs"]), list(doc["outputs"]))


def _enc(v):
    if isinstance(v, tuple):
        return {"tuple": [_enc(x) for x in v]}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    if isinstance(v, np.dtype):
        return v.name
    return v.item() if isinstance(v, np.generic) else v


def _dec(v):
    if isinstance(v, dict):
        return tuple(_dec(x) for x in v["tuple"])
    return [_dec(x) for x in v] if isinstance(v, list) else v


MAGIC = b"HWADAPTER-EXECUTABLE 1\n"


def pack_executable(fmt: str, target: dict, graph: Graph, binaries: dict) -> bytes:
    """A compiled subgraph as bytes: a JSON header (format, target, graph, binary sizes and hashes), then the binaries.
    Nothing in it is executed on load but the device binaries the plugin hands its driver."""
    header = {"format": fmt, "target": target, "graph": graph.to_json(),
              "binaries": [{"name": n, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()}
                           for n, b in binaries.items()]}
    return MAGIC + json.dumps(header, default=str).encode() + b"\n" + b"".join(binaries.values())


def unpack_executable(data: bytes, fmt: str, device) -> tuple:
    """(target, graph, binaries by name) of `pack_executable` bytes of format `fmt`; InvalidArgumentError when damaged."""
    def damaged(why):
        return InvalidArgumentError(f"{device}: cannot load a compiled subgraph: {why}. Fix: delete it (or the kernel "
                                    f"cache entry, HWADAPTER_CACHE_DIR) so it is compiled again",
                                    fix="compile the subgraph again")
    if not isinstance(data, (bytes, bytearray)) or not data.startswith(MAGIC):
        raise damaged("it does not start with the hwadapter executable header")
    end = data.find(b"\n", len(MAGIC))
    try:
        header = json.loads(data[len(MAGIC):end])
        if header.get("format") != fmt:
            raise ValueError(f"format {header.get('format')!r}, expected {fmt!r}")
        graph = Graph.from_json(header["graph"])
        binaries, offset = {}, end + 1
        for entry in header["binaries"]:
            blob = bytes(data[offset:offset + entry["size"]])
            if len(blob) != entry["size"] or hashlib.sha256(blob).hexdigest() != entry["sha256"]:
                raise ValueError(f"the binary of {entry['name']} is truncated or corrupted")
            binaries[entry["name"]] = blob
            offset += entry["size"]
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise damaged(str(err)) from None
    return header.get("target"), graph, binaries
