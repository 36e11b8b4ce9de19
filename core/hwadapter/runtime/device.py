"""Devices: one Device per (type, index) owning all its state, the one table of them, and the current device."""
from __future__ import annotations

import contextvars
import difflib
import logging
import re
import threading

import numpy as np

from ..api.config import config
from ..api.collectives import COLLECTIVE_OPS, Collectives
from ..api.errors import CollectiveError, DeviceUnavailableError, HwAdapterError, InvalidDeviceError, PluginLoadError, short_repr
from ..api.interfaces import DeviceProperties, KernelRegistrar, KernelTable, Runtime
from ..api import reference, vjp_meta
from . import codegen, collective_ops, contract
from .allocator import CachingAllocator
from .discovery import BROKEN, TYPE_NAME, UNAVAILABLE, device_list, registry
from .memory import DeviceArray
from .signature import BoundedCache

log = logging.getLogger("hwadapter")
_TYPE = TYPE_NAME
_PATTERN = re.compile(rf"({TYPE_NAME.pattern})(?::([0-9]+))?")  # [0-9], not \d: ASCII digits only


class Device:
    """One device of a plugin. It owns everything about that device, each part created on first use: the runtime,
    the caching allocator, the kernel table, the codegen and subgraph backends, primitive kernels and dispatch routes."""

    __slots__ = ("type", "index", "record", "routes", "codegen_unavailable", "_runtime", "_allocator", "_kernels",
                 "_codegen", "_subgraph", "_collectives", "_collective_kernels", "comms", "_primitives", "constants", "fused", "_str", "_lock",
                 "__weakref__")

    def __init__(self, record, index: int):
        self.type, self.index, self.record = record.name, index, record
        #: (op, input dtypes) -> the callable that runs it here; filled by the dispatcher.
        self.routes: dict = {}
        #: Why the plugin's codegen backend cannot compile here (None when it can, or there is none).
        self.codegen_unavailable: str | None = None
        self._runtime = self._allocator = self._kernels = None
        self._codegen = self._subgraph = self._collectives = _UNSET
        #: group id -> this device's Communicator in that group (hwadapter.distributed sets them up).
        self.comms: dict = {}
        self._collective_kernels = None
        self._primitives: dict = {}
        #: (dtype, bytes) -> the 0-d DeviceArray of that value: `constant` uploads each scalar once.
        self.constants = BoundedCache(256)
        #: the computation of a fused graph node -> its kernel here (graph/passes/fused_op.py fills it).
        self.fused = BoundedCache(512)
        self._str = f"{self.type}:{index}"
        self._lock = threading.RLock()

    @property
    def plugin(self):
        return self.record.plugin

    @property
    def runtime(self):
        """The plugin's Runtime for this device."""
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    self._runtime = self._create_runtime()
        return self._runtime

    def _create_runtime(self):
        call = f"create_runtime({self.index})"
        try:
            runtime = self.plugin.create_runtime(self.index)
        except Exception as err:  # most often the driver: the device cannot be opened
            fix = getattr(err, "fix", "") or "run `hwadapter doctor` and check the device's driver"
            raise DeviceUnavailableError(
                f"{self}: {contract.who(self)} could not create a runtime: {call} raised {type(err).__name__}: "
                f"{err}. Fix: {fix}", fix=fix) from err
        if not isinstance(runtime, Runtime):  # else a raw AttributeError at its first use, far from here
            raise contract.returned(self, f"Plugin.{call}", runtime, "a hwadapter.plugin.Runtime")
        return runtime

    def properties(self) -> DeviceProperties:
        """The runtime's DeviceProperties, checked: a raw exception or another type is a PluginError naming it."""
        props = contract.call(self, "properties", self.runtime.properties)
        if not isinstance(props, DeviceProperties):
            raise contract.returned(self, "Runtime.properties()", props, "a hwadapter.plugin.DeviceProperties")
        return props

    def synchronize(self) -> None:
        """Wait for all work on this device (the runtime's synchronize, checked)."""
        contract.call(self, "synchronize", self.runtime.synchronize)

    @property
    def host_memory(self) -> bool:
        """True when tensors on this device are numpy arrays."""
        return self.runtime.host_memory

    @property
    def allocator(self) -> CachingAllocator:
        """The caching allocator over this device's runtime."""
        if self._allocator is None:
            rt = self.runtime
            with self._lock:
                if self._allocator is None:
                    self._allocator = CachingAllocator(rt, self._str, self)
        return self._allocator

    @property
    def kernels(self) -> KernelTable:
        """The op kernels the plugin registered for this device."""
        if self._kernels is None:
            with self._lock:
                if self._kernels is None:
                    table = KernelTable()
                    try:
                        self.plugin.register_kernels(KernelRegistrar(table, self, is_op))
                    except HwAdapterError:  # the registrar's refusal, or a setting refused: it names its own fix
                        raise
                    except Exception as err:
                        raise PluginLoadError(
                            f"plugin {self.type!r}: register_kernels raised {type(err).__name__}: {err}. Fix: report "
                            f"this to the plugin's vendor, or disable it with HWADAPTER_DISABLE_PLUGINS={self.type}"
                        ) from err
                    self._kernels = table
        return self._kernels

    @property
    def codegen(self):
        """The plugin's CodegenBackend for this device when it can compile here, else None (see codegen_unavailable)."""
        if self._codegen is _UNSET:
            with self._lock:
                if self._codegen is _UNSET:
                    backend = self.plugin.codegen_backend(self)
                    reason = backend.available() if backend is not None else None
                    if reason is not None:
                        log.warning("%s: codegen backend unavailable: %s", self, reason)
                        self.codegen_unavailable, backend = reason, None
                    self._codegen = backend
        return self._codegen

    @property
    def subgraph(self):
        """The plugin's SubgraphBackend for this device, or None."""
        if self._subgraph is _UNSET:
            with self._lock:
                if self._subgraph is _UNSET:
                    self._subgraph = self.plugin.subgraph_backend(self)
        return self._subgraph

    @property
    def collectives(self):
        """The plugin's Collectives for this device (its own communicators), or None: the default one on MPI."""
        if self._collectives is _UNSET:
            with self._lock:
                if self._collectives is _UNSET:
                    try:
                        found = self.plugin.collectives(self)
                    except HwAdapterError:
                        raise
                    except Exception as err:
                        raise contract.broken(self, "Plugin.collectives(device)",
                                              f"raised {type(err).__name__}: {err}") from err
                    if found is not None and not isinstance(found, Collectives):
                        raise contract.returned(self, "Plugin.collectives(device)", found,
                                                "a hwadapter.plugin.Collectives or None")
                    self._collectives = found
        return self._collectives

    def collective(self, op: str):
        """The kernel of collective op `op` (all_reduce, broadcast: run on this device's communicators), or None."""
        if op not in COLLECTIVE_OPS:
            return None
        if self._collective_kernels is None:
            self._collective_kernels = collective_ops.kernels(self)
        return self._collective_kernels[op]

    def communicator(self, group: int):
        """This device's Communicator in group `group`."""
        comm = self.comms.get(group)
        if comm is None:
            raise CollectiveError(f"{self}: no communicator for group {group} in this process. Fix: call "
                                  f"hwadapter.distributed.init_parallel_env() (and new_group for a subgroup) before "
                                  f"collectives, and run them on the device init_parallel_env chose",
                                  fix="call hwadapter.distributed.init_parallel_env() first")
        return comm

    def primitive(self, op: str):
        """The op's kernel-primitive program as a kernel of this device, or None (not written in primitives, or no
        codegen backend here). One per op: its bindings and loaded binaries serve every dtype."""
        kernel = self._primitives.get(op)
        spec = codegen.op_set().get(op)
        if kernel is None or kernel.spec is not spec:
            if spec is None or self.codegen is None:
                return None
            with self._lock:
                kernel = self._primitives[op] = codegen.PrimitiveKernel(op, spec, self, self.codegen)
        return kernel

    def empty(self, shape, dtype):
        """Uninitialised memory of this device's array type (numpy on host-memory devices)."""
        if (self._runtime or self.runtime).host_memory:
            return np.empty(shape, dtype)
        return DeviceArray.empty(self, shape, dtype)

    def constant(self, value: np.ndarray):
        """A 0-d host array as this device's data, uploaded once per value and then shared (tensors are immutable):
        `x * 2.0` in a loop copies 2.0 to the device once, not per call, and never waits for the device."""
        if (self._runtime or self.runtime).host_memory:
            return value
        return self.constants.get_or_make((value.dtype, value.tobytes()), lambda: DeviceArray.from_numpy(self, value))

    def forget_routes(self, op: str | None = None) -> None:
        """Resolve routes again (all, or one op's) after settings or the op set changed."""
        if op is None:
            self.routes.clear()
        else:
            for key in [k for k in self.routes if k[0] == op]:
                self.routes.pop(key, None)

    def __str__(self):
        return self._str

    def __repr__(self):
        return f"Device('{self._str}')"

    def __reduce__(self):
        return (get, (self._str,))


