"""Plugin discovery: real distributions built in a temp dir, each broken kind isolated with its cause and fix."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import kp
from hwadapter.api.config import config
from hwadapter.api.interfaces import KernelRegistrar, KernelTable
from hwadapter.plugin import API_VERSION
from hwadapter.runtime.discovery import registry

PLUGINS = Path(__file__).parent / "plugins"

FIXTURES = Path(__file__).parent / "fixtures" / "discovery"
GOOD = (FIXTURES / "good_plugin.py").read_text()

# A plugin class header every broken variant below can build on.
BASE = '''
from hwadapter.api.errors import DeviceUnavailableError
from hwadapter.plugin import Plugin


class Base(Plugin):
    api_version = (2, 0)

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
    "version_omitted": ("from hwadapter.plugin import Plugin\nclass P(Plugin):\n"
                        "    def device_count(self):\n        return 1\n"
                        "    def create_runtime(self, index):\n        raise RuntimeError\n", "P", "incompatible",
                        ["P declares no api_version"], [f"set api_version = ({API_VERSION[0]}, {API_VERSION[1]})"]),
    "abstract_plugin": ("from hwadapter.plugin import Plugin\nclass P(Plugin):\n    api_version = (2, 0)\n"
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


def _second_site(site: Site, tmp_path, first: bool) -> Site:
    """Another directory of distributions, before or after `site` on sys.path."""
    other = Site(tmp_path / "second", site._monkeypatch, site._reset)
    other.tag = site.tag + "x"
    site.modules += [other.module("good"), other.module("evil")]
    sys.path.remove(str(other.root))
    sys.path.insert(0, str(other.root)) if first else sys.path.append(str(other.root))
    return other


@pytest.mark.parametrize("second_first", [False, True], ids=["second-later", "second-earlier"])
def test_a_type_claimed_by_two_distributions_is_refused_whatever_the_path_order(site, tmp_path, second_first):
    site.install("hwt-first", "1.0", {"dup": "{good}:GoodPlugin"}, {"good": GOOD})
    second = _second_site(site, tmp_path, second_first)
    second.install("hwt-second", "1.0", {"dup": "{good}:GoodPlugin"}, {"good": GOOD})
    record = registry.get("dup")
    assert record.status == "failed" and not record.ok
    assert "claimed by 2 entry points" in record.cause
    assert "hwt-first 1.0" in record.cause and "hwt-second 1.0" in record.cause
    assert "uninstall all but one of them (pip uninstall hwt-first or hwt-second)" in record.fix
    assert site.module("good") not in sys.modules and second.module("good") not in sys.modules  # neither imported
    with pytest.raises(hw.InvalidDeviceError, match="claimed by 2 entry points"):
        hw.set_device("dup")
    assert "dup" not in hw.device.get_all_device_type()


def test_names_equal_but_for_case_or_spaces_claim_the_same_type(site, tmp_path):
    site.good()
    second = _second_site(site, tmp_path, True)
    second.install("hwt-shouting", "1.0", {"GOOD": "{good}:GoodPlugin"}, {"good": GOOD})
    third = Site(tmp_path / "third", site._monkeypatch, site._reset)
    third.tag = site.tag + "y"
    site.modules.append(third.module("good"))
    third.install("hwt-spaced", "1.0", {" good ": "{good}:GoodPlugin"}, {"good": GOOD})
    assert (third.root / "hwt_spaced-1.0.dist-info" / "entry_points.txt").read_text().count(" good  = ") == 1
    for name in ("good", "GOOD"):
        record = registry.get(name)
        assert record.status == "failed" and "claimed by 3 entry points" in record.cause, record.explain()
        assert all(d in record.cause for d in ("hwt-good 2.3.4", "hwt-shouting 1.0", "hwt-spaced 1.0"))
    assert not any(m in sys.modules for m in (site.module("good"), second.module("good"), third.module("good")))


EVIL = GOOD + """

class EvilCpu(GoodPlugin):
    pass


import os
if os.environ.get("HWT_MARKER"):
    open(os.environ["HWT_MARKER"], "a").write("evil imported\\n")
