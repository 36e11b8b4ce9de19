"""The caching allocator over a device with separate, limited memory (testdev)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import hwadapter as hw
import hwadapter_testdev
from hwadapter.plugin import DeviceArray
from hwadapter.runtime.allocator import CachingAllocator, round_size


@pytest.fixture
def dev(testdev):
    hw.device.empty_cache(testdev)
    return testdev


def test_freed_block_is_reused_without_a_device_allocation(dev):
    a = DeviceArray.empty(dev, (100,), "float32")
    handle = a.handle
    calls = dev.runtime.allocate_calls
    del a
    b = DeviceArray.empty(dev, (90,), "float32")  # same 512-byte size class
    assert b.handle is handle
    assert dev.runtime.allocate_calls == calls
    assert dev.allocator.stats()["num_cache_hits"] >= 1


def test_blocks_much_larger_than_the_request_are_not_handed_out(dev):
    big = DeviceArray.empty(dev, (64 * 1024,), "uint8")
    handle = big.handle
    del big
    small = DeviceArray.empty(dev, (10,), "uint8")
    assert small.handle is not handle


class _CountingRuntime:
    """Just enough runtime for a CachingAllocator: hands out fresh handles and counts the calls."""

    def __init__(self):
        self.allocate_calls = self.free_calls = 0

    def allocate(self, nbytes):
        self.allocate_calls += 1
        return ("handle", self.allocate_calls, nbytes)

    def free(self, handle):
        self.free_calls += 1


# (cached block size S, request r, reused?): a cached block is handed out iff S <= 2 * round_size(r), where
# round_size rounds up to whole 512-byte units, so the bound sits at the size class of S/2, not at S/2 bytes.
_REUSE_BOUND = [
    (8192, 4096, True),    # exactly twice the request
    (8192, 3585, True),    # rounds up to 4096: still exactly twice
    (8192, 3584, False),   # one size class below S/2: 2 * 3584 = 7168 < 8192
    (8192, 2048, False),
    (1536, 513, True),     # S not a multiple of 1024: 513 rounds to 1024, 2 * 1024 >= 1536
    (1536, 512, False),    # 2 * 512 = 1024 < 1536
    (1024, 1, True),       # the smallest class, 512, takes a cached 1024
    (65536, 32257, True),  # rounds to 32768
    (65536, 32256, False),
    (65536, 65536, True),  # exact fit
]


@pytest.mark.parametrize("cached,request_bytes,reused", _REUSE_BOUND)
def test_cached_block_is_reused_up_to_exactly_twice_the_request(cached, request_bytes, reused):
    runtime = _CountingRuntime()
    alloc = CachingAllocator(runtime, "fake:0")
    block = alloc.malloc(cached)
    handle, size = block.handle, block.size
    assert size == cached and runtime.allocate_calls == 1
    del block  # S now sits in the cache, alone
    assert alloc.stats()["cached_bytes"] == cached
    got = alloc.malloc(request_bytes)
    stats = alloc.stats()
    if reused:
        assert got.handle is handle and got.size == cached
        assert runtime.allocate_calls == 1 and stats["num_cache_hits"] == 1 and stats["num_device_allocs"] == 1
        assert stats["cached_bytes"] == 0
    else:
        assert got.handle is not handle and got.size == round_size(request_bytes)
        assert runtime.allocate_calls == 2 and stats["num_cache_hits"] == 0 and stats["num_device_allocs"] == 2
        assert stats["cached_bytes"] == cached  # the big block stays cached for a request it suits
    del got
    assert alloc.allocated == 0


def test_best_fit_prefers_the_smallest_cached_block_within_the_bound():
    runtime = _CountingRuntime()
    alloc = CachingAllocator(runtime, "fake:0")
    blocks = [alloc.malloc(n) for n in (8192, 4608, 16384)]
    handles = {b.size: b.handle for b in blocks}
    del blocks
    first = alloc.malloc(4096)
    assert first.handle is handles[4608]
    second = alloc.malloc(4096)  # 4608 is taken; 8192 is exactly twice the request
    assert second.handle is handles[8192] and runtime.allocate_calls == 3
    third = alloc.malloc(4096)  # only 16384 is left: four times the request
    assert third.handle not in handles.values() and runtime.allocate_calls == 4
    del first, second, third


def test_testdev_reuses_a_cached_block_at_twice_the_request_and_not_one_size_class_below(dev):
    big = DeviceArray.empty(dev, (8192,), "uint8")
    handle = big.handle
    del big
    calls = dev.runtime.allocate_calls
    half = DeviceArray.empty(dev, (4096,), "uint8")
    assert half.handle is handle and dev.runtime.allocate_calls == calls
    del half
    smaller = DeviceArray.empty(dev, (4096 - 512,), "uint8")
    assert smaller.handle is not handle and dev.runtime.allocate_calls == calls + 1
    del smaller


def test_stats_track_allocated_reserved_peak_and_counts(dev):
    hw.device.reset_peak_memory_stats(dev)
    base = hw.device.memory_stats(dev)
    a = DeviceArray.empty(dev, (1000,), "float32")
    b = DeviceArray.empty(dev, (10,), "float64")
    s = hw.device.memory_stats(dev)
    assert s["allocated_bytes"] - base["allocated_bytes"] == round_size(4000) + round_size(80)
    assert s["peak_allocated_bytes"] >= s["allocated_bytes"]
    assert s["live_blocks"] - base["live_blocks"] == 2
    assert s["num_alloc_requests"] - base["num_alloc_requests"] == 2
    peak = s["allocated_bytes"]
    del a, b
    s = hw.device.memory_stats(dev)
    assert s["allocated_bytes"] == base["allocated_bytes"]
    assert s["peak_allocated_bytes"] == peak
    assert s["reserved_bytes"] >= s["cached_bytes"] >= round_size(4000)


def test_empty_cache_returns_cached_blocks_to_the_device(dev):
    a = DeviceArray.empty(dev, (5000,), "uint8")
    del a
    assert dev.runtime.used > 0
    hw.device.empty_cache(dev)
    assert dev.runtime.used == 0
    assert hw.device.memory_stats(dev)["reserved_bytes"] == 0


def test_out_of_memory_empties_the_cache_and_retries_once(dev, monkeypatch):
    monkeypatch.setattr(hwadapter_testdev, "MEMORY_LIMIT", 64 * 1024)
    cached = DeviceArray.empty(dev, (40 * 1024,), "uint8")
    del cached  # 40 KiB now sits in the cache
    x = DeviceArray.empty(dev, (48 * 1024,), "uint8")  # fits only once the cache is given back
    assert dev.allocator.stats()["num_oom_retries"] == 1
    del x


def test_out_of_memory_error_names_device_size_and_stats(dev, monkeypatch):
    monkeypatch.setattr(hwadapter_testdev, "MEMORY_LIMIT", 16 * 1024)
    keep = DeviceArray.empty(dev, (8 * 1024,), "uint8")
    with pytest.raises(hw.OutOfMemoryError) as info:
        DeviceArray.empty(dev, (32 * 1024,), "uint8")
    msg = str(info.value)
    assert "testdev:0" in msg and "32768 bytes" in msg and "allocated 8192 bytes" in msg and "Fix" in msg
    del keep


def test_tensors_release_their_memory(dev):
    base = dev.allocator.allocated
    x = hw.to_tensor(np.ones((64, 64), np.float32), device=dev)
    y = x + x
    assert dev.allocator.allocated > base
    np.testing.assert_array_equal(y.numpy(), 2 * np.ones((64, 64)))
    del x, y
    gc.collect()
    assert dev.allocator.allocated == base


def test_reshape_shares_the_block_until_the_last_view_goes(dev):
    base = dev.allocator.allocated
    x = hw.to_tensor(np.arange(12, dtype=np.float32), device=dev)
    y = x.reshape((3, 4))
    assert y._data.block is x._data.block
    del x
    assert dev.allocator.allocated > base
    np.testing.assert_array_equal(y.numpy(), np.arange(12).reshape(3, 4))
    del y
    assert dev.allocator.allocated == base


def test_empty_tensors_take_no_device_memory(dev):
    calls = dev.allocator.stats()["num_alloc_requests"]
    x = hw.to_tensor(np.zeros((0, 3), np.float32), device=dev)
    assert x.shape == (0, 3) and x.numpy().shape == (0, 3)
    assert dev.allocator.stats()["num_alloc_requests"] == calls


def test_host_memory_devices_report_no_allocator_stats():
    assert hw.device.memory_stats("cpu") == {"host_memory": True}
