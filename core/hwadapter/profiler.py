"""What ran where: the CPU-fallback report, an op profiler, and its events as a Chrome/Perfetto trace.

Inside `profile()` every op dispatched (eagerly, on any thread) is counted in `table()` and kept as an `Event`;
the graph executor adds one event per plan step through `record()`. `export_chrome_trace` writes the events as
Chrome trace-event JSON: one process per device, one track per thread, complete ("X") events in microseconds.
"""
from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .dispatch import dispatcher, fallback

fallback_count = fallback.count
reset_fallback = fallback.reset

_clock = time.perf_counter  # the clock of every event's start: record() takes readings of it


class FallbackReport(list):
    """The rows of `fallback_report()`, a list of dicts (op, device, dtypes, ran_on, count), most frequent first;
    printed, it reads as a sentence or a small table rather than a bare `[]`."""

    def __str__(self) -> str:
        if not self:
            return "no op fell back: every op ran on the device of its inputs"
        head = f"{sum(r['count'] for r in self)} fallback(s), ops that ran on another device with copies in and out:"
        rows = [(r["op"], r["device"], ", ".join(r["dtypes"]) or "no inputs", r["ran_on"], str(r["count"]))
                for r in self]
        rows.insert(0, ("op", "device", "dtypes", "ran on", "count"))
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        return "\n".join([head] + ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                                    for row in rows])


def fallback_report() -> FallbackReport:
    """One row per (op, device, dtypes, fallback device) with its count, most frequent first: a list of dicts that
    prints readably (`print(hw.profiler.fallback_report())`)."""
    return FallbackReport(fallback.report())


@dataclass(frozen=True)
class Event:
    """One op or plan step: `start` is a time.perf_counter() reading, `seconds` its host wall time."""
    name: str
    device: str
    route: str
    start: float
    seconds: float
    thread: int  # threading.get_native_id() of the thread that ran it
    kind: str = "op"  # "op": an eagerly dispatched op; "step": a plan step recorded by the executor
    args: dict = field(default_factory=dict)


class Profile:
    """Per (op, device, dtypes, route) call counts and seconds, and every event, collected inside `profile()`."""

    def __init__(self):
        self.rows = defaultdict(lambda: [0, 0.0])
        self.events: list[Event] = []
        self.origin = _clock()  # time zero of the trace
        self.threads: dict[int, str] = {}  # native thread id -> thread name

    def _thread(self) -> int:
        tid = threading.get_native_id()
        if tid not in self.threads:
            self.threads[tid] = threading.current_thread().name
        return tid

    def _hook(self, op, dev, dtypes, fn, seconds):
        end = _clock()  # the dispatcher times the call and calls us right after it, so it began `seconds` ago
        fb = getattr(fn, "fallback_device", None)
        route = f"fallback to {fb}" if fb is not None else getattr(fn, "route", "kernel")
        names = ",".join(d.name for d in dtypes)
        row = self.rows[(op, str(dev), names, route)]
        row[0] += 1
        row[1] += seconds
        self.events.append(Event(op, str(dev), route, end - seconds, seconds, self._thread(), "op",
                                 {"dtypes": names}))

    def _record(self, name, device, route, start, seconds, args):
        args = dict(args or {})
        row = self.rows[(str(args.get("op", name)), str(device), str(args.get("dtypes", "")), str(route))]
        row[0] += 1
        row[1] += seconds
        self.events.append(Event(str(name), str(device), str(route), start, seconds, self._thread(), "step", args))

    def table(self) -> list[dict]:
        """Rows sorted by total time."""
        out = [{"op": k[0], "device": k[1], "dtypes": k[2], "route": k[3], "calls": v[0], "seconds": v[1]}
               for k, v in self.rows.items()]
        return sorted(out, key=lambda r: -r["seconds"])

    def chrome_trace(self) -> dict:
        """The events as a Chrome trace-event document (what `export_chrome_trace` writes)."""
        events = list(self.events)  # a snapshot: other threads may still append
        origin = min([self.origin, *(e.start for e in events)])
        pids = {d: i + 1 for i, d in enumerate(sorted({e.device for e in events}))}
        out = []
        for device, pid in pids.items():
            out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": device}})
            out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        tracks = defaultdict(list)
        for e in events:
            tracks[(pids[e.device], e.thread)].append(e)
        for tid, ((pid, thread), track) in enumerate(sorted(tracks.items()), 1):
            # tids unique across processes: one OS thread runs work on several devices, and viewers key threads by tid
            name = f"{self.threads.get(thread, 'thread')} (tid {thread})"
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            for e, ts, dur in _nested(track, origin):
                out.append({"name": e.name, "cat": e.kind, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid,
                            "args": {"device": e.device, "route": e.route, **e.args}})
        return {"traceEvents": out, "displayTimeUnit": "ms",
                "otherData": {"producer": "hwadapter.profiler", "events": len(events)}}

    def export_chrome_trace(self, path) -> Path:
        """Write the events as Chrome trace-event JSON (open it in https://ui.perfetto.dev or chrome://tracing)."""
        path = Path(path)
        path.write_text(json.dumps(self.chrome_trace(), default=str))
        return path


def _nested(track: list, origin: float) -> list:
    """(event, ts µs, dur µs) of one thread's events, sorted, each inside its enclosing event: timings taken around
    nested calls can overlap their parent's edge by the cost of reading the clock, which trace viewers reject."""
    out, stack = [], []  # stack: end times (µs) of the enclosing events
    for e in sorted(track, key=lambda e: (e.start, -e.seconds)):
        ts = round((e.start - origin) * 1e6, 3)  # ns resolution, rounded at both ends so order is kept
        end = max(round((e.start + max(e.seconds, 0.0) - origin) * 1e6, 3), ts)
        while stack and stack[-1] <= ts:
            stack.pop()
        if stack and end > stack[-1]:
            end = stack[-1]
        out.append((e, ts, round(end - ts, 3)))
        stack.append(ts + round(end - ts, 3))
    return out


# --- the active profiles: the dispatcher's one hook fans out to each ------------------------------------------
_active: tuple = ()  # replaced, never mutated, so readers on other threads need no lock
_lock = threading.Lock()
_previous = None  # the hook installed before the first profile, called too


def _fan_out(op, dev, dtypes, fn, seconds):
    for prof in _active:
        prof._hook(op, dev, dtypes, fn, seconds)
    if _previous is not None:
        _previous(op, dev, dtypes, fn, seconds)


def active() -> bool:
    """Whether a profile is recording (callers skip timing work when not)."""
    return bool(_active)


def record(name: str, device, route: str, start: float, seconds: float, args: dict | None = None) -> None:
    """Record one plan step (or any timed piece of work) into every active profile; a no-op when none is.

    `start` is a time.perf_counter() reading, `seconds` the duration; `args` (JSON-ready) is shown in the trace,
    and its "op" and "dtypes" keys, when present, group the step with eager ops in `table()`."""
    if not _active:
        return
    for prof in _active:
        prof._record(name, device, route, start, seconds, args)


@contextlib.contextmanager
def profile():
    """Record every op dispatched and every plan step run inside the block:
    `with hwadapter.profiler.profile() as p: ...; p.table(); p.export_chrome_trace("trace.json")`."""
    global _active, _previous
    prof = Profile()
    with _lock:
        if not _active:
            _previous = dispatcher.profile_hook
            dispatcher.profile_hook = _fan_out
        _active = _active + (prof,)
    try:
        yield prof
    finally:
        with _lock:
            _active = tuple(p for p in _active if p is not prof)
            if not _active:
                dispatcher.profile_hook = _previous
                _previous = None
