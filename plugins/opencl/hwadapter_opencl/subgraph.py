"""The subgraph level (after NNAdapter): claim the nodes this device can compile, turn a subgraph into one program
object (every kernel built up front, intermediates allocated once, launches back to back on one queue), and serialise
it with the plugin API's executable format: the graph and the program binaries, nothing executable.

A node becomes a Plan: its launches over numbered buffers. Kernel-primitive and fused nodes are one launch of the
codegen backend's program; with tuning/ present, its handwritten kernels' plans (GEMM, convolution, pooling, data
movement) are claimed too. Without tuning/ the level compiles the kernel-primitive nodes alone.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields

import numpy as np
import pyopencl as cl

from hwadapter.plugin import (DeviceArray, Executable, InvalidArgumentError, SubgraphBackend, node_primitive,
                              pack_executable, share, unpack_executable)

from .codegen import Specialised
from .runtime import build_key

FORMAT = "hwadapter-opencl-subgraph/2"
_UNSET = object()  # a patched kernel argument not set yet (None is a real handle: an empty array's)


@dataclass
class Step:
    """One kernel launch: args are ("in" | "out" | "tmp", index) buffer references or fixed values; key names the
    program's source and options (runtime.build_key)."""
    program: cl.Program
    name: str
    global_size: tuple
    local_size: tuple | None
    args: list
    key: str = ""

    def kernel(self) -> cl.Kernel:
        """A new cl.Kernel with the fixed (non-buffer) arguments set."""
        k = cl.Kernel(self.program, self.name)
        for pos, a in enumerate(self.args):
            if not isinstance(a, tuple):
                k.set_arg(pos, a)
        return k


@dataclass
class Plan:
    """A node's output (shape, dtype)s, scratch buffers and launches; aliases: output index -> input index it
    reshapes."""
    outputs: list
    steps: list = field(default_factory=list)
    temps: list = field(default_factory=list)
    aliases: dict = field(default_factory=dict)


