"""Segments: runs of a plan's kernel steps that one device executes as one call, with no Python between its kernels.

A kernel may say, once, how its step runs without Python: `fn.lower(inputs, outputs, attrs, constants)` (inputs and
outputs: (shape, dtype) pairs; constants: input position -> the data or prepacked object of a constant input) returns
an object with a `runner`, or None. Consecutive steps on one device whose lowerings share a runner become one step:
`runner.build(items, buffers, inputs, outputs)` makes its call, where `buffers` are the (shape, dtype) of every value
the run touches, each item is (lowering, its inputs' buffers (None: a constant it holds), its outputs' buffers, the
step's name), and
`inputs`/`outputs` are the buffers the call takes and returns, in order. The plugin's runner decides where its values
live. Profiling runs a segment's steps one by one (`flat`), so the profiler still sees every op. HWADAPTER_SEGMENTS=0
turns segments off.
"""
from __future__ import annotations

import logging
import os

from ..api.errors import InvalidArgumentError
from .steps import Run, Step

log = logging.getLogger(__name__)


def enabled() -> bool:
    """HWADAPTER_SEGMENTS: 1 (default) or 0; InvalidArgumentError for anything else."""
    text = os.environ.get("HWADAPTER_SEGMENTS", "1")
    if text not in ("0", "1"):
        raise InvalidArgumentError(f"HWADAPTER_SEGMENTS={text!r} is neither 0 nor 1",
                                   fix="unset it (default 1: segments on) or set it to 0")
    return text == "1"


class Segment:
    """A segment step's call: the runner's call, and the steps it stands for (`parts`, run one by one when
    profiling)."""
    __slots__ = ("call", "parts")

    def __init__(self, call, parts: tuple):
        self.call, self.parts = call, parts

    def __call__(self, *arrays):
        return self.call(*arrays)


def flat(steps):
    """`steps` with every segment replaced by the steps it stands for."""
    for st in steps:
        if st.run is Run.SEGMENT:
            yield from st.call.parts
        else:
            yield st


def segmented(steps: list, values: dict, constants: dict, keep: set) -> list:
    """`steps` with each run of two or more lowerable kernel steps of one device made one segment step. `values`: slot
    -> its Value (shape, dtype) for every slot a step reads or writes; `constants`: slot -> constant data; `keep`: the
    slots the plan outputs."""
    if not enabled():
        return steps
    lowered = [_lowered(st, values, constants) for st in steps]
    runs, k = [], 0
    while k < len(steps):
        j = k + 1
        if lowered[k] is not None:
            while j < len(steps) and lowered[j] is not None and lowered[j].runner is lowered[k].runner and \
                    steps[j].device is steps[k].device:
                j += 1
        runs.append((k, j))
        k = j
    last = {}  # slot -> the index of the last step reading it
    for k, st in enumerate(steps):
        for s in st.ins:
            last[s] = k
    out = []
    for a, z in runs:
        if z - a < 2:
            out.extend(steps[a:z])
            continue
        later = {s for s, k in last.items() if k >= z} | keep  # read after the run, or handed out
        seg = _segment(steps[a:z], lowered[a:z], values, constants, later)
        out.extend(steps[a:z] if seg is None else [seg])
    return out


def _lowered(st, values: dict, constants: dict):
    """The lowering of kernel step `st`, or None."""
    lower = getattr(st.call, "lower", None) if st.run in (Run.KERNEL, Run.PROGRAM) and st.device.host_memory \
        else None
    if lower is None:
        return None
    ins = [(values[s].shape, values[s].dtype) for s in st.ins]
    outs = [(v.shape, v.dtype) for v in st.expect]
    consts = {j: constants[s] for j, s in enumerate(st.ins) if s in constants}
    try:
        return lower(ins, outs, st.attrs, consts)
    except Exception as err:  # noqa: BLE001 - the step runs through its kernel as before
        log.debug("plan step %r: its kernel's lower() failed (%s: %s); it runs alone", st.name, type(err).__name__,
                  err)
        return None


def _segment(steps, lowered, values: dict, constants: dict, later: set):
    """One step for `steps` (their lowerings `lowered`); `later`: slots read after them or kept. None when the runner
    refuses the segment."""
    buffers, number = [], {}

    def buffer(s):
        if s not in number:
            number[s] = len(buffers)
            buffers.append((values[s].shape, values[s].dtype))
        return number[s]

    produced, inputs, items = set(), [], []
    for st, low in zip(steps, lowered):
        ins = []
        for s in st.ins:
            if s in constants:
                ins.append(None)
                continue
            if s not in produced and s not in inputs:
                inputs.append(s)
            ins.append(buffer(s))
        outs = [buffer(s) for s in st.outs]
        produced.update(st.outs)
        items.append((low, ins, outs, st.name))
    outputs = [s for st in steps for s in st.outs if s in later]
    try:
        call = lowered[0].runner.build(items, buffers, [number[s] for s in inputs], [number[s] for s in outputs])
    except Exception as err:  # noqa: BLE001 - the steps run one by one as before
        log.debug("segment of %s: the runner refused it (%s: %s)", [st.name for st in steps], type(err).__name__, err)
        return None
    first = steps[0]
    return Step(f"{first.name}..{steps[-1].name}", "segment", first.device, Run.SEGMENT, "segment",
                Segment(call, tuple(steps)), tuple(inputs), tuple(outputs), tuple(values[s] for s in outputs),
                first.array)
