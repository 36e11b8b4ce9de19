"""Test plugins that bring their own communicator (Plugin.collectives): the CPU plugin, whose Collectives makes
communicators of the whole world that call MPI (enough for the kit's one group). Not on sys.path unless a test puts
this directory there.

* collgood: right; carries no float16 (Collectives.dtypes), so the kit skips float16 saying why;
* collbad: all_reduce with op "max" computes the minimum;
* collhang: rank 1's all_gather returns at once without sending anything, so rank 0 waits for it until the time limit.
"""
from __future__ import annotations

import os

from hwadapter.api.collectives import DONE, Collectives, Communicator
from hwadapter.runtime import mpi

from hwadapter_cpu import CpuPlugin


class OwnCommunicator(Communicator):
    """A plugin's own class (not an MpiCommunicator: hwadapter treats its default one specially) that makes MPI's
    calls through one."""

    def __init__(self, device, comm):
        self.mpi = mpi.MpiCommunicator(device, comm, None, None)  # no time limit yet: hwadapter sets the job's
        self.rank, self.size = self.mpi.rank, self.mpi.size

    @property
    def timeout(self):
        return self.mpi.timeout

    @timeout.setter
    def timeout(self, seconds):
        self.mpi.timeout = seconds

    def all_reduce(self, send, recv, op="sum", stream=None):
        return self.mpi.all_reduce(send, recv, op, stream)

    def broadcast(self, buf, root, stream=None):
        return self.mpi.broadcast(buf, root, stream)

    def reduce(self, send, recv, op, root, stream=None):
        return self.mpi.reduce(send, recv, op, root, stream)

    def all_gather(self, send, recv, stream=None):
        return self.mpi.all_gather(send, recv, stream)

    def reduce_scatter(self, send, recv, op="sum", stream=None):
        return self.mpi.reduce_scatter(send, recv, op, stream)

    def all_to_all(self, send, recv, stream=None):
        return self.mpi.all_to_all(send, recv, stream)

    def send(self, buf, peer, stream=None):
        return self.mpi.send(buf, peer, stream)

    def recv(self, buf, peer, stream=None):
        return self.mpi.recv(buf, peer, stream)

    def barrier(self):
        self.mpi.barrier()


class WrongCommunicator(OwnCommunicator):
    def all_reduce(self, send, recv, op="sum", stream=None):
        return super().all_reduce(send, recv, "min" if op == "max" else op, stream)


class StuckCommunicator(OwnCommunicator):
    def all_gather(self, send, recv, stream=None):
        if self.rank == 1:
            return DONE
        return super().all_gather(send, recv, stream)


class OwnCollectives(Collectives):
    def __init__(self, device, kind):
        self.device, self.kind = device, kind

    def unique_id(self) -> bytes:
        return os.urandom(8)

    def communicator(self, unique_id: bytes, rank: int, size: int):
        return self.kind(self.device, mpi.module().COMM_WORLD.Dup())

    def dtypes(self):
        return frozenset({"float32", "float64", "int32", "int64", "bool"})


class OwnPlugin(CpuPlugin):
    communicator = OwnCommunicator

    def collectives(self, device):
        return OwnCollectives(device, self.communicator)

    def native_library(self):
        return None


class WrongPlugin(OwnPlugin):
    communicator = WrongCommunicator


class StuckPlugin(OwnPlugin):
    communicator = StuckCommunicator
