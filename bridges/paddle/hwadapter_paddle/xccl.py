"""Paddle's collectives (its custom device's xccl_* functions) on hwadapter's communicators.

shim/paddle_xccl.cc (libhwadapter_paddle_<type>.xccl) calls these functions under the GIL, after the runtime shim
has completed the call's stream; each call completes before it returns. The communicator is the plugin's own
(hwadapter.host.device(...).collectives), whose unique id Paddle hands to the ranks through its TCPStore, else
hwadapter's default one on MPI: then the ranks run as one MPI job (`hwadapter paddle launch`), the unique id carries
the root's MPI rank and a tag, and each member tells the root its rank over MPI, learns the group's ranks and makes
the group's MPI communicator (MPI_Comm_create_group). Every wait is bounded (HWADAPTER_COLLECTIVE_TIMEOUT) and
stops when another rank announced its failure (hwadapter.distributed's failure watch).
"""
from __future__ import annotations

import atexit
import importlib
import os
import struct
from pathlib import Path

import numpy as np
from hwadapter import host
from hwadapter.plugin import REDUCE_OPS

#: The unique id: a magic, then kind (0: MPI, 1: the plugin's own), the root's MPI rank, the tag, the MPI world's
#: size and the length of the plugin's own id, then that id (device_api.h allows 4096 bytes).
MAGIC = b"HWAPDXC1"
HEAD = struct.Struct("<8siiiiI")
SIZE = HEAD.size + 4096
MPI_KIND, OWN_KIND = 0, 1
#: Paddle's C_CCLReduceOp numbering (device_api.h's HwaReduceOp is the same) -> hwadapter's reduce op names.
OPS = dict(enumerate(REDUCE_OPS))
#: Paddle's C_DataType codes -> numpy dtypes (bfloat16 moves as its bits; it has no numpy reduction).
DTYPES = {1: np.bool_, 2: np.uint8, 3: np.uint16, 4: np.uint32, 5: np.uint64, 6: np.int8, 7: np.int16, 8: np.int32,
          9: np.int64, 10: np.float16, 11: np.float32, 12: np.float64, 13: np.uint16, 14: np.complex64,
          15: np.complex128}
BFLOAT16 = 13
LAUNCH = "start the ranks with `hwadapter paddle launch -n N -- python train.py` (one MPI job)"

_comms: dict[int, "_Comm"] = {}
_next = [1, 0]  # the next communicator handle, the next tag
_job: dict = {}  # the MPI job, once joined: "rv" (a communicator over the whole world, for rendezvous), "rank"
_group: list | None = None  # calls deferred between group_start and group_end


class _Comm:
    """One Paddle communicator: hwadapter's Communicator for the device, and the MPI communicator it owns."""

    def __init__(self, comm, device, mpi_comm=None):
        self.comm, self.device, self.mpi_comm = comm, device, mpi_comm

    def arrays(self, count: int, code: int, *addresses):
        """The buffers at `addresses` (count elements of dtype `code`) as the device's arrays; one array for equal
        addresses (an in-place call)."""
        dtype = _dtype(code)
        made: dict = {}
        for a in addresses:
            if a not in made:
                made[a] = host.native_array(self.device, a, (count,), dtype)
        return [made[a] for a in addresses]

    def run(self, start) -> None:
        """Start a call now (or at group_end inside a group) and wait for it."""
        if _group is not None:
            _group.append(start)
        else:
            start().wait()


def _dtype(code: int):
    if code not in DTYPES:
        raise ValueError(f"Paddle's data type code {code} has no hwadapter equivalent. Fix: cast the tensor to "
                         f"float32, float64, an integer type or bool")
    return DTYPES[code]


def _op(code: int, dtype_code: int, call: str) -> str:
    if code not in OPS:
        raise ValueError(f"{call}: unknown reduce op code {code} (Paddle's C_CCLReduceOp has 0 to {len(OPS) - 1}: "
                         f"{', '.join(OPS.values())}). Fix: pass one of paddle.distributed.ReduceOp's")
    if dtype_code == BFLOAT16:
        raise NotImplementedError(f"{call} of bfloat16 tensors: hwadapter's communicators reduce numpy types and "
                                  f"numpy has no bfloat16. Fix: cast to float32 before the collective")
    return OPS[code]


def _get(handle: int, call: str) -> _Comm:
    c = _comms.get(handle)
    if c is None:
        raise ValueError(f"{call}: communicator {handle} does not exist (destroyed, or never made). Fix: call "
                         f"paddle.distributed.init_parallel_env() first")
    return c


def _timeout() -> float:
    text = os.environ.get("HWADAPTER_COLLECTIVE_TIMEOUT")
    return float(text) if text else 300.0


# ---- set-up ----
def unique_id_size() -> int:
    return SIZE


