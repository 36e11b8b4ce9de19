"""The `hwadapter` command, run as a user runs it: a subprocess with test plugins and broken ones on the path."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import hwadapter
from hwadapter.plugin import API_VERSION

PLUGINS = Path(__file__).parent / "plugins"
FIXTURES = Path(__file__).parent / "fixtures" / "discovery"
SCRIPT = Path(sys.executable).with_name("hwadapter")


def _dist(site: Path, module: str, dist: str, entry: str, source: str) -> None:
    (site / f"{module}.py").write_text(source)
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[hwadapter.plugins]\n{entry}\n")


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory) -> Path:
    """Two broken plugins: 'broken' needs a module that is not installed, 'future' is built for a newer API."""
    site = tmp_path_factory.mktemp("site")
    _dist(site, "hwt_cli_broken", "hwt-cli-broken", "broken = hwt_cli_broken:Plugin",
          "import acme_runtime_missing_k3\n")
    _dist(site, "hwt_cli_future", "hwt-cli-future", "future = hwt_cli_future:FuturePlugin",
          "from hwadapter.plugin import Plugin\n\n"
          f"class FuturePlugin(Plugin):\n    api_version = ({API_VERSION[0] + 1}, 0)\n"
          "    def device_count(self):\n        return 1\n"
          "    def create_runtime(self, index):\n        raise NotImplementedError\n")
    return site


def hwadapter_cli(*args, site: Path | None = None, **env) -> subprocess.CompletedProcess:
    """Run the console script (or `python -m hwadapter.cli` where it is not installed)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("HWADAPTER_")}
    full["PYTHONPATH"] = os.pathsep.join(([str(site)] if site else []) + [str(PLUGINS)])
    full["COLUMNS"] = "300"  # wide enough that rich does not fold table cells
    full.update(env)
    cmd = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "hwadapter.cli"]
    return subprocess.run(cmd + list(args), env=full, capture_output=True, text=True, timeout=60)


def _row(output: str, device_type: str) -> list[str]:
    for line in output.splitlines():
        line = line.strip()
        if not (line.startswith("│") and line.endswith("│")):
            continue
        cells = [c.strip() for c in line[1:-1].split("│")]
        if cells[0] == device_type:
            return cells
    raise AssertionError(f"no row for {device_type!r} in:\n{output}")


def test_version():
    proc = hwadapter_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"hwadapter {hwadapter.__version__} (plugin API {API_VERSION[0]}.{API_VERSION[1]})"


def test_no_command_prints_usage():
    proc = hwadapter_cli()
    assert proc.returncode == 2 and "devices" in proc.stderr and "doctor" in proc.stderr


def test_devices_table(broken_site):
    proc = hwadapter_cli("devices", site=broken_site)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    cpu = _row(out, "cpu")
    api = f"{API_VERSION[0]}.{API_VERSION[1]}"
    assert cpu[1:3] == [f"hwadapter {hwadapter.__version__}", api] and cpu[4:] == ["ok", "cpu:0"]
    assert "op" in cpu[3].split(", ")
    assert _row(out, "testdev")[1:] == ["hwadapter-testdev 0.1", api, "op", "ok", "testdev:0, testdev:1"]
    broken = _row(out, "broken")
    assert broken[1] == "hwt-cli-broken 1.0" and broken[4:] == ["failed", "0"]
    future = _row(out, "future")
    assert future[2] == f"{API_VERSION[0] + 1}.0" and future[4] == "incompatible"
    below = out.split("└")[1]  # the reasons are under the table, one line each
    assert "broken: failed: import of hwt_cli_broken:Plugin failed: ModuleNotFoundError: No module named " \
           "'acme_runtime_missing_k3'" in below
    assert f"future: incompatible: built for plugin API {API_VERSION[0] + 1}.0" in below
    assert "hwadapter doctor" in below


