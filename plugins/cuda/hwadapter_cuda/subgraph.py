"""The CUDA subgraph backend: a graph prepared once into back-to-back launches on one stream, cached without pickle.

Compiling a subgraph compiles every kernel it needs up front; running it allocates its intermediates once (on the
first run, then reused) and only its outputs per run. The serialised form is a JSON header (graph, target, binary
sizes and hashes) followed by the compiled binaries.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass, field

import numpy as np

from hwadapter.plugin import (DeviceArray, Executable, Graph, InvalidArgumentError, Node, SubgraphBackend, Value,
                              codegen_kernel)

from . import kernels

log = logging.getLogger("hwadapter")
MAGIC = b"HWADAPTER-CUDA-EXECUTABLE 1\n"


@dataclass
class _Step:
    """One node, ready to launch: a handwritten/cuBLAS kernel, a compiled program, or a zero-copy reshape."""
    node: Node
    kind: str                       # "kernel", "program" or "alias"
    fn: object = None               # kernel function, or the loaded Program
    program: object = None          # hwadapter_kp.Program (kind "program")
    launch: object = None           # its Launch (global size, int64 scalars): shapes are static
    params: list = field(default_factory=list)   # value name per program parameter, in launch order
    binary: bytes = b""


class CudaSubgraphBackend(SubgraphBackend):
    """Runs every op with a kernel of this plugin or a kernel-primitive program; prepares graphs for one GPU."""

    def __init__(self, runtime, codegen, device_name: str):
        self.runtime, self.codegen, self.device_name = runtime, codegen, device_name

    def supported_nodes(self, graph) -> set:
        """Names of the nodes this device can run with the graph's dtypes and attributes."""
        return {n.name for n in graph.nodes if self._supports(graph, n)}

    def _supports(self, graph, node) -> bool:
        if node.op in kernels.KERNELS:
            allowed = kernels.KERNELS[node.op][1]
            return allowed is None or graph.values[node.inputs[0]].dtype.name in allowed
        runner = codegen_kernel(node.op, self.device_name)
        if runner is None:
            return False
        try:  # specialising is cheap and says whether the primitives cover these dtypes, ranks and attributes
            runner.program([graph.values[i] for i in node.inputs], node.attrs)
        except Exception:
            return False
        return True

    def compile(self, subgraph) -> "CudaExecutable":
        return CudaExecutable(self, subgraph)

    def deserialize(self, data: bytes) -> "CudaExecutable":
        """Rebuild an executable from `serialize()`; recompiles when it was built for another GPU or NVRTC."""
        header, binaries = _unpack(self.device_name, data)
        graph = _graph_from_json(header["graph"])
        if header["target"] != _target(self.codegen):
            log.warning("%s: cached subgraph was compiled for %s, this device needs %s; recompiling it",
                        self.device_name, header["target"], _target(self.codegen))
            binaries = {}
        return CudaExecutable(self, graph, binaries)


