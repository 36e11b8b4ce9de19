"""Discovery and the version handshake: the plugin is found through its entry point, loads, declares an API version
the core accepts, and lists its devices, properties and levels."""
from __future__ import annotations

import pytest

import hwadapter as hw
from hwadapter import host
from hwadapter.plugin import API_VERSION, DeviceProperties


@pytest.fixture
def record(kit_type):
    rec = host.plugin_record(kit_type)
    assert rec is not None, (f"no plugin of type {kit_type!r}: no entry point of group hwadapter.plugins named "
                             f"{kit_type!r} is installed (pip install your package, then `hwadapter devices`)")
    return rec


def test_the_plugin_loads(record):
    assert record.ok, record.explain()
    assert record.plugin is not None


def test_the_api_version_handshake(record):
    version = tuple(record.api_version or ())
    assert len(version) == 2 and all(isinstance(v, int) for v in version), \
        f"the plugin declares api_version = {record.api_version!r}; it must be (MAJOR, MINOR) ints, e.g. {API_VERSION}"
    assert version[0] == API_VERSION[0] and version[1] <= API_VERSION[1], \
        (f"the plugin is built for API {version}, the core provides {API_VERSION}: the MAJORs must be equal and the "
         f"plugin's MINOR at most the core's (build against this hwadapter, or require a matching one)")


def test_the_devices_are_listed(record, kit_type):
    assert record.device_count >= 1, (f"{kit_type}: Plugin.device_count() is {record.device_count}; the kit needs at "
                                      f"least one device")
    listed = [d for d in hw.device.get_available_device() if d.partition(":")[0] == kit_type]
    assert f"{kit_type}:0" in listed, (f"{kit_type}:0 is not among the available devices {listed} though "
                                       f"device_count() is {record.device_count}")
    assert kit_type in hw.device.get_all_device_type()


def test_the_distribution_is_named(record):
    name, version = record.distribution
    assert name != "?", (f"no installed distribution declares the entry point {record.entry_point!r}: declare it "
                         f"under [project.entry-points.\"hwadapter.plugins\"] in your pyproject.toml and pip install "
                         f"the package")


def test_properties(kit_dev):
    props = kit_dev.runtime.properties()
    assert isinstance(props, DeviceProperties), (f"Runtime.properties() returned {type(props).__name__}; it must "
                                                 f"return a hwadapter.plugin.DeviceProperties")
    assert props.name and props.total_memory >= 0, (f"Runtime.properties() is {props}: it must name the device and "
                                                    f"state total_memory >= 0 (0: unknown)")


def test_levels_match_what_the_plugin_provides(record, kit_dev):
    levels = record.levels
    assert levels, "the plugin provides no level: register kernels, a subgraph backend or a codegen backend"
    if "op" in levels:
        assert kit_dev.kernels.ops(), "the plugin overrides register_kernels but registers no kernel"
    if "subgraph" in levels:
        assert kit_dev.subgraph is not None, "the plugin overrides subgraph_backend but returns None"
    if "codegen" in levels:
        assert kit_dev.codegen is not None or kit_dev.codegen_unavailable, \
            "the plugin overrides codegen_backend but returns None without saying why"
