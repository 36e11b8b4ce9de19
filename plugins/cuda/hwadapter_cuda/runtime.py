"""The CUDA runtime over cupy: raw cudaMalloc blocks, copies and memsets on cupy streams, events, properties."""
from __future__ import annotations

from hwadapter.plugin import DeviceProperties, Event, InvalidArgumentError, OutOfMemoryError, Runtime, Stream

from . import load_cupy

CUDA_ERROR_MEMORY_ALLOCATION = 2  # cudaErrorMemoryAllocation; cupy_backends.cuda.api.runtime exports no name for it
CUDA_MEMORY_TYPE_DEVICE = 2  # cudaMemoryTypeDevice (cudaPointerAttributes.type)


class CudaStream(Stream):
    """A cupy.cuda.Stream; `cupy` is the underlying stream for code that launches on it directly."""

    def __init__(self, stream):
        self.cupy = stream

    @property
    def ptr(self) -> int:
        return self.cupy.ptr

    def synchronize(self) -> None:
        self.cupy.synchronize()

    def query(self) -> bool:
        return self.cupy.done

    def wait_event(self, event: "CudaEvent") -> None:
        self.cupy.wait_event(event.cupy)


class CudaEvent(Event):
    """A cupy.cuda.Event (with timing, so benchmarks can read elapsed times between two of them)."""

    def __init__(self, event):
        self.cupy = event

    def record(self, stream: CudaStream) -> None:
        self.cupy.record(stream.cupy)

    def query(self) -> bool:
        return self.cupy.done

    def synchronize(self) -> None:
        self.cupy.synchronize()


class CudaRuntime(Runtime):
    """One GPU. Handles are raw device pointers (ints) from cudaMalloc: the core's caching allocator is the cache,
    so cupy's memory pool is never involved. Calls without a stream run on the default stream and wait for it."""

    def __init__(self, index: int, name: str):
        super().__init__(index)
        self.name = name  # "type:index" as the core names this device, for messages
        self.cp = load_cupy()
        self.rt = self.cp.cuda.runtime
        self.device = self.cp.cuda.Device(index)
        with self.device:
            # A blocking stream of our own (not the legacy null stream): ops queue on it; it still orders with
            # code that uses the null stream, such as a user's own cupy calls.
            self._default = CudaStream(self.cp.cuda.Stream(non_blocking=False))
        self._props = None

    def properties(self) -> DeviceProperties:
        if self._props is None:
            p = self.rt.getDeviceProperties(self.index)
            name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
            extra = {"compute_capability": f"{p['major']}.{p['minor']}", "arch": f"sm_{p['major']}{p['minor']}",
                     "warp_size": p.get("warpSize"), "shared_mem_per_block": p.get("sharedMemPerBlock"),
                     "l2_cache_bytes": p.get("l2CacheSize"), "memory_bus_width": p.get("memoryBusWidth"),
                     "pci_bus_id": p.get("pciBusID"), "driver_version": self.rt.driverGetVersion(),
                     "runtime_version": self.rt.runtimeGetVersion(), "cupy_version": self.cp.__version__}
            self._props = DeviceProperties(name=name, vendor="NVIDIA", total_memory=int(p["totalGlobalMem"]),
                                           compute_units=int(p["multiProcessorCount"]),
                                           max_work_group_size=int(p["maxThreadsPerBlock"]), extra=extra)
        return self._props

    # --- memory ---------------------------------------------------------------------------------------------
    def allocate(self, nbytes: int) -> int:
        with self.device:
            try:
                return self.rt.malloc(nbytes)
            except self.rt.CUDARuntimeError as err:
                if err.status != CUDA_ERROR_MEMORY_ALLOCATION:
                    raise
                free, total = self.rt.memGetInfo()
        raise OutOfMemoryError(f"{self.name} ({self.properties().name}): cudaMalloc of {nbytes} bytes failed, "
                               f"{free} of {total} bytes free on the device. Fix: free tensors, use smaller batches, "
                               f"or check `nvidia-smi` for other processes holding GPU memory")

    def adopt(self, address: int, nbytes: int) -> int:
        """The address itself (Runtime.adopt): CUDA runtime pointers of the device's primary context, which the
        native library (cuda_device.c) and CuPy both use, are valid in either. Checked first: a kernel given host
        memory would fault and poison the context for the whole process."""
        attrs = self.rt.pointerGetAttributes(address)
        if attrs.type != CUDA_MEMORY_TYPE_DEVICE or attrs.device != self.index:
            raise InvalidArgumentError(f"{self.name}: address {address:#x} is not memory of this GPU (CUDA says memory "
                                       f"type {attrs.type} on device {attrs.device})",
                                       fix="pass memory allocated on this device through the native library")
        return address

    def free(self, handle: int) -> None:
        with self.device:
            self.rt.free(handle)

    def _copy(self, dst: int, src: int, nbytes: int, kind: int, stream: CudaStream | None) -> None:
        if nbytes == 0:
            return
        s = stream or self._default
        with self.device:
            self.rt.memcpyAsync(dst, src, nbytes, kind, s.ptr)
            if stream is None:
                s.synchronize()

    def copy_h2d(self, dst, dst_offset, src, stream=None):
        self._copy(dst + dst_offset, src.ctypes.data, src.nbytes, self.rt.memcpyHostToDevice, stream)

    def copy_d2h(self, dst, src, src_offset, stream=None):
        self._copy(dst.ctypes.data, src + src_offset, dst.nbytes, self.rt.memcpyDeviceToHost, stream)

    def copy_d2d(self, dst, dst_offset, src, src_offset, nbytes, stream=None):
        self._copy(dst + dst_offset, src + src_offset, nbytes, self.rt.memcpyDeviceToDevice, stream)

    def memset(self, dst, offset, value, nbytes, stream=None):
        if nbytes == 0:
            return
        s = stream or self._default
        with self.device:
            self.rt.memsetAsync(dst + offset, int(value), nbytes, s.ptr)
            if stream is None:
                s.synchronize()

    def memory_info(self) -> tuple[int, int]:
        with self.device:
            free, total = self.rt.memGetInfo()
        return int(free), int(total)

    # --- streams and events ---------------------------------------------------------------------------------
    def create_stream(self) -> CudaStream:
        with self.device:
            return CudaStream(self.cp.cuda.Stream(non_blocking=False))

    @property
    def default_stream(self) -> CudaStream:
        return self._default

    def create_event(self) -> CudaEvent:
        with self.device:
            return CudaEvent(self.cp.cuda.Event())

    def synchronize(self) -> None:
        with self.device:
            self.rt.deviceSynchronize()

