"""`hwadapter cache info|clear`: list the kernel and program caches, or delete their entries."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.table import Table

from hwadapter.api.errors import HwAdapterError

from .common import _console, _text, _usage
from .cache_store import (_cache_sets, _configured_dir, _entry_rows, _lsize, _program_cache, _program_namespaces,
                          _size)


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
    failed = [f for _, disk in sets for f in disk.clear()]
    left = sum(len(disk.entries()) for _, disk in sets)
    gone = total - sum(_lsize(p) for p, _ in failed)
    console.print(_text(f"deleted {max(0, len(found) - left)} entries ({_size(gone)}) in {where}"))
    if failed:
        why = "; ".join(f"{p}: {reason}" for p, reason in failed[:3]) + ("; ..." if len(failed) > 3 else "")
        err_console.print(_text(f"hwadapter cache clear: {len(failed)} entries could not be deleted ({why}). Fix: "
                                f"make the cache directory writable by you, or point HWADAPTER_CACHE_DIR elsewhere",
                                "red"))
        return 1
    if left:
        err_console.print(_text(f"{left} entries were written meanwhile by another process", "yellow"))
        return 1
    return 0
