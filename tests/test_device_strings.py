"""Device strings: "type" and "type:index" work; everything else raises InvalidDeviceError saying what is available."""
from __future__ import annotations

import re
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hwadapter as hw
from hwadapter.runtime import device as _device
from hwadapter.runtime.discovery import registry

VALID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(:[0-9]+)?")


@pytest.fixture(autouse=True)
def keep_current_device():
    saved = _device.devices.default
    yield
    _device.devices.default = saved


@pytest.mark.parametrize("spec, expected", [("cpu", "cpu:0"), ("cpu:0", "cpu:0"), ("testdev", "testdev:0"),
                                            ("testdev:0", "testdev:0"), ("testdev:1", "testdev:1"),
                                            ("testdev:01", "testdev:1")])
def test_valid_strings_name_one_interned_device(spec, expected):
    dev = _device.get(spec)
    assert str(dev) == expected
    assert dev is _device.get(expected) is _device.get(dev)
    assert hw.set_device(spec) is dev and hw.get_device() == expected


def test_a_str_subclass_is_read_as_its_text():
    class Weird(str):
        def __hash__(self):
            raise RuntimeError("unhashable on purpose")

    assert str(_device.get(Weird("testdev:1"))) == "testdev:1"
    with pytest.raises(hw.InvalidDeviceError, match="malformed"):
        _device.get(Weird("testdev:"))


MALFORMED = {
    "opencl:": "the index after ':' is missing",
    "opencl:-1": "the index is negative",
    "opencl:x": "'x' is not a non-negative integer",
    "opencl:1.5": "'1.5' is not a non-negative integer",
    "cpu:+1": "'+1' is not a non-negative integer",
    "cpu:\u0661": "is not a non-negative integer",  # an Arabic-Indic digit one: not an ASCII index
    ":0": "the device type before ':' is missing",
    ":": "the device type before ':' is missing",
    "": "it is empty",
    " ": "it is only whitespace",
    "\t\n": "it is only whitespace",
    " cpu": "contains whitespace",
    "cpu ": "contains whitespace",
    "cpu\n": "contains whitespace",
    "cpu :0": "contains whitespace",
    "cpu: 0": "contains whitespace",
    "cpu:0:0": "more than one ':'",
    "1cpu": "is not a device type",
    "acme-npu:0": "is not a device type",
    "cpu:" + "9" * 5000: "the index is too large",  # beyond Python's int-from-string digit limit, too
}


@pytest.mark.parametrize("spec", sorted(MALFORMED))
def test_malformed_strings_say_what_is_wrong_and_what_is_available(spec):
    _device.get("testdev")  # loaded: its devices are listed (an error message loads no plugin)
    before = hw.get_device()
    with pytest.raises(hw.InvalidDeviceError) as err:
        hw.set_device(spec)
    message = str(err.value)
    assert message.startswith("malformed device string")
    assert MALFORMED[spec] in message
    assert "available: " in message and "cpu:0" in message and "testdev:0, testdev:1" in message
    assert len(message) < 1000  # a huge input is abbreviated, not echoed
    assert hw.get_device() == before  # a failed set_device changes nothing
    with pytest.raises(hw.InvalidDeviceError):
        hw.to_tensor([1.0], device=spec)


class BadRepr:
    def __repr__(self):
        raise RuntimeError("repr exploded")


@pytest.mark.parametrize("spec", [None, 0, 1.5, b"cpu", ["cpu"], ("cpu", 0), {"cpu": 0}, object(), BadRepr()],
                         ids=lambda s: type(s).__name__)
def test_non_strings_are_rejected(spec):
    _device.get("cpu")
    with pytest.raises(hw.InvalidDeviceError) as err:
        hw.set_device(spec)
    assert f"not {type(spec).__name__}" in str(err.value)
    assert "cpu:0" in str(err.value)


def test_an_unknown_type_lists_the_available_ones():
    _device.get("testdev")
    with pytest.raises(hw.InvalidDeviceError) as err:
        hw.set_device("nosuchdevice:0")
    message = str(err.value)
    assert "unknown device type 'nosuchdevice'" in message
    assert "available: " in message and "cpu:0" in message and "testdev:1" in message
    assert "install the plugin that provides" in message and "hwadapter.plugins" in message


