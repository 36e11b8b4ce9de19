"""The compiler backend: kernel primitives rendered as OpenCL C, built by the runtime (the build log goes in
CompileError); program binaries are the bytes the core caches on disk."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

import hwadapter_kp as kp
from hwadapter.plugin import CodegenBackend, Program


@dataclass(frozen=True)
class Dialect(kp.OpenCLDialect):
    """hwadapter_kp's OpenCL C, one work unit per work item instead of a grid-stride loop: CPU drivers (PoCL)
    vectorise across the work items of a group only when the kernel body has no loop of its own."""

    #: The device has double precision (cl_khr_fp64): float pow is then computed in it (see call).
    fp64: bool = False

    def call(self, fn, d, *args):
        # OpenCL's float pow may be 16 ulp off (PoCL's is off by half an ulp at sqrt(65504)), and one ulp decides how
        # a float16 result rounds: in double and rounded to float once, it is the correctly rounded float pow of numpy
        if fn == "pow" and self.fp64 and kp.dtypes.register(d) == "float32":
            return "(float)pow({}, {})".format(*(f"(double)({a})" for a in args))
        return super().call(fn, d, *args)

    def features_prelude(self, uses):
        return ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"] if self.fp64 else super().features_prelude(uses)

    def grid_loop(self, vectorizable, work="n_units"):
        if self.schedule.elems_per_item != 1:
            return super().grid_loop(vectorizable, work)
        return (["const long unit = get_global_id(0);", "if (unit < n_units) {"], ["}"], 1)


@dataclass(frozen=True)
class Specialised(Dialect):
    """The dialect with a program's int64 arguments (sizes, strides) as compile-time constants, for a subgraph, whose
    shapes never change: PoCL then divides an index by a constant (a multiply and a shift, vectorised) where it would
    divide by an argument (a 64-bit division per element, several times the cost of the arithmetic around it). The
    arguments stay in the signature, unused, so a launch passes what it passed before."""

    constants: tuple = ()  # (name, value) of each int64 argument

    def features_prelude(self, uses):
        return super().features_prelude(uses) + [f"#define {name} ((long){value})" for name, value in self.constants]

    def signature(self, name, buffers, scalars):
        fixed = {n for n, _ in self.constants}
        return super().signature(name, buffers, [f"unused_{s}" if s in fixed else s for s in scalars])


class OpenCLProgram(Program):
    """One kernel of a built cl.Program, launched on a queue with the dialect's work-group size."""

    def __init__(self, runtime, program: cl.Program, name: str):
        self.runtime, self.program, self.name = runtime, program, name
        self.local = OpenCLCodegenBackend.dialect.schedule.local_size
        self._lock = threading.Lock()
        self._kernel = cl.Kernel(program, name)  # launch()'s: a cl.Kernel holds its arguments, so one caller at a time

    def launch(self, global_size, buffers, scalars, stream=None):
        with self._lock:
            k = self._kernel
            for i, s in enumerate(scalars, len(buffers)):
                k.set_arg(i, np.int64(s))
            (stream or self.runtime.default_stream).launch(k, (global_size,), (self.local,), buffers)

    def launcher(self, global_size, scalars):
        # a kernel of its own with the scalars set once; the default queue's lock guards its buffer arguments
        k = cl.Kernel(self.program, self.name)
        for i, s in enumerate(scalars):
            k.set_arg(i + self.arity - len(scalars), np.int64(s))
        launch, size, local = self.runtime.default_stream.launch, (global_size,), (self.local,)
        return lambda buffers: launch(k, size, local, buffers)

    @property
    def arity(self) -> int:
        """How many arguments the kernel takes."""
        return self._kernel.num_args


class OpenCLCodegenBackend(CodegenBackend):
    """Kernel-primitive programs as OpenCL C for one device; the core caches the binaries on disk."""

    dialect = Dialect()

    def __init__(self, runtime):
        self.runtime = runtime
        if runtime.fp64:
            self.dialect = Dialect(fp64=True)

    def cache_key(self) -> dict:
        d = self.runtime.device
        return {"platform": d.platform.name.strip(), "device": d.name.strip(), "driver": d.driver_version.strip(),
                "version": d.version.strip()}

    def compile(self, source: str, name: str) -> bytes:
        return self.runtime.build(source, "", name).binaries[0]

    def load(self, binary: bytes, name: str) -> OpenCLProgram:
        return OpenCLProgram(self.runtime, self.runtime.load(binary), name)
