"""The `hwadapter` command: `devices`, `doctor`, `ops`, `cache`, `partition` (`run`, `conformance`, `new-plugin` come
later).

Each subcommand is a pair of functions in `SUBCOMMANDS`: one adds its argparse subparser, one runs it and returns
the exit status. rich is imported here only (the package does not import this module), so `import hwadapter` stays
free of it. `devices` and `doctor` load and check each plugin in a child process with a time limit (`probe_all`), so
a plugin that crashes the interpreter or hangs is reported as that plugin's failure instead of taking them down.
"""
from __future__ import annotations

import argparse
import faulthandler
import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

import hwadapter
from hwadapter.config import FALLBACK_MODES, PROBE_TIMEOUT, config, cpu_kernels, probe_timeout, seconds
from hwadapter.errors import HwAdapterError
from hwadapter.ops import reference
from hwadapter.plugin import API_VERSION, primitive_ops
from hwadapter.runtime.device import devices, parse
from hwadapter.runtime.discovery import FAILED, PluginRecord, device_list, device_names, registry

STATUS_STYLE = {"ok": "green", "unavailable": "yellow", "failed": "bold red", "incompatible": "bold red",
                "disabled": "dim"}
_MARK = {"ok": "ok", "unavailable": "warn", "failed": "FAIL", "incompatible": "FAIL", "disabled": "off"}
#: How many device names `devices --json` lists per plugin (device_count has the total).
JSON_DEVICES = 1024


def _console(stderr: bool = False):
    # soft_wrap: long causes and fixes stay on one line (greppable, copy-pastable) instead of being folded
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _text(value, style: str = ""):
    return Text(str(value), style=style)  # Text, not str: causes may contain [brackets] rich would read as markup


def _api_text(version) -> str | None:
    if version is None:
        return None
    if isinstance(version, tuple) and len(version) == 2 and all(isinstance(v, int) for v in version):
        return f"{version[0]}.{version[1]}"
    try:
        return repr(version)
    except Exception:
        return f"<{type(version).__name__}>"


def _dist_text(info: dict) -> str:
    """'name version' of the distribution declaring a plugin (names only for a conflict's several)."""
    return f"{info['distribution']} {info['version']}".strip()


def _versions() -> tuple[str, str]:
    return hwadapter.__version__, f"{API_VERSION[0]}.{API_VERSION[1]}"


def _records():
    return sorted(registry.all(), key=lambda r: r.name)


def plugin_info(record) -> dict:
    """A JSON-ready summary of one plugin record."""
    dist, version = record.distribution
    return {"type": record.name, "entry_point": record.entry_point, "distribution": dist, "version": version,
            "api_version": _api_text(record.api_version), "levels": record.levels, "status": record.status,
            "device_count": record.device_count if record.ok else 0,
            "devices": device_names(record.name, record.device_count, JSON_DEVICES) if record.ok else [],
            "cause": record.cause, "fix": record.fix}


def codegen_status(record) -> tuple[bool | None, str, set]:
    """(usable, why not, ops it can generate) of a plugin's codegen backend on its device 0; usable is None when the
    plugin has no codegen level."""
    if not record.ok or "codegen" not in record.levels:
        return None, "", set()
    try:
        dev = devices.get(f"{record.name}:0")
        if dev.codegen is None:
            return False, dev.codegen_unavailable or "the plugin returned no backend", set()
        return True, "", set(primitive_ops())
    except Exception as err:  # a vendor's codegen_backend() may raise anything
        return False, f"{type(err).__name__}: {err}", set()


# --- probes: each plugin loaded and checked in a child process --------------------------------------------
_PROTOCOL = "\x1ehwadapter-probe "  # starts every line the child writes for the parent
#: What the child was doing at each stage it reports, for the message when it never finished.
_STEPS = {"start": "starting the probe (before the plugin was imported)", "import": "the import of its module",
          "construct": "its constructor", "device_count": "device_count()", "create_runtime": "create_runtime(0)",
          "register_kernels": "register_kernels", "codegen_backend": "codegen_backend() / available()",
          "subgraph_backend": "subgraph_backend()", "report": "reporting its result"}
_BOOT = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); from hwadapter.cli import probe_main; "
         "sys.exit(probe_main(sys.argv[2], float(sys.argv[3])))")
#: Seconds before its deadline a probe prints its stack, so a hang says where it hangs.
_DUMP_MARGIN = 1.0


def _check(level: str, message: str, fix: str = "") -> list:
    return [level, message, fix]


