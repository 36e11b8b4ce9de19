"""The benchmarks' one timer."""
from __future__ import annotations

import statistics
import time


def per_call(fn, n: int, repeats: int = 7) -> float:
    """Median over `repeats` runs of the mean seconds per call of fn() over n calls (after one warm-up call)."""
    fn()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n)
    return statistics.median(runs)
