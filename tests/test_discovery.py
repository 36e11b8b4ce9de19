"""Plugin discovery: real distributions built in a temp dir, each broken kind isolated with its cause and fix."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.config import config
from hwadapter.plugin import API_VERSION
from hwadapter.runtime.discovery import registry

PLUGINS = Path(__file__).parent / "plugins"

FIXTURES = Path(__file__).parent / "fixtures" / "discovery"
GOOD = (FIXTURES / "good_plugin.py").read_text()

# A plugin class header every broken variant below can build on.
BASE = '''
from hwadapter.errors import DeviceUnavailableError
from hwadapter.plugin import Plugin


class Base(Plugin):
    def device_count(self):
        return 1

    def create_runtime(self, index):
        raise RuntimeError("not used in these tests")
'''

# kind -> (module source, object named by the entry point, status, words in the cause, words in the fix)
BROKEN = {
    "missing_dependency": ("import nonexistent_dependency_q7\n" + BASE + "class P(Base): pass\n", "P", "failed",
                           ["ModuleNotFoundError", "nonexistent_dependency_q7"],
                           ["install the missing module 'nonexistent_dependency_q7'"]),
    "raises_at_import": (BASE + "raise RuntimeError('the vendor SDK exploded')\n", "P", "failed",
                         ["RuntimeError", "the vendor SDK exploded"], ["raised while being imported", "--verbose"]),
    "exits_at_import": ("import sys\nsys.exit(3)\n", "P", "failed", ["SystemExit"], ["raised while being imported"]),
    "missing_attribute": (BASE + "class P(Base): pass\n", "NoSuchClass", "failed", ["AttributeError"],
                          ["names an object its module does not define"]),
    "constructor_raises": (BASE + "class P(Base):\n    def __init__(self):\n"
                                  "        raise OSError('libacme.so: cannot open shared object file')\n", "P",
                           "failed", ["constructor P() raised OSError", "libacme.so"], ["requirements", "driver"]),
    "major_too_new": (BASE + f"class P(Base):\n    api_version = ({API_VERSION[0] + 1}, 0)\n", "P", "incompatible",
                      [f"built for plugin API {API_VERSION[0] + 1}.0",
                       f"provides {API_VERSION[0]}.{API_VERSION[1]}"], ["upgrade hwadapter"]),
    "major_too_old": (BASE + f"class P(Base):\n    api_version = ({API_VERSION[0] - 1}, 9)\n", "P", "incompatible",
                      [f"built for plugin API {API_VERSION[0] - 1}.9"],
                      [f"release of the plugin built for plugin API {API_VERSION[0]}.x"]),
    "minor_too_new": (BASE + f"class P(Base):\n    api_version = ({API_VERSION[0]}, {API_VERSION[1] + 1})\n", "P",
                      "incompatible", [f"built for plugin API {API_VERSION[0]}.{API_VERSION[1] + 1}"],
                      ["upgrade hwadapter"]),
    "version_not_a_tuple": (BASE + "class P(Base):\n    api_version = '1.0'\n", "P", "incompatible",
                            ["api_version is '1.0'", "not a (MAJOR, MINOR) tuple"], [f"api_version = {API_VERSION}"]),
    "version_of_floats": (BASE + "class P(Base):\n    api_version = (1.0, 0)\n", "P", "incompatible",
                          ["api_version is (1.0, 0)"], [f"api_version = {API_VERSION}"]),
    "device_count_raises": (BASE + "class P(Base):\n    def device_count(self):\n"
                                   "        raise RuntimeError('clGetPlatformIDs returned -1001')\n", "P",
                            "unavailable", ["device_count() raised RuntimeError", "-1001"],
                            ["driver", "DeviceUnavailableError"]),
    "device_count_unavailable": (BASE + "class P(Base):\n    def device_count(self):\n"
                                        "        err = DeviceUnavailableError('no ACME card on the PCI bus')\n"
                                        "        err.fix = 'seat the card and load the acme kernel module'\n"
                                        "        raise err\n", "P", "unavailable", ["no ACME card on the PCI bus"],
                                 ["seat the card and load the acme kernel module"]),
    "device_count_not_an_int": (BASE + "class P(Base):\n    def device_count(self):\n        return 'two'\n", "P",
                                "failed", ["device_count() returned 'two'"], ["must return an int"]),
    "no_devices": (BASE + "class P(Base):\n    def device_count(self):\n        return 0\n", "P", "unavailable",
                   ["found no devices"], ["driver"]),
    "not_a_plugin_class": (BASE + "class P:\n    api_version = (1, 0)\n", "P", "failed",
                           ["names the class P", "not a subclass of hwadapter.plugin.Plugin"],
                           ["must subclass hwadapter.plugin.Plugin"]),
    "not_a_class": (BASE + "def P():\n    return Base()\n", "P", "failed",
                    ["an instance of function", "not a subclass of hwadapter.plugin.Plugin"],
                    ["point the entry point"]),
    "abstract_plugin": ("from hwadapter.plugin import Plugin\nclass P(Plugin):\n"
                        "    def device_count(self):\n        return 1\n", "P", "failed",
                        ["does not implement", "create_runtime"], ["implement create_runtime"]),
}


class Site:
    """A directory on sys.path into which tests install small distributions."""

    def __init__(self, root: Path, monkeypatch, reset):
        self.root, self._monkeypatch, self._reset = root, monkeypatch, reset
        self.tag = uuid.uuid4().hex[:8]  # module names unique per test: sys.modules outlives sys.path changes
        self.modules: list[str] = []
        root.mkdir(parents=True, exist_ok=True)
        monkeypatch.syspath_prepend(str(root))

    def module(self, stem: str) -> str:
        return f"hwt_{stem}_{self.tag}"

    def install(self, dist: str, version: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
        """Write `dist`-`version`.dist-info and the modules (stem -> source), then rescan the plugins."""
        for stem, source in modules.items():
            name = self.module(stem)
            (self.root / f"{name}.py").write_text(textwrap.dedent(source))
            self.modules.append(name)
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = "".join(f"{name} = {value.format(**{s: self.module(s) for s in modules})}\n"
                        for name, value in entry_points.items())
        (info / "entry_points.txt").write_text(f"[hwadapter.plugins]\n{lines}")
        self._reset()

    def good(self, name: str = "good", dist: str = "hwt-good", version: str = "2.3.4") -> None:
        self.install(dist, version, {name: "{good}:GoodPlugin"}, {"good": GOOD})


@pytest.fixture
def site(tmp_path, monkeypatch, reset_plugins):
    s = Site(tmp_path / "site", monkeypatch, reset_plugins)
    saved = config.plugins, config.disable_plugins
    yield s
    config.plugins, config.disable_plugins = saved
    monkeypatch.undo()  # take the site off sys.path before the rescan, whatever order fixtures end in
    for name in s.modules:
        sys.modules.pop(name, None)
    reset_plugins()


def assert_good_and_cpu_work(site: Site) -> None:
    record = registry.get("good")
    assert record.status == "ok", record.explain()
    calls = sys.modules[site.module("good")].ADD_CALLS
    before = len(calls)
    x = hw.to_tensor([1.0, 2.0], device="good:0")
    y = x + x
    assert str(y.device) == "good:0"
    np.testing.assert_allclose(y.numpy(), [2.0, 4.0])
    assert len(calls) == before + 1  # good's own kernel ran
    assert hw.profiler.fallback_count() == 0
    z = hw.exp(hw.to_tensor([0.0, 1.0], device="cpu"))
    np.testing.assert_allclose(z.numpy(), np.exp([0.0, 1.0]), rtol=1e-6)
    assert "good:0" in hw.device.get_available_device()
    assert "cpu:0" in hw.device.get_available_device()


def test_a_good_plugin_is_found_and_its_device_works(site):
    site.good()
    record = registry.get("good")
    assert record.ok and record.device_count == 1
    assert record.distribution == ("hwt-good", "2.3.4")
    assert record.api_version == API_VERSION
    assert record.levels == ["op"]
    assert hw.device.is_available("good") and hw.device.device_count("good") == 1
    assert_good_and_cpu_work(site)
    hw.set_device("good:0")
    assert hw.get_device() == "good:0"
    assert str(hw.to_tensor([1.0]).device) == "good:0"  # new tensors follow set_device


def test_the_cpu_plugin_comes_from_the_hwadapter_distribution():
    record = registry.get("cpu")
    assert record.ok and record.device_count == 1
    assert record.distribution[0] == "hwadapter"
    assert registry.get("testdev").distribution == ("hwadapter-testdev", "0.1")


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_plugin_is_recorded_and_isolated(site, kind):
    source, attr, status, cause_words, fix_words = BROKEN[kind]
    site.good()
    site.install("hwt-broken", "0.9", {"broken": "{broken}:" + attr}, {"broken": source})
    record = registry.get("broken")
    assert record.status == status, record.explain()
    assert not record.ok
    assert record.broken == (status in ("failed", "incompatible"))
    for word in cause_words:
        assert word in record.cause, record.cause
    for word in fix_words:
        assert word in record.fix, record.fix
    assert record.distribution == ("hwt-broken", "0.9")
    assert "broken" not in hw.device.get_all_device_type()
    assert not hw.device.is_available("broken")
    with pytest.raises(hw.InvalidDeviceError) as err:
        hw.set_device("broken")
    assert record.cause in str(err.value) and record.fix in str(err.value)
    assert_good_and_cpu_work(site)


def test_a_failure_keeps_its_traceback(site):
    site.install("hwt-broken", "0.9", {"broken": "{broken}:P"}, {"broken": BROKEN["raises_at_import"][0]})
    details = registry.get("broken").details
    assert "Traceback" in details and "the vendor SDK exploded" in details and site.module("broken") in details


def test_several_broken_plugins_at_once_leave_the_rest_working(site):
    eps, modules = {}, {}
    for i, kind in enumerate(sorted(BROKEN)):
        eps[f"broken{i}"] = "{" + f"b{i}" + "}:" + BROKEN[kind][1]
        modules[f"b{i}"] = BROKEN[kind][0]
    site.install("hwt-many-broken", "1.0", eps, modules)
    site.good()
    statuses = {r.name: r.status for r in registry.all()}
    for i, kind in enumerate(sorted(BROKEN)):
        assert statuses[f"broken{i}"] == BROKEN[kind][2], kind
    assert statuses["cpu"] == statuses["testdev"] == statuses["good"] == "ok"
    assert_good_and_cpu_work(site)


def test_a_constructor_that_uses_hwadapter_does_not_recurse(site):
    source = BASE + ("import hwadapter\nclass P(Base):\n    def __init__(self):\n"
                     "        self.seen = hwadapter.device.get_available_device()\n")
    site.install("hwt-curious", "1.0", {"curious": "{curious}:P"}, {"curious": source})
    record = registry.get("curious")
    assert record.ok, record.explain()
    assert "cpu:0" in record.plugin.seen and "curious:0" not in record.plugin.seen


def test_an_entry_point_name_that_is_not_a_device_type_is_failed(site):
    site.install("hwt-dashed", "1.0", {"acme-npu": "{good}:GoodPlugin"}, {"good": GOOD})
    record = registry.get("acme-npu")
    assert record.status == "failed" and "not a valid device type" in record.cause
    assert "rename the entry point" in record.fix and "'acme_npu'" in record.fix
    assert site.module("good") not in sys.modules  # rejected before importing anything


def test_the_first_of_two_plugins_claiming_a_type_wins_and_the_other_is_not_imported(site, tmp_path):
    site.install("hwt-first", "1.0", {"dup": "{good}:GoodPlugin"}, {"good": GOOD})
    second = Site(tmp_path / "second", site._monkeypatch, site._reset)
    second.tag = site.tag + "x"
    site.modules += [second.module("good")]
    sys.path.remove(str(second.root))
    sys.path.append(str(second.root))  # later on sys.path: loses
    second.install("hwt-second", "1.0", {"dup": "{good}:GoodPlugin"}, {"good": GOOD})
    record = registry.get("dup")
    assert record.ok and record.distribution == ("hwt-first", "1.0")
    assert site.module("good") in sys.modules and second.module("good") not in sys.modules
    assert registry.shadowed == {"dup": [f"{second.module('good')}:GoodPlugin"]}


def test_reset_finds_a_plugin_installed_after_the_first_scan(site):
    site._reset()
    assert registry.get("good") is None
    site.good()  # same sys.path as the first scan: only a rescan can see it
    assert registry.get("good").ok


def test_allow_list_loads_only_the_named_plugins(site):
    site.good()
    hw.configure(plugins=["cpu", "good"])
    testdev = registry.get("testdev")
    assert testdev.status == "disabled" and "HWADAPTER_PLUGINS" in testdev.cause
    assert "add it to HWADAPTER_PLUGINS" in testdev.fix
    assert sorted(hw.device.get_available_device()) == ["cpu:0", "good:0"]
    with pytest.raises(hw.InvalidDeviceError, match="disabled"):
        hw.set_device("testdev:0")
    assert_good_and_cpu_work(site)
    hw.configure(plugins=[])
    assert registry.get("testdev").ok


def test_disable_list_skips_a_plugin_without_importing_it(site):
    site.good()
    hw.configure(disable_plugins=["good"])
    record = registry.get("good")
    assert record.status == "disabled" and "HWADAPTER_DISABLE_PLUGINS" in record.cause
    assert "remove it from HWADAPTER_DISABLE_PLUGINS" in record.fix
    assert site.module("good") not in sys.modules
    assert "good" not in hw.device.get_all_device_type()
    with pytest.raises(hw.InvalidDeviceError, match="disabled by HWADAPTER_DISABLE_PLUGINS"):
        hw.to_tensor([1.0], device="good")
    hw.configure(disable_plugins=[])
    assert_good_and_cpu_work(site)


SIDE_EFFECT = GOOD + '''
import os
with open(os.environ["HWT_MARKER"], "a") as f:
    f.write("imported\\n")
'''


def test_using_another_device_does_not_import_a_plugin(site, tmp_path, monkeypatch):
    monkeypatch.setenv("HWT_MARKER", str(tmp_path / "marker"))
    site.install("hwt-side", "1.0", {"side": "{side}:GoodPlugin"}, {"side": SIDE_EFFECT})
    hw.set_device("cpu")
    y = hw.exp(hw.to_tensor([1.0, 2.0]))
    assert str(y.device) == "cpu:0"
    hw.to_tensor([1.0], device="testdev:0")
    assert site.module("side") not in sys.modules and not (tmp_path / "marker").exists()
    assert {r.name for r in registry.loaded()} == {"cpu", "testdev"}
    assert registry.get("side").ok  # now it is used, it is imported
    assert (tmp_path / "marker").read_text() == "imported\n"


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=60)


def _env(*paths, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWADAPTER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(p) for p in paths] + [str(PLUGINS)])
    env.update(extra)
    return env


def test_import_hwadapter_and_set_device_cpu_import_no_other_plugin(site, tmp_path):
    site.install("hwt-side", "1.0", {"side": "{side}:GoodPlugin"}, {"side": SIDE_EFFECT})
    marker = tmp_path / "marker"
    code = f'''
        import json, sys
        plugins = ("hwadapter_cpu", "hwadapter_testdev", {site.module("side")!r})
        loaded = lambda: sorted(p for p in plugins if p in sys.modules)
        import hwadapter
        after_import = loaded()
        hwadapter.set_device("cpu")
        (hwadapter.to_tensor([1.0]) * 2).numpy()
        print(json.dumps([after_import, loaded()]))
    '''
    proc = _run(code, _env(site.root, HWT_MARKER=str(marker)))
    assert proc.returncode == 0, proc.stderr
    after_import, after_cpu = json.loads(proc.stdout)
    assert after_import == []  # not even the CPU plugin
    assert after_cpu == ["hwadapter_cpu"]
    assert not marker.exists()


def test_environment_allow_and_disable_lists(site, tmp_path):
    site.good()
    code = '''
        import json, hwadapter
        from hwadapter.runtime.discovery import registry
        print(json.dumps({r.name: r.status for r in registry.all()}))
    '''
    statuses = lambda **env: {k: v for k, v in json.loads(_run(code, _env(site.root, **env)).stdout).items()  # noqa: E731
                               if k in ("cpu", "good", "testdev")}  # the machine may have more plugins
    assert statuses() == {"cpu": "ok", "good": "ok", "testdev": "ok"}
    assert statuses(HWADAPTER_PLUGINS="cpu, good") == {"cpu": "ok", "good": "ok", "testdev": "disabled"}
    assert statuses(HWADAPTER_DISABLE_PLUGINS="good,testdev") == {"cpu": "ok", "good": "disabled",
                                                                  "testdev": "disabled"}
    # the disable-list wins over the allow-list
    assert statuses(HWADAPTER_PLUGINS="cpu,good", HWADAPTER_DISABLE_PLUGINS="good") == {
        "cpu": "ok", "good": "disabled", "testdev": "disabled"}