_UNSET = object()  # a backend not asked for yet (None means the plugin has none)


def is_op(name: str) -> bool:
    """True for an op of the op set: a reference kernel's, or one written in kernel primitives (kp.register_op), or
    the fused backward kernel of one (`<op>_vjp`, which autograd prefers to the op's vjp rule)."""
    forward = vjp_meta.forward_of(name)
    if forward is not None:
        return is_op(forward)
    return name in reference.KERNELS or name in COLLECTIVE_OPS or name in codegen.op_set()  # op_set() imports hwadapter_kp: only if needed


_MAX_INDEX_DIGITS = 18  # keeps int() of the index cheap (and clear of Python's int-string length limit)


def _safe_repr(obj) -> str:
    return short_repr(obj, 60)


_LISTED_TYPES = 12  # device types named in a message; more are counted


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED_TYPES])
    return shown + (f" and {len(names) - _LISTED_TYPES} more" if len(names) > _LISTED_TYPES else "")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _available_summary() -> str:
    """What a device error adds: the devices of the plugins loaded so far and the names of the others. It loads no
    plugin: an error message must not run (and wait for, or crash in) the code of plugins it is not about."""
    loaded = sorted(registry.loaded(), key=lambda r: r.name)
    avail = [device_list(r.name, r.device_count) for r in loaded if r.ok]
    text = "available: " + (", ".join(avail) or "none loaded yet")
    seen = {r.name for r in loaded}
    others = [n for n in registry.entry_points() if n not in seen]
    if others:
        text += f"; installed, not loaded yet: {_names(others)} (`hwadapter devices` lists their devices)"
    no_device = [r.name for r in loaded if r.status == UNAVAILABLE]
    if no_device:
        text += f"; without a device here: {_names(no_device)}"
    broken = [_cut(r.explain(), 300) for r in loaded if r.status in BROKEN]
    if broken:
        text += "; not usable: " + "; ".join(broken[:_LISTED_TYPES])
    return text


