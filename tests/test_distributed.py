"""hwadapter.distributed across processes (mpiexec, 2 and 4 ranks on this machine): every collective x dtype x reduce
op against numpy, data-parallel training against one process on the global batch, and the faults (a rank that
raises, stays silent or is killed; ranks that disagree) each within a time limit that proves there is no hang.

The rank side is in tests/dist_ranks/; each job prints `RESULT {json}` lines that the tests read."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import distributed as dist
from hwadapter.runtime.device import devices

RANKS = Path(__file__).parent / "dist_ranks"
MPIEXEC = Path(sys.executable).parent / "mpiexec"

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec beside python: pip install 'hwadapter[mpi]'")


def mpirun(n: int, script: str, *args: str, timeout: float = 120, results_dir: Path | None = None,
           **env) -> tuple[subprocess.CompletedProcess, list]:
    """Run tests/dist_ranks/<script> on n ranks: the finished process and the RESULT records its ranks printed (or,
    with `results_dir`, wrote there as rank<r>.json: ranks printing at the same time interleave their lines)."""
    full = {**os.environ, "HWADAPTER_COLLECTIVE_TIMEOUT": "60", **env}
    if results_dir is not None:
        full["RESULT_DIR"] = str(results_dir)
    proc = subprocess.run([str(MPIEXEC), "-n", str(n), sys.executable, str(RANKS / script), *args], env=full,
                          capture_output=True, text=True, timeout=timeout)
    if results_dir is not None:
        return proc, [json.loads(p.read_text()) for p in sorted(results_dir.glob("rank*.json"))]
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    return proc, results


def _devices() -> list[str]:
    return [d for d in ("cpu", "opencl") if hw.device.device_count(d)]


@pytest.mark.parametrize("kind,n", [(d, 2) for d in _devices()] + [("cpu", 4)])
def test_every_collective_dtype_and_op_equals_numpy(kind, n):
    proc, results = mpirun(n, "collectives.py", kind)
    assert proc.returncode == 0 and results, proc.stdout[-3000:] + proc.stderr[-3000:]
    cases = results[0]["cases"]
    wrong = {k: v for k, v in cases.items() if v != "ok"}
    assert not wrong, wrong
    assert results[0]["ok_per_rank"] == [len(cases)] * n  # every rank saw every case pass
    assert len(cases) >= 87 + (n >= 4)  # 8 dtypes x (5 ops + 5 collectives), 7 large, the subgroup on 4 ranks


@pytest.mark.parametrize("kind,model,mode,accumulate,n", [
    ("cpu", "mlp", "eager", "0", 2), ("cpu", "mlp", "static", "1", 2), ("cpu", "cnn", "static", "0", 2),
    ("cpu", "cnn", "eager", "1", 2), ("cpu", "mlp", "static", "0", 4), ("cpu", "cnn", "eager", "0", 4),
    ("opencl", "mlp", "eager", "1", 2)])
def test_data_parallel_training_equals_one_process_on_the_global_batch(kind, model, mode, accumulate, n):
    if not hw.device.device_count(kind):
        pytest.skip(f"no {kind} device here")
    proc, results = mpirun(n, "train.py", kind, model, mode, accumulate)
    assert proc.returncode == 0 and results, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = results[0]
    assert r["ranks"] == n and r["replicas"] == 0.0  # every replica holds the same weights
    assert r["diff"] <= 1e-5 * max(1.0, r["scale"]), r  # 20 Adam steps, float32


# --- faults --------------------------------------------------------------------------------------------------
def test_a_rank_that_raises_makes_the_others_fail_at_once_naming_it(tmp_path):
    start = time.monotonic()
    proc, results = mpirun(2, "faults.py", "raise", timeout=60, results_dir=tmp_path)
    assert time.monotonic() - start < 30  # the limit is 60 s: the others heard of the failure, they did not time out
    assert proc.returncode != 0 and "ValueError: boom in the data loader" in proc.stderr
    (r,) = results
    assert r["rank"] == 0 and r["error"] == "CollectiveError" and r["seconds"] < 10
    assert "rank 1 failed: ValueError: boom in the data loader at faults.py:" in r["text"]


def test_a_rank_that_never_calls_is_a_time_limit_error_not_a_hang(tmp_path):
    proc, results = mpirun(2, "faults.py", "silent", timeout=60, results_dir=tmp_path, HWADAPTER_COLLECTIVE_TIMEOUT="1")
    (r,) = results
    assert r["rank"] == 0 and r["error"] == "CollectiveError" and 1 <= r["seconds"] < 5, r
    assert "did not complete within 1 s" in r["text"] and "all_reduce(float32[4], op=sum)" in r["text"]


@pytest.mark.parametrize("case,said", [
    ("shape", "rank 0: all_reduce(float32[3], op=sum); rank 1: all_reduce(float32[3, 1000], op=sum)"),
    ("dtype", "rank 0: all_reduce(float32[3], op=sum); rank 1: all_reduce(int32[3], op=sum)"),
    ("op", "rank 0: all_reduce(float32[3], op=sum); rank 1: all_reduce(float32[3], op=max)")])
def test_ranks_that_disagree_are_told_what_each_passed(case, said, tmp_path):
    proc, results = mpirun(2, "faults.py", case, timeout=60, results_dir=tmp_path)
    assert sorted(r["rank"] for r in results) == [0, 1], proc.stdout + proc.stderr
    for r in results:
        assert r["error"] == "CollectiveError" and said in r["text"] and r["seconds"] < 10, r


def test_a_rank_killed_mid_collective_leaves_no_process_behind(tmp_path):
    marker = f"hwadapter-kill-{uuid.uuid4().hex}"
    start = time.monotonic()
    proc, _ = mpirun(2, "faults.py", "kill", marker, timeout=60, results_dir=tmp_path)
    assert proc.returncode != 0 and time.monotonic() - start < 30
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"processes left behind: {left.stdout}"


# --- in this process (a world of one) ------------------------------------------------------------------------
def test_collectives_before_init_say_how_to_start():
    code = ("import numpy as np, hwadapter as hw\nfrom hwadapter import distributed as dist\n"
            "assert not dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1\n"
            "try:\n    dist.all_reduce(hw.to_tensor(np.ones(2, np.float32)))\n"
            "except hw.CollectiveError as err:\n    print('said:', err)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "said: the parallel environment is not initialised" in proc.stdout \
        and "init_parallel_env()" in proc.stdout, proc.stdout + proc.stderr


def test_a_world_of_one_and_bad_arguments():
    group = dist.init_parallel_env()
    t = hw.to_tensor(np.arange(4, dtype=np.float32))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    np.testing.assert_array_equal(t.numpy(), np.arange(4, dtype=np.float32))
    with pytest.raises(hw.InvalidArgumentError, match="unknown reduce op 'median'"):
        dist.all_reduce(t, op="median")
    with pytest.raises(hw.InvalidArgumentError, match="src=3 is not a rank of group 0"):
        dist.broadcast(t, src=3)
    with pytest.raises(hw.InvalidArgumentError, match="ranks must be distinct"):
        dist.new_group([0, 0])
    with pytest.raises(hw.UnsupportedDTypeError, match="avg of bool"):
        dist.all_reduce(hw.to_tensor(np.ones(2, bool)), op="avg")
    assert group.nranks == 1 and group.rank == 0


def test_a_plugin_communicator_missing_a_dtype_is_named():
    """A plugin's Collectives may carry fewer dtypes than its device has: the call says which it carries."""
    dist.init_parallel_env()
    dev = devices.get("cpu:0")

    class Few:
        def dtypes(self):
            return frozenset({"float32"})
    before = dev._collectives
    dev._collectives = Few()
    try:
        with pytest.raises(hw.UnsupportedDTypeError, match="carries float32, not int64. Fix: cast"):
            dist.all_reduce(hw.to_tensor(np.ones(2, np.int64)))
    finally:
        dev._collectives = before
