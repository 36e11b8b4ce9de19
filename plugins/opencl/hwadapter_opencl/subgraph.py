"""Subgraph level (after NNAdapter): claim the nodes this device can compile, turn a subgraph into one program object
(every kernel built up front, intermediates allocated once, launches back to back on one queue), and serialise it
as JSON: the graph and the program binaries, nothing executable."""
from __future__ import annotations

import base64
import binascii
import json
import threading

import numpy as np
import pyopencl as cl

from hwadapter.plugin import (DeviceArray, Executable, Graph, InvalidArgumentError, Node, SubgraphBackend, Value,
                              codegen_kernel)

from . import kernels
from .codegen import backend_for, build_key
from .plans import Plan, Step

FORMAT = "hwadapter-opencl-subgraph/1"


def _freeze(v):
    """JSON lists back to the tuples kernels take as attributes."""
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v


def _json_default(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.dtype):
        return v.name
    raise TypeError(f"cannot serialise attribute value {v!r}")


class OpenCLSubgraphBackend(SubgraphBackend):
    """Compiles subgraphs of handwritten-kernel ops and kernel-primitive ops for one device."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.backend = backend_for(runtime)
        self.device = f"opencl:{runtime.index}"

    def supported_nodes(self, graph) -> set:
        """Names of the nodes this device can compile."""
        return {node.name for node in graph.nodes if self._supports(node, graph.values)}

    def _supports(self, node, values) -> bool:
        dtypes = [values[i].dtype for i in node.inputs]
        if any(d == np.float64 for d in dtypes) and not self.runtime.fp64:
            return False
        if node.op in kernels.PLANNERS:
            return bool(dtypes) and dtypes[0].name in kernels.PLANNERS[node.op][1]
        ck = codegen_kernel(node.op, self.device)
        if ck is None:
            return False
        try:
            ck.program([values[i] for i in node.inputs], node.attrs)  # specialising is cheap; it is not compiled
        except Exception:  # noqa: BLE001  any reason this program cannot be made means "not supported"
            return False
        return True

    def plan(self, node, values) -> Plan:
        """The node's launches: a handwritten kernel's plan, or its kernel-primitive program as a one-step plan."""
        shapes = tuple(values[i].shape for i in node.inputs)
        dtypes = tuple(values[i].dtype for i in node.inputs)
        if node.op in kernels.PLANNERS:
            return kernels.plan(node.op, self.runtime, shapes, dtypes, node.attrs)
        ck = codegen_kernel(node.op, self.device)
        if ck is None:
            raise InvalidArgumentError(f"{self.device}: node {node.name!r} (op {node.op!r}) has no OpenCL kernel. "
                                       f"Fix: leave it out of the subgraph (see supported_nodes)")
        return self._program_plan(ck, [values[i] for i in node.inputs], node.attrs)

    def _program_plan(self, ck, values, attrs) -> Plan:
        """A kernel-primitive program as a plan; its binary comes from a deserialised subgraph or the disk cache."""
        inputs, program = ck.program(values, attrs)
        key = build_key(program.source(self.backend.dialect))
        binary = self.backend.binaries.get(key)
        loaded = self.backend.load(binary, program.name) if binary is not None else ck.load(program)
        launch = program.bind(inputs, self.backend.dialect)
        shapes = program.output_shapes(inputs)
        dtype = {p.name: np.dtype(p.dtype) for p in program.params}
        names = list(ck.spec.outputs or (program.outputs[0].name,))  # what the op returns; the rest are scratch
        extra = [p.name for p in program.outputs if p.name not in names]
        plan = Plan([(shapes[n], dtype[n]) for n in names], temps=[(shapes[n], dtype[n]) for n in extra])
        if launch.global_size and all(np.prod(s) for s, _ in plan.outputs + plan.temps):
            order = list(ck.spec.inputs)
            args = [("in", order.index(p.name)) for p in program.inputs]
            args += [("out", names.index(p.name)) if p.name in names else ("tmp", extra.index(p.name))
                     for p in program.outputs]
            args += [np.int64(s) for s in launch.scalar_args]
            plan.steps.append(Step(loaded.program, program.name, (launch.global_size,), (loaded.local,), args, key))
        return plan

    def compile(self, subgraph) -> "OpenCLExecutable":
        return OpenCLExecutable(self, subgraph)

    def deserialize(self, data: bytes) -> "OpenCLExecutable":
        try:
            doc = json.loads(data)
            g = doc["graph"]
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT!r}")
            binaries = {k: base64.b64decode(v, validate=True) for k, v in doc["binaries"].items()}
            values = {n: Value(n, tuple(s), np.dtype(d)) for n, (s, d) in g["values"].items()}
            nodes = [Node(n, op, tuple(i), tuple(o), {k: _freeze(v) for k, v in attrs.items()})
                     for n, op, i, o, attrs in g["nodes"]]
            graph = Graph(nodes, values, list(g["inputs"]), list(g["outputs"]))
        except (ValueError, KeyError, TypeError, binascii.Error) as err:
            raise InvalidArgumentError(f"{self.device}: not a serialised OpenCL subgraph ({err}). Fix: recompile the "
                                       f"subgraph; the cache entry is damaged or from another version") from None
        if doc.get("target") != self.backend.cache_key():
            raise InvalidArgumentError(f"{self.device}: the subgraph was compiled for {doc.get('target')}, this is "
                                       f"{self.backend.cache_key()}. Fix: recompile it for this device")
        self.backend.binaries.update(binaries)
        return self.compile(graph)


class OpenCLExecutable(Executable):
    """A compiled subgraph: per-node plans over buffers of the whole graph."""

    def __init__(self, backend: OpenCLSubgraphBackend, graph):
        self.backend, self.graph = backend, graph
        self.plans = [backend.plan(node, graph.values) for node in graph.nodes]
        # Where every value lives: ("in", i) a graph input, or ("buf", j) buffer j (reshapes share their input's).
        self.buffers: list = []  # (shape, dtype) of each buffer
        self.where: dict = {name: ("in", i) for i, name in enumerate(graph.inputs)}
        self.temps: list = []  # buffer index of each plan's temps
        for node, plan in zip(graph.nodes, self.plans):
            for i, (name, (shape, dtype)) in enumerate(zip(node.outputs, plan.outputs)):
                if i in plan.aliases:
                    self.where[name] = self.where[node.inputs[plan.aliases[i]]]
                else:
                    self.where[name] = ("buf", len(self.buffers))
                    self.buffers.append((shape, dtype))
            self.temps.append([len(self.buffers) + j for j in range(len(plan.temps))])
            self.buffers += plan.temps
        # Buffers holding an output are fresh every run (the caller keeps them); the rest are allocated once.
        self.fresh = {self.where[o][1] for o in graph.outputs if self.where[o][0] == "buf"}
        self.memory: dict = {}  # buffer index -> DeviceArray, for the buffers allocated once
        self._bound = None
        self._lock = threading.Lock()

    def _place(self, node, temps, ref) -> tuple:
        """Where a plan's ("in" | "out" | "tmp", i) reference lives in the whole graph."""
        kind, i = ref
        if kind == "tmp":
            return ("buf", temps[i])
        return self.where[(node.inputs if kind == "in" else node.outputs)[i]]

    def _bind(self, device) -> None:
        """On the first run (the inputs tell the device): allocate the intermediates, create one kernel per launch
        and set every argument that does not change between runs."""
        self.memory = {j: DeviceArray.empty(device, s, d) for j, (s, d) in enumerate(self.buffers)
                       if j not in self.fresh}
        self.launches, self.patches = [], []  # (kernel, step); (kernel, arg position, ("in", i) | ("buf", j))
        for node, plan, temps in zip(self.graph.nodes, self.plans, self.temps):
            for step in plan.steps:
                k = step.kernel()
                for pos, arg in enumerate(step.args):
                    if isinstance(arg, tuple):
                        at = self._place(node, temps, arg)
                        if at[0] == "buf" and at[1] not in self.fresh:
                            k.set_arg(pos, self.memory[at[1]].handle)
                        else:
                            self.patches.append((k, pos, at))
                self.launches.append((k, step))
        self._bound = device

    def run(self, inputs: list) -> list:
        """Enqueue every launch back to back on the device's queue; returns the outputs (still being computed)."""
        g = self.graph
        if len(inputs) != len(g.inputs):
            raise InvalidArgumentError(f"subgraph takes {len(g.inputs)} inputs ({', '.join(g.inputs)}), got "
                                       f"{len(inputs)}")
        for name, a in zip(g.inputs, inputs):
            v = g.values[name]
            if tuple(a.shape) != tuple(v.shape) or a.dtype != v.dtype:
                raise InvalidArgumentError(f"subgraph input {name!r} was compiled for {v.shape} {v.dtype}, got "
                                           f"{tuple(a.shape)} {a.dtype}. Fix: recompile for the new shape")
        device = inputs[0].device
        with self._lock:
            if self._bound is None:
                self._bind(device)
            fresh = {j: DeviceArray.empty(device, *self.buffers[j]) for j in self.fresh}
            for k, pos, (kind, i) in self.patches:
                k.set_arg(pos, inputs[i].handle if kind == "in" else fresh[i].handle)
            queue = device.runtime.queue
            for k, step in self.launches:
                cl.enqueue_nd_range_kernel(queue, k, step.global_size, step.local_size)
        out = []
        for name in g.outputs:
            kind, i = self.where[name]
            out.append((inputs[i] if kind == "in" else fresh[i]).reshape(g.values[name].shape))
        return out

    def serialize(self) -> bytes:
        """JSON: the graph signature and the device binary of every program (no pickles, nothing to execute)."""
        g = self.graph
        binaries = {step.key: base64.b64encode(step.program.binaries[0]).decode()
                    for plan in self.plans for step in plan.steps}
        doc = {"format": FORMAT, "target": self.backend.backend.cache_key(),
               "graph": {"inputs": g.inputs, "outputs": g.outputs,
                         "values": {n: [list(v.shape), v.dtype.name] for n, v in g.values.items()},
                         "nodes": [[n.name, n.op, list(n.inputs), list(n.outputs), n.attrs] for n in g.nodes]},
               "binaries": binaries}
        return json.dumps(doc, default=_json_default).encode()
