"""The plugin API's ground floor: the interfaces a device plugin implements, and nothing that runs them.

It imports nothing from hwadapter but errors and dtypes, so every other layer can build on it. Plugins import
it through `hwadapter.plugin`, which adds the helpers (DeviceArray, shapes, reference kernels, the graph IR).

A hook that receives a `device` gets the core's Device for one (type, index). What a plugin may use of it:
`type`, `index`, `runtime`, `codegen` (its CodegenBackend or None), `primitive(op)` (the op's compiled
kernel-primitive runner, or None) and `str(device)`.
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from . import dtypes as _dtypes
from .collectives import Collectives
from .errors import DeviceUnavailableError, PluginLoadError, short_repr

#: (MAJOR, MINOR) of this plugin API. A plugin is accepted when its MAJOR equals this one and its MINOR is not newer.
API_VERSION = (2, 1)  # 2.0: codegen_backend and subgraph_backend receive the Device; 2.1: collectives


@dataclass(frozen=True)
class DeviceProperties:
    """What a device says about itself."""
    name: str
    vendor: str = ""
    total_memory: int = 0
    compute_units: int = 1
    max_work_group_size: int = 1
    extra: dict = field(default_factory=dict)


class Stream(ABC):
    """An in-order queue of device work."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block until all work queued on this stream has finished."""

    @abstractmethod
    def query(self) -> bool:
        """True when all queued work has finished."""

    @abstractmethod
    def wait_event(self, event: "Event") -> None:
        """Make later work on this stream wait for `event`."""


class Event(ABC):
    """A marker in a stream that can be waited on."""

    @abstractmethod
    def record(self, stream: Stream) -> None:
        """Place this event after the work currently queued on `stream`."""

    @abstractmethod
    def query(self) -> bool:
        """True when the work before the event has finished."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block until the event has completed."""


class HostStream(Stream):
    """A stream for runtimes that execute every call before returning (nothing is ever pending)."""

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def wait_event(self, event: Event) -> None:
        pass


