"""The `hwadapter` command: `devices`, `doctor`, `ops` (subcommands `run`, `conformance`, `new-plugin` come later).

Each subcommand is a pair of functions in `SUBCOMMANDS`: one adds its argparse subparser, one runs it and returns
the exit status. rich is imported here only (the package does not import this module), so `import hwadapter` stays
free of it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

import hwadapter
from hwadapter.config import FALLBACK_MODES, config
from hwadapter.errors import HwAdapterError
from hwadapter.ops import reference
from hwadapter.plugin import API_VERSION, primitive_ops
from hwadapter.runtime.device import devices
from hwadapter.runtime.discovery import registry

STATUS_STYLE = {"ok": "green", "unavailable": "yellow", "failed": "bold red", "incompatible": "bold red",
                "disabled": "dim"}
_MARK = {"ok": "ok", "unavailable": "warn", "failed": "FAIL", "incompatible": "FAIL", "disabled": "off"}


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
            "devices": [f"{record.name}:{i}" for i in range(record.device_count)] if record.ok else [],
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


# --- devices ----------------------------------------------------------------------------------------------
def _add_devices(sub) -> None:
    p = sub.add_parser("devices", help="list every installed plugin, its status and its devices",
                       description="One row per plugin entry point (group 'hwadapter.plugins'): device type, "
                                   "distribution, plugin API version, levels, status, devices, and why a plugin "
                                   "cannot be used.")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    p.set_defaults(func=_cmd_devices)


def _cmd_devices(args) -> int:
    version, api = _versions()
    infos = [plugin_info(r) for r in _records()]
    if args.json:
        print(json.dumps({"hwadapter": version, "plugin_api": api, "fallback_device": config.fallback_device,
                          "plugins": infos}, indent=2))
        return 0
    table = Table(title=f"hwadapter {version} plugins (plugin API {api})", title_justify="left")
    for col in ("type", "distribution", "api", "levels", "status"):
        table.add_column(col, no_wrap=True)
    longest = max((len(d) for i in infos for d in i["devices"]), default=7)
    table.add_column("devices", min_width=min(longest + 1, 24), overflow="fold")
    table.add_column("reason", ratio=1, min_width=20, overflow="fold")
    for info in infos:
        devices = ", ".join(info["devices"]) if info["devices"] else "0"
        table.add_row(_text(info["type"], "bold"), _text(f"{info['distribution']} {info['version']}"),
                      _text(info["api_version"] or "?"), _text(",".join(info["levels"]) or "-"),
                      _text(info["status"], STATUS_STYLE.get(info["status"], "")), _text(devices),
                      _text("" if info["status"] == "ok" else info["cause"]))
    console = _console()
    if not infos:
        console.print("no plugins installed (entry point group 'hwadapter.plugins'); pip install hwadapter "
                      "provides 'cpu'", markup=False)
        return 0
    console.print(table)
    for info in infos:  # repeated below the table: a narrow terminal may have squeezed the reason column
        if info["status"] != "ok":
            console.print(_text(f"{info['type']}: {info['status']}: {info['cause']}"))
    if any(i["status"] != "ok" for i in infos):
        console.print("Run `hwadapter doctor` to see how to fix the plugins that are not ok.", markup=False)
    return 0


# --- doctor -----------------------------------------------------------------------------------------------
def _add_doctor(sub) -> None:
    p = sub.add_parser("doctor", help="explain every plugin that is not ok, and how to fix it; check settings",
                       description="Loads every plugin, prints the cause and the fix for each one that is not ok "
                                   "(and a line for each that is), and checks HWADAPTER_FALLBACK and the fallback "
                                   "device. Exit status 1 when a plugin failed to load or is incompatible.")
    p.add_argument("-v", "--verbose", action="store_true", help="also print the traceback of each failure")
    p.add_argument("--strict", action="store_true",
                   help="also exit 1 on setting problems and on plugins without a usable device")
    p.set_defaults(func=_cmd_doctor)


def _check_settings() -> list[tuple[str, str, str]]:
    """(level, message, fix) for the fallback settings and plugin lists; level is ok, warn or FAIL."""
    out = []
    mode = config.fallback
    if mode in FALLBACK_MODES:
        meaning = ("ops without a device kernel run on the fallback device, with a warning" if mode == "warn"
                   else "ops without a device kernel raise KernelNotFoundError (strict mode)")
        out.append(("ok", f"HWADAPTER_FALLBACK={mode}: {meaning}", ""))
    else:
        out.append(("FAIL", f"HWADAPTER_FALLBACK={mode!r} is not one of {', '.join(FALLBACK_MODES)}",
                    "unset HWADAPTER_FALLBACK (default warn) or set it to 'warn' or 'error'"))
    spec = config.fallback_device
    where = f"fallback device HWADAPTER_FALLBACK_DEVICE={spec!r}"
    try:
        dev = devices.get(spec)
        dev.runtime  # noqa: B018  creating the runtime is part of being usable
        n = len(dev.kernels.ops())
        if n == 0:
            out.append(("warn", f"{where} is {dev}, which has no op kernels: fallback cannot run any op",
                        "set HWADAPTER_FALLBACK_DEVICE to a device whose plugin registers op kernels (cpu)"))
        elif not dev.host_memory:
            out.append(("warn", f"{where} is {dev}, whose memory is not host memory: from_dlpack and host "
                                f"round trips will copy", "use HWADAPTER_FALLBACK_DEVICE=cpu"))
        else:
            out.append(("ok", f"{where} is usable: {dev}, {n} op kernels", ""))
    except HwAdapterError as err:
        out.append(("FAIL", f"{where} cannot be used: {err}",
                    "unset HWADAPTER_FALLBACK_DEVICE (default cpu) or set it to an available device; without it "
                    "ops missing a device kernel cannot run"))
    known = registry.entry_points()
    for name in config.plugins:
        if name not in known:
            out.append(("warn", f"HWADAPTER_PLUGINS names {name!r}, which no installed plugin provides",
                        f"pip install the plugin providing {name!r}, or remove it from HWADAPTER_PLUGINS"))
    for name in config.disable_plugins:
        if name not in known:
            out.append(("warn", f"HWADAPTER_DISABLE_PLUGINS names {name!r}, which no installed plugin provides",
                        "check the spelling (names are device types, as in `hwadapter devices`)"))
    for name, values in sorted(registry.shadowed.items()):
        out.append(("warn", f"several plugins claim device type {name!r}: using {known.get(name)}, ignoring "
                            f"{', '.join(values)}",
                    "uninstall all but one of the distributions that provide it"))
    return out


def _cmd_doctor(args) -> int:
    version, api = _versions()
    console = _console()
    say = lambda text, style="": console.print(Text(text, style=style))  # noqa: E731
    say(f"hwadapter {version} (plugin API {api}), Python {sys.version.split()[0]} at {sys.executable}", "bold")
    records = _records()
    no_codegen: list[str] = []
    say("Plugins:", "bold")
    if not records:
        say("  FAIL no plugin is installed (entry point group 'hwadapter.plugins')", "bold red")
        say("       fix: reinstall hwadapter (pip install --force-reinstall hwadapter), which provides 'cpu'")
    for rec in records:
        dist, ver = rec.distribution
        head = f"  {_MARK.get(rec.status, '?'):4} {rec.name} ({dist} {ver}, entry point {rec.entry_point})"
        if rec.ok:
            devices = ", ".join(f"{rec.name}:{i}" for i in range(rec.device_count))
            say(f"{head}: ok, {rec.device_count} device(s) {devices}; levels: {', '.join(rec.levels) or 'none'}",
                "green")
            usable, why, ops = codegen_status(rec)
            if usable:
                say(f"       codegen backend usable: {len(ops)} ops written in kernel primitives compile for it")
            elif usable is False:
                no_codegen.append(rec.name)
                say(f"       warn codegen backend unavailable: {why}", "yellow")
                say("       fix: see the cause; until then ops without a kernel on "
                    f"{rec.name} fall back instead of being generated")
            continue
        say(f"{head}: {rec.status}: {rec.cause}", STATUS_STYLE.get(rec.status, ""))
        if rec.fix:
            say(f"       fix: {rec.fix}")
        if args.verbose and rec.details:
            console.print(Text("       " + rec.details.rstrip().replace("\n", "\n       "), style="dim"))
    say("Settings:", "bold")
    settings = _check_settings()
    for level, message, fix in settings:
        say(f"  {level:4} {message}", {"ok": "green", "warn": "yellow"}.get(level, "bold red"))
        if fix:
            say(f"       fix: {fix}")
    broken = [r for r in records if r.broken]
    unavailable = [r for r in records if r.status == "unavailable"]
    bad_settings = [s for s in settings if s[0] == "FAIL"]
    problems = []
    if broken:
        problems.append(f"{len(broken)} plugin(s) failed to load or are incompatible: "
                        + ", ".join(r.name for r in broken))
    if unavailable:
        problems.append(f"{len(unavailable)} plugin(s) have no usable device: " + ", ".join(r.name for r in unavailable))
    if no_codegen:
        problems.append("codegen backend unavailable on " + ", ".join(no_codegen))
    if bad_settings:
        problems.append(f"{len(bad_settings)} setting(s) need fixing")
    say("Summary: " + ("; ".join(problems) if problems else "everything is in order"),
        "bold red" if broken else "bold")
    if broken or (args.strict and (unavailable or bad_settings or no_codegen or not records)):
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


#: (add_parser(subparsers), ...) for every subcommand; `run`, `conformance` and `new-plugin` are added here later.
SUBCOMMANDS: list[Callable] = [_add_devices, _add_doctor, _add_ops]


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