def _deep_checks(record, stage) -> tuple[list, dict]:
    """What device 0 of an ok plugin does at first use: its runtime, kernels (op names and dtypes checked by the
    registrar), codegen and subgraph backends. Returns (checks as [level, message, fix], facts for the settings)."""
    checks, facts, levels = [], {"kernels": None, "host_memory": None}, record.levels
    if not levels:
        checks.append(_check("FAIL", "the plugin provides no level: it overrides none of register_kernels (op), "
                                     "codegen_backend or subgraph_backend, so no op could run on it",
                             "implement at least one level (docs/writing-a-plugin.md); a plugin bug: report it to "
                             "its vendor"))
    dev = devices.get(f"{record.name}:0")
    stage("create_runtime")
    try:
        facts["host_memory"] = bool(dev.runtime.host_memory)
    except Exception as err:
        checks.append(_failed("create_runtime(0) failed", err, "check the device's driver; if it is fine, report "
                                                               "this to the plugin's vendor"))
        return checks, facts
    if "op" in levels:
        stage("register_kernels")
        try:
            facts["kernels"] = len(dev.kernels.ops())
        except Exception as err:
            checks.append(_failed("register_kernels failed", err, "a plugin bug: report it to its vendor"))
    if "codegen" in levels:
        stage("codegen_backend")
        facts["codegen"], check = _codegen_check(record)
        checks.append(check)
    if "subgraph" in levels:
        stage("subgraph_backend")
        checks += _subgraph_checks(dev)
    return checks, facts


def _failed(what: str, err: Exception, fix: str) -> list:
    return _check("FAIL", f"{what}: {err}", getattr(err, "fix", "") or fix)


def _codegen_check(record) -> tuple[bool, list]:
    usable, why, ops = codegen_status(record)
    if usable:
        return True, _check("ok", f"codegen backend usable: {len(ops)} ops written in kernel primitives compile for it")
    return False, _check("warn", f"codegen backend unavailable: {why}", f"see the cause; until then ops without a "
                                 f"kernel on {record.name} fall back instead of being generated")


def _subgraph_checks(dev) -> list:
    try:
        if dev.subgraph is None:
            return [_check("warn", "subgraph_backend() returned None: graphs run op by op",
                           "a plugin without a subgraph level should not override subgraph_backend")]
    except Exception as err:
        return [_check("FAIL", f"subgraph_backend() raised {type(err).__name__}: {err}",
                       "a plugin bug: report it to its vendor")]
    return []


def probe_main(name: str, deadline: float) -> int:
    """In the child: load plugin `name`, check its device 0, and write the result for the parent (`probe_all`), which
    kills it at `deadline` (time.monotonic(), the same clock in every process)."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the plugin prints goes to stderr, never into the protocol

    def send(kind: str, payload) -> None:
        protocol.write(_PROTOCOL + json.dumps([kind, payload], default=str) + "\n")
        protocol.flush()  # before the next step, which may crash the process

    faulthandler.enable()  # a crash prints the Python stack to stderr, which the parent keeps as the details
    # and so does a hang, just before the parent kills it
    faulthandler.dump_traceback_later(max(deadline - time.monotonic() - _DUMP_MARGIN, 0.1))
    stage = lambda step: send("stage", step)  # noqa: E731
    registry.on_stage = stage
    record = registry.get(name)
    info = plugin_info(record) | {"details": record.details, "checks": []}
    if record.ok:
        info["checks"], facts = _deep_checks(record, stage)
        info.update(facts)
    stage("report")
    send("result", info)
    faulthandler.cancel_dump_traceback_later()
    return 0


def _child_env() -> dict:
    env = dict(os.environ)
    env.update(HWADAPTER_PLUGINS=",".join(config.plugins), HWADAPTER_DISABLE_PLUGINS=",".join(config.disable_plugins),
               HWADAPTER_FALLBACK_DEVICE=config.fallback_device, HWADAPTER_FALLBACK=config.fallback)
    return env


class _Probe:
    """One child process checking one plugin; its output goes to files, so a chatty plugin cannot block it."""

    def __init__(self, name: str, limit: float):
        self.name, self.limit = name, limit
        self.out, self.err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self.deadline = time.monotonic() + limit
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, json.dumps(sys.path), name, repr(self.deadline)],
                                     stdin=subprocess.DEVNULL, stdout=self.out, stderr=self.err, env=_child_env(),
                                     start_new_session=True)  # its own group: a timeout kills what it started too
        self.timed_out = False

    def poll(self) -> bool:
        """True once the child has ended (killing it when past its deadline)."""
        if self.proc.poll() is not None:
            return True
        if time.monotonic() < self.deadline:
            return False
        self.timed_out = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        return True

    def result(self) -> dict:
        """The child's report, or a failed record saying how and where it died."""
        messages, stderr = _messages(self.out), _read(self.err)
        done = [payload for kind, payload in messages if kind == "result"]
        if done and self.proc.returncode == 0 and not self.timed_out:
            return done[-1]
        stages = [payload for kind, payload in messages if kind == "stage"]
        return self._died(stages[-1] if stages else "start", stderr)

    def _died(self, stage: str, stderr: str) -> dict:
        record = PluginRecord(self.name, registry.entry_points().get(self.name, "?"), FAILED)
        step, rc = _STEPS.get(stage, stage), self.proc.returncode
        disable = (f"until then, keep it out of every process with HWADAPTER_DISABLE_PLUGINS={self.name} (a disabled "
                   f"plugin is never imported)")
        if self.timed_out:
            record.cause = f"the plugin did not finish {step} within {self.limit:g} s: it hangs or is very slow"
            record.fix = (f"check the device and its driver (a hung driver, a device held by another process); if it "
                          f"is only slow, raise the limit with HWADAPTER_PROBE_TIMEOUT=<seconds> (or --timeout); "
                          f"{disable}")
        else:
            how = (f"crashed the Python process in {step} (killed by signal {_signal_name(-rc)})" if rc < 0 else
                   f"ended the Python process in {step} (exit status {rc})")
            record.cause = f"the plugin {how}"
            record.fix = (f"a bug in the plugin or its driver: report it to the plugin's vendor with the stack from "
                          f"`hwadapter doctor --verbose`; {disable}")
        return plugin_info(record) | {"details": stderr[-6000:], "checks": []}


