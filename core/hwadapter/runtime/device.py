"""Devices: parsing "type:index", one interned Device per device, and the current device."""
from __future__ import annotations

import contextvars
import re
import threading

from ..errors import DeviceUnavailableError, InvalidDeviceError
from .allocator import CachingAllocator
from .discovery import registry

_PATTERN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::([0-9]+))?")
_devices: dict[tuple[str, int], "Device"] = {}
_lock = threading.Lock()


class Device:
    """One device of a plugin: its runtime and caching allocator are created on first use."""

    __slots__ = ("type", "index", "record", "_runtime", "_allocator", "_str", "__weakref__")

    def __init__(self, record, index: int):
        self.type, self.index, self.record = record.name, index, record
        self._runtime = self._allocator = None
        self._str = f"{self.type}:{index}"

    @property
    def plugin(self):
        return self.record.plugin

    @property
    def runtime(self):
        """The plugin's Runtime for this device."""
        if self._runtime is None:
            with _lock:
                if self._runtime is None:
                    try:
                        self._runtime = self.plugin.create_runtime(self.index)
                    except Exception as err:
                        raise DeviceUnavailableError(
                            f"{self}: the {self.type} plugin could not create a runtime: {type(err).__name__}: "
                            f"{err}. Fix: run `hwadapter doctor` and check the device's driver") from err
        return self._runtime

    @property
    def host_memory(self) -> bool:
        """True when tensors on this device are numpy arrays."""
        return self.runtime.host_memory

    @property
    def allocator(self) -> CachingAllocator:
        """The caching allocator over this device's runtime."""
        if self._allocator is None:
            rt = self.runtime
            with _lock:
                if self._allocator is None:
                    self._allocator = CachingAllocator(rt, str(self))
        return self._allocator

    def __str__(self):
        return self._str

    def __repr__(self):
        return f"Device('{self._str}')"

    def __reduce__(self):
        return (get, (self._str,))


def _available_summary() -> str:
    avail, broken = [], []
    for rec in registry.all():
        if rec.ok:
            avail += [f"{rec.name}:{i}" for i in range(rec.device_count)]
        else:
            broken.append(rec.explain())
    text = "available: " + (", ".join(avail) or "none")
    if broken:
        text += "; not usable: " + "; ".join(broken)
    return text


def get(spec) -> Device:
    """The Device for "type", "type:index" or a Device; InvalidDeviceError for anything else."""
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise InvalidDeviceError(f"a device is a string like 'cpu' or 'cpu:0', not {type(spec).__name__} {spec!r}; "
                                 + _available_summary())
    key = _parse_cache.get(spec)
    if key is not None:
        return _devices[key]
    m = _PATTERN.fullmatch(spec.strip())
    if m is None:
        raise InvalidDeviceError(f"malformed device string {spec!r}: expected 'type' or 'type:index' "
                                 f"with a non-negative integer index, e.g. 'cpu:0'; {_available_summary()}")
    dtype, index = m.group(1), int(m.group(2) or 0)
    record = registry.get(dtype)
    if record is None:
        raise InvalidDeviceError(f"unknown device type {dtype!r}: no plugin provides it; {_available_summary()}. "
                                 f"Fix: pip install the vendor's plugin (entry point group 'hwadapter.plugins')")
    if not record.ok:
        raise InvalidDeviceError(f"device type {dtype!r} cannot be used: {record.explain()}")
    if index >= record.device_count:
        raise InvalidDeviceError(f"device index {index} is out of range for {dtype!r}, which has "
                                 f"{record.device_count} device(s); {_available_summary()}")
    with _lock:
        dev = _devices.get((dtype, index))
        if dev is None or dev.record is not record:
            dev = _devices[(dtype, index)] = Device(record, index)
    _parse_cache[spec] = (dtype, index)
    return dev


_parse_cache: dict[str, tuple[str, int]] = {}


def forget() -> None:
    """Drop interned devices (after plugin discovery was reset)."""
    with _lock:
        _devices.clear()
        _parse_cache.clear()


_current: contextvars.ContextVar = contextvars.ContextVar("hwadapter_device", default=None)
_default: list = [None]


def current() -> Device:
    """The device new tensors go to: the innermost `device_guard`, else `set_device`, else the fallback device."""
    dev = _current.get()
    if dev is not None:
        return dev
    if _default[0] is None:
        from ..config import config
        _default[0] = get(config.fallback_device)
    return _default[0]


def set_default(spec) -> Device:
    """Make `spec` the process-wide current device."""
    dev = get(spec)
    _default[0] = dev
    return dev
