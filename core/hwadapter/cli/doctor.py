"""`hwadapter doctor`: each plugin that is not ok with its cause and fix, the settings, and a summary."""
from __future__ import annotations

import sys

from rich.text import Text

from hwadapter.runtime.discovery import device_list

from .common import _MARK, STATUS_STYLE, _console, _dist_text, _versions
from .probe import _add_timeout, _probe_limit, probe_all
from .settings import _check_settings, _conflict_checks


def _add_doctor(sub) -> None:
    p = sub.add_parser("doctor", help="explain every plugin that is not ok, and how to fix it; check settings",
                       description="Loads and checks every plugin in a child process with a time limit (import, "
                                   "device count, device 0's runtime, kernels, compiler and subgraph backends), prints "
                                   "the cause and the fix for each that is not ok (and a line for each that is), and "
                                   "checks the HWADAPTER_* settings. Exit status 1 when a plugin is broken (failed, "
                                   "incompatible, crashed, hung, or claimed twice) or a setting is FAIL.")
    p.add_argument("-v", "--verbose", action="store_true", help="also print the traceback of each failure")
    p.add_argument("--strict", action="store_true",
                   help="also exit 1 on warnings and on plugins without a usable device")
    _add_timeout(p)
    p.set_defaults(func=_cmd_doctor)


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
        problems.append("compiler backend unavailable on " + ", ".join(no_codegen))
    if bad_settings:
        problems.append(f"{len(bad_settings)} setting(s) need fixing")
    failing = bool(broken or conflicts or bad_settings)
    say("Summary: " + ("; ".join(problems) if problems else "everything is in order"),
        "bold red" if failing else "bold")
    if failing or (strict and (unavailable or warnings or not infos)):
        return 1
    return 0
