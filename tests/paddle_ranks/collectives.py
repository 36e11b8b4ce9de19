"""Paddle's collectives on each rank, against numpy: writes argv[1]/rank<r>.json ({check: error, or null when the
result equals numpy's}). argv[2] "basic": float32 and int64 only (a device library's own communicator need not
reduce float16; and every rank joins MPI first, since tests/native/mpi_comm_device.c joins it in comm_unique_id,
which would wait there for ranks still waiting for rank 0's unique id)."""
import importlib
import json
import sys

if sys.argv[2:] == ["basic"]:
    importlib.import_module("mpi4py.MPI")  # joins the MPI job

import numpy as np
import paddle
import paddle.distributed as dist

dist.init_parallel_env()
rank, n = dist.get_rank(), dist.get_world_size()
out = {"place": str(paddle.get_device())}


def data(dtype, r):
    """Rank r's tensor for a check: distinct per rank, exact in every dtype used."""
    return (np.arange(1, 7) * (r + 1) % 5 + r).astype(dtype)


def check(name, got, want):
    out[name] = None if (got.dtype == want.dtype and np.array_equal(got, want)) else f"{got!r} != {want!r}"


everyone = {d: [data(d, r) for r in range(n)] for d in ("float32", "float64", "int32", "int64", "float16")}
basic = sys.argv[2:] == ["basic"]
for dtype, op, fold in (("float32", dist.ReduceOp.SUM, np.add), ("int64", dist.ReduceOp.MAX, np.maximum),
                        ("float64", dist.ReduceOp.MIN, np.minimum), ("int32", dist.ReduceOp.PROD, np.multiply),
                        ("float16", dist.ReduceOp.SUM, np.add))[:2 if basic else 5]:
    x = paddle.to_tensor(data(dtype, rank))
    dist.all_reduce(x, op=op)
    check(f"all_reduce {op} {dtype}", x.numpy(), fold.reduce(np.stack(everyone[dtype]), axis=0, dtype=dtype))
for dtype in ("float32", "int64"):
    x = paddle.to_tensor(data(dtype, rank))
    dist.broadcast(x, src=n - 1)
    check(f"broadcast {dtype}", x.numpy(), everyone[dtype][n - 1])
parts = []
dist.all_gather(parts, paddle.to_tensor(data("float32", rank)))
check("all_gather float32", np.stack([p.numpy() for p in parts]), np.stack(everyone["float32"]))
try:
    dist.all_reduce(paddle.to_tensor(data("float32", rank)), op=99)
    out["bad op"] = "no error"
except Exception as err:  # noqa: BLE001 - the error's text is what is checked
    out["bad op"] = f"raised {type(err).__name__}: {err}"
with open(f"{sys.argv[1]}/rank{rank}.json", "w") as f:  # a file: mpiexec may interleave the ranks' output
    json.dump({"rank": rank, **out}, f)
