"""What a kit run found: per section the counts and the failures, each with its one-line reproducer."""
from __future__ import annotations

from dataclasses import dataclass, field

#: The kit's sections, in the order they run.
SECTIONS = ("discovery", "runtime", "kernels", "autograd", "subgraph", "codegen", "onnx", "native", "collectives")
#: level -> the sections that must pass (with at least one test passed in the last one) to qualify for it.
LEVEL_SECTIONS = {"op": ("discovery", "runtime", "kernels"), "subgraph": ("discovery", "runtime", "subgraph"),
                  "compiler": ("discovery", "runtime", "codegen"),
                  # hosts outside Python (the Paddle bridge): its native library, its memory serving the kernels
                  "native": ("discovery", "runtime", "native")}


@dataclass
class Failure:
    """One failed (or crashed, or timed-out) test."""
    test: str
    message: str
    reproducer: str


@dataclass
class SectionResult:
    """One section's outcome: `status` is "passed", "failed", "skipped", "crashed" or "timeout"."""
    name: str
    status: str = "passed"
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    error: int = 0
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    skips: list[str] = field(default_factory=list)
    note: str = ""
    #: (test name, outcome "passed"/"failed"/"error"/"skipped", message) of every test that ran: the JUnit file's
    tests: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "skipped")

    def __getitem__(self, key):  # counts also by name: result.sections["runtime"]["failed"]
        return getattr(self, key)


@dataclass
class KitResult:
    """The whole run: `.sections` (name -> SectionResult), `.levels` qualified for, `.ok`."""
    device_type: str
    sections: dict[str, SectionResult] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.sections) and all(s.ok for s in self.sections.values())

    @property
    def levels(self) -> list[str]:
        """The levels the plugin qualifies for: every section a level needs ran and passed, the last one with a test
        passed (a section skipped because the plugin has no such backend qualifies for nothing)."""
        out = []
        for level, needed in LEVEL_SECTIONS.items():
            got = [self.sections.get(n) for n in needed]
            onnx = self.sections.get("onnx")
            if all(s is not None and s.status == "passed" for s in got) and got[-1].passed > 0 and \
                    (level != "op" or onnx is None or onnx.ok):
                out.append(level)
        return out

    @property
    def failures(self) -> list[Failure]:
        return [f for s in self.sections.values() for f in s.failures]
