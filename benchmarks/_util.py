"""Shared benchmark helpers: timing by best-of-repeats and a rich results table."""
from __future__ import annotations

import time
from typing import Callable


def best_seconds(fn: Callable, min_time: float = 0.2, repeats: int = 5) -> float:
    """Seconds per call: the best of `repeats` runs of a loop calibrated to take about `min_time`."""
    fn()
    n, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time / repeats or n >= 1 << 24:
            break
        n *= 4
    best = elapsed / n
    for _ in range(repeats - 1):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best


def table(title: str, columns: list[str], rows: list[list]) -> None:
    """Print a rich table (plain text when stdout is not a terminal)."""
    from rich.console import Console
    from rich.table import Table
    t = Table(title=title)
    for c in columns:
        t.add_column(c, justify="right" if c not in (columns[0],) else "left")
    for r in rows:
        t.add_row(*[str(v) for v in r])
    Console(width=140).print(t)
