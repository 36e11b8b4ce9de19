"""A plugin whose runtime breaks its contract in the user's process: each misbehaviour is a hwadapter error naming
the plugin, its distribution and the call, never a raw exception; `hwadapter doctor` finds it first."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.api.errors import DeviceUnavailableError, OutOfMemoryError, PluginError

from test_cli import hwadapter_cli

SITE = Path(__file__).parent / "plugins" / "misbehave_site"  # not on sys.path: only these tests see misb
DIST = "hwadapter-misbehave 0.1"


@pytest.fixture
def misb(monkeypatch, reset_plugins):
    """The hwadapter-misbehave distribution installed (misb:0), right until a test sets HWT_MISBEHAVE."""
    monkeypatch.delenv("HWT_MISBEHAVE", raising=False)
    monkeypatch.syspath_prepend(str(SITE))
    monkeypatch.setattr(hw.api.config.config, "plugins", ("cpu", "misb"))  # the machine's other plugins: not needed
    reset_plugins()
    yield lambda fault: monkeypatch.setenv("HWT_MISBEHAVE", fault)
    monkeypatch.undo()  # off sys.path before the rescan (reset_plugins' teardown)


def _upload(fault):
    fault()
    return hw.to_tensor(np.ones(3, np.float32), device="misb:0")


def _download(fault):
    x = hw.to_tensor(np.ones(3, np.float32), device="misb:0")
    fault()
    return x.numpy()


def _free(fault):
    hw.to_tensor(np.ones(3, np.float32), device="misb:0")  # its block returns to the cache at once
    fault()
    hw.device.empty_cache("misb:0")


def _properties(fault):
    fault()
    return hw.device.get_device_properties("misb:0")


def _synchronize(fault):
    fault()
    hw.device.synchronize("misb:0")


#: fault -> (what the user does, the error class, what the message says about the call)
CASES = {
    "allocate_none": (_upload, PluginError, "Runtime.allocate(512) on misb:0 returned None (NoneType), not a "
                                               "handle"),
    "allocate_raises": (_upload, PluginError, "Runtime.allocate(512) on misb:0 raised ValueError: acme_malloc"),
    "allocate_memoryerror": (_upload, OutOfMemoryError, "Runtime.allocate(512) on misb:0 ran out of memory"),
    "copy_h2d_raises": (_upload, PluginError, "Runtime.copy_h2d() on misb:0 raised OSError: DMA engine timeout"),
    "copy_d2h_raises": (_download, PluginError, "Runtime.copy_d2h() on misb:0 raised OSError: DMA engine timeout"),
    "free_raises": (_free, PluginError, "Runtime.free() on misb:0 raised RuntimeError: acme_free: double free"),
    "properties_raises": (_properties, PluginError, "Runtime.properties() on misb:0 raised KeyError"),
    "properties_wrong": (_properties, PluginError, "Runtime.properties() on misb:0 returned {'name': 'misb'} "
                                                      "(dict), not a hwadapter.plugin.DeviceProperties"),
    "synchronize_raises": (_synchronize, PluginError, "Runtime.synchronize() on misb:0 raised RuntimeError"),
    "runtime_none": (_upload, PluginError, "Plugin.create_runtime(0) on misb:0 returned None (NoneType), not a "
                                              "hwadapter.plugin.Runtime"),
    "runtime_int": (_upload, PluginError, "Plugin.create_runtime(0) on misb:0 returned 7 (int)"),
    "runtime_raises": (_upload, DeviceUnavailableError, "create_runtime(0) raised OSError: acme_open(0) failed"),
}


@pytest.mark.parametrize("fault", CASES)
def test_a_misbehaving_runtime_is_an_error_naming_the_plugin_its_distribution_and_the_call(misb, fault):
    action, error, call = CASES[fault]
    with pytest.raises(error) as info:
        action(lambda: misb(fault))
    message = str(info.value)
    assert "'misb' plugin" in message and DIST in message and call in message, message
    assert "Fix:" in message or info.value.fix, message


def test_a_plugin_with_a_billion_devices_lists_them_without_making_each(misb):
    misb("many_devices")
    hw.device.reset_plugins()
    available = hw.device.get_available_device()  # a list of 10**9 names would exhaust memory here
    assert len(available) == 1 + 10 ** 9
    assert (available[0], available[-1]) in (("cpu:0", "misb:999999999"), ("misb:0", "cpu:0"))
    assert "misb:123456789" in available and "cpu:0" in available
    assert "misb:1000000000" not in available and "misb:07" not in available and "cpu:1" not in available
    assert repr(available) in ("[cpu:0, misb:0..misb:999999999 (1000000000 devices)]",
                               "[misb:0..misb:999999999 (1000000000 devices), cpu:0]")
    at = available.index("misb:0") if available[0] != "cpu:0" else 1
    assert available[at:at + 2] == ["misb:0", "misb:1"]


def test_few_devices_are_a_plain_list(misb):
    assert sorted(hw.device.get_available_device()) == ["cpu:0", "misb:0"]
    assert type(hw.device.get_available_device()) is list


@pytest.mark.parametrize("fault,words", [("allocate_none", "Runtime.allocate(512) on misb:0 returned None"),
                                         ("copy_d2h_wrong", "gave back other values than were copied")])
def test_doctor_fails_a_plugin_whose_runtime_misbehaves(fault, words):
    proc = hwadapter_cli("doctor", site=SITE, HWADAPTER_PLUGINS="cpu,misb", HWT_MISBEHAVE=fault)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line[7:].startswith("misb ("))
    assert ": failed: the runtime failed the round trip" in line and words in line, proc.stdout
    assert DIST in line
