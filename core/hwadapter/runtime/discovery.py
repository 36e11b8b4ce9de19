"""Plugin discovery through the entry-point group `hwadapter.plugins` (stevedore), lazy and isolated.

Each plugin is loaded on first use, on its own: one that fails to import, is not a `Plugin` subclass, fails the
version handshake, fails to construct, or fails to count its devices is recorded with the cause and a fix, and
never breaks `import hwadapter` or another plugin.

Stevedore lists the entry points (with its cache). A device type claimed by more than one entry point (names equal
but for case) is a conflict: none of the claims is loaded, and the record says who claims it and what to uninstall,
so the outcome never depends on sys.path order. The one exception: a name the `hwadapter` distribution itself declares
(the CPU plugin, the default fallback device) stays with it, and the other claims are refused.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import logging
import operator
import re
import threading
import traceback
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, distributions
from typing import Any, Callable

from stevedore import ExtensionManager, NamedExtensionManager

from ..api.config import config
from ..api.errors import DeviceUnavailableError, short_repr
from ..api.interfaces import API_VERSION, Plugin
from . import diskroom

log = logging.getLogger("hwadapter")
GROUP = "hwadapter.plugins"
#: The distribution whose own entry points (the CPU plugin) no other distribution can take over.
CORE_DISTRIBUTION = "hwadapter"

OK, UNAVAILABLE, FAILED, INCOMPATIBLE, DISABLED = "ok", "unavailable", "failed", "incompatible", "disabled"
#: Statuses that mean the plugin itself is broken (as opposed to "no device here" or "switched off").
BROKEN = (FAILED, INCOMPATIBLE)
#: A device type is an identifier, so that "type:index" parses unambiguously.
TYPE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOCTOR = "run `hwadapter doctor --verbose` for the traceback"
#: Device lists in messages name at most this many devices; more are written as a range.
LISTED_DEVICES = 8
def canonical(name: str) -> str:
    """The key under which entry-point names claim a device type: names equal but for case or surrounding
    whitespace claim the same one."""
    return name.strip().casefold()


def device_list(name: str, count: int, limit: int = LISTED_DEVICES) -> str:
    """The devices of a type for a message: 'acme:0, acme:1', or 'acme:0..acme:N-1 (N devices)' beyond `limit`."""
    if count <= limit:
        return ", ".join(f"{name}:{i}" for i in range(count))
    return f"{name}:0..{name}:{count - 1} ({count} devices)"


def device_names(name: str, count: int, limit: int = LISTED_DEVICES) -> list[str]:
    """The first `limit` device strings of a type (a plugin may report any number of devices)."""
    return [f"{name}:{i}" for i in range(min(count, limit))]


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
    api_version: Any = None
    _dist: tuple | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def broken(self) -> bool:
        """True when the plugin failed to load or is incompatible (not merely without a device, or disabled)."""
        return self.status in BROKEN

    @property
    def levels(self) -> list[str]:
        if self.plugin is None:
            return []
        try:
            return list(self.plugin.levels())
        except Exception:  # a vendor override of levels() must not break listing
            return []

    @property
    def distribution(self) -> tuple[str, str]:
        """(distribution name, version) that declares this entry point; ("?", "?") when none is found."""
        if self._dist is None:
            self._dist = _distribution_of(self.name, self.entry_point)
        return self._dist

    def explain(self) -> str:
        """One line: why this plugin cannot be used and what to do."""
        return f"{self.name}: {self.status}: {self.cause}" + (f" Fix: {self.fix}" if self.fix else "")


_dist_index: dict | None = None


def _distribution_of(name: str, value: str) -> tuple[str, str]:
    global _dist_index
    if _dist_index is None:
        index: dict = {}
        for dist in distributions():
            try:
                eps = dist.entry_points
                meta = (dist.metadata["Name"] or "?", dist.version or "?")
            except Exception:  # a broken METADATA of an unrelated distribution must not break us
                continue
            for ep in eps:
                if ep.group == GROUP:
                    index.setdefault((ep.name, ep.value), meta)  # sys.path order, as the entry points
        _dist_index = index
    return _dist_index.get((name, value), ("?", "?"))


def _core_claims() -> set[tuple[str, str]]:
    """(name, value) of every entry point the hwadapter distribution itself declares."""
    try:
        dist = importlib.metadata.distribution(CORE_DISTRIBUTION)
        return {(ep.name, ep.value) for ep in dist.entry_points if ep.group == GROUP}
    except Exception:  # running from a source tree without metadata: no name is reserved
        return set()


def _claimant(ep) -> str:
    dist, version = _distribution_of(ep.name, ep.value)
    return f"{dist} {version} ({ep.name} = {ep.value})"


@dataclass
class Conflict:
    """A device type claimed by several entry points; `kept` is the hwadapter distribution's own claim, if any."""
    claims: list
    kept: Any = None

    @property
    def refused(self) -> list:
        return [ep for ep in self.claims if ep is not self.kept]

    def distributions(self) -> list[str]:
        """The names of the distributions whose claims are refused, sorted (never in sys.path order)."""
        return sorted({_distribution_of(ep.name, ep.value)[0] for ep in self.refused})

    def explain(self) -> tuple[str, str]:
        """(cause, fix) for doctor and the records of the refused names."""
        dists = self.distributions()
        uninstall = " ".join(d for d in dists if d != "?") or "<the distribution>"
        if self.kept is not None:
            cause = (f"device type {self.kept.name!r} belongs to the {CORE_DISTRIBUTION} distribution "
                     f"({self.kept.name} = {self.kept.value}), but {'; '.join(sorted(map(_claimant, self.refused)))} "
                     f"also claim{'s' if len(self.refused) == 1 else ''} it: that claim is refused")
            fix = (f"pip uninstall {uninstall} (it tries to replace the built-in {self.kept.name!r} device); a "
                   f"plugin must declare a device type of its own")
            return cause, fix
        cause = (f"device type {self.claims[0].name!r} is claimed by {len(self.claims)} entry points: "
                 f"{'; '.join(sorted(map(_claimant, self.claims)))}. Names equal but for case claim the same type, "
                 f"and hwadapter loads none of them rather than choose one by install order")
        fix = (f"uninstall all but one of them (pip uninstall {' or '.join(dists) if len(dists) > 1 else uninstall}); "
               f"if one distribution declares both, fix its entry points")
        return cause, fix


