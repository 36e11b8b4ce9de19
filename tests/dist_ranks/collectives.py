"""Rank side of tests/test_distributed.py: every collective x dtype x reduce op on one device, against numpy.

Run as `mpiexec -n N python collectives.py DEVICE`; rank 0 prints one line `RESULT {json}`: case -> "ok" or why not.
Each rank's input is a function of its rank alone, so every rank computes every other rank's input for the oracle.
"""
import json
import sys

import numpy as np

import hwadapter as hw
from hwadapter import distributed as dist

DTYPES = ["float32", "float16", "float64", "int32", "int64", "int8", "uint8", "bool"]
OPS = ["sum", "avg", "max", "min", "prod"]


def data(rank: int, dtype: str, shape=(3, 4)) -> np.ndarray:
    """Rank `rank`'s input: small values, so sums and products stay exact in every dtype."""
    base = (np.arange(int(np.prod(shape))).reshape(shape) % 3) + rank % 2 + 1
    if dtype == "bool":
        return (base + rank) % 2 == 0
    return base.astype(dtype)


def oracle(arrays: list, op: str, dtype: str) -> np.ndarray:
    """What op over `arrays` is (avg: the sum divided, floored for integers, as MPI and NCCL give it)."""
    if dtype == "bool":
        return np.logical_or.reduce(arrays) if op in ("sum", "max") else np.logical_and.reduce(arrays)
    wide = np.stack([a.astype(np.float64) for a in arrays])
    out = {"sum": wide.sum(0), "max": wide.max(0), "min": wide.min(0), "prod": wide.prod(0),
           "avg": wide.sum(0) / len(arrays)}[op]
    if op == "avg" and np.dtype(dtype).kind in "iu":
        out = np.floor_divide(wide.sum(0), len(arrays))
    return out.astype(dtype)


