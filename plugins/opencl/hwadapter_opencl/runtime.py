"""The OpenCL runtime: every platform's devices as opencl:0..N-1, cl.Buffers as memory, command queues as streams."""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import warnings
import weakref

import numpy as np
import pyopencl as cl

from hwadapter.plugin import (CompileError, DeviceProperties, DeviceUnavailableError, Event, InvalidArgumentError,
                              OutOfMemoryError, Runtime, Stream, check_room, no_room)

# Errors by which OpenCL says "no memory left" (CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES,
# CL_OUT_OF_HOST_MEMORY, CL_INVALID_BUFFER_SIZE: one buffer over CL_DEVICE_MAX_MEM_ALLOC_SIZE).
_OOM_CODES = {-4, -5, -6, -61}
_devices: list | None = None
logger = logging.getLogger(__name__)
_build_warnings_lock = threading.Lock()


def devices() -> list:
    """Every device of every OpenCL platform, in platform order (the index of opencl:N)."""
    global _devices
    if _devices is None:
        try:
            platforms = cl.get_platforms()
        except cl.Error as err:  # the ICD loader raises PLATFORM_NOT_FOUND_KHR when no driver is installed
            raise _unavailable(f"no OpenCL platform found ({err})") from None
        found = [d for p in platforms for d in p.get_devices()]
        if not found:
            raise _unavailable(f"the OpenCL platforms ({', '.join(p.name.strip() for p in platforms)}) have no devices")
        _devices = found
    return _devices


def _unavailable(cause: str) -> DeviceUnavailableError:
    return DeviceUnavailableError(cause, fix="install an OpenCL driver: `apt-get install pocl-opencl-icd` for the CPU, "
                                             "or your GPU vendor's ICD; `clinfo` lists what the ICD loader finds")


def _build_holding_compiler_warning(prg: cl.Program, options: str) -> None:
    """prg.build(options) without pyopencl's CompilerWarning (the caller logs the build log itself); any other warning
    raised meanwhile, in this thread or another, is passed on."""
    # catch_warnings swaps process-wide state: two builds overlapping in two threads could restore it out of order
    # and leave the recorder installed, so builds (of every device) take their turn here.
    with _build_warnings_lock, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", cl.CompilerWarning)
        prg.build(options)
    for w in caught:
        if not issubclass(w.category, cl.CompilerWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def pocl_scratch(device: cl.Device) -> str | None:
    """Where PoCL compiles (its kernel cache, and its temporary files beside it) for a PoCL device, else None: PoCL's
    LLVM aborts the process when a write there fails, so it must not be asked to compile without room."""
    if "Portable Computing Language" not in device.platform.name:
        return None
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("POCL_CACHE_DIR") or os.path.join(home, "pocl", "kcache")


def build_key(source: str, options: str = "") -> str:
    """What names a built program: its source and build options."""
    return hashlib.sha256(f"{options}\n{source}".encode()).hexdigest()


class Queue(Stream):
    """An in-order cl.CommandQueue. Kernels are enqueued through `launch`; `flush` is where a queue that holds
    launches back (tuning/batching.py) submits them, and the runtime calls it before anything waits for the queue."""

    def __init__(self, queue: cl.CommandQueue):
        self.queue = queue
        self._lock = threading.Lock()

    def launch(self, kernel: cl.Kernel, global_size: tuple, local_size: tuple | None, arrays=()) -> None:
        """Enqueue `kernel`, its first arguments set to the buffers of `arrays` (DeviceArrays) under the queue's
        lock: a cl.Kernel holds its arguments, so one launched only here needs no lock of its own."""
        with self._lock:
            for i, array in enumerate(arrays):
                kernel.set_arg(i, array.handle)
            cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size)

    def flush(self) -> "Queue":
        """Submit any held work (call before waiting for anything on this queue); returns the queue."""
        return self

    def synchronize(self) -> None:
        self.flush().queue.finish()

    def query(self) -> bool:
        # OpenCL cannot ask a queue whether it is idle: enqueue a marker and look at it. On an idle queue the driver
        # completes it within microseconds, so give it a moment before saying "busy".
        marker = cl.enqueue_marker(self.flush().queue)
        self.queue.flush()
        deadline = time.perf_counter() + 0.005
        while marker.command_execution_status != cl.command_execution_status.COMPLETE:
            if time.perf_counter() > deadline:
                return False
            time.sleep(0)
        return True

    def wait_event(self, event: "Marker") -> None:
        if event.event is not None:
            cl.enqueue_barrier(self.queue, wait_for=[event.event])


