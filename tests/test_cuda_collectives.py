"""The CUDA plugin's NCCL communicator (plugins/cuda/hwadapter_cuda/collectives.py).

Everywhere: the unique id's packing, the op and dtype maps against nccl.h's numbers, when the plugin offers NCCL and
when it leaves the MPI communicator to hwadapter, and every call on 1 to 3 ranks in one process against numpy, on a
host-memory stand-in for cupy and NCCL that runs each collective once every rank has queued it on its stream.
Marked `gpu` (make test-gpu): every call on cuda:0 through the real NCCL against numpy. NCCL refuses two ranks of one
communicator on one GPU ("Duplicate GPU detected"), so with one GPU the NCCL checks run on one rank, and a 2-rank job
checks that its ranks share the GPU through the MPI communicator instead; with two GPUs or more, 2 ranks run NCCL.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
import time
import types
from collections import defaultdict, deque
from pathlib import Path

import numpy as np
import pytest

from hwadapter.api.errors import CollectiveError, InvalidArgumentError, UnsupportedDTypeError
from hwadapter.plugin import DONE, DeviceArray
from hwadapter.runtime.discovery import registry

nc = pytest.importorskip("hwadapter_cuda.collectives", reason="hwadapter-cuda is not installed: run `.venv/bin/pip "
                                                               "install -e plugins/cuda` (make test does)")

ROOT = Path(__file__).parents[1]
#: nccl.h's ncclDataType_t and ncclRedOp_t: what cupy.cuda.nccl's constants must be.
NCCL_H = {"NCCL_INT8": 0, "NCCL_UINT8": 1, "NCCL_INT32": 2, "NCCL_UINT32": 3, "NCCL_INT64": 4, "NCCL_UINT64": 5,
          "NCCL_FLOAT16": 6, "NCCL_FLOAT32": 7, "NCCL_FLOAT64": 8,
          "NCCL_SUM": 0, "NCCL_PROD": 1, "NCCL_MAX": 2, "NCCL_MIN": 3, "NCCL_AVG": 4}
_NUMPY = {0: np.int8, 1: np.uint8, 2: np.int32, 3: np.uint32, 4: np.int64, 5: np.uint64, 6: np.float16,
          7: np.float32, 8: np.float64}
_REDUCE = {0: np.add, 1: np.multiply, 2: np.maximum, 3: np.minimum}
DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool"]
OPS = ["sum", "avg", "max", "min", "prod"]


def host(ptr: int, count: int, dtype) -> np.ndarray:
    """The `count` elements of `dtype` at host address `ptr`, writable."""
    dtype = np.dtype(dtype)
    if count == 0:
        return np.empty(0, dtype)
    return np.ctypeslib.as_array((ctypes.c_uint8 * (count * dtype.itemsize)).from_address(ptr)).view(dtype)


# --- a host-memory stand-in for cupy and cupy.cuda.nccl -------------------------------------------------------------
class Sim:
    """cupy (memory, streams, events, two element-wise functions) and NCCL on host memory. Streams are queues; a
    collective runs once every rank of its communicator has it at the head of its stream, as NCCL's kernels meet;
    a recv runs once its peer's send has. `gpus` GPUs; `tuple_ids`: an older cupy's tuple unique ids."""

    def __init__(self, gpus=2, version=22703, tuple_ids=False):
        self.streams, self.worlds, self.mail = {}, {}, defaultdict(deque)
        self.current = [None]
        self.aborted, self.async_error, self.live = [], None, {}
        sim = self

        class CUDARuntimeError(RuntimeError):
            def __init__(self, status):
                super().__init__(f"cudaError {status}")
                self.status = status

        def malloc(n):
            buf = np.zeros(n, np.uint8)
            self.live[buf.ctypes.data] = buf
            return buf.ctypes.data

        runtime = types.SimpleNamespace(
            CUDARuntimeError=CUDARuntimeError, memcpyHostToDevice=1, memcpyDeviceToHost=2, memcpyDeviceToDevice=3,
            getDeviceCount=lambda: gpus, malloc=malloc, free=lambda p: self.live.pop(p),
            memcpyAsync=lambda d, s, n, kind, stream: ctypes.memmove(d, s, n),
            memsetAsync=lambda p, v, n, stream: ctypes.memset(p, v, n), deviceSynchronize=self.progress,
            memGetInfo=lambda: (1 << 30, 1 << 30))

        class Device:
            def __init__(self, index=0):
                self.id = index

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class Stream:
            def __init__(self, non_blocking=False):
                self.ptr, self.queue = id(self), deque()
                sim.streams[self.ptr] = self

            def __enter__(self):
                sim.current.append(self)

            def __exit__(self, *exc):
                sim.current.pop()

            @property
            def done(self):
                sim.progress()
                return not self.queue

            def synchronize(self):
                assert self.done, "a stream that can never finish: cupy would hang here"

        class Event:
            def __init__(self, disable_timing=False):
                self.reached = True

            def record(self, stream):
                self.reached = False
                stream.queue.append(("run", lambda: setattr(self, "reached", True)))

            @property
            def done(self):
                sim.progress()
                return self.reached

            def synchronize(self):
                assert self.done, "an event that can never complete: cupy would hang here"

        class UnownedMemory:
            def __init__(self, ptr, size, owner, device_id):
                self.ptr, self.size, self.owner = ptr, size, owner

        class MemoryPointer:
            def __init__(self, mem, offset):
                self.ptr = mem.ptr + offset

        def ndarray(shape, dtype, memptr):
            return host(memptr.ptr, int(np.prod(shape)), dtype).reshape(shape)

        def queued(fn):  # an element-wise kernel: runs in order on the current stream
            return lambda a, b, out: sim.current[-1].queue.append(("run", lambda: fn(a, b, out=out)))

        cupy = types.ModuleType("cupy")
        cupy.__version__ = "simulated"
        cupy.cuda = types.SimpleNamespace(runtime=runtime, Device=Device, Stream=Stream, Event=Event,
                                          UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer)
        cupy.ndarray, cupy.floor_divide, cupy.true_divide = ndarray, queued(np.floor_divide), queued(np.true_divide)
        self.cupy = cupy
        self.nccl = self._nccl(version, tuple_ids)

    def _nccl(self, version, tuple_ids):
        sim = self
        nccl = types.ModuleType("cupy.cuda.nccl")
        nccl.available = True
        nccl.__dict__.update(NCCL_H)
        nccl.NcclError = type("NcclError", (RuntimeError,), {})
        nccl.get_version = lambda: version
        nccl.groupStart = nccl.groupEnd = lambda: None
        nccl.get_unique_id = lambda: tuple(np.frombuffer(os.urandom(128), np.int8).tolist()) if tuple_ids \
            else os.urandom(128)

        class NcclCommunicator:
            def __init__(self, size, uid, rank):
                if tuple_ids and not isinstance(uid, tuple):
                    raise TypeError("an older cupy takes a tuple")
                key = bytes(np.array(uid, np.int8).tobytes()) if tuple_ids else uid
                self.world = sim.worlds.setdefault(key, {"size": size, "calls": defaultdict(dict)})
                assert self.world["size"] == size and len(uid) == 128
                self.rank, self.size, self.seq, self.destroyed = rank, size, 0, False

            def _collective(self, sp, kind, **args):
                entry = ("collective", self.world, self.seq, self.rank)
                self.world["calls"][self.seq][self.rank] = dict(kind=kind, stream=sim.streams[sp], entry=entry,
                                                                **args)
                self.seq += 1
                sim.streams[sp].queue.append(entry)

            def allReduce(self, s, r, count, dt, op, sp):
                self._collective(sp, "allReduce", s=s, r=r, count=count, dt=dt, op=op)

            def bcast(self, b, count, dt, root, sp):
                self._collective(sp, "bcast", s=b, r=b, count=count, dt=dt, root=root)

            def reduce(self, s, r, count, dt, op, root, sp):
                self._collective(sp, "reduce", s=s, r=r, count=count, dt=dt, op=op, root=root)

            def allGather(self, s, r, count, dt, sp):
                self._collective(sp, "allGather", s=s, r=r, count=count, dt=dt)

            def reduceScatter(self, s, r, count, dt, op, sp):
                self._collective(sp, "reduceScatter", s=s, r=r, count=count, dt=dt, op=op)

            def send(self, b, count, dt, peer, sp):
                box = sim.mail[(id(self.world), self.rank, peer)]
                sim.streams[sp].queue.append(("run", lambda: box.append(host(b, count, _NUMPY[dt]).copy())))

            def recv(self, b, count, dt, peer, sp):
                box = sim.mail[(id(self.world), peer, self.rank)]
                sim.streams[sp].queue.append(("recv", box, host(b, count, _NUMPY[dt])))

            def check_async_error(self):
                if sim.async_error:
                    raise nccl.NcclError(sim.async_error)

            def abort(self):  # NCCL's kernels end: the streams go on past this rank's collectives
                sim.aborted.append(self.rank)
                for stream in sim.streams.values():
                    stream.queue = deque(e for e in stream.queue if e[0] != "collective" or e[1] is not self.world
                                         or e[3] != self.rank)

            def destroy(self):
                assert not self.destroyed
                self.destroyed = True

        nccl.NcclCommunicator = NcclCommunicator
        return nccl

    def progress(self) -> None:
        """Run every stream as far as it can go."""
        moved = True
        while moved:
            moved = False
            for stream in list(self.streams.values()):
                while stream.queue:
                    head = stream.queue[0]
                    if head[0] == "run":
                        stream.queue.popleft()
                        head[1]()
                    elif head[0] == "recv" and head[1]:
                        stream.queue.popleft()
                        got = head[1].popleft()
                        assert got.shape == head[2].shape, "send and recv counts differ"
                        head[2][...] = got
                    elif head[0] == "collective" and self._meet(*head[1:]):
                        pass
                    else:
                        break
                    moved = True

    def _meet(self, world, seq, rank) -> bool:
        """Run collective `seq` of `world` if every rank has it at the head of its stream."""
        calls = world["calls"][seq]
        if len(calls) < world["size"] or any(c["stream"].queue[0] is not c["entry"] for c in calls.values()):
            return False
        first = calls[0]
        for c in calls.values():
            assert all(c.get(k) == first.get(k) for k in ("kind", "count", "dt", "op", "root")), (c, first)
            c["stream"].queue.popleft()
        n, dt, size = first["count"], _NUMPY[first["dt"]], world["size"]
        kind = first["kind"]
        if kind == "bcast":
            data = host(calls[first["root"]]["s"], n, dt).copy()
            for c in calls.values():
                host(c["r"], n, dt)[...] = data
            return True
        if kind == "allGather":
            data = np.concatenate([host(calls[r]["s"], n, dt) for r in range(size)])
            for c in calls.values():
                host(c["r"], n * size, dt)[...] = data
            return True
        whole = n * size if kind == "reduceScatter" else n
        parts = [host(calls[r]["s"], whole, dt).copy() for r in range(size)]
        op = first["op"]
        if op == NCCL_H["NCCL_AVG"]:
            assert np.dtype(dt).kind == "f", "the plugin never asks NCCL for an integer avg"
            out = (np.add.reduce(parts) / size).astype(dt)
        else:
            out = _REDUCE[op].reduce(parts).astype(dt)
        for r, c in calls.items():
            if kind == "allReduce":
                host(c["r"], n, dt)[...] = out
            elif kind == "reduce" and r == first["root"]:
                host(c["r"], n, dt)[...] = out
            elif kind == "reduceScatter":
                host(c["r"], n, dt)[...] = out[r * n:(r + 1) * n]
        return True


def _install(monkeypatch, reset_plugins, sim: Sim) -> None:
    monkeypatch.setitem(sys.modules, "cupy", sim.cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", sim.nccl)
    monkeypatch.setitem(sys.modules, "cupy_backends", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name in nc.LOCAL_SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    reset_plugins()


@pytest.fixture
def sim(monkeypatch, reset_plugins):
    """The stand-in with 3 GPUs, as cuda:0..2 (the real ones are checked by the gpu tests)."""
    s = Sim(gpus=3)
    _install(monkeypatch, reset_plugins, s)
    yield s
    monkeypatch.undo()
    reset_plugins()


def _gpu(i: int):
    from hwadapter.runtime.device import get
    return get(f"cuda:{i}")


def _group(size: int, own=None):
    """`size` communicators of one group, rank r on cuda:r (made as ranks do: rank 0's id to every rank)."""
    colls = [own or _gpu(r).collectives for r in range(size)]
    assert all(isinstance(c, nc.NcclCollectives) for c in colls), colls
    uid = colls[0].unique_id()
    assert isinstance(uid, bytes) and len(uid) == 128
    return [colls[r].communicator(uid, r, size) for r in range(size)]


def _up(comm, a: np.ndarray) -> DeviceArray:
    return DeviceArray.from_numpy(comm.device, np.ascontiguousarray(a))


def data(rank: int, dtype: str, n: int = 6) -> np.ndarray:
    """Rank `rank`'s input: small values (sums and products exact in every dtype), negative ones for signed types."""
    base = np.arange(n) % 4 - (2 if np.dtype(dtype).kind in "if" else 0) + rank
    return base % 2 == 0 if dtype == "bool" else base.astype(dtype)


def oracle(arrays, op: str, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return np.logical_or.reduce(arrays) if op in ("sum", "max") else np.logical_and.reduce(arrays)
    wide = np.stack([a.astype(np.float64) for a in arrays])
    if op == "avg":
        return (np.floor_divide(wide.sum(0), len(arrays)) if np.dtype(dtype).kind in "iu"
                else wide.sum(0) / len(arrays)).astype(dtype)
    return {"sum": wide.sum(0), "max": wide.max(0), "min": wide.min(0), "prod": wide.prod(0)}[op].astype(dtype)


def same(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    """Exact for integers and bool; floats to their dtype's rounding (the oracle divides in float64)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    if got.dtype.kind != "f":  # bool as its bytes: a 2 from a sum of two True bytes is no bool hwadapter expects
        np.testing.assert_array_equal(got.view(np.uint8) if got.dtype == bool else got,
                                      want.view(np.uint8) if want.dtype == bool else want, err_msg=what)
    else:
        tol = {"float16": 1e-3, "float32": 1e-6}.get(got.dtype.name, 1e-12)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)


# --- pure logic -------------------------------------------------------------------------------------------------
def test_unique_ids_pack_to_128_bytes_and_back():
    raw = os.urandom(128)
    signed = tuple(np.frombuffer(raw, np.int8).tolist())  # what cupy < 14 returned (signed char)
    assert min(signed) < 0 or max(signed) < 128
    assert nc.pack_id(signed) == raw and nc.pack_id(raw) == raw and nc.pack_id(bytearray(raw)) == raw
    assert nc.pack_id(tuple(b for b in raw)) == raw  # unsigned ints pack to the same bytes
    assert nc.unpack_id(raw) == signed and nc.pack_id(nc.unpack_id(raw)) == raw


def test_ops_and_dtypes_map_to_nccl_constants():
    sim = Sim()
    want_dtypes = {"float16": 6, "float32": 7, "float64": 8, "int8": 0, "uint8": 1, "int32": 2, "int64": 4, "bool": 1}
    assert {k: getattr(sim.nccl, v) for k, v in nc.DTYPES.items()} == want_dtypes
    assert {k: NCCL_H[v] for k, v in nc.OPS.items()} == {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
    # bool: or is max, and is min; avg of bool is no op at all
    assert [nc.reduction(op, "bool", True) for op in ("sum", "max", "prod", "min")] == \
        [("NCCL_MAX", None), ("NCCL_MAX", None), ("NCCL_MIN", None), ("NCCL_MIN", None)]
    with pytest.raises(KeyError):
        nc.reduction("avg", "bool", True)
    # avg: NCCL's own for floats from NCCL 2.10; integers are floored, as the MPI communicator floors them
    assert nc.reduction("avg", "float32", True) == ("NCCL_AVG", None)
    assert nc.reduction("avg", "float32", False) == ("NCCL_SUM", "true")
    assert nc.reduction("avg", "int32", True) == ("NCCL_SUM", "floor")
    assert nc.reduction("prod", "int8", True) == ("NCCL_PROD", None)


def test_real_cupy_nccl_constants_are_nccl_h():
    nccl = nc.load_nccl()
    if nccl is None:
        pytest.skip("cupy with a loadable NCCL is not installed here (make test-gpu installs cupy-cuda13x and "
                    "nvidia-nccl-cu13)")
    assert {name: getattr(nccl, name) for name in NCCL_H} == NCCL_H


def test_no_cupy_means_no_nccl(monkeypatch):
    from hwadapter_cuda import CudaPlugin
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` raises ImportError, as without cupy
    assert nc.load_nccl() is None
    assert CudaPlugin().collectives(object()) is None  # decided before the device is looked at


def test_cupy_without_its_nccl_library_means_no_nccl(monkeypatch):
    from hwadapter_cuda import CudaPlugin
    sim = Sim()
    sim.nccl.available = False  # cupy.cuda.nccl imports, but libnccl.so.2 did not load
    monkeypatch.setitem(sys.modules, "cupy", sim.cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", sim.nccl)
    assert CudaPlugin().collectives(object()) is None


def test_ranks_sharing_gpus_are_left_to_mpi(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name in nc.LOCAL_SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert not nc.ranks_outnumber_gpus(1)  # not under an MPI launcher
    monkeypatch.setenv("MPI_LOCALNRANKS", "2")  # MPICH's hydra
    assert nc.ranks_outnumber_gpus(1) and not nc.ranks_outnumber_gpus(2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # the launcher pins ranks: trusted
    assert not nc.ranks_outnumber_gpus(1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.delenv("MPI_LOCALNRANKS")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4")
    assert nc.ranks_outnumber_gpus(3)


def test_plugin_offers_nccl_only_on_a_gpu(sim, monkeypatch):
    from hwadapter.runtime.device import get
    from hwadapter_cuda import CudaPlugin
    assert isinstance(_gpu(0).collectives, nc.NcclCollectives)
    assert _gpu(0).collectives.dtypes() == frozenset(DTYPES)
    assert CudaPlugin().collectives(get("cpu:0")) is None  # a device whose runtime is no GPU's
    monkeypatch.setenv("MPI_LOCALNRANKS", "4")  # 4 ranks on 3 GPUs: some would share one
    assert CudaPlugin().collectives(_gpu(1)) is None


# --- every call, on the stand-in ----------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [1, 2, 3])
def test_every_call_against_numpy(sim, size):
    comms = _group(size)
    everyone = range(size)

    def each(call):  # every rank queues its call (NCCL's calls return at once), then every rank waits
        works = [call(c) for c in comms]
        for w in works:
            w.wait()
            assert w.is_completed()

    for dtype in DTYPES:
        for op in OPS:
            if dtype == "bool" and op == "avg":
                continue
            want = oracle([data(r, dtype) for r in everyone], op, dtype)
            ins = [_up(c, data(c.rank, dtype)) for c in comms]
            outs = [_up(c, np.zeros(6, dtype)) for c in comms]
            each(lambda c: c.all_reduce(ins[c.rank], outs[c.rank], op))
            for r in everyone:
                same(outs[r].numpy(), want, f"all_reduce {dtype} {op} rank {r}")
            each(lambda c: c.all_reduce(ins[c.rank], ins[c.rank], op))  # in place
            for r in everyone:
                same(ins[r].numpy(), want, f"in place {dtype} {op} rank {r}")

            root = size - 1
            ins = [_up(c, data(c.rank, dtype)) for c in comms]
            outs = [_up(c, data(7, dtype)) for c in comms]
            each(lambda c: c.reduce(ins[c.rank], outs[c.rank], op, root))
            for r in everyone:  # the other ranks' outputs are left as they were
                same(outs[r].numpy(), want if r == root else data(7, dtype), f"reduce {dtype} {op} rank {r}")

            ins = [_up(c, np.concatenate([data(c.rank * size + j, dtype, 4) for j in everyone])) for c in comms]
            outs = [_up(c, np.zeros(4, dtype)) for c in comms]
            each(lambda c: c.reduce_scatter(ins[c.rank], outs[c.rank], op))
            for r in everyone:
                same(outs[r].numpy(),
                                              oracle([data(q * size + r, dtype, 4) for q in everyone], op, dtype))

        for root in everyone:
            bufs = [_up(c, data(c.rank, dtype)) for c in comms]
            each(lambda c: c.broadcast(bufs[c.rank], root))
            for r in everyone:
                same(bufs[r].numpy(), data(root, dtype))

        ins = [_up(c, data(c.rank, dtype, 5)) for c in comms]
        outs = [_up(c, np.zeros(5 * size, dtype)) for c in comms]
        each(lambda c: c.all_gather(ins[c.rank], outs[c.rank]))
        for r in everyone:
            same(outs[r].numpy(), np.concatenate([data(q, dtype, 5) for q in everyone]))

        ins = [_up(c, np.concatenate([data(c.rank * size + j, dtype, 3) for j in everyone])) for c in comms]
        outs = [_up(c, np.zeros(3 * size, dtype)) for c in comms]
        each(lambda c: c.all_to_all(ins[c.rank], outs[c.rank]))
        for r in everyone:  # part j of rank r's output is rank j's part r
            same(outs[r].numpy(),
                                          np.concatenate([data(j * size + r, dtype, 3) for j in everyone]))

    if size > 1:  # a ring of sends: each rank to the next
        outs = [_up(c, np.zeros(4, np.float32)) for c in comms]
        ins = [_up(c, data(c.rank, "float32", 4)) for c in comms]
        each(lambda c: c.send(ins[c.rank], (c.rank + 1) % size))
        each(lambda c: c.recv(outs[c.rank], (c.rank - 1) % size))
        for r in everyone:
            same(outs[r].numpy(), data((r - 1) % size, "float32", 4))

    works = [c.all_reduce(_up(c, np.zeros(0, np.float32)), _up(c, np.zeros(0, np.float32))) for c in comms]
    assert all(w is DONE for w in works)  # zero elements: nothing to queue
    for c in comms:
        c.destroy()
    assert all(not s.queue for s in sim.streams.values())


def test_a_call_waits_for_every_rank_and_orders_on_the_given_stream(sim):
    comms = _group(2)
    s0, s1 = (_gpu(r).runtime.create_stream() for r in range(2))
    a, b = _up(comms[0], np.ones(3, np.float32)), _up(comms[1], np.full(3, 2, np.float32))
    w0 = comms[0].all_reduce(a, a, "sum", stream=s0)
    assert not w0.is_completed() and s0.cupy.queue  # queued on s0, waiting for rank 1
    assert not _gpu(0).runtime.default_stream.cupy.queue
    w1 = comms[1].all_reduce(b, b, "avg", stream=s1)  # a different op: NCCL would hang; the stand-in says so
    with pytest.raises(AssertionError):
        w1.wait()
    for c in comms:
        c.destroy()


def test_integer_avg_is_floored_after_the_sum_and_bool_avg_is_refused(sim):
    comms = _group(2)
    ins = [_up(c, np.array([-3, 3, -1, 5], np.int32) + c.rank) for c in comms]  # sums -5, 7, -1, 11
    works = [c.all_reduce(ins[c.rank], ins[c.rank], "avg") for c in comms]
    for w in works:
        w.wait()
    np.testing.assert_array_equal(ins[0].numpy(), [-3, 3, -1, 5])  # floor, not NCCL's truncation (-2, 3, 0, 5)
    flags = _up(comms[0], np.array([True, False]))
    with pytest.raises(UnsupportedDTypeError, match=r"all_reduce on cuda:0 \(rank 0 of 2\): avg of bool"):
        comms[0].all_reduce(flags, flags, "avg")
    for c in comms:
        c.destroy()


def test_float_avg_before_nccl_2_10_divides_the_sum(monkeypatch, reset_plugins):
    sim = Sim(version=20903)
    _install(monkeypatch, reset_plugins, sim)
    comms = _group(2)
    ins = [_up(c, np.array([1, 2, 5], np.float16) * (c.rank + 1)) for c in comms]
    works = [c.all_reduce(ins[c.rank], ins[c.rank], "avg") for c in comms]
    for w in works:
        w.wait()
    np.testing.assert_array_equal(ins[1].numpy(), np.array([1.5, 3, 7.5], np.float16))
    for c in comms:
        c.destroy()


def test_an_older_cupy_gets_its_id_as_a_tuple(monkeypatch, reset_plugins):
    sim = Sim(tuple_ids=True)
    _install(monkeypatch, reset_plugins, sim)
    comms = _group(2)
    bufs = [_up(c, np.full(2, c.rank + 1, np.int64)) for c in comms]
    for w in [c.all_reduce(bufs[c.rank], bufs[c.rank]) for c in comms]:
        w.wait()
    np.testing.assert_array_equal(bufs[0].numpy(), [3, 3])
    for c in comms:
        c.destroy()


def test_wrong_arguments_name_the_call_device_and_fix(sim):
    comm, = _group(1)
    f32, f64 = _up(comm, np.zeros(4, np.float32)), _up(comm, np.zeros(4, np.float64))
    i16 = _up(comm, np.zeros(4, np.int16))
    with pytest.raises(UnsupportedDTypeError, match=r"broadcast on cuda:0 \(rank 0 of 1\): NCCL carries no int16\. "
                                                    r"Fix: cast the tensor to one of .*int32"):
        comm.broadcast(i16, 0)
    with pytest.raises(UnsupportedDTypeError, match="all_to_all on cuda:0.*int16"):
        comm.all_to_all(i16, i16)
    with pytest.raises(InvalidArgumentError, match="dtypes differ"):
        comm.all_reduce(f32, f64)
    with pytest.raises(InvalidArgumentError, match="unknown reduce op 'mean'"):
        comm.all_reduce(f32, f32, "mean")
    with pytest.raises(InvalidArgumentError, match="root 1 is not a rank"):
        comm.broadcast(f32, 1)
    with pytest.raises(InvalidArgumentError, match="a buffer is a ndarray"):
        comm.send(np.zeros(4, np.float32), 0)
    with pytest.raises(InvalidArgumentError, match="3 elements out is not 1 ranks x 4 in"):
        comm.all_gather(f32, _up(comm, np.zeros(3, np.float32)))
    with pytest.raises(InvalidArgumentError, match="one buffer"):
        comm.all_to_all(f32, f32)
    with pytest.raises(InvalidArgumentError, match="is not a CUDA stream"):
        comm.all_reduce(f32, f32, stream="default")
    with pytest.raises(InvalidArgumentError, match="rank 2 of 2 with a 128-byte id"):
        _gpu(0).collectives.communicator(_gpu(0).collectives.unique_id(), 2, 2)
    comm.destroy()
    with pytest.raises(CollectiveError, match="destroyed"):
        comm.barrier()


def test_a_wait_past_the_limit_aborts_and_later_calls_fail(sim):
    comms = _group(2)
    comms[0].timeout = 0.3
    buf = _up(comms[0], np.ones(2, np.float32))
    work = comms[0].all_reduce(buf, buf)  # rank 1 never comes
    start = time.monotonic()
    with pytest.raises(CollectiveError, match=r"all_reduce on cuda:0 \(rank 0 of 2\) did not complete within 0.3 s"):
        work.wait()
    assert 0.3 <= time.monotonic() - start < 5 and sim.aborted == [0]
    with pytest.raises(CollectiveError, match="aborted"):
        comms[0].barrier()
    comms[0].destroy()  # an aborted communicator is not destroyed again (NCCL freed it)
    assert not comms[0].handle
    comms[1].destroy()


def test_an_nccl_failure_while_waiting_fails_at_once(sim):
    comms = _group(2)
    comms[0].timeout = 60
    buf = _up(comms[0], np.ones(2, np.float32))
    work = comms[0].all_reduce(buf, buf)
    sim.async_error = "NCCL_ERROR_REMOTE_ERROR: remote process exited"
    start = time.monotonic()
    with pytest.raises(CollectiveError, match="NCCL failed while it ran: NCCL_ERROR_REMOTE_ERROR"):
        work.wait()
    assert time.monotonic() - start < 5 and sim.aborted == [0]
    for c in comms:
        c.destroy()


def test_barrier_returns_once_every_rank_called_it(sim):
    comms = _group(2)
    comms[0].timeout = comms[1].timeout = 0.2
    with pytest.raises(CollectiveError, match="all_reduce.*did not complete"):
        comms[0].barrier()  # alone: never completes
    comms = _group(2)  # a fresh pair (the first was aborted)
    w = comms[1].all_reduce(*[_up(comms[1], np.zeros(1, np.int32))] * 2, "max")  # rank 1 is already there
    comms[0].barrier()
    w.wait()
    for c in comms:
        c.destroy()


# --- on a GPU (make test-gpu) ---------------------------------------------------------------------------------------
gpu = pytest.mark.gpu


def _real_gpu() -> int:
    """The number of GPUs when cuda is usable with NCCL, else a skip saying why not."""
    rec = registry.get("cuda")
    if rec is None or not rec.ok:
        pytest.skip(f"no usable NVIDIA GPU: {rec.explain() if rec else 'hwadapter-cuda is not installed'}")
    if nc.load_nccl() is None:
        pytest.skip("cupy's NCCL bindings cannot load libnccl: pip install 'nvidia-nccl-cu13>=2.27.7,<3' "
                    "(make test-gpu does)")
    return int(nc.load_cupy().cuda.runtime.getDeviceCount())


@gpu
def test_gpu_every_call_on_one_rank_against_numpy():
    _real_gpu()
    for name in nc.LOCAL_SIZE_VARIABLES:
        assert name not in os.environ, f"{name} is set: run this test outside mpiexec"
    comm, = _group(1)
    comm.timeout = 120
    for dtype in DTYPES:
        x = data(0, dtype, 1000)
        for op in OPS:
            if dtype == "bool" and op == "avg":
                continue
            a, out = _up(comm, x), _up(comm, np.zeros_like(x))
            comm.all_reduce(a, out, op).wait()
            same(out.numpy(), oracle([x], op, dtype), f"all_reduce {dtype} {op}")
            comm.reduce(a, out, op, 0).wait()
            same(out.numpy(), oracle([x], op, dtype), f"reduce {dtype} {op}")
            comm.reduce_scatter(a, out, op).wait()
            same(out.numpy(), oracle([x], op, dtype), f"reduce_scatter {dtype}")
            comm.all_reduce(a, a, op).wait()  # in place
            same(a.numpy(), oracle([x], op, dtype), f"in place {dtype} {op}")
        a, out = _up(comm, x), _up(comm, np.zeros_like(x))
        comm.broadcast(a, 0).wait()
        comm.all_gather(a, out).wait()
        same(out.numpy(), x, f"all_gather {dtype}")
        out = _up(comm, np.zeros_like(x))
        comm.all_to_all(a, out).wait()
        same(out.numpy(), x, f"all_to_all {dtype}")
    stream = _gpu(0).runtime.create_stream()
    a = _up(comm, np.arange(1 << 20, dtype=np.float32))
    work = comm.all_reduce(a, a, "avg", stream=stream)
    work.wait()
    assert work.is_completed() and stream.query()
    same(a.numpy(), np.arange(1 << 20, dtype=np.float32))
    comm.barrier()
    with pytest.raises(UnsupportedDTypeError, match="NCCL carries no int16"):
        comm.all_reduce(_up(comm, np.zeros(2, np.int16)), _up(comm, np.zeros(2, np.int16)))
    comm.destroy()


@gpu
def test_gpu_a_send_nobody_receives_times_out_and_aborts():
    _real_gpu()
    code = textwrap.dedent("""
        import time, numpy as np
        from hwadapter.runtime.device import get
        from hwadapter.plugin import CollectiveError, DeviceArray
        dev = get("cuda:0")
        own = dev.collectives
        comm = own.communicator(own.unique_id(), 0, 1)
        comm.timeout = 3
        work = comm.send(DeviceArray.from_numpy(dev, np.ones(4, np.float32)), 0)  # no recv: never completes
        start = time.monotonic()
        try:
            work.wait()
        except CollectiveError as err:
            print("RAISED", round(time.monotonic() - start, 1), err)
    """)
    env = {k: v for k, v in os.environ.items() if k not in nc.LOCAL_SIZE_VARIABLES}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "RAISED" in res.stdout and "did not complete within 3 s" in res.stdout, res.stdout + res.stderr


_RANK = """
import importlib.util, json, sys
import hwadapter as hw
from hwadapter.runtime.device import get
spec = importlib.util.spec_from_file_location("kit", {kit!r})
kit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kit)
kit.main()  # every collective x dtype x op through hwadapter.distributed; rank 0 prints RESULT
dev = get(hw.get_device())
print("USED " + json.dumps({{"device": str(dev), "nccl": type(dev.collectives).__name__ == "NcclCollectives",
                             "comm": repr(dev.comms.get(0))}}), flush=True)
"""


def _mpi_job(tmp_path, ranks: int) -> tuple[dict, list[dict]]:
    script = tmp_path / "rank.py"
    script.write_text(_RANK.format(kit=str(ROOT / "tests" / "dist_ranks" / "collectives.py")))
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        pytest.skip(f"no mpiexec beside {sys.executable}: pip install 'hwadapter[mpi]'")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    res = subprocess.run([str(mpiexec), "-n", str(ranks), sys.executable, str(script), "cuda:0"], capture_output=True,
                         text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    result = next(json.loads(line[7:]) for line in res.stdout.splitlines() if line.startswith("RESULT "))
    used = [json.loads(line[5:]) for line in res.stdout.splitlines() if line.startswith("USED ")]
    bad = {k: v for k, v in result["cases"].items() if v != "ok"}
    assert not bad and len(used) == ranks, (bad, used)
    return result, used


@gpu
def test_gpu_distributed_collectives_run_on_nccl(tmp_path):
    """One rank per GPU: 2 ranks where there are two GPUs, else one (a group of one is still NCCL's)."""
    ranks = min(_real_gpu(), 2)
    _, used = _mpi_job(tmp_path, ranks)
    assert all(u["nccl"] and "NcclCommunicator" in u["comm"] for u in used), used
    assert sorted(u["device"] for u in used) == [f"cuda:{r}" for r in range(ranks)]


@gpu
def test_gpu_ranks_sharing_one_gpu_use_the_mpi_communicator(tmp_path):
    if _real_gpu() != 1:
        pytest.skip("needs a machine with exactly one GPU (elsewhere ranks get GPUs of their own)")
    _, used = _mpi_job(tmp_path, 2)
    assert all(not u["nccl"] and "MpiCommunicator" in u["comm"] for u in used), used
