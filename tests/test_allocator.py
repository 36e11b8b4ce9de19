"""The caching allocator over a device with separate, limited memory (testdev)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import hwadapter as hw
import hwadapter_testdev
from hwadapter.plugin import DeviceArray
from hwadapter.runtime.allocator import round_size


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
