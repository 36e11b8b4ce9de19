"""Control-flow steps: a cond or while_loop node (api/control.py) runs its branches or body as plans of their own,
partitioned over the plan's devices (so a subgraph backend may claim a whole body), built once with the plan. The
step reads its predicate back to the host (one small copy, shown in the profile) and runs the plan it picks."""
from __future__ import annotations

import time

import numpy as np

from ..api.config import config
from ..api.control import graphs_of
from ..api.errors import LoopLimitError
from ..dispatch import dispatcher
from ..runtime.memory import transfer
from . import executor


class Body:
    """One branch or body as a plan: called with arrays on the control step's device, it gives its results there
    (which may be its inputs or its constants: the outer plan treats them as opaque, never written over)."""

    def __init__(self, plan, device):
        self.plan, self.device = plan, device
        sched = plan.schedule
        self.homes = [home for _, home, _ in sched.inputs]
        self.places = [home or sched.default_device for _, home in sched.outputs]

    def __call__(self, arrays, record=None) -> list:
        staged = [transfer(a, self.device, home) for a, home in zip(arrays, self.homes)]
        if record is None and self.plan.straight is not None:
            results = self.plan.straight(staged)
        else:
            results = executor.execute(self.plan.schedule, staged, record)
        return [transfer(r, place, self.device) for r, place in zip(results, self.places)]


class _Read:
    """What the profiler is told about a predicate read back to the host."""
    __slots__ = ("name", "device", "label", "op")

    def __init__(self, name, device):
        self.name, self.device, self.label, self.op = f"{name}:predicate", device, "predicate to host", "read"


def _reporter():
    return executor._reporter() if dispatcher.profile_hook is not None else None


def _truth(data, read, record) -> bool:
    """The predicate's one element as a Python bool (a device's is copied to the host first)."""
    start = time.perf_counter() if record is not None else 0.0
    host = data if isinstance(data, np.ndarray) else data.numpy()
    if record is not None:
        record(read, start, time.perf_counter() - start)
    return bool(host.reshape(-1)[0])


class Cond:
    """cond(pred, *operands): the `then` plan or the `else` plan on the operands."""

    route = "control"

    def __init__(self, node, device, plans: dict):
        self.name, self.device = node.name, device
        self.then, self.orelse = Body(plans["then"], device), Body(plans["else"], device)
        self.read = _Read(node.name, device)

    def __call__(self, pred, *operands) -> list:
        record = _reporter()
        taken = self.then if _truth(pred, self.read, record) else self.orelse
        return taken(operands, record)


class WhileLoop:
    """while_loop(*carried, *operands): the body plan while the cond plan says so, at most max_iters times."""

    route = "control"

    def __init__(self, node, device, plans: dict):
        self.name, self.device = node.name, device
        self.test, self.body = Body(plans["cond"], device), Body(plans["body"], device)
        self.carried, self.limit = node.attrs["carried"], node.attrs.get("max_iters")
        self.source = node.attrs.get("source")
        self.read = _Read(node.name, device)

    def __call__(self, *arrays) -> list:
        record = _reporter()
        k, limit = self.carried, limit_of(self.limit)
        carried, operands = list(arrays[:k]), list(arrays[k:])
        done = 0
        while _truth(self.test(carried + operands, record)[0], self.read, record):
            if done == limit:
                raise stopped(self.name, self.source, self.device, self.limit)
            carried = self.body(carried + operands, record)
            done += 1
        return carried


def limit_of(max_iters) -> int:
    """The iterations a loop may run: its own max_iters, else the configured limit (read at each run)."""
    return config.max_loop_iters if max_iters is None else max_iters


def stopped(name: str, source, device, max_iters) -> LoopLimitError:
    """The error of while_loop `name` (made at `source`, the user's line) still going at its limit."""
    where = f" (the loop at {source})" if source else ""
    own = max_iters is not None
    fix = ("make the loop's condition turn false; if it needs more iterations, raise the limit: "
           + ("its max_iters" if own else "hw.configure(max_loop_iters=N) or HWADAPTER_MAX_LOOP_ITERS=N"))
    return LoopLimitError(f"while_loop {name!r}{where} on {device}: its condition still held after "
                          f"{limit_of(max_iters)} iterations, the {'loop' if own else 'configured'} limit. Fix: {fix}",
                          fix=fix)


STEPS = {"cond": Cond, "while_loop": WhileLoop}


def step_call(node, device, nested):
    """The step call of control node `node` on `device`: its branches or body planned by `nested` (graph -> Plan)."""
    return STEPS[node.op](node, device, {key: nested(sub) for key, sub in graphs_of(node)})
