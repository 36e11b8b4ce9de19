"""A C device library's own communicators (device_api.h 1.2) as the plugin API's Collectives and Communicator.

Buffers go to the library as device addresses (a DeviceArray's handle; a host-memory device's numpy data pointer),
counts in elements, dtypes and reduce ops as device_api.h's codes. A call is queued on the stream given (or the
default one) and completes when the library's stream is synchronised, which is what its Work waits for (at most
the communicator's `timeout` seconds, when set); a library without streams completes each call before it returns.
"""
from __future__ import annotations

import importlib

import numpy as np

from ..api.collectives import DONE, REDUCE_OPS, Collectives, Communicator, Work, poll
from ..api.errors import CollectiveError, HwAdapterError, InvalidArgumentError, UnsupportedDTypeError
from .memory import DeviceArray


def _fix(err: HwAdapterError, call: str) -> str:
    if "in its communication functions" in str(err):
        return (f"implement {call} in the device library, or leave out all its communication functions so that "
                f"hwadapter uses its default MPI communicator")
    return ("read the library's message above; every rank of the group must make the same calls in the same order, "
            "with the same counts, dtypes and ops")


class NativeWork(Work):
    """A call queued on a library stream: done once that stream is; holds its buffers until then."""

    def __init__(self, comm: "NativeCommunicator", call: str, stream, buffers: tuple):
        self.comm, self.call, self.stream, self.buffers = comm, call, stream, buffers

    def wait(self) -> None:
        if self.buffers is None:
            return
        limit = self.comm.timeout
        if limit is not None:
            comm = self.comm
            poll(self.is_completed, f"{self.call} on {comm.device} (rank {comm.rank} of {comm.size})", limit)
        with self.comm.context(self.call):
            self.stream.synchronize()
        self.buffers = None

    def is_completed(self) -> bool:
        if self.buffers is not None:
            with self.comm.context(self.call):
                if self.stream.query():
                    self.buffers = None
        return self.buffers is None


class _Context:
    """Re-raises a library failure with the call, device and rank it came from, and a fix."""

    def __init__(self, where: str, call: str):
        self.where, self.call = where, call

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if err is None or not isinstance(err, HwAdapterError):
            return False
        cls = type(err) if isinstance(err, (CollectiveError, InvalidArgumentError)) else CollectiveError
        fix = _fix(err, self.call)
        raise cls(f"{self.call} on {self.where}: {err}. Fix: {fix}", fix=fix) from err


