"""The `hwadapter` command: `devices`, `doctor`, `ops`, `cache`, `partition`, `run`, `conformance`, `new-plugin`
(and `paddle`, the Paddle bridge's).

Each subcommand is a function in `SUBCOMMANDS` that adds its argparse subparser, whose `func` runs it and returns
the exit status; one module per command family. rich is imported here only (`hwadapter` does not import this
package), so `import hwadapter` stays free of it. `devices` and `doctor` load and check each plugin in a child
process with a time limit (`probe_all`), so a plugin that crashes the interpreter or hangs is reported as that
plugin's failure instead of taking them down.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

from hwadapter.runtime.device import devices

from .cache import _add_cache
from .common import _versions, codegen_status, plugin_info
from .conformance import _add_conformance
from .device_list import _add_devices
from .doctor import _add_doctor
from .graph_file import load_graph
from .new_plugin import _add_new_plugin
from .ops import _add_ops
from .paddle import _add_paddle
from .partition import _add_partition, _partitioner  # noqa: F401 (tests and tools look it up here)
from .probe import probe_all
from .probe_child import probe_main
from .run import _add_run

__all__ = ["SUBCOMMANDS", "build_parser", "codegen_status", "devices", "load_graph", "main", "plugin_info",
           "probe_all", "probe_main"]

#: (add_parser(subparsers), ...) for every subcommand.
SUBCOMMANDS: list[Callable] = [_add_devices, _add_doctor, _add_ops, _add_cache, _add_partition, _add_run,
                               _add_new_plugin, _add_conformance, _add_paddle]


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
