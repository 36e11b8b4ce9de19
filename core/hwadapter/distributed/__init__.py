"""hwadapter.distributed: many processes, devices and machines (Paddle's paddle.distributed names), on MPI.

Start one process per device with `mpiexec -n N python train.py` (or `python -m hwadapter.distributed.launch`), call
`init_parallel_env()`, wrap the model in `DataParallel`. Collectives run on each device's communicator: the plugin's
own (hwadapter.plugin.Collectives) or the default one on MPI.
"""
from __future__ import annotations

from ..api.errors import CollectiveError
from . import env, group as _group
from .collective import (ReduceOp, Task, all_gather, all_reduce, alltoall, barrier, broadcast, irecv, isend, recv,
                         reduce, reduce_scatter, send)
from .group import Group
from .parallel import DataParallel
from ..runtime.device import devices

__all__ = ["init_parallel_env", "is_initialized", "get_rank", "get_world_size", "new_group", "get_group",
           "destroy_process_group", "barrier", "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
           "alltoall", "send", "recv", "isend", "irecv", "ReduceOp", "Task", "Group", "DataParallel", "ParallelEnv",
           "CollectiveError", "communicator"]


def init_parallel_env(timeout: float | None = None, check: bool | None = None) -> Group:
    """Join the job: rank and world size from MPI, this rank's device (the current device's type, index by local
    rank), the world group. `timeout`: seconds a collective waits for the others (HWADAPTER_COLLECTIVE_TIMEOUT);
    `check`: compare every call's shapes and dtypes across ranks first (HWADAPTER_COLLECTIVE_CHECK=0 turns it off)."""
    w = env.start(timeout, check)
    if not w.groups:
        _group.make(w, range(w.size))
    return w.groups[0]


def is_initialized() -> bool:
    return env.initialised() is not None


def get_rank(group: Group | None = None) -> int:
    """This process's rank in the group (the world by default); 0 before init_parallel_env."""
    w = env.initialised()
    if w is None:
        return 0
    return w.rank if group is None else group.rank


def get_world_size(group: Group | None = None) -> int:
    """The number of ranks in the group (the world by default); 1 before init_parallel_env."""
    w = env.initialised()
    if w is None:
        return 1
    return w.size if group is None else group.nranks


def new_group(ranks=None, backend=None, timeout=None) -> Group:
    """A group of global `ranks` (all when None); every rank of the job must call it, in the same order."""
    w = env.world()
    return _group.make(w, range(w.size) if ranks is None else ranks)


def get_group(gid: int = 0) -> Group:
    """The group with id `gid` (0: the world)."""
    return env.world().groups[gid]


def destroy_process_group(group: Group | None = None) -> None:
    """Release the group's communicators (all groups when None)."""
    w = env.world()
    for g in (w.groups if group is None else [group]):
        g.destroy()


def communicator(device=None, group: Group | None = None):
    """The group's (the world's by default) Communicator on `device` (this rank's by default), made on first use:
    the plugin's own or the default one on MPI, without hwadapter's cross-rank check (for tools that test a
    plugin's communicator, such as the conformance kit)."""
    w = env.world()
    g = w.groups[0] if group is None else group
    comm = g.communicator(devices.get(w.device if device is None else device))
    return getattr(comm, "inner", comm)


class ParallelEnv:
    """Paddle's ParallelEnv: rank, world size and device of this process."""

    @property
    def rank(self) -> int:
        return get_rank()

    local_rank = property(lambda self: env.world().local_rank if is_initialized() else 0)
    world_size = property(lambda self: get_world_size())
    nranks = world_size
    device_id = property(lambda self: int(env.world().device.split(":")[1]) if is_initialized() else 0)
    device = property(lambda self: env.world().device)  # this rank's device, "type:index"
    timeout = property(lambda self: env.world().timeout)  # seconds a collective waits for the other ranks