def test_devices_table_fits_80_columns(broken_site):
    """At 80 columns every cell stays readable: no column is squeezed away, reasons wrap under the table."""
    proc = hwadapter_cli("devices", site=broken_site, COLUMNS="80")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, proc.stdout
    table = [line for line in lines if line.startswith(("┃", "│"))]
    cells = [[c.strip() for c in line[1:-1].split("│" if line.startswith("│") else "┃")] for line in table]
    assert cells[0] == ["type", "distribution", "api", "levels", "status", "devices"]
    rows = {c[0]: c for c in cells[1:] if c[0]}
    assert {"cpu", "testdev", "broken", "future"} <= set(rows)
    assert rows["testdev"][4] == "ok" and rows["broken"][4] == "failed" and rows["future"][4] == "incompatible"
    below = " ".join(line.strip() for line in proc.stdout.split("└")[1].splitlines())
    assert "broken: failed: import of hwt_cli_broken:Plugin failed: ModuleNotFoundError: No module named " \
           "'acme_runtime_missing_k3'" in below


def test_devices_json(broken_site):
    proc = hwadapter_cli("devices", "--json", site=broken_site)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    api = f"{API_VERSION[0]}.{API_VERSION[1]}"
    assert data["hwadapter"] == hwadapter.__version__ and data["plugin_api"] == api
    plugins = {p["type"]: p for p in data["plugins"]}
    assert {"cpu", "testdev", "broken", "future"} <= set(plugins)  # plus whatever plugins this machine has
    assert "op" in plugins["cpu"]["levels"]
    assert set(plugins["cpu"]) == {"type", "entry_point", "distribution", "version", "api_version", "levels", "status",
                                   "device_count", "devices", "cause", "fix"}
    assert plugins["cpu"] | {"fix": None, "levels": None} == {
        "type": "cpu", "entry_point": "hwadapter_cpu:CpuPlugin", "distribution": "hwadapter",
        "version": hwadapter.__version__, "api_version": api, "levels": None, "status": "ok", "device_count": 1,
        "devices": ["cpu:0"], "cause": "", "fix": None}
    assert plugins["testdev"]["levels"] == ["op"]
    assert plugins["testdev"]["devices"] == ["testdev:0", "testdev:1"]
    assert plugins["broken"]["status"] == "failed" and plugins["broken"]["devices"] == []
    assert "acme_runtime_missing_k3" in plugins["broken"]["cause"]
    assert "install the missing module 'acme_runtime_missing_k3'" in plugins["broken"]["fix"]
    assert plugins["future"]["status"] == "incompatible" and "upgrade hwadapter" in plugins["future"]["fix"]


def test_doctor_explains_failures_and_exits_1(broken_site):
    proc = hwadapter_cli("doctor", site=broken_site)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "FAIL broken (hwt-cli-broken 1.0, entry point hwt_cli_broken:Plugin): failed: import of " in out
    assert "fix: install the missing module 'acme_runtime_missing_k3'" in out
    assert "FAIL future (hwt-cli-future 1.0" in out and "incompatible" in out and "fix: upgrade hwadapter" in out
    assert "ok   cpu (hwadapter" in out and "ok   testdev (hwadapter-testdev 0.1" in out
    assert "2 device(s) testdev:0, testdev:1" in out
    assert "HWADAPTER_FALLBACK=warn" in out
    assert "fallback device HWADAPTER_FALLBACK_DEVICE='cpu' is usable: cpu:0" in out
    assert "2 plugin(s) failed to load or are incompatible: broken, future" in out
    assert "Traceback" not in out


def test_doctor_verbose_shows_the_traceback(broken_site):
    proc = hwadapter_cli("doctor", "--verbose", site=broken_site)
    assert proc.returncode == 1
    assert "Traceback (most recent call last)" in proc.stdout
    assert "import acme_runtime_missing_k3" in proc.stdout  # the failing line of the plugin's source


def test_doctor_exits_0_when_every_plugin_loads():
    proc = hwadapter_cli("doctor", HWADAPTER_PLUGINS="cpu,testdev")  # the machine's other plugins may lack a device
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and "everything is in order" in proc.stdout


