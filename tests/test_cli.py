"""The `hwadapter` command, run as a user runs it: a subprocess with test plugins and broken ones on the path."""
from __future__ import annotations

import json
import os
import subprocess
import sys
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
    assert cpu[1:3] == [f"hwadapter {hwadapter.__version__}", api] and cpu[4:7] == ["ok", "cpu:0", ""]
    assert "op" in cpu[3].split(",")
    assert _row(out, "testdev")[1:6] == ["hwadapter-testdev 0.1", api, "op", "ok", "testdev:0, testdev:1"]
    broken = _row(out, "broken")
    assert broken[1] == "hwt-cli-broken 1.0" and broken[4] == "failed" and broken[5] == "0"
    assert "ModuleNotFoundError: No module named 'acme_runtime_missing_k3'" in broken[6]
    future = _row(out, "future")
    assert future[2] == f"{API_VERSION[0] + 1}.0" and future[4] == "incompatible"
    assert f"built for plugin API {API_VERSION[0] + 1}.0" in future[6]
    assert "hwadapter doctor" in out


def test_devices_json(broken_site):
    proc = hwadapter_cli("devices", "--json", site=broken_site)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    api = f"{API_VERSION[0]}.{API_VERSION[1]}"
    assert data["hwadapter"] == hwadapter.__version__ and data["plugin_api"] == api
    plugins = {p["type"]: p for p in data["plugins"]}
    assert {"cpu", "testdev", "broken", "future"} <= set(plugins)  # plus whatever plugins this machine has
    assert "op" in plugins["cpu"]["levels"]
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


def test_doctor_checks_the_fallback_settings():
    proc = hwadapter_cli("doctor", HWADAPTER_FALLBACK="sometimes", HWADAPTER_FALLBACK_DEVICE="nosuchdevice",
                         HWADAPTER_PLUGINS="cpu,testdev,acme")
    assert proc.returncode == 0  # settings are reported; only plugins that failed to load make doctor fail
    out = proc.stdout
    assert "FAIL HWADAPTER_FALLBACK='sometimes' is not one of warn, error" in out
    assert "fix: unset HWADAPTER_FALLBACK (default warn) or set it to 'warn' or 'error'" in out
    assert "FAIL fallback device HWADAPTER_FALLBACK_DEVICE='nosuchdevice' cannot be used: unknown device type" in out
    assert "HWADAPTER_PLUGINS names 'acme', which no installed plugin provides" in out
    assert hwadapter_cli("doctor", "--strict", HWADAPTER_FALLBACK="sometimes").returncode == 1


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
    assert _row(out, "exp") == ["exp", "codegen (generated from kernel primitives)"]
    assert _row(out, "matmul") == ["matmul", "no kernel: falls back to cpu"]  # not written in kernel primitives
    assert "gen: 1 of " in out and "more are generated by its codegen backend" in out


def test_ops_and_doctor_say_when_a_codegen_backend_cannot_compile(codegen_site):
    proc = hwadapter_cli("ops", "--device", "nogen", site=codegen_site)
    assert proc.returncode == 0, proc.stderr
    assert _row(proc.stdout, "exp") == ["exp", "no kernel: falls back to cpu"]
    assert "nogen: codegen backend unavailable: no acme-cc compiler on PATH" in proc.stderr
    doctor = hwadapter_cli("doctor", site=codegen_site)
    assert doctor.returncode == 0, doctor.stdout
    assert "warn codegen backend unavailable: no acme-cc compiler on PATH; install the ACME SDK" in doctor.stdout
    assert "codegen backend usable: " in doctor.stdout  # gen's
    assert "codegen backend unavailable on nogen" in doctor.stdout
    assert hwadapter_cli("doctor", "--strict", site=codegen_site).returncode == 1