def _declared_api_version(cls) -> Any:
    """The api_version the plugin class (or a base class of its own, not Plugin) declares; _UNDECLARED if none."""
    for klass in cls.__mro__:
        if klass is Plugin:
            break
        if "api_version" in vars(klass):
            return vars(klass)["api_version"]
    return _UNDECLARED


_UNDECLARED = object()


def _check_version(record: PluginRecord, cls) -> bool:
    core = API_VERSION
    version = _declared_api_version(cls)
    if version is _UNDECLARED:
        record.status = INCOMPATIBLE
        record.cause = (f"the plugin class {cls.__name__} declares no api_version, so the plugin API it was built "
                        f"for is unknown")
        record.fix = (f"set api_version = ({core[0]}, {core[1]}) in the class body of {cls.__module__}.{cls.__name__} "
                      f"(api_version = (MAJOR, MINOR): the plugin API version it was built and tested against)")
        return False
    record.api_version = version
    valid = (isinstance(version, tuple) and len(version) == 2
             and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in version))
    if not valid:
        record.status = INCOMPATIBLE
        record.cause = f"api_version is {short_repr(version)}, not a (MAJOR, MINOR) tuple of non-negative ints"
        record.fix = (f"set api_version = {core} on the plugin class (the plugin API version it was built for), "
                      f"or install a release of the plugin that does")
        return False
    if version[0] != core[0] or version[1] > core[1]:
        record.status = INCOMPATIBLE
        record.cause = (f"built for plugin API {version[0]}.{version[1]}, this hwadapter provides "
                        f"{core[0]}.{core[1]} (accepted: {core[0]}.0 to {core[0]}.{core[1]})")
        newer_plugin = version[0] > core[0] or (version[0] == core[0] and version[1] > core[1])
        record.fix = ("upgrade hwadapter (pip install -U hwadapter) to a release providing plugin API "
                      f"{version[0]}.{version[1]}, or install an older release of the plugin" if newer_plugin else
                      f"install a release of the plugin built for plugin API {core[0]}.x "
                      f"(pip install -U <the plugin's distribution>)")
        return False
    return True


