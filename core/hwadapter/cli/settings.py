"""`hwadapter doctor`'s checks of the HWADAPTER_* settings and of device types claimed twice."""
from __future__ import annotations

import os

from hwadapter.api.config import FALLBACK_MODES, config, cpu_kernels
from hwadapter.api.errors import HwAdapterError
from hwadapter.runtime.device import parse
from hwadapter.runtime.discovery import registry

from .common import _check


def _check_fallback(infos: dict[str, dict]) -> list:
    spec = config.fallback_device
    where = f"fallback device HWADAPTER_FALLBACK_DEVICE={spec!r}"
    unset = ("unset HWADAPTER_FALLBACK_DEVICE (default cpu) or set it to an available device; without it ops "
             "missing a device kernel cannot run")
    try:
        dtype, index = parse(spec)
    except HwAdapterError as err:
        return _check("FAIL", f"{where} cannot be used: {err}", unset)
    info = infos.get(dtype)
    if info is None:
        return _check("FAIL", f"{where} cannot be used: unknown device type {dtype!r}: no installed plugin provides it",
                      unset)
    if info["status"] != "ok":
        return _check("FAIL", f"{where} cannot be used: {dtype}: {info['status']}: {info['cause']}",
                      info["fix"] or unset)
    if index >= info["device_count"]:
        return _check("FAIL", f"{where} cannot be used: {dtype} has {info['device_count']} device(s)", unset)
    dev = f"{dtype}:{index}"
    if not info.get("kernels"):
        return _check("warn", f"{where} is {dev}, which has no op kernels: fallback cannot run any op",
                      "set HWADAPTER_FALLBACK_DEVICE to a device whose plugin registers op kernels (cpu)")
    if not info.get("host_memory"):
        return _check("warn", f"{where} is {dev}, whose memory is not host memory: from_dlpack and host round "
                              f"trips will copy", "use HWADAPTER_FALLBACK_DEVICE=cpu")
    return _check("ok", f"{where} is usable: {dev}, {info['kernels']} op kernels")


def _check_plugin_lists() -> list:
    out, known = [], registry.entry_points()
    unknown = [n for n in config.plugins if n not in known]
    for name in unknown:
        out.append(_check("warn", f"HWADAPTER_PLUGINS names {name!r}, which no installed plugin provides",
                          f"pip install the plugin providing {name!r}, or remove it from HWADAPTER_PLUGINS"))
    if config.plugins and len(unknown) == len(config.plugins):
        out.append(_check("FAIL", f"HWADAPTER_PLUGINS={','.join(config.plugins)} allows none of the installed plugins "
                                  f"({', '.join(known) or 'none'}): every plugin is disabled",
                          "unset HWADAPTER_PLUGINS, or list the device types to load (`hwadapter devices`)"))
    for name in config.disable_plugins:
        if name not in known:
            out.append(_check("warn", f"HWADAPTER_DISABLE_PLUGINS names {name!r}, which no installed plugin provides",
                              "check the spelling (names are device types, as in `hwadapter devices`)"))
    return out


def _check_settings(infos: dict[str, dict]) -> list:
    """[level, message, fix] for the HWADAPTER_* settings; level is ok, warn or FAIL."""
    out = []
    mode = config.fallback
    if mode in FALLBACK_MODES:
        meaning = ("ops without a device kernel run on the fallback device, with a warning" if mode == "warn"
                   else "ops without a device kernel raise KernelNotFoundError (strict mode)")
        out.append(_check("ok", f"HWADAPTER_FALLBACK={mode}: {meaning}"))
    else:
        out.append(_check("FAIL", f"HWADAPTER_FALLBACK={mode!r} is not one of {', '.join(FALLBACK_MODES)}",
                          "unset HWADAPTER_FALLBACK (default warn) or set it to 'warn' or 'error'"))
    out.append(_check_fallback(infos))
    out += _check_plugin_lists()
    try:
        if "HWADAPTER_CPU_KERNELS" in os.environ:
            out.append(_check("ok", f"HWADAPTER_CPU_KERNELS={cpu_kernels()}"))
    except HwAdapterError as err:
        out.append(_check("FAIL", str(err).split(". Fix:")[0], err.fix))
    return out


def _conflict_checks() -> list:
    """A FAIL for each claim refused in favour of the hwadapter distribution's own (they have no record)."""
    kept = {id(c): c for c in registry.conflicts.values() if c.kept is not None}
    return [_check("FAIL", *c.explain()) for c in kept.values()]
