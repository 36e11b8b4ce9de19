"""Compiler level: ops written in kernel primitives, rendered in a device's dialect, compiled once (disk cache), launched."""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from .. import cache
from ..runtime.memory import DeviceArray

log = logging.getLogger("hwadapter")


@dataclass
class PrimitiveOp:
    """How an op runs as a kernel-primitive program."""
    kernel: object                      # hwadapter_kp.Kernel
    inputs: tuple                       # the kernel's input params, in the op's input order
    attrs: Callable = lambda attrs, dtypes: attrs      # op attrs -> kernel attrs
    bind: Callable = lambda attrs, dtypes: {}           # type-variable bindings (e.g. the output dtype)
    outputs: tuple = field(default=())  # which outputs the op returns (default: the first)


OPS: dict[str, PrimitiveOp] = {}
_lock = threading.Lock()
_backends: dict = {}
_kernels: dict = {}
_unavailable: dict[str, str] = {}


def register(op: str, spec: PrimitiveOp) -> None:
    """Make `op` runnable on every device with a codegen backend."""
    OPS[op] = spec
    from . import dispatcher
    dispatcher.clear_cache()


def backend_for(dev):
    """The device's usable CodegenBackend, or None (the reason is kept for `hwadapter doctor`)."""
    if dev in _backends:
        return _backends[dev]
    with _lock:
        if dev not in _backends:
            backend = dev.plugin.codegen_backend(dev.runtime)
            reason = backend.available() if backend is not None else None
            if reason is not None:
                _unavailable[str(dev)] = reason
                log.warning("%s: codegen backend unavailable: %s", dev, reason)
                backend = None
            _backends[dev] = backend
    return _backends[dev]


def forget_devices() -> None:
    """Drop the per-device backends (their Devices were forgotten)."""
    with _lock:
        _backends.clear()
        _unavailable.clear()
        _kernels.clear()


def unavailable_reasons() -> dict[str, str]:
    """device -> why its codegen backend cannot be used."""
    return dict(_unavailable)


_PLANS = 256


class _Plan(NamedTuple):
    program: object
    loaded: object
    launch: object
    outputs: list       # (name, shape, dtype) of every output, in param order
    input_names: list   # the program's present inputs, in param order
    returned: tuple     # the outputs the op returns


class CodegenKernel:
    """A kernel (the dispatcher's calling convention) that specialises, compiles, caches and launches a program."""

    route = "codegen"

    def __init__(self, op: str, spec: PrimitiveOp, dev, backend):
        self.op, self.spec, self.dev, self.backend = op, spec, dev, backend
        self._loaded: dict[str, object] = {}
        self._plans: OrderedDict = OrderedDict()  # input signature -> everything a launch needs but the buffers
        self._lock = threading.Lock()

    def program(self, arrays, attrs):
        """The specialised hwadapter_kp Program for these arrays and attributes."""
        spec = self.spec
        inputs = dict(zip(spec.inputs, arrays))
        dtypes = tuple(a.dtype for a in arrays)
        kernel_attrs = spec.attrs(attrs, dtypes)
        return inputs, spec.kernel.specialize_for(inputs, dtypes=spec.bind(attrs, dtypes), **kernel_attrs)

    def load(self, program):
        """Compiled and loaded, through the memory and disk caches."""
        loaded = self._loaded.get(program.name)
        if loaded is None:
            with self._lock:
                loaded = self._loaded.get(program.name)
                if loaded is None:
                    source = program.source(self.backend.dialect)
                    key = {"source": source, **self.backend.cache_key()}
                    binary = cache.default().get_or_build(
                        self.dev.type, key, lambda: self.backend.compile(source, program.name))
                    loaded = self._loaded[program.name] = self.backend.load(binary, program.name)
        return loaded

    def plan(self, arrays, attrs) -> _Plan:
        """Program, loaded binary, launch arguments and output shapes for these inputs (cached by signature)."""
        try:
            key = (tuple((a.shape, a.dtype, a.strides if isinstance(a, np.ndarray) else None) for a in arrays),
                   tuple(sorted(attrs.items())))
            hash(key)
        except TypeError:  # unhashable attribute values: plan every call
            key = None
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            inputs, program = self.program(arrays, attrs)
            shapes = program.output_shapes(inputs)
            plan = _Plan(program, self.load(program), program.bind(inputs, self.backend.dialect),
                         [(p.name, shapes[p.name], p.dtype) for p in program.outputs],
                         [n for n in (p.name for p in program.inputs)], self.spec.outputs or (program.outputs[0].name,))
            if key is not None:
                with self._lock:
                    self._plans[key] = plan
                    if len(self._plans) > _PLANS:
                        self._plans.popitem(last=False)
        return plan

    def __call__(self, *arrays, **attrs):
        plan = self.plan(arrays, attrs)
        inputs = dict(zip(self.spec.inputs, arrays))
        outs = {name: _empty(self.dev, shape, dtype) for name, shape, dtype in plan.outputs}
        buffers = [inputs[n] for n in plan.input_names] + list(outs.values())
        if plan.launch.global_size and all(_size(o) for o in outs.values()):
            plan.loaded.launch(plan.launch.global_size, buffers, plan.launch.scalar_args)
        result = [outs[n] for n in plan.returned]
        return result[0] if len(result) == 1 else result


def _size(a) -> int:
    return int(np.prod(a.shape)) if a.shape else 1


def _empty(dev, shape, dtype):
    return np.empty(shape, dtype) if dev.host_memory else DeviceArray.empty(dev, shape, dtype)


_installed = []


def install_op_set() -> None:
    """Register the op set's primitive programs, once (imports hwadapter_kp: never at `import hwadapter`)."""
    if not _installed:
        from ..ops import primitives
        with _lock:
            if not _installed:
                primitives.install()
                _installed.append(True)


def route(op: str, dev, dtypes: tuple):
    """The dispatcher's codegen route: a CodegenKernel when the op is written in primitives and the device compiles."""
    install_op_set()
    spec = OPS.get(op)
    if spec is None:
        return None
    backend = backend_for(dev)
    if backend is None:
        return None
    kernel = _kernels.get((op, dev))
    if kernel is None or kernel.spec is not spec:  # one per (op, device): its plans and binaries serve every dtype
        kernel = _kernels[(op, dev)] = CodegenKernel(op, spec, dev, backend)
    return kernel
