"""The device API, after paddle.device: choose, list, guard and inspect devices; and `configure`."""
from __future__ import annotations

import contextlib
from collections.abc import Sequence

from .api.config import FALLBACK_MODES, Config, config, loop_limit
from .api.errors import InvalidArgumentError
from .runtime.available import available
from .runtime.device import Device, _current, devices
from .runtime.discovery import registry

__all__ = ["Device", "set_device", "get_device", "get_all_device_type", "get_available_device", "device_count",
           "is_available", "device_guard", "synchronize", "memory_stats", "empty_cache", "get_device_properties",
           "reset_peak_memory_stats", "reset_plugins", "configure"]


def set_device(device) -> Device:
    """Make "type:index" the device new tensors and ops use; returns the Device."""
    dev = devices.get(device)
    devices.default = dev
    return dev


def get_device() -> str:
    """The current device as "type:index"."""
    return str(devices.current())


def get_all_device_type() -> list[str]:
    """Device types of every plugin that loaded and has at least one device."""
    return [r.name for r in registry.all() if r.ok]


def get_available_device() -> Sequence[str]:
    """Every usable device as "type:index": a list, or, past 4096 devices in all, a read-only sequence whose names are
    made when read (a plugin may report any number of devices)."""
    return available(registry.all())


def device_count(device_type: str) -> int:
    """Number of devices of a type; 0 when its plugin is missing or unusable."""
    rec = registry.get(device_type)
    return rec.device_count if rec is not None and rec.ok else 0


def is_available(device_type: str) -> bool:
    """True when the type's plugin loaded and found a device."""
    return device_count(device_type) > 0


@contextlib.contextmanager
def device_guard(device):
    """Run a block with another current device: `with hwadapter.device_guard("opencl:0"): ...`.

    As in Paddle, the guard decides where *new* tensors go (to_tensor, zeros, arange, ... without device=). It moves
    no tensor that exists already, and an op runs on the device of its inputs, not the guard's: `x + x` of a cpu:0
    tensor stays on cpu:0 inside the guard, and inputs on two devices are an InvalidArgumentError naming both, never
    a silent copy. Move tensors with `.to(device)`.
    """
    token = _current.set(devices.get(device))
    try:
        yield _current.get()
    finally:
        _current.reset(token)


def _get(device) -> Device:
    return devices.current() if device is None else devices.get(device)


def synchronize(device=None) -> None:
    """Wait for all work on a device (default: the current one)."""
    _get(device).synchronize()


def memory_stats(device=None) -> dict:
    """The caching allocator's statistics for a device (host-memory devices use numpy's allocator and report none)."""
    dev = _get(device)
    if dev.host_memory:
        return {"host_memory": True}
    return dev.allocator.stats()


def reset_peak_memory_stats(device=None) -> None:
    """Restart the peak measurement of a device's allocator."""
    dev = _get(device)
    if not dev.host_memory:
        dev.allocator.reset_peak()


def empty_cache(device=None) -> None:
    """Return cached, unused blocks to the device (all devices when none is given), and the uploaded scalars."""
    for dev in [_get(device)] if device is not None else devices.all():
        dev.constants.clear()
        if dev._allocator is not None:
            dev._allocator.empty_cache()


def get_device_properties(device=None):
    """The DeviceProperties a plugin reports for a device."""
    return _get(device).properties()


def reset_plugins() -> None:
    """Rescan entry points and forget loaded plugins and every Device (after installing or removing a plugin)."""
    devices.reset()


def configure(*, fallback: str | None = None, strict: bool | None = None, fallback_device: str | None = None,
              plugins=None, disable_plugins=None, max_loop_iters: int | None = None) -> Config:
    """Change settings for this process; `strict=True` is `fallback="error"`; `max_loop_iters`: how many iterations
    a while_loop without its own limit may run. Returns the settings."""
    if max_loop_iters is not None:
        config.max_loop_iters = loop_limit(max_loop_iters)
    if strict is not None:
        fallback = "error" if strict else "warn"
    if fallback is not None and fallback not in FALLBACK_MODES:
        raise InvalidArgumentError(f"fallback must be one of {FALLBACK_MODES}, not {fallback!r}")
    if fallback is not None:
        config.fallback = fallback
    if fallback_device is not None:
        config.fallback_device = fallback_device
    if plugins is not None or disable_plugins is not None:
        if plugins is not None:
            config.plugins = tuple(plugins)
        if disable_plugins is not None:
            config.disable_plugins = tuple(disable_plugins)
        devices.reset()
    else:
        devices.forget_routes()  # fallback routes depend on the settings just changed
    return config
