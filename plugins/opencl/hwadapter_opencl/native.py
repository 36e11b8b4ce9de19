"""OpenCL devices as a device library for native hosts (the Paddle bridge): svm_device.c over OpenCL 2.0 shared
virtual memory, built on first use and kept; and, where a host has loaded it into this process, its context and
memory for the plugin's own kernels (runtime.py)."""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

from hwadapter.plugin import DeviceUnavailableError, InvalidArgumentError, build_library

from .runtime import devices

SOURCE = Path(__file__).with_name("svm_device.c")
COARSE_GRAIN_BUFFER = 1  # CL_DEVICE_SVM_COARSE_GRAIN_BUFFER: the least SVM that gives flat device pointers


def _name(device_type: str) -> str:
    return f"{device_type}-svm"  # build_library names the file <name>-<hash>.so


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
    return str(build_library(SOURCE, _name(device_type), defines={"DEVICE_TYPE": f'"{device_type}"'},
                             libs=("-ldl", "-lpthread")))


class Shared:
    """Device `index` of the library a host loaded into this process: its context (int) and its allocations."""

    def __init__(self, lib: ctypes.CDLL, index: int, context: int, device_id: int):
        self.lib, self.index, self.context, self.device_id = lib, index, context, device_id

    def block(self, address: int) -> tuple[int, int]:
        """(base, size) of the library's live allocation that holds `address`."""
        base, size = ctypes.c_void_p(), ctypes.c_size_t()
        if self.lib.svm_device_block(self.index, ctypes.c_void_p(address), ctypes.byref(base), ctypes.byref(size)):
            raise InvalidArgumentError(f"address {address:#x} is in no live allocation of the native library's device "
                                       f"{self.index}", fix="pass memory the host allocated through the library")
        return base.value, size.value


def shared(device_type: str, index: int) -> Shared | None:
    """The library of this device type as a host (Paddle) loaded and initialized it in this process, or None: the
    runtime then shares its context, so that the plugin's kernels run on the host's memory."""
    try:
        with open("/proc/self/maps") as maps:  # the host loaded it by path: look for the file among our mappings
            paths = {line.split(None, 5)[-1].strip() for line in maps if ".so" in line}
    except OSError:
        return None
    prefix = _name(device_type) + "-"
    for path in sorted(p for p in paths if os.path.basename(p).startswith(prefix) and p.endswith(".so")):
        lib = ctypes.CDLL(path)  # already mapped: the same library, its state included
        if not hasattr(lib, "svm_device_handles"):
            continue
        context, device_id = ctypes.c_void_p(), ctypes.c_void_p()
        if lib.svm_device_handles(index, ctypes.byref(context), ctypes.byref(device_id)) == 0:
            return Shared(lib, index, context.value, device_id.value)
    return None