class OpenCLSubgraphBackend(SubgraphBackend):
    """Compiles subgraphs of kernel-primitive ops, "fused" nodes and (given `handwritten`: tuning/kernels.py, or
    None) handwritten-kernel ops for one device."""

    def __init__(self, device, handwritten=None):
        self.device, self.runtime = device, device.runtime
        self.handwritten = handwritten  # PLANNERS (op -> (planner, dtypes)), EPILOGUES and plan(), or None

    def supported_nodes(self, graph) -> set:
        """Names of the nodes this device can compile."""
        return {node.name for node in graph.nodes if self._supports(node, graph.values)}

    def _supports(self, node, values) -> bool:
        dtypes = [values[i].dtype for i in node.inputs]
        if any(d == np.float64 for d in dtypes) and not self.runtime.fp64:
            return False
        hand = self.handwritten
        if hand is not None and node.op in hand.PLANNERS:
            if node.op == "conv2d" and node.attrs.get("activation") not in (None, *hand.EPILOGUES):
                return False
            return bool(dtypes) and dtypes[0].name in hand.PLANNERS[node.op][1]
        try:
            primitive, attrs = node_primitive(self.device, node)  # a fused node's program is built here
            if primitive is None:
                return False
            primitive.program([values[i] for i in node.inputs], attrs)  # specialising is cheap; not compiled
        except Exception:  # noqa: BLE001  any reason this program cannot be made means "not supported"
            return False
        return True

    def plan(self, node, values) -> Plan:
        """The node's launches: a handwritten kernel's plan, or its (or a fused node's) kernel-primitive program as a
        one-step plan."""
        shapes = tuple(values[i].shape for i in node.inputs)
        dtypes = tuple(values[i].dtype for i in node.inputs)
        if self.handwritten is not None and node.op in self.handwritten.PLANNERS:
            return self.handwritten.plan(node.op, self.runtime, shapes, dtypes, node.attrs, fixed=True)
        primitive, attrs = node_primitive(self.device, node)
        if primitive is None:
            raise InvalidArgumentError(f"{self.device}: node {node.name!r} (op {node.op!r}) has no OpenCL kernel. "
                                       f"Fix: leave it out of the subgraph (see supported_nodes)")
        return self._program_plan(primitive, [values[i] for i in node.inputs], attrs)

    def _program_plan(self, primitive, values, attrs) -> Plan:
        """A kernel-primitive program as a one-step plan, built for these shapes (codegen.Specialised: its sizes and
        strides constants); the returned outputs are the plan's, the rest scratch. Only that build is made (not the
        op's shape-generic program), so a deserialised subgraph compiles nothing."""
        inputs, program = primitive.program(values, attrs)
        shapes = program.output_shapes(inputs)
        dialect = self.device.codegen.dialect
        launch = program.bind(inputs, dialect)
        fixed = Specialised(**{f.name: getattr(dialect, f.name) for f in fields(dialect)},
                            constants=tuple(zip(program.scalar_arg_names(), map(int, launch.scalar_args))))
        source = program.source(fixed)
        returned = primitive.returned(program)
        outs = {p.name: (tuple(int(d) for d in shapes[p.name]), np.dtype(p.dtype)) for p in program.outputs}
        extra = [n for n in outs if n not in returned]
        plan = Plan([outs[n] for n in returned], temps=[outs[n] for n in extra])
        if launch.global_size and all(np.prod(s) for s, _ in plan.outputs + plan.temps):
            args = [("in", primitive.inputs.index(p.name)) for p in program.inputs]
            args += [("out", returned.index(n)) if n in returned else ("tmp", extra.index(n)) for n in outs]
            args += [np.int64(s) for s in launch.scalar_args]
            built = self.runtime.build(source, "", program.name)
            plan.steps.append(Step(built, program.name, (launch.global_size,), (dialect.schedule.local_size,), args,
                                   build_key(source)))
        return plan

    def compile(self, subgraph) -> "OpenCLExecutable":
        return OpenCLExecutable(self, subgraph)

    def target(self) -> dict:
        """What a compiled subgraph's binaries are for."""
        return self.device.codegen.cache_key()

    def deserialize(self, data: bytes) -> "OpenCLExecutable":
        target, graph, binaries = unpack_executable(data, FORMAT, self.device)
        if target != self.target():
            raise InvalidArgumentError(f"{self.device}: the subgraph was compiled for {target}, this is "
                                       f"{self.target()}. Fix: recompile it for this device")
        self.runtime.binaries.update(binaries)
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
        # Per run, precomputed: each input's (name, shape, dtype); each fresh buffer's (index, shape, dtype, bytes);
        # each output's place and the shape it is returned with, None when its buffer already has that shape.
        self._expect = [(n, tuple(graph.values[n].shape), np.dtype(graph.values[n].dtype)) for n in graph.inputs]
        self._fresh = [(j, tuple(map(int, s)), np.dtype(d), int(np.prod(s)) * np.dtype(d).itemsize)
                       for j, (s, d) in enumerate(self.buffers) if j in self.fresh]
        self._outs = []
        for name in graph.outputs:
            kind, i = self.where[name]
            shape = tuple(graph.values[name].shape)
            has = self._expect[i][1] if kind == "in" else tuple(map(int, self.buffers[i][0]))
            self._outs.append((kind, i, None if has == shape else shape))
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
        self.memory = self._share(device)
        self.launches, self.patches = [], []  # (kernel, global, local); (kernel, arg position, ("in", i) | ("buf", j))
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
                self.launches.append((k, step.global_size, step.local_size))
        self._handles = [_UNSET] * len(self.patches)  # what each patched argument was last set to
        self._bound = device

    def _share(self, device) -> dict:
        """A device array for every buffer allocated once, buffers whose lives (first to last node touching them)
        do not overlap sharing one: launches run in order on one queue, so a buffer no later node reads is free
        for the next value. Kernels only take the handle; a shared array is bytes at least as large as each."""
        life: dict = {}  # buffer index -> [first node, last node]
        for k, (node, plan, temps) in enumerate(zip(self.graph.nodes, self.plans, self.temps)):
            for step in plan.steps:
                for arg in step.args:
                    if isinstance(arg, tuple):
                        at = self._place(node, temps, arg)
                        if at[0] == "buf" and at[1] not in self.fresh:
                            span = life.setdefault(at[1], [k, k])
                            span[1] = k
        sizes = {j: (first, last, int(np.prod(self.buffers[j][0])) * np.dtype(self.buffers[j][1]).itemsize)
                 for j, (first, last) in life.items()}
        where, slots = share(sizes)
        arrays = [DeviceArray.empty(device, (n,), np.uint8) for n in slots]
        memory = {j: arrays[i] for j, i in where.items()}
        return memory

    def run(self, inputs: list) -> list:
        """Enqueue every launch back to back on the device's queue; returns the outputs (still being computed)."""
        if len(inputs) != len(self._expect):
            g = self.graph
            raise InvalidArgumentError(f"{self.backend.device}: subgraph takes {len(g.inputs)} inputs "
                                       f"({', '.join(g.inputs)}), got {len(inputs)}")
        for (name, shape, dtype), a in zip(self._expect, inputs):
            if a.shape != shape or a.dtype != dtype:
                raise InvalidArgumentError(f"{self.backend.device}: subgraph input {name!r} was compiled for {shape} "
                                           f"{dtype}, got {tuple(a.shape)} {a.dtype}. Fix: recompile for the new shape")
        device = inputs[0].device
        with self._lock:
            if self._bound is None:
                self._bind(device)
            fresh = {j: DeviceArray.lend(device, s, d, n) for j, s, d, n in self._fresh}
            handles = self._handles
            for p, (k, pos, (kind, i)) in enumerate(self.patches):
                h = inputs[i].handle if kind == "in" else fresh[i].handle
                if h is not handles[p]:  # a cl.Kernel keeps its arguments: inputs reused run to run are set once
                    k.set_arg(pos, h)
                    handles[p] = h
            launch = device.runtime.default_stream.launch
            for k, global_size, local_size in self.launches:
                launch(k, global_size, local_size)
        out = []
        for kind, i, shape in self._outs:
            a = inputs[i] if kind == "in" else fresh[i]
            out.append(a if shape is None else a.reshape(shape))
        return out

    def serialize(self) -> bytes:
        """The graph and the device binary of every program (no pickles, nothing to execute)."""
        binaries = {step.key: step.program.binaries[0] for plan in self.plans for step in plan.steps}
        return pack_executable(FORMAT, self.backend.target(), self.graph, binaries)