def unique_id(device_type: str, out: memoryview) -> None:
    """Write a new id into `out` (Paddle's rank 0 of a group calls this; nothing here waits for other ranks)."""
    own = host.device(f"{device_type}:0").collectives
    if own is not None:
        uid = bytes(own.unique_id())
        if len(uid) > SIZE - HEAD.size:
            raise ValueError(f"the {device_type} plugin's unique id has {len(uid)} bytes, more than "
                             f"{SIZE - HEAD.size}")
        data = HEAD.pack(MAGIC, OWN_KIND, 0, 0, 0, len(uid)) + uid
    else:
        rank, size = _mpi_place()
        _next[1] += 1
        data = HEAD.pack(MAGIC, MPI_KIND, rank, _next[1], size, 0)
    out[:len(data)] = data
    out[len(data):] = bytes(len(out) - len(data))


def _mpi_place() -> tuple[int, int]:
    """(this process's MPI rank, the job's size) without joining MPI (joining waits for every rank)."""
    if "rank" in _job:
        return _job["rank"], _job["size"]
    if "PMI_RANK" in os.environ and "PMI_SIZE" in os.environ:
        return int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
    raise RuntimeError(f"hwadapter's communicator runs on MPI, but this process is not part of an MPI job (no "
                       f"PMI_RANK). Fix: {LAUNCH}")


def join(device_type: str) -> None:
    """Join the MPI job now (a rank of `hwadapter paddle launch`, at `import paddle`)."""
    _join(device_type)


def _join(device_type: str):
    """The job's rendezvous communicator, joining MPI on first use (every rank's first communicator)."""
    if "rv" not in _job:
        _mpi_place()  # a clear error outside an MPI job, before MPI starts a job of one
        os.environ.setdefault("HWADAPTER_DEVICE", device_type)
        distributed = importlib.import_module("hwadapter.distributed")
        distributed.init_parallel_env()  # rank, failure watch and time limit of the job; every rank joins here
        MPI = importlib.import_module("mpi4py.MPI")
        world = MPI.COMM_WORLD.Dup()
        _job.update(rv=host.mpi_communicator(host.device("cpu:0"), world), world=world, MPI=MPI,
                    rank=world.Get_rank(), size=world.Get_size(), early=[])
    return _job


def init_rank(device_type: str, device: int, uid: bytes, nranks: int, rank: int) -> int:
    """Rank `rank` of `nranks` joins the group of unique id `uid`; returns the communicator's handle."""
    if len(uid) < HEAD.size or uid[:8] != MAGIC:
        raise ValueError("the unique id is not one of hwadapter-paddle's (the ranks' shims differ?). Fix: install "
                         "the same hwadapter-paddle for every rank")
    _, kind, root, tag, size, n = HEAD.unpack_from(uid)
    dev = host.device(f"{device_type}:{device}")
    if kind == OWN_KIND:
        comm = dev.collectives.communicator(uid[HEAD.size:HEAD.size + n], rank, nranks)
        if getattr(comm, "timeout", False) is None:
            comm.timeout = _timeout()
        return _keep(_Comm(comm, dev))
    job = _join(device_type)
    if size != job["size"]:
        raise RuntimeError(f"the unique id comes from an MPI job of {size} ranks, this one has {job['size']}. Fix: "
                           f"{LAUNCH}")
    ranks = _rendezvous(job, root, tag, nranks, rank)
    mpi_comm = job["world"].Create_group(job["world"].Get_group().Incl(ranks), tag=tag)
    return _keep(_Comm(host.mpi_communicator(dev, mpi_comm), dev, mpi_comm))


def _rendezvous(job: dict, root: int, tag: int, nranks: int, rank: int) -> list[int]:
    """The MPI ranks of the group, in group order: each member sends (tag, group rank, MPI rank) to the root, which
    answers every member with the list."""
    rv, me = job["rv"], job["rank"]
    if rank == 0:
        if me != root:
            raise RuntimeError(f"rank 0 of the group is MPI rank {me}, but the unique id was made on MPI rank {root}")
        ranks = [-1] * nranks
        ranks[0] = me
        got = [m for m in job["early"] if m[0] == tag]  # said during an earlier rendezvous
        job["early"] = [m for m in job["early"] if m[0] != tag]
        while len(got) < nranks - 1:
            msg = np.zeros(3, np.int64)
            rv.recv(msg, job["MPI"].ANY_SOURCE).wait()
            (got if msg[0] == tag else job["early"]).append(msg.tolist())
        for _, r, w in got:
            if not 0 < r < nranks or ranks[r] != -1:
                raise RuntimeError(f"two MPI ranks claim rank {r} of a group of {nranks}")
            ranks[r] = w
        answer = np.array([tag, *ranks], np.int64)
        works = [rv.send(answer, w) for w in ranks[1:]]
        for w in works:
            w.wait()
        return ranks
    rv.send(np.array([tag, rank, me], np.int64), root).wait()
    answer = np.zeros(nranks + 1, np.int64)
    rv.recv(answer, root).wait()
    if answer[0] != tag:
        raise RuntimeError(f"MPI rank {root} answered another group's set-up (tag {answer[0]}, not {tag})")
    return answer[1:].tolist()


