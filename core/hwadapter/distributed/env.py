"""The parallel environment: this process's rank, the world, its device, and how a failure here reaches the others."""
from __future__ import annotations

import atexit
import os
import sys
import traceback

import threadpoolctl

from ..api.errors import CollectiveError, InvalidArgumentError
from ..device import device_count, get_device, set_device
from ..runtime import mpi
from ..api.config import seconds

#: Seconds a collective may wait for the other ranks before it fails.
DEFAULT_TIMEOUT = 300.0


class World:
    """The processes of the job (MPI's COMM_WORLD): rank, size, local rank on this machine, the device, the groups."""

    def __init__(self, timeout: float | None, check: bool | None):
        MPI = mpi.module()
        self.MPI, self.comm = MPI, MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        local = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank, self.local_size = local.Get_rank(), local.Get_size()
        local.Free()
        self.timeout = timeout if timeout is not None else _timeout()
        self.check = check if check is not None else os.environ.get("HWADAPTER_COLLECTIVE_CHECK", "1") != "0"
        self.watch = mpi.Watch(self.comm.Dup())
        self.groups: list = []
        self.device = _assign(self.local_rank)
        _share_cores(self.local_size)


def _timeout() -> float:
    text = os.environ.get("HWADAPTER_COLLECTIVE_TIMEOUT")
    if text is None:
        return DEFAULT_TIMEOUT
    value = seconds(text)
    if value is None or value <= 0:
        raise InvalidArgumentError(f"HWADAPTER_COLLECTIVE_TIMEOUT={text!r} is not a positive number of seconds. Fix: "
                                   f"set it to e.g. 300")
    return value


def _assign(local_rank: int) -> str:
    """This rank's device: the type of HWADAPTER_DEVICE or of the current device, index local rank modulo the count
    (ranks share a device when there are more ranks on a machine than devices)."""
    wanted = os.environ.get("HWADAPTER_DEVICE") or get_device()
    kind = wanted.split(":")[0]
    count = device_count(kind)
    if count < 1:
        raise CollectiveError(f"init_parallel_env: no {kind!r} device in this process. Fix: install its plugin, or "
                              f"choose another type with hw.set_device(...) or HWADAPTER_DEVICE before "
                              f"init_parallel_env (`hwadapter devices` lists them)")
    name = f"{kind}:{local_rank % count}"
    set_device(name)
    return name


def _share_cores(local: int) -> None:
    """Ranks on one machine share its cores: each one's BLAS gets its part of them (else every rank's BLAS threads
    fill all cores and the ranks slow each other down many times over), and more ranks than cores yield early while
    they wait."""
    if local <= 1 or any(os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")):
        return  # one rank here, or the user chose the threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threadpoolctl.threadpool_limits(limits=max(1, cores // local), user_api="blas")
    if local > cores:
        mpi.SPIN = 16


_world: World | None = None


def world() -> World:
    """The world, or CollectiveError when init_parallel_env has not run."""
    if _world is None:
        raise CollectiveError("the parallel environment is not initialised. Fix: call "
                              "hwadapter.distributed.init_parallel_env() first (and start the script with mpiexec -n N "
                              "or python -m hwadapter.distributed.launch --nproc N)",
                              fix="call hwadapter.distributed.init_parallel_env() first")
    return _world


def initialised() -> World | None:
    return _world


def start(timeout: float | None, check: bool | None) -> World:
    """Set up the world once (later calls return it)."""
    global _world
    if _world is None:
        _world = World(timeout, check)
        _announce_failures(_world)
        atexit.register(_close, _world)  # runs before mpi4py's MPI_Finalize (registered earlier, at its import)
    return _world


def _close(w: World) -> None:
    """Release what MPI_Finalize must not find pending: the watch's receive, the groups' communicators."""
    if w.watch.broken is not None:
        return  # a failed job: requests may be pending forever; MPI_Finalize copes, freeing them could hang
    for g in w.groups:
        g.destroy()
        if g.comm is not None:
            g.comm.Free()
    w.watch.close()


def _announce_failures(w: World) -> None:
    """An uncaught exception here is announced to the other ranks (they fail at once naming it, not at the time
    limit) before Python prints it."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        if w.size > 1 and w.watch.broken is None:
            where = traceback.extract_tb(tb)[-1] if tb is not None else None
            at = f" at {os.path.basename(where.filename)}:{where.lineno}" if where else ""
            try:
                w.watch.announce(f"{kind.__name__}: {value}{at}")
            except Exception:  # noqa: BLE001 - telling the others is best effort; the error itself must print
                pass
        previous(kind, value, tb)

    sys.excepthook = hook
