"""`hwadapter new-plugin`: writes a standalone plugin package whose device is emulated over host memory.

The templates (templates/<part>/..., `*.tmpl`, shipped as package data) are filled in with string.Template: `$name` is
the device type (pyproject, README and tests only: the plugin's code never names its own type), `$Name` its class
prefix, `$package` the import name. `common/` goes into every package, `<level>/` adds that level's plugin.
"""
from __future__ import annotations

import importlib.util
import keyword
import re
import string
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..api.errors import InvalidArgumentError
from ..api.interfaces import API_VERSION
from ..runtime.discovery import canonical, registry

TEMPLATES = Path(__file__).with_name("templates")
#: The levels a scaffold can start from (the names the conformance kit reports a plugin qualifies for).
LEVELS = ("op", "subgraph", "compiler")
#: Types taken whether or not their plugin is installed here: the reference plugins and the names of the packages
#: hwadapter ships (hwadapter_kp, hwadapter_paddle), which the generated package's import name would shadow.
RESERVED = {"cpu": "the CPU reference plugin", "opencl": "the OpenCL reference plugin",
            "cuda": "the CUDA reference plugin", "kp": "hwadapter's kernel primitives (hwadapter_kp)",
            "paddle": "hwadapter's Paddle bridge (hwadapter_paddle)"}
_VALID = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Generated:
    """What `generate` wrote: the package folder and its files, relative to it."""
    root: Path
    files: list[Path]
    name: str
    level: str


def _refuse(name: str, why: str, suggestion: str | None = None, fix: str = "") -> InvalidArgumentError:
    fix = fix or (f"hwadapter new-plugin {suggestion}" if suggestion else "choose another name: lower-case letters, "
                  "digits and underscores, starting with a letter")
    return InvalidArgumentError(f"{name!r} cannot be a plugin name: {why}. Fix: {fix}", fix=fix)


def _suggest(name: str) -> str | None:
    """The nearest valid name: lower case, runs of other characters as one underscore, a leading letter."""
    text = re.sub(r"[^a-z0-9_]+", "_", name.strip().lower()).strip("_")
    text = re.sub(r"^[0-9_]+", "", text)
    return text if _VALID.fullmatch(text) and not keyword.iskeyword(text) and text != name else None


def installed_types() -> dict[str, str]:
    """Casefolded device type -> its entry point, for every plugin installed here (nothing is loaded)."""
    return {canonical(n): v for n, v in registry.entry_points().items()}


def check_name(name: str) -> None:
    """Raise InvalidArgumentError, with the fix, when `name` cannot be a new device type here."""
    if not _VALID.fullmatch(name):
        suggestion = _suggest(name)
        if name.lower() != name and _VALID.fullmatch(name.lower()):
            why = (f"device types are lower case (users write set_device('{name.lower()}:0'), and entry-point names "
                   f"that differ only in case claim the same type)")
        elif not name:
            why = "it is empty"
        elif not name[0].isalpha():
            why = "a device type starts with a letter"
            suggestion = None
        else:
            why = ("a device type is a lower-case Python identifier (ASCII letters, digits and underscores, starting "
                   f"with a letter): it is written in device strings ('{name}:0' would not parse) and names the "
                   f"package hwadapter_<name>")
        if suggestion is not None:
            try:
                check_name(suggestion)
            except InvalidArgumentError:  # what it would become is taken too: suggesting it sends them round
                fix = f"choose another name ({suggestion!r} cannot be one here either)"
                raise _refuse(name, why, fix=fix) from None
        raise _refuse(name, why, suggestion)
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise _refuse(name, "it is a Python keyword", fix=f"hwadapter new-plugin {name}_dev, or another name")
    if name in RESERVED:
        raise _refuse(name, f"it is taken by {RESERVED[name]}", fix="choose a name of your own, e.g. your "
                      "company's or your chip's")
    taken = installed_types().get(canonical(name))
    if taken is not None:
        raise _refuse(name, f"an installed plugin already registers the device type {name!r} (entry point "
                      f"{taken}); two plugins of one type are a conflict and neither loads",
                      fix="choose another name (`hwadapter devices` lists the types taken)")
    if importlib.util.find_spec(f"hwadapter_{name}") is not None:
        raise _refuse(name, f"a Python package named hwadapter_{name} is already importable here, which the new "
                      "package would shadow", fix="choose another name, or uninstall that package first")


def class_prefix(name: str) -> str:
    """`acme_npu` -> `AcmeNpu`: the prefix of the generated classes."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def _fields(name: str, level: str) -> dict:
    major, minor = API_VERSION
    release = ".".join(__version__.split(".")[:2])
    return {"name": name, "Name": class_prefix(name), "package": f"hwadapter_{name}", "level": level,
            "hwadapter_version": release, "api_major": major, "api_minor": minor}


def _render(template: Path, fields: dict) -> str:
    try:
        return string.Template(template.read_text()).substitute(fields)
    except (KeyError, ValueError) as err:  # a template bug, not the user's
        raise RuntimeError(f"scaffold template {template} is broken: {err!r}") from None


def plan(name: str, level: str) -> dict[Path, str]:
    """Relative path -> text of every file of the package for `name` at `level` (nothing is written)."""
    if level not in LEVELS:
        raise InvalidArgumentError(f"unknown level {level!r}. Fix: use one of {', '.join(LEVELS)}",
                                   fix=f"--level {' | '.join(LEVELS)}")
    fields = _fields(name, level)
    fields["level_notes"] = _render(TEMPLATES / level / "README-level.md.tmpl", fields).rstrip("\n")
    out: dict[Path, str] = {}
    for part in ("common", level):
        for template in sorted((TEMPLATES / part).rglob("*.tmpl")):
            rel = template.relative_to(TEMPLATES / part)
            if rel.name == "README-level.md.tmpl":
                continue
            rel = Path(*(fields["package"] if p == "PKG" else p for p in rel.with_suffix("").parts))
            out[rel] = _render(template, fields)
    return out


def generate(name: str, level: str = "op", directory: str | Path = ".", force: bool = False) -> Generated:
    """Write `hwadapter-<name>/` under `directory`; InvalidArgumentError for a name or folder it must not use."""
    check_name(name)
    files = plan(name, level)
    root = Path(directory) / f"hwadapter-{name}"
    if root.exists() and not force:
        raise InvalidArgumentError(f"{root} already exists. Fix: choose another --dir, remove it, or pass --force to "
                                   f"write the generated files over it (other files there are kept)",
                                   fix="--force, another --dir, or remove the folder")
    if root.exists() and not root.is_dir():
        raise InvalidArgumentError(f"{root} exists and is not a folder. Fix: remove it or choose another --dir",
                                   fix="remove it or choose another --dir")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Generated(root, sorted(files), name, level)