def _import_failure(record: PluginRecord, err: BaseException) -> PluginRecord:
    record.status = FAILED
    record.cause = f"import of {record.entry_point} failed: {type(err).__name__}: {err}"
    record.details = "".join(traceback.format_exception(err))
    module = record.entry_point.split(":", 1)[0].strip()
    if isinstance(err, ImportError) and getattr(err, "name", None):
        missing = err.name
        if missing == module or module.startswith(missing + "."):
            record.fix = (f"the plugin's module {module!r} is not installed where this Python finds it: reinstall "
                          f"the plugin's distribution (pip install --force-reinstall <distribution>), or fix the "
                          f"entry point {record.name} = {record.entry_point}")
        else:
            record.fix = (f"install the missing module {missing!r} (reinstall the plugin's distribution with its "
                          f"dependencies); {_DOCTOR}")
    elif isinstance(err, AttributeError):
        record.fix = (f"the entry point {record.name} = {record.entry_point} names an object its module does not "
                      f"define: fix the entry point in the plugin's pyproject.toml, or reinstall the plugin")
    elif isinstance(err, ValueError) and ":" not in record.entry_point:
        record.fix = f"the entry point value must be 'module:PluginClass', not {record.entry_point!r}"
    else:
        record.fix = f"the plugin's module raised while being imported; {_DOCTOR}, and report it to its vendor"
    return record


def _disabled_reason(name: str) -> str | None:
    if name in config.disable_plugins:
        return "disabled by HWADAPTER_DISABLE_PLUGINS (or hwadapter.configure(disable_plugins=...))"
    if config.plugins and name not in config.plugins:
        return (f"not in the allow-list HWADAPTER_PLUGINS={','.join(config.plugins)} "
                f"(or hwadapter.configure(plugins=...))")
    return None


def _refusal(record: PluginRecord) -> PluginRecord | None:
    """The record filled in when the plugin is not to be imported at all (disabled, invalid name), else None."""
    name = record.name
    reason = _disabled_reason(name)
    if reason is not None:
        record.status, record.cause = DISABLED, reason
        record.fix = ("to use it, remove it from HWADAPTER_DISABLE_PLUGINS" if name in config.disable_plugins
                      else "to use it, add it to HWADAPTER_PLUGINS (or unset HWADAPTER_PLUGINS)")
        return record
    if not TYPE_NAME.fullmatch(name):
        record.status = FAILED
        record.cause = f"the entry point name {name!r} is not a valid device type (letters, digits and _ only)"
        record.fix = ("rename the entry point in the plugin's pyproject.toml to an identifier such as "
                      f"{re.sub(r'[^A-Za-z0-9_]', '_', name) or 'acme'!r}; the name is the device type in 'type:index'")
        return record
    return None


def _load(name: str, entry_point: str, ep=None, stage: Callable[[str], None] | None = None) -> PluginRecord:
    record = PluginRecord(name, entry_point)
    try:
        return _refusal(record) or _load_into(record, ep, stage or (lambda step: None))
    except Exception as err:  # whatever a vendor's object does when inspected, discovery must go on
        record.status, record.plugin = FAILED, None
        record.cause = f"hwadapter could not inspect the plugin: {type(err).__name__}: {err}"
        record.details = traceback.format_exc()
        record.fix = f"{_DOCTOR}, and report it to the plugin's vendor"
        return record


