"""Adapts a vendor's C device library (hwadapter/include/hwadapter/device_api.h) to the Runtime interface."""
from __future__ import annotations

import weakref
from pathlib import Path

import numpy as np

from ..api.errors import DeviceUnavailableError
from ..api.interfaces import API_VERSION, DeviceProperties, Event, HostEvent, HostStream, Plugin, Runtime, Stream
from . import native_comm, native_kernels

#: (MAJOR, MINOR) of the C device ABI (HWA_API_MAJOR/MINOR in device_api.h), versioned apart from the Python plugin API.
NATIVE_API_VERSION = (1, 2)
#: The folder holding hwadapter/device_api.h, installed with hwadapter: compile a vendor library with -I this.
NATIVE_INCLUDE = Path(__file__).resolve().parents[1] / "include"


def load_library(path: str):
    """Load and check a device library; DeviceUnavailableError says why it cannot be used."""
    try:
        from .. import _native  # lazy: the compiled extension is optional; without it this says why
    except ImportError as err:
        raise DeviceUnavailableError(f"hwadapter._native is not built ({err}); reinstall hwadapter") from err
    try:
        return _native.NativeDevice(str(path))
    except RuntimeError as err:
        raise DeviceUnavailableError(f"device library rejected: {err}") from err


def _bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous host array, as a flat uint8 view (no copy)."""
    return array.reshape(-1).view(np.uint8)


class NativeStream(Stream):
    """A stream of the library (handle 0: the default stream); keeps host buffers of queued copies alive."""

    def __init__(self, lib, index: int, handle: int = 0):
        self.lib, self.index, self.handle = lib, index, handle
        self._pending: list = []  # host arrays an async copy may still read or write
        if handle:
            weakref.finalize(self, lib.stream_destroy, index, handle)

    def keep(self, array) -> None:
        """Hold `array` until the stream's work is done."""
        self._pending.append(array)

    def synchronize(self) -> None:
        self.lib.stream_synchronize(self.index, self.handle)
        self._pending.clear()

    def query(self) -> bool:
        done = self.lib.stream_query(self.index, self.handle)
        if done:
            self._pending.clear()
        return done

    def wait_event(self, event: "NativeEvent") -> None:
        self.lib.stream_wait_event(self.index, self.handle, event.handle)


class NativeEvent(Event):
    """An event of the library."""

    def __init__(self, lib, index: int):
        self.lib, self.index = lib, index
        self.handle = lib.event_create(index)
        weakref.finalize(self, lib.event_destroy, index, self.handle)

    def record(self, stream: NativeStream) -> None:
        self.lib.event_record(self.index, self.handle, stream.handle)

    def query(self) -> bool:
        return self.lib.event_query(self.index, self.handle)

    def synchronize(self) -> None:
        self.lib.event_synchronize(self.index, self.handle)


