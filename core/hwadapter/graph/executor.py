"""Executors: the reference one (node by node through eager dispatch: the oracle) and the compiled one, which runs a
Plan as steps resolved once: bound kernel routes, compiled subgraph programs and copies, values dropped at last use;
after its first run, as one generated Python function of those steps."""
from __future__ import annotations

import sys
import time

import numpy as np

from ..config import config
from ..dispatch import dispatcher
from ..dispatch.dispatcher import dispatch, transfer
from ..errors import HwAdapterError, InvalidArgumentError, KernelExecutionError
from ..ops import meta
from ..runtime.device import devices
from ..runtime.memory import DeviceArray
from ..tensor import Tensor, _make, to_tensor
from .inplace import opaque, step_kernel, takes_out
from .memory import plan_memory
from .passes import run_fused

_clock = time.perf_counter


def run(graph, inputs: dict, device="cpu") -> dict:
    """Run `graph` on `device` with inputs by name (Tensors or array-likes); its outputs by name, as Tensors."""
    env = {k: v if isinstance(v, Tensor) else to_tensor(v, device=device) for k, v in inputs.items()}
    for k, arr in (getattr(graph, "constants", None) or {}).items():
        env.setdefault(k, to_tensor(arr, device=device))
    for n in graph.nodes:
        ins = tuple(env[i] for i in n.inputs)
        out = run_fused(n, ins) if n.op == "fused" else dispatch(n.op, ins, n.attrs)
        env.update(zip(n.outputs, out if isinstance(out, (tuple, list)) else (out,)))
    return {o: env[o] for o in graph.outputs}



def extract(graph, names):
    """The nodes `names` as a graph for a subgraph backend: constants they read become inputs (after the others)."""
    sub = graph.subgraph(names)
    consts = getattr(sub, "constants", None) or {}
    if consts:
        sub.inputs = list(sub.inputs) + [k for k in consts if k not in sub.inputs]
        sub.constants = {}
    return sub


class _Step:
    """One resolved piece of the plan: `call(*arrays) -> list of arrays`, where its inputs and outputs live (slots),
    the slots that die after it, and what the profiler is told."""
    __slots__ = ("call", "ins", "outs", "drops", "name", "op", "device", "route", "shapes", "attrs", "single", "into")

    def __init__(self, call, ins, outs, name, op, device, route, shapes, attrs=None, single=False, into=None):
        self.call, self.ins, self.outs, self.drops = call, ins, outs, ()
        self.name, self.op, self.device, self.route, self.shapes = name, op, device, route, shapes
        #: single: `call` is a kernel route taking `attrs` and returning its one output (not a list)
        self.attrs, self.single = attrs, single
        #: into: for a single kernel run in place, which of `ins` it is given as `out=` (the memory plan chose it)
        self.into = into

    def fast(self) -> tuple:
        """What the run loop unpacks: (call, attrs, ins, outs, single, (shape, dtype) or None, array class, drops,
        into)."""
        v = self.shapes[0] if self.single else None
        cls = np.ndarray if self.device.host_memory else DeviceArray
        return (self.call, self.attrs, self.ins, self.outs, self.single, v and (v.shape, v.dtype), cls, self.drops,
                self.into)


def _kernel_call(fn, attrs):
    """A multi-output kernel route as a step call returning a list."""
    def call(*a):
        return list(fn(*a, **attrs))
    return call


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


