"""What a plan runs: its steps, each resolved once when the plan is built, and the slots they read and write."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Run(enum.Enum):
    """How a step runs: what its `call` is and what it returns."""
    KERNEL = "kernel"          # an op's kernel route, one output: call(*arrays, **attrs) -> array
    KERNELS = "kernels"        # an op's kernel route, several outputs: call(*arrays, **attrs) -> list of arrays
    PROGRAM = "program"        # a fused node's compiled kernel-primitive program: call(*arrays) -> list
    HOST_CHAIN = "host chain"  # a fused node as numpy calls on a host-memory device: call(*arrays) -> list
    SUBGRAPH = "subgraph"      # a subgraph backend's compiled Executable: call(*arrays) -> list
    COPY = "copy"              # data moved to another device: call(array) -> [array]
    SEGMENT = "segment"        # kernel steps a device runs as one call (segments.py): call(*arrays) -> list
    CONTROL = "control"        # a cond or while_loop node running the plans of its branches or body: -> list


@dataclass(frozen=True, slots=True)
class Step:
    """One resolved piece of a plan: `call` on the arrays in slots `ins`, results into slots `outs`, checked against
    `expect` (the Values they must match) and `array` (the device's array type); `into`: the position in `ins` of the
    input a step writing in place is given as `out=`; `drops`: slots dead after it; `label`: what the profiler shows."""
    name: str
    op: str
    device: object
    run: Run
    label: str
    call: object
    ins: tuple
    outs: tuple
    expect: tuple
    array: type
    attrs: dict = field(default_factory=dict)
    into: int | None = None
    drops: tuple = ()


@dataclass(frozen=True, slots=True)
class Schedule:
    """A plan's steps over numbered slots: `constants` (slot -> data uploaded, or prepacked, once on the device that
    reads it), `inputs` ((slot, Device, Value) per graph input), `outputs` ((slot, Device it is on) per graph
    output), `slots` (how many)."""
    steps: tuple
    slots: int
    constants: dict
    inputs: tuple
    outputs: tuple
    default_device: object = None