def test_an_unknown_type_suggests_a_near_spelling():
    with pytest.raises(hw.InvalidDeviceError, match="Did you mean 'testdev'"):
        _device.get("TestDev")
    with pytest.raises(hw.InvalidDeviceError, match="Did you mean 'testdev'"):
        _device.get("testdv:1")


@pytest.mark.parametrize("spec, meant, written", [("TestDev", "testdev", "testdev"),
                                                  ("TESTDEV:1", "testdev", "testdev:1"),
                                                  ("CPU:0", "cpu", "cpu:0"), ("Cpu", "cpu", "cpu")])
def test_an_installed_type_spelt_with_other_case_is_not_sent_to_pip(spec, meant, written):
    with pytest.raises(hw.InvalidDeviceError) as err:
        hw.set_device(spec)
    message = str(err.value)
    typed = spec.split(":")[0]
    assert message.startswith(f"unknown device type {typed!r}: device types are case-sensitive. Did you mean "
                              f"{meant!r}? Fix: write {written!r}; available: ")
    assert "pip install" not in message


@pytest.mark.parametrize("spec", ["AcmeNPU:0", "gpu"])
def test_an_unknown_type_names_no_package_that_may_not_exist(spec):
    """`gpu` once suggested `pip install hwadapter-gpu`, which does not exist: the core cannot know the distribution."""
    with pytest.raises(hw.InvalidDeviceError) as err:
        hw.set_device(spec)
    message, typed = str(err.value), spec.split(":")[0]
    assert f"unknown device type {typed!r}: no installed plugin provides it." in message
    assert f"Fix: install the plugin that provides {typed!r}" in message and "`hwadapter devices`" in message
    assert "pip install" not in message and f"hwadapter-{typed.lower()}" not in message


@pytest.mark.parametrize("spec, count", [("testdev:2", 2), ("testdev:99999999999999999", 2), ("cpu:1", 1)])
def test_an_index_out_of_range_says_how_many_devices_there_are(spec, count):
    with pytest.raises(hw.InvalidDeviceError) as err:
        hw.set_device(spec)
    message = str(err.value)
    assert "out of range" in message and f"which has {count} device(s)" in message
    assert f"indices 0 to {count - 1}" in message and "available: " in message


@pytest.fixture
def broken_site(tmp_path, monkeypatch, reset_plugins):
    """A distribution 'hwt-missing' whose plugin 'missing' needs a module that is not installed."""
    site = tmp_path / "site"
    (site / "hwt_missing_pkg").mkdir(parents=True)
    (site / "hwt_missing_pkg" / "__init__.py").write_text("import acme_driver_bindings_z9\n")
    (site / "hwt_missing-1.0.dist-info").mkdir()
    (site / "hwt_missing-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: hwt-missing\n"
                                                                  "Version: 1.0\n")
    (site / "hwt_missing-1.0.dist-info" / "entry_points.txt").write_text(textwrap.dedent("""\
        [hwadapter.plugins]
        missing = hwt_missing_pkg:Plugin
    """))
    monkeypatch.syspath_prepend(str(site))
    reset_plugins()
    yield site
    monkeypatch.undo()
    reset_plugins()


def test_a_failed_plugin_says_why_and_how_to_fix_it(broken_site):
    with pytest.raises(hw.InvalidDeviceError) as err:
        hw.set_device("missing:0")
    message = str(err.value)
    assert "device type 'missing' cannot be used" in message
    assert "failed" in message and "ModuleNotFoundError" in message and "acme_driver_bindings_z9" in message
    assert "Fix: install the missing module 'acme_driver_bindings_z9'" in message
    assert "hwadapter doctor" in message
    # and any other device error lists it among the unusable plugins
    with pytest.raises(hw.InvalidDeviceError, match=r"not usable: missing: failed: .*acme_driver_bindings_z9"):
        hw.set_device("testdev:7")


