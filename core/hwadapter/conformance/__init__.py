"""The conformance kit: checks that a device plugin keeps hwadapter's contracts, section by section.

`run("acme")` runs every section in a child pytest process with a time limit and returns a KitResult; the same
sections run from a vendor's own `pytest --hwadapter-device acme` (pytest_plugin, entry point pytest11 `hwadapter`).
This package adds nothing heavy to `import hwadapter`, which the pytest plugin's import (in every pytest run where
hwadapter is installed) already costs.
"""
from __future__ import annotations

from .results import SECTIONS, Failure, KitResult, SectionResult


def run(device_type: str, sections=None, *, timeout: float = 120, report: str | None = None,
        junit: str | None = None, progress: bool = True) -> KitResult:
    """Run the kit's sections (all by default) against `device_type`, each in a child process limited to `timeout`
    seconds; write a Markdown report and/or a JUnit XML file when asked."""
    from .runner import run_kit  # lazy: the runner imports hwadapter's frontend, which this package must not
    return run_kit(device_type, sections, timeout=timeout, report=report, junit=junit, progress=progress)


__all__ = ["SECTIONS", "run", "KitResult", "SectionResult", "Failure"]
