"""The communication level of the plugin API: a communicator per device per group of ranks, in the manner of NCCL
and Paddle's `xccl_*` functions. A plugin that provides none gets the default one on MPI (hwadapter.runtime.mpi).

Buffers are the device's arrays (numpy arrays on a host-memory device, else `DeviceArray`s), C-contiguous, all of
one dtype. Every call is issued on the device's `stream` (None: the default stream) after the work queued there
before it, and returns a `Work` to wait on; the result is in place once `wait()` returns. Every rank of the group
must issue the same calls in the same order with matching shapes and dtypes.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any, Callable

from .errors import CollectiveError

#: The reductions every communicator offers ("avg" divides the sum by the group's size).
REDUCE_OPS = ("sum", "avg", "max", "min", "prod")
#: The collectives that are ops (dispatched, traced into graphs, run by the device's communicator): attributes
#: {"group": the group's id, "op": a REDUCE_OPS name} and {"group", "root": the source's rank in the group}.
COLLECTIVE_OPS = ("all_reduce", "broadcast")
#: The calls of a Communicator, in the order the conformance kit checks them.
CALLS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv",
         "barrier")


def poll(done: Callable[[], bool], what: str, timeout: float, check: Callable[[], None] | None = None,
         spin: int = 1000) -> None:
    """Wait until done() is true, at most `timeout` seconds: CollectiveError past it. `check()`, called now and
    then, may raise to stop sooner (a peer that announced its failure, an asynchronous error); past `spin` polls the
    wait yields its core, since a process on it may be the one waited for."""
    if done():
        return
    deadline, polls = time.monotonic() + timeout, 0
    while not done():
        polls += 1
        if polls > spin:
            time.sleep(0 if polls < 4 * spin else 0.0002)
        if polls % 256 == 0:
            if check is not None:
                check()
            if time.monotonic() > deadline:
                raise CollectiveError(
                    f"{what} did not complete within {timeout:g} s: a rank died, hangs, or did not make the same call "
                    f"(every rank must issue the same collectives in the same order)",
                    fix="find the rank that stopped (its output says why); raise the limit with "
                        "HWADAPTER_COLLECTIVE_TIMEOUT=<seconds> if the work is just slow")


class Work(ABC):
    """A collective in flight."""

    @abstractmethod
    def wait(self) -> None:
        """Block until the call is done and its results are in place; raise the error it failed with."""

    @abstractmethod
    def is_completed(self) -> bool:
        """True once `wait` would return at once."""


class Done(Work):
    """A call that completed before it returned."""

    def wait(self) -> None:
        pass

    def is_completed(self) -> bool:
        return True


DONE = Done()


class Communicator(ABC):
    """One device's member of a group of `size` ranks; this one is `rank` (0 .. size-1) in the group."""

    rank: int
    size: int

    @abstractmethod
    def all_reduce(self, send, recv, op: str = "sum", stream: Any = None) -> Work:
        """recv = op over every rank's send (recv may be send itself: in place)."""

    @abstractmethod
    def broadcast(self, buf, root: int, stream: Any = None) -> Work:
        """Every rank's buf = rank `root`'s buf."""

    @abstractmethod
    def reduce(self, send, recv, op: str, root: int, stream: Any = None) -> Work:
        """Rank `root`'s recv = op over every rank's send; other ranks' recv is left as it was."""

    @abstractmethod
    def all_gather(self, send, recv, stream: Any = None) -> Work:
        """recv (size times send's elements) = every rank's send, in rank order."""

    @abstractmethod
    def reduce_scatter(self, send, recv, op: str = "sum", stream: Any = None) -> Work:
        """recv = the rank-th of `size` equal parts of op over every rank's send (size times recv's elements)."""

    @abstractmethod
    def all_to_all(self, send, recv, stream: Any = None) -> Work:
        """recv's part j = rank j's send's part `rank` (send and recv in `size` equal parts)."""

    @abstractmethod
    def send(self, buf, peer: int, stream: Any = None) -> Work:
        """buf to rank `peer`, which posts the matching recv."""

    @abstractmethod
    def recv(self, buf, peer: int, stream: Any = None) -> Work:
        """buf = what rank `peer` sends."""

    @abstractmethod
    def barrier(self) -> None:
        """Return once every rank of the group has called it."""

    def destroy(self) -> None:
        """Release the communicator (its ranks stop using it together)."""


class Collectives(ABC):
    """A plugin's communication level for one device: communicators initialised from a unique id, as NCCL's
    ncclGetUniqueId / ncclCommInitRank and Paddle's xccl_get_unique_id / xccl_comm_init_rank are. hwadapter makes the
    id on the group's rank 0, hands its bytes to every other rank (over MPI), and each rank calls `communicator`."""

    @abstractmethod
    def unique_id(self) -> bytes:
        """A new id for a group: whatever the ranks need to find each other (opaque to hwadapter)."""

    @abstractmethod
    def communicator(self, unique_id: bytes, rank: int, size: int) -> Communicator:
        """This device's member of the group `unique_id` names, as `rank` of `size` (every rank calls it)."""

    def dtypes(self) -> frozenset | None:
        """The numpy dtype names its communicators carry, or None for every dtype the device has."""
        return None
