"""Rank side of tests/test_distributed.py's fault cases: `mpiexec -n 2 python faults.py CASE [MARKER]`.

raise   rank 1 raises before the all-reduce rank 0 waits in
silent  rank 1 never makes the call (and exits after a while)
shape   the ranks pass tensors of different shapes; dtype: of different dtypes; op: different reduce ops
kill    rank 1 is killed (SIGKILL) while rank 0 waits in the all-reduce

Each rank writes RESULT_DIR/rank<r>.json: the CollectiveError it caught (its text) and how long the call took.
"""
import json
import os
import signal
import sys
import time

import numpy as np

import hwadapter as hw
from hwadapter import distributed as dist
from hwadapter import CollectiveError

case = sys.argv[1]
dist.init_parallel_env()
rank = dist.get_rank()
dist.barrier()


def result(record: dict) -> None:
    """The rank's record, in its own file under RESULT_DIR (ranks printing at once interleave their lines)."""
    with open(os.path.join(os.environ["RESULT_DIR"], f"rank{rank}.json"), "w") as f:
        json.dump(record, f)


def report(err, start):
    result({"rank": rank, "error": type(err).__name__, "text": str(err), "seconds": time.monotonic() - start})


start = time.monotonic()
try:
    if case == "raise":
        if rank == 1:
            raise ValueError("boom in the data loader")
        dist.all_reduce(hw.to_tensor(np.ones(4, np.float32)))
    elif case == "silent":
        if rank == 1:
            time.sleep(3)
            sys.exit(0)
        dist.all_reduce(hw.to_tensor(np.ones(4, np.float32)))
    elif case == "kill":
        if rank == 1:
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(hw.to_tensor(np.ones(4, np.float32)))
    elif case in ("shape", "dtype", "op"):
        shape = (3, 1000) if case == "shape" and rank == 1 else (3,)  # past what a small all-reduce carries
        dtype = np.int32 if case == "dtype" and rank == 1 else np.float32
        op = dist.ReduceOp.MAX if case == "op" and rank == 1 else dist.ReduceOp.SUM
        dist.all_reduce(hw.to_tensor(np.ones(shape, dtype)), op=op)
    result({"rank": rank, "error": None, "seconds": time.monotonic() - start})
except CollectiveError as err:
    report(err, start)
    sys.exit(1)
