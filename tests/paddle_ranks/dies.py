"""Rank 1 dies before a collective (argv[1]: "exit" = os._exit(3), "raise" = an uncaught exception; argv[2]:
"first" = before any collective, "later" = after one all_reduce); rank 0 runs the collective and must fail."""
import os
import sys
import time

import numpy as np
import paddle
import paddle.distributed as dist

how, when = sys.argv[1], sys.argv[2]
dist.init_parallel_env()
rank = dist.get_rank()
x = paddle.to_tensor(np.ones(4, "float32"))
if when == "later":
    dist.all_reduce(x)
if rank == 1:
    if how == "exit":
        os._exit(3)
    raise RuntimeError("rank 1 gives up on purpose")
start = time.monotonic()
try:
    dist.all_reduce(x)
except Exception as err:  # the collective's failure, as Paddle raises it
    print(f"RANK0-FAILED after {time.monotonic() - start:.1f} s: {type(err).__name__}", flush=True)
    raise
print("RANK0-COMPLETED (wrong)", flush=True)
