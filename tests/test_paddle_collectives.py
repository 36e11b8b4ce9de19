"""Paddle's collectives on a bridged device across processes: `hwadapter paddle launch` runs ranks as one MPI job,
the shim's xccl_* functions reach hwadapter's communicator (MPI for the cpu plugin) or a device library's own.

Oracles: numpy for each collective, Paddle's own gloo backend on its CPU for 2-rank paddle.DataParallel. A rank
that dies must make the job fail within a time limit, naming why. Every child has a time limit."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from paddle_needs import PADDLE_SKIP

ROOT = Path(__file__).parents[1]
RANKS = ROOT / "tests" / "paddle_ranks"
BIN = Path(sys.executable).parent
JOB_TIMEOUT = 120

_SKIP = PADDLE_SKIP
if _SKIP is None and (importlib.util.find_spec("mpi4py") is None or not (BIN / "mpiexec").exists()):
    _SKIP = "mpi4py and MPICH's mpiexec are needed: pip install 'hwadapter[mpi]'"
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")


def _env(root: Path | None, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "HWADAPTER_COLLECTIVE", "PMI_"))}
    if root is not None:
        env["CUSTOM_DEVICE_ROOT"] = str(root)
    env.update(GLOG_minloglevel="2", **extra)
    return env


def _launch(root: Path | None, *args: str, timeout: float = JOB_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hwadapter.cli", "paddle", "launch", *args], capture_output=True,
                          text=True, timeout=timeout, env=_env(root), cwd=str(RANKS))


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """The cpu plugin's shim (Paddle's hwa_cpu) with its libraries, alone in a folder."""
    folder = tmp_path_factory.mktemp("paddle-collectives")
    proc = subprocess.run([sys.executable, "-m", "hwadapter.cli", "paddle", "install", "cpu", "--dir", str(folder)],
                          capture_output=True, text=True, timeout=600, env=_env(None))
    assert proc.returncode == 0, f"install failed:\n{proc.stdout}\n{proc.stderr}"
    assert (folder / "libhwadapter_paddle_cpu.xccl").exists(), sorted(p.name for p in folder.iterdir())
    return folder


def _results(folder: Path) -> dict[int, dict]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in folder.glob("rank*.json")}


def _checked(proc, folder: Path, place: str) -> dict:
    """Both ranks' results of collectives.py, each having run on `place` with every check equal to numpy."""
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = _results(folder)
    assert sorted(results) == [0, 1], proc.stdout + proc.stderr
    for r in results.values():
        assert r["place"] == place
        wrong = {k: v for k, v in r.items() if k not in ("rank", "place", "bad op") and v is not None}
        assert not wrong, wrong
    return results


def test_collectives_on_hwa_cpu_equal_numpy(root, tmp_path):
    proc = _launch(root, "-n", "2", "--timeout", "60", "--", sys.executable, "collectives.py", str(tmp_path))
    results = _checked(proc, tmp_path, "hwa_cpu:0")
    for r in results.values():
        assert len(r) >= 10  # every check ran
        assert "raised" in r["bad op"] and "reduce_op" in r["bad op"]  # Paddle's own check of the op, before ours


