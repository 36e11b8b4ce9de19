"""Optional: OpenCL devices for native hosts (the Paddle bridge). svm_device.c over OpenCL 2.0 shared virtual memory,
built on first use and kept (Plugin.native_library); and, where a host has loaded it into this process, a runtime
that shares its context and adopts its memory for the plugin's own kernels (SharedRuntime.adopt).

Deleting this file and svm_device.c leaves a plugin without a native library: native hosts cannot use its devices,
and the conformance kit skips its native section."""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pyopencl as cl

from hwadapter.plugin import DeviceUnavailableError, InvalidArgumentError, build_library

from .runtime import OpenCLRuntime, Queue, devices

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


class SharedRuntime(OpenCLRuntime):
    """An OpenCLRuntime in the context of the library a host loaded (`shared`, or its own context when none was
    loaded first), whose memory it adopts for the plugin's kernels."""

    def __init__(self, index: int, name: str, shared: Shared | None, queue: type = Queue):
        if shared is not None and shared.device_id != devices()[index].int_ptr:
            shared = None  # the library numbered another device as this one: its memory is not ours to use
        self.shared = shared
        super().__init__(index, name, cl.Context.from_int_ptr(shared.context) if shared else None, queue)

    def adopt(self, address: int, nbytes: int) -> cl.Buffer:
        """A buffer over `nbytes` at `address` in the shared library's memory (Runtime.adopt). OpenCL lets a pointer
        from clSVMAlloc back a buffer: the allocation's whole span, narrowed by a sub-buffer at an aligned offset; an
        unaligned one is used directly only where the device shares memory with the host at fine grain."""
        if self.shared is None:
            raise DeviceUnavailableError(
                f"{self.name}: this runtime has its own OpenCL context: no host had loaded the native library when it "
                f"was opened, so the host's memory is not ours to use",
                fix="load the host first (`import paddle` before hwadapter opens this device)")
        base, size = self.shared.block(address)
        offset, flags = address - base, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR
        if offset + nbytes > size:
            raise InvalidArgumentError(f"{self.name}: {nbytes} bytes at {address:#x} run past the end of the "
                                       f"allocation they start in ({size} bytes at {base:#x})")
        if offset % (self.device.mem_base_addr_align // 8):
            if not self.device.svm_capabilities & cl.device_svm_capabilities.FINE_GRAIN_BUFFER:
                raise InvalidArgumentError(f"{self.name}: a tensor at offset {offset} of its allocation, which this "
                                           f"device cannot address as a buffer (it needs multiples of "
                                           f"{self.device.mem_base_addr_align // 8} bytes)",
                                           fix="make the tensor contiguous (a copy) first")
            return cl.Buffer(self.context, flags, nbytes, hostbuf=(ctypes.c_char * nbytes).from_address(address))
        whole = cl.Buffer(self.context, flags, size, hostbuf=(ctypes.c_char * size).from_address(base))
        return whole if offset == 0 and nbytes == size else whole.get_sub_region(offset, nbytes)
