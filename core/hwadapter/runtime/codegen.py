"""Compiler level: ops written in kernel primitives, specialised per input signature, rendered in a device's dialect,
compiled once (disk cache), loaded once per device and launched."""
from __future__ import annotations

import math
import threading
from dataclasses import replace
from typing import Callable, NamedTuple

import numpy as np

from . import cache
from ..api.errors import CompileError
from .memory import DeviceArray
from .primitive_op import PrimitiveOp
from .signature import BoundedCache, signature


_OPS: dict[str, PrimitiveOp] = {}
_lock = threading.Lock()
_installed: list = []


def op_set() -> dict[str, PrimitiveOp]:
    """Every op written in kernel primitives; the built-in ones are registered on first use (hwadapter_kp is not
    imported by `import hwadapter`)."""
    if not _installed:
        with _lock:
            if not _installed:
                from . import primitives  # lazy: importing hwadapter_kp costs tens of milliseconds
                for op, spec in primitives.op_set().items():
                    _OPS.setdefault(op, spec)
                _installed.append(True)
    return _OPS


def register(op: str, spec: PrimitiveOp) -> None:
    """Make `op` runnable on every device with a codegen backend (callers forget the devices' routes of `op`)."""
    op_set()
    _OPS[op] = spec


def load_source(device, source: str, name: str):
    """A plugin's own source in its codegen backend's language, compiled once (disk cache) and loaded: the Program
    of entry point `name` (hand-written kernels beside the generated ones, e.g. the CPU's conv2d)."""
    if device.codegen is None:
        raise CompileError(f"{device}: no codegen backend to compile {name!r}: {device.codegen_unavailable}")
    return _compiled(device, device.codegen, source, name)


def _compiled(device, backend, source: str, name: str):
    """`source` compiled by `backend` through the disk cache and loaded (a cached binary that fails to load is
    evicted and rebuilt once; a second failure names all: cache.py)."""
    return cache.default().get_or_load(
        device.type, {"source": source, **backend.cache_key()}, build=lambda: backend.compile(source, name),
        load=lambda binary: backend.load(binary, name), what=f"{device}: kernel {name!r}")


class Binding(NamedTuple):
    """A program specialised for one input signature: loaded, with its launch arguments and output shapes."""
    program: object     # hwadapter_kp.Program
    loaded: object      # the backend's Program
    launch: object      # hwadapter_kp Launch: global size and int64 scalar arguments
    outputs: list       # (name, shape, dtype) of every output, in param order
    input_names: list   # the program's present inputs, in param order
    returned: tuple     # the outputs the op returns
    call: Callable      # (arrays in the op's input order) -> the op's result: outputs allocated, program launched
    into: Callable = None  # (arrays, out) -> out: the one output written into `out` (None: several outputs)