class CompiledExecutor:
    """A Plan resolved into steps: every route looked up, every subgraph compiled (through the program cache) and every
    constant uploaded here, once; `run` then only calls the steps and drops each value after its last use."""

    def __init__(self, plan):
        from . import programs  # lazy: only plans with subgraphs compile
        self.plan, self.graph = plan, plan.graph
        graph = plan.graph
        consts = getattr(graph, "constants", None) or {}
        where = {n: devices.get(d) for n, d in plan.assignment.items()}
        homes = {v: devices.get(d) for v, d in getattr(plan, "input_devices", {}).items()}
        for n in graph.nodes:
            for o in n.outputs:
                homes[o] = where[n.name]
        slots: dict = {}

        def slot(key):
            if key not in slots:
                slots[key] = len(slots)
            return slots[key]

        self.preset = {}  # slot -> constant data uploaded to the device that reads it

        def value_slot(v, dev):
            if v in consts:
                s = slot((v, str(dev)))
                if s not in self.preset:
                    arr = np.asarray(consts[v], order="C")  # ascontiguousarray makes a 0-d constant 1-d
                    self.preset[s] = arr if dev.host_memory else to_tensor(arr, device=dev)._data
                return s
            return slot(v)

        def prepacked(n, dev, fn, ins):
            """The step's inputs with each plan constant its kernel prepares once (`fn.prepack`: input position ->
            packer(data, input shapes, **attrs) -> what the kernel takes there, or None) in a slot of its own."""
            out = list(ins)
            for j, packer in fn.prepack.items():
                v = n.inputs[j] if j < len(n.inputs) else None
                if v not in consts:
                    continue
                try:
                    packed = packer(self.preset[ins[j]], tuple(graph.values[i].shape for i in n.inputs), **n.attrs)
                except Exception as err:
                    raise KernelExecutionError(
                        f"plan step {n.name!r} (op {n.op!r}) on {dev}: the kernel's prepack of input {j} failed: "
                        f"{type(err).__name__}: {err}. This is a plugin bug. Fix: report it to the vendor of the "
                        f"{dev.type} plugin", fix="report it") from err
                if packed is not None:
                    out[j] = slot((v, str(dev), n.name))
                    self.preset[out[j]] = packed
            return tuple(out)

        self.inputs = [(slot(v), homes.get(v) or devices.get(plan.devices[0]), graph.values[v]) for v in graph.inputs]
        in_subgraph = {name: sg for sg in plan.subgraphs for name in sg.nodes}
        steps, done = [], set()
        inplace, kept, lost = plan.memory.inplace, set(), False  # in-place steps: output -> the input written over
        for n in graph.nodes:
            if n.name in done:
                continue
            dev = where[n.name]
            sg = in_subgraph.get(n.name)
            if sg is not None:
                sub = extract(graph, sg.nodes)
                exe = programs.compile_subgraph(dev, sub)
                ins = tuple(value_slot(v, dev) for v in sub.inputs)
                outs = tuple(slot(o) for o in sub.outputs)
                steps.append(_Step(_list_call(exe), ins, outs, sg.name, "subgraph", dev, "subgraph",
                                   [graph.values[o] for o in sub.outputs]))
                done.update(sg.nodes)
                continue
            ins = tuple(value_slot(v, dev) for v in n.inputs)
            outs = tuple(slot(o) for o in n.outputs)
            if n.op == "copy":
                src = homes[n.inputs[0]]
                steps.append(_Step(_copy_call(src, dev), ins, outs, n.name, "copy", dev, f"copy from {src}",
                                   [graph.values[o] for o in n.outputs]))
                continue
            fn, how = step_kernel(dev, n, graph.values)  # the kernel the memory plan's in-place choice assumed
            over = inplace.get(n.outputs[0]) if len(n.outputs) == 1 else None
            if over is not None:
                if how != "fused (numpy)" and takes_out(fn, dev):
                    kept.add(n.name)
                else:  # its kernel changed since the plan was made (routes forgotten): run it out of place
                    over = None
                    lost = True
            into = None if over is None else n.inputs.index(over)
            if n.op == "fused":  # a fuse pass's node: its own program on dev, not an op of the op set
                call = fn if how == "fused (numpy)" else _fused_call(fn, into)
                steps.append(_Step(call, ins, outs, n.name, n.op, dev, how, [graph.values[o] for o in n.outputs]))
                continue
            fb = getattr(fn, "fallback_device", None)
            how = f"fallback to {fb}" if fb is not None else getattr(fn, "route", plan.how.get(n.name, "kernel"))
            if len(n.outputs) == 1 and n.op not in meta.MULTI_OUTPUT:  # split into one piece is still a list
                if getattr(fn, "prepack", None):
                    ins = prepacked(n, dev, fn, ins)
                steps.append(_Step(fn, ins, outs, n.name, n.op, dev, how, [graph.values[n.outputs[0]]],
                                   attrs=dict(n.attrs) or None, single=True, into=into))
            else:
                steps.append(_Step(_kernel_call(fn, dict(n.attrs)), ins, outs, n.name, n.op, dev, how,
                                   [graph.values[o] for o in n.outputs]))
        if lost:  # the plan says what runs: planned again with the in-place steps that really are
            plan.memory = plan_memory(graph, writers=kept, opaque=opaque(graph, plan.subgraphs))
        for o in graph.outputs:  # an output the passes folded into a constant: handed out from the host copy
            if o not in slots and o in consts:
                s = slot(o)
                self.preset[s] = np.asarray(consts[o], order="C")
                homes[o] = devices.get(config.fallback_device)  # a host-memory device: its data is numpy
        keep = {slots[o] for o in graph.outputs}
        last = {}
        for k, st in enumerate(steps):
            for s in st.ins:
                last[s] = k
        drops = [[] for _ in steps]
        for s, k in last.items():
            if s not in keep and s not in self.preset:
                drops[k].append(s)
        for st, d in zip(steps, drops):
            st.drops = tuple(d)
        self.steps, self.n_slots = steps, len(slots)
        self._fast = [st.fast() for st in steps]
        self.outputs = [(slots[o], homes.get(o)) for o in graph.outputs]
        self.default_device = devices.get(plan.devices[0]) if plan.devices else None
        self._code = None  # (generated function, its file name, line -> step), made after the first checked run
        self.source = None  # the generated function's text, for reading

    def _stage(self, inputs) -> list:
        """The inputs in graph order as the data of their home devices; InvalidArgumentError naming a bad one."""
        names = self.graph.inputs
        if isinstance(inputs, dict):
            missing = [n for n in names if n not in inputs]
            if missing:
                raise InvalidArgumentError(f"plan.run: missing inputs {missing}; the graph takes {list(names)}",
                                           fix="pass every graph input by name")
            inputs = [inputs[n] for n in names]
        if len(inputs) != len(names):
            raise InvalidArgumentError(f"plan.run: the graph takes {len(names)} inputs ({', '.join(names)}), got "
                                       f"{len(inputs)}", fix="pass one tensor per graph input, in order")
        out = []
        for x, (s, home, value) in zip(inputs, self.inputs):
            if x.__class__ is Tensor and x._device is home:  # the usual case: nothing to move
                data = x._data
            elif isinstance(x, Tensor):
                data = transfer(x._data, x._device, home)
            else:
                data = to_tensor(np.asarray(x, dtype=value.dtype), device=home)._data
            if data.shape != value.shape or data.dtype != value.dtype:
                raise InvalidArgumentError(
                    f"plan.run: input {value.name!r} is {data.dtype}{list(data.shape)}, the plan was made for "
                    f"{value.dtype}{list(value.shape)}", fix="partition the graph again for these shapes and dtypes")
            out.append(data)
        return out

    def run(self, inputs, device=None) -> list:
        """The plan's outputs for `inputs`, as Tensors on `device` (default: the first input Tensor's device)."""
        if device is None:
            first = next((x for x in (inputs.values() if isinstance(inputs, dict) else inputs)
                          if isinstance(x, Tensor)), None)
            target = first._device if first is not None else self.default_device
        else:
            target = devices.get(device)
        staged = self._stage(inputs)
        if dispatcher.profile_hook is None and self._code is not None:
            results = self._generated(staged)
        else:
            env = [None] * self.n_slots
            for s, data in self.preset.items():
                env[s] = data
            for (s, _, _), data in zip(self.inputs, staged):
                env[s] = data
            if dispatcher.profile_hook is None:
                self._loop(env)
                self._code = self._generate()  # after one run of the loop: the plan is known to work
            else:
                self._profiled(env)
            results = [env[s] for s, _ in self.outputs]
        outs = []
        for data, (_, home) in zip(results, self.outputs):
            src = home or target
            outs.append(_make(transfer(data, src, target) if src is not target else data, target))
        return outs

    def replace(self, name: str, call) -> None:
        """Run step `name` with `call` from now on (how tests inject a faulty kernel); the generated function had the
        old one bound, so it is dropped and the next run is the checked loop."""
        k = [st.name for st in self.steps].index(name)
        self.steps[k].call, self.steps[k].into = call, None  # a stand-in takes no `out=`
        self._fast[k] = self.steps[k].fast()
        self._code = None

    def _generate(self):
        """The plan as one straight-line Python function of the staged inputs (what torch.fx does): kernels and
        constants are its globals, each value a local deleted after its last reader; each result gets the run loop's
        inline check (a miss goes to `_judge`). Returns (function, its file name, line -> step index)."""
        names = {"_judge": self._judge}
        for s, data in self.preset.items():
            names[f"v{s}"] = data
        lines = ["def plan(staged):"]  # the list is emptied, so that a staged input dies at its last reader too
        if self.inputs:
            lines.append(f"    {''.join(f'v{s}, ' for s, _, _ in self.inputs)}= staged")
        lines.append("    staged.clear()")
        where = {}
        for k, (st, (call, attrs, ins, outs, single, _, _, drops, into)) in enumerate(zip(self.steps, self._fast)):
            names[f"k{k}"], names[f"s{k}"] = call, st
            args = ", ".join(f"v{i}" for i in ins)
            if into is not None:  # in place: written over the input the memory plan chose
                args += f", out=v{ins[into]}"
            if single and attrs:
                names[f"a{k}"] = attrs
                args += (", " if args else "") + f"**a{k}"
            target = f"v{outs[0]}" if single else "".join(f"v{o}, " for o in outs)
            inline = getattr(call, "inline", None)
            if inline is not None:  # a host chain: its numpy calls written out
                start = len(lines)
                lines += _inline(k, inline, ins, outs, names)
                where.update(dict.fromkeys(range(start + 1, len(lines) + 1), k))
            else:
                where[len(lines) + 1] = k
                lines.append(f"    {target} = k{k}({args})" if target else f"    k{k}({args})")  # no outputs: a call
            for j, o in enumerate(outs):  # the run loop's inline check: class, shape and dtype as planned
                v = st.shapes[j]
                names[f"S{k}_{j}"], names[f"D{k}_{j}"] = v.shape, v.dtype
                where[len(lines) + 1] = where[len(lines) + 2] = k
                lines.append(f"    if v{o}.__class__ is not C{k} or v{o}.shape != S{k}_{j} or v{o}.dtype != D{k}_{j}:")
                lines.append(f"        v{o} = _judge(s{k}, {j}, v{o})")
            names[f"C{k}"] = np.ndarray if st.device.host_memory else DeviceArray
            if drops:
                lines.append(f"    del {', '.join(f'v{d}' for d in drops)}")
        lines.append(f"    return ({''.join(f'v{s}, ' for s, _ in self.outputs)})")
        filename = f"<hwadapter plan {id(self):x}>"
        scope: dict = {}
        exec(compile("\n".join(lines) + "\n", filename, "exec"), names, scope)  # our own text, no user input
        self.source = "\n".join(lines)
        return scope["plan"], filename, where

    def _generated(self, staged) -> list:
        """The generated function on the staged inputs; a failing step is a KernelExecutionError naming it."""
        fn, filename, where = self._code
        try:
            return fn(staged)
        except HwAdapterError:
            raise
        except Exception as err:
            tb, k = err.__traceback__, 0
            while tb is not None:  # the generated function's frame says which line, hence which step, failed
                if tb.tb_frame.f_code.co_filename == filename:
                    k = where.get(tb.tb_lineno, 0)
                tb = tb.tb_next
            raise _failed(self.steps[k], err) from err

    def _loop(self, env, record=None) -> None:
        """Every step, back to back (one call, one inline check per step): the first run, before the plan is generated
        as one function, and profiled runs; `record(step, start, seconds)` is told about each when given."""
        k = 0
        try:
            for k, (call, attrs, ins, outs, single, expect, cls, drops, into) in enumerate(self._fast):
                if record is not None:
                    start = _clock()
                if into is not None:  # in place: the kernel writes over the input the memory plan chose
                    data = call(*[env[i] for i in ins], out=env[ins[into]], **(attrs or {}))
                    if data.__class__ is not cls or data.shape != expect[0] or data.dtype != expect[1]:
                        data = self._judge(self.steps[k], 0, data)
                    env[outs[0]] = data
                elif single:
                    data = call(*[env[i] for i in ins], **attrs) if attrs else call(*[env[i] for i in ins])
                    if data.__class__ is not cls or data.shape != expect[0] or data.dtype != expect[1]:
                        data = self._judge(self.steps[k], 0, data)
                    env[outs[0]] = data
                else:
                    for j, data in enumerate(call(*[env[i] for i in ins])):
                        value = self.steps[k].shapes[j]
                        if data.shape != value.shape or data.dtype != value.dtype:
                            data = self._judge(self.steps[k], j, data)
                        env[outs[j]] = data
                for s in drops:
                    env[s] = None
                if record is not None:
                    record(self.steps[k], start, _clock() - start)
        except HwAdapterError:
            raise
        except Exception as err:
            raise _failed(self.steps[k], err) from err

    @staticmethod
    def _judge(st, j: int, data):
        """A step result the inline check did not pass: a host kernel's numpy scalar becomes a 0-d array; anything
        else of the wrong shape, dtype or array type is a KernelExecutionError naming the step and the plugin."""
        value = st.shapes[j]
        if isinstance(data, np.generic):
            data = np.asarray(data)
        cls = np.ndarray if st.device.host_memory else DeviceArray
        if data.__class__ is not cls or data.shape != value.shape or data.dtype != value.dtype:
            raise KernelExecutionError(f"plan step {st.name!r} (op {st.op!r}) on {st.device} returned "
                                       f"{type(data).__name__} {data.dtype}{list(data.shape)} for {value.name!r}, "
                                       f"expected {cls.__name__} {value.dtype}{list(value.shape)}. This is a plugin "
                                       f"bug. Fix: report it to the vendor of the {st.device.type} plugin",
                                       fix="report it")
        return data

    def _profiled(self, env) -> None:
        """Run the steps, reporting each (node, device, route, seconds) to the active profiler: through
        hwadapter.profiler.record when the profiler has it (it is the one that set the hook), else the hook itself."""
        prof = sys.modules.get("hwadapter.profiler")  # never imported from here: the frontend sits above the graph
        record = getattr(prof, "record", None)
        hook = dispatcher.profile_hook
        if record is not None:
            def report(st, start, seconds):
                record(st.name, str(st.device), st.route, start, seconds, {"op": st.op, "node": st.name})
        else:
            def report(st, start, seconds):
                hook(st.op, st.device, (), _Route(st.route), seconds)
        self._loop(env, report)


