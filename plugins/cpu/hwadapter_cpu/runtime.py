"""The CPU runtime: device memory is host memory, every call completes before it returns."""
from __future__ import annotations

import os
import platform

from hwadapter.plugin import DeviceProperties, HostBufferRuntime


def cpuinfo(field: str) -> str:
    """The first value of `field` in /proc/cpuinfo ("model name", "flags"), or "" where it does not say."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":", 1)[0].strip() == field:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _cpu_name() -> str:
    return cpuinfo("model name") or platform.processor() or platform.machine()


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class CpuRuntime(HostBufferRuntime):
    """Host memory; tensors on it are numpy arrays (host_memory), raw allocations are numpy byte arrays."""

    host_memory = True

    def properties(self) -> DeviceProperties:
        return DeviceProperties(name=_cpu_name(), vendor=platform.machine(), total_memory=_total_memory(),
                                compute_units=os.cpu_count() or 1, max_work_group_size=1)

    def memory_info(self) -> tuple[int, int]:
        try:
            free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            free = 0
        return free, _total_memory()
