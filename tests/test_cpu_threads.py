"""Compiled CPU programs run in parts on the device's one pool (tuning/threads.py: the crew conv2d and matmul use), with
no OpenMP runtime of their own: a forked child runs them too (libgomp's threads hang a forked child)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hwadapter.runtime.device import get

pytest.importorskip("hwadapter_cpu.tuning.threads", reason="the CPU plugin's tuning/ is deleted: programs run on the "
                    "calling thread")


def _device():
    device = get("cpu")
    if device.codegen is None:
        pytest.skip(f"no CPU codegen: {device.codegen_unavailable}")
    return device


def test_a_large_program_runs_in_parts_on_the_crew_and_equals_numpy(monkeypatch):
    device = _device()
    threads = device.codegen.threads
    parts = []
    run = threads.run

    def counted(task, args, units):
        done = run(task, args, units)
        parts.append((units, done))
        return done
    monkeypatch.setattr(threads, "run", counted)
    x = np.random.default_rng(0).standard_normal((300, 3077)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(3077).astype(np.float32)
    kernel = device.primitive("add")
    got = kernel(x, b)
    np.testing.assert_array_equal(got, x + b)
    small = device.primitive("exp")(x[:2, :100])
    np.testing.assert_allclose(small, np.exp(x[:2, :100]), rtol=3e-7)
    assert (x.size, True) in parts, f"the large add did not run on the crew: {parts}"
    assert (200, False) in parts, f"the small exp was handed to the crew: {parts}"


def test_programs_find_the_crew_tuning_shared_whatever_kernels_are_registered(monkeypatch):
    """tuning.register hands the crew over (threads.share), so programs share it even where conv2d is not the tuned
    kernel (HWADAPTER_CPU_KERNELS=codegen registers compiled conv2d and matmul)."""
    from hwadapter_cpu.tuning.threads import Threads
    device = _device()
    monkeypatch.setattr(device.kernels, "find", lambda *a, **k: pytest.fail("the crew was looked up by kernel"))
    run, crew = Threads(device)._crew()
    assert crew is not None and crew == device.codegen.threads._crew()[1]


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_a_forked_child_runs_compiled_programs_after_its_parent_did():
    """The parent runs a program in parts on its threads, forks; the child runs it again (its own threads, started
    anew: crew.c) and exits, where OpenMP's threads would leave it waiting for ever."""
    _device()
    out = _child("""
        import os, numpy as np
        from hwadapter.runtime.device import get
        x = np.random.default_rng(0).standard_normal((400, 3000)).astype(np.float32)
        gelu = get("cpu").primitive("gelu")
        want = gelu(x)
        pid = os.fork()
        if pid == 0:
            ok = np.array_equal(gelu(x), want)
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    assert out.returncode == 0 and "child 0" in out.stdout, out.stdout + out.stderr


def test_compiled_programs_load_no_openmp_runtime():
    """One pool: the generated code brings no OpenMP threads (libgomp) beside the crew and BLAS."""
    _device()
    out = _child("""
        import numpy as np
        from hwadapter.runtime.device import get
        x = np.random.default_rng(0).standard_normal((400, 3000)).astype(np.float32)
        get("cpu").primitive("gelu")(x), get("cpu").primitive("softmax")(x, axis=-1)
        maps = open("/proc/self/maps").read()
        print("gomp" if "libgomp" in maps else "no gomp")
    """)
    assert out.returncode == 0, out.stderr
    assert "no gomp" in out.stdout, "a compiled program loaded libgomp: OpenMP threads beside the crew"


def test_kernels_registered_again_for_a_device_keep_its_one_crew():
    """A second registrar for the same device (a test's, a host's) reuses the device's crew: compiled programs that
    found it before still share it, and no second set of threads starts."""
    from hwadapter_cpu import CpuPlugin
    from hwadapter_cpu.tuning.threads import Threads
    device = _device()
    before = device.codegen.threads._crew()[1]

    class Registrar:
        def __init__(self):
            self.device = device

        def register(self, op, fn, dtypes=None):
            pass
    CpuPlugin().register_kernels(Registrar())
    assert before is not None and Threads(device)._crew()[1] == before == device.codegen.threads._crew()[1]
