"""Groups of ranks, and each group's communicator on a device: the plugin's own (from a unique id handed over MPI)
or the default one on MPI, checked so that ranks that disagree on a call are told which rank passed what."""
from __future__ import annotations

import zlib

import numpy as np

from ..api.collectives import DONE, Communicator
from ..api.errors import CollectiveError, InvalidArgumentError
from ..runtime import mpi
from ..runtime.device import devices
from .env import World


class Group:
    """Ranks (global, in group order) that run collectives together; `rank` is this process's place in it (-1: not
    a member)."""

    def __init__(self, world: World, gid: int, ranks: list[int], comm):
        self.world, self.id, self.ranks, self.comm = world, gid, ranks, comm
        self.rank = ranks.index(world.rank) if world.rank in ranks else -1
        self.nranks = len(ranks)

    @property
    def world_size(self) -> int:
        return self.nranks

    def is_member(self) -> bool:
        return self.rank >= 0

    def get_group_rank(self, rank: int) -> int:
        """The place of global `rank` in this group (-1 when it is not a member)."""
        return self.ranks.index(rank) if rank in self.ranks else -1

    def __repr__(self):
        return f"Group(id={self.id}, ranks={self.ranks}, rank={self.rank})"

    def communicator(self, device) -> Communicator:
        """This group's communicator on `device`, made on first use (every member makes it at the same call)."""
        comm = device.comms.get(self.id)
        if comm is None:
            if not self.is_member():
                raise CollectiveError(f"rank {self.world.rank} is not in group {self.id} (ranks {self.ranks}). Fix: "
                                      f"call collectives of a group only on its members")
            comm = Checked(self._make(device), self) if self.world.check else self._make(device)
            device.comms[self.id] = comm
        return comm

    def _make(self, device) -> Communicator:
        own = device.collectives
        if own is None:
            return mpi.MpiCommunicator(device, self.comm, self.world.watch, self.world.timeout)
        uid = own.unique_id() if self.rank == 0 else b""
        size = np.array([len(uid)], np.int64)
        w, what = self.world, f"making group {self.id}'s communicator on {device}"
        mpi.wait(w.MPI, [self.comm.Ibcast(size, root=0)], what, w.watch, w.timeout)
        data = np.frombuffer(uid, np.uint8).copy() if self.rank == 0 else np.empty(int(size[0]), np.uint8)
        mpi.wait(w.MPI, [self.comm.Ibcast(data, root=0)], what, w.watch, w.timeout)
        comm = own.communicator(data.tobytes(), self.rank, self.nranks)
        if getattr(comm, "timeout", False) is None:  # a communicator that bounds its waits takes the job's limit
            comm.timeout = self.world.timeout
        return comm

    def destroy(self) -> None:
        for dev in devices.all():
            comm = dev.comms.pop(self.id, None)
            if comm is not None:
                comm.destroy()


def describe(call: str, buf, **attrs) -> str:
    """What one rank passes to a call, as the others' error names it."""
    extra = "".join(f", {k}={v}" for k, v in attrs.items() if v is not None)
    return f"{call}({np.dtype(buf.dtype).name}{list(buf.shape)}{extra})"


#: Bytes of a call's description in the check's block, and of data a small all-reduce carries in it.
HEADER, SMALL = 256, 4096