class NativeRuntime(Runtime):
    """A Runtime whose calls go to the C function table; streams and events too when the library has them (1.1),
    else every call completes before it returns (host streams and events)."""

    def __init__(self, library, index: int):
        super().__init__(index)
        self.lib = library
        self.streams = library.has_streams
        self._async = library.async_copies if self.streams else {}
        self._default = NativeStream(library, index) if self.streams else HostStream()
        self._streams = weakref.WeakSet()  # the streams made here: synchronize() lets their host buffers go

    def properties(self) -> DeviceProperties:
        total = self.lib.memory_info(self.index)[1]
        props = self.lib.properties(self.index)
        if props is None:  # a 1.0 library
            return DeviceProperties(name=f"{self.lib.device_type}:{self.index}", vendor=self.lib.device_type,
                                    total_memory=total)
        return DeviceProperties(name=props["name"] or f"{self.lib.device_type}:{self.index}",
                                vendor=props["vendor"] or self.lib.device_type,
                                total_memory=props["total_memory"] or total,
                                compute_units=max(1, props["compute_units"]),
                                max_work_group_size=max(1, props["max_work_group_size"]),
                                extra={"driver_version": props["driver_version"], "alignment": props["alignment"],
                                       "native_api": tuple(self.lib.api_version)})

    def allocate(self, nbytes: int) -> int:
        return self.lib.allocate(self.index, nbytes)  # HWA_OUT_OF_MEMORY raises OutOfMemoryError in _native

    def free(self, handle: int) -> None:
        self.lib.deallocate(self.index, handle)

    def adopt(self, address: int, nbytes: int) -> int:
        """The address itself: the library's pointers are this runtime's handles (a host loads the same library)."""
        return address

    def _queue(self, kind: str, stream) -> int:
        """The stream handle for an async call of `kind`, or 0 for the synchronous function."""
        if not isinstance(stream, NativeStream) or not self._async.get(kind):
            return 0
        return stream.handle

    def copy_h2d(self, dst, dst_offset, src, stream=None):
        data = _bytes(np.ascontiguousarray(src))
        handle = self._queue("h2d", stream)
        self.lib.copy_h2d(self.index, dst + dst_offset, data, handle)
        if handle:
            stream.keep(data)

    def copy_d2h(self, dst, src, src_offset, stream=None):
        data = _bytes(dst)
        handle = self._queue("d2h", stream)
        self.lib.copy_d2h(self.index, data, src + src_offset, handle)
        if handle:
            stream.keep(data)

    def copy_d2d(self, dst, dst_offset, src, src_offset, nbytes, stream=None):
        self.lib.copy_d2d(self.index, dst + dst_offset, src + src_offset, nbytes, self._queue("d2d", stream))

    def memset(self, dst, offset, value, nbytes, stream=None):
        self.lib.memset(self.index, dst + offset, value, nbytes, self._queue("memset", stream))

    def create_stream(self) -> Stream:
        if not self.streams:
            return HostStream()
        stream = NativeStream(self.lib, self.index, self.lib.stream_create(self.index))
        self._streams.add(stream)
        return stream

    @property
    def default_stream(self) -> Stream:
        return self._default

    def create_event(self) -> Event:
        return NativeEvent(self.lib, self.index) if self.streams else HostEvent()

    def synchronize(self) -> None:
        self.lib.synchronize(self.index)
        for stream in list(self._streams):  # all their work is done
            stream._pending.clear()

    def memory_info(self) -> tuple[int, int]:
        return self.lib.memory_info(self.index)


class NativePlugin(Plugin):
    """Base of a plugin shim for a C device library: set `library` to its path (or override `library_path`).

    The library's kernels (device_api.h 1.1) are registered with each device's kernel table; its communicators
    (1.2) are each device's collectives."""

    library: str = ""
    api_version = API_VERSION  # the core's own adapter; the C library's ABI is checked on loading (NATIVE_API_VERSION)

    def __init__(self):
        self._lib = None

    def library_path(self) -> str:
        """Where the shared library is."""
        return self.library

    def native_library(self) -> str:
        """The library itself: it serves native hosts as it serves hwadapter."""
        return self.library_path()

    def _loaded(self):
        if self._lib is None:
            self._lib = load_library(self.library_path())
        return self._lib

    def device_count(self) -> int:
        return self._loaded().device_count()

    def create_runtime(self, index: int) -> NativeRuntime:
        return NativeRuntime(self._loaded(), index)

    def register_kernels(self, kernels) -> None:
        """The library's kernels, each for its (op, input dtypes); ops without one run through fallback."""
        native_kernels.register(self._loaded(), kernels)

    def collectives(self, device) -> native_comm.NativeCollectives | None:
        """The library's own communicators when it has the communication functions (1.2), else None: MPI's."""
        lib = self._loaded()
        return native_comm.NativeCollectives(lib, device) if lib.has_collectives else None

    def levels(self) -> list[str]:
        """"op" only when the library has kernels (or a subclass registers its own); "collectives" only when it has
        communicators (or a subclass brings its own)."""
        out = super().levels()
        if "collectives" in out and type(self).collectives is NativePlugin.collectives:
            try:
                has = self._loaded().has_collectives
            except DeviceUnavailableError:
                has = False
            if not has:
                out.remove("collectives")
        if "op" in out and type(self).register_kernels is NativePlugin.register_kernels:
            try:
                has = bool(self._loaded().kernels())
            except DeviceUnavailableError:
                has = False
            if not has:
                out.remove("op")
        return out
