"""DeviceArray: a shaped, typed view of a block of device memory, the array type device kernels receive."""
from __future__ import annotations

import math
import os
import weakref

import numpy as np

from ..api import shapes
from ..api.errors import OutOfMemoryError
from . import contract


def contiguous_strides(shape: tuple) -> tuple:
    """Element strides of the C-contiguous layout of `shape`."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


_new = object.__new__


class Lent:
    """A native host's memory as a block: no allocator, so nothing returns it to a cache or frees it."""

    __slots__ = ("handle", "size", "requested")
    allocator = None

    def __init__(self, handle, size: int):
        self.handle, self.size, self.requested = handle, size, size


class DeviceArray:
    """A C-contiguous array in a device allocation; blocks are shared by reshapes and freed with the last one."""

    __slots__ = ("device", "block", "handle", "shape", "dtype", "__weakref__")

    def __init__(self, device, block, shape: tuple, dtype: np.dtype):
        self.device, self.block, self.shape, self.dtype = device, block, tuple(shape), np.dtype(dtype)
        #: The runtime's handle of the allocation (offset 0); None for an empty array.
        self.handle = None if block is None else block.handle

    @classmethod
    def empty(cls, device, shape, dtype) -> "DeviceArray":
        """Uninitialised device memory for `shape` and `dtype`."""
        shape = tuple(map(int, shape))
        dtype = np.dtype(dtype)
        return cls.lend(device, shape, dtype, math.prod(shape) * dtype.itemsize)

    @classmethod
    def lend(cls, device, shape: tuple, dtype: np.dtype, nbytes: int) -> "DeviceArray":
        """`empty` for callers that already hold a tuple of ints, an np.dtype and the byte size (launch bindings)."""
        out = _new(cls)  # not __init__: it would normalise again, and this is on every eager op of a device
        out.device, out.shape, out.dtype = device, shape, dtype
        if nbytes:
            out.block = block = (device._allocator or device.allocator).malloc(nbytes)
            out.handle = block.handle
        else:
            out.block = out.handle = None
        return out

    @classmethod
    def adopt(cls, device, address: int, shape: tuple, dtype: np.dtype) -> "DeviceArray":
        """A view of memory a native host owns (Runtime.adopt), lent for the length of one call: never freed here."""
        nbytes = math.prod(shape) * dtype.itemsize
        lent = Lent(contract.call(device, "adopt", device.runtime.adopt, address, nbytes), nbytes) \
            if nbytes else None
        return cls(device, lent, shape, dtype)

    @classmethod
    def from_numpy(cls, device, array: np.ndarray, stream=None) -> "DeviceArray":
        """Copy a host array to the device."""
        array = np.asarray(array, order="C")  # not ascontiguousarray: it turns 0-d into 1-d
        out = cls.empty(device, array.shape, array.dtype)
        if array.nbytes:
            contract.call(device, "copy_h2d", device.runtime.copy_h2d, out.block.handle, 0, array, stream)
        return out

    def numpy(self, stream=None) -> np.ndarray:
        """Copy to a new host array (waits for the copy)."""
        out = np.empty(self.shape, self.dtype)
        if out.nbytes:
            dev = self.device
            contract.call(dev, "copy_d2h", dev.runtime.copy_d2h, out, self.block.handle, 0, stream)
            if stream is not None:
                stream.synchronize()
        return out

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def strides(self) -> tuple:
        """Element strides of the C-contiguous layout."""
        return contiguous_strides(self.shape)

    def reshape(self, shape) -> "DeviceArray":
        """The same memory with another shape of the same size (one -1 stands for the size left, as in numpy and
        the reshape op's shape rule)."""
        shape = tuple(int(s) for s in shape)
        if shape.count(-1) == 1:
            known = math.prod(s for s in shape if s != -1)
            shape = tuple(self.size // known if s == -1 and known else s for s in shape)
        if math.prod(shape) != self.size or any(s < 0 for s in shape):
            raise ValueError(f"cannot reshape {self.shape} to {shape}")
        return DeviceArray(self.device, self.block, shape, self.dtype)

    def __repr__(self):
        return f"DeviceArray(shape={list(self.shape)}, dtype={self.dtype.name}, device={self.device})"


def transfer(data, src, dst):
    """Move a device array from device `src` to device `dst` (host-memory devices share numpy arrays)."""
    if src is dst:
        return data
    return to_device(np.asarray(data) if isinstance(data, (np.ndarray, np.generic)) else data.numpy(), dst)


def to_device(array: np.ndarray, dev):
    """A host array as `dev`'s data: the array itself on host-memory devices, else a copy in the device's memory."""
    return array if dev.host_memory else DeviceArray.from_numpy(dev, array)


# --- sizes that cannot exist -------------------------------------------------------------------------------------
_SMALL = 1 << 26  # values up to 64 MiB are not checked: every device has that much
_total_memory: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def host_memory() -> int:
    """The machine's RAM in bytes, 0 when the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def device_memory(dev) -> int:
    """Total bytes of `dev`'s memory as its runtime reports them (0: unknown), asked once per Device."""
    total = _total_memory.get(dev)
    if total is None:
        try:
            total = int(dev.runtime.memory_info()[1])
        except Exception:  # noqa: BLE001  a runtime that cannot say leaves the check to its allocator
            total = 0
        _total_memory[dev] = total
    return total


def human(nbytes: int) -> str:
    """Bytes in the largest unit that keeps the number at least 1 (1.5 GiB)."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if nbytes < 1024 or unit == "EiB":
            return f"{nbytes:.0f} {unit}" if unit == "bytes" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return ""


def check_fits(who: str, shape: tuple, dtype, dev, staged: bool = False, what: str = "the result") -> None:
    """Refuse with OutOfMemoryError, naming `who` (an op on a device, a graph node), a value of `shape` and `dtype`
    larger than `dev`'s memory, or than the machine's RAM when it is made on the host first (`staged`, or `dev` None:
    a value made on the host)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(int(d) for d in shape) * dtype.itemsize
    if nbytes <= _SMALL:
        return
    limits = [] if dev is None else [("the device's memory", device_memory(dev))]
    if dev is None or (staged and not dev.host_memory):
        limits.append(("the host's memory" + ("" if dev is None else " (the values are made there first)"),
                       host_memory()))
    for where, total in limits:
        if total and nbytes > total:
            raise OutOfMemoryError(
                f"{who}: {what}, shape {shapes.show(tuple(shape))} {dtype.name}, needs {human(nbytes)}, more than {where}, "
                f"{human(total)}. Fix: use a smaller shape, or split the work into pieces")