def test_doctor_reports_a_disabled_plugin_without_failing():
    proc = hwadapter_cli("doctor", HWADAPTER_DISABLE_PLUGINS="testdev")
    assert proc.returncode == 0
    assert "off  testdev" in proc.stdout and "disabled by HWADAPTER_DISABLE_PLUGINS" in proc.stdout


def _absent_name() -> str:
    """A device type no machine has a plugin for (tests must not assume which plugins are installed)."""
    return f"absent_{uuid.uuid4().hex[:12]}"


def test_doctor_checks_the_fallback_settings_and_exits_1_on_a_failed_one():
    absent = _absent_name()
    proc = hwadapter_cli("doctor", HWADAPTER_FALLBACK="sometimes", HWADAPTER_FALLBACK_DEVICE=absent,
                         HWADAPTER_PLUGINS=f"cpu,testdev,{absent}")
    assert proc.returncode == 1, proc.stdout
    out = proc.stdout
    assert "FAIL HWADAPTER_FALLBACK='sometimes' is not one of warn, error" in out
    assert "fix: unset HWADAPTER_FALLBACK (default warn) or set it to 'warn' or 'error'" in out
    assert f"FAIL fallback device HWADAPTER_FALLBACK_DEVICE='{absent}' cannot be used: unknown device type" in out
    assert f"warn HWADAPTER_PLUGINS names '{absent}', which no installed plugin provides" in out
    assert "2 setting(s) need fixing" in out
    assert hwadapter_cli("doctor", HWADAPTER_FALLBACK="sometimes").returncode == 1


@pytest.mark.parametrize("env, line", [
    ({"HWADAPTER_CPU_KERNELS": "bogus"}, "FAIL HWADAPTER_CPU_KERNELS='bogus' is not one of numpy, codegen"),
    ({"HWADAPTER_PROBE_TIMEOUT": "soon"}, "FAIL HWADAPTER_PROBE_TIMEOUT='soon' is not a positive number of seconds"),
    ({"HWADAPTER_FALLBACK_DEVICE": "cpu:"}, "FAIL fallback device HWADAPTER_FALLBACK_DEVICE='cpu:' cannot be used: "
                                            "malformed device string"),
    ({"HWADAPTER_FALLBACK_DEVICE": "testdev:5"}, "FAIL fallback device HWADAPTER_FALLBACK_DEVICE='testdev:5' cannot "
                                                 "be used: testdev has 2 device(s)"),
])
def test_doctor_fails_on_a_setting_it_cannot_honour(env, line):
    proc = hwadapter_cli("doctor", HWADAPTER_PLUGINS="cpu,testdev", **env)
    assert proc.returncode == 1, proc.stdout
    assert line in proc.stdout
    assert "setting(s) need fixing" in proc.stdout


def test_doctor_fails_when_the_allow_list_allows_no_installed_plugin():
    absent = _absent_name()
    proc = hwadapter_cli("doctor", HWADAPTER_PLUGINS=absent)
    assert proc.returncode == 1, proc.stdout
    out = proc.stdout
    assert f"warn HWADAPTER_PLUGINS names '{absent}', which no installed plugin provides" in out
    assert f"FAIL HWADAPTER_PLUGINS={absent} allows none of the installed plugins" in out
    assert "off  cpu (" in out and "FAIL fallback device HWADAPTER_FALLBACK_DEVICE='cpu' cannot be used" in out


def test_ops_for_one_device_shows_what_falls_back():
    proc = hwadapter_cli("ops", "--device", "testdev")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert _row(out, "exp") == ["exp", "no kernel: falls back to cpu"]
    assert _row(out, "add") == ["add", "float32 (other dtypes: fall back to cpu)"]
    assert _row(out, "reshape") == ["reshape", "any"]
    assert "testdev: 5 of " in out


def test_ops_in_strict_mode_says_missing_kernels_raise():
    proc = hwadapter_cli("ops", "--device", "testdev", HWADAPTER_FALLBACK="error")
    assert _row(proc.stdout, "exp")[1] == "no kernel: raises KernelNotFoundError (HWADAPTER_FALLBACK=error)"


