"""The reference plugins' tuning is optional: a copy of a plugin with its optional modules deleted, registered under
another device type, passes the conformance kit.

This is what docs/vendor-guide.md promises a vendor who copies the contract files (__init__.py, runtime.py,
codegen.py) and leaves the rest out: for the CPU plugin tuning/; for the OpenCL plugin tuning/ (launch batching,
handwritten kernels, GEMM tuning) and native.py + svm_device.c (shared virtual memory for native hosts). The copy is
a new package in a temporary folder with a .dist-info declaring its entry point, as tests/test_clone.py's fixtures
do, so the installed plugin is untouched.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "plugins" / "cpu" / "hwadapter_cpu"
OPENCL = ROOT / "plugins" / "opencl" / "hwadapter_opencl"
#: what a vendor copying the OpenCL plugin may leave out
OPENCL_OPTIONAL = ("tuning", "native.py", "svm_device.c")
#: every section but onnx (minutes, and nothing in it depends on the optional modules): kernels and native are
#: skipped by the kit (the copy registers no op kernel and has no native library), codegen and subgraph then carry
#: every op
OPENCL_SECTIONS = ("discovery", "runtime", "kernels", "native", "subgraph", "codegen")
#: the sections that meet the kernels a deleted tuning/ took away (subgraph: the CPU has none; codegen and onnx do
#: not depend on tuning/ and take most of the kit's time)
SECTIONS = ("discovery", "runtime", "kernels", "native")


def _lean_copy(site: Path, source: Path = PLUGIN, left_out=("tuning",), name="lean", cls="CpuPlugin") -> None:
    """hwadapter_<name>: the plugin at `source` without `left_out`, as device type `name`."""
    shutil.copytree(source, site / f"hwadapter_{name}", ignore=shutil.ignore_patterns("__pycache__", *left_out))
    info = site / f"hwadapter_{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: hwadapter-{name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[hwadapter.plugins]\n{name} = hwadapter_{name}:{cls}\n")


def _env(site: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HWADAPTER_PLUGINS", "HWADAPTER_DISABLE_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    return env


@pytest.mark.timeout(600)
def test_the_cpu_plugin_without_its_tuning_passes_the_conformance_kit(tmp_path):
    _lean_copy(tmp_path)
    env = _env(tmp_path)
    assert not (tmp_path / "hwadapter_lean" / "tuning").exists()
    probe = subprocess.run([sys.executable, "-c", "import hwadapter_lean; print(hwadapter_lean.register_tuned)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and probe.stdout.strip() == "None", probe.stderr  # the plugin imports without it
    args = [a for s in SECTIONS for a in ("--section", s)]
    command = [sys.executable, "-m", "hwadapter.cli", "conformance", "lean", *args]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=560)
    again = f"PYTHONPATH={tmp_path} {' '.join(command[1:])}"
    assert proc.returncode == 0, f"the kit failed on the CPU plugin without tuning/ (reproduce: {again}):\n" \
                                 f"{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    for section in SECTIONS:
        assert f"{section} " in proc.stdout, f"section {section} did not run:\n{proc.stdout[-3000:]}"


def _opencl_device() -> str | None:
    """Why the OpenCL plugin cannot run here, or None."""
    try:
        import pyopencl as cl
        if not [d for p in cl.get_platforms() for d in p.get_devices()]:
            return "no OpenCL device"
    except Exception as err:  # noqa: BLE001  pyopencl missing, or no platform (PLATFORM_NOT_FOUND_KHR)
        return f"no OpenCL ({type(err).__name__}: {err})"
    return None


@pytest.mark.timeout(600)
def test_the_opencl_plugin_without_its_optional_modules_passes_the_conformance_kit(tmp_path):
    why = _opencl_device()
    if why:
        pytest.skip(f"{why}: install pocl-opencl-icd and pip install -e plugins/opencl")
    _lean_copy(tmp_path, OPENCL, OPENCL_OPTIONAL, "leancl", "OpenCLPlugin")
    env = _env(tmp_path)
    assert not any((tmp_path / "hwadapter_leancl" / p).exists() for p in OPENCL_OPTIONAL)
    probe = subprocess.run([sys.executable, "-c", "import hwadapter_leancl as p; print(p.handwritten, p.SharedRuntime, "
                            "p.BatchedQueue, ','.join(p.OpenCLPlugin().levels()))"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    # the plugin imports without them, and offers the subgraph and compiler levels (no op kernels of its own)
    assert probe.returncode == 0 and probe.stdout.split() == ["None"] * 3 + ["subgraph,codegen"], \
        probe.stdout + probe.stderr
    args = [a for s in OPENCL_SECTIONS for a in ("--section", s)]
    command = [sys.executable, "-m", "hwadapter.cli", "conformance", "leancl", *args, "--timeout", "300"]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=560)
    again = f"PYTHONPATH={tmp_path} {' '.join(command[1:])}"
    assert proc.returncode == 0, f"the kit failed on the OpenCL plugin without {', '.join(OPENCL_OPTIONAL)} " \
                                 f"(reproduce: {again}):\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    rows = {line.split()[1]: line.split()[3] for line in proc.stdout.splitlines()
            if len(line.split()) > 3 and line.split()[1] in OPENCL_SECTIONS}
    assert rows == {"discovery": "passed", "runtime": "passed", "kernels": "skipped", "native": "skipped",
                    "subgraph": "passed", "codegen": "passed"}, proc.stdout[-3000:]
    assert "qualifies for: subgraph, compiler" in proc.stdout, proc.stdout[-3000:]
