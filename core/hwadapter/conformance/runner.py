"""Runs the kit's sections, each in a child pytest process with a time limit: a plugin that crashes the interpreter or
hangs fails its section (naming the test it was in), and the other sections and the report still come out."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hwadapter import DeviceUnavailableError, InvalidArgumentError, InvalidDeviceError, host

from .report import write_junit, write_markdown
from .results import SECTIONS, Failure, KitResult, SectionResult

PACKAGE = "hwadapter.conformance.sections"
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def reproducer(device_type: str, section: str, test: str | None = None) -> str:
    """The one-line command that runs one test of the kit (or a whole section) again."""
    line = f"pytest --hwadapter-device {device_type} --pyargs {PACKAGE}.test_{section}"
    return line + (f" -k '{test}'" if test else "")


def check_device_type(device_type: str) -> None:
    """Raise InvalidDeviceError (no such plugin) or DeviceUnavailableError (it has no usable device), saying why."""
    record = host.plugin_record(device_type)
    if record is None:
        known = ", ".join(sorted(host.plugin_types())) or "none"
        raise InvalidDeviceError(f"conformance: no plugin of device type {device_type!r} is installed (installed: "
                                 f"{known}). Fix: pip install the plugin's package; `hwadapter devices` lists them")
    if not record.ok or record.device_count < 1:
        fix = "" if record.fix else " Fix: run `hwadapter doctor`"
        raise DeviceUnavailableError(f"conformance: {device_type} has no usable device: {record.explain()}{fix}")


_UNKNOWN, _UNAVAILABLE = 3, 4  # exit statuses of the child that checks the device type


def _check_in_child(device_type: str, timeout: float) -> None:
    """check_device_type in a child process: a plugin that crashes or hangs as it loads fails the discovery section
    (and every other) instead of taking this process down; unknown or unavailable types raise here."""
    code = ("import sys\nfrom hwadapter import InvalidDeviceError, DeviceUnavailableError\n"
            "from hwadapter.conformance.runner import check_device_type\n"
            f"try:\n    check_device_type({device_type!r})\n"
            f"except InvalidDeviceError as e:\n    print(e, file=sys.stderr); sys.exit({_UNKNOWN})\n"
            f"except DeviceUnavailableError as e:\n    print(e, file=sys.stderr); sys.exit({_UNAVAILABLE})\n")
    try:
        proc = subprocess.run([sys.executable, "-c", code], env=_child_env(), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return
    message = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    if proc.returncode == _UNKNOWN:
        raise InvalidDeviceError(message)
    if proc.returncode == _UNAVAILABLE:
        raise DeviceUnavailableError(message)


def run_kit(device_type: str, sections=None, *, timeout: float = 120, report=None, junit=None,
            progress: bool = True) -> KitResult:
    names = list(SECTIONS if not sections else dict.fromkeys(sections))
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise InvalidArgumentError(f"conformance: unknown section(s) {unknown}. Fix: use some of {list(SECTIONS)}")
    _check_in_child(device_type, timeout)
    result = KitResult(device_type)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hwadapter-kit-") as tmp, _Progress(progress, names) as bar:
        (Path(tmp) / "pytest.ini").write_text("[pytest]\n")  # none of the caller's pytest settings apply
        for name in names:
            result.sections[name] = run_section(device_type, name, timeout, Path(tmp), bar if progress else None)
    result.seconds = time.monotonic() - start
    if report:
        write_markdown(result, report)
    if junit:
        write_junit(result, junit)
    return result


def _child_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only the kit's plugin: no other installed pytest plugin interferes
    env["PYTHONFAULTHANDLER"] = "1"  # a crash prints the Python stack of the test it was in
    return env


def run_section(device_type: str, name: str, timeout: float, tmp: Path, bar=None) -> SectionResult:
    """Run one section in a child process, at most `timeout` seconds."""
    events, log = tmp / f"{name}.jsonl", tmp / f"{name}.log"
    cmd = [sys.executable, "-m", "pytest", "-p", "hwadapter.conformance.pytest_plugin", "--hwadapter-device",
           device_type, "--hwadapter-events", str(events), "-c", str(tmp / "pytest.ini"), "--rootdir", str(tmp),
           "-p", "no:cacheprovider", "-q", "--pyargs", f"{PACKAGE}.test_{name}"]
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=tmp, env=_child_env(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        timed_out = False
        while proc.poll() is None:
            if time.monotonic() - start > timeout:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            if bar is not None:
                bar.update(name, _read(events))
            time.sleep(0.1)
    lines = _read(events)
    if bar is not None:
        bar.update(name, lines, done=True)
    res = _collect(device_type, name, lines)
    res.seconds = time.monotonic() - start
    _finish(res, device_type, proc.returncode, timed_out, timeout, lines, log)
    return res


def _read(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # the last line, half written when the child died
            pass
    return out


def _test_name(nodeid: str) -> str:
    return nodeid.split("::")[-1]


def _collect(device_type: str, section: str, lines: list[dict]) -> SectionResult:
    res = SectionResult(section)
    tests: dict[str, tuple[str, str]] = {}  # nodeid -> (worst outcome, message)
    for ev in lines:
        if "outcome" not in ev:
            continue
        outcome = ev["outcome"]
        if outcome == "failed" and ev["when"] in ("setup", "teardown", "collect"):
            outcome = "error"  # a fixture's check (the leak check runs at teardown) or a module that cannot load
        prev = tests.get(ev["nodeid"], ("passed", ""))
        if _RANK[outcome] >= _RANK[prev[0]]:
            tests[ev["nodeid"]] = (outcome, ev.get("message", ""))
    for nodeid, (outcome, message) in tests.items():
        name = _test_name(nodeid)
        setattr(res, outcome, getattr(res, outcome) + 1)
        res.tests.append((name, outcome, message))
        if outcome in ("failed", "error"):
            res.failures.append(Failure(name, message, reproducer(device_type, section, name)))
        elif outcome == "skipped":
            res.skips.append(f"{name}: {message}")
    return res


def _finish(res: SectionResult, device_type: str, rc, timed_out: bool, timeout: float, lines, log: Path) -> None:
    """The section's status from the child's exit, naming the test it was in when it crashed or hung."""
    finished = {ev["end"] for ev in lines if "end" in ev}
    started = [ev["start"] for ev in lines if "start" in ev]
    current = next((s for s in reversed(started) if s not in finished), None)
    if timed_out or rc not in (0, 1, 5):  # 0 passed, 1 tests failed, 5 none collected: anything else crashed
        if timed_out:
            res.status, what = "timeout", f"did not finish within {timeout:g} s (killed)"
        elif rc < 0:
            res.status, what = "crashed", f"the process died of {_signal_name(-rc)}"
        else:
            res.status, what = "crashed", f"pytest exited with status {rc}: {_tail(log)}"
        test = _test_name(current) if current else None
        where = f"in {test}" if test else "outside any test"
        res.note = f"{what} {where}"
        res.error += 1
        res.tests.append((test or "<section>", "error", res.note))
        stack = _stack(log)
        res.failures.append(Failure(test or "<section>", res.note + (f"\n{stack}" if stack else ""),
                                    reproducer(device_type, res.name, test)))
        return
    if res.failed or res.error:
        res.status = "failed"
    elif rc == 5 or (res.skipped and not res.passed):
        res.status = "skipped"
        res.note = res.skips[0].split(": ", 1)[-1] if res.skips else "no test collected"
    else:
        res.status = "passed"


def _stack(log: Path) -> str:
    """The innermost frames faulthandler printed when the child crashed (or '')."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    frames = [ln.strip() for ln in text.splitlines() if ln.strip().startswith('File "')]
    return "\n".join(frames[:4])


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _tail(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-3:])[:500]


class _Progress:
    """A rich progress bar per section (nothing when off): tests done of tests collected."""

    def __init__(self, enabled: bool, names: list[str]):
        self.enabled, self.names, self.tasks = enabled, names, {}

    def __enter__(self):
        if self.enabled:
            # lazy: rich.progress costs ~25 ms, and the child that checks the device type imports this module too
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.bar = Progress(TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[status]}"), TimeElapsedColumn())
            self.bar.__enter__()
            for n in self.names:
                self.tasks[n] = self.bar.add_task(n, total=None, start=False, status="")
        return self

    def update(self, name: str, lines: list[dict], done: bool = False) -> None:
        if not self.enabled:
            return
        total = next((ev["collected"] for ev in lines if "collected" in ev), None)
        ended = {ev["end"] for ev in lines if "end" in ev}
        failed = sum(1 for ev in lines if ev.get("outcome") == "failed")
        task = self.tasks[name]
        self.bar.start_task(task)
        self.bar.update(task, total=total if total is not None else (len(ended) if done else None),
                        completed=len(ended), status=f"[red]{failed} failed" if failed else "")

    def __exit__(self, *exc):
        if self.enabled:
            self.bar.__exit__(*exc)
        return False
