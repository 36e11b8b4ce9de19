"""What ran where: the CPU-fallback report, and an op profiler."""
from __future__ import annotations

import contextlib
from collections import defaultdict

from .dispatch import dispatcher, fallback

fallback_report = fallback.report
fallback_count = fallback.count
reset_fallback = fallback.reset


class Profile:
    """Per (op, device, dtypes, route) call counts and seconds, collected inside `profile()`."""

    def __init__(self):
        self.rows = defaultdict(lambda: [0, 0.0])

    def _hook(self, op, dev, dtypes, fn, seconds):
        fb = getattr(fn, "fallback_device", None)
        route = f"fallback to {fb}" if fb is not None else getattr(fn, "route", "kernel")
        row = self.rows[(op, str(dev), ",".join(d.name for d in dtypes), route)]
        row[0] += 1
        row[1] += seconds

    def table(self) -> list[dict]:
        """Rows sorted by total time."""
        out = [{"op": k[0], "device": k[1], "dtypes": k[2], "route": k[3], "calls": v[0], "seconds": v[1]}
               for k, v in self.rows.items()]
        return sorted(out, key=lambda r: -r["seconds"])


@contextlib.contextmanager
def profile():
    """Record every op dispatched inside the block: `with hwadapter.profiler.profile() as p: ...; p.table()`."""
    prof = Profile()
    previous = dispatcher.profile_hook
    dispatcher.profile_hook = prof._hook
    try:
        yield prof
    finally:
        dispatcher.profile_hook = previous
