"""The executor: a plan's steps in one loop over numbered slots; profiling is the same loop with a hook. Running a
plan changes nothing in it."""
from __future__ import annotations

import sys
import time

import numpy as np

from ..api.errors import HwAdapterError, InvalidArgumentError, KernelExecutionError
from ..dispatch import dispatcher
from ..dispatch.tensor import unwrap, wrap
from ..runtime.device import devices
from ..runtime.memory import to_device, transfer
from .segments import flat
from .steps import Run

_clock = time.perf_counter


def run(plan, inputs, device=None) -> list:
    """`plan`'s outputs for `inputs` (tensors or arrays, a list in graph input order or a dict by name), as tensors on
    `device` (default: the first input tensor's device, else the plan's first device)."""
    sched = plan.schedule
    if device is None:
        first = next((h for h in map(unwrap, inputs.values() if isinstance(inputs, dict) else inputs) if h), None)
        target = first[1] if first is not None else sched.default_device
    else:
        target = devices.get(device)
    staged = stage(plan.graph.inputs, sched, inputs)
    if dispatcher.profile_hook is None and plan.straight is not None:
        results = plan.straight(staged)  # the same steps as one generated function (graph/straight.py)
    else:
        results = execute(sched, staged, _reporter() if dispatcher.profile_hook is not None else None)
    return [wrap(transfer(data, home or target, target), target) for data, (_, home) in zip(results, sched.outputs)]


def stage(names, sched, inputs) -> list:
    """The inputs in graph order as the data of their home devices; InvalidArgumentError naming a bad one."""
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
    for x, (_, home, value) in zip(inputs, sched.inputs):
        held = unwrap(x)
        if held is not None:
            data = transfer(held[0], held[1], home)
        else:
            arr = np.asarray(x, dtype=value.dtype, order="C")  # not ascontiguousarray: it makes a 0-d array 1-d
            data = to_device(arr, home)
        if data.shape != value.shape or data.dtype != value.dtype:
            raise InvalidArgumentError(
                f"plan.run: input {value.name!r} is {data.dtype}{list(data.shape)}, the plan was made for "
                f"{value.dtype}{list(value.shape)}", fix="partition the graph again for these shapes and dtypes")
        out.append(data)
    return out


def execute(sched, staged, record=None) -> list:
    """Every step, back to back, each result checked as planned; the output data. `record(step, start, seconds)` is
    told about each step when given."""
    env = [None] * sched.slots
    for s, data in sched.constants.items():
        env[s] = data
    for (s, _, _), data in zip(sched.inputs, staged):
        env[s] = data
    st = None
    try:
        for st in sched.steps if record is None else flat(sched.steps):  # profiled: a segment's steps one by one
            if record is not None:
                start = _clock()
            args = [env[i] for i in st.ins]
            if st.into is not None:  # in place: the kernel writes over the input the memory plan chose
                out = st.call(*args, out=args[st.into], **st.attrs)
            else:
                out = st.call(*args, **st.attrs)
            for j, data in enumerate((out,) if st.run is Run.KERNEL else out):
                value = st.expect[j]
                if data.__class__ is not st.array or data.shape != value.shape or data.dtype != value.dtype:
                    data = judge(st, j, data)
                env[st.outs[j]] = data
            for s in st.drops:
                env[s] = None
            if record is not None:
                record(st, start, _clock() - start)
    except HwAdapterError as err:
        raise located(st, err)
    except Exception as err:
        raise failed(st, err) from err
    return [env[s] for s, _ in sched.outputs]


def located(st, err: HwAdapterError) -> HwAdapterError:
    """`err`, raised by step `st` (a kernel refusing its values, say), with the step named first: the graph node
    (an ONNX node's name for an imported model) is what the user can find, the kernel's op alone is not."""
    head = f"plan step {st.name!r}" if st is not None else ""
    if head and err.args and isinstance(err.args[0], str) and head not in err.args[0]:
        err.args = (f"{head} (op {st.op!r}) on {st.device}: {err.args[0]}",) + err.args[1:]
    return err


def judge(st, j: int, data):
    """A step result the inline check did not pass: a host kernel's numpy scalar becomes a 0-d array; anything else
    of the wrong shape, dtype or array type is a KernelExecutionError naming the step and the plugin."""
    value = st.expect[j]
    if isinstance(data, np.generic):
        data = np.asarray(data)
    if data.__class__ is not st.array or data.shape != value.shape or data.dtype != value.dtype:
        raise KernelExecutionError(f"plan step {st.name!r} (op {st.op!r}) on {st.device} returned "
                                   f"{type(data).__name__} {data.dtype}{list(data.shape)} for {value.name!r}, "
                                   f"expected {st.array.__name__} {value.dtype}{list(value.shape)}. This is a plugin "
                                   f"bug. Fix: report it to the vendor of the {st.device.type} plugin",
                                   fix="report it")
    return data


def failed(st, err) -> KernelExecutionError:
    """The error for a step whose kernel raised `err`: names the node, op and device."""
    return KernelExecutionError(f"plan step {st.name!r} (op {st.op!r}) failed on {st.device}: "
                                f"{type(err).__name__}: {err}. Fix: check the graph's shapes and attributes; if they "
                                f"are valid, report it to the vendor of the {st.device.type} plugin",
                                fix="report it to the plugin's vendor")


def _reporter():
    """What the loop tells about each step while profiling: hwadapter.profiler.record when the profiler has it (it
    is the one that set the hook), else the dispatcher's hook itself."""
    prof = sys.modules.get("hwadapter.profiler")  # never imported from here: the frontend sits above the graph
    record = getattr(prof, "record", None)
    if record is not None:
        def report(st, start, seconds):
            record(st.name, str(st.device), st.label, start, seconds, {"op": st.op, "node": st.name})
        return report
    hook = dispatcher.profile_hook

    def report(st, start, seconds):
        hook(st.op, st.device, (), _Route(st.label), seconds)
    return report


class _Route:
    """What the dispatcher's profile hook reads off a route: its name."""
    __slots__ = ("route", "fallback_device")

    def __init__(self, route):
        self.route, self.fallback_device = route, None
