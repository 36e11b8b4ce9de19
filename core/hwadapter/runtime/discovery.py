"""Plugin discovery through the entry-point group `hwadapter.plugins` (stevedore), lazy and isolated.

Each plugin is loaded on first use, on its own: one that fails to import, to construct, to pass the
version handshake, or to count its devices is recorded with the cause and a fix, and never breaks
`import hwadapter` or another plugin.
"""
from __future__ import annotations

import logging
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any

from stevedore import ExtensionManager, NamedExtensionManager

from ..config import config

log = logging.getLogger("hwadapter")
GROUP = "hwadapter.plugins"

OK, UNAVAILABLE, FAILED, INCOMPATIBLE, DISABLED = "ok", "unavailable", "failed", "incompatible", "disabled"


@dataclass
class PluginRecord:
    """What discovery learnt about one entry point."""
    name: str
    entry_point: str
    status: str = OK
    plugin: Any = None
    device_count: int = 0
    cause: str = ""
    fix: str = ""
    details: str = ""
    api_version: tuple | None = None
    _dist: tuple | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def levels(self) -> list[str]:
        return self.plugin.levels() if self.plugin is not None else []

    @property
    def distribution(self) -> tuple[str, str]:
        """(distribution name, version) that declares this entry point."""
        if self._dist is None:
            self._dist = _distribution_of(self.name, self.entry_point)
        return self._dist

    def explain(self) -> str:
        """One line: why this plugin cannot be used and what to do."""
        return f"{self.name}: {self.status}: {self.cause}" + (f" Fix: {self.fix}" if self.fix else "")


def _distribution_of(name: str, value: str) -> tuple[str, str]:
    from importlib.metadata import distributions
    for dist in distributions():
        for ep in dist.entry_points:
            if ep.group == GROUP and ep.name == name and ep.value == value:
                return dist.metadata["Name"], dist.version
    return "?", "?"


def _core_api():
    from ..plugin import API_VERSION
    return API_VERSION


def _check_version(record: PluginRecord, cls) -> bool:
    core = _core_api()
    version = getattr(cls, "api_version", None)
    record.api_version = version
    valid = isinstance(version, tuple) and len(version) == 2 and all(isinstance(v, int) for v in version)
    if not valid:
        record.status, record.cause = INCOMPATIBLE, f"api_version is {version!r}, not a (MAJOR, MINOR) tuple of ints"
        record.fix = f"set api_version = {core} on the plugin class"
        return False
    if version[0] != core[0] or version[1] > core[1]:
        record.status = INCOMPATIBLE
        record.cause = f"built for plugin API {version[0]}.{version[1]}, this hwadapter provides {core[0]}.{core[1]}"
        newer_plugin = version[0] > core[0] or (version[0] == core[0] and version[1] > core[1])
        record.fix = ("upgrade hwadapter (pip install -U hwadapter)" if newer_plugin else
                      f"install a release of the plugin built for plugin API {core[0]}.x")
        return False
    return True


def _load(name: str, entry_point: str) -> PluginRecord:
    record = PluginRecord(name, entry_point)
    if name in config.disable_plugins or (config.plugins and name not in config.plugins):
        record.status = DISABLED
        record.cause = ("disabled by HWADAPTER_DISABLE_PLUGINS" if name in config.disable_plugins
                        else "not in the allow-list HWADAPTER_PLUGINS")
        record.fix = "change HWADAPTER_PLUGINS / HWADAPTER_DISABLE_PLUGINS (or hwadapter.configure)"
        return record
    failures = []
    manager = NamedExtensionManager(GROUP, names=[name], on_missing_entrypoints_callback=None,
                                    on_load_failure_callback=lambda _m, _ep, err: failures.append(err))
    if failures or name not in manager.names():
        err = failures[0] if failures else None
        record.status = FAILED
        record.cause = f"import of {entry_point} failed: {type(err).__name__}: {err}" if err else "entry point vanished"
        record.details = "".join(traceback.format_exception(err)) if err else ""
        missing = getattr(err, "name", None) if isinstance(err, ImportError) else None
        record.fix = (f"install the missing module {missing!r} (reinstall the plugin's distribution with its dependencies)"
                      if missing else "reinstall the plugin's distribution; run with -X dev for the full traceback")
        return record
    cls = manager[name].plugin
    if not _check_version(record, cls):
        return record
    try:
        plugin = cls()
        plugin.name = name
    except Exception as err:  # a vendor's constructor may raise anything: record it, never propagate
        record.status, record.cause = FAILED, f"constructor raised {type(err).__name__}: {err}"
        record.details = traceback.format_exc()
        record.fix = "see the plugin's documentation for its requirements (driver, runtime, environment)"
        return record
    record.plugin = plugin
    try:
        record.device_count = int(plugin.device_count())
    except Exception as err:
        record.status, record.cause = UNAVAILABLE, f"{type(err).__name__}: {err}"
        record.details = traceback.format_exc()
        record.fix = getattr(err, "fix", "") or "install the device's driver/runtime, or check that the hardware is visible"
        return record
    if record.device_count <= 0:
        record.status, record.cause = UNAVAILABLE, "the plugin found no devices"
        record.fix = "check that the device and its driver are present"
    return record


class _Registry:
    """Entry-point names are read once; each plugin is loaded on its first use."""

    def __init__(self):
        self._lock = threading.RLock()
        self._names: dict[str, str] | None = None
        self._records: dict[str, PluginRecord] = {}

    def entry_points(self) -> dict[str, str]:
        """name -> entry point value, in discovery order (first of duplicate names wins)."""
        with self._lock:
            if self._names is None:
                eps = NamedExtensionManager(GROUP, names=[], on_missing_entrypoints_callback=None).list_entry_points()
                names: dict[str, str] = {}
                for ep in eps:
                    if ep.name in names and names[ep.name] != ep.value:
                        log.warning("two plugins claim device type %r (%s and %s); using the first",
                                    ep.name, names[ep.name], ep.value)
                    names.setdefault(ep.name, ep.value)
                self._names = names
            return self._names

    def get(self, name: str) -> PluginRecord | None:
        """The record of plugin `name`, loading it now if needed; None if no entry point has that name."""
        with self._lock:
            record = self._records.get(name)
            if record is None:
                value = self.entry_points().get(name)
                if value is None:
                    return None
                record = self._records[name] = _load(name, value)
                if not record.ok:
                    log.info("plugin %s", record.explain())
            return record

    def all(self) -> list[PluginRecord]:
        """Every plugin's record, loading each."""
        return [self.get(n) for n in self.entry_points()]

    def reset(self) -> None:
        """Forget everything, so the next use rescans entry points (after installing a plugin)."""
        with self._lock:
            ExtensionManager.ENTRY_POINT_CACHE.pop(GROUP, None)
            self._names, self._records = None, {}


registry = _Registry()
reset = registry.reset
