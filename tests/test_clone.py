"""The reference plugins can be copied: the same plugin class under another entry-point name, with the original
disabled, passes the device-generic op suites, the Runtime contract (and, for OpenCL, the OpenCL and subgraph tests)
on the clone's device exactly as on the original's (the OpenCL clone runs a slice of the device-generic suites in
`make test` and all of them in `make test-slow`).

A plugin must never name its own device type: the core tells it (`Plugin.name`, the runtime's index), because the
entry point's name, which a vendor or a user may change, is the device type. Each case runs a child pytest with
tests/fixtures/clone/<case> on PYTHONPATH (a .dist-info declaring the clone's entry point), the original switched off
with HWADAPTER_DISABLE_PLUGINS, and only the clone device's tests selected; tests/fixtures/clone/clone_report.py
reports to the parent what ran, where, and how it ended.

To reproduce a case by hand, run the command the failure message prints (from the repository root).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import hwadapter as hw

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "clone"
GENERIC = ["tests/test_ops_elementwise.py", "tests/test_ops_reduce.py", "tests/test_ops_shape.py",
           "tests/test_ops_nn.py", "tests/test_runtime_contract.py"]
OPENCL = ["tests/test_opencl.py", "tests/test_opencl_subgraph.py"]


@dataclass
class Clone:
    original: str  # the reference plugin's entry-point name, disabled in the child
    name: str  # the same plugin class's second entry-point name (tests/fixtures/clone/<fixture>)
    plugin_class: str  # what the clone's entry point names
    fixture: str
    env: dict = field(default_factory=dict)
    modules: list = field(default_factory=list)  # device-specific suites, run whole on the clone
    generic: list = field(default_factory=lambda: list(GENERIC))  # the device-generic suites it runs
    #: the fewest device-generic tests it must get: catches a -k that selects nothing
    min_generic: int = 150
    slow: bool = False  # a sweep for `make test-slow`; `make test` runs a slice of it as another Clone
    #: skips that are about the device's kind, not about its absence: they happen on the original too
    allowed_skips: tuple = ()

    @property
    def device(self) -> str:
        return f"{self.name}:0"


_OPENCL_SKIPS = (r"POCL_MEMORY_LIMIT needs PoCL", r"allows only \d+ work items per group")
CLONES = [
    # opencl stays the plugin it is; only its entry point's name changes. test_opencl*.py read the device under
    # test from HWADAPTER_TEST_OPENCL (default opencl:0). `make test` runs the OpenCL suites and a slice of the
    # device-generic ones on the clone (the cpu clone below runs them all); `make test-slow` runs them all here too.
    Clone("opencl", "clone", "hwadapter_opencl:OpenCLPlugin", "opencl",
          env={"HWADAPTER_TEST_OPENCL": "clone:0"}, modules=OPENCL, allowed_skips=_OPENCL_SKIPS,
          generic=["tests/test_ops_reduce.py", "tests/test_ops_nn.py", "tests/test_runtime_contract.py"],
          min_generic=40),
    Clone("opencl", "clone", "hwadapter_opencl:OpenCLPlugin", "opencl",
          env={"HWADAPTER_TEST_OPENCL": "clone:0"}, allowed_skips=_OPENCL_SKIPS, slow=True),
    # The CPU plugin is also the fallback device: HWADAPTER_FALLBACK_DEVICE moves that role to the clone.
    Clone("cpu", "host", "hwadapter_cpu:CpuPlugin", "cpu", env={"HWADAPTER_FALLBACK_DEVICE": "host"},
          allowed_skips=(r"keeps tensors in host memory",)),
]
#: Tests that name cpu:0 as the *other* device of a mixed-device error check; with the CPU plugin disabled that
#: device does not exist, so they cannot run on host:0 (they still run on every device in the normal suite).
CPU_LITERAL = ["tests/test_ops_elementwise.py::test_binary_errors[host:0]",
               "tests/test_ops_shape.py::test_gather_errors[host:0]"]


def _available(device_type: str) -> bool:
    try:
        return hw.device.is_available(device_type)
    except Exception:  # noqa: BLE001
        return False


def _child_env(clone: Clone, report: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HWADAPTER_PLUGINS", "HWADAPTER_DISABLE_PLUGINS", "HWADAPTER_FALLBACK_DEVICE",
                        "HWADAPTER_FALLBACK", "HWADAPTER_TEST_OPENCL", "PYTEST_ADDOPTS")}
    paths = [str(FIXTURES / clone.fixture), str(FIXTURES)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                               if p]
    env.update(clone.env, PYTHONPATH=os.pathsep.join(paths), HWADAPTER_DISABLE_PLUGINS=clone.original,
               HWADAPTER_CLONE_DEVICE=clone.device, HWADAPTER_CLONE_REPORT=str(report))
    return env


def _tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.splitlines()[-lines:])


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("clone", [pytest.param(c, marks=[pytest.mark.slow] if c.slow else [],
                                                id=f"{c.original}-as-{c.name}" + ("-all-ops" if c.slow else ""))
                                   for c in CLONES])
def test_a_reference_plugin_works_under_another_entry_point_name(clone, tmp_path):
    if clone.modules == OPENCL:
        pytest.importorskip("pyopencl", reason="pyopencl is not installed: pip install -e plugins/opencl")
    if not _available(clone.original):
        pytest.skip(f"{clone.original} has no device here, so neither has its clone")
    report = tmp_path / "report.json"
    env = _child_env(clone, report)
    # -k: the clone's parametrisations of the device-generic suites, and the device-specific modules whole
    keyword = " or ".join([clone.device] + [Path(m).stem for m in clone.modules])
    left_out = CPU_LITERAL if clone.original == "cpu" else []
    deselect = [a for t in left_out for a in ("--deselect", t)]
    args = ["-q", "-p", "no:cacheprovider", "--tb=short", "--maxfail=25", "-k", keyword, *deselect, *clone.generic,
            *clone.modules]
    command = [sys.executable, "-m", "pytest", "-p", "clone_report", *args]
    start = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1700)
    took = time.monotonic() - start
    output = proc.stdout + proc.stderr
    shown = {k: env[k] for k in ("PYTHONPATH", "HWADAPTER_DISABLE_PLUGINS", *clone.env)}
    again = " ".join(f"{k}={shlex.quote(v)}" for k, v in shown.items()) + " " + shlex.join(
        [".venv/bin/python", "-m", "pytest", *args])
    where = (f"{clone.plugin_class} as {clone.device} ({clone.original} disabled), child pytest took {took:.0f}s, "
             f"exit status {proc.returncode}; reproduce from the repository root with\n  {again}\n"
             f"--- last lines of its output ---\n{_tail(output)}")
    assert report.exists(), f"the child wrote no report: {where}"
    rep = json.loads(report.read_text())

    # the clone is what it should be: the same class, its device present, the original's absent
    assert not rep["errors"], f"{rep['errors']}: {where}"
    assert rep["clone_plugin"] == clone.plugin_class, where
    assert clone.device in rep["devices"] and not any(d.startswith(f"{clone.original}:") for d in rep["devices"]), \
        f"devices in the child: {rep['devices']}: {where}"

    # every test ran and passed, on the clone, and none was skipped for want of the device
    assert not rep["collect_errors"], f"modules that could not be collected: {rep['collect_errors']}: {where}"
    assert not rep["collect_skips"], f"modules skipped at collection: {rep['collect_skips']}: {where}"
    selected = {n for n, i in rep["items"].items() if i["selected"]}
    outcomes = rep["outcomes"]
    bad = {n: o for n, o in outcomes.items() if o not in ("passed", "skipped")}
    skips = {n: why for n, why in rep["skips"].items() if not any(re.search(p, why) for p in clone.allowed_skips)}
    failed = "".join(f"\n  {o}: {n}" for n, o in sorted(bad.items()))
    assert proc.returncode == 0 and not bad, f"{len(bad)} tests failed on {clone.device}:{failed}\n{where}"
    assert not skips, f"skipped on {clone.device}: {skips}: {where}"
    assert set(outcomes) == selected, f"selected but not run: {sorted(selected - set(outcomes))[:20]}: {where}"
    assert all(i["device"] in (None, clone.device) for n, i in rep["items"].items() if i["selected"]), where

    # the clone got every device-generic test any other device got, and each device-specific module is whole
    per_device = Counter(i["device"] for i in rep["items"].values() if i["device"] is not None)
    wanted = max(per_device.values(), default=0)
    expected = wanted - sum(t in rep["items"] for t in left_out)
    ran_generic = sum(1 for n in selected if rep["items"][n]["device"] == clone.device)
    assert ran_generic == expected >= clone.min_generic, \
        f"{ran_generic} device-generic tests on {clone.device}, every device gets {wanted}: {per_device}: {where}"
    for module in clone.modules:
        items = [n for n, i in rep["items"].items() if i["module"] == module]
        assert items and all(n in selected for n in items), f"{module}: not run whole: {where}"
    passed = sum(o == "passed" for o in outcomes.values())
    print(f"{clone.device}: {passed} passed, {len(rep['skips'])} skipped (allowed) in {took:.0f}s")
