"""`hwadapter new-plugin NAME --level op|subgraph|compiler`: a standalone plugin package to start from."""
from __future__ import annotations

import shlex
from pathlib import Path

from rich.text import Text

from hwadapter.api.errors import InvalidArgumentError
from hwadapter.scaffold import LEVELS, generate

from .common import _console


def _add_new_plugin(sub) -> None:
    p = sub.add_parser("new-plugin", help="write a plugin package, hwadapter-NAME/, that passes the conformance kit",
                       description="Writes hwadapter-NAME/: a standalone distribution (pyproject.toml with the entry "
                                   "point, the plugin package hwadapter_NAME, a README with the next steps, a test "
                                   "that runs the conformance kit) whose device is emulated over host memory, so it "
                                   "installs and passes `hwadapter conformance NAME` before you change a line. Exit "
                                   "status 2 when NAME cannot be a new device type here or the folder exists.")
    p.add_argument("name", metavar="NAME", help="the device type users will write, e.g. acme for set_device('acme:0'): "
                                                "lower case, a Python identifier, not a type already installed")
    p.add_argument("--level", choices=LEVELS, default="op",
                   help="op: a runtime and kernels per op (default); subgraph: a backend compiling whole subgraphs; "
                        "compiler: a C code generator for kernel primitives")
    p.add_argument("--dir", default=".", metavar="PATH", help="where to create hwadapter-NAME/ (default: here)")
    p.add_argument("--force", action="store_true",
                   help="write into an existing hwadapter-NAME/, replacing the files it generates")
    p.set_defaults(func=_cmd_new_plugin)


def _cmd_new_plugin(args) -> int:
    try:
        made = generate(args.name, args.level, args.dir, force=args.force)
    except InvalidArgumentError as err:
        _console(stderr=True).print(Text(f"error: {err}", style="bold red"))
        return 2
    console = _console()
    say = lambda text, style="": console.print(Text(text, style=style))  # noqa: E731
    say(f"Wrote {made.root}/ ({made.level} level, device type {made.name!r}):", "bold")
    for rel in made.files:
        say(f"  {rel}")
    say("Next:", "bold")
    steps = [(install_line(made.root), "[test]: pytest and onnx, which the conformance kit runs on"),
             ("hwadapter devices", f"{made.name}:0 listed"),
             (f"hwadapter conformance {made.name}", "passes before you change a line")]
    width = max(len(command) for command, _ in steps)
    for command, why in steps:
        say(f"  {command:<{width}}  # {why}")
    say(f"  then replace the emulation in {made.root}/hwadapter_{made.name}/ with your device (its README says how)")
    return 0


def install_line(root) -> str:
    """The command that installs a generated package, as the README writes it: `pip install -e './hwadapter-acme[test]'`
    (a relative folder keeps its ./, without which pip would read the name as a package on an index)."""
    path = str(root)
    if not Path(path).is_absolute() and not path.startswith("."):
        path = f"./{path}"
    return f"pip install -e {shlex.quote(path + '[test]')}"
