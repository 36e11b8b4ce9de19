"""The kit's report as Markdown and as JUnit XML (one testsuite per section)."""
from __future__ import annotations

import datetime
import xml.etree.ElementTree as ET

from .results import KitResult


def write_markdown(result: KitResult, path: str) -> None:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [f"# hwadapter conformance: {result.device_type}", "",
           f"{when}; {result.seconds:.1f} s; verdict: **{'PASS' if result.ok else 'FAIL'}**; qualifies for: "
           f"{', '.join(result.levels) or 'no level'}", "",
           "| section | status | passed | failed | skipped | error | seconds | note |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for s in result.sections.values():
        out.append(f"| {s.name} | {s.status} | {s.passed} | {s.failed} | {s.skipped} | {s.error} | {s.seconds:.1f} | "
                   f"{_cell(s.note)} |")
    failures = result.failures
    if failures:
        out += ["", "## Failures", ""]
        for f in failures:
            out += [f"### {f.test}", "", "```", f.message.strip() or "(no message)", "```", "",
                    f"Reproduce: `{f.reproducer}`", ""]
    skips = [(s.name, k) for s in result.sections.values() for k in s.skips]
    if skips:
        out += ["", "## Skipped", ""] + [f"- {name}: {_cell(k)}" for name, k in skips]
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")[:300]


def write_junit(result: KitResult, path: str) -> None:
    root = ET.Element("testsuites", name=f"hwadapter conformance {result.device_type}", time=f"{result.seconds:.3f}")
    for s in result.sections.values():
        suite = ET.SubElement(root, "testsuite", name=s.name, tests=str(len(s.tests)), failures=str(s.failed),
                              errors=str(s.error), skipped=str(s.skipped), time=f"{s.seconds:.3f}")
        repro = {f.test: f.reproducer for f in s.failures}
        for name, outcome, message in s.tests:
            case = ET.SubElement(suite, "testcase", classname=f"hwadapter.conformance.sections.test_{s.name}",
                                 name=name)
            if outcome in ("failed", "error"):
                tag = "failure" if outcome == "failed" else "error"
                el = ET.SubElement(case, tag, message=message.splitlines()[0][:200] if message else outcome)
                el.text = f"{message}\n\nReproduce: {repro.get(name, '')}"
            elif outcome == "skipped":
                ET.SubElement(case, "skipped", message=message[:500])
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