def test_ops_json_lists_every_device_type():
    proc = hwadapter_cli("ops", "--json", HWADAPTER_PLUGINS="cpu,testdev")  # not the machine's other plugins
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["device_types"] == ["cpu", "testdev"] and data["fallback_device"] == "cpu"
    assert data["ops"]["exp"] == {"cpu": ["any"], "testdev": None}
    assert data["ops"]["matmul"] == {"cpu": ["any"], "testdev": ["float32"]}


def test_ops_for_an_unusable_device_explains_and_exits_2(broken_site):
    proc = hwadapter_cli("ops", "--device", "broken", site=broken_site)
    assert proc.returncode == 2
    assert "cannot be used" in proc.stderr and "acme_runtime_missing_k3" in proc.stderr


def test_import_hwadapter_does_not_import_rich_or_the_cli():
    code = "import sys, hwadapter; print(sorted(m for m in ('rich', 'hwadapter.cli') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def codegen_site(tmp_path_factory) -> Path:
    """'gen': only an `add` kernel and a usable codegen backend; 'nogen': the same, but its backend has no compiler."""
    site = tmp_path_factory.mktemp("codegen_site")
    _dist(site, "hwt_cli_gen", "hwt-cli-gen", "gen = hwt_cli_gen:CodegenPlugin\nnogen = hwt_cli_gen:NoCompilerPlugin",
          (FIXTURES / "good_plugin.py").read_text())
    return site


def test_ops_shows_ops_a_codegen_backend_generates(codegen_site):
    proc = hwadapter_cli("ops", "--device", "gen", site=codegen_site)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert _row(out, "add") == ["add", "any"]
    assert _row(out, "exp") == ["exp", "compiler (generated from kernel primitives)"]
    assert _row(out, "matmul") == ["matmul", "no kernel: falls back to cpu"]  # not written in kernel primitives
    assert "gen: 1 of " in out and "more are generated by its compiler backend" in out


def test_devices_calls_the_compiler_level_compiler(codegen_site):
    """`new-plugin --level compiler`, the kit and the docs say "compiler"; `devices` once said "codegen"."""
    proc = hwadapter_cli("devices", "--json", site=codegen_site, HWADAPTER_PLUGINS="gen")
    assert {p["type"]: p["levels"] for p in json.loads(proc.stdout)["plugins"]}["gen"] == ["op", "compiler"]


def test_ops_and_doctor_say_when_a_codegen_backend_cannot_compile(codegen_site):
    proc = hwadapter_cli("ops", "--device", "nogen", site=codegen_site)
    assert proc.returncode == 0, proc.stderr
    assert _row(proc.stdout, "exp") == ["exp", "no kernel: falls back to cpu"]
    assert "nogen: compiler backend unavailable: no acme-cc compiler on PATH" in proc.stderr
    doctor = hwadapter_cli("doctor", site=codegen_site)
    assert doctor.returncode == 0, doctor.stdout
    assert "warn compiler backend unavailable: no acme-cc compiler on PATH; install the ACME SDK" in doctor.stdout
    assert "compiler backend usable: " in doctor.stdout  # gen's
    assert "compiler backend unavailable on nogen" in doctor.stdout
    assert "levels: op, compiler" in doctor.stdout and "codegen " not in doctor.stdout  # the level's one name
    assert hwadapter_cli("doctor", "--strict", site=codegen_site).returncode == 1


MISBEHAVING = {"crash": "AbortPlugin", "segv": "SegfaultPlugin", "many": "ManyPlugin", "nolevel": "NoLevelPlugin",
               "badop": "UnknownOpPlugin", "baddtype": "UnknownDtypePlugin", "badrt": "RuntimeFailsPlugin",
               "noversion": "NoVersionPlugin"}


@pytest.fixture(scope="module")
def misbehaving_site(tmp_path_factory) -> Path:
    """One distribution whose plugins each misbehave at one step doctor probes (tests/fixtures/discovery)."""
    site = tmp_path_factory.mktemp("misbehaving_site")
    _dist(site, "hwt_cli_misbehaving", "hwt-cli-misbehaving",
          "\n".join(f"{name} = hwt_cli_misbehaving:{cls}" for name, cls in MISBEHAVING.items()),
          (FIXTURES / "misbehaving.py").read_text())
    return site


