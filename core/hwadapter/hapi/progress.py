"""hw.Model's progress display per epoch: a rich progress bar on a terminal (step/total, loss, metrics, steps per
second), plain lines every log_freq steps elsewhere (logs, CI), one line per epoch with verbose=2, nothing with
verbose=0."""
from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def describe(values: dict) -> str:
    """'loss: 0.1234 - acc: 0.9500' of the numbers in values (lists: one entry per number)."""
    parts = []
    for name, value in values.items():
        if isinstance(value, (list, tuple)):
            parts += [f"{name}: {v:.4f}" for v in value]
        else:
            parts.append(f"{name}: {value:.4f}")
    return " - ".join(parts)


class ProgressBar:
    """One epoch's (or one evaluation's) display: `update(step, values)` after each step, `close(values)` at the
    end. `total` is the number of steps, or None when unknown."""

    def __init__(self, title: str, total: int | None, verbose: int = 1, log_freq: int = 10, file=None):
        self.title, self.total, self.verbose, self.log_freq = title, total, verbose, max(int(log_freq), 1)
        self.file = file if file is not None else sys.stdout
        self.start, self.step = time.perf_counter(), 0
        self._bar = None
        if verbose == 1:
            console = Console(file=self.file)
            if console.is_terminal:
                self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console,
                                     transient=False)
                self._task = self._bar.add_task(title, total=total, info="")
                self._bar.start()

    def rate(self) -> float:
        """Steps per second so far."""
        elapsed = time.perf_counter() - self.start
        return self.step / elapsed if elapsed > 0 else 0.0

    def _line(self, values: dict) -> str:
        of = f"/{self.total}" if self.total is not None else ""
        text = describe(values)
        return f"{self.title} step {self.step}{of}" + (f" - {text}" if text else "") + f" - {self.rate():.1f} steps/s"

    def update(self, step: int, values: dict) -> None:
        self.step = step
        if self._bar is not None:
            info = describe(values)
            self._bar.update(self._task, completed=step, info=f"{info} - {self.rate():.1f} steps/s")
        elif self.verbose == 1 and step % self.log_freq == 0:
            print(self._line(values), file=self.file, flush=True)

    def close(self, values: dict) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self.step, info=f"{describe(values)} - {self.rate():.1f} steps/s")
            self._bar.stop()
        elif self.verbose == 2 or (self.verbose == 1 and self.step % self.log_freq != 0):
            print(self._line(values), file=self.file, flush=True)