def _read(file) -> str:
    file.seek(0)
    text = file.read().decode(errors="replace")
    file.close()
    return text


def _messages(file) -> list:
    """The [kind, payload] lines the child wrote (anything else there is ignored)."""
    out = []
    for line in _read(file).split("\n"):  # not splitlines(): it would split at the protocol's \x1e too
        if line.startswith(_PROTOCOL):
            try:
                kind, payload = json.loads(line[len(_PROTOCOL):])
            except ValueError:
                continue
            out.append((kind, payload))
    return out


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return str(number)


def _settle(info: dict) -> dict:
    """A plugin that loads but fails a check at first use is failed, with that check as its cause."""
    fails = [c for c in info.get("checks", []) if c[0] == "FAIL"]
    if info["status"] == "ok" and fails:
        info["status"], info["cause"], info["fix"] = FAILED, fails[0][1], fails[0][2]
        info["checks"] = [c for c in info["checks"] if c is not fails[0]]
        info["device_count"], info["devices"] = 0, []
    return info


def probe_all(limit: float) -> list[dict]:
    """Every plugin's info, sorted by type: refused ones decided here, the rest loaded and checked in child processes
    (several at a time), each stopped after `limit` seconds."""
    infos, waiting = [], []
    for name in registry.entry_points():
        refused = registry.precheck(name)
        if refused is not None:
            infos.append(plugin_info(refused) | {"details": refused.details, "checks": []})
        else:
            waiting.append(name)
    running: list[_Probe] = []
    slots = max(4, os.cpu_count() or 1)
    while waiting or running:
        while waiting and len(running) < slots:
            running.append(_Probe(waiting.pop(0), limit))
        for probe in [p for p in running if p.poll()]:
            running.remove(probe)
            infos.append(probe.result())
        if running:
            time.sleep(0.02)
    return sorted((_settle(i) for i in infos), key=lambda i: i["type"])


def _probe_limit(args, notes: list) -> float:
    if getattr(args, "timeout", None) is not None:
        return args.timeout
    try:
        return probe_timeout()
    except HwAdapterError as err:
        notes.append(_check("FAIL", str(err), err.fix))
        return PROBE_TIMEOUT