def _keep(c: _Comm) -> int:
    handle = _next[0]
    _next[0] += 1
    _comms[handle] = c
    return handle


def destroy(handle: int) -> None:
    c = _comms.pop(handle, None)
    if c is not None:
        c.comm.destroy()
        if c.mpi_comm is not None and not _job.get("closed"):
            c.mpi_comm.Free()


@atexit.register
def _closed() -> None:
    """Communicators Paddle destroys after this (at its own exit) are only forgotten: MPI may be finalising."""
    _job["closed"] = True


# ---- calls: the buffers are Paddle's device addresses; counts in elements ----
def all_reduce(handle: int, send: int, recv: int, count: int, dtype: int, op: int) -> None:
    c = _get(handle, "all_reduce")
    name = _op(op, dtype, "all_reduce")
    s, r = c.arrays(count, dtype, send, recv)
    c.run(lambda: c.comm.all_reduce(s, r, name))


def broadcast(handle: int, buf: int, count: int, dtype: int, root: int) -> None:
    c = _get(handle, "broadcast")
    (b,) = c.arrays(count, dtype, buf)
    c.run(lambda: c.comm.broadcast(b, root))


def reduce(handle: int, send: int, recv: int, count: int, dtype: int, op: int, root: int) -> None:
    c = _get(handle, "reduce")
    name = _op(op, dtype, "reduce")
    s, r = c.arrays(count, dtype, send, recv)
    c.run(lambda: c.comm.reduce(s, r, name, root))


def all_gather(handle: int, send: int, recv: int, count: int, dtype: int) -> None:
    c = _get(handle, "all_gather")
    (s,) = c.arrays(count, dtype, send)
    (r,) = c.arrays(count * c.comm.size, dtype, recv)
    c.run(lambda: c.comm.all_gather(s, r))


def reduce_scatter(handle: int, send: int, recv: int, count: int, dtype: int, op: int) -> None:
    c = _get(handle, "reduce_scatter")
    name = _op(op, dtype, "reduce_scatter")
    (s,) = c.arrays(count * c.comm.size, dtype, send)
    (r,) = c.arrays(count, dtype, recv)
    c.run(lambda: c.comm.reduce_scatter(s, r, name))


def all_to_all(handle: int, send: int, recv: int, count: int, dtype: int) -> None:
    c = _get(handle, "all_to_all")
    s, r = c.arrays(count * c.comm.size, dtype, send, recv)
    c.run(lambda: c.comm.all_to_all(s, r))


def send(handle: int, buf: int, count: int, dtype: int, peer: int) -> None:
    c = _get(handle, "send")
    (b,) = c.arrays(count, dtype, buf)
    c.run(lambda: c.comm.send(b, peer))


def recv(handle: int, buf: int, count: int, dtype: int, peer: int) -> None:
    c = _get(handle, "recv")
    (b,) = c.arrays(count, dtype, buf)
    c.run(lambda: c.comm.recv(b, peer))


def group_start() -> None:
    """Calls until group_end are started together there (Paddle's batched sends and receives would otherwise wait
    for each other)."""
    global _group
    if _group is None:
        _group = []


def group_end() -> None:
    global _group
    calls, _group = _group or [], None
    works = [start() for start in calls]
    for w in works:
        w.wait()


# ---- building the library ----
SOURCE = Path(__file__).resolve().parent / "shim" / "paddle_xccl.cc"
SUFFIX = ".xccl"


def filename(device_type: str) -> str:
    return f"libhwadapter_paddle_{device_type}{SUFFIX}"


def build(device_type: str, out: Path, compiler: str, include_dirs: list[Path]) -> str | None:
    """Compile libhwadapter_paddle_<type>.xccl into `out`; None, or why it failed (the shim then reports that
    collectives are unavailable, at the first one)."""
    import subprocess
    import sysconfig
    cmd = [compiler, "-shared", "-fPIC", "-O2", "-std=c++17", "-fvisibility=hidden",
           f"-I{sysconfig.get_paths()['include']}", *[f"-I{d}" for d in include_dirs],
           f"-DHWA_PD_HWA_TYPE=\"{device_type}\"", str(SOURCE), "-o", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"compiling {SOURCE.name} failed: {err}"
    if proc.returncode != 0:
        return f"compiling {SOURCE.name} failed:\n" + "\n".join((proc.stdout + proc.stderr).splitlines()[-8:])
    return None

