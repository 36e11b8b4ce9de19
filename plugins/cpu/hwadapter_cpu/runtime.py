"""The CPU runtime: device memory is host memory, every call completes before it returns."""
from __future__ import annotations

import os
import platform

import numpy as np

from hwadapter.plugin import DeviceProperties, HostEvent, HostStream, Runtime


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class CpuRuntime(Runtime):
    """Host memory as numpy byte arrays; streams and events are trivially complete."""

    host_memory = True

    def __init__(self, index: int):
        super().__init__(index)
        self._stream = HostStream()

    def properties(self) -> DeviceProperties:
        return DeviceProperties(name=_cpu_name(), vendor=platform.machine(), total_memory=_total_memory(),
                                compute_units=os.cpu_count() or 1, max_work_group_size=1)

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

    def create_stream(self) -> HostStream:
        return HostStream()

    @property
    def default_stream(self) -> HostStream:
        return self._stream

    def create_event(self) -> HostEvent:
        return HostEvent()

    def synchronize(self) -> None:
        pass

    def memory_info(self) -> tuple[int, int]:
        try:
            free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            free = 0
        return free, _total_memory()
