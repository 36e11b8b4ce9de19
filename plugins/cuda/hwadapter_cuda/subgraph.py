"""The CUDA subgraph backend: a graph prepared once into back-to-back launches on one stream, cached without pickle.

Compiling a subgraph compiles every kernel it needs up front; running it allocates its intermediates once (on the
first run, then reused) and only its outputs per run. The serialised form is a JSON header (graph, target, binary
sizes and hashes) followed by the compiled binaries.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import numpy as np

from hwadapter.plugin import (DeviceArray, Executable, InvalidArgumentError, SubgraphBackend, Value, node_primitive,
                              pack_executable, share, unpack_executable)

from . import kernels

log = logging.getLogger("hwadapter")
FORMAT = "hwadapter-cuda-subgraph/2"


@dataclass
class _Step:
    """One node, ready to launch: a handwritten/cuBLAS kernel, a compiled program, or a zero-copy reshape."""
    node: object                    # the graph Node
    kind: str                       # "kernel", "program" or "alias"
    fn: object = None               # kernel function, or the loaded Program
    program: object = None          # hwadapter_kp.Program (kind "program")
    launch: object = None           # its Launch (global size, int64 scalars): shapes are static
    params: list = field(default_factory=list)   # value name per program parameter, in launch order
    binary: bytes = b""


class CudaSubgraphBackend(SubgraphBackend):
    """Runs every op with a kernel of this plugin or a kernel-primitive program (a "fused" node is one); prepares
    graphs for one GPU."""

    def __init__(self, device):
        self.device, self.runtime, self.codegen, self.device_name = device, device.runtime, device.codegen, str(device)

    def supported_nodes(self, graph) -> set:
        """Names of the nodes this device can run with the graph's dtypes and attributes."""
        return {n.name for n in graph.nodes if self._supports(graph, n)}

    def _supports(self, graph, node) -> bool:
        if node.op in kernels.KERNELS:
            if node.op == "conv2d" and node.attrs.get("activation") is not None:
                return False  # cuBLAS conv2d has no epilogue here: the activation stays a node of its own
            allowed = kernels.KERNELS[node.op][1]
            return allowed is None or graph.values[node.inputs[0]].dtype.name in allowed
        try:  # specialising is cheap and says whether the primitives cover these dtypes, ranks and attributes
            runner, attrs = node_primitive(self.device, node)
            if runner is None:
                return False
            runner.program([graph.values[i] for i in node.inputs], attrs)
        except Exception:
            return False
        return True

    def compile(self, subgraph) -> "CudaExecutable":
        return CudaExecutable(self, subgraph)

    def deserialize(self, data: bytes) -> "CudaExecutable":
        """Rebuild an executable from `serialize()`; recompiles when it was built for another GPU or NVRTC."""
        target, graph, binaries = unpack_executable(data, FORMAT, self.device)
        if target != self.codegen.cache_key():
            log.warning("%s: cached subgraph was compiled for %s, this device needs %s; recompiling it",
                        self.device_name, target, self.codegen.cache_key())
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
        if node.op == "conv2d" and node.attrs.get("activation") is not None:
            raise InvalidArgumentError(f"{self.backend.device_name}: node {node.name!r} is a conv2d with activation "
                                       f"{node.attrs['activation']!r}, which this plugin's conv2d does not apply. Fix: "
                                       f"keep the activation a node of its own (supported_nodes leaves this one out)")
        if node.op in kernels.KERNELS:
            kernels.prepare(self.backend.runtime, node.op, dtype)
            return _Step(node, "kernel", kernels.KERNELS[node.op][0])
        runner, attrs = node_primitive(self.backend.device, node)
        if runner is None:
            raise InvalidArgumentError(f"{self.backend.device_name}: op {node.op!r} of node {node.name!r} has no CUDA "
                                       f"kernel and no kernel-primitive program here. Fix: leave it out of the "
                                       f"subgraph (use supported_nodes)")
        inputs, program = runner.program([self.values[i] for i in node.inputs], attrs)
        if program.name in binaries:
            loaded = self.backend.codegen.load(binaries[program.name], program.name)
        else:
            loaded = runner.load(program)  # through the core's kernel cache
        # The op returns some of the program's outputs (layer_norm: "out"); the others are scratch.
        returned = runner.returned(program)
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
            scratch = [v for v in produced if v not in aliases and v not in self._fresh and v not in self.graph.inputs]
            self._scratch = self._share(device, scratch)
        return self._scratch

    def _share(self, device, scratch: list) -> dict:
        """A device array per scratch value, values whose lives (first to last step touching them, through
        reshapes) do not overlap sharing one allocation: steps run in order on one stream, so memory no later step
        reads is free for the next value."""
        root: dict = {}  # a reshape's output -> the value whose memory it is
        life: dict = {}
        for k, step in enumerate(self.steps):
            node = step.node
            if step.kind == "alias":
                root[node.outputs[0]] = root.get(node.inputs[0], node.inputs[0])
            names = list(step.params) if step.program else list(node.inputs) + list(node.outputs)
            for name in names:
                span = life.setdefault(root.get(name, name), [k, k])
                span[1] = k
        sizes = {}
        for name in scratch:
            v = self.values[name]
            first, last = life.get(name, [0, len(self.steps)])
            sizes[name] = (first, last, int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize)
        where, slots = share(sizes)
        blocks = [DeviceArray.empty(device, (n,), np.uint8).block for n in slots]
        out = {name: DeviceArray(device, blocks[i], self.values[name].shape, self.values[name].dtype)
               for name, i in where.items()}
        return out

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
        """The graph and every program's binary, in the plugin API's executable format (no pickles)."""
        blobs = {s.program.name: s.binary for s in self.steps if s.kind == "program"}
        return pack_executable(FORMAT, self.backend.codegen.cache_key(), self.graph, blobs)