def _load_into(record: PluginRecord, ep, stage: Callable[[str], None]) -> PluginRecord:
    name = record.name
    if ep is None:
        ep = EntryPoint(name, record.entry_point, GROUP)
    stage("import")
    try:
        cls = ep.load()
    except (Exception, SystemExit) as err:  # SystemExit too: a plugin's import must never end the process
        return _import_failure(record, err)
    if not (isinstance(cls, type) and issubclass(cls, Plugin)):
        record.status = FAILED
        what = "an instance of " + type(cls).__name__ if not isinstance(cls, type) else "the class " + cls.__name__
        record.cause = (f"the entry point {name} = {record.entry_point} names {what}, "
                        f"not a subclass of hwadapter.plugin.Plugin")
        record.fix = ("point the entry point (group 'hwadapter.plugins') at the plugin's class, which must subclass "
                      "hwadapter.plugin.Plugin: `class AcmePlugin(hwadapter.plugin.Plugin): ...`")
        return record
    if not _check_version(record, cls):
        return record
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
        record.status = FAILED
        record.cause = f"{cls.__name__} does not implement the abstract method(s) {missing} of Plugin"
        record.fix = f"implement {missing} in {cls.__module__}.{cls.__name__} (a plugin bug: report it to its vendor)"
        return record
    stage("construct")
    try:
        plugin = cls()
        plugin.name = name
    except DeviceUnavailableError as err:  # the constructor found no driver: not a bug of the plugin
        record.status, record.cause = UNAVAILABLE, f"{type(err).__name__}: {err}"
        record.details = traceback.format_exc()
        record.fix = err.fix or "install the device's driver/runtime, or check the hardware is visible"
        return record
    except (Exception, SystemExit) as err:  # a vendor's constructor may raise anything: record it, never propagate
        record.status, record.cause = FAILED, f"constructor {cls.__name__}() raised {type(err).__name__}: {err}"
        record.details = traceback.format_exc()
        record.fix = (f"check the plugin's requirements (driver, runtime, environment variables) in its "
                      f"documentation; {_DOCTOR}")
        return record
    record.plugin = plugin
    stage("device_count")
    try:
        count = plugin.device_count()
    except (Exception, SystemExit) as err:
        record.status, record.cause = UNAVAILABLE, f"device_count() raised {type(err).__name__}: {err}"
        record.details = traceback.format_exc()
        record.fix = (err.fix if isinstance(err, DeviceUnavailableError) else "") or (
            "install the device's driver/runtime, or check that the hardware is visible to this process; "
            + ("" if isinstance(err, DeviceUnavailableError) else
               "if it is, report this to the plugin's vendor (device_count() should raise DeviceUnavailableError "
               "saying why no device can be used)"))
        return record
    try:
        if isinstance(count, bool):
            raise TypeError("bool")
        count = operator.index(count)
        if count < 0:
            raise ValueError("negative")
    except (TypeError, ValueError):
        record.status = FAILED
        record.cause = f"device_count() returned {short_repr(count)}, not a non-negative int"
        record.fix = "a plugin bug: device_count() must return an int; report it to the plugin's vendor"
        return record
    record.device_count = count
    if count == 0:
        record.status, record.cause = UNAVAILABLE, "the plugin found no devices"
        record.fix = "check that the device and its driver are present and visible to this process"
    return record


def _conflict_record(name: str, conflict: Conflict) -> PluginRecord:
    values = [ep.value for ep in conflict.claims if ep.name == name]
    record = PluginRecord(name, ", ".join(values), FAILED)
    record.cause, record.fix = conflict.explain()
    record._dist = (", ".join(conflict.distributions()), "")
    return record


class _Scan:
    """The entry points of the group, sorted into accepted claims and conflicts."""

    def __init__(self, eps):
        groups: dict[str, list] = {}
        for ep in eps:
            claims = groups.setdefault(canonical(ep.name), [])
            if not any(c.name == ep.name and c.value == ep.value for c in claims):  # one claim found twice
                claims.append(ep)
        core = _core_claims() if any(len(c) > 1 for c in groups.values()) else set()
        #: accepted name -> its entry point
        self.accepted: dict = {}
        #: name -> the Conflict it is part of (refused names, and accepted core names others also claim)
        self.conflicts: dict[str, Conflict] = {}
        for claims in groups.values():
            if len(claims) == 1:
                self.accepted[claims[0].name] = claims[0]
                continue
            kept = next((ep for ep in claims if (ep.name, ep.value) in core), None)
            conflict = Conflict(claims, kept)
            for ep in claims:
                self.conflicts.setdefault(ep.name, conflict)
            if kept is not None:
                self.accepted[kept.name] = kept

    def names(self) -> dict[str, str]:
        """Every claimed name -> its entry point value(s), in discovery order, without the claims refused in favour
        of the hwadapter distribution's own."""
        out: dict[str, str] = {}
        for name, conflict in self.conflicts.items():
            if conflict.kept is None:
                out[name] = ", ".join(ep.value for ep in conflict.claims if ep.name == name)
        out.update((name, ep.value) for name, ep in self.accepted.items())
        return out