#: The machine's own plugins (opencl, cuda, ...) are not needed where the misbehaving ones are the subject.
ONLY_MISBEHAVING = {"HWADAPTER_PLUGINS": ",".join(["cpu", "testdev", *MISBEHAVING])}


def _head(out: str, name: str) -> str:
    """doctor's line for plugin `name`."""
    for line in out.splitlines():
        if line.startswith("  ") and line[7:].startswith(f"{name} (hwt-cli-misbehaving 1.0, entry point "):
            return line
    raise AssertionError(f"no doctor line for {name!r} in:\n{out}")


def test_doctor_survives_plugins_that_crash_and_reports_each(misbehaving_site):
    proc = hwadapter_cli("doctor", site=misbehaving_site, **ONLY_MISBEHAVING)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert _head(out, "crash").endswith("failed: the plugin crashed the Python process in device_count() (killed by "
                                        "signal SIGABRT (6))")
    assert _head(out, "segv").endswith("failed: the plugin crashed the Python process in device_count() (killed by "
                                       "signal SIGSEGV (11))")
    assert "HWADAPTER_DISABLE_PLUGINS=crash (a disabled plugin is never imported)" in out
    assert "ok   cpu (hwadapter" in out and "ok   testdev (hwadapter-testdev 0.1" in out
    assert "fallback device HWADAPTER_FALLBACK_DEVICE='cpu' is usable: cpu:0" in out
    summary = out.split("Summary: ")[1]
    for name in ("crash", "segv", "nolevel", "badop", "baddtype", "badrt", "noversion"):
        assert name in summary.split("failed to load or are incompatible: ")[1].split(";")[0]


def test_doctor_verbose_shows_where_a_plugin_crashed(misbehaving_site):
    proc = hwadapter_cli("doctor", "--verbose", site=misbehaving_site, HWADAPTER_PLUGINS="crash")
    assert "Fatal Python error: Aborted" in proc.stdout
    assert 'hwt_cli_misbehaving.py", line' in proc.stdout and "in device_count" in proc.stdout


def test_doctor_checks_what_a_plugin_does_at_first_use(misbehaving_site):
    proc = hwadapter_cli("doctor", site=misbehaving_site, **ONLY_MISBEHAVING)
    out = proc.stdout
    assert ": failed: the plugin provides no level: it overrides none of register_kernels" in _head(out, "nolevel")
    assert ("failed: register_kernels failed: plugin 'badop': register_kernels registered a kernel for 'addd', "
            "which is not an op of hwadapter") in _head(out, "badop")
    assert "registered op 'add' for dtype 'complex64', which is not a dtype hwadapter supports" in \
        _head(out, "baddtype")
    assert ("failed: create_runtime(0) failed: badrt:0: the 'badrt' plugin (distribution hwt-cli-misbehaving 1.0) "
            "could not create a runtime: create_runtime(0) raised OSError: acme_open(0) failed") in _head(out, "badrt")
    assert _head(out, "noversion").endswith("incompatible: the plugin class NoVersionPlugin declares no api_version, "
                                            "so the plugin API it was built for is unknown")
    assert f"fix: set api_version = ({API_VERSION[0]}, {API_VERSION[1]}) in the class body of " \
           f"hwt_cli_misbehaving.NoVersionPlugin" in out
    assert _head(out, "many").endswith(": ok, 1000000000 device(s) many:0..many:999999999 (1000000000 devices); "
                                       "levels: op")


def test_devices_lists_misbehaving_plugins(misbehaving_site):
    proc = hwadapter_cli("devices", site=misbehaving_site, **ONLY_MISBEHAVING)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _row(proc.stdout, "crash")[4:] == ["failed", "0"]
    assert _row(proc.stdout, "many")[4:] == ["ok", "many:0..many:999999999 (1000000000 devices)"]
    assert "crash: failed: the plugin crashed the Python process in device_count()" in proc.stdout
    data = json.loads(hwadapter_cli("devices", "--json", site=misbehaving_site, **ONLY_MISBEHAVING).stdout)
    plugins = {p["type"]: p for p in data["plugins"]}
    assert plugins["many"]["device_count"] == 10 ** 9
    assert plugins["many"]["devices"][:2] == ["many:0", "many:1"] and len(plugins["many"]["devices"]) == 1024
    assert plugins["segv"]["status"] == "failed" and "SIGSEGV" in plugins["segv"]["cause"]