def _inline(k: int, chain, ins, outs, names: dict) -> list:
    """Lines computing a host chain (see hostchain.py) for step `k`: kernels and literals become globals in `names`,
    intermediates are locals deleted after their last reader."""
    inputs, ops, outputs = chain
    local = {n: f"v{s}" for n, s in zip(inputs, ins)}
    last = {}
    for j, (_, operands, _, _, _) in enumerate(ops):
        for n in operands:
            if n is not None:
                last[n] = j
    lines = []
    for j, (kernel, operands, lits, result, kw) in enumerate(ops):
        names[f"k{k}_{j}"] = kernel
        args = []
        for m, n in enumerate(operands):
            if n is None:
                names[f"l{k}_{j}_{m}"] = lits[m]
                args.append(f"l{k}_{j}_{m}")
            else:
                args.append(local[n])
        if kw:
            names[f"a{k}_{j}"] = kw
            args.append(f"**a{k}_{j}")
        local[result] = f"t{k}_{j}"
        lines.append(f"    t{k}_{j} = k{k}_{j}({', '.join(args)})")
        dead = [f"t{k}_{i}" for i, (_, _, _, r, _) in enumerate(ops) if last.get(r) == j and r not in outputs]
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    lines.append(f"    {''.join(f'v{o}, ' for o in outs)}= {''.join(local[n] + ', ' for n in outputs)}")
    return lines


def _failed(st, err) -> KernelExecutionError:
    """The error for a step whose kernel raised `err`: names the node, op and device."""
    return KernelExecutionError(f"plan step {st.name!r} (op {st.op!r}) failed on {st.device}: "
                                f"{type(err).__name__}: {err}. Fix: check the graph's shapes and attributes; if they "
                                f"are valid, report it to the vendor of the {st.device.type} plugin",
                                fix="report it to the plugin's vendor")


class _Route:
    """What the dispatcher's profile hook reads off a route: its name."""
    __slots__ = ("route", "fallback_device")

    def __init__(self, route):
        self.route, self.fallback_device = route, None


def _fused_call(fn, into=None):
    """A fused node's kernel (arrays -> list of arrays) as a step call; `into`: the input it writes its one output
    over (`out=`), or None."""
    if into is not None:
        def call(*arrays):
            return fn(*arrays, out=arrays[into])
        return call

    def call(*arrays):
        return list(fn(*arrays))
    return call


def _list_call(exe):
    """A compiled subgraph's run as a step call."""
    def call(*arrays):
        return exe.run(list(arrays))
    return call
