"""NCCL (through cupy.cuda.nccl) as the CUDA plugin's communication level: one communicator per GPU per group.

Every call is queued on the stream given (None: the runtime's default stream, where ops queue) behind the work already
there, and its Work is an event recorded after it. NCCL has no all-to-all: it is send/recv pairs in one NCCL group.
bool travels as uint8 (its sum and max are "or", its prod and min "and"); an integer avg is the sum floor-divided by
the group's size on the stream, as the MPI communicator gives it. cupy is imported only when collectives are asked for.
"""
from __future__ import annotations

import importlib
import os
import warnings

import numpy as np

from hwadapter.plugin import (DONE, REDUCE_OPS, CollectiveError, Collectives, Communicator, DeviceArray,
                              HwAdapterError, InvalidArgumentError, UnsupportedDTypeError, Work, poll)

from . import load_cupy
from .runtime import CudaRuntime, CudaStream

#: numpy dtype name -> the cupy.cuda.nccl constant that carries it.
DTYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64", "int8": "NCCL_INT8",
          "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "int64": "NCCL_INT64", "bool": "NCCL_UINT8"}
#: reduce op -> cupy.cuda.nccl constant, for numbers and for bool (0/1 bytes: or is max, and is min).
OPS = {"sum": "NCCL_SUM", "avg": "NCCL_AVG", "max": "NCCL_MAX", "min": "NCCL_MIN", "prod": "NCCL_PROD"}
BOOL_OPS = {"sum": "NCCL_MAX", "max": "NCCL_MAX", "prod": "NCCL_MIN", "min": "NCCL_MIN"}
#: ncclAvg came with NCCL 2.10 (ncclGetVersion's 21000); before it a float avg is a sum, then a division.
AVG_VERSION = 21000
#: What MPI launchers set to the number of ranks on this machine: MPICH's hydra, Open MPI, MVAPICH.
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE")
_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES


def pack_id(uid) -> bytes:
    """cupy's unique id as bytes: cupy >= 14 gives bytes, older cupy a tuple of 128 (signed char) ints."""
    if isinstance(uid, (bytes, bytearray)):
        return bytes(uid)
    return bytes(int(c) & 0xFF for c in uid)


def unpack_id(data: bytes) -> tuple:
    """The tuple of signed char ints an older cupy's NcclCommunicator takes for `pack_id`'s bytes."""
    return tuple(np.frombuffer(data, np.int8).tolist())


def reduction(op: str, dtype: str, native_avg: bool) -> tuple[str, str | None]:
    """(the NCCL op constant, then what divides the result on the device: None, "floor" or "true") for `op` on
    `dtype`; KeyError for an op or dtype NCCL cannot give."""
    if dtype == "bool":
        return BOOL_OPS[op], None
    if op == "avg" and np.dtype(dtype).kind in "iu":
        return "NCCL_SUM", "floor"  # ncclAvg truncates integers toward zero; the MPI communicator floors
    if op == "avg" and not native_avg:
        return "NCCL_SUM", "true"
    return OPS[op], None


def load_nccl():
    """cupy.cuda.nccl when cupy imports and its NCCL library loads, else None."""
    try:
        load_cupy()
        with warnings.catch_warnings():  # cupy warns when libnccl is missing; None already says so to the caller
            warnings.simplefilter("ignore")
            nccl = importlib.import_module("cupy.cuda.nccl")
    except (HwAdapterError, ImportError, OSError):
        return None
    return nccl if getattr(nccl, "available", True) and hasattr(nccl, "NcclCommunicator") else None


def ranks_outnumber_gpus(gpus: int) -> bool:
    """True when the MPI launcher started more ranks on this machine than it has GPUs and CUDA_VISIBLE_DEVICES is
    unset: ranks then share GPUs, and NCCL refuses two ranks of one communicator on one GPU."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        return False  # the launcher may pin each rank to its own GPU: trust it (NCCL names a clash if not)
    for name in LOCAL_SIZE_VARIABLES:
        text = os.environ.get(name, "")
        if text.strip().isdigit():
            return int(text) > gpus
    return False


def collectives_for(device) -> "NcclCollectives | None":
    """NCCL for `device`, or None (hwadapter then uses its MPI communicator, staged through host memory): when cupy
    or its NCCL is missing, the device is not a GPU, or ranks on this machine would share its GPUs."""
    nccl = load_nccl()
    if nccl is None:
        return None
    try:
        runtime = device.runtime
    except HwAdapterError:
        return None
    if not isinstance(runtime, CudaRuntime) or ranks_outnumber_gpus(runtime.rt.getDeviceCount()):
        return None
    return NcclCollectives(device, nccl)


class _NcclErrors:
    """NCCL's errors as CollectiveError naming the call, the device and rank, and a fix."""

    def __init__(self, nccl, where: str, call: str, fix: str):
        self.nccl, self.where, self.call, self.fix = nccl, where, call, fix

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if err is None or not isinstance(err, self.nccl.NcclError):
            return False
        raise CollectiveError(f"{self.call} on {self.where}: NCCL failed: {err}. Fix: {self.fix}",
                              fix=self.fix) from err


