"""The default communicator: MPI through mpi4py, for a device whose plugin brings none.

Host memory (numpy arrays) goes to MPI as it is, zero-copy. Other device memory is staged through one host buffer of
`CHUNK` bytes, a chunk at a time, so a large tensor never needs a host copy of its whole size. Reductions MPI has no
type for (float16) are done in float32 on the host; bool reduces with logical or/and. Every wait is bounded
(`timeout`) and watches for a rank that announced its failure (`Watch`): a collective never hangs forever.
"""
from __future__ import annotations

import importlib
import time

import numpy as np

from ..api.collectives import DONE, Communicator, Work, poll
from ..api.errors import CollectiveError, InvalidArgumentError, UnsupportedDTypeError
from .memory import DeviceArray

#: Bytes of device memory staged through the host per step (per rank's part for gathers and scatters).
CHUNK = 4 << 20
#: Polls of a request before a wait starts yielding its core (hwadapter.distributed lowers it when there are more
#: ranks on a machine than cores: a spinning rank would keep the one it waits for off the core).
SPIN = 4096
#: MPI tags of hwadapter's own messages on its private communicators.
FAILURE_TAG, P2P_TAG = 7301, 7302
_MISSING = ("MPI is not installed: hwadapter's default communicator runs on mpi4py. Fix: pip install "
            "'hwadapter[mpi]' (mpi4py and MPICH from PyPI; no system MPI needed)")


def module():
    """mpi4py.MPI (importing it initialises MPI), or CollectiveError saying how to install it."""
    try:
        return importlib.import_module("mpi4py.MPI")  # initialises MPI: only once collectives are asked for
    except ImportError as err:
        raise CollectiveError(f"{_MISSING} ({err})", fix="pip install 'hwadapter[mpi]'") from None


class Watch:
    """Failures announced by other ranks: one receive stays posted on a private communicator; `announce` tells every
    other rank why this one is failing, so they stop waiting at once with that reason instead of at the time limit."""

    SIZE = 4096

    def __init__(self, comm):
        self.MPI, self.comm = module(), comm
        self._buf = bytearray(self.SIZE)
        self._status = self.MPI.Status()
        self._req = comm.Irecv([self._buf, self.MPI.BYTE], source=self.MPI.ANY_SOURCE, tag=FAILURE_TAG)
        #: Why this process's collectives cannot go on (a peer failed, or a wait ran out of time), or None.
        self.broken: str | None = None

    def check(self, what: str) -> None:
        """Raise CollectiveError for `what` when a rank announced a failure (or one was seen before)."""
        if self.broken is None and self._req is not None and self._req.Test(self._status):
            text = bytes(self._buf[:self._status.Get_count(self.MPI.BYTE)]).decode("utf-8", "replace")
            self.broken = f"rank {self._status.Get_source()} failed: {text}"
        if self.broken is not None:
            raise CollectiveError(f"{what}: {self.broken}. Every rank stops: the collectives of a failed job cannot "
                                  f"complete", fix="fix the failing rank's error (its traceback is in its output)")

    def close(self) -> None:
        """Withdraw the posted receive and free the communicator (before MPI_Finalize, which would otherwise find
        them pending)."""
        if self._req is not None:
            if not self._req.Test():  # a message to itself completes it (cancelling a receive is not portable)
                self.comm.Send([b"", self.MPI.BYTE], dest=self.comm.Get_rank(), tag=FAILURE_TAG)
                self._req.Wait()
            self._req = None
            self.comm.Free()

    def announce(self, text: str, wait: float = 2.0) -> None:
        """Tell every other rank that this one fails with `text` (waiting at most `wait` seconds for them)."""
        data = text.encode("utf-8", "replace")[:self.SIZE]
        reqs = [self.comm.Isend([data, self.MPI.BYTE], dest=r, tag=FAILURE_TAG)
                for r in range(self.comm.Get_size()) if r != self.comm.Get_rank()]
        deadline = time.monotonic() + wait
        while reqs and not self.MPI.Request.Testall(reqs) and time.monotonic() < deadline:
            time.sleep(0.001)
        self.broken = self.broken or f"this rank failed: {text}"


