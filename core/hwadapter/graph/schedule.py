"""A partitioned graph resolved into a Schedule once, when its plan is built: every kernel resolved, every subgraph
compiled (through the program cache), every constant uploaded and prepacked, every value given a slot and dropped
after its last reader."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..api.config import config
from ..api.errors import KernelExecutionError
from ..runtime.device import devices
from ..runtime.memory import DeviceArray, check_fits, to_device, transfer
from . import programs
from .segments import segmented
from .steps import Run, Schedule, Step


def extract(graph, names):
    """The nodes `names` as a graph for a subgraph backend: constants they read become inputs (after the others)."""
    sub = graph.subgraph(names)
    consts = getattr(sub, "constants", None) or {}
    if consts:
        sub.inputs = list(sub.inputs) + [k for k in consts if k not in sub.inputs]
        sub.constants = {}
    return sub


class _Slots:
    """Slot numbers of values (per device for constants, per step for prepacked ones) and the constant data."""

    def __init__(self, graph):
        self.graph, self.numbers, self.constants = graph, {}, {}
        self.consts = getattr(graph, "constants", None) or {}

    def __call__(self, key) -> int:
        return self.numbers.setdefault(key, len(self.numbers))

    def value(self, v: str, dev) -> int:
        """The slot of value `v` read on `dev`: a graph constant is uploaded there once."""
        if v not in self.consts:
            return self(v)
        s = self((v, str(dev)))
        if s not in self.constants:
            arr = np.asarray(self.consts[v], order="C")  # ascontiguousarray makes a 0-d constant 1-d
            self.constants[s] = to_device(arr, dev)
        return s

    def prepacked(self, node, dev, fn, ins: tuple) -> tuple:
        """`ins` with each constant the kernel prepares once (`fn.prepack`: input position -> packer(data, input
        shapes, **attrs) -> what the kernel takes there, or None) in a slot of its own."""
        out = list(ins)
        shapes = tuple(self.graph.values[i].shape for i in node.inputs)
        for j, packer in fn.prepack.items():
            if j >= len(node.inputs) or node.inputs[j] not in self.consts:
                continue
            try:
                packed = packer(self.constants[ins[j]], shapes, **node.attrs)
            except Exception as err:
                raise KernelExecutionError(
                    f"plan step {node.name!r} (op {node.op!r}) on {dev}: the kernel's prepack of input {j} failed: "
                    f"{type(err).__name__}: {err}. This is a plugin bug. Fix: report it to the vendor of the "
                    f"{dev.type} plugin", fix="report it") from err
            if packed is not None:
                out[j] = self((node.inputs[j], str(dev), node.name))
                self.constants[out[j]] = packed
        return tuple(out)



def _copy_call(src, dst):
    """A cross-device copy: the source's stream is waited for through an event, then the data moves."""
    if src.host_memory:
        return lambda data: [transfer(data, src, dst)]
    runtime = src.runtime

    def call(data):
        event = runtime.create_event()
        event.record(runtime.default_stream)
        event.synchronize()
        return [transfer(data, src, dst)]
    return call


def _listed(fn):
    """A kernel returning a tuple or list of arrays as a step call returning a list."""
    def call(*arrays, **attrs):
        return list(fn(*arrays, **attrs))
    return call


def _subgraph_call(exe):
    """A compiled subgraph's run as a step call."""
    def call(*arrays):
        return exe.run(list(arrays))
    return call


def _label(fn, run: Run, how: str) -> str:
    """What the profiler says ran a step: "fused (numpy)", "fused", "fallback to cpu:0", or its route or how."""
    if run is Run.HOST_CHAIN:
        return "fused (numpy)"
    if run is Run.PROGRAM:
        return "fused"
    fb = getattr(fn, "fallback_device", None)
    return f"fallback to {fb}" if fb is not None else getattr(fn, "route", how or "kernel")


