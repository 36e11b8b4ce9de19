"""Counting and announcing CPU fallback: every fallback is counted per op and device, and warned once."""
from __future__ import annotations

import logging
import threading
from collections import Counter

log = logging.getLogger("hwadapter")
_counts: Counter = Counter()
_warned: set = set()
_lock = threading.Lock()


def record(op: str, device, dtypes: tuple, fallback_device) -> None:
    """Count one fallback of `op` from `device`, warning the first time for this op and device."""
    key = (op, str(device), tuple(d.name for d in dtypes), str(fallback_device))
    with _lock:
        _counts[key] += 1
        first = (op, key[1]) not in _warned
        if first:
            _warned.add((op, key[1]))
    if first:
        log.warning("op %r (%s) has no kernel on %s: running it on %s with copies in and out. It is counted in "
                    "hwadapter.profiler.fallback_report(); set HWADAPTER_FALLBACK=error (or "
                    "hwadapter.configure(strict=True)) to make this an error.",
                    op, ", ".join(key[2]) or "no inputs", key[1], key[3])


def report() -> list[dict]:
    """One row per (op, device, dtypes, fallback device) with its count, most frequent first."""
    with _lock:
        items = _counts.most_common()
    return [{"op": op, "device": dev, "dtypes": dts, "ran_on": fb, "count": n} for (op, dev, dts, fb), n in items]


def count(op: str | None = None, device=None) -> int:
    """How many fallbacks happened, optionally for one op and/or device."""
    with _lock:
        return sum(n for (o, d, _, _), n in _counts.items()
                   if (op is None or o == op) and (device is None or d == str(device)))


def reset() -> None:
    """Forget counts and which ops were already warned about."""
    with _lock:
        _counts.clear()
        _warned.clear()
