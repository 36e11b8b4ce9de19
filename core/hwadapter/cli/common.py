"""What every subcommand shares: the rich consoles, plugin summaries, checks and small argument types."""
from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.text import Text

import hwadapter
from hwadapter.api.config import seconds
from hwadapter.plugin import API_VERSION, primitive_ops
from hwadapter.runtime.device import devices
from hwadapter.runtime.discovery import device_names, registry

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


#: The plugin API's name of a level -> the word users read: the compiler level is provided by `codegen_backend`, but
#: `new-plugin --level`, the conformance kit's verdict and the docs all call it "compiler".
LEVEL_WORDS = {"codegen": "compiler"}


def level_words(levels) -> list[str]:
    """The levels as users read them ("op", "subgraph", "compiler")."""
    return [LEVEL_WORDS.get(level, level) for level in levels]


def plugin_info(record) -> dict:
    """A JSON-ready summary of one plugin record."""
    dist, version = record.distribution
    return {"type": record.name, "entry_point": record.entry_point, "distribution": dist, "version": version,
            "api_version": _api_text(record.api_version), "levels": level_words(record.levels),
            "status": record.status,
            "device_count": record.device_count if record.ok else 0,
            "devices": device_names(record.name, record.device_count, JSON_DEVICES) if record.ok else [],
            "cause": record.cause, "fix": record.fix}


def codegen_status(record) -> tuple[bool | None, str, set]:
    """(usable, why not, ops it can generate) of a plugin's compiler backend (codegen_backend) on its device 0; usable
    is None when the plugin has no compiler level."""
    if not record.ok or "compiler" not in level_words(record.levels):
        return None, "", set()
    try:
        dev = devices.get(f"{record.name}:0")
        if dev.codegen is None:
            return False, dev.codegen_unavailable or "the plugin returned no backend", set()
        return True, "", set(primitive_ops())
    except Exception as err:  # a vendor's codegen_backend() may raise anything
        return False, f"{type(err).__name__}: {err}", set()


def _check(level: str, message: str, fix: str = "") -> list:
    return [level, message, fix]


def _usage(parser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _whole_number(low: int, words: str):
    """An argparse type: a whole number of at least `low` (`words` says which, for the error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not {words}")
        return value
    return parse


_positive_int = _whole_number(1, "a positive whole number")


def _positive_seconds(text: str) -> float:
    value = seconds(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value