def main() -> None:
    device = sys.argv[1]
    hw.set_device(device)
    world = dist.init_parallel_env()
    rank, n = dist.get_rank(), dist.get_world_size()
    results = {}

    def case(name, fn):
        try:
            fn()
            results[name] = "ok"
        except AssertionError as err:
            results[name] = f"wrong: {err}"
        except Exception as err:  # noqa: BLE001 - reported by name, the test names the case
            results[name] = f"{type(err).__name__}: {err}"

    def close(got, want, dtype):
        tol = 1e-2 if dtype == "float16" else 1e-6
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape, (got.dtype, got.shape, want.shape)
        assert np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol), (got, want)

    everyone = range(n)
    for dtype in DTYPES:
        for op in OPS:
            if dtype == "bool" and op == "avg":
                continue

            def all_reduce(dtype=dtype, op=op):
                t = hw.to_tensor(data(rank, dtype))
                dist.all_reduce(t, op=op)
                close(t.numpy(), oracle([data(r, dtype) for r in everyone], op, dtype), dtype)
            case(f"all_reduce/{dtype}/{op}", all_reduce)

        if dtype != "bool":  # past the size a small all-reduce carries along with the cross-rank check
            def all_reduce_large(dtype=dtype):
                for op in ("sum", "avg"):
                    t = hw.to_tensor(data(rank, dtype, (40, 60)))
                    dist.all_reduce(t, op=op)
                    close(t.numpy(), oracle([data(r, dtype, (40, 60)) for r in everyone], op, dtype), dtype)
            case(f"all_reduce_large/{dtype}", all_reduce_large)

        def broadcast(dtype=dtype):
            for src in everyone:
                t = hw.to_tensor(data(rank, dtype))
                dist.broadcast(t, src=src)
                close(t.numpy(), data(src, dtype), dtype)
        case(f"broadcast/{dtype}", broadcast)

        def all_gather(dtype=dtype):
            out = []
            dist.all_gather(out, hw.to_tensor(data(rank, dtype)))
            assert len(out) == n
            for r, t in enumerate(out):
                close(t.numpy(), data(r, dtype), dtype)
        case(f"all_gather/{dtype}", all_gather)

        def reduce(dtype=dtype):
            op = "sum" if dtype != "bool" else "max"
            t = hw.to_tensor(data(rank, dtype))
            dist.reduce(t, dst=n - 1, op=op)
            want = oracle([data(r, dtype) for r in everyone], op, dtype) if rank == n - 1 else data(rank, dtype)
            close(t.numpy(), want, dtype)
        case(f"reduce/{dtype}", reduce)

        def reduce_scatter(dtype=dtype):
            op = "sum" if dtype != "bool" else "max"
            parts = [hw.to_tensor(data(rank * n + j, dtype, (2, 3))) for j in everyone]
            out = hw.to_tensor(np.zeros((2, 3), dtype))
            dist.reduce_scatter(out, parts, op=op)
            close(out.numpy(), oracle([data(r * n + rank, dtype, (2, 3)) for r in everyone], op, dtype), dtype)
        case(f"reduce_scatter/{dtype}", reduce_scatter)

        def alltoall(dtype=dtype):
            got = []
            dist.alltoall([hw.to_tensor(data(rank * n + j, dtype, (5,))) for j in everyone], got)
            for j, t in enumerate(got):
                close(t.numpy(), data(j * n + rank, dtype, (5,)), dtype)
        case(f"alltoall/{dtype}", alltoall)

    def send_recv():
        if rank % 2 == 0 and rank + 1 < n:
            dist.send(hw.to_tensor(data(rank, "float32")), dst=rank + 1)
        elif rank % 2 == 1:
            t = hw.to_tensor(np.zeros((3, 4), np.float32))
            dist.recv(t, src=rank - 1)
            close(t.numpy(), data(rank - 1, "float32"), "float32")
    case("send_recv", send_recv)

    def zero_size():
        t = hw.to_tensor(np.zeros((0, 3), np.float32))
        dist.all_reduce(t)
        dist.broadcast(t, src=0)
        out = []
        dist.all_gather(out, t)
        assert list(t.shape) == [0, 3] and [list(o.shape) for o in out] == [[0, 3]] * n, (t.shape, [o.shape for o in out])
    case("zero_size", zero_size)

    def non_contiguous():  # a transposed view and a strided slice: what all_reduce sees is their values
        base = hw.to_tensor(data(rank, "float32", (4, 6)))
        t = base.transpose([1, 0])[::2]
        dist.all_reduce(t)
        want = oracle([data(r, "float32", (4, 6)).T[::2] for r in everyone], "sum", "float32")
        close(t.numpy(), want, "float32")
        close(base.numpy(), data(rank, "float32", (4, 6)), "float32")  # the tensor it was taken from is untouched
    case("non_contiguous", non_contiguous)

    def asynchronous():
        t = hw.to_tensor(data(rank, "float32"))
        task = dist.all_reduce(t, sync_op=False)
        task.wait()
        close(t.numpy(), oracle([data(r, "float32") for r in everyone], "sum", "float32"), "float32")
    case("async", asynchronous)

    if n >= 4:  # groups of a subset of ranks: the even ones, and the odd ones
        evens, odds = dist.new_group([r for r in everyone if r % 2 == 0]), dist.new_group([r for r in everyone
                                                                                         if r % 2 == 1])
        mine = evens if rank % 2 == 0 else odds

        def subgroup():
            t = hw.to_tensor(data(rank, "float32"))
            dist.all_reduce(t, group=mine)
            close(t.numpy(), oracle([data(r, "float32") for r in mine.ranks], "sum", "float32"), "float32")
            b = hw.to_tensor(data(rank, "int64"))
            dist.broadcast(b, src=mine.ranks[-1], group=mine)
            close(b.numpy(), data(mine.ranks[-1], "int64"), "int64")
            assert dist.get_rank(mine) == mine.ranks.index(rank) and dist.get_world_size(mine) == len(mine.ranks)
        case("subgroup", subgroup)

    dist.barrier()
    gathered = []
    flags = hw.to_tensor(np.array([sum(v == "ok" for v in results.values())], np.int64))
    dist.all_gather(gathered, flags)
    if rank == 0:
        print("RESULT " + json.dumps({"device": str(world and hw.get_device()), "ranks": n, "cases": results,
                                      "ok_per_rank": [int(g.numpy()[0]) for g in gathered]}), flush=True)


if __name__ == "__main__":
    main()
