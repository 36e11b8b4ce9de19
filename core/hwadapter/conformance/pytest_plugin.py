"""The kit as a pytest plugin (entry point pytest11 `hwadapter`): `pytest --hwadapter-device acme` runs its sections
against acme's devices. Without the option it only adds the option: the run is otherwise untouched."""
from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path

import pytest

SECTIONS_DIR = Path(__file__).parent / "sections"


def pytest_addoption(parser):
    group = parser.getgroup("hwadapter", "hwadapter conformance kit")
    group.addoption("--hwadapter-device", metavar="TYPE", default=None,
                    help="run the hwadapter conformance kit against this device type's plugin (e.g. acme)")
    group.addoption("--hwadapter-events", metavar="FILE", default=None,
                    help="append one JSON line per test started and finished (the kit's runner reads it)")


def _names_a_section(args) -> bool:
    return any("hwadapter.conformance" in a or str(SECTIONS_DIR) in str(Path(a.split("::")[0]).absolute())
               for a in args)


def pytest_configure(config):
    if not config.getoption("hwadapter_device"):
        return
    kit = [str(SECTIONS_DIR)]  # the folder, not its files: node ids then read test_runtime.py::test_..., not ::test_...
    if config.args_source != pytest.Config.ArgsSource.ARGS:  # plain `pytest --hwadapter-device acme`: the kit
        config.args = kit
    elif not _names_a_section(config.args):  # the vendor's own tests, and the kit beside them
        config.args = [*config.args, *kit]
    path = config.getoption("hwadapter_events")
    if path:
        config.pluginmanager.register(_Events(path), "hwadapter-kit-events")


class _Events:
    """Writes the run's progress as JSON lines, flushed at once: a crash or hang still leaves what happened."""

    def __init__(self, path):
        self.file = open(path, "a", buffering=1)

    def _write(self, **event):
        self.file.write(json.dumps(event) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def pytest_collection_finish(self, session):
        self._write(collected=len(session.items))

    def pytest_runtest_logstart(self, nodeid, location):
        self._write(start=nodeid)

    def pytest_runtest_logfinish(self, nodeid, location):
        self._write(end=nodeid)

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            text = "" if report.passed else _message(report)
            self._write(nodeid=report.nodeid, when=report.when, outcome=report.outcome, message=text)

    def pytest_collectreport(self, report):
        if report.failed:
            self._write(nodeid=report.nodeid or "<collection>", when="collect", outcome="failed",
                        message=_message(report))

    def pytest_unconfigure(self, config):
        self.file.close()


def _message(report) -> str:
    """The failure's message (the assertion's or the error's last lines), or the skip's reason."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return text[:4000]


@pytest.fixture(scope="session")
def kit_type(request) -> str:
    """The device type under test (--hwadapter-device)."""
    name = request.config.getoption("hwadapter_device")
    if not name:
        pytest.skip("the conformance kit runs with --hwadapter-device TYPE")
    return name


@pytest.fixture(scope="session")
def kit_device(kit_type) -> str:
    """The device under test: the type's first device, as a string ("acme:0")."""
    return f"{kit_type}:0"


@pytest.fixture
def kit_dev(kit_device):
    """The Device under test (fails with the plugin's own reason when it cannot be used)."""
    from hwadapter import host  # lazy: this module is imported in every pytest run where hwadapter is installed
    return host.device(kit_device)


#: Set on a test's item when its call failed: the leak check after it then stays quiet (the failure is the finding).
_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "call" and outcome.get_result().failed:
        item.stash[_CALL_FAILED] = True


def _release_failures() -> None:
    """Let go of the arrays a failed test's frames still hold: pytest keeps the last failure's traceback
    (sys.last_traceback), whose locals would count as live bytes of the next tests."""
    tb = getattr(sys, "last_traceback", None)
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
        try:
            frame.f_locals.clear()  # the snapshot pytest's report read: frame.clear() leaves it
        except Exception:  # noqa: BLE001: a write-through proxy (Python 3.13) has no clear; frame.clear() does it
            pass
        try:
            frame.clear()
        except RuntimeError:  # still executing (not a failed test's frame)
            pass
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    gc.collect()


def _live_bytes(kit_device: str) -> int:
    """The bytes hwadapter's caching allocator of the device holds for live arrays (0 on a host-memory device), its
    uploaded scalars given back first (they are shared, not a test's to free)."""
    import hwadapter as hw  # lazy: as above
    hw.device.empty_cache(kit_device)
    return hw.device.memory_stats(kit_device).get("allocated_bytes", 0)


@pytest.fixture
def kit_live_bytes(request, kit_device):
    """The device's allocator back at its live bytes of before the test (and never below zero) afterwards."""
    _release_failures()
    before = _live_bytes(kit_device)
    yield
    if request.node.stash.get(_CALL_FAILED, False):
        return  # its arrays may be held by the failure's traceback: a leak reported now would hide the failure
    gc.collect()
    after = _live_bytes(kit_device)
    assert after == before and after >= 0, (
        f"{kit_device}: {after - before:+d} bytes still allocated (or released twice) through hwadapter's caching "
        f"allocator after the test (live bytes {before} before, {after} after): arrays the test made are still "
        f"referenced (a plugin must not keep its kernels' inputs or outputs). Reproduce: run the test alone and print "
        f"hwadapter.device.memory_stats({kit_device!r}) after it")