@pytest.fixture
def unavailable_site(tmp_path, monkeypatch, reset_plugins):
    """A distribution 'hwt-nodevice' whose plugin 'nodevice' finds no device, with a long cause and fix."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "hwt_nodevice_mod.py").write_text(textwrap.dedent("""\
        from hwadapter.plugin import DeviceUnavailableError, Plugin

        class P(Plugin):
            api_version = (2, 0)

            def device_count(self):
                raise DeviceUnavailableError("the NODEVICE runtime is not installed on this machine",
                                             fix="pip install 'hwt-nodevice[runtime]' if you have a NODEVICE card")

            def create_runtime(self, index):
                raise AssertionError("never called")
    """))
    (site / "hwt_nodevice-1.0.dist-info").mkdir()
    (site / "hwt_nodevice-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: hwt-nodevice\n"
                                                                   "Version: 1.0\n")
    (site / "hwt_nodevice-1.0.dist-info" / "entry_points.txt").write_text("[hwadapter.plugins]\n"
                                                                           "nodevice = hwt_nodevice_mod:P\n")
    monkeypatch.syspath_prepend(str(site))
    reset_plugins()
    yield site
    monkeypatch.undo()
    reset_plugins()


def test_an_optional_plugin_without_a_device_is_named_not_explained_in_other_errors(unavailable_site, caplog):
    """Only a request for that device type (and doctor/devices) explains it; other errors just name it."""
    with caplog.at_level("INFO", logger="hwadapter"):
        assert not hw.device.is_available("nodevice")
    assert [r.levelname for r in caplog.records if "nodevice" in r.getMessage()] == ["INFO"]  # no WARNING on stderr
    with pytest.raises(hw.InvalidDeviceError) as err:
        hw.set_device("nodevice")
    assert "the NODEVICE runtime is not installed" in str(err.value) and "hwt-nodevice[runtime]" in str(err.value)
    with pytest.raises(hw.InvalidDeviceError) as err:
        hw.set_device("cpu:5")
    message = str(err.value)
    assert "without a device here: nodevice" in message
    assert "NODEVICE runtime" not in message and "hwt-nodevice[runtime]" not in message


def test_a_disabled_plugin_says_how_to_enable_it():
    hw.configure(disable_plugins=["testdev"])
    try:
        with pytest.raises(hw.InvalidDeviceError) as err:
            hw.set_device("testdev:0")
        assert "disabled by HWADAPTER_DISABLE_PLUGINS" in str(err.value)
        assert "remove it from HWADAPTER_DISABLE_PLUGINS" in str(err.value)
    finally:
        hw.configure(disable_plugins=[])
    assert str(hw.set_device("testdev:0")) == "testdev:0"


def test_an_unusable_fallback_device_is_explained():
    _device.devices.default = None
    hw.configure(fallback_device="nosuchdevice")
    try:
        with pytest.raises(hw.InvalidDeviceError) as err:
            hw.to_tensor([1.0])
        assert "HWADAPTER_FALLBACK_DEVICE='nosuchdevice' cannot be used" in str(err.value)
        assert "unknown device type 'nosuchdevice'" in str(err.value)
    finally:
        hw.configure(fallback_device="cpu")
    assert hw.get_device() == "cpu:0"


def test_devices_are_not_stale_after_the_registry_is_reset():
    dev = _device.get("testdev:1")
    _device.devices.reset()
    again = _device.get("testdev:1")
    assert again is not dev and again.record is registry.get("testdev")


def _check(spec):
    try:
        dev = _device.get(spec)
    except hw.InvalidDeviceError:
        return
    assert isinstance(spec, str) and VALID.fullmatch(spec), f"{spec!r} was accepted"
    dtype, _, index = spec.partition(":")
    assert dev.type == dtype and dev.index == int(index or 0)
    assert str(dev) in hw.device.get_available_device()


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(st.text())
def test_fuzz_any_text_is_a_device_or_invalid_device_error(spec):
    _check(spec)


@FUZZ
@given(st.from_regex(r"(cpu|testdev|TESTDEV|test_dev|nosuch|opencl|[a-z_]{0,4}|[ :0-9-]{0,2})"
                     r"(:|\s|-|\.|[0-9]{0,3}|[^\x00-\x7f]){0,3}", fullmatch=True))
def test_fuzz_near_valid_text(spec):
    _check(spec)


class Evil:
    def __str__(self):
        raise RuntimeError("str exploded")

    __repr__ = __str__

    def __eq__(self, other):
        raise RuntimeError("eq exploded")

    __hash__ = None


@FUZZ
@given(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.complex_numbers(), st.binary(),
                 st.lists(st.text(max_size=5), max_size=3), st.tuples(st.text(max_size=5), st.integers()),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.builds(object),
                 st.builds(BadRepr), st.builds(Evil), st.sampled_from([str, type, Ellipsis, NotImplemented])))
def test_fuzz_any_object_raises_invalid_device_error(spec):
    before = hw.get_device()
    with pytest.raises(hw.InvalidDeviceError):
        hw.set_device(spec)
    assert hw.get_device() == before
