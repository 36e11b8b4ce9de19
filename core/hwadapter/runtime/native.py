"""Adapts a vendor's C device library (core/native/include/hwadapter/device_api.h) to the Runtime interface."""
from __future__ import annotations

import numpy as np

from ..errors import DeviceUnavailableError, OutOfMemoryError
from ..interfaces import API_VERSION, DeviceProperties, Plugin, SynchronousRuntime

#: (MAJOR, MINOR) of the C device ABI (HWA_API_MAJOR/MINOR in device_api.h), versioned apart from the Python plugin API.
NATIVE_API_VERSION = (1, 0)


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


class NativeRuntime(SynchronousRuntime):
    """A Runtime whose calls go to the C function table; its copies complete before they return."""

    def __init__(self, library, index: int):
        super().__init__(index)
        self.lib = library

    def properties(self) -> DeviceProperties:
        free, total = self.lib.memory_info(self.index)
        return DeviceProperties(name=f"{self.lib.device_type}:{self.index}", vendor=self.lib.device_type,
                                total_memory=total)

    def allocate(self, nbytes: int) -> int:
        from .. import _native  # loaded already by load_library; the import only names it
        try:
            return self.lib.allocate(self.index, nbytes)
        except _native.OutOfMemory as err:
            raise OutOfMemoryError(str(err)) from None

    def free(self, handle: int) -> None:
        self.lib.deallocate(self.index, handle)

    def copy_h2d(self, dst, dst_offset, src, stream=None):
        self.lib.copy_h2d(self.index, dst + dst_offset, np.ascontiguousarray(src).reshape(-1).view(np.uint8))

    def copy_d2h(self, dst, src, src_offset, stream=None):
        self.lib.copy_d2h(self.index, dst.reshape(-1).view(np.uint8), src + src_offset)

    def copy_d2d(self, dst, dst_offset, src, src_offset, nbytes, stream=None):
        self.lib.copy_d2d(self.index, dst + dst_offset, src + src_offset, nbytes)

    def memset(self, dst, offset, value, nbytes, stream=None):
        self.lib.memset(self.index, dst + offset, value, nbytes)

    def synchronize(self) -> None:
        self.lib.synchronize(self.index)

    def memory_info(self) -> tuple[int, int]:
        return self.lib.memory_info(self.index)


class NativePlugin(Plugin):
    """Base of a plugin shim for a C device library: set `library` to its path (or override `library_path`)."""

    library: str = ""
    api_version = API_VERSION  # the core's own adapter; the C library's ABI is checked on loading (NATIVE_API_VERSION)

    def __init__(self):
        self._lib = None

    def library_path(self) -> str:
        """Where the shared library is."""
        return self.library

    def _loaded(self):
        if self._lib is None:
            self._lib = load_library(self.library_path())
        return self._lib

    def device_count(self) -> int:
        return self._loaded().device_count()

    def create_runtime(self, index: int) -> NativeRuntime:
        return NativeRuntime(self._loaded(), index)

    def register_kernels(self, kernels) -> None:
        """A C library provides memory only; ops run through fallback unless a subclass registers kernels."""
