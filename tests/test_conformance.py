"""The conformance kit (hwadapter.conformance, `hwadapter conformance`, `pytest --hwadapter-device`): every section
passes on cpu and opencl:0; the defects it exists for are caught, each by a test plugin with that one defect
(tests/plugins/kitbad_site, seen only by the processes these tests start); a plugin that crashes or hangs fails its
section and the report still comes out; every failure names a command that reproduces it."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import hwadapter as hw
from hwadapter import conformance, host
from hwadapter.conformance import gradients

SITE = Path(__file__).parent / "plugins" / "kitbad_site"  # not on sys.path: only the child processes see it


VJP_SITE = Path(__file__).parent / "plugins" / "vjp_site"  # vjpgood, vjpbad: fused backward kernels


def _env(site=SITE) -> dict:
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def _cli(cwd, *args, timeout=300, site=SITE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hwadapter.cli", "conformance", *args], cwd=cwd, env=_env(site),
                          capture_output=True, text=True, timeout=timeout)


def _junit(path) -> dict:
    """{section: {test name: outcome}} of a JUnit file the kit wrote."""
    out = {}
    for suite in ET.parse(path).getroot():
        tests = out[suite.get("name")] = {}
        for case in suite:
            kinds = [child.tag for child in case]
            tests[case.get("name")] = kinds[0] if kinds else "passed"
    return out


def _explain(result) -> str:
    return "\n".join(f"{f.test}: {f.message}\n  {f.reproducer}" for f in result.failures)


def _check_full_run(result, tmp_path, device_type):
    assert result.ok, _explain(result)
    assert list(result.sections) == list(conformance.SECTIONS)
    assert result.sections["kernels"].passed == len(host.device(f"{device_type}:0").kernels.ops())
    assert result.sections["runtime"].passed >= 25 and result.sections["codegen"].passed >= 40
    assert result.sections["autograd"].passed == len(gradients.CASES)  # every case; no fused backward kernel here
    md = (tmp_path / "out.md").read_text()
    assert f"# hwadapter conformance: {device_type}" in md and "| kernels | passed |" in md and "PASS" in md
    junit = _junit(tmp_path / "out.xml")
    assert list(junit) == list(conformance.SECTIONS)
    for name, section in result.sections.items():
        assert len(junit[name]) == section.passed + section.failed + section.skipped + section.error
        assert all(kind in ("passed", "skipped") for kind in junit[name].values())


def test_the_kit_passes_on_cpu(tmp_path):
    result = conformance.run("cpu", progress=False, report=str(tmp_path / "out.md"), junit=str(tmp_path / "out.xml"))
    _check_full_run(result, tmp_path, "cpu")
    assert result.sections["subgraph"].status == "skipped"
    assert "cpu:0 has no subgraph backend" in result.sections["subgraph"].note
    assert result.levels == ["op", "compiler", "native"]
    assert result.sections["native"].passed == 3


@pytest.mark.skipif(not hw.device.is_available("opencl"), reason="no OpenCL device (install pocl-opencl-icd and "
                    "pip install -e plugins/opencl)")
def test_the_kit_passes_on_opencl(tmp_path):
    result = conformance.run("opencl", progress=False, report=str(tmp_path / "out.md"),
                             junit=str(tmp_path / "out.xml"))
    _check_full_run(result, tmp_path, "opencl")
    assert result.sections["subgraph"].passed == 5
    assert result.levels == ["op", "subgraph", "compiler", "native"]
    assert result.sections["native"].passed == 3


def _failed(path, section) -> set:
    return {name for name, kind in _junit(path)[section].items() if kind in ("failure", "error")}


def _reproduce(line: str, cwd) -> subprocess.CompletedProcess:
    """Run a reproducer line the kit printed (`pytest ...`) with this interpreter's pytest."""
    args = shlex.split(line)
    assert args[0] == "pytest"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args[1:]], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=120)