"""


@pytest.mark.parametrize("name", ["cpu", "CPU", " cpu"])
def test_another_distribution_cannot_take_over_the_cpu_fallback(site, tmp_path, monkeypatch, name):
    monkeypatch.setenv("HWT_MARKER", str(tmp_path / "marker"))
    site.install("hwt-evil-cpu", "6.6.6", {name: "{evil}:EvilCpu"}, {"evil": EVIL})  # first on sys.path
    record = registry.get("cpu")
    assert record.ok and record.distribution[0] == "hwadapter", record.explain()
    assert type(record.plugin).__module__ == "hwadapter_cpu"
    conflict = registry.conflicts["cpu"]
    cause, fix = conflict.explain()
    assert "belongs to the hwadapter distribution" in cause and "hwt-evil-cpu 6.6.6" in cause
    assert fix.startswith("pip uninstall hwt-evil-cpu")
    assert registry.get(name.strip()) is record or registry.get(name.strip()) is None  # 'CPU' is no device type
    hw.device.reset_plugins()
    x = hw.to_tensor([1.0, 2.0])  # on the fallback device
    assert str(x.device) == "cpu:0"
    np.testing.assert_allclose(hw.exp(x).numpy(), np.exp([1.0, 2.0]), rtol=1e-6)
    assert site.module("evil") not in sys.modules and not (tmp_path / "marker").exists()


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


def _run(code: str, env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=timeout)


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


MISBEHAVING = (FIXTURES / "misbehaving.py").read_text()


def test_a_device_error_loads_no_plugin(site, tmp_path, monkeypatch):
    """Building the message of a typo runs no plugin code: it lists the plugins loaded so far and names the others."""
    monkeypatch.setenv("HWT_MARKER", str(tmp_path / "marker"))
    site.install("hwt-side", "1.0", {"side": "{side}:GoodPlugin"}, {"side": SIDE_EFFECT})
    hw.set_device("cpu")
    for typo in ("cpuu", "cpu:7", "side:", 3):
        with pytest.raises(hw.InvalidDeviceError) as err:
            hw.set_device(typo)
        message = str(err.value)
        assert "available: cpu:0" in message
        assert "installed, not loaded yet: " in message and "side" in message.split("installed, not loaded yet: ")[1]
    assert site.module("side") not in sys.modules and not (tmp_path / "marker").exists()
    assert "side" not in {r.name for r in registry.loaded()}


def _typo_in_a_process(site_root: Path, env: dict, code: str = "hwadapter.set_device('cpuu')",
                       timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    script = f'''
        import resource, time
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a message that builds 10**9 strings fails fast
        import hwadapter
        hwadapter.set_device("cpu")
        start = time.monotonic()
        try:
            {code}
        except hwadapter.InvalidDeviceError as err:
            print("InvalidDeviceError:", err)
        except BaseException as err:
            print("ESCAPED", type(err).__name__, err)
        print("seconds", time.monotonic() - start)
    '''
    start = time.monotonic()
    proc = _run(script, _env(site_root, **env), timeout=timeout)
    return proc, time.monotonic() - start


@pytest.mark.parametrize("plugin", ["AbortPlugin", "SegfaultPlugin", "HangPlugin"])
def test_a_typo_does_not_run_a_plugin_that_crashes_or_hangs(site, plugin):
    site.install("hwt-misbehaving", "1.0", {"bad": "{bad}:" + plugin}, {"bad": MISBEHAVING})
    proc, took = _typo_in_a_process(site.root, {"HWT_HANG_SECONDS": "600"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "InvalidDeviceError: unknown device type 'cpuu'" in proc.stdout
    assert "Did you mean 'cpu'" in proc.stdout and "installed, not loaded yet: " in proc.stdout
    assert took < 30


def test_a_plugin_with_a_billion_devices_is_summarised_in_messages(site):
    site.install("hwt-many", "1.0", {"many": "{many}:ManyPlugin"}, {"many": MISBEHAVING})
    proc, _ = _typo_in_a_process(site.root, {}, "hwadapter.set_device('many:7'); hwadapter.set_device('cpuu')")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ESCAPED" not in proc.stdout
    assert "available: cpu:0, many:0..many:999999999 (1000000000 devices)" in proc.stdout
    proc, _ = _typo_in_a_process(site.root, {}, "hwadapter.set_device('many:1000000000')")
    assert "out of range for 'many', which has 1000000000 device(s)" in proc.stdout


def _registered(site: Site, plugin: str):
    site.install("hwt-kernels", "1.0", {"kern": "{kern}:" + plugin}, {"kern": MISBEHAVING})
    return hw.to_tensor([1.0, 2.0], device="kern") + hw.to_tensor([3.0, 4.0], device="kern")


@pytest.mark.parametrize("plugin, words", [
    ("UnknownOpPlugin", ["registered a kernel for 'addd', which is not an op of hwadapter", "`hwadapter ops`"]),
    ("UnknownDtypePlugin", ["for dtype 'complex64', which is not a dtype hwadapter supports", "float32"]),
    ("DtypeStringPlugin", ["with dtypes='float32', not a list", "dtypes=['float32']"]),
])
def test_the_registrar_refuses_what_no_op_could_use(site, plugin, words):
    with pytest.raises(hw.PluginLoadError) as err:
        _registered(site, plugin)
    message = str(err.value)
    assert message.startswith("plugin 'kern': register_kernels ")
    for word in words:
        assert word in message
    assert "HWADAPTER_DISABLE_PLUGINS=kern" in message


def _twice(x: kp.In["T"], out: kp.Out["T"]):
    kp.write(out, kp.read(x) + kp.read(x))


def test_the_registrar_accepts_ops_from_kp_register_op():
    from hwadapter.runtime.device import get, is_op  # here: the function is new, and the other tests run without it
    name = f"twice_{uuid.uuid4().hex[:8]}"
    assert not is_op(name)
    kp.register_op(name, kp.kernel(_twice))
    table = KernelTable()
    registrar = KernelRegistrar(table, get("cpu"), is_op)
    registrar.register(name, lambda x: x, dtypes=["float32", ("float32",)])
    assert table.ops() == {name: ["(float32)", "float32"]}
    with pytest.raises(hw.PluginLoadError, match="not a dtype hwadapter supports"):
        registrar.register("add", lambda x, y: x, dtypes=[np.float32, "float"])  # an alias numpy reads as float64


@pytest.mark.parametrize("mode, printed", [("bogus", "refused: HWADAPTER_CPU_KERNELS='bogus' is not one of numpy, "
                                                     "codegen"), ("numpy", "[2. 4.]")])
def test_an_unknown_cpu_kernels_mode_is_refused_when_the_cpu_is_used(mode, printed):
    code = '''
        import hwadapter as hw
        x = hw.to_tensor([1.0, 2.0])
        try:
            print((x + x).numpy())
        except hw.InvalidArgumentError as err:
            print("refused:", err)
    '''
    proc = _run(code, _env(HWADAPTER_CPU_KERNELS=mode))
    assert proc.returncode == 0, proc.stderr
    assert printed in proc.stdout