def _listed() -> list:
    """The group's entry points: stevedore's (through its cache), or importlib's where a file-size limit is set,
    since stevedore writes its cache file (about 10 KiB per environment) without checking for room, and that write
    kills a process that left SIGXFSZ at its default."""
    if diskroom.file_limit() is not None:
        return list(importlib.metadata.entry_points(group=GROUP))  # what stevedore would list, no file written
    # names=[]: stevedore lists the group and loads none of it
    return NamedExtensionManager(GROUP, names=[], on_missing_entrypoints_callback=None).list_entry_points()


class _Registry:
    """Entry-point names are read once; each plugin is loaded on its first use."""

    def __init__(self):
        self._lock = threading.RLock()
        self._names: dict[str, str] | None = None
        self._scan: _Scan | None = None
        self._records: dict[str, PluginRecord] = {}
        self._loading: set = set()
        #: Called with the step about to run while loading ("import", "construct", "device_count"): the child
        #: process of `hwadapter doctor` reports it, so a crash or hang is attributed to its step.
        self.on_stage: Callable[[str], None] | None = None

    def entry_points(self) -> dict[str, str]:
        """name -> entry point value, in discovery order; a conflicting name maps to all its values."""
        with self._lock:
            if self._names is None:
                scan = _Scan(_listed())
                self._scan, self._names = scan, scan.names()
                self._warn(scan)
            return self._names

    def _warn(self, scan: _Scan) -> None:
        for conflict in {id(c): c for c in scan.conflicts.values()}.values():
            log.warning("plugin conflict: %s. Fix: %s", *conflict.explain())
        unknown = [n for n in config.plugins if n not in self._names]
        if unknown:
            log.warning("HWADAPTER_PLUGINS names %s, which no installed plugin provides (installed: %s)",
                        ", ".join(map(repr, unknown)), ", ".join(self._names) or "none")

    @property
    def conflicts(self) -> dict[str, Conflict]:
        """name -> the Conflict over it (doctor reports each)."""
        self.entry_points()
        return dict(self._scan.conflicts)

    def precheck(self, name: str) -> PluginRecord | None:
        """The record of a plugin that is not to be imported (conflict, disabled, invalid name), decided without
        importing anything; None when it would be imported (or no entry point has that name)."""
        value = self.entry_points().get(name)
        if value is None:
            return None
        conflict = self._scan.conflicts.get(name)
        if conflict is not None and conflict.kept is None:
            return _conflict_record(name, conflict)
        return _refusal(PluginRecord(name, value))

    def get(self, name: str) -> PluginRecord | None:
        """The record of plugin `name`, loading it now if needed; None if no entry point has that name."""
        if not isinstance(name, str):
            return None
        record = self._records.get(name)
        if record is not None:
            return record
        with self._lock:
            record = self._records.get(name)
            if record is None:
                value = self.entry_points().get(name)
                if value is None:
                    return None
                if name in self._loading:  # the plugin asked for itself while importing or constructing
                    return PluginRecord(name, value, UNAVAILABLE, cause="the plugin is still being loaded",
                                        fix="a plugin must not use hwadapter devices while it is being loaded")
                self._loading.add(name)
                try:
                    record = self.precheck(name) or _load(name, value, self._scan.accepted.get(name), self.on_stage)
                finally:
                    self._loading.discard(name)
                self._records[name] = record
                if not record.ok:  # INFO: an optional plugin without a device is normal; doctor and devices show it
                    log.info("plugin %s", record.explain())
            return record

    def all(self) -> list[PluginRecord]:
        """Every plugin's record, loading each."""
        return [r for r in (self.get(n) for n in list(self.entry_points())) if r is not None]

    def loaded(self) -> list[PluginRecord]:
        """The records of plugins loaded so far, without loading any."""
        return list(self._records.values())

    def reset(self) -> None:
        """Forget everything, so the next use rescans entry points (after installing a plugin)."""
        global _dist_index
        with self._lock:
            ExtensionManager.ENTRY_POINT_CACHE.pop(GROUP, None)
            try:  # stevedore also memoises per sys.path in memory, which would hide a plugin installed just now
                from stevedore import _cache  # lazy: stevedore's private module, absent from some versions
                _cache._c._internal.clear()
            except Exception:
                pass
            importlib.invalidate_caches()
            _dist_index = None
            self._names, self._scan, self._records = None, None, {}


registry = _Registry()