def wait(MPI, requests: list, what: str, watch: Watch | None, timeout: float, comm=None) -> None:
    """Wait for MPI `requests` at most `timeout` seconds, stopping early when a rank announced a failure; `what` names
    the call in errors (with `comm`: the call's name, which the communicator words)."""
    done = requests[0].Test if len(requests) == 1 else (lambda: MPI.Request.Testall(requests))
    if done():
        return
    if comm is not None:
        what = comm._what(what)
    try:
        poll(done, what, timeout, None if watch is None else (lambda: watch.check(what)), SPIN)
    except CollectiveError as err:
        if watch is not None:  # a wait that ran out of time leaves this process's collectives unusable
            watch.broken = watch.broken or str(err)
        raise


class MpiWork(Work):
    """MPI requests in flight, and what to do once they complete (copy back, divide an average)."""

    def __init__(self, comm: "MpiCommunicator", requests: list, call: str, then=None):
        self.comm, self.requests, self.call, self.then = comm, requests, call, then
        self._done = False

    def wait(self) -> None:
        if not self._done:
            wait(self.comm.MPI, self.requests, self.call, self.comm.watch, self.comm.timeout, self.comm)
            self._done = True
            if self.then is not None:
                self.then()

    def is_completed(self) -> bool:
        return self._done or self.comm.MPI.Request.Testall(self.requests)


