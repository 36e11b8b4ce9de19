"""The caching allocator: keeps freed device blocks for reuse, on top of a runtime's allocate/free."""
from __future__ import annotations

import bisect
import threading

from ..api.errors import HwAdapterError, OutOfMemoryError
from . import contract

_ROUND = 512


def round_size(nbytes: int) -> int:
    """The size class of a request: whole 512-byte units, so near sizes share blocks."""
    return max(_ROUND, (nbytes + _ROUND - 1) // _ROUND * _ROUND)


class Block:
    """One device allocation lent to a tensor; returns to the cache when the last reference goes."""

    __slots__ = ("allocator", "handle", "size", "requested", "__weakref__")

    def __init__(self, allocator, handle, size, requested):
        self.allocator, self.handle, self.size, self.requested = allocator, handle, size, requested

    def __del__(self):
        allocator = self.allocator
        if allocator is not None:
            self.allocator = None
            # CachingAllocator.release, inline: every eager op's output comes back here
            with allocator._lock:
                allocator.allocated -= self.size
                allocator.live_blocks -= 1
                bucket = allocator._free.get(self.size)
                if bucket is not None:
                    bucket.append(self.handle)
                    return
            allocator.release(self, counted=True)


_new = object.__new__


class CachingAllocator:
    """Best-fit reuse of freed blocks; empties itself and retries once when the device runs out."""

    def __init__(self, runtime, device_name: str, device=None):
        self.runtime, self.device_name = runtime, device_name
        #: what errors name when the runtime misbehaves: the Device (its plugin and distribution), else its name
        self.owner = device if device is not None else device_name
        self._free: dict[int, list] = {}
        self._free_sizes: list[int] = []  # sorted sizes of self._free's buckets (some may be empty)
        self._lock = threading.Lock()
        self.allocated = self.reserved = self.peak_allocated = 0
        self.live_blocks = self.device_allocs = self.device_frees = self.requests = self.cache_hits = 0
        self.oom_retries = 0

    def malloc(self, nbytes: int) -> Block:
        """A block of at least `nbytes` bytes, reused from the cache when one fits."""
        size = (nbytes + _ROUND - 1) // _ROUND * _ROUND or _ROUND  # round_size, inline: every eager op is here
        with self._lock:  # the cache-hit path takes the lock once
            self.requests += 1
            bucket = self._free.get(size)
            if bucket:  # an exact fit: what a repeated op finds
                handle = bucket.pop()
            else:
                handle, size = self._take_cached(size)
            if handle is not None:
                self.cache_hits += 1
                self.allocated = allocated = self.allocated + size  # _lend, inline: this is the warm path
                self.live_blocks += 1
                if allocated > self.peak_allocated:
                    self.peak_allocated = allocated
                block = _new(Block)  # not Block(): one Python call fewer
                block.allocator, block.handle, block.size, block.requested = self, handle, size, nbytes
                return block
        handle = self._allocate_device(size, nbytes)
        with self._lock:
            self._lend(size)
        return Block(self, handle, size, nbytes)

    def _lend(self, size: int) -> None:
        self.allocated += size
        self.live_blocks += 1
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated

    def _take_cached(self, size: int):
        # Best fit, but never hand out a block more than twice the request: that would waste the rest. Emptied
        # buckets stay listed (a repeated op empties and refills one on every call), so skip them.
        sizes = self._free_sizes
        for i in range(bisect.bisect_left(sizes, size), len(sizes)):
            found = sizes[i]
            if found > 2 * size:
                break
            bucket = self._free[found]
            if bucket:
                return bucket.pop(), found
        return None, size

    def _allocate_device(self, size: int, nbytes: int):
        try:
            handle = self._allocate(size)
        except OutOfMemoryError:
            self.oom_retries += 1
            self.empty_cache()
            try:
                handle = self._allocate(size)
            except OutOfMemoryError as err:
                raise OutOfMemoryError(
                    f"{self.device_name}: out of memory allocating {nbytes} bytes (block of {size}) even after "
                    f"emptying the cache; allocated {self.allocated} bytes in {self.live_blocks} live blocks, "
                    f"peak {self.peak_allocated}. Fix: release tensors you no longer need, use smaller "
                    f"batches, or move work to another device. Device said: {err}") from None
        with self._lock:
            self.reserved += size
            self.device_allocs += 1
        return handle

    def _allocate(self, size: int):
        """The runtime's allocate(size), checked: a raw MemoryError is an OutOfMemoryError (retried), another raw
        exception or a None handle a PluginError naming the plugin."""
        try:
            handle = self.runtime.allocate(size)
        except HwAdapterError:
            raise
        except MemoryError as err:
            raise contract.out_of_memory(self.owner, f"Runtime.allocate({size})", err) from err
        except Exception as err:
            raise contract.raised(self.owner, f"Runtime.allocate({size})", err) from err
        if handle is None:  # every later copy or kernel would fail on it, far from here
            raise contract.returned(self.owner, f"Runtime.allocate({size})", handle, "a handle of device memory")
        return handle

    def release(self, block: Block, counted: bool = False) -> None:
        """Take a block back into the cache (called when its last reference goes; `counted`: the caller already
        took it off the live counts)."""
        with self._lock:
            if not counted:
                self.allocated -= block.size
                self.live_blocks -= 1
            bucket = self._free.get(block.size)
            if bucket is None:
                self._free[block.size] = [block.handle]
                bisect.insort(self._free_sizes, block.size)
            else:
                bucket.append(block.handle)

    def empty_cache(self) -> None:
        """Give every cached (unused) block back to the device."""
        with self._lock:
            free, self._free, self._free_sizes = self._free, {}, []
        for size, handles in free.items():
            for handle in handles:
                contract.call(self.owner, "free", self.runtime.free, handle)
                with self._lock:
                    self.reserved -= size
                    self.device_frees += 1

    def stats(self) -> dict:
        """Bytes allocated (in use), reserved (held from the device), peak, and counts."""
        with self._lock:
            cached = sum(size * len(h) for size, h in self._free.items())
            return {"allocated_bytes": self.allocated, "reserved_bytes": self.reserved,
                    "cached_bytes": cached, "peak_allocated_bytes": self.peak_allocated,
                    "live_blocks": self.live_blocks, "num_alloc_requests": self.requests,
                    "num_cache_hits": self.cache_hits, "num_device_allocs": self.device_allocs,
                    "num_device_frees": self.device_frees, "num_oom_retries": self.oom_retries}

    def reset_peak(self) -> None:
        """Start measuring the peak from the current allocation."""
        with self._lock:
            self.peak_allocated = self.allocated

