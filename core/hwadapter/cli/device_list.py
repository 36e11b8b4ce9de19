"""`hwadapter devices`: every installed plugin, its status and its devices, as a table or JSON."""
from __future__ import annotations

import json

from rich.table import Table

from hwadapter.api.config import config
from hwadapter.runtime.discovery import device_list

from .common import STATUS_STYLE, _console, _dist_text, _text, _versions
from .probe import _add_timeout, _probe_limit, probe_all


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
