"""Graph IR as plain data: typed values, op nodes with normalised attributes, constants, validation, a text form, a
structural hash, subgraph extraction, and the one JSON form every plugin serialises graphs and compiled subgraphs in."""
from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import InvalidArgumentError
from .admit import refusal
from .control import graphs_of
from .meta import result_meta


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


@dataclass(eq=False)
class Graph:
    """Nodes in topological order over named values; `inputs`/`outputs` name the graph's boundary values and
    `constants` maps a value name to its numpy array (weights captured by tracing, folded results): a constant is in
    `values` but not in `inputs`."""
    nodes: list
    values: dict
    inputs: list
    outputs: list
    constants: dict = field(default_factory=dict)

    def __eq__(self, other):
        if not isinstance(other, Graph):
            return NotImplemented
        return (self.nodes, self.values, list(self.inputs), list(self.outputs)) == \
            (other.nodes, other.values, list(other.inputs), list(other.outputs)) and \
            self.constants.keys() == other.constants.keys() and \
            all(_same_array(a, other.constants[k]) for k, a in self.constants.items())

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
        constants = {i: self.constants[i] for i in inputs if i in self.constants}  # a weight stays a weight
        inputs = [i for i in inputs if i not in constants]
        names = set(inputs) | produced | set(constants)
        return Graph(chosen, {k: v for k, v in self.values.items() if k in names}, inputs, outputs, constants)

    def signature(self) -> str:
        """A canonical text of the graph (ops, attributes, shapes, dtypes, constants' digests) for cache keys."""
        doc = {"inputs": [(i, self.values[i].shape, self.values[i].dtype.name) for i in self.inputs],
               "outputs": self.outputs,
               "nodes": [(n.op, n.inputs, n.outputs, sorted((k, repr(v)) for k, v in n.attrs.items()))
                         for n in self.nodes]}
        if self.constants:  # only when there are some: graphs without constants keep their former signature
            doc["constants"] = sorted((k, _digest(a)) for k, a in self.constants.items())
        return json.dumps(doc, default=str)

    def hash(self) -> str:
        """A stable structural hash (hex sha256): ops, attributes, shapes, dtypes, wiring and constants' bytes, with
        values and nodes renamed canonically by position, so two graphs that differ only in names hash alike."""
        rename: dict = {}
        for name in list(self.inputs) + sorted(self.constants, key=lambda k: _first_use(self, k)):
            rename.setdefault(name, f"%{len(rename)}")
        for n in self.nodes:
            for o in n.outputs:
                rename.setdefault(o, f"%{len(rename)}")

        def meta(name):
            v = self.values.get(name)
            return None if v is None else [list(v.shape), v.dtype.name]

        doc = {"inputs": [[rename[i], meta(i)] for i in self.inputs],
               "constants": sorted([rename[k], meta(k), _digest(a)] for k, a in self.constants.items()),
               "nodes": [[n.op, [rename.get(i, "?" + i) for i in n.inputs], [[rename[o], meta(o)] for o in n.outputs],
                          _canonical_attrs(n)] for n in self.nodes],
               "outputs": [rename.get(o, "?" + o) for o in self.outputs]}
        return hashlib.sha256(json.dumps(doc, default=repr).encode()).hexdigest()

    def validate(self) -> "Graph":
        """The graph itself when it is well formed: topological order, every value defined once and described in
        `values`, constants matching their description, each node's outputs what its op's rule (ops/meta) gives;
        else InvalidArgumentError naming the node."""
        def bad(where, what, fix="build the graph again (hwadapter.jit.get_graph) or correct it by hand"):
            return InvalidArgumentError(f"graph: {where}: {what}. Fix: {fix}", fix=fix)
        defined: dict = {}
        for name in self.inputs:
            if name in defined:
                raise bad(f"input {name!r}", "is listed twice among the inputs")
            defined[name] = "an input"
        for name, arr in self.constants.items():
            if name in defined:
                raise bad(f"constant {name!r}", "is also a graph input")
            v = self.values.get(name)
            if v is None or tuple(np.shape(arr)) != v.shape or np.asarray(arr).dtype != v.dtype:
                raise bad(f"constant {name!r}", f"its array ({_show_array(arr)}) does not match its value "
                                                f"({_show_value(v)})")
            defined[name] = "a constant"
        for name in defined:
            if name not in self.values:
                raise bad(f"input {name!r}", "has no entry in values (shape and dtype)")
        for index, n in enumerate(self.nodes):
            where = f"node {n.name!r} ({n.op}, #{index})"
            for i in n.inputs:
                if i not in defined:
                    later = any(i in m.outputs for m in self.nodes[index + 1:])
                    raise bad(where, f"reads {i!r}, which is " + (
                        "produced by a later node: the nodes are not in topological order" if later else
                        "neither an input, a constant nor produced by an earlier node"))
            for o in n.outputs:
                if o in defined:
                    raise bad(where, f"defines {o!r}, already defined as {defined[o]}")
                if o not in self.values:
                    raise bad(where, f"output {o!r} has no entry in values (shape and dtype)")
                defined[o] = f"an output of node {n.name!r}"
            self._check_meta(n, where, bad)
        for o in self.outputs:
            if o not in defined:
                raise bad(f"graph output {o!r}", "is never defined")
        return self

    def _check_meta(self, n, where, bad) -> None:
        for key, sub in graphs_of(n):  # a branch or body: a graph of its own, well formed first
            if not isinstance(sub, Graph):
                raise bad(where, f"its attribute {key!r} is {type(sub).__name__}, not a graph")
            try:
                sub.validate()
            except InvalidArgumentError as err:
                raise bad(where, f"its {key} graph: {err}") from None
        shapes = tuple(self.values[i].shape for i in n.inputs)
        dtypes = tuple(self.values[i].dtype for i in n.inputs)
        refused = refusal(n.op, dtypes)  # what the frontend never emits (ops/admit.py): kernels need not take it
        if refused is not None:
            raise bad(where, f"{n.op} does not admit inputs {_show_inputs(shapes, dtypes)}: {refused[0]}", refused[1])
        try:
            due = ((shapes[0], dtypes[0]),) if n.op == "copy" and shapes else result_meta(n.op, shapes, dtypes, n.attrs)
        except Exception as err:  # the op's rule refuses these inputs: the node cannot run
            raise bad(where, f"its op rejects inputs {_show_inputs(shapes, dtypes)}: {type(err).__name__}: {err}")
        if due is None:  # an op without a rule (a kernel-primitive op, a fused node): nothing to check against
            return
        got = [(self.values[o].shape, self.values[o].dtype) for o in n.outputs]
        due = [(tuple(s), np.dtype(d)) for s, d in due]
        if got != due:
            raise bad(where, f"outputs are declared as {_show_metas(got)} but {n.op} of "
                             f"{_show_inputs(shapes, dtypes)} gives {_show_metas(due)}")

    def __repr__(self) -> str:
        """`Graph(<structural hash>)`: what a node's signature shows of a branch or body graph."""
        return f"Graph({self.hash()})"

    def __str__(self) -> str:
        """Readable text: inputs, constants, one line per node (`%3 = add(%1, %2) : float32[4,5]`), outputs."""
        def typed(name):
            return f"%{name} : {_show_value(self.values.get(name))}"
        lines = [f"graph({', '.join(typed(i) for i in self.inputs)}) {{"]
        for k, arr in self.constants.items():
            lines.append(f"  const {typed(k)} = {_preview(arr)}")
        for n in self.nodes:
            outs = ", ".join(f"%{o}" for o in n.outputs)
            types = ", ".join(_show_value(self.values.get(o)) for o in n.outputs)
            attrs = ", ".join(f"{k}={_show_attr(v)}" for k, v in n.attrs.items())
            args = ", ".join(f"%{i}" for i in n.inputs)
            lines.append(f"  {outs} = {n.op}({args}){f' {{{attrs}}}' if attrs else ''} : {types}  # {n.name}")
            for key, sub in graphs_of(n):  # a branch or body, indented under its node
                lines.append(f"    {key}:")
                lines += ["    " + line for line in str(sub).splitlines()]
        lines.append(f"  return {', '.join(f'%{o}' for o in self.outputs)}")
        lines.append("}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        """The graph as JSON-ready data; tuples are tagged so they come back as tuples (kernels hash attributes);
        constants are base64 of their bytes (exact) with shape and dtype."""
        doc = {"inputs": list(self.inputs), "outputs": list(self.outputs),
               "values": {k: [list(v.shape), v.dtype.name] for k, v in self.values.items()},
               "nodes": [[n.name, n.op, list(n.inputs), list(n.outputs), {k: _enc(a) for k, a in n.attrs.items()}]
                         for n in self.nodes]}
        if self.constants:
            doc["constants"] = {k: _enc_array(a) for k, a in self.constants.items()}
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> "Graph":
        """The graph `to_json` wrote; KeyError, TypeError or ValueError when `doc` is not one."""
        values = {k: Value(k, tuple(int(d) for d in shape), np.dtype(dtype)) for k, (shape, dtype) in doc["values"].items()}
        nodes = [Node(str(name), str(op), tuple(ins), tuple(outs), {k: _dec(a) for k, a in attrs.items()})
                 for name, op, ins, outs, attrs in doc["nodes"]]
        constants = {k: _dec_array(a) for k, a in doc.get("constants", {}).items()}
        return cls(nodes, values, list(doc["inputs"]), list(doc["outputs"]), constants)

    def save(self, path) -> None:
        """Write the graph to the file `path` in its JSON form (`to_json`); `Graph.load` and `hwadapter partition`
        read it."""
        Path(path).write_text(json.dumps(self.to_json()), encoding="utf-8")

    @classmethod
    def load(cls, path) -> "Graph":
        """The graph `save` wrote to the file `path`, validated. OSError when the file cannot be read;
        InvalidArgumentError saying what is wrong, and how to fix it, when it holds no such graph."""
        text = Path(path).read_text(encoding="utf-8")
        return cls.loads(text, where=str(path))

    @classmethod
    def loads(cls, text: str, where: str = "graph") -> "Graph":
        """The graph in `text`, the JSON that `save` writes, validated; InvalidArgumentError (naming `where`) when
        it is not one."""
        def bad(what: str) -> InvalidArgumentError:
            return InvalidArgumentError(f"{where}: {what}. Fix: {_SAVE_FIX}", fix=_SAVE_FIX)
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as err:
            ended = err.msg.startswith("Unterminated") or err.pos >= len(text.rstrip())
            cut = " (the file ends too early: is it truncated?)" if ended else ""
            raise bad(f"not valid JSON: {err.msg} (line {err.lineno}, column {err.colno}){cut}") from None
        except RecursionError:
            raise bad("not valid JSON (nested too deeply)") from None
        if not isinstance(doc, dict):
            raise bad(f"holds a JSON {type(doc).__name__}, not a graph (an object with inputs, outputs, values and "
                      f"nodes)")
        try:
            graph = cls.from_json(doc)
        except KeyError as err:
            raise bad(f"not a graph written by Graph.save: {err} is missing") from None
        except (TypeError, ValueError, AttributeError, IndexError) as err:
            raise bad(f"not a graph written by Graph.save: {type(err).__name__}: {err}") from None
        try:
            return graph.validate()
        except InvalidArgumentError as err:
            raise InvalidArgumentError(f"{where}: {err}", fix=err.fix) from None


_SAVE_FIX = "write the file with graph.save(path) (graph: hwadapter.jit.get_graph(fn, *args))"


def _same_array(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _digest(arr) -> str:
    arr = np.asarray(arr, order="C")  # not ascontiguousarray: it turns 0-d into 1-d
    return hashlib.sha256(f"{arr.dtype.str}{arr.shape}".encode() + arr.tobytes()).hexdigest()[:32]


def _first_use(graph: Graph, name: str) -> tuple:
    """Where constant `name` is first read ((node index, input position)): constants are renamed in that order."""
    for index, n in enumerate(graph.nodes):
        if name in n.inputs:
            return index, n.inputs.index(name), ""
    return len(graph.nodes), 0, name  # unused: by name, as nothing else orders it


def _canonical_attrs(n: Node) -> list:
    """A node's attributes as comparable data; a fused node's own value names (and its name) are renamed by position,
    so fused graphs that differ only in names hash alike."""
    attrs = n.attrs
    if n.op == "fused" and isinstance(attrs.get("nodes"), (tuple, list)):
        local: dict = {}
        for name in attrs.get("inputs", ()):
            local.setdefault(name, f"${len(local)}")
        for inner in attrs["nodes"]:
            if isinstance(inner, (tuple, list)) and len(inner) > 2:
                for out in (inner[2],) if isinstance(inner[2], str) else inner[2]:
                    local.setdefault(out, f"${len(local)}")
        attrs = {k: v for k, v in attrs.items() if k != "name"}
        return sorted((k, _canonical_attr(v, local)) for k, v in attrs.items())
    return sorted((k, _canonical_attr(v, {})) for k, v in attrs.items())


def _canonical_attr(v, local: dict):
    if isinstance(v, tuple):  # tagged, as in to_json: kernels tell a tuple attribute from a list
        return {"tuple": [_canonical_attr(x, local) for x in v]}
    if isinstance(v, list):
        return [_canonical_attr(x, local) for x in v]
    if isinstance(v, dict):
        return sorted((str(k), _canonical_attr(x, local)) for k, x in v.items())
    if isinstance(v, str):
        return local.get(v, v)
    if isinstance(v, np.dtype):
        return v.name
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, Graph):  # a branch or body: by structure, whatever its values are called
        return {"graph": v.hash()}
    return v if isinstance(v, (int, float, bool, type(None))) else repr(v)


def _enc_array(arr) -> dict:
    arr = np.asarray(arr, order="C")
    return {"shape": list(arr.shape), "dtype": arr.dtype.name, "base64": base64.b64encode(arr.tobytes()).decode()}


def _dec_array(doc) -> np.ndarray:
    dtype, shape = np.dtype(doc["dtype"]), tuple(int(d) for d in doc["shape"])
    return np.frombuffer(base64.b64decode(doc["base64"]), dtype=dtype).reshape(shape).copy()


def _show_value(v) -> str:
    return "?" if v is None else f"{v.dtype.name}[{','.join(str(d) for d in v.shape)}]"


def _show_array(arr) -> str:
    arr = np.asarray(arr)
    return f"{arr.dtype.name}[{','.join(str(d) for d in arr.shape)}]"


def _show_metas(metas) -> str:
    return ", ".join(f"{np.dtype(d).name}[{','.join(str(x) for x in s)}]" for s, d in metas)


def _show_inputs(shapes, dtypes) -> str:
    return "(" + _show_metas(zip(shapes, dtypes)) + ")"


def _show_attr(v) -> str:
    if isinstance(v, np.dtype):
        return v.name
    if isinstance(v, Graph):
        return f"<graph of {len(v.nodes)} nodes>"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _preview(arr) -> str:
    arr = np.asarray(arr)
    if arr.size <= 6:
        return np.array2string(arr, separator=", ").replace("\n", "")
    flat = ", ".join(f"{x:g}" if arr.dtype.kind == "f" else str(x) for x in arr.reshape(-1)[:4])
    return f"[{flat}, ...] ({arr.size} values)"


def _enc(v):
    if isinstance(v, Graph):
        return {"graph": v.to_json()}
    if isinstance(v, tuple):
        return {"tuple": [_enc(x) for x in v]}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    if isinstance(v, np.dtype):
        return v.name
    return v.item() if isinstance(v, np.generic) else v


def _dec(v):
    if isinstance(v, dict):
        return Graph.from_json(v["graph"]) if "graph" in v else tuple(_dec(x) for x in v["tuple"])
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