_UFUNCS = {"sum": np.add, "avg": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def _ops(MPI) -> dict:
    return {"sum": MPI.SUM, "avg": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}


class MpiCommunicator(Communicator):
    """A device's member of an MPI communicator (an mpi4py Intracomm of the group's processes)."""

    def __init__(self, device, comm, watch: Watch | None = None, timeout: float = 300.0):
        self.MPI, self.device, self.comm, self.watch, self.timeout = module(), device, comm, watch, timeout
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.host = device.host_memory
        self._ops = _ops(self.MPI)
        #: (dtype, op) -> the MPI op, for what needs no conversion and no division after
        self._plain = {(np.dtype(d).char, op): mop for d in ("float32", "float64", "int8", "int16", "int32", "int64",
                                                         "uint8") for op, mop in self._ops.items() if op != "avg"}
        self._stage: np.ndarray | None = None

    def __repr__(self):
        return f"MpiCommunicator({self.device}, rank {self.rank} of {self.size})"

    # --- helpers ---------------------------------------------------------------------------------------------
    def _what(self, call: str) -> str:
        return f"{call} on {self.device} (rank {self.rank} of {self.size})"

    def _op(self, op: str, dtype: np.dtype, call: str):
        if op not in self._ops:
            raise InvalidArgumentError(f"{self._what(call)}: unknown reduce op {op!r}. Fix: use one of sum, avg, max, "
                                       f"min, prod")
        if dtype == np.bool_:
            if op == "avg":
                raise UnsupportedDTypeError(f"{self._what(call)}: avg of bool tensors is not defined. Fix: cast to "
                                            f"a number first")
            return self.MPI.LOR if op in ("sum", "max") else self.MPI.LAND
        return self._ops[op]

    def ufunc(self, op: str, dtype: np.dtype, call: str):
        """The numpy ufunc that reduces like MPI's op for `dtype` (validating both as `_op` does)."""
        self._op(op, dtype, call)
        if dtype == np.bool_:
            return np.logical_or if op in ("sum", "max") else np.logical_and
        return _UFUNCS[op]

    def reduce_parts(self, parts: np.ndarray, ufunc, op: str, recv: np.ndarray) -> None:
        """recv = every rank's part (rows of `parts`, in rank order) reduced as this communicator's MPI reduction
        would be: rank order, float16 in float32, avg as the sum divided (floored for integers)."""
        out = recv.reshape(-1)
        if parts.dtype == np.float16:
            self._settle(ufunc.reduce(parts.astype(np.float32), axis=0), out, op)
            return
        if len(parts) == 1:
            np.copyto(out, parts[0])
        else:  # a left fold in rank order, as ufunc.reduce over axis 0 is, without its set-up cost
            ufunc(parts[0], parts[1], out=out)
            for r in range(2, len(parts)):
                ufunc(out, parts[r], out=out)
        self._settle(out, out, op)

    def _settle(self, r: np.ndarray, recv: np.ndarray, op: str) -> None:
        """After MPI reduced into r: an average divided (floored for integers, as MPI and NCCL give it), then r into
        recv when it is not recv itself (float16's float32 sum)."""
        if op == "avg":
            (np.divide if r.dtype.kind == "f" else np.floor_divide)(r, self.size, out=r)
        if r is not recv:
            np.copyto(recv, r, casting="unsafe")

    def _wait(self, requests: list, call: str) -> None:
        wait(self.MPI, requests, self._what(call), self.watch, self.timeout)

    def _host_buffer(self, nbytes: int) -> np.ndarray:
        """The staging buffer, at least `nbytes` (grown once, then reused)."""
        if self._stage is None or self._stage.nbytes < nbytes:
            self._stage = np.empty(max(nbytes, 1), np.uint8)
        return self._stage[:nbytes]

    def _down(self, a: DeviceArray, start: int, n: int, dst: np.ndarray, stream) -> None:
        """Bytes [start, start+n) of device array a into host array dst."""
        if n:
            self.device.runtime.copy_d2h(dst[:n], a.handle, start, stream)
            if stream is not None:
                stream.synchronize()

    def _up(self, src: np.ndarray, a: DeviceArray, start: int, n: int, stream) -> None:
        if n:
            self.device.runtime.copy_h2d(a.handle, start, src[:n], stream)

    @staticmethod
    def _bytes(a: np.ndarray) -> np.ndarray:
        return a.reshape(-1).view(np.uint8)

    # --- reductions ------------------------------------------------------------------------------------------
    def _reduce_host(self, send: np.ndarray, recv: np.ndarray, op: str, call: str, root: int | None):
        """Start a reduction of host arrays; returns the requests and what to do after."""
        mop = self._op(op, send.dtype, call)
        upcast = send.dtype == np.float16
        s = send.astype(np.float32) if upcast else send
        r = np.empty(send.shape, np.float32) if upcast else recv
        inplace = s is r  # in place means the same array: hwadapter's callers never pass overlapping ones
        src = self.MPI.IN_PLACE if inplace and (root is None or self.rank == root) else s
        if inplace and root is not None and self.rank != root:
            r = np.empty_like(s)  # MPI_Reduce with IN_PLACE only on the root
        if root is None:
            req = self.comm.Iallreduce(src, r, mop)
        else:
            req = self.comm.Ireduce(src, r, mop, root=root)
        mine = root is None or self.rank == root

        def then():
            if mine:
                self._settle(r, recv, op)
        return [req], then

    def _reduce(self, send, recv, op: str, call: str, root: int | None, stream) -> Work:
        if send.size == 0:
            return DONE
        if self.host:
            reqs, then = self._reduce_host(send, recv, op, call, root)
            return MpiWork(self, reqs, call, then)
        item = send.dtype.itemsize
        step = max(item, CHUNK // item * item)
        host = self._host_buffer(min(send.nbytes, step))
        for start in range(0, send.nbytes, step):
            n = min(step, send.nbytes - start)
            self._down(send, start, n, host, stream)
            chunk = host[:n].view(send.dtype)
            reqs, then = self._reduce_host(chunk, chunk, op, call, root)
            self._wait(reqs, call)
            then()
            if root is None or self.rank == root:
                self._up(host, recv, start, n, stream)
        return DONE

    def all_reduce(self, send, recv, op="sum", stream=None) -> Work:
        mop = self._plain.get((send.dtype.char, op)) if self.host else None
        if mop is not None and send.size:  # host memory of a type MPI reduces itself: straight to MPI
            return MpiWork(self, [self.comm.Iallreduce(self.MPI.IN_PLACE if send is recv else send, recv, mop)],
                           "all_reduce")
        return self._reduce(send, recv, op, "all_reduce", None, stream)

    def reduce(self, send, recv, op, root, stream=None) -> Work:
        return self._reduce(send, recv, op, "reduce", root, stream)

    def reduce_scatter(self, send, recv, op="sum", stream=None) -> Work:
        n = recv.size
        if send.size != n * self.size:
            raise InvalidArgumentError(f"{self._what('reduce_scatter')}: the input has {send.size} elements, which "
                                       f"is not {self.size} ranks x the output's {n}. Fix: pass an input of "
                                       f"{n * self.size} elements")
        if n == 0:
            return DONE
        if self.host:
            mop = self._op(op, send.dtype, "reduce_scatter")
            upcast = send.dtype == np.float16
            s = send.astype(np.float32) if upcast else send
            r = np.empty(recv.shape, np.float32) if upcast else recv
            req = self.comm.Ireduce_scatter_block(s, r, mop)
            return MpiWork(self, [req], "reduce_scatter", lambda: self._settle(r, recv, op))
        # staged: the all-reduce of each rank's part, kept by its owner (chunked like all_reduce)
        part = n * send.dtype.itemsize
        for j in range(self.size):
            host = self._host_buffer(min(part, CHUNK))
            for start in range(0, part, len(host)):
                k = min(len(host), part - start)
                self._down(send, j * part + start, k, host, stream)
                chunk = host[:k].view(send.dtype)
                reqs, then = self._reduce_host(chunk, chunk, op, "reduce_scatter", j)
                self._wait(reqs, "reduce_scatter")
                then()
                if j == self.rank:
                    self._up(host, recv, start, k, stream)
        return DONE

    # --- data movement (bytes: every dtype) ------------------------------------------------------------------
    def broadcast(self, buf, root, stream=None) -> Work:
        if buf.size == 0:
            return DONE
        if self.host:
            return MpiWork(self, [self.comm.Ibcast(self._bytes(buf), root=root)], "broadcast")
        host = self._host_buffer(min(buf.nbytes, CHUNK))
        for start in range(0, buf.nbytes, len(host)):
            n = min(len(host), buf.nbytes - start)
            if self.rank == root:
                self._down(buf, start, n, host, stream)
            self._wait([self.comm.Ibcast(host[:n], root=root)], "broadcast")
            if self.rank != root:
                self._up(host, buf, start, n, stream)
        return DONE

    def _check_parts(self, call: str, small, large) -> None:
        if large.size != small.size * self.size:
            raise InvalidArgumentError(f"{self._what(call)}: {large.size} elements is not {self.size} ranks x "
                                       f"{small.size}. Fix: size the gathered side {self.size} times the other")

    def all_gather(self, send, recv, stream=None) -> Work:
        self._check_parts("all_gather", send, recv)
        if send.size == 0:
            return DONE
        if self.host:
            return MpiWork(self, [self.comm.Iallgather(self._bytes(send), self._bytes(recv))], "all_gather")
        part = send.nbytes
        step = min(part, max(1, CHUNK // self.size))
        mine = np.empty(step, np.uint8)
        for start in range(0, part, step):
            n = min(step, part - start)
            self._down(send, start, n, mine, stream)
            out = np.empty((self.size, n), np.uint8)
            self._wait([self.comm.Iallgather(mine[:n], out)], "all_gather")
            for j in range(self.size):
                self._up(out[j], recv, j * part + start, n, stream)
        return DONE

    def all_to_all(self, send, recv, stream=None) -> Work:
        if send.size != recv.size or send.size % self.size:
            raise InvalidArgumentError(f"{self._what('all_to_all')}: input and output must have the same number of "
                                       f"elements, divisible by {self.size} ranks (got {send.size} and {recv.size})")
        if send.size == 0:
            return DONE
        if self.host:
            return MpiWork(self, [self.comm.Ialltoall(self._bytes(send), self._bytes(recv))], "all_to_all")
        s, r = send.numpy(stream), np.empty(recv.shape, recv.dtype)  # one part per rank: no smaller unit to stage
        self._wait([self.comm.Ialltoall(self._bytes(s), self._bytes(r))], "all_to_all")
        self._up(self._bytes(r), recv, 0, r.nbytes, stream)
        return DONE

    def send(self, buf, peer, stream=None) -> Work:
        if buf.size == 0:
            return DONE
        data = self._bytes(buf) if self.host else self._bytes(buf.numpy(stream))
        return MpiWork(self, [self.comm.Isend(data, dest=peer, tag=P2P_TAG)], "send")

    def recv(self, buf, peer, stream=None) -> Work:
        if buf.size == 0:
            return DONE
        if self.host:
            return MpiWork(self, [self.comm.Irecv(self._bytes(buf), source=peer, tag=P2P_TAG)], "recv")
        host = np.empty(buf.nbytes, np.uint8)
        self._wait([self.comm.Irecv(host, source=peer, tag=P2P_TAG)], "recv")
        self._up(host, buf, 0, buf.nbytes, stream)
        return DONE

    def barrier(self) -> None:
        self._wait([self.comm.Ibarrier()], "barrier")

    def destroy(self) -> None:
        self._stage = None  # the MPI communicator is the group's: it frees it
