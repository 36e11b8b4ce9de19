"""The compiler: OpenCL C -> cl.Program (clBuildProgram; the build log goes in CompileError); program binaries are
the bytes the core caches on disk."""
from __future__ import annotations

import hashlib
import threading
import weakref
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

import hwadapter_kp as kp
from hwadapter.plugin import CodegenBackend, CompileError, Program


def build_key(source: str, options: str = "") -> str:
    """What names a built program: its source and build options."""
    return hashlib.sha256(f"{options}\n{source}".encode()).hexdigest()


@dataclass(frozen=True)
class Dialect(kp.OpenCLDialect):
    """hwadapter_kp's OpenCL C, one work unit per work item instead of a grid-stride loop: CPU drivers (PoCL)
    vectorise across the work items of a group only when the kernel body has no loop of its own."""

    def grid_loop(self, vectorizable, work="n_units"):
        if self.schedule.elems_per_item != 1:
            return super().grid_loop(vectorizable, work)
        return (["const long unit = get_global_id(0);", "if (unit < n_units) {"], ["}"], 1)


class OpenCLProgram(Program):
    """One kernel of a built cl.Program, launched on a queue with the dialect's work-group size."""

    def __init__(self, backend: "OpenCLCodegenBackend", program: cl.Program, name: str, binary: bytes):
        self.backend, self.program, self.name, self.binary = backend, program, name, binary
        self.kernel = cl.Kernel(program, name)
        self.local = backend.dialect.schedule.local_size
        self._buffers = -1  # how many buffer arguments the scalar types were declared for
        self._lock = threading.Lock()  # a cl.Kernel holds its arguments: one launch at a time

    def launch(self, global_size, buffers, scalars, stream=None):
        queue = stream.queue if stream is not None else self.backend.runtime.queue
        with self._lock:
            if self._buffers != len(buffers):  # typed scalars are packed in C; untyped ones cost microseconds each
                self.kernel.set_scalar_arg_dtypes([None] * len(buffers) + [np.int64] * len(scalars))
                self._buffers = len(buffers)
            self.kernel(queue, (global_size,), (self.local,), *[b.handle for b in buffers], *scalars)


class OpenCLCodegenBackend(CodegenBackend):
    """Builds OpenCL C for one device: kernel-primitive programs (cached on disk by the core) and the
    handwritten kernels (cached here, per source and options)."""

    dialect = Dialect()

    def __init__(self, runtime):
        self.runtime = runtime
        self._built: dict[str, cl.Program] = {}
        self._lock = threading.Lock()
        self.builds = 0  # builds from OpenCL C source (not from binaries): what a warm cache saves
        # Binaries a deserialised subgraph brought along: used instead of building their sources.
        self.binaries: dict[str, bytes] = {}

    def available(self) -> str | None:
        return None

    def cache_key(self) -> dict:
        d = self.runtime.device
        return {"platform": d.platform.name.strip(), "device": d.name.strip(), "driver": d.driver_version.strip(),
                "version": d.version.strip()}

    def build(self, source: str, options: str = "", name: str = "kernel") -> cl.Program:
        """The built program for this source and these options (built once per process)."""
        key = build_key(source, options)
        prg = self._built.get(key)
        if prg is None:
            with self._lock:
                prg = self._built.get(key)
                if prg is None:
                    binary = self.binaries.get(key)
                    prg = self._load(binary) if binary is not None else self._build(source, options, name)
                    self._built[key] = prg
        return prg

    def _build(self, source: str, options: str, name: str) -> cl.Program:
        rt = self.runtime
        prg = cl.Program(rt.context, source)
        self.builds += 1
        try:
            prg.build(options)
        except cl.Error as err:
            try:
                log = prg.get_build_info(rt.device, cl.program_build_info.LOG)
            except cl.Error:
                log = str(err)
            raise CompileError(f"{rt.name}: the OpenCL compiler of {rt.device.name.strip()} rejected kernel {name!r} "
                               f"(options {options!r}). Fix: this is a bug in the kernel source or the driver; report "
                               f"it with the source and log below", source=source, log=log) from None
        return prg

    def _load(self, binary: bytes) -> cl.Program:
        rt = self.runtime
        return cl.Program(rt.context, [rt.device], [binary]).build()

    def compile(self, source: str, name: str) -> bytes:
        return self.build(source, "", name).binaries[0]

    def load(self, binary: bytes, name: str) -> OpenCLProgram:
        return OpenCLProgram(self, self._load(binary), name, binary)


_backends: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def backend_for(runtime) -> OpenCLCodegenBackend:
    """The one backend (and program cache) of a runtime."""
    backend = _backends.get(runtime)
    if backend is None:
        backend = _backends.setdefault(runtime, OpenCLCodegenBackend(runtime))
    return backend