class NativeCommunicator(Communicator):
    """One device's member of a group, on the library's HwaComm `handle`. `timeout`: seconds a Work waits for its
    stream before a CollectiveError (None: as long as the library takes)."""

    def __init__(self, lib, device, handle: int, rank: int, size: int, timeout: float | None = None):
        self.lib, self.device, self.handle, self.rank, self.size = lib, device, handle, rank, size
        self.timeout = timeout
        native = importlib.import_module("hwadapter._native")  # present: `lib` is one of its objects
        self._dtypes, self._ops = dict(native.DTYPES), dict(native.REDUCE_OPS)
        self._token = None  # the barrier's one-element buffer

    def __repr__(self):
        return f"NativeCommunicator({self.device}, rank {self.rank} of {self.size})"

    def context(self, call: str) -> _Context:
        return _Context(f"{self.device} (rank {self.rank} of {self.size})", call)

    # --- arguments ---------------------------------------------------------------------------------------------
    def _bad(self, call: str, why: str, fix: str):
        return InvalidArgumentError(f"{call} on {self.device} (rank {self.rank} of {self.size}): {why}. Fix: {fix}",
                                    fix=fix)

    def _address(self, call: str, a) -> int:
        if isinstance(a, DeviceArray):
            if a.device is not self.device:
                raise self._bad(call, f"a buffer is on {a.device}", f"pass arrays of {self.device}")
            return a.handle or 0
        if isinstance(a, np.ndarray) and a.flags.c_contiguous:
            return a.ctypes.data
        raise self._bad(call, f"a buffer is a {type(a).__name__}", f"pass C-contiguous arrays of {self.device}")

    def _dtype(self, call: str, *arrays) -> int:
        names = {np.dtype(a.dtype).name for a in arrays}
        if len(names) != 1:
            raise self._bad(call, f"the buffers' dtypes differ ({', '.join(sorted(names))})", "pass one dtype")
        name = names.pop()
        if name not in self._dtypes:
            raise UnsupportedDTypeError(f"{call} on {self.device}: device_api.h has no code for {name}. Fix: cast "
                                        f"to one of {', '.join(self._dtypes)}", fix="cast the tensor")
        return self._dtypes[name]

    def _op(self, call: str, op: str) -> int:
        if op not in REDUCE_OPS:
            raise self._bad(call, f"unknown reduce op {op!r}", f"use one of {', '.join(REDUCE_OPS)}")
        return self._ops[op]

    def _rank(self, call: str, what: str, r: int) -> int:
        if not 0 <= r < self.size:
            raise self._bad(call, f"{what} {r} is not a rank of this group", f"pass 0 to {self.size - 1}")
        return r

    def _sizes(self, call: str, ok: bool, why: str) -> None:
        if not ok:
            raise self._bad(call, why, "size the buffers as the call needs")

    def _stream(self, stream):
        """The library's handle of `stream` and the object its Work synchronises (None: calls complete at once)."""
        if not self.lib.has_streams:
            return 0, None
        if stream is None:
            stream = self.device.runtime.default_stream
        if getattr(stream, "lib", None) is not self.lib:
            raise self._bad("a collective", f"{stream!r} is not a stream of this library", "pass the device's stream")
        return stream.handle, stream

    def _run(self, call: str, count: int, stream, buffers: tuple, fn, *args) -> Work:
        if count == 0:
            return DONE
        handle, owner = self._stream(stream)
        with self.context(call):
            fn(*args, self.handle, handle)
        return DONE if owner is None else NativeWork(self, call, owner, buffers)

    # --- calls -------------------------------------------------------------------------------------------------
    def all_reduce(self, send, recv, op="sum", stream=None) -> Work:
        code, rop = self._dtype("all_reduce", send, recv), self._op("all_reduce", op)
        self._sizes("all_reduce", send.size == recv.size, f"{send.size} elements in, {recv.size} out")
        return self._run("all_reduce", send.size, stream, (send, recv), self.lib.all_reduce,
                         self._address("all_reduce", send), self._address("all_reduce", recv), send.size, code, rop)

    def broadcast(self, buf, root, stream=None) -> Work:
        code, root = self._dtype("broadcast", buf), self._rank("broadcast", "root", root)
        return self._run("broadcast", buf.size, stream, (buf,), self.lib.broadcast,
                         self._address("broadcast", buf), buf.size, code, root)

    def reduce(self, send, recv, op, root, stream=None) -> Work:
        code, rop = self._dtype("reduce", send, recv), self._op("reduce", op)
        root = self._rank("reduce", "root", root)
        self._sizes("reduce", send.size == recv.size, f"{send.size} elements in, {recv.size} out")
        return self._run("reduce", send.size, stream, (send, recv), self.lib.reduce, self._address("reduce", send),
                         self._address("reduce", recv), send.size, code, rop, root)

    def all_gather(self, send, recv, stream=None) -> Work:
        code = self._dtype("all_gather", send, recv)
        self._sizes("all_gather", recv.size == send.size * self.size,
                    f"{recv.size} elements out is not {self.size} ranks x {send.size} in")
        return self._run("all_gather", send.size, stream, (send, recv), self.lib.all_gather,
                         self._address("all_gather", send), self._address("all_gather", recv), send.size, code)

    def reduce_scatter(self, send, recv, op="sum", stream=None) -> Work:
        code, rop = self._dtype("reduce_scatter", send, recv), self._op("reduce_scatter", op)
        self._sizes("reduce_scatter", send.size == recv.size * self.size,
                    f"{send.size} elements in is not {self.size} ranks x {recv.size} out")
        return self._run("reduce_scatter", recv.size, stream, (send, recv), self.lib.reduce_scatter,
                         self._address("reduce_scatter", send), self._address("reduce_scatter", recv), recv.size,
                         code, rop)

    def all_to_all(self, send, recv, stream=None) -> Work:
        code = self._dtype("all_to_all", send, recv)
        self._sizes("all_to_all", send.size == recv.size and send.size % self.size == 0,
                    f"{send.size} elements in and {recv.size} out must be equal and divisible by {self.size} ranks")
        return self._run("all_to_all", send.size, stream, (send, recv), self.lib.all_to_all,
                         self._address("all_to_all", send), self._address("all_to_all", recv),
                         send.size // self.size, code)

    def send(self, buf, peer, stream=None) -> Work:
        code, peer = self._dtype("send", buf), self._rank("send", "peer", peer)
        return self._run("send", buf.size, stream, (buf,), self.lib.send, self._address("send", buf), buf.size, code,
                         peer)

    def recv(self, buf, peer, stream=None) -> Work:
        code, peer = self._dtype("recv", buf), self._rank("recv", "peer", peer)
        return self._run("recv", buf.size, stream, (buf,), self.lib.recv, self._address("recv", buf), buf.size, code,
                         peer)

    def barrier(self) -> None:
        """An all-reduce of one element: every rank has reached it once it completes."""
        if self._token is None:
            zero = np.zeros(1, np.int32)
            self._token = zero if self.device.host_memory else DeviceArray.from_numpy(self.device, zero)
        self.all_reduce(self._token, self._token, "max").wait()

    def destroy(self) -> None:
        if self.handle:
            handle, self.handle = self.handle, 0
            with self.context("comm_destroy"):
                self.lib.comm_destroy(handle)


class NativeCollectives(Collectives):
    """The communication level of a device whose library has the device_api.h 1.2 communication functions."""

    def __init__(self, lib, device):
        self.lib, self.device = lib, device

    def unique_id(self) -> bytes:
        with _Context(str(self.device), "comm_unique_id"):
            return self.lib.comm_unique_id()

    def communicator(self, unique_id: bytes, rank: int, size: int) -> NativeCommunicator:
        if not 0 <= rank < size:
            raise InvalidArgumentError(f"comm_init_rank on {self.device}: rank {rank} is not in 0..{size - 1}. Fix: "
                                       f"pass this process's rank in the group", fix="pass a rank in the group")
        with _Context(f"{self.device} (rank {rank} of {size})", "comm_init_rank"):
            handle = self.lib.comm_init_rank(self.device.index, bytes(unique_id), size, rank)
        return NativeCommunicator(self.lib, self.device, handle, rank, size)