def test_doctor_stops_a_plugin_that_hangs(tmp_path):
    _dist(tmp_path, "hwt_cli_hang", "hwt-cli-hang", "hang = hwt_cli_hang:HangPlugin",
          (FIXTURES / "misbehaving.py").read_text())
    start = time.monotonic()
    proc = hwadapter_cli("doctor", "--verbose", site=tmp_path, HWADAPTER_PLUGINS="hang", HWADAPTER_PROBE_TIMEOUT="5",
                         HWT_HANG_SECONDS="300")
    assert time.monotonic() - start < 40
    assert proc.returncode == 1, proc.stdout
    line = [x for x in proc.stdout.splitlines() if x.startswith("  FAIL hang (hwt-cli-hang 1.0")][0]
    assert line.endswith("failed: the plugin did not finish device_count() within 5 s: it hangs or is very slow")
    assert "raise the limit with HWADAPTER_PROBE_TIMEOUT=<seconds>" in proc.stdout
    assert "in device_count" in proc.stdout  # the child's stack, dumped before it was stopped
    devices = hwadapter_cli("devices", "--timeout", "5", site=tmp_path, HWADAPTER_PLUGINS="hang",
                            HWT_HANG_SECONDS="300")
    assert devices.returncode == 0 and _row(devices.stdout, "hang")[4] == "failed"


def test_doctor_refuses_a_type_claimed_twice_and_a_claim_on_cpu(tmp_path):
    good = (FIXTURES / "good_plugin.py").read_text()
    _dist(tmp_path, "hwt_cli_dup_a", "hwt-cli-dup-a", "dup = hwt_cli_dup_a:GoodPlugin", good)
    _dist(tmp_path, "hwt_cli_dup_b", "hwt-cli-dup-b", "DUP = hwt_cli_dup_b:GoodPlugin\ncpu = hwt_cli_dup_b:GoodPlugin",
          good)
    proc = hwadapter_cli("doctor", site=tmp_path)
    assert proc.returncode == 1, proc.stdout
    out = proc.stdout
    for name in ("dup", "DUP"):
        head = f"  FAIL {name} (hwt-cli-dup-a, hwt-cli-dup-b, entry point "
        line = [x for x in out.splitlines() if x.startswith(head)][0]
        assert "failed: device type" in line and "is claimed by 2 entry points" in line
    assert "fix: uninstall all but one of them (pip uninstall hwt-cli-dup-a or hwt-cli-dup-b)" in out
    assert ("FAIL device type 'cpu' belongs to the hwadapter distribution (cpu = hwadapter_cpu:CpuPlugin), but "
            "hwt-cli-dup-b 1.0 (cpu = hwt_cli_dup_b:GoodPlugin) also claims it: that claim is refused") in out
    assert "fix: pip uninstall hwt-cli-dup-b (it tries to replace the built-in 'cpu' device)" in out
    assert "ok   cpu (hwadapter " in out


def test_new_plugin_prints_the_install_line_the_readme_shows(tmp_path, monkeypatch, capsys):
    """The README, the command's output and the generated README gave three different install lines."""
    from hwadapter import cli
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    shown = next(line.split("#")[0].strip() for line in readme.splitlines() if line.startswith("pip install -e ")
                 and "hwadapter-acme" in line)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["new-plugin", "acme"]) == 0
    out = capsys.readouterr().out
    assert f"  {shown}  # " in out, out
    assert shown == "pip install -e './hwadapter-acme[test]'"
    generated = (tmp_path / "hwadapter-acme" / "README.md").read_text()
    assert "pip install -e '.[test]'" in generated  # the same extra, from inside the package