def _train(root, backend: str, out: Path) -> dict:
    proc = _launch(root, "-n", "2", "--backend", backend, "--timeout", "60", "--", sys.executable,
                   "data_parallel.py", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(np.load(out))


def test_data_parallel_on_hwa_cpu_equals_paddles_gloo_on_cpu(root, tmp_path):
    ours, gloo = _train(root, "xccl", tmp_path / "xccl.npz"), _train(root, "gloo", tmp_path / "gloo.npz")
    assert str(ours["place"]) == "hwa_cpu:0" and str(gloo["place"]) == "cpu"
    weights = [k for k in gloo if re.fullmatch(r"p\d+", k)]
    assert len(weights) == 4
    for k in ["losses", *weights]:
        np.testing.assert_allclose(ours[k], gloo[k], rtol=2e-5, atol=2e-6, err_msg=k)


def _dies(root, how: str, when: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = _launch(root, "-n", "2", "--timeout", "15", "--", sys.executable, "dies.py", how, when, timeout=90)
    return proc, time.monotonic() - start


@pytest.mark.parametrize("how,when", [("raise", "later"), ("exit", "first"),
                                      pytest.param("raise", "first", marks=pytest.mark.slow),
                                      pytest.param("exit", "later", marks=pytest.mark.slow)])
def test_a_rank_that_dies_makes_the_job_fail_in_time(root, how, when):
    proc, took = _dies(root, how, when)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "RANK0-COMPLETED" not in out, out
    assert took < 60, f"took {took:.0f} s:\n{out}"
    assert "hwadapter paddle launch: the job failed" in out, out
    if how == "raise":  # rank 0 is told at once why, by rank 1's announcement (not at the time limit)
        assert re.search(r"rank 1 failed: RuntimeError: rank 1 gives up on purpose at dies\.py:\d+", out), out
        assert re.search(r"RANK0-FAILED after \d\.\d s", out), out
    else:  # mpiexec stops the job when a rank that joined it exits
        assert "EXIT CODE: 3" in out or "exit status 3" in out, out


def test_bad_calls_say_what_and_how_to_fix(root):
    """Paddle's collective before init_parallel_env; hwadapter's communicator outside an MPI job; calls the
    engine refuses (an unknown reduce op, a communicator that does not exist)."""
    code = r"""
import numpy as np, paddle, paddle.distributed as dist
from hwadapter_paddle import xccl
out = {}
paddle.set_device("hwa_cpu:0")
try:
    dist.all_reduce(paddle.to_tensor(np.ones(3, "float32")))
    out["before init"] = "no error"
except Exception as err:
    out["before init"] = f"{type(err).__name__}: {err}"
for name, call in [("no job", lambda: xccl.unique_id("cpu", memoryview(bytearray(xccl.SIZE)))),
                   ("bad op", lambda: xccl._op(9, 11, "all_reduce")),
                   ("bfloat16", lambda: xccl._op(0, 13, "all_reduce")),
                   ("no comm", lambda: xccl.all_reduce(12345, 0, 0, 4, 11, 0))]:
    try:
        call()
        out[name] = "no error"
    except Exception as err:
        out[name] = f"{type(err).__name__}: {err}"
print("RESULT " + json.dumps(out))
""".replace("print(", "import json\nprint(", 1)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=JOB_TIMEOUT,
                          env=_env(root))
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, proc.stdout + proc.stderr
    out = json.loads(line[0][7:])
    assert "init_parallel_env" in out["before init"] or "not initialized" in out["before init"].lower(), out
    assert "not part of an MPI job" in out["no job"] and "hwadapter paddle launch -n N" in out["no job"], out
    assert "unknown reduce op code 9" in out["bad op"] and "sum, avg, max, min, prod" in out["bad op"], out
    assert out["bfloat16"].startswith("NotImplementedError") and "cast to float32" in out["bfloat16"], out
    assert "communicator 12345 does not exist" in out["no comm"], out


def test_launch_refuses_what_cannot_work(root, tmp_path):
    proc = _launch(root, "-n", "2", "--device", "nosuch", "--", sys.executable, "collectives.py", str(tmp_path))
    assert proc.returncode == 2 and "--device nosuch: no shim of that type" in proc.stderr, proc.stderr
    proc = _launch(root, "-n", "2", "--devices", "0,0,0", "--", sys.executable, "collectives.py", str(tmp_path))
    assert proc.returncode == 2 and "names 3 devices for 2 ranks" in proc.stderr, proc.stderr
    proc = _launch(tmp_path, "-n", "2", "--", sys.executable, "collectives.py", str(tmp_path))
    assert proc.returncode == 2 and "no hwadapter-paddle shim in" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_device_library_with_its_own_communicator(root, tmp_path):
    """tests/native/mpi_comm_device.c (device_api.h 1.2's communication functions, on MPI) as a Paddle device: the
    shim calls the library's own functions on Paddle's stream, no Python in between."""
    from hwadapter_paddle import bridge
    mpicc = BIN / "mpicc"
    if not mpicc.exists():
        pytest.skip(f"MPICH's mpicc is not in {BIN}")
    lib = tmp_path / "libmpidev.so"
    include = ROOT / "core" / "hwadapter" / "include"
    proc = subprocess.run([str(mpicc), "-shared", "-fPIC", "-O1", "-std=c11", f"-I{include}",
                           str(ROOT / "tests" / "native" / "mpi_comm_device.c"), "-o", str(lib)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "shims"
    folder.mkdir()
    bridge.compile_shim("mpidev", lib, folder / bridge.shim_filename("mpidev"), bridge.find_paddle())
    (folder / bridge.MANIFEST).write_text(json.dumps({"shims": {"mpidev": {"paddle_type": "mpidev"}}}))
    proc = _launch(folder, "-n", "2", "--timeout", "60", "--", sys.executable, "collectives.py", str(tmp_path),
                   "basic")
    _checked(proc, tmp_path, "mpidev:0")