_CALL_FIX = ("every rank of the group must make the same calls in the same order with the same counts and dtypes; "
             "NCCL_DEBUG=WARN prints NCCL's own reason")
_INIT_FIX = ("give each rank of a group its own GPU (NCCL refuses two ranks on one GPU: start at most as many ranks "
             "per machine as it has GPUs, or pin each rank with CUDA_VISIBLE_DEVICES), and check that every rank "
             "reached init_parallel_env; NCCL_DEBUG=WARN prints NCCL's own reason")


class NcclWork(Work):
    """A call queued on a stream: done once the event recorded after it is; holds its buffers until then."""

    def __init__(self, comm: "NcclCommunicator", call: str, event, buffers: tuple):
        self.comm, self.call, self.event, self.buffers = comm, call, event, buffers

    def wait(self) -> None:
        if self.event is None:
            return
        comm, limit = self.comm, self.comm.timeout
        if limit is None:
            with comm.gpu:
                self.event.synchronize()
        else:
            try:  # an asynchronous NCCL error (a peer that died) shows long before the limit
                poll(lambda: self.event.done, f"{self.call} on {comm.where}", limit, lambda: comm.check_async(self.call),
                     spin=100)
            except CollectiveError as err:
                comm.abort(str(err))
                raise CollectiveError(f"{err}; the communicator is aborted", fix=err.fix) from None
        self.event = self.buffers = None

    def is_completed(self) -> bool:
        if self.event is not None and self.event.done:
            self.event = self.buffers = None
        return self.event is None