class HostEvent(Event):
    """An event for synchronous runtimes: complete once recorded."""

    def record(self, stream: Stream) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class Runtime(ABC):
    """One device's memory, copies, streams and events (after Paddle's C_DeviceInterface).

    Handles returned by `allocate` are opaque to the core; offsets are in bytes. Copies with a
    `stream` may return before they finish; the host array must then stay alive until the stream is
    synchronised.
    """

    #: True when the device's memory is host memory that numpy addresses directly; tensors on such a
    #: device hold numpy arrays and its kernels receive numpy arrays.
    host_memory = False

    def __init__(self, index: int):
        self.index = index

    @abstractmethod
    def properties(self) -> DeviceProperties:
        """Name, vendor, memory and compute limits of this device."""

    @abstractmethod
    def allocate(self, nbytes: int) -> Any:
        """Reserve `nbytes` of device memory; raise OutOfMemoryError when the device has none left."""

    @abstractmethod
    def free(self, handle: Any) -> None:
        """Return memory obtained from `allocate`."""

    @abstractmethod
    def copy_h2d(self, dst: Any, dst_offset: int, src: np.ndarray, stream: Stream | None = None) -> None:
        """Copy a C-contiguous host array into device memory."""

    @abstractmethod
    def copy_d2h(self, dst: np.ndarray, src: Any, src_offset: int, stream: Stream | None = None) -> None:
        """Copy device memory into a C-contiguous host array (dst.nbytes bytes)."""

    @abstractmethod
    def copy_d2d(self, dst: Any, dst_offset: int, src: Any, src_offset: int, nbytes: int,
                 stream: Stream | None = None) -> None:
        """Copy between two allocations of this device."""

    @abstractmethod
    def memset(self, dst: Any, offset: int, value: int, nbytes: int, stream: Stream | None = None) -> None:
        """Set `nbytes` bytes to the byte `value`."""

    @abstractmethod
    def create_stream(self) -> Stream:
        """A new stream."""

    @property
    @abstractmethod
    def default_stream(self) -> Stream:
        """The stream ops run on unless told otherwise."""

    @abstractmethod
    def create_event(self) -> Event:
        """A new, unrecorded event."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block until all work on the device has finished."""

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory, as the driver reports them."""
        total = self.properties().total_memory
        return total, total

    def adopt(self, address: int, nbytes: int) -> Any:
        """A handle, as `allocate` gives, for `nbytes` of this device's memory at `address` that the plugin's native
        library allocated for a native host (the Paddle bridge), so that this runtime's kernels run on it; never
        passed to `free`. DeviceUnavailableError where the runtime cannot (the default)."""
        raise DeviceUnavailableError(f"the {type(self).__name__} runtime cannot adopt a native library's memory",
                                     fix="implement Runtime.adopt in the plugin (see docs/vendor-guide.md)")


class SynchronousRuntime(Runtime):
    """A Runtime whose every call completes before it returns, so streams and events are trivially done."""

    def create_stream(self) -> Stream:
        return HostStream()

    @property
    def default_stream(self) -> Stream:
        stream = self.__dict__.get("_default_stream")
        if stream is None:
            stream = self.__dict__["_default_stream"] = HostStream()
        return stream

    def create_event(self) -> Event:
        return HostEvent()

    def synchronize(self) -> None:
        pass


class HostBufferRuntime(SynchronousRuntime):
    """Device memory as numpy byte arrays: the CPU, simulators and test devices build on it."""

    def allocate(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, np.uint8)

    def free(self, handle: np.ndarray) -> None:
        pass  # numpy frees the buffer with its last reference

    def copy_h2d(self, dst, dst_offset, src, stream=None):
        dst[dst_offset:dst_offset + src.nbytes] = src.reshape(-1).view(np.uint8)

    def copy_d2h(self, dst, src, src_offset, stream=None):
        dst.reshape(-1).view(np.uint8)[:] = src[src_offset:src_offset + dst.nbytes]

    def copy_d2d(self, dst, dst_offset, src, src_offset, nbytes, stream=None):
        dst[dst_offset:dst_offset + nbytes] = src[src_offset:src_offset + nbytes]

    def memset(self, dst, offset, value, nbytes, stream=None):
        dst[offset:offset + nbytes] = value


class Program(ABC):
    """A compiled kernel loaded on a device, ready to launch."""

    @abstractmethod
    def launch(self, global_size: int, buffers: list, scalars: list[int], stream: Stream | None = None) -> None:
        """Run over `global_size` work items with device buffers then int64 scalars as arguments."""

    def launcher(self, global_size: int, scalars: tuple) -> Callable[[list], None]:
        """`launch` with the global size and scalars fixed, called with the buffers: what the core calls on every
        eager op once an input signature is bound. Override it to do the fixed part once (OpenCL: set the scalars)."""
        return lambda buffers: self.launch(global_size, buffers, list(scalars))


class CodegenBackend(ABC):
    """Compiler level: generate code from hwadapter_kp programs, compile it, and launch it."""

    #: The hwadapter_kp dialect this device's code is rendered in (e.g. "c", "opencl", "cuda").
    dialect: Any = None

    @abstractmethod
    def compile(self, source: str, name: str) -> bytes:
        """Compile source text to a binary (the core caches the bytes on disk)."""

    @abstractmethod
    def load(self, binary: bytes, name: str) -> Program:
        """Load a compiled binary and return its entry point `name` as a Program."""

    def available(self) -> str | None:
        """None when the backend can compile here, else the reason it cannot."""
        return None

    def cache_key(self) -> dict:
        """What a binary depends on besides its source (compiler version, flags, target), for the disk cache."""
        return {"backend": type(self).__qualname__}


class Executable(ABC):
    """A compiled subgraph."""

    @abstractmethod
    def run(self, inputs: list) -> list:
        """Run on device arrays and return the output device arrays."""

    def serialize(self) -> bytes | None:
        """Bytes for the disk cache, or None when this executable cannot be cached."""
        return None


class SubgraphBackend(ABC):
    """Subgraph level (after NNAdapter and ONNX Runtime execution providers)."""

    @abstractmethod
    def supported_nodes(self, graph) -> set:
        """The nodes of `graph` this device can run."""

    @abstractmethod
    def compile(self, subgraph) -> Executable:
        """Turn a subgraph into one device program."""

    def deserialize(self, data: bytes) -> Executable:
        """Rebuild an executable from `Executable.serialize` output."""
        raise NotImplementedError


class Plugin(ABC):
    """A device type. Subclass it and point an entry point of group `hwadapter.plugins` at the class."""

    #: (MAJOR, MINOR) of the plugin API the plugin was built for. Each plugin class declares it itself, e.g.
    #: `api_version = (2, 0)`: Plugin declares none, so a plugin cannot silently claim whatever version the installed
    #: core provides (discovery refuses a plugin without one as incompatible).
    api_version: tuple[int, int]
    #: Set by the core to the entry-point name, which is the device type.
    name: str = ""

    @abstractmethod
    def device_count(self) -> int:
        """How many devices of this type are present; raise DeviceUnavailableError saying why when none can be used."""

    @abstractmethod
    def create_runtime(self, index: int) -> Runtime:
        """The Runtime of device `index`."""

    def register_kernels(self, kernels: "KernelRegistrar") -> None:
        """Op level: register kernels with `kernels.register(op, fn, dtypes)`; `kernels.device` is the Device."""

    def codegen_backend(self, device) -> CodegenBackend | None:
        """Compiler level: a new CodegenBackend for `device` (the Device keeps it), or None."""
        return None

    def subgraph_backend(self, device) -> SubgraphBackend | None:
        """Subgraph level: a new SubgraphBackend for `device` (the Device keeps it), or None."""
        return None

    def collectives(self, device) -> Collectives | None:
        """Communication level (2.1): a hwadapter.plugin.Collectives for `device` (the Device keeps it), or None: the
        device then gets the default communicator on MPI, staged through host memory where its memory is not."""
        return None

    def native_library(self) -> str | None:
        """The path of a device_api.h library that gives this device type's memory, copies and streams to native hosts
        (another framework: the Paddle bridge), or None; raise DeviceUnavailableError saying why when it cannot be had
        here."""
        return None

    def levels(self) -> list[str]:
        """The integration levels this plugin provides."""
        cls = type(self)
        out = []
        if cls.register_kernels is not Plugin.register_kernels:
            out.append("op")
        if cls.subgraph_backend is not Plugin.subgraph_backend:
            out.append("subgraph")
        if cls.codegen_backend is not Plugin.codegen_backend:
            out.append("codegen")
        if cls.collectives is not Plugin.collectives:
            out.append("collectives")
        return out


# Ops whose kernel dtype is not that of their first input (where's first input is the bool condition).
KEY_INPUT = {"where": 1}


class _Entry:
    __slots__ = ("fn", "homogeneous", "exact", "any_dtype")

    def __init__(self, fn, dtypes):
        self.fn = fn
        self.any_dtype = dtypes is None
        self.homogeneous, self.exact = set(), set()
        for d in dtypes or ():
            if isinstance(d, (tuple, list)):
                self.exact.add(tuple(np.dtype(x) for x in d))
            else:
                self.homogeneous.add(np.dtype(d))

    def matches(self, op: str, dtypes: tuple) -> bool:
        if self.any_dtype or dtypes in self.exact:
            return True
        if not dtypes:
            return False
        i = KEY_INPUT.get(op, 0)
        return i < len(dtypes) and dtypes[i] in self.homogeneous

    def dtype_names(self) -> list[str]:
        if self.any_dtype:
            return ["any"]
        return sorted(d.name for d in self.homogeneous) + sorted("(" + ",".join(d.name for d in t) + ")" for t in self.exact)


class KernelTable:
    """One device's op kernels keyed by (op, input dtypes); a later registration for the same key wins."""

    def __init__(self):
        self._kernels: dict[str, list[_Entry]] = {}
        self._lock = threading.Lock()

    def add(self, op: str, fn: Callable, dtypes=None) -> None:
        """Register one kernel."""
        with self._lock:
            self._kernels.setdefault(op, []).insert(0, _Entry(fn, dtypes))

    def find(self, op: str, dtypes: tuple) -> Callable | None:
        """The kernel for these input dtypes, or None."""
        for entry in self._kernels.get(op, ()):
            if entry.matches(op, dtypes):
                return entry.fn
        return None

    def ops(self) -> dict[str, list[str]]:
        """op -> dtype names with a kernel."""
        return {op: sorted({n for e in entries for n in e.dtype_names()}) for op, entries in self._kernels.items()}