def _malformed(spec: str) -> InvalidDeviceError:
    """Say what exactly is wrong with a device string that is not 'type' or 'type:index'."""
    if not spec.strip():
        why = "it is empty" if not spec else "it is only whitespace"
    elif spec != spec.strip() or any(c.isspace() for c in spec):
        why = "it contains whitespace; write it without spaces"
    else:
        dtype, sep, index = spec.partition(":")
        if not dtype:
            why = "the device type before ':' is missing"
        elif not _TYPE.fullmatch(dtype):
            why = f"{_safe_repr(dtype)} is not a device type (letters, digits and _, not starting with a digit)"
        elif not index:
            why = "the index after ':' is missing"
        elif index.startswith("-") and index[1:].isdigit():
            why = "the index is negative"
        elif ":" in index:
            why = "it has more than one ':'"
        elif index.isascii() and index.isdigit():
            why = "the index is too large"
        else:
            why = f"the index {_safe_repr(index)} is not a non-negative integer"
    return InvalidDeviceError(f"malformed device string {_safe_repr(spec)}: {why}; expected 'type' or 'type:index', "
                              f"e.g. 'cpu' or 'cpu:0'; {_available_summary()}")


def _unknown(dtype: str, index: str | None) -> InvalidDeviceError:
    known = list(registry.entry_points())
    same = [n for n in known if n.casefold() == dtype.casefold()]
    if same:  # installed, spelt with other case: installing anything would not help
        spec = same[0] + (f":{index}" if index is not None else "")
        return InvalidDeviceError(f"unknown device type {dtype!r}: device types are case-sensitive. Did you mean "
                                  f"{same[0]!r}? Fix: write {spec!r}; {_available_summary()}")
    close = difflib.get_close_matches(dtype, known, n=2)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    # the core names no plugin and cannot know which distribution provides a type: no package name is guessed
    fix = (f"install the plugin that provides {dtype!r} (your vendor's package: it declares the entry point "
           f"{dtype!r} in the group 'hwadapter.plugins')")
    return InvalidDeviceError(f"unknown device type {dtype!r}: no installed plugin provides it.{hint} Fix: {fix}, "
                              f"then check with `hwadapter devices`; "
                              f"{_available_summary()}")


