"""The kit as a pytest plugin (entry point pytest11 `hwadapter`): `pytest --hwadapter-device acme` runs its sections
against acme's devices. Without the option it only adds the option: the run is otherwise untouched."""
from __future__ import annotations

import json
import os
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
    from hwadapter.runtime.device import get
    return get(kit_device)


@pytest.fixture
def kit_live_bytes(kit_device):
    """The device's allocator back at its live bytes of before the test (and never below zero) afterwards."""
    import gc
    from hwadapter.runtime.device import get
    dev = get(kit_device)
    dev.constants.clear()
    before = dev._allocator.allocated if dev._allocator is not None else 0
    yield
    gc.collect()
    dev.constants.clear()  # scalars uploaded once and shared are not the test's to free
    after = dev._allocator.allocated if dev._allocator is not None else 0
    assert after == before and after >= 0, (
        f"{kit_device}: {after - before:+d} bytes still allocated (or released twice) by the device's allocator after "
        f"the test (live bytes {before} before, {after} after)")
