"""Shared fixtures: test plugins on sys.path as real distributions, clean state and no leaked device memory."""
from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest

PLUGINS = Path(__file__).parent / "plugins"
sys.path.insert(0, str(PLUGINS))  # before collection, so device parametrisation sees the test plugins


def _reset_plugins():
    import hwadapter as hw
    hw.device.reset_plugins()


#: The distributions of this repository (the reference plugins, the test device, and the reference plugins registered
#: under other names by test_clone.py): the suite runs its device tests on their devices only, so a vendor plugin
#: installed beside hwadapter (of any name, working or broken) does not change its verdict.
OURS = frozenset({"hwadapter", "hwadapter-opencl", "hwadapter-cuda", "hwadapter-testdev", "hwadapter-clone-cpu",
                  "hwadapter-clone-opencl"})


def test_devices() -> list[str]:
    """Every available device an op test runs on: each reference plugin's devices, and testdev:0 (all through
    fallback)."""
    import hwadapter as hw
    from hwadapter.runtime.discovery import registry
    records = {d: registry.get(d.split(":")[0]) for d in hw.device.get_available_device() if d != "testdev:1"}
    return [d for d, record in records.items() if record is not None and record.distribution[0] in OURS]


def pytest_generate_tests(metafunc):
    """A test that takes `device` runs once on every available device."""
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", test_devices())


@pytest.fixture
def reset_plugins():
    """Call to rescan entry points after changing sys.path or the environment (and once more after the test)."""
    yield _reset_plugins
    _reset_plugins()


def _live_bytes() -> dict:
    from hwadapter.runtime.device import devices
    for d in devices.all():
        d.constants.clear()  # scalars uploaded once and shared (Device.constant) are not the test's to free
    return {str(d): d._allocator.allocated for d in devices.all() if d._allocator is not None}


def _random_states() -> None:
    """Each device's random stream made before the baseline: it lives as long as the process, not the test's to free
    (after a test resets the device registry, the first draw on a new Device object makes it again)."""
    from hwadapter import random as hw_random
    from hwadapter.api.errors import HwAdapterError
    from hwadapter.runtime.device import devices
    for d in devices.all():
        if d._allocator is not None and str(d) in hw_random._states:
            try:
                hw_random.state(d)
            except HwAdapterError:  # a test device without int64 buffers: it draws nothing either
                pass


@pytest.fixture(autouse=True)
def clean_state(request):
    """Fresh fallback counters and settings per test; every device's live bytes back to the baseline afterwards."""
    import hwadapter as hw
    from hwadapter.dispatch import fallback
    fallback.reset()
    _random_states()
    before = _live_bytes()
    yield
    hw.configure(fallback="warn")
    for name in list(request.node.funcargs):  # the test is over: drop its arguments so their tensors can go
        if name != "request":
            request.node.funcargs[name] = None
    after = _live_bytes()
    if after != {d: n for d, n in before.items() if d in after}:
        # only then a full collection (tensors held in reference cycles): run after every test it cost about half
        # of the suite's time, most of which released nothing
        gc.collect()
        after = _live_bytes()
    leaked = {d: n - before.get(d, 0) for d, n in after.items() if n != before.get(d, 0)}
    assert not leaked, f"device memory still allocated after the test: {leaked}"


@pytest.fixture
def testdev():
    """testdev:0, a device with separate memory and only add/mul/relu/matmul kernels (float32)."""
    from hwadapter.runtime.device import get
    return get("testdev:0")


def pytest_collection_modifyitems(session, config, items):
    """The clone suites last: their children compile every op's OpenCL kernels, which the suites before them have
    left in PoCL's and pyopencl's caches by then (cold, first: 450-590 s on 2 cores; after the opencl tests: 120 s)."""
    last = [item for item in items if item.nodeid.startswith("tests/test_clone.py")]
    if last:
        items[:] = [item for item in items if item not in last] + last
