"""The CPU reference plugin's tuning is optional: a copy of the plugin with tuning/ deleted, registered under another
device type, passes the conformance kit's kernel-level sections.

This is what docs/vendor-guide.md promises a vendor who copies the contract files (__init__.py, runtime.py,
codegen.py) and leaves the tuning out. The copy is a new package in a temporary folder with a .dist-info declaring
its entry point, as tests/test_clone.py's fixtures do, so the installed CPU plugin is untouched.
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
#: the sections that meet the kernels a deleted tuning/ took away (subgraph: the CPU has none; codegen and onnx do
#: not depend on tuning/ and take most of the kit's time)
SECTIONS = ("discovery", "runtime", "kernels", "native")


def _lean_copy(site: Path) -> None:
    """hwadapter_lean: the CPU plugin without tuning/, as device type "lean"."""
    shutil.copytree(PLUGIN, site / "hwadapter_lean", ignore=shutil.ignore_patterns("__pycache__", "tuning"))
    info = site / "hwadapter_lean-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hwadapter-lean\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hwadapter.plugins]\nlean = hwadapter_lean:CpuPlugin\n")


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