def _positive_seconds(text: str) -> float:
    value = seconds(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _add_timeout(p) -> None:
    p.add_argument("--timeout", type=_positive_seconds, metavar="SECONDS",
                   help="time limit for each plugin's probe (default: HWADAPTER_PROBE_TIMEOUT, else 20)")


# --- devices ----------------------------------------------------------------------------------------------
def _add_devices(sub) -> None:
    p = sub.add_parser("devices", help="list every installed plugin, its status and its devices",
                       description="One row per plugin entry point (group 'hwadapter.plugins'): device type, "
                                   "distribution, plugin API version, levels, status and devices; below the table, "
                                   "why each plugin that is not ok cannot be used. Each plugin is loaded in a child "
                                   "process with a time limit.")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    _add_timeout(p)
    p.set_defaults(func=_cmd_devices)


_PUBLIC = ("type", "entry_point", "distribution", "version", "api_version", "levels", "status", "device_count",
           "devices", "cause", "fix")


def _cmd_devices(args) -> int:
    version, api = _versions()
    infos = probe_all(_probe_limit(args, []))
    if args.json:
        plugins = [{k: i[k] for k in _PUBLIC} for i in infos]
        print(json.dumps({"hwadapter": version, "plugin_api": api, "fallback_device": config.fallback_device,
                          "plugins": plugins}, indent=2))
        return 0
    console = _console()
    if not infos:
        console.print("no plugins installed (entry point group 'hwadapter.plugins'); pip install hwadapter "
                      "provides 'cpu'", markup=False)
        return 0
    console.print(_devices_table(infos, version, api))
    for info in infos:  # below the table, where a narrow terminal leaves them their whole width
        if info["status"] != "ok":
            console.print(_text(f"{info['type']}: {info['status']}: {info['cause']}"), soft_wrap=False)
    if any(i["status"] != "ok" for i in infos):
        console.print("Run `hwadapter doctor` to see how to fix the plugins that are not ok.", markup=False)
    return 0


def _devices_table(infos: list[dict], version: str, api: str) -> Table:
    """type, distribution, api, levels, status, devices: narrow columns that fold, so 80 columns suffice."""
    table = Table(title=f"hwadapter {version} plugins (plugin API {api})", title_justify="left")
    table.add_column("type", no_wrap=True)
    table.add_column("distribution", overflow="fold")
    table.add_column("api", no_wrap=True)
    table.add_column("levels", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("devices", overflow="fold")
    for info in infos:
        listed = device_list(info["type"], info["device_count"]) if info["device_count"] else "0"
        table.add_row(_text(info["type"], "bold"), _text(_dist_text(info)),
                      _text(info["api_version"] or "?"), _text(", ".join(info["levels"]) or "-"),
                      _text(info["status"], STATUS_STYLE.get(info["status"], "")), _text(listed))
    return table


# --- doctor -----------------------------------------------------------------------------------------------
def _add_doctor(sub) -> None:
    p = sub.add_parser("doctor", help="explain every plugin that is not ok, and how to fix it; check settings",
                       description="Loads and checks every plugin in a child process with a time limit (import, "
                                   "device count, device 0's runtime, kernels, codegen and subgraph backends), prints "
                                   "the cause and the fix for each that is not ok (and a line for each that is), and "
                                   "checks the HWADAPTER_* settings. Exit status 1 when a plugin is broken (failed, "
                                   "incompatible, crashed, hung, or claimed twice) or a setting is FAIL.")
    p.add_argument("-v", "--verbose", action="store_true", help="also print the traceback of each failure")
    p.add_argument("--strict", action="store_true",
                   help="also exit 1 on warnings and on plugins without a usable device")
    _add_timeout(p)
    p.set_defaults(func=_cmd_doctor)


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


def _say_plugin(say, info: dict, verbose: bool) -> None:
    head = (f"  {_MARK.get(info['status'], '?'):4} {info['type']} ({_dist_text(info)}, "
            f"entry point {info['entry_point']})")
    if info["status"] == "ok":
        say(f"{head}: ok, {info['device_count']} device(s) {device_list(info['type'], info['device_count'])}; "
            f"levels: {', '.join(info['levels']) or 'none'}", "green")
    else:
        say(f"{head}: {info['status']}: {info['cause']}", STATUS_STYLE.get(info["status"], ""))
        if info["fix"]:
            say(f"       fix: {info['fix']}")
    for level, message, fix in info["checks"]:
        say(f"       {level} {message}", {"warn": "yellow", "FAIL": "bold red"}.get(level, ""))
        if fix:
            say(f"       fix: {fix}")
    if verbose and info.get("details"):
        say("       " + info["details"].rstrip().replace("\n", "\n       "), "dim")


def _cmd_doctor(args) -> int:
    version, api = _versions()
    console = _console()
    say = lambda text, style="": console.print(Text(text, style=style))  # noqa: E731
    say(f"hwadapter {version} (plugin API {api}), Python {sys.version.split()[0]} at {sys.executable}", "bold")
    notes: list = []
    infos = probe_all(_probe_limit(args, notes))
    say("Plugins:", "bold")
    if not infos:
        say("  FAIL no plugin is installed (entry point group 'hwadapter.plugins')", "bold red")
        say("       fix: reinstall hwadapter (pip install --force-reinstall hwadapter), which provides 'cpu'")
    for info in infos:
        _say_plugin(say, info, args.verbose)
    conflicts = _conflict_checks()
    for level, message, fix in conflicts:
        say(f"  {level} {message}", "bold red")
        say(f"       fix: {fix}")
    say("Settings:", "bold")
    settings = notes + _check_settings({i["type"]: i for i in infos})
    for level, message, fix in settings:
        say(f"  {level:4} {message}", {"ok": "green", "warn": "yellow"}.get(level, "bold red"))
        if fix:
            say(f"       fix: {fix}")
    return _summary(say, infos, conflicts, settings, args.strict)


def _summary(say, infos: list[dict], conflicts: list, settings: list, strict: bool) -> int:
    broken = [i["type"] for i in infos if i["status"] in ("failed", "incompatible")]
    unavailable = [i["type"] for i in infos if i["status"] == "unavailable"]
    no_codegen = [i["type"] for i in infos if i.get("codegen") is False]
    warnings = [c for i in infos for c in i["checks"] if c[0] == "warn"] + [s for s in settings if s[0] == "warn"]
    bad_settings = [s for s in settings if s[0] == "FAIL"]
    problems = []
    if broken:
        problems.append(f"{len(broken)} plugin(s) failed to load or are incompatible: " + ", ".join(broken))
    if conflicts:
        problems.append(f"{len(conflicts)} device type(s) claimed by another distribution too")
    if unavailable:
        problems.append(f"{len(unavailable)} plugin(s) have no usable device: " + ", ".join(unavailable))
    if no_codegen:
        problems.append("codegen backend unavailable on " + ", ".join(no_codegen))
    if bad_settings:
        problems.append(f"{len(bad_settings)} setting(s) need fixing")
    failing = bool(broken or conflicts or bad_settings)
    say("Summary: " + ("; ".join(problems) if problems else "everything is in order"),
        "bold red" if failing else "bold")
    if failing or (strict and (unavailable or warnings or not infos)):
        return 1
    return 0


# --- ops --------------------------------------------------------------------------------------------------
def _add_ops(sub) -> None:
    p = sub.add_parser("ops", help="which device types have a kernel for each op (the rest fall back)",
                       description="For each op, the device types with a kernel registered for it and the dtypes "
                                   "it accepts; an op without a kernel on a device falls back to the fallback "
                                   "device (or raises with HWADAPTER_FALLBACK=error).")
    p.add_argument("--device", metavar="TYPE", help="show one device type only (e.g. opencl)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    p.set_defaults(func=_cmd_ops)


def _cmd_ops(args) -> int:
    console, err_console = _console(), _console(stderr=True)
    notes: list[str] = []
    if args.device is not None:
        try:
            types = [devices.get(args.device).type]
        except HwAdapterError as err:
            err_console.print(_text(f"hwadapter ops: {err}", "red"))
            return 2
    else:
        types = [r.name for r in _records() if r.ok]
    fb_type = None
    try:
        fb_type = devices.get(config.fallback_device).type
    except HwAdapterError as err:
        notes.append(f"the fallback device {config.fallback_device!r} cannot be used ({err}); ops without a "
                     f"kernel cannot run")
    table_of = {}
    for t in dict.fromkeys(types + ([fb_type] if fb_type else [])):
        try:
            table_of[t] = devices.get(f"{t}:0").kernels.ops()
        except HwAdapterError as err:
            notes.append(str(err))
            table_of[t] = {}
    generated: dict[str, set] = {}
    for t in types:
        usable, why, gen_ops = codegen_status(registry.get(t))
        generated[t] = gen_ops
        if usable is False:
            notes.append(f"{t}: codegen backend unavailable: {why}")
    ops = sorted(set(reference.KERNELS).union(*(set(v) for v in table_of.values())))

    def missing(t: str) -> str:
        if config.fallback == "error":
            return "no kernel: raises KernelNotFoundError (HWADAPTER_FALLBACK=error)"
        if t == fb_type:
            return "no kernel: raises KernelNotFoundError (it is the fallback device)"
        return f"no kernel: falls back to {fb_type}" if fb_type else "no kernel (no usable fallback device)"

    if args.json:
        print(json.dumps({"fallback_device": fb_type, "fallback": config.fallback, "device_types": types,
                          "ops": {op: {t: table_of[t].get(op) for t in types} for op in ops},
                          "codegen": {t: sorted(generated[t] & set(ops)) for t in types if generated[t]},
                          "notes": notes}, indent=2))
        return 0
    if args.device is not None:
        t = types[0]
        table = Table(title=f"op kernels on {t}", title_justify="left")
        table.add_column("op")
        table.add_column(f"{t} kernel (dtypes)", overflow="fold")
        for op in ops:
            have = table_of[t].get(op)
            if have:
                cell = _text(", ".join(have), "green")
                if "any" not in have:
                    other = ("codegen" if op in generated[t] else
                             f"fall back to {fb_type}" if fb_type and fb_type != t else "have no kernel")
                    cell.append(f" (other dtypes: {other})")
            elif op in generated[t]:
                cell = _text("codegen (generated from kernel primitives)", "cyan")
            else:
                cell = _text(missing(t), "yellow")
            table.add_row(_text(op), cell)
        console.print(table)
        n = sum(1 for op in ops if table_of[t].get(op))
        g = sum(1 for op in ops if not table_of[t].get(op) and op in generated[t])
        console.print(_text(f"{t}: {n} of {len(ops)} ops have a kernel"
                            + (f", {g} more are generated by its codegen backend" if g else "")
                            + (f"; {len(ops) - n - g} have none ({missing(t).split(': ', 1)[-1]})"
                               if len(ops) > n + g else "")))
    else:
        table = Table(title="op kernels per device type (dtypes; 'codegen' = generated from kernel primitives; "
                            "'-' = no kernel, falls back)", title_justify="left")
        table.add_column("op")
        for t in types:
            table.add_column(t, overflow="fold")
        for op in ops:
            table.add_row(_text(op), *(_text(", ".join(table_of[t][op]), "green") if table_of[t].get(op)
                                       else _text("codegen", "cyan") if op in generated[t]
                                       else _text("-", "yellow") for t in types))
        console.print(table)
        for t in types:
            n = sum(1 for op in ops if table_of[t].get(op))
            console.print(_text(f"{t}: {n} of {len(ops)} ops have a kernel"))
    for note in notes:
        err_console.print(_text(f"note: {note}", "yellow"))
    return 0


# --- cache ------------------------------------------------------------------------------------------------
def _add_cache(sub) -> None:
    p = sub.add_parser("cache", help="where compiled kernels and programs are cached, how much; clear them",
                       description="The on-disk caches: compiled kernels (per device type) and compiled subgraph "
                                   "programs. `info` lists their location, entries and bytes; `clear` deletes the "
                                   "entries (they are compiled again when next needed).")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    info = actions.add_parser("info", help="location, entries and bytes of each cache",
                              description="Location, entries and bytes of the kernel cache (per namespace: one per "
                                          "device type) and of the program cache.")
    info.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    info.set_defaults(func=_cmd_cache_info)
    clear = actions.add_parser("clear", help="delete every cached kernel and program",
                               description="Delete every entry of the kernel and program caches (not the "
                                           "directories nor their key). Asks first unless --yes is given.")
    clear.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    clear.set_defaults(func=_cmd_cache_clear)
    p.set_defaults(func=lambda args: _usage(p))


def _usage(parser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _program_cache():
    """(the program cache module, its DiskCache or None), or (None, None) when this build has none; imported only
    here: the program cache sits in the graph layer, which `hwadapter devices` never needs."""
    try:
        from hwadapter.graph import programs
    except ImportError as err:
        if getattr(err, "name", None) in ("hwadapter.graph.programs", "hwadapter.graph"):
            return None, None
        raise
    for name in ("default", "default_cache"):  # a store of its own; without one it shares the kernel cache's
        obj = getattr(programs, name, None)
        obj = obj() if inspect.isfunction(obj) else obj
        if hasattr(obj, "entries") and hasattr(obj, "root"):
            return programs, obj
    return programs, None


def _cache_sets() -> list[tuple[str, object]]:
    """(what, DiskCache) for the kernel cache and, when it lives elsewhere, the program cache."""
    from hwadapter import cache
    kernels = cache.default()
    out = [("kernels", kernels)]
    _, programs = _program_cache()
    if programs is not None and Path(programs.root) != Path(kernels.root):
        out.append(("programs", programs))
    return out


def _entry_rows(label: str, disk, program_namespaces: set) -> list[dict]:
    """One row per namespace of a cache: its entries and their bytes (none when its directory does not exist)."""
    root = Path(disk.root)
    if not root.exists():  # asking must not create it (and its key): nothing was compiled yet
        return [{"cache": label, "namespace": "-", "directory": str(root), "entries": 0, "bytes": 0,
                 "note": "does not exist yet: nothing compiled"}]
    directory = disk.directory
    note = "" if directory == root else (f"not used: unsafe (see the warning above); this process uses "
                                         f"{directory or 'no disk cache'}")
    per: dict[str, list[int]] = {}
    for path in disk.entries():
        try:
            size = path.lstat().st_size
        except OSError:  # removed meanwhile
            continue
        row = per.setdefault(path.parent.parent.name, [0, 0])
        row[0] += 1
        row[1] += size
    if not per:
        return [{"cache": label, "namespace": "-", "directory": str(directory or root), "entries": 0, "bytes": 0,
                 "note": note or "empty"}]
    return [{"cache": "programs" if ns in program_namespaces else label, "namespace": ns,
             "directory": str(directory), "entries": n, "bytes": size, "note": note}
            for ns, (n, size) in sorted(per.items())]


def _program_namespaces() -> set:
    """Namespaces of the kernel cache directory that hold compiled programs (as the program cache names them)."""
    programs, _ = _program_cache()
    names = getattr(programs, "NAMESPACES", None) or [getattr(programs, "NAMESPACE", None)]
    return {n for n in names if isinstance(n, str)}


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _cmd_cache_info(args) -> int:
    err_console = _console(stderr=True)
    try:
        program_ns = _program_namespaces()
        rows = [r for label, disk in _cache_sets() for r in _entry_rows(label, disk, program_ns)]
    except (HwAdapterError, OSError) as err:
        err_console.print(_text(f"hwadapter cache info: {err}", "red"))
        return 1
    programs, _ = _program_cache()
    if args.json:
        print(json.dumps({"configured": str(_configured_dir()), "program_cache": programs is not None,
                          "caches": rows, "entries": sum(r["entries"] for r in rows),
                          "bytes": sum(r["bytes"] for r in rows)}, indent=2))
        return 0
    console = _console()
    table = Table(title=f"hwadapter caches under {_configured_dir()}", title_justify="left")
    for column, justify in (("cache", "left"), ("namespace", "left"), ("entries", "right"), ("size", "right"),
                            ("directory", "left")):
        table.add_column(column, justify=justify, overflow="fold")
    for r in rows:
        table.add_row(_text(r["cache"], "bold"), _text(r["namespace"]), _text(r["entries"]), _text(_size(r["bytes"])),
                      _text(r["directory"]))
    console.print(table)
    console.print(_text(f"total: {sum(r['entries'] for r in rows)} entries, {_size(sum(r['bytes'] for r in rows))}"))
    for r in rows:
        if r["note"] and r["note"] != "empty":
            console.print(_text(f"{r['cache']} ({r['directory']}): {r['note']}", "yellow"))
    if programs is None:
        console.print(_text("program cache: not in this build (hwadapter.graph.programs is missing)", "dim"))
    return 0


def _configured_dir() -> Path:
    from hwadapter import cache
    return cache.default_dir()


def _cmd_cache_clear(args) -> int:
    console, err_console = _console(), _console(stderr=True)
    try:
        sets = [(label, disk) for label, disk in _cache_sets() if Path(disk.root).exists()]
        found = [(disk, p) for _, disk in sets for p in disk.entries()]
    except (HwAdapterError, OSError) as err:
        err_console.print(_text(f"hwadapter cache clear: {err}", "red"))
        return 1
    where = ", ".join(str(disk.directory) for _, disk in sets) or str(_configured_dir())
    if not found:
        console.print(_text(f"nothing to clear: no cached entries in {where}"))
        return 0
    total = sum(_lsize(p) for _, p in found)
    if not args.yes:
        if not sys.stdin.isatty():
            err_console.print(_text(f"hwadapter cache clear: would delete {len(found)} entries ({_size(total)}) in "
                                    f"{where}; not asking without a terminal. Fix: pass --yes", "red"))
            return 2
        try:
            answer = input(f"Delete {len(found)} cached entries ({_size(total)}) in {where}? [y/N] ")
        except EOFError:  # Ctrl-D: no answer is no
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            console.print(_text("nothing deleted"))
            return 1
    for _, disk in sets:
        disk.clear()
    left = sum(len(disk.entries()) for _, disk in sets)
    console.print(_text(f"deleted {len(found) - left} entries ({_size(total)}) in {where}"))
    if left:
        err_console.print(_text(f"{left} entries could not be deleted (written meanwhile, or not ours)", "yellow"))
        return 1
    return 0


def _lsize(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


# --- partition --------------------------------------------------------------------------------------------
def _add_partition(sub) -> None:
    p = sub.add_parser("partition", help="split a graph over devices and show the plan (nodes, copies, memory)",
                       description="Read a graph written by Graph.to_json() (a JSON file: json.dump(graph.to_json(), "
                                   "f)), run the optimisation passes, partition it over the devices in priority "
                                   "order, and print the plan's summary: nodes per device, subgraphs, fallbacks, "
                                   "copies, planned vs naive peak memory, passes.")
    p.add_argument("graph", metavar="GRAPH.json", help="the graph, as written by Graph.to_json()")
    p.add_argument("--device", action="append", metavar="DEVICE", dest="devices",
                   help="a device to place nodes on, highest priority first; repeat it (default: cpu)")
    p.add_argument("--svg", metavar="FILE", help="also draw the plan as SVG: nodes coloured by device, subgraphs boxed")
    p.add_argument("--min-subgraph", type=_positive_int, default=2, metavar="N",
                   help="smallest region of one device handed to its subgraph backend (default 2)")
    p.add_argument("--no-passes", action="store_true", help="partition the graph as written: no optimisation pass")
    p.add_argument("--disable-pass", action="append", default=[], metavar="PASS",
                   help="switch one optimisation pass off (repeatable), e.g. fold, cse, dce, fold_batch_norm")
    p.set_defaults(func=_cmd_partition)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


class _BadInput(Exception):
    """What is wrong with the command's input, worded for the user (exit status 2)."""


def load_graph(path: str):
    """The Graph in a JSON file written from Graph.to_json(); _BadInput saying what is wrong with it otherwise."""
    from hwadapter.graph import Graph
    fix = "write it with json.dump(graph.to_json(), f) (graph: hwadapter.jit.get_graph(fn, *args))"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise _BadInput(f"{path}: is a directory, not a graph file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise _BadInput(f"{path}: cannot be read ({err})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        ended = err.msg.startswith("Unterminated") or err.pos >= len(text.rstrip())
        cut = " (the file ends too early: is it truncated?)" if ended else ""
        raise _BadInput(f"{path}: not valid JSON: {err.msg} (line {err.lineno}, column {err.colno}){cut}. "
                        f"Fix: {fix}") from None
    except RecursionError:
        raise _BadInput(f"{path}: not valid JSON (nested too deeply). Fix: {fix}") from None
    if not isinstance(doc, dict):
        raise _BadInput(f"{path}: holds a JSON {type(doc).__name__}, not a graph (an object with inputs, outputs, "
                        f"values and nodes). Fix: {fix}")
    try:
        graph = Graph.from_json(doc)
    except KeyError as err:
        raise _BadInput(f"{path}: not a graph written by Graph.to_json(): {err} is missing. Fix: {fix}") from None
    except (TypeError, ValueError, AttributeError, IndexError) as err:
        raise _BadInput(f"{path}: not a graph written by Graph.to_json(): {type(err).__name__}: {err}. "
                        f"Fix: {fix}") from None
    validate = getattr(graph, "validate", None)
    if validate is not None:
        try:
            validate()
        except HwAdapterError as err:
            raise _BadInput(f"{path}: {err}") from None
    return graph


def _partitioner():
    """The function hwadapter.graph.partition, or None when this build has no partitioner."""
    import importlib

    import hwadapter.graph as graph
    module = "hwadapter.graph.partition"
    for find in (lambda: getattr(graph, "partition", None), lambda: importlib.import_module(module)):
        try:
            fn = find()
        except ImportError as err:  # a missing module of the partitioner's is "none"; any other one is a bug, raised
            if (getattr(err, "name", None) or "").startswith(module):
                continue
            raise
        fn = getattr(fn, "partition", None) if inspect.ismodule(fn) else fn  # the submodule shadows the function
        if callable(fn):
            return fn
    return None


def _cmd_partition(args) -> int:
    console, err_console = _console(), _console(stderr=True)

    def fail(message: str, status: int) -> int:
        err_console.print(_text(f"hwadapter partition: {message}", "red"))
        return status

    try:
        graph = load_graph(args.graph)
    except _BadInput as err:
        return fail(str(err), 2)
    names = args.devices or ["cpu"]
    try:
        targets = [str(devices.get(d)) for d in names]
    except HwAdapterError as err:
        return fail(f"{err}", 2)
    partition = _partitioner()
    if partition is None:
        return fail("this build has no partitioner (the module hwadapter.graph.partition is missing). Fix: update "
                    "hwadapter to a version with static graphs (issue 9)", 1)
    passes = False if args.no_passes else (frozenset(args.disable_pass) if args.disable_pass else True)
    try:
        plan = partition(graph, devices=targets, min_subgraph=args.min_subgraph, passes=passes)
    except HwAdapterError as err:
        return fail(f"cannot partition {args.graph} over {', '.join(targets)}: {err}", 1)
    summary = plan.summary()
    print(summary) if isinstance(summary, str) else console.print(summary)
    if args.svg:
        try:
            plan.save_svg(args.svg)
        except (OSError, HwAdapterError, ImportError) as err:  # ImportError: a build without the drawing module
            return fail(f"cannot write {args.svg}: {type(err).__name__}: {err}", 1)
        console.print(_text(f"wrote {args.svg}"))
    return 0


#: (add_parser(subparsers), ...) for every subcommand; `run`, `conformance` and `new-plugin` are added here later.
SUBCOMMANDS: list[Callable] = [_add_devices, _add_doctor, _add_ops, _add_cache, _add_partition]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `hwadapter` command."""
    version, api = _versions()
    parser = argparse.ArgumentParser(prog="hwadapter", description="Plug accelerators into hwadapter through "
                                     "pip-installable plugins: inspect plugins, devices and kernels.")
    parser.add_argument("--version", action="version", version=f"hwadapter {version} (plugin API {api})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `hwadapter` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `hwadapter ops | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