class PrimitiveKernel:
    """An op's kernel-primitive program on one device, called like any kernel: specialised, compiled, launched."""

    route = "codegen"

    def __init__(self, op: str, spec: PrimitiveOp, device, backend):
        self.op, self.spec, self.device, self.backend = op, spec, device, backend
        self.inputs = spec.inputs  # the kernel's input names, in the op's input order
        self._loaded: dict[str, object] = {}
        self._bindings = BoundedCache(256)
        self._lock = threading.Lock()

    def program(self, arrays, attrs):
        """(inputs by name, the specialised hwadapter_kp Program) for arrays (or graph Values) and attributes."""
        spec = self.spec
        inputs = dict(zip(spec.inputs, arrays))
        dtypes = tuple(a.dtype for a in arrays)
        return inputs, spec.kernel.specialize_for(inputs, dtypes=spec.bind(attrs, dtypes), **spec.attrs(attrs, dtypes))

    def load(self, program, restrict: bool = True):
        """The compiled program, loaded, through the memory and disk caches; `restrict=False`: the variant whose
        buffers may alias (an output written over an input, see `_into`)."""
        key = program.name if restrict else (program.name, "aliased")
        loaded = self._loaded.get(key)
        if loaded is None:
            with self._lock:
                loaded = self._loaded.get(key)
                if loaded is None:
                    loaded = self._loaded[key] = self._compile_and_load(program, restrict)
        return loaded

    def _compile_and_load(self, program, restrict: bool = True):
        dialect = self.backend.dialect
        if not restrict:
            from hwadapter_kp.dialects import get_dialect  # lazy: hwadapter_kp is imported at first use
            dialect = replace(get_dialect(dialect), restrict=False)
        return _compiled(self.device, self.backend, program.source(dialect), program.name)

    def returned(self, program) -> tuple:
        """The names of the program outputs the op returns; any others are scratch."""
        return self.spec.outputs or (program.outputs[0].name,)

    def bind(self, arrays, attrs) -> Binding:
        """Everything a launch needs but the buffers, cached per input signature."""
        return self._bindings.get_or_make(signature(arrays, attrs), lambda: self._bind(arrays, attrs))

    def _bind(self, arrays, attrs) -> Binding:
        inputs, program = self.program(arrays, attrs)
        shapes = program.output_shapes(inputs)
        launch = program.bind(inputs, self.backend.dialect)
        outputs = [(p.name, tuple(int(d) for d in shapes[p.name]), np.dtype(p.dtype)) for p in program.outputs]
        names, returned = [p.name for p in program.inputs], self.returned(program)
        loaded = self.load(program)
        takes = tuple(self.inputs.index(n) for n in names)
        call = self._caller(loaded, launch, outputs, takes, [[o[0] for o in outputs].index(n) for n in returned])
        return Binding(program, loaded, launch, outputs, names, returned, call, self._into(program, launch, outputs,
                                                                                          takes))

    def _into(self, program, launch, outputs, takes: tuple) -> Callable | None:
        """The launch of a one-output binding into a given array, which may be one of its inputs (`out=`; the graph
        executor's in-place steps): the program compiled without `restrict`, on first use."""
        if len(outputs) != 1:
            return None
        if not (launch.global_size and math.prod(outputs[0][1])):
            return lambda arrays, out: out  # nothing to compute
        run = []  # its launcher, made on first use: most bindings never run in place

        def into(arrays, out):
            if not run:
                run.append(self.load(program, restrict=False).launcher(launch.global_size, tuple(launch.scalar_args)))
            run[0]([*[arrays[i] for i in takes], out])
            return out
        return into

    def _caller(self, loaded, launch, outputs, takes: tuple, gives: list) -> Callable:
        """The warm call of a binding, with everything that does not depend on the buffers done once."""
        run = None
        if launch.global_size and all(math.prod(shape) for _, shape, _ in outputs):
            run = loaded.launcher(launch.global_size, tuple(launch.scalar_args))
        dev = self.device
        if dev.host_memory:
            def make(shape, dtype, nbytes):
                return np.empty(shape, dtype)
        else:
            def make(shape, dtype, nbytes):
                return _lend(dev, shape, dtype, nbytes)
        sizes = [(shape, dtype, math.prod(shape) * dtype.itemsize) for _, shape, dtype in outputs]
        if len(sizes) == 1 and gives == [0]:  # one output, the result: every elementwise op
            (shape, dtype, nbytes), = sizes
            if run is None:
                return lambda arrays: make(shape, dtype, nbytes)

            if takes == tuple(range(len(takes))):  # the program takes the op's inputs in order
                n = len(takes)

                def call(arrays):
                    out = make(shape, dtype, nbytes)
                    run([*arrays[:n], out])
                    return out
                return call

            def call(arrays):
                out = make(shape, dtype, nbytes)
                run([*[arrays[i] for i in takes], out])
                return out
            return call

        def call(arrays):
            outs = [make(*size) for size in sizes]
            if run is not None:
                run([arrays[i] for i in takes] + outs)
            return outs[gives[0]] if len(gives) == 1 else [outs[i] for i in gives]
        return call

    def lower(self, ins, outs, attrs, consts):
        """This kernel's plan step inside a segment (graph/segments.py): its program's launch as the loaded program's
        `lowered(global_size, scalars, buffers)` (buffers in param order: ("in", j), ("const", array), ("out", j)),
        or None (a program with scratch outputs, nothing to launch, a backend without lowerings)."""
        if not self.device.host_memory:
            return None
        b = self.bind([np.empty(shape, dtype) for shape, dtype in ins], attrs)  # placeholders: never touched
        lowered = getattr(b.loaded, "lowered", None)
        names = [o[0] for o in b.outputs]
        if lowered is None or not b.launch.global_size or len(b.returned) != len(names) or len(names) != len(outs) \
                or not all(math.prod(shape) for _, shape, _ in b.outputs):
            return None
        takes = [self.inputs.index(n) for n in b.input_names]
        given = [b.returned.index(n) for n in names]
        buffers = [("const", np.ascontiguousarray(consts[j])) if j in consts else ("in", j) for j in takes]
        return lowered(b.launch.global_size, tuple(b.launch.scalar_args), buffers + [("out", j) for j in given])

    #: Takes `out=`: an array of the device's type with the (one) result's shape and dtype, written and returned.
    writes_out = True

    def __call__(self, *arrays, out=None, **attrs):
        binding = self._bindings.get(signature(arrays, attrs)) or self.bind(arrays, attrs)
        if out is None:
            return binding.call(arrays)
        if binding.into is None:
            raise TypeError(f"{self.op}: out= is for programs with one output")
        return binding.into(arrays, out)


_lend = DeviceArray.lend