class NcclCommunicator(Communicator):
    """One GPU's member of an NCCL communicator (`handle`, a cupy.cuda.nccl.NcclCommunicator). `timeout`: seconds a
    Work waits before a CollectiveError and an abort (None: as long as NCCL takes; the group sets the job's)."""

    def __init__(self, device, nccl, handle, rank: int, size: int, timeout: float | None = None):
        self.device, self.nccl, self.handle, self.rank, self.size = device, nccl, handle, rank, size
        self.timeout = timeout
        runtime = device.runtime
        self.cp, self.gpu, self._default = runtime.cp, runtime.device, runtime.default_stream
        self.native_avg = nccl.get_version() >= AVG_VERSION
        self.where = f"{device} (rank {rank} of {size})"
        self.broken: str | None = None  # why the communicator was aborted
        self._token = None  # the barrier's one-element buffer

    def __repr__(self):
        return f"NcclCommunicator({self.where})"

    # --- arguments ---------------------------------------------------------------------------------------------
    def _bad(self, call: str, why: str, fix: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{call} on {self.where}: {why}. Fix: {fix}", fix=fix)

    def _address(self, call: str, a) -> int:
        if not isinstance(a, DeviceArray):
            raise self._bad(call, f"a buffer is a {type(a).__name__}", f"pass DeviceArrays of {self.device}")
        if a.device is not self.device:
            raise self._bad(call, f"a buffer is on {a.device}", f"pass arrays of {self.device}")
        return a.handle or 0

    def _dtype(self, call: str, *arrays) -> tuple[str, int]:
        names = {np.dtype(a.dtype).name for a in arrays}
        if len(names) != 1:
            raise self._bad(call, f"the buffers' dtypes differ ({', '.join(sorted(names))})", "pass one dtype")
        name = names.pop()
        if name not in DTYPES:
            fix = f"cast the tensor to one of {', '.join(DTYPES)} (int16 to int32, say) before the collective"
            raise UnsupportedDTypeError(f"{call} on {self.where}: NCCL carries no {name}. Fix: {fix}", fix=fix)
        return name, getattr(self.nccl, DTYPES[name])

    def _op(self, call: str, op: str, dtype: str) -> tuple[int, str | None]:
        if op not in REDUCE_OPS:
            raise self._bad(call, f"unknown reduce op {op!r}", f"use one of {', '.join(REDUCE_OPS)}")
        try:
            name, post = reduction(op, dtype, self.native_avg)
        except KeyError:
            fix = "cast to a number first"
            raise UnsupportedDTypeError(f"{call} on {self.where}: {op} of {dtype} tensors is not defined. Fix: {fix}",
                                        fix=fix) from None
        return getattr(self.nccl, name), post

    def _rank(self, call: str, what: str, r: int) -> int:
        if not 0 <= r < self.size:
            raise self._bad(call, f"{what} {r} is not a rank of this group", f"pass 0 to {self.size - 1}")
        return r

    def _sizes(self, call: str, ok: bool, why: str) -> None:
        if not ok:
            raise self._bad(call, why, "size the buffers as the call needs")

    def _stream(self, call: str, stream):
        """The cupy stream for `stream` (None: the runtime's default stream)."""
        stream = self._default if stream is None else stream
        if not isinstance(stream, CudaStream):
            raise self._bad(call, f"{stream!r} is not a CUDA stream", f"pass a stream of {self.device} or None")
        return stream.cupy

    # --- running -----------------------------------------------------------------------------------------------
    def _usable(self, call: str) -> None:
        if self.broken is not None:
            raise CollectiveError(f"{call} on {self.where}: the communicator was aborted ({self.broken}). Fix: end "
                                  f"the job and start it again; a failed NCCL communicator cannot be used",
                                  fix="restart the job")
        if self.handle is None:
            raise CollectiveError(f"{call} on {self.where}: the communicator was destroyed. Fix: make collective "
                                  f"calls before destroying the group", fix="do not use a destroyed group")

    def errors(self, call: str, fix: str = _CALL_FIX) -> _NcclErrors:
        return _NcclErrors(self.nccl, self.where, call, fix)

    def _run(self, call: str, count: int, stream, buffers: tuple, launch, divide=None) -> Work:
        """launch(stream pointer) queues the NCCL call(s); `divide` = (array, "floor" | "true") then divides that
        array by the group's size on the same stream."""
        self._usable(call)
        cs = self._stream(call, stream)
        if count == 0:
            return DONE
        with self.gpu, self.errors(call):
            launch(cs.ptr)
            if divide is not None:
                self._divide(*divide, cs)
            event = self.cp.cuda.Event(disable_timing=True)
            event.record(cs)
        return NcclWork(self, call, event, buffers)

    def _divide(self, a: DeviceArray, how: str, cs) -> None:
        cp = self.cp
        memory = cp.cuda.UnownedMemory(a.handle, a.nbytes, a, self.gpu.id)
        view = cp.ndarray((a.size,), a.dtype, cp.cuda.MemoryPointer(memory, 0))
        with cs:
            (cp.floor_divide if how == "floor" else cp.true_divide)(view, self.size, out=view)

    def check_async(self, call: str) -> None:
        """Raise CollectiveError when NCCL reports an asynchronous failure (a peer lost, say)."""
        if self.handle is not None and self.broken is None:
            try:
                self.handle.check_async_error()
            except self.nccl.NcclError as err:
                self.abort(f"NCCL reported {err}")
                raise CollectiveError(f"{call} on {self.where}: NCCL failed while it ran: {err}. Fix: find the rank "
                                      f"that stopped (its output says why); NCCL_DEBUG=WARN prints NCCL's reason",
                                      fix="find the rank that stopped") from err

    def abort(self, why: str) -> None:
        """Abort the NCCL communicator: its kernels stop, and every later call raises saying `why`."""
        if self.broken is None:
            self.broken = why
            if self.handle is not None:
                with self.gpu:
                    self.handle.abort()

    # --- calls -------------------------------------------------------------------------------------------------
    def all_reduce(self, send, recv, op="sum", stream=None) -> Work:
        name, code = self._dtype("all_reduce", send, recv)
        rop, post = self._op("all_reduce", op, name)
        self._sizes("all_reduce", send.size == recv.size, f"{send.size} elements in, {recv.size} out")
        s, r, n = self._address("all_reduce", send), self._address("all_reduce", recv), send.size
        return self._run("all_reduce", n, stream, (send, recv),
                         lambda sp: self.handle.allReduce(s, r, n, code, rop, sp), (recv, post) if post else None)

    def broadcast(self, buf, root, stream=None) -> Work:
        (_, code), root = self._dtype("broadcast", buf), self._rank("broadcast", "root", root)
        b, n = self._address("broadcast", buf), buf.size
        return self._run("broadcast", n, stream, (buf,), lambda sp: self.handle.bcast(b, n, code, root, sp))

    def reduce(self, send, recv, op, root, stream=None) -> Work:
        name, code = self._dtype("reduce", send, recv)
        (rop, post), root = self._op("reduce", op, name), self._rank("reduce", "root", root)
        self._sizes("reduce", send.size == recv.size, f"{send.size} elements in, {recv.size} out")
        s, r, n = self._address("reduce", send), self._address("reduce", recv), send.size
        return self._run("reduce", n, stream, (send, recv),
                         lambda sp: self.handle.reduce(s, r, n, code, rop, root, sp),
                         (recv, post) if post and self.rank == root else None)

    def all_gather(self, send, recv, stream=None) -> Work:
        _, code = self._dtype("all_gather", send, recv)
        self._sizes("all_gather", recv.size == send.size * self.size,
                    f"{recv.size} elements out is not {self.size} ranks x {send.size} in")
        s, r, n = self._address("all_gather", send), self._address("all_gather", recv), send.size
        return self._run("all_gather", n, stream, (send, recv), lambda sp: self.handle.allGather(s, r, n, code, sp))

    def reduce_scatter(self, send, recv, op="sum", stream=None) -> Work:
        name, code = self._dtype("reduce_scatter", send, recv)
        rop, post = self._op("reduce_scatter", op, name)
        self._sizes("reduce_scatter", send.size == recv.size * self.size,
                    f"{send.size} elements in is not {self.size} ranks x {recv.size} out")
        s, r, n = self._address("reduce_scatter", send), self._address("reduce_scatter", recv), recv.size
        return self._run("reduce_scatter", n, stream, (send, recv),
                         lambda sp: self.handle.reduceScatter(s, r, n, code, rop, sp), (recv, post) if post else None)

    def all_to_all(self, send, recv, stream=None) -> Work:
        _, code = self._dtype("all_to_all", send, recv)
        self._sizes("all_to_all", send.size == recv.size and send.size % self.size == 0,
                    f"{send.size} elements in and {recv.size} out must be equal and divisible by {self.size} ranks")
        s, r = self._address("all_to_all", send), self._address("all_to_all", recv)
        if s and s == r:
            raise self._bad("all_to_all", "the input and output are one buffer", "pass a separate output")
        n = send.size // self.size
        step = n * send.dtype.itemsize

        def launch(sp):
            self.nccl.groupStart()  # NCCL has no all-to-all: one send and one recv per peer, run as one
            try:
                for j in range(self.size):
                    self.handle.send(s + j * step, n, code, j, sp)
                    self.handle.recv(r + j * step, n, code, j, sp)
            finally:
                self.nccl.groupEnd()
        return self._run("all_to_all", n, stream, (send, recv), launch)

    def send(self, buf, peer, stream=None) -> Work:
        (_, code), peer = self._dtype("send", buf), self._rank("send", "peer", peer)
        b, n = self._address("send", buf), buf.size
        return self._run("send", n, stream, (buf,), lambda sp: self.handle.send(b, n, code, peer, sp))

    def recv(self, buf, peer, stream=None) -> Work:
        (_, code), peer = self._dtype("recv", buf), self._rank("recv", "peer", peer)
        b, n = self._address("recv", buf), buf.size
        return self._run("recv", n, stream, (buf,), lambda sp: self.handle.recv(b, n, code, peer, sp))

    def barrier(self) -> None:
        """An all-reduce of one element: every rank has reached it once it completes."""
        self._usable("barrier")
        if self._token is None:
            self._token = DeviceArray.from_numpy(self.device, np.zeros(1, np.int32))
        self.all_reduce(self._token, self._token, "max").wait()

    def destroy(self) -> None:
        self._token = None
        handle, self.handle = self.handle, None
        if handle is not None and self.broken is None:  # an aborted communicator is freed already
            with self.gpu, self.errors("destroy"):
                handle.destroy()


class NcclCollectives(Collectives):
    """The communication level of one GPU: NCCL communicators from ncclGetUniqueId's ids."""

    def __init__(self, device, nccl):
        self.device, self.nccl = device, nccl

    def __repr__(self):
        return f"NcclCollectives({self.device}, NCCL {self.nccl.get_version()})"

    def unique_id(self) -> bytes:
        with _NcclErrors(self.nccl, str(self.device), "get_unique_id", _INIT_FIX):
            return pack_id(self.nccl.get_unique_id())

    def communicator(self, unique_id: bytes, rank: int, size: int) -> NcclCommunicator:
        if not 0 <= rank < size or len(unique_id) != _ID_BYTES:
            raise InvalidArgumentError(f"NCCL communicator on {self.device}: rank {rank} of {size} with a "
                                       f"{len(unique_id)}-byte id. Fix: pass this process's rank in the group and "
                                       f"the {_ID_BYTES} bytes rank 0's unique_id() gave", fix="pass a rank and id")
        runtime = self.device.runtime
        with runtime.device, _NcclErrors(self.nccl, f"{self.device} (rank {rank} of {size})", "NcclCommunicator",
                                         _INIT_FIX):
            try:
                handle = self.nccl.NcclCommunicator(size, bytes(unique_id), rank)
            except TypeError:  # cupy < 14 takes the id as a tuple of ints
                handle = self.nccl.NcclCommunicator(size, unpack_id(bytes(unique_id)), rank)
        return NcclCommunicator(self.device, self.nccl, handle, rank, size)

    def dtypes(self) -> frozenset:
        return frozenset(DTYPES)