def test_a_correct_plugin_with_separate_memory_passes(tmp_path):
    proc = _cli(tmp_path, "kitgood", "--section", "runtime", "--section", "kernels", "--junit", "out.xml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    junit = _junit(tmp_path / "out.xml")
    assert set(junit["runtime"].values()) == set(junit["kernels"].values()) == {"passed"}  # nothing skipped either
    assert len(junit["kernels"]) == 4 and len(junit["runtime"]) >= 25


def test_a_kernel_that_returns_a_numpy_array_fails_with_a_reproducer_that_works(tmp_path):
    proc = _cli(tmp_path, "kitnumpy", "--section", "kernels", "--junit", "out.xml", "--report", "out.md")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _failed(tmp_path / "out.xml", "kernels") == {"test_kernel[add]"}  # neg, relu, matmul are right
    assert "a numpy.ndarray where a DeviceArray on kitnumpy:0 is expected" in (tmp_path / "out.md").read_text()
    line = next(ln.split("reproduce: ", 1)[1] for ln in proc.stdout.splitlines() if "reproduce: " in ln)
    assert line == ("pytest --hwadapter-device kitnumpy --pyargs hwadapter.conformance.sections.test_kernels "
                    "-k 'test_kernel[add]'")
    again = _reproduce(line, tmp_path)
    assert again.returncode == 1 and "1 failed, 3 deselected" in again.stdout, again.stdout[-2000:]
    assert "a numpy.ndarray where a DeviceArray on kitnumpy:0 is expected" in again.stdout


def test_an_allocate_that_never_runs_out_of_memory_fails(tmp_path):
    proc = _cli(tmp_path, "kitnooom", "--section", "runtime", "--junit", "out.xml")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _failed(tmp_path / "out.xml", "runtime") == {"test_out_of_memory_at_the_stated_capacity"}
    assert "must raise hwadapter.plugin.OutOfMemoryError" in proc.stdout


def test_a_free_that_breaks_the_memory_accounting_fails(tmp_path):
    proc = _cli(tmp_path, "kitfree", "--section", "runtime", "--junit", "out.xml")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = _failed(tmp_path / "out.xml", "runtime")
    assert {"test_free_gives_the_bytes_back", "test_memory_info"} <= failed
    assert "test_copy_round_trip[float32]" not in failed
    assert "more free than there is" in proc.stdout


def _messages(path, section) -> dict:
    """{test: its whole failure message} of one section of a JUnit file the kit wrote."""
    suite = next(s for s in ET.parse(path).getroot() if s.get("name") == section)
    return {case.get("name"): child.text.rsplit("\n\nReproduce: ", 1)[0] for case in suite for child in case
            if child.tag in ("failure", "error")}


# (plugin, its defect's test, what its message must say): each says what the plugin did, what it must do, and how
# to reproduce it with the runtime's own calls.
RUNTIME_DEFECTS = [
    ("kitdoublefree", "test_double_free_raises",
     ["free(h) of an allocation already freed returned without an error on kitdoublefree:0",
      "free must raise (e.g. hwadapter.plugin.InvalidArgumentError) for a handle that is not live",
      "Reproduce: import numpy as np; from hwadapter import host; rt = host.device('kitdoublefree:0').runtime; "
      "h = rt.allocate(256); rt.free(h); rt.free(h)"]),
    ("kitoffset", "test_copies_at_offsets",
     ["copy_h2d(h, 10, bytes 1..5) into 64 zero bytes left non-zero bytes {0: 1, 1: 2, 2: 3, 3: 4, 4: 5}; expected "
      "non-zero bytes {10: 1, 11: 2, 12: 3, 13: 4, 14: 5}: copy_h2d must write at dst_offset.",
      "Reproduce: import numpy as np; from hwadapter import host; rt = host.device('kitoffset:0').runtime; "
      "h = rt.allocate(64)"]),
    ("kitsize", "test_allocate_gives_the_bytes_asked_for",
     ["allocate(4097): copy_h2d then copy_d2h of 4097 bytes at offset 0 of allocate(4097) raised ValueError",
      "A buffer from allocate(n) must hold n bytes", "rt = host.device('kitsize:0').runtime; h = rt.allocate(4097)"]),
]


@pytest.mark.parametrize("plugin, test, says", RUNTIME_DEFECTS, ids=[d[0] for d in RUNTIME_DEFECTS])
def test_a_runtime_defect_is_named_in_the_runtimes_terms(tmp_path, plugin, test, says):
    """A double free the runtime ignores, a copy that ignores its offset, an allocate that ignores its size: each
    fails its own test with what the runtime did, what it must do and the calls that show it; no failure is a bare
    exception (DID NOT RAISE, Arrays are not equal, a ValueError from deep inside), and none is a leak that only
    follows another failure."""
    proc = _cli(tmp_path, plugin, "--section", "runtime", "--junit", "out.xml")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    messages = _messages(tmp_path / "out.xml", "runtime")
    assert test in messages, proc.stdout
    for text in says:
        assert text in messages[test], messages[test]
    for name, message in messages.items():
        assert not message.startswith(("Failed: DID NOT RAISE", "AssertionError: / Arrays are not equal",
                                       "ValueError", "AssertionError: assert")), f"{name}: {message}"
        assert "still allocated" not in message, f"{name}: {message}"
    if plugin == "kitsize":  # every other failure of it names the runtime's method, as the plugin wrote it
        assert all("allocate(" in m or "FixedSizeRuntime.copy_h2d raised ValueError" in m
                   for m in messages.values()), messages


def test_a_kernel_that_writes_into_its_input_fails_the_kit(tmp_path):
    """Tensors are immutable: a kernel writing its result over its input changes the caller's tensor."""
    proc = _cli(tmp_path, "kitinplace", "--section", "kernels", "--junit", "out.xml")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    messages = _messages(tmp_path / "out.xml", "kernels")
    relu = next(m for name, m in messages.items() if "relu" in name)
    assert "relu kernel" in relu and "wrote into its input 0" in relu and "immutable" in relu
    assert not any("add" in name or "neg" in name for name in messages), messages  # the honest kernels pass


def test_the_autograd_section_checks_fused_backward_kernels(tmp_path):
    """vjpgood's relu_vjp and mul_vjp (tests/plugins/vjp_site) pass; vjpbad's relu_vjp (no mask: wrong values) and
    mul_vjp (the broadcast shape, not each input's) fail, each saying what it returned, and the gradient cases that
    run its mul_vjp fail naming it."""
    good = _cli(tmp_path, "vjpgood", "--section", "autograd", "--junit", "good.xml", site=VJP_SITE)
    assert good.returncode == 0, good.stdout + good.stderr
    tests = _junit(tmp_path / "good.xml")["autograd"]
    assert tests["test_fused_backward_kernel[relu_vjp]"] == tests["test_fused_backward_kernel[mul_vjp]"] == "passed"
    assert set(tests.values()) == {"passed"} and len(tests) == len(gradients.CASES) + 2
    bad = _cli(tmp_path, "vjpbad", "--section", "autograd", "--junit", "bad.xml", site=VJP_SITE)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    messages = _messages(tmp_path / "bad.xml", "autograd")
    assert "relu_vjp got" in messages["test_fused_backward_kernel[relu_vjp]"]
    assert "differs from the vjp rule's on cpu:0" in messages["test_fused_backward_kernel[relu_vjp]"]
    assert "gradient 1: shape (3,) dtype float32; expected input 1's shape ()" in \
        messages["test_fused_backward_kernel[mul_vjp]"]
    assert "test_gradients[elementwise]" in messages and "'mul_vjp' on vjpbad:0" in \
        messages["test_gradients[elementwise]"]
    assert "test_gradients[matmul]" not in messages  # no mul there: the rules, which are right


def test_a_section_with_nothing_to_check_skips_saying_why(tmp_path):
    proc = _cli(tmp_path, "kitnokernels", "--section", "kernels", "--section", "onnx", "--report", "out.md")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (tmp_path / "out.md").read_text()
    assert "got empty parameter set" not in proc.stdout + md
    assert "the kitnokernels plugin registers no op kernel (Plugin.register_kernels)" in proc.stdout
    assert "the kitnokernels plugin runs none of the ops this section checks through ONNX" in proc.stdout


def test_a_plugin_that_crashes_fails_its_section_and_the_report_comes_out(tmp_path):
    proc = _cli(tmp_path, "kitabort", "--section", "discovery", "--section", "kernels", "--report", "out.md",
                "--junit", "out.xml")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    md = (tmp_path / "out.md").read_text()
    assert "| discovery | passed |" in md and "| kernels | crashed |" in md
    assert "the process died of SIGABRT in test_kernel[neg]" in md
    assert "-k 'test_kernel[neg]'" in md
    junit = _junit(tmp_path / "out.xml")
    assert junit["kernels"] == {"test_kernel[add]": "passed", "test_kernel[matmul]": "passed",
                                "test_kernel[neg]": "error"}


def test_a_plugin_that_hangs_fails_its_section_at_the_time_limit(tmp_path):
    start = time.monotonic()
    proc = _cli(tmp_path, "kithang", "--section", "kernels", "--timeout", "6", "--report", "out.md")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert time.monotonic() - start < 60
    assert "did not finish within 6 s (killed) in test_kernel[neg]" in (tmp_path / "out.md").read_text()


def test_an_unknown_device_type_is_exit_status_2(tmp_path):
    proc = _cli(tmp_path, "nosuchdev")
    assert proc.returncode == 2
    assert "no plugin of device type 'nosuchdev' is installed" in proc.stderr


def test_the_pytest_plugin_does_nothing_without_its_option_and_collects_the_kit_with_it(tmp_path):
    (tmp_path / "test_mine.py").write_text("def test_mine():\n    pass\n")
    plain = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and "1 test collected" in plain.stdout, plain.stdout + plain.stderr
    kit = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q",  # no -p hwadapter:
                          "--hwadapter-device", "cpu"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert kit.returncode == 0, kit.stdout[-2000:] + kit.stderr
    for section in conformance.SECTIONS:
        assert f"test_{section}.py::test_" in kit.stdout
    assert "test_mine" not in kit.stdout  # no explicit arguments: the kit alone


def test_plugins_installed_beside_change_neither_the_kit_nor_the_core_suite(tmp_path):
    """Vendor plugins installed beside hwadapter, among them one that aborts the process in a kernel and one that
    hangs: the kit on cpu passes as before, and a device-parametrised module of the core suite gives the same
    verdict with them as without (it tests this repository's devices only: conftest.OURS)."""
    kit = _cli(tmp_path, "cpu", "--section", "discovery", "--section", "runtime")
    assert kit.returncode == 0, kit.stdout + kit.stderr

    def verdict(env) -> str:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                               str(Path(__file__).parent / "test_tensor.py")], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:]
        return proc.stdout.strip().splitlines()[-1].split(" in ")[0]  # "73 passed"
    assert verdict(_env()) == verdict(os.environ)