def schedule(plan, where: dict, resolved: dict) -> Schedule:
    """`plan`'s steps: `where` (node -> Device), `resolved` (node -> (kernel, Run), from resolve.kernels), the
    in-place writes of plan.memory; subgraphs compiled and constants uploaded here, once."""
    graph = plan.graph
    slots = _Slots(graph)
    homes = {v: where[n.name] for n in graph.nodes for v in n.outputs}
    for v, d in plan.input_devices.items():
        homes.setdefault(v, _device_of(d))
    first = _device_of(plan.devices[0]) if plan.devices else None
    inputs = tuple((slots(v), homes.get(v) or first, graph.values[v]) for v in graph.inputs)
    in_subgraph = {name: sg for sg in plan.subgraphs for name in sg.nodes}
    steps, done = [], set()
    for n in graph.nodes:
        if n.name in done:
            continue
        dev = where[n.name]
        sg = in_subgraph.get(n.name)
        if sg is not None:
            done.update(sg.nodes)
            steps.append(_subgraph_step(graph, sg, dev, slots))
        elif n.op == "copy":
            src = homes[n.inputs[0]]
            steps.append(_step(n, dev, Run.COPY, f"copy from {src}", _copy_call(src, dev), graph,
                               (slots(n.inputs[0]),), slots))
        else:
            steps.append(_node_step(plan, n, dev, resolved[n.name], slots))
    for o in graph.outputs:  # an output the passes folded into a constant: handed out from the host copy
        if o not in slots.numbers and o in slots.consts:
            slots.constants[slots(o)] = np.asarray(slots.consts[o], order="C")
            homes[o] = _device_of(None)  # the fallback device: host memory, so its data is numpy
    outputs = tuple((slots.numbers[o], homes.get(o)) for o in graph.outputs)
    values = {s: graph.values[key if isinstance(key, str) else key[0]] for key, s in slots.numbers.items()}
    steps = segmented(steps, values, slots.constants, {s for s, _ in outputs})
    return Schedule(tuple(_with_drops(steps, {s for s, _ in outputs}, slots.constants)), len(slots.numbers),
                    dict(slots.constants), inputs, outputs, first)


def _device_of(name):
    """The Device named `name` (None: the fallback device)."""
    return devices.get(name if name is not None else config.fallback_device)


def _fitting(name: str, op: str, values, dev) -> tuple:
    """`values`, each refused (OutOfMemoryError naming the step, the size and the device's memory) when it is larger
    than `dev`'s memory: shapes are known before anything runs, so a plan that cannot run is not built."""
    for v in values:
        check_fits(f"plan step {name!r} (op {op!r}) on {dev}", v.shape, v.dtype, dev, what=f"its output {v.name!r}")
    return tuple(values)


def _step(node, dev, run, label, call, graph, ins, slots, attrs=None, into=None) -> Step:
    return Step(node.name, node.op, dev, run, label, call, ins, tuple(slots(o) for o in node.outputs),
                _fitting(node.name, node.op, [graph.values[o] for o in node.outputs], dev),
                np.ndarray if dev.host_memory else DeviceArray, attrs or {}, into)


def _subgraph_step(graph, sg, dev, slots) -> Step:
    sub = extract(graph, sg.nodes)
    expect = _fitting(sg.name, "subgraph", [graph.values[o] for o in sub.outputs], dev)  # before compiling it
    exe = programs.compile_subgraph(dev, sub)
    return Step(sg.name, "subgraph", dev, Run.SUBGRAPH, "subgraph", _subgraph_call(exe),
                tuple(slots.value(v, dev) for v in sub.inputs), tuple(slots(o) for o in sub.outputs), expect,
                np.ndarray if dev.host_memory else DeviceArray)


def _node_step(plan, n, dev, resolved, slots) -> Step:
    fn, run = resolved
    graph = plan.graph
    ins = tuple(slots.value(v, dev) for v in n.inputs)
    over = plan.memory.inplace.get(n.outputs[0]) if len(n.outputs) == 1 else None
    into = None if over is None else n.inputs.index(over)
    label = _label(fn, run, plan.how.get(n.name))
    if run is Run.KERNEL:
        if getattr(fn, "prepack", None):
            ins = slots.prepacked(n, dev, fn, ins)
        return _step(n, dev, run, label, fn, graph, ins, slots, dict(n.attrs), into)
    if run is Run.KERNELS:
        return _step(n, dev, run, label, _listed(fn), graph, ins, slots, dict(n.attrs))
    return _step(n, dev, run, label, fn, graph, ins, slots, into=into)  # a fused node: its own program or chain


def _with_drops(steps: list, keep: set, constants: dict) -> list:
    """`steps`, each with the slots read for the last time there (neither kept outputs nor constants) to drop."""
    last = {}
    for k, st in enumerate(steps):
        for s in st.ins:
            last[s] = k
    drops = [[] for _ in steps]
    for s, k in last.items():
        if s not in keep and s not in constants:
            drops[k].append(s)
    return [dataclasses.replace(st, drops=tuple(d)) for st, d in zip(steps, drops)]
