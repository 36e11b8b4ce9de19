"""Devices: parsing "type:index", one interned Device per device, and the current device."""
from __future__ import annotations

import contextvars
import re
import threading

from ..errors import DeviceUnavailableError, InvalidDeviceError
from .allocator import CachingAllocator
from .discovery import TYPE_NAME, registry, short_repr

_TYPE = TYPE_NAME
_PATTERN = re.compile(rf"({TYPE_NAME.pattern})(?::([0-9]+))?")  # [0-9], not \d: ASCII digits only
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


_MAX_INDEX_DIGITS = 18  # keeps int() of the index cheap (and clear of Python's int-string length limit)


def _safe_repr(obj) -> str:
    return short_repr(obj, 60)


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


def _malformed(spec: str) -> InvalidDeviceError:
    """Say what exactly is wrong with a device string that is not 'type' or 'type:index'."""
    if not spec.strip():
        why = "it is empty" if not spec else "it is only whitespace"
    elif spec != spec.strip() or any(c.isspace() for c in spec):
        why = "it contains whitespace; write it without spaces"
    else:
        dtype, sep, index = spec.partition(":")
        if not dtype:
            why = "the device type before ':' is missing"
        elif not _TYPE.fullmatch(dtype):
            why = f"{_safe_repr(dtype)} is not a device type (letters, digits and _, not starting with a digit)"
        elif not index:
            why = "the index after ':' is missing"
        elif index.startswith("-") and index[1:].isdigit():
            why = "the index is negative"
        elif ":" in index:
            why = "it has more than one ':'"
        elif index.isascii() and index.isdigit():
            why = "the index is too large"
        else:
            why = f"the index {_safe_repr(index)} is not a non-negative integer"
    return InvalidDeviceError(f"malformed device string {_safe_repr(spec)}: {why}; expected 'type' or 'type:index', "
                              f"e.g. 'cpu' or 'cpu:0'; {_available_summary()}")


def _unknown(dtype: str) -> InvalidDeviceError:
    import difflib
    known = list(registry.entry_points())
    close = [n for n in known if n.lower() == dtype.lower()] or difflib.get_close_matches(dtype, known, n=2)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    # the core names no plugin: the hint is the naming convention of plugin distributions
    fix = (f"pip install hwadapter-{dtype.lower()} (plugins are named hwadapter-<type> by convention; any "
           f"distribution declaring an entry point in the group 'hwadapter.plugins' works)")
    return InvalidDeviceError(f"unknown device type {dtype!r}: no installed plugin provides it.{hint} Fix: {fix}, "
                              f"then check with `hwadapter devices`; {_available_summary()}")


def get(spec) -> "Device":
    """The Device for "type", "type:index" or a Device; InvalidDeviceError for anything else."""
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise InvalidDeviceError(f"a device is a string like 'cpu' or 'cpu:0', not {type(spec).__name__} "
                                 f"{_safe_repr(spec)}; {_available_summary()}")
    if type(spec) is not str:
        spec = str.__str__(spec)  # a str subclass may override hashing or comparison; use its plain text
    key = _parse_cache.get(spec)
    if key is not None:
        dev = _devices.get(key)
        if dev is not None and registry._records.get(key[0]) is dev.record:
            return dev
    m = _PATTERN.fullmatch(spec)
    if m is None or (m.group(2) is not None and len(m.group(2)) > _MAX_INDEX_DIGITS):
        raise _malformed(spec)
    dtype, index = m.group(1), int(m.group(2) or 0)
    record = registry.get(dtype)
    if record is None:
        raise _unknown(dtype)
    if not record.ok:
        raise InvalidDeviceError(f"device type {dtype!r} cannot be used: {record.explain()} "
                                 f"(`hwadapter doctor` shows the details)")
    if index >= record.device_count:
        raise InvalidDeviceError(f"device index {index} is out of range for {dtype!r}, which has "
                                 f"{record.device_count} device(s) (indices 0 to {record.device_count - 1}); "
                                 f"{_available_summary()}")
    with _lock:
        dev = _devices.get((dtype, index))
        if dev is None or dev.record is not record:
            dev = _devices[(dtype, index)] = Device(record, index)
        _parse_cache[spec] = (dtype, index)
    return dev


_parse_cache: dict[str, tuple[str, int]] = {}


def forget() -> None:
    """Drop interned devices and the current device (after plugin discovery was reset)."""
    with _lock:
        _devices.clear()
        _parse_cache.clear()
        _default[0] = None


_current: contextvars.ContextVar = contextvars.ContextVar("hwadapter_device", default=None)
_default: list = [None]


def current() -> Device:
    """The device new tensors go to: the innermost `device_guard`, else `set_device`, else the fallback device."""
    dev = _current.get()
    if dev is not None:
        return dev
    if _default[0] is None:
        from ..config import config
        try:
            _default[0] = get(config.fallback_device)
        except InvalidDeviceError as err:
            raise InvalidDeviceError(
                f"no device was chosen with hwadapter.set_device, and the fallback device "
                f"HWADAPTER_FALLBACK_DEVICE={config.fallback_device!r} cannot be used: {err}. Fix: call "
                f"hwadapter.set_device(...) with an available device, or set HWADAPTER_FALLBACK_DEVICE to one "
                f"(default 'cpu')") from None
    return _default[0]


def set_default(spec) -> Device:
    """Make `spec` the process-wide current device."""
    dev = get(spec)
    _default[0] = dev
    return dev
