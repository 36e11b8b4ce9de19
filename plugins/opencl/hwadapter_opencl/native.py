"""OpenCL devices as a device library for native hosts (the Paddle bridge): svm_device.c over OpenCL 2.0 shared
virtual memory, built on first use and kept."""
from __future__ import annotations

from pathlib import Path

from hwadapter.plugin import DeviceUnavailableError, build_library

from .runtime import devices

SOURCE = Path(__file__).with_name("svm_device.c")
COARSE_GRAIN_BUFFER = 1  # CL_DEVICE_SVM_COARSE_GRAIN_BUFFER: the least SVM that gives flat device pointers


def library(device_type: str) -> str:
    """The path of the built library; DeviceUnavailableError when a device has no SVM (a host such as Paddle
    offsets device pointers by arithmetic, which cl_mem buffers do not allow)."""
    for i, dev in enumerate(devices()):
        try:
            caps = dev.svm_capabilities
        except Exception:  # an OpenCL 1.x device or driver: the query itself is unknown
            caps = 0
        if not caps & COARSE_GRAIN_BUFFER:
            raise DeviceUnavailableError(
                f"{device_type}:{i} ({dev.name.strip()}) has no shared virtual memory (OpenCL 2.0 SVM): native hosts "
                f"need device memory as flat pointers, which cl_mem buffers are not",
                fix="use a driver with OpenCL 2.0 SVM (PoCL has it) for this device")
    return str(build_library(SOURCE, f"{device_type}-svm", defines={"DEVICE_TYPE": f'"{device_type}"'},
                             libs=("-ldl", "-lpthread")))