class Checked(Communicator):
    """A communicator whose every call first exchanges, in one all-gather of a fixed-size block, each rank's
    description of the call (name, shapes, dtype, op): when they differ every rank raises naming what each passed
    (never a hang, never a wrong result). A small all-reduce of host memory carries its data in the same block and is
    reduced locally, so the check costs it no second round trip."""

    def __init__(self, inner: Communicator, group: Group):
        self.inner, self.group = inner, group
        self.rank, self.size = inner.rank, inner.size
        self._MPI = mpi.module()
        self._block = np.zeros(HEADER + SMALL, np.uint8)
        self._gathered = np.empty((self.size, HEADER + SMALL), np.uint8)
        self._hashes = self._gathered.view(np.uint32)[:, 0]  # each rank's hash of its description
        self._known: dict = {}
        self._small: dict = {}
        self._last = None  # the header now in the block
        #: The inner communicator reduces host memory with MPI's own arithmetic: small all-reduces can go in the block.
        self._carry = type(inner) is mpi.MpiCommunicator and inner.host  # not a plugin's subclass: its own runs

    def __repr__(self):
        return f"Checked({self.inner!r})"

    def _agree(self, call: str, buf=None, op=None, root=None) -> np.ndarray:
        """Exchange this call's description (and whatever the caller put in the block's data part) with every rank;
        the gathered blocks, once all agree."""
        key = (call, None, op, root) if buf is None else (call, buf.shape, buf.dtype.char, op, root)
        known = self._known.get(key)
        if known is None:  # a call's description and its header, made once per kind of call
            what = f"{call}()" if buf is None else describe(call, buf, op=op, root=root)
            text = what.encode()[:HEADER - 4]
            header = np.zeros(HEADER, np.uint8)
            header[:4] = np.frombuffer(np.uint32(zlib.crc32(what.encode())).tobytes(), np.uint8)
            header[4:4 + len(text)] = np.frombuffer(text, np.uint8)
            known = self._known[key] = (what, header, [int(header[:4].view(np.uint32)[0])] * self.size)
        what, header, agreed = known
        block, gathered = self._block, self._gathered
        if self._last is not header:
            block[:HEADER] = header
            self._last = header
        w = self.group.world
        mpi.wait(self._MPI, [self.group.comm.Iallgather(block, gathered)], what, w.watch, w.timeout)
        if self._hashes.tolist() == agreed:
            return gathered
        texts = [bytes(row[4:HEADER]).rstrip(b"\0").decode("utf-8", "replace") for row in gathered]
        said = "; ".join(f"rank {self.group.ranks[r]}: {text}" for r, text in enumerate(texts))
        raise CollectiveError(f"the ranks of group {self.group.id} disagree on a collective ({said}). Fix: every rank "
                              f"must make the same collective calls, in the same order, with tensors of the same "
                              f"shape and dtype")

    def all_reduce(self, send, recv, op="sum", stream=None):
        if not (self._carry and send.nbytes <= SMALL and type(send) is np.ndarray):
            self._agree("all_reduce", send, op)
            return self.inner.all_reduce(send, recv, op, stream)
        key = (send.shape, send.dtype.char, op)
        small = self._small.get(key)
        if small is None:  # per kind of call: the reduction (op and dtype validated) and typed views of the blocks
            n = send.nbytes
            small = self._small[key] = (self.inner.ufunc(op, send.dtype, "all_reduce"),
                                        self._block[HEADER:HEADER + n].view(send.dtype).reshape(send.shape),
                                        self._gathered[:, HEADER:HEADER + n].view(send.dtype))
        ufunc, slot, parts = small
        np.copyto(slot, send)
        self._agree("all_reduce", send, op)
        self.inner.reduce_parts(parts, ufunc, op, recv)
        return DONE

    def broadcast(self, buf, root, stream=None):
        self._agree("broadcast", buf, root=root)
        return self.inner.broadcast(buf, root, stream)

    def reduce(self, send, recv, op, root, stream=None):
        self._agree("reduce", send, op, root)
        return self.inner.reduce(send, recv, op, root, stream)

    def all_gather(self, send, recv, stream=None):
        self._agree("all_gather", send)
        return self.inner.all_gather(send, recv, stream)

    def reduce_scatter(self, send, recv, op="sum", stream=None):
        self._agree("reduce_scatter", send, op)
        return self.inner.reduce_scatter(send, recv, op, stream)

    def all_to_all(self, send, recv, stream=None):
        self._agree("all_to_all", send)
        return self.inner.all_to_all(send, recv, stream)

    def send(self, buf, peer, stream=None):  # point to point: the two ranks' calls differ by nature
        return self.inner.send(buf, peer, stream)

    def recv(self, buf, peer, stream=None):
        return self.inner.recv(buf, peer, stream)

    def barrier(self) -> None:
        self._agree("barrier")  # every rank has called it once the all-gather is done
        if not self._carry:  # a plugin's barrier also orders the device's streams
            self.inner.barrier()

    def destroy(self) -> None:
        self.inner.destroy()


def make(world: World, ranks) -> Group:
    """A new group of `ranks` (every rank of the world calls this, in the same order)."""
    ranks = [int(r) for r in ranks]
    if not ranks or len(set(ranks)) != len(ranks) or any(r < 0 or r >= world.size for r in ranks):
        raise InvalidArgumentError(f"new_group({ranks}): ranks must be distinct, in 0..{world.size - 1}. Fix: pass "
                                   f"ranks of this job (its world size is {world.size})")
    gid = len(world.groups)
    if ranks == list(range(world.size)) and gid == 0:
        comm = world.comm.Dup()
    elif world.rank in ranks:
        comm = world.comm.Create_group(world.comm.Get_group().Incl(ranks), tag=gid)
    else:
        comm = None
    group = Group(world, gid, ranks, comm)
    world.groups.append(group)
    return group
