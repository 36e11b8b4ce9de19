"""The handwritten kernels' plans (the subgraph level's Plan, run eagerly too) and how kernels/*.cl are built.

kernels.py makes a plan per op, shape and dtype; an eager call runs it on fresh outputs (Plan.run), the subgraph
level binds its launches to buffers allocated once (subgraph.py).
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyopencl as cl

from hwadapter.plugin import DeviceArray, UnsupportedDTypeError

from ..runtime import build_key
from ..subgraph import Plan as NodePlan, Step

_DIR = Path(__file__).with_name("kernels")
_CL = {"bool": "uchar", "int8": "char", "int16": "short", "int32": "int", "int64": "long", "uint8": "uchar",
       "uint16": "ushort", "uint32": "uint", "uint64": "ulong", "float16": "half", "float32": "float",
       "float64": "double"}
BITS = {1: (np.uint8, "uchar"), 2: (np.uint16, "ushort"), 4: (np.uint32, "uint"), 8: (np.uint64, "ulong")}
ALL = list(_CL)
NUMERIC = [d for d in ALL if d != "bool"]
FLOATS = ["float16", "float32", "float64"]
MAXD, MAXB = 8, 6  # axes of the data-movement structs, batch axes of the GEMM (kernels/*.cl)


@functools.cache
def source(name: str) -> str:
    """kernels/<name>.cl with the common prelude."""
    return (_DIR / "common.cl").read_text() + (_DIR / f"{name}.cl").read_text()


def type_options(rt, dtype, acc: str | None = None) -> str:
    """-D options for T (element), ACC (arithmetic) and E (bits) of `dtype`."""
    dt = np.dtype(dtype)
    t = _CL[dt.name]
    acc = acc or ("float" if t == "half" else t)
    opts = [f"-DT={t}", f"-DACC={acc}", bits_options(dt)]
    if t == "half":
        opts.append("-DHALF")
    if "double" in (t, acc):
        if not rt.fp64:
            raise UnsupportedDTypeError(f"{rt.name} ({rt.device.name.strip()}) has no float64 support (cl_khr_fp64). "
                                        f"Fix: cast to float32, or run float64 work on the cpu device")
        opts.append("-DFP64")
    return " ".join(opts)


def bits_options(dtype) -> str:
    """-D option for E alone: data movement only needs the element size."""
    return f"-DE={BITS[np.dtype(dtype).itemsize][1]}"


@dataclass
class Plan(NodePlan):
    """The subgraph level's Plan, run eagerly as well. An eager run zero-fills the `zero` temps first and calls
    `check(temps)` last (which waits for the device): how a kernel reports an error it found, e.g. an index out of
    range."""
    zero: list = field(default_factory=list)
    check: object = None

    def __post_init__(self):
        self._lock = threading.Lock()
        self._kernels = None

    def run(self, arrays: tuple, queue) -> list:
        """Enqueue on `queue` (the runtime's Queue) with fresh outputs; returns them."""
        dev = arrays[0].device
        outs = [arrays[self.aliases[i]].reshape(s) if i in self.aliases else DeviceArray.empty(dev, s, d)
                for i, (s, d) in enumerate(self.outputs)]
        temps = [DeviceArray.empty(dev, s, d) for s, d in self.temps]
        bufs = {"in": arrays, "out": outs, "tmp": temps}
        for j in self.zero:
            cl.enqueue_fill_buffer(queue.queue, temps[j].handle, np.uint8(0), 0, temps[j].nbytes)
        with self._lock:  # a cl.Kernel holds its arguments: one caller at a time
            if self._kernels is None:
                self._kernels = [s.kernel() for s in self.steps]
            for step, k in zip(self.steps, self._kernels):
                for pos, a in enumerate(step.args):
                    if isinstance(a, tuple):
                        k.set_arg(pos, bufs[a[0]][a[1]].handle)
                queue.launch(k, step.global_size, step.local_size)
        if self.check is not None:
            self.check(temps)
        return outs


def grid(rt, total: int) -> tuple:
    """(global, local) of a kernel with one work item per element (those past `total` return at once)."""
    local = min(128, rt.device.max_work_group_size)
    return (-(-total // local) * local,), (local,)


def build(rt, name: str, options: str) -> tuple:
    """(built program, its key) of kernels/<name>.cl."""
    return rt.build(source(name), options, name), build_key(source(name), options)


#: Kernel -> the geometry struct it reads through GEOMETRY (kernels/common.cl), which can be built in.
GEOMETRY_KERNELS = {"strided_copy": "Strided", "pad": "Pad", "im2col": "Conv", "pool2d": "Pool",
                    "max_pool2d_grad": "Pool"}
_fixing = contextvars.ContextVar("fixing", default=False)  # make_step builds GEOMETRY kernels for their geometry


@contextlib.contextmanager
def fixing():
    """Within: plans whose GEOMETRY kernels are built for their one geometry (-DFIXED_<struct>, the struct's values
    as constants), for launches whose shapes never change (a subgraph's): their index arithmetic then divides by
    constants."""
    token = _fixing.set(True)
    try:
        yield
    finally:
        _fixing.reset(token)


def make_step(rt, name: str, kernel: str, options: str, total: int, args: list) -> Step:
    """A launch of `kernel` from kernels/<name>.cl with one work item per element of `total` (its geometry built in
    within `fixing`)."""
    geometry = [a for a in args if isinstance(a, np.ndarray)]
    if _fixing.get() and kernel in GEOMETRY_KERNELS and len(geometry) == 1:
        values = ",".join(f"{int(v)}L" for v in geometry[0].reshape(-1))
        options = f"{options} -DFIXED_{GEOMETRY_KERNELS[kernel]}={{{values}}}"
    program, key = build(rt, name, options)
    g, l = grid(rt, total)
    return Step(program, kernel, g, l, args, key)


def merge_axes(shape, *strides):
    """[size, stride of each operand...] per axis, size-1 axes dropped and neighbours every operand steps through
    alike merged (fewer axes: less index arithmetic in the kernels)."""
    dims = [[s, *(st[i] for st in strides)] for i, s in enumerate(shape) if s != 1]
    out = []
    for d in dims:
        if out and all(prev == cur * d[0] for prev, cur in zip(out[-1][1:], d[1:])):
            out[-1] = [out[-1][0] * d[0], *d[1:]]
        else:
            out.append(d)
    return out