class CudaExecutable(Executable):
    """A prepared subgraph. Not reentrant: its intermediates are shared by runs, so runs take a lock."""

    def __init__(self, backend: CudaSubgraphBackend, graph, binaries: dict | None = None):
        if not graph.inputs:
            raise InvalidArgumentError(f"{backend.device_name}: a subgraph needs at least one input to run on the "
                                       f"device. Fix: fold input-free nodes into constants first")
        self.backend, self.graph = backend, graph
        self.values = dict(graph.values)  # plus the scratch outputs of programs (layer_norm's mean and variance)
        self.steps = [self._prepare(n, binaries or {}) for n in graph.nodes]
        self._fresh = self._per_run_values()
        self._scratch: dict | None = None
        self._lock = threading.Lock()

    def _prepare(self, node, binaries: dict) -> _Step:
        if node.op == "reshape":
            return _Step(node, "alias")
        dtype = self.values[node.inputs[0]].dtype
        if node.op in kernels.KERNELS:
            kernels.prepare(self.backend.runtime, node.op, dtype)
            return _Step(node, "kernel", kernels.KERNELS[node.op][0])
        runner = codegen_kernel(node.op, self.backend.device_name)
        if runner is None:
            raise InvalidArgumentError(f"{self.backend.device_name}: op {node.op!r} of node {node.name!r} has no CUDA "
                                       f"kernel and no kernel-primitive program here. Fix: leave it out of the "
                                       f"subgraph (use supported_nodes)")
        inputs, program = runner.program([self.values[i] for i in node.inputs], node.attrs)
        if program.name in binaries:
            loaded = self.backend.codegen.load(binaries[program.name], program.name)
        else:
            loaded = runner.load(program)  # through the core's kernel cache
        # The op returns the program outputs its spec names (layer_norm: "out"); the others are scratch.
        returned = getattr(getattr(runner, "spec", None), "outputs", ()) or [program.outputs[0].name]
        names = dict(zip(returned, node.outputs))
        params = [inputs[p.name].name for p in program.inputs]  # the Values it was specialised for
        params += [names.get(p.name, f"{node.name}/{p.name}") for p in program.outputs]
        step = _Step(node, "program", loaded, program, program.bind(inputs, self.backend.codegen.dialect), params,
                     self.backend.codegen.binaries[program.name])
        for p, name in zip(program.outputs, params[len(program.inputs):]):
            if name not in self.values:
                self.values[name] = Value(name, tuple(program.output_shapes(inputs)[p.name]), np.dtype(p.dtype))
        return step

    def _per_run_values(self) -> set:
        """Values allocated on every run: the outputs, and what a returned reshape aliases."""
        fresh = set(self.graph.outputs)
        for step in reversed(self.steps):
            if step.kind == "alias" and step.node.outputs[0] in fresh:
                fresh.add(step.node.inputs[0])
        return fresh - set(self.graph.inputs)

    def _storage(self, device) -> dict:
        if self._scratch is None:
            aliases = {s.node.outputs[0] for s in self.steps if s.kind == "alias"}
            produced = [v for s in self.steps for v in (s.params[len(s.program.inputs):] if s.program else
                                                        s.node.outputs)]
            self._scratch = {v: self._empty(device, v) for v in produced
                             if v not in aliases and v not in self._fresh and v not in self.graph.inputs}
        return self._scratch

    def _empty(self, device, name):
        v = self.values[name]
        return DeviceArray.empty(device, v.shape, v.dtype)

    def run(self, inputs: list) -> list:
        if len(inputs) != len(self.graph.inputs):
            raise InvalidArgumentError(f"{self.backend.device_name}: the subgraph takes {len(self.graph.inputs)} "
                                       f"inputs ({', '.join(self.graph.inputs)}), got {len(inputs)}")
        device = inputs[0].device
        with self._lock:
            env = dict(self._storage(device))
            env.update(zip(self.graph.inputs, inputs))
            for step in self.steps:
                self._run_step(step, env, device)
            return [env[o] for o in self.graph.outputs]

    def _run_step(self, step: _Step, env: dict, device) -> None:
        node = step.node
        if step.kind == "alias":
            env[node.outputs[0]] = env[node.inputs[0]].reshape(node.attrs["shape"])
            return
        names = step.params[len(step.program.inputs):] if step.program else node.outputs
        for name in names:
            if name not in env:
                env[name] = self._empty(device, name)
        if step.kind == "program":
            if step.launch.global_size:
                step.fn.launch(step.launch.global_size, [env[v] for v in step.params], step.launch.scalar_args)
            return
        outs = [env[o] for o in node.outputs]
        result = step.fn(*(env[i] for i in node.inputs), **node.attrs, out=outs if len(outs) > 1 else outs[0])
        env.update(zip(node.outputs, result if isinstance(result, list) else [result]))

    def serialize(self) -> bytes:
        programs = [s for s in self.steps if s.kind == "program"]
        blobs = {s.program.name: s.binary for s in programs}
        header = {"device": self.backend.device_name, "target": _target(self.backend.codegen),
                  "graph": _graph_to_json(self.graph),
                  "programs": [{"name": n, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()}
                               for n, b in blobs.items()]}
        return MAGIC + json.dumps(header).encode() + b"\n" + b"".join(blobs.values())


# --- serialisation helpers --------------------------------------------------------------------------------------
def _target(codegen) -> dict:
    return codegen.cache_key()


def _enc(v):
    """Attributes as JSON; tuples are tagged so they come back as tuples (kernels compare and hash them)."""
    if isinstance(v, tuple):
        return {"tuple": [_enc(x) for x in v]}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    return v.item() if isinstance(v, np.generic) else v


def _dec(v):
    if isinstance(v, dict):
        return tuple(_dec(x) for x in v["tuple"])
    return [_dec(x) for x in v] if isinstance(v, list) else v


def _graph_to_json(graph) -> dict:
    return {"inputs": graph.inputs, "outputs": graph.outputs,
            "values": {k: [list(v.shape), v.dtype.name] for k, v in graph.values.items()},
            "nodes": [[n.name, n.op, list(n.inputs), list(n.outputs), {k: _enc(a) for k, a in n.attrs.items()}]
                      for n in graph.nodes]}


def _graph_from_json(d: dict):
    values = {k: Value(k, tuple(shape), np.dtype(dtype)) for k, (shape, dtype) in d["values"].items()}
    nodes = [Node(name, op, tuple(ins), tuple(outs), {k: _dec(a) for k, a in attrs.items()})
             for name, op, ins, outs, attrs in d["nodes"]]
    return Graph(nodes, values, list(d["inputs"]), list(d["outputs"]))


def _unpack(device_name: str, data: bytes):
    def corrupt(why):
        return InvalidArgumentError(f"{device_name}: cannot load a cached CUDA subgraph: {why}. Fix: delete the entry "
                                    f"from the kernel cache (HWADAPTER_CACHE_DIR) so it is compiled again")
    if not data.startswith(MAGIC):
        raise corrupt("it does not start with the hwadapter-cuda executable header")
    end = data.find(b"\n", len(MAGIC))
    try:
        header = json.loads(data[len(MAGIC):end])
    except ValueError as err:
        raise corrupt(f"its JSON header is unreadable ({err})") from None
    binaries, offset = {}, end + 1
    for p in header.get("programs", []):
        blob = data[offset:offset + p["size"]]
        if len(blob) != p["size"] or hashlib.sha256(blob).hexdigest() != p["sha256"]:
            raise corrupt(f"the binary of {p['name']} is truncated or corrupted")
        binaries[p["name"]] = blob
        offset += p["size"]
    return header, binaries