class Marker(Event):
    """A cl marker event: complete when the work queued before it is."""

    def __init__(self):
        self.event = None

    def record(self, stream: Queue) -> None:
        # submitted at once: another queue, or the host, may wait for it
        self.event = cl.enqueue_marker(stream.flush().queue)

    def query(self) -> bool:
        return self.event is None or self.event.command_execution_status == cl.command_execution_status.COMPLETE

    def synchronize(self) -> None:
        if self.event is not None:
            self.event.wait()


class OpenCLRuntime(Runtime):
    """One OpenCL device: its context (its own, or one given: native.py passes a native host's), a default queue
    (of class `queue`), a byte budget of CL_DEVICE_GLOBAL_MEM_SIZE, and the programs built in its context."""

    def __init__(self, index: int, name: str, context: cl.Context | None = None, queue: type = Queue):
        super().__init__(index)
        self.device = devices()[index]
        self.name = name  # "type:index" as the core names this device, for messages
        self.context = context or cl.Context([self.device])
        self._queue_class = queue
        self._default = queue(cl.CommandQueue(self.context, self.device))
        self._streams = weakref.WeakSet()
        # Allocation is lazy in most drivers: a one-byte fill on a private queue makes it happen (and fail) now.
        self._touch = cl.CommandQueue(self.context, self.device)
        self._lock = threading.Lock()
        self.total = self.device.global_mem_size
        self.max_alloc = self.device.max_mem_alloc_size
        self.used = 0  # bytes held; CPU drivers (PoCL) do not enforce the size they advertise, so we do
        self._live: dict[int, cl.Buffer] = {}  # id -> buffer of every allocation not yet freed: a second free raises
        self.is_cpu = bool(self.device.type & cl.device_type.CPU)
        self.fp64 = "cl_khr_fp64" in self.device.extensions
        self._build_lock = threading.Lock()
        self._built: dict[str, cl.Program] = {}  # build_key -> program built from source
        self._loaded: dict[str, cl.Program] = {}  # SHA-256 of a binary -> the program it came from or was loaded as
        self.binaries: dict[str, bytes] = {}  # build_key -> binary a deserialised subgraph brought: used, not rebuilt
        self.builds = 0  # builds from OpenCL C source (not from binaries): what a warm cache saves
        self.scratch = pocl_scratch(self.device)

    def build(self, source: str, options: str = "", name: str = "kernel") -> cl.Program:
        """The program for this source and these options, built once per process (or loaded from a brought binary)."""
        key = build_key(source, options)
        prg = self._built.get(key)
        if prg is None:
            with self._build_lock:
                prg = self._built.get(key)
                if prg is None:
                    binary = self.binaries.get(key)
                    prg = self.load(binary) if binary is not None else self._compile(source, options, name)
                    self._built[key] = prg
        return prg

    def _room(self, what: str) -> None:
        if self.scratch is not None:
            check_room(f"{self.name}: {what}", self.scratch, "POCL_CACHE_DIR")

    def _compile(self, source: str, options: str, name: str) -> cl.Program:
        self._room(f"kernel {name!r}")
        prg = cl.Program(self.context, source)
        self.builds += 1
        try:
            _build_holding_compiler_warning(prg, options)
        except cl.Error as err:
            try:
                log = prg.get_build_info(self.device, cl.program_build_info.LOG)
            except cl.Error:
                log = str(err)
            full = self.scratch and no_room(f"{self.name}: kernel {name!r}", log, self.scratch, "POCL_CACHE_DIR")
            if full:
                raise full from None
            raise CompileError(f"{self.name}: the OpenCL compiler of {self.device.name.strip()} rejected kernel "
                               f"{name!r} (options {options!r}). Fix: this is a bug in the kernel source or the "
                               f"driver; report it with the source and log below", source=source, log=log) from None
        self._log_build(prg, name, options)
        self._loaded[hashlib.sha256(prg.binaries[0]).hexdigest()] = prg
        return prg

    def _log_build(self, prg: cl.Program, name: str, options: str) -> None:
        # Our kernels build with an empty log on PoCL (tests/test_docs.py runs the demo and wants no warning), so the
        # log of a build that succeeded is a driver's chatter (some drivers describe every build) or a warning for the
        # kernel's author: nothing a user can act on. It goes to DEBUG whole, in place of pyopencl's CompilerWarning,
        # which says only "non-empty compiler output" once per build.
        build_log = prg.get_build_info(self.device, cl.program_build_info.LOG).strip()
        if build_log:
            logger.debug("%s: the OpenCL compiler's log for kernel %r (options %r):\n%s", self.name, name, options,
                         build_log)

    def load(self, binary: bytes) -> cl.Program:
        """The program of a binary: the one it was built as in this process, else loaded from it once."""
        digest = hashlib.sha256(binary).hexdigest()
        prg = self._loaded.get(digest)
        if prg is None:
            self._room("a program loaded from its binary")  # PoCL compiles its IR, writing as a build does
            prg = self._loaded[digest] = cl.Program(self.context, [self.device], [binary]).build()
        return prg

    def properties(self) -> DeviceProperties:
        d = self.device
        return DeviceProperties(
            name=d.name.strip(), vendor=d.vendor.strip(), total_memory=self.total, compute_units=d.max_compute_units,
            max_work_group_size=d.max_work_group_size,
            extra={"platform": d.platform.name.strip(), "version": d.version.strip(),
                   "driver_version": d.driver_version.strip(), "type": cl.device_type.to_string(d.type),
                   "local_memory": d.local_mem_size, "max_allocation": self.max_alloc, "fp64": self.fp64})

    def _oom(self, nbytes: int, why: str) -> OutOfMemoryError:
        return OutOfMemoryError(f"{self.name} ({self.device.name.strip()}): cannot allocate {nbytes} bytes: {why}")

    def allocate(self, nbytes: int) -> cl.Buffer:
        if nbytes > self.max_alloc:
            raise self._oom(nbytes, f"one buffer may hold at most {self.max_alloc} bytes "
                                    f"(CL_DEVICE_MAX_MEM_ALLOC_SIZE)")
        with self._lock:
            if self.used + nbytes > self.total:
                raise self._oom(nbytes, f"{self.used} of {self.total} bytes are in use")
            self.used += nbytes
        try:
            buf = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)
            cl.enqueue_fill_buffer(self._touch, buf, np.uint8(0), 0, 1).wait()
        except cl.Error as err:
            with self._lock:
                self.used -= nbytes
            if getattr(err, "code", None) in _OOM_CODES:
                raise self._oom(nbytes, str(err)) from None
            raise
        with self._lock:
            self._live[id(buf)] = buf
        return buf

    def free(self, handle: cl.Buffer) -> None:
        with self._lock:
            if self._live.get(id(handle)) is not handle:  # releasing twice crashes the driver (a segfault in PoCL)
                raise InvalidArgumentError(f"{self.name}: free() of a buffer that is not allocated here (freed "
                                           f"already, or not from this device's allocate). Fix: free each buffer once")
            del self._live[id(handle)]
            self.used -= handle.size
        handle.release()  # OpenCL keeps it alive until the queued commands that use it are done

    def _queue(self, stream: Queue | None) -> cl.CommandQueue:
        # copies submit held kernels first (a blocking one waits for them; a copy is not worth holding)
        return (stream or self._default).flush().queue

    def copy_h2d(self, dst, dst_offset, src, stream=None):
        if src.nbytes:  # pyopencl keeps `src` alive until an asynchronous copy has finished
            cl.enqueue_copy(self._queue(stream), dst, src, dst_offset=dst_offset, is_blocking=stream is None)

    def copy_d2h(self, dst, src, src_offset, stream=None):
        if dst.nbytes:
            cl.enqueue_copy(self._queue(stream), dst, src, src_offset=src_offset, is_blocking=stream is None)

    def copy_d2d(self, dst, dst_offset, src, src_offset, nbytes, stream=None):
        if nbytes:
            event = cl.enqueue_copy(self._queue(stream), dst, src, byte_count=nbytes, src_offset=src_offset,
                                    dst_offset=dst_offset)
            if stream is None:
                event.wait()

    def memset(self, dst, offset, value, nbytes, stream=None):
        if nbytes:
            event = cl.enqueue_fill_buffer(self._queue(stream), dst, np.uint8(value), offset, nbytes)
            if stream is None:
                event.wait()

    def create_stream(self) -> Queue:
        stream = self._queue_class(cl.CommandQueue(self.context, self.device))
        self._streams.add(stream)
        return stream

    @property
    def default_stream(self) -> Queue:
        return self._default

    @property
    def queue(self) -> cl.CommandQueue:
        """The default queue, where ops run, its held kernels submitted: for code that enqueues on it directly."""
        return self._default.flush().queue

    def create_event(self) -> Marker:
        return Marker()

    def synchronize(self) -> None:
        for stream in [self._default, *self._streams]:
            stream.synchronize()

    def memory_info(self) -> tuple[int, int]:
        return max(self.total - self.used, 0), self.total