class KernelRegistrar:
    """Handed to `Plugin.register_kernels`: registers kernels for one device, refusing what no op could ever use."""

    def __init__(self, table: KernelTable, device, is_op: Callable[[str], bool] | None = None):
        self._table, self.device = table, device
        self._is_op = is_op  # the core's op set (None: any name), given by the Device

    @property
    def device_type(self) -> str:
        return self.device.type

    def register(self, op: str, fn: Callable | None = None, dtypes: Iterable | None = None):
        """Register `fn(*arrays, **attrs)` for `op`; `dtypes` lists dtype names (the kernel's type) or exact tuples, None for any.

        Usable as a decorator: `@kernels.register("add", dtypes=["float32"])`. An op name outside the op set, a dtype
        hwadapter does not support (or a misspelt one) or a kernel that is not callable raises PluginLoadError.
        """
        if fn is None:
            return lambda f: self.register(op, f, dtypes) or f
        self._check_op(op)
        if not callable(fn):
            raise self._refused(f"registered {short_repr(fn)} for op {op!r}, which is not callable",
                                "register a function fn(*arrays, **attrs)")
        self._table.add(op, fn, self._checked_dtypes(op, dtypes))
        return fn

    def _check_op(self, op) -> None:
        if not isinstance(op, str):
            raise self._refused(f"registered a kernel under {short_repr(op)}, which is not an op name",
                                "pass the op's name as a string, e.g. 'add'")
        if self._is_op is not None and not self._is_op(op):
            raise self._refused(f"registered a kernel for {op!r}, which is not an op of hwadapter (no frontend "
                                f"function or kp.register_op op has that name, so it could never run)",
                                "check the spelling against `hwadapter ops`; a custom op must be defined with "
                                "hwadapter.kp.register_op before the device's kernels are first used")

    def _checked_dtypes(self, op: str, dtypes):
        if dtypes is None:
            return None
        if isinstance(dtypes, (str, np.dtype, type)):
            raise self._refused(f"registered op {op!r} with dtypes={short_repr(dtypes)}, not a list",
                                f"pass a list of dtype names, e.g. dtypes=[{short_repr(dtypes)}]")
        try:
            items = list(dtypes)
        except TypeError:
            raise self._refused(f"registered op {op!r} with dtypes={short_repr(dtypes)}, which is not a list",
                                "pass a list of dtype names (or of exact tuples of them), or None for any dtype"
                                ) from None
        for item in items:
            for d in (item if isinstance(item, (tuple, list)) else (item,)):
                self._check_dtype(op, d)
        return items

    def _check_dtype(self, op: str, d) -> None:
        if not _supported_dtype(d):
            raise self._refused(f"registered op {op!r} for dtype {short_repr(d)}, which is not a dtype hwadapter "
                                f"supports", f"use the names of hwadapter.api.dtypes: {', '.join(_DTYPE_NAMES)}")

    def _refused(self, what: str, fix: str) -> PluginLoadError:
        return PluginLoadError(f"plugin {self.device_type!r}: register_kernels {what}. Fix: {fix} (a plugin bug: "
                               f"report it to the plugin's vendor, or disable it with "
                               f"HWADAPTER_DISABLE_PLUGINS={self.device_type})", fix=fix)


def _supported_dtype(d) -> bool:
    """True for a dtype of hwadapter.api.dtypes given as its name, a numpy dtype or a numpy scalar type."""
    if isinstance(d, str):
        return d in _DTYPE_NAMES
    if isinstance(d, np.dtype) or (isinstance(d, type) and issubclass(d, np.generic)):
        try:
            return np.dtype(d).name in _DTYPE_NAMES
        except (TypeError, ValueError):  # abstract scalar types such as np.generic
            return False
    return False


#: The canonical names of the dtypes kernels may be registered for (no aliases such as "float": numpy and
#: hwadapter read those differently).
_DTYPE_NAMES = tuple(d.name for d in _dtypes.ALL)