def _parse(spec) -> tuple[str, int, str | None]:
    """(type, index, the index as written or None) of a device string; InvalidDeviceError when it is not one."""
    if not isinstance(spec, str):
        raise InvalidDeviceError(f"a device is a string like 'cpu' or 'cpu:0', not {type(spec).__name__} "
                                 f"{_safe_repr(spec)}; {_available_summary()}")
    spec = str.__str__(spec)
    m = _PATTERN.fullmatch(spec)
    if m is None or (m.group(2) is not None and len(m.group(2)) > _MAX_INDEX_DIGITS):
        raise _malformed(spec)
    return m.group(1), int(m.group(2) or 0), m.group(2)


def parse(spec) -> tuple[str, int]:
    """(type, index) of "type" or "type:index", without loading any plugin; InvalidDeviceError when malformed."""
    dtype, index, _ = _parse(spec)
    return dtype, index


class Devices:
    """The one table of Devices: "type:index" parsed and interned, the process-wide default, one reset."""

    def __init__(self):
        self._devices: dict[tuple[str, int], Device] = {}
        self._parsed: dict[str, Device] = {}
        self._lock = threading.Lock()
        self.default: Device | None = None

    def get(self, spec) -> Device:
        """The Device for "type", "type:index" or a Device; InvalidDeviceError for anything else."""
        if isinstance(spec, Device):
            return spec
        if type(spec) is str:
            dev = self._parsed.get(spec)
            if dev is not None:
                return dev
        dtype, index, written = _parse(spec)
        spec = str.__str__(spec)  # a str subclass may override hashing or comparison; use its plain text
        record = registry.get(dtype)
        if record is None:
            raise _unknown(dtype, written)
        if not record.ok:
            raise InvalidDeviceError(f"device type {dtype!r} cannot be used: {record.explain()} "
                                     f"(`hwadapter doctor` shows the details)")
        if index >= record.device_count:
            raise InvalidDeviceError(f"device index {index} is out of range for {dtype!r}, which has "
                                     f"{record.device_count} device(s) (indices 0 to {record.device_count - 1}); "
                                     f"{_available_summary()}")
        with self._lock:
            dev = self._devices.get((dtype, index))
            if dev is None:
                dev = self._devices[(dtype, index)] = Device(record, index)
            self._parsed[spec] = dev
        return dev

    def all(self) -> list[Device]:
        """The Devices used so far."""
        return list(self._devices.values())

    def forget_routes(self, op: str | None = None) -> None:
        """Every device resolves its routes again (all, or one op's)."""
        for dev in self.all():
            dev.forget_routes(op)

    def reset(self) -> None:
        """Forget every plugin and Device, so the next use rescans entry points (after installing a plugin)."""
        with self._lock:
            registry.reset()
            self._devices.clear()
            self._parsed.clear()
            self.default = None

    def current(self) -> Device:
        """The device new tensors go to: the innermost `device_guard`, else `set_device`, else the fallback device."""
        dev = _current.get()
        if dev is not None:
            return dev
        if self.default is None:
            try:
                self.default = self.get(config.fallback_device)
            except InvalidDeviceError as err:
                raise InvalidDeviceError(
                    f"no device was chosen with hwadapter.set_device, and the fallback device "
                    f"HWADAPTER_FALLBACK_DEVICE={config.fallback_device!r} cannot be used: {err}. Fix: call "
                    f"hwadapter.set_device(...) with an available device, or set HWADAPTER_FALLBACK_DEVICE to one "
                    f"(default 'cpu')") from None
        return self.default


_current: contextvars.ContextVar = contextvars.ContextVar("hwadapter_device", default=None)
devices = Devices()
get = devices.get
current = devices.current
