"""`hwadapter conformance TYPE`: the conformance kit against one plugin: progress, a table by section, the levels it
qualifies for, and the report files."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text

from hwadapter.api.errors import HwAdapterError
from hwadapter.conformance import SECTIONS, run

from .common import _console, _positive_seconds

_STYLE = {"passed": "green", "failed": "bold red", "crashed": "bold red", "timeout": "bold red", "skipped": "yellow"}


def _add_conformance(sub) -> None:
    p = sub.add_parser("conformance", help="run the conformance kit against a device type's plugin",
                       description="Runs the conformance kit's sections (discovery, runtime, kernels, autograd, "
                                   "subgraph, codegen, onnx, native, collectives) against the plugin of TYPE, each in a child process with a "
                                   "time limit, and prints passed/failed/skipped per section, the levels the plugin "
                                   "qualifies for and a reproducer command per failure. Exit status 0 when every "
                                   "section run passed, 1 otherwise, 2 for an unknown or unavailable device type.")
    p.add_argument("type", metavar="TYPE", help="the device type (the plugin's entry-point name), e.g. acme")
    p.add_argument("--section", action="append", choices=SECTIONS, metavar="NAME",
                   help=f"run only this section (repeatable): {', '.join(SECTIONS)}")
    p.add_argument("--timeout", type=_positive_seconds, default=120.0, metavar="S",
                   help="seconds each section may take before it is killed and failed (default 120)")
    p.add_argument("--report", metavar="FILE", help="write a Markdown report")
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    p.set_defaults(func=_cmd_conformance)


def _cmd_conformance(args) -> int:
    console = _console()
    try:
        result = run(args.type, args.section, timeout=args.timeout, report=args.report, junit=args.junit,
                     progress=console.is_terminal)
    except HwAdapterError as err:
        _console(stderr=True).print(Text(f"error: {err}", style="bold red"))
        return 2
    table = Table(title=f"conformance of {args.type} ({result.seconds:.1f} s)")
    for col in ("section", "status", "passed", "failed", "skipped", "error", "seconds"):
        table.add_column(col, justify="left" if col in ("section", "status") else "right", no_wrap=True)
    for s in result.sections.values():
        table.add_row(s.name, Text(s.status, style=_STYLE.get(s.status, "")), str(s.passed), str(s.failed),
                      str(s.skipped), str(s.error), f"{s.seconds:.1f}")
    console.print(table)
    for s in result.sections.values():
        if s.note:
            console.print(Text(f"{s.name}: {s.note}", style=_STYLE.get(s.status, "")))
    for f in result.failures:
        first = " / ".join(line.strip() for line in f.message.strip().splitlines()[:2])
        console.print(Text(f"FAIL {f.test}: {first}"[:400], style="red"))
        console.print(Text(f"     reproduce: {f.reproducer}"))
    levels = ", ".join(result.levels) or "no level"
    console.print(Text(f"qualifies for: {levels}", style="bold green" if result.levels else "bold red"))
    for path in (args.report, args.junit):
        if path:
            console.print(f"wrote {path}")
    return 0 if result.ok else 1
