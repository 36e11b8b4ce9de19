"""The runtime contract: copies round-trip every dtype at sizes 0, 1, odd and large; memset; async copies keep their
order on a stream; events order work across streams; synchronize; memory stats and accounting; out-of-memory at the
stated capacity; invalid handles and double frees raise instead of crashing."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.api import dtypes
from hwadapter.api.errors import OutOfMemoryError
from hwadapter.api.interfaces import Event, Stream
from hwadapter.runtime.memory import DeviceArray

pytestmark = pytest.mark.usefixtures("kit_live_bytes")

DTYPES = [d.name for d in dtypes.ALL]  # every dtype hwadapter supports
SIZES = [0, 1, 7, 1001, 1 << 20]


@pytest.fixture(autouse=True)
def _empty_cache(kit_device):
    """The allocator's cached blocks given back first: the raw allocations here share the device's memory with them."""
    hw.device.empty_cache(kit_device)


def _random(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 100).astype(dtype)


def _device_memory(dev):
    if dev.host_memory:
        pytest.skip(f"{dev} keeps tensors in host memory (numpy arrays): hwadapter never calls its allocate/free")


@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_round_trip(kit_dev, dtype):
    rt = kit_dev.runtime
    for size in SIZES:
        host = _random((size,), dtype, seed=size)
        buf = rt.allocate(max(host.nbytes, 1))
        try:
            rt.copy_h2d(buf, 0, host)
            out = np.empty_like(host)
            rt.copy_d2h(out, buf, 0)
            np.testing.assert_array_equal(out, host, err_msg=f"{dtype}[{size}] after copy_h2d then copy_d2h")
        finally:
            rt.free(buf)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_round_trip(kit_device, dtype):
    from hwadapter.runtime.device import get
    for size in SIZES:
        host = _random((size,), dtype, seed=size)
        t = hw.to_tensor(host, device=kit_device)
        assert t.device is get(kit_device) and t.dtype == np.dtype(dtype) and t.shape == (size,)
        np.testing.assert_array_equal(t.numpy(), host, err_msg=f"{dtype}[{size}]")
        del t


@pytest.mark.parametrize("size", [0, 1, 1001])
def test_memset_and_device_to_device_copy(kit_dev, size):
    rt = kit_dev.runtime
    host = _random((size,), "float32", seed=size)
    nbytes = max(host.nbytes, 1)
    a, b = rt.allocate(nbytes), rt.allocate(nbytes)
    try:
        rt.copy_h2d(a, 0, host)
        rt.copy_d2d(b, 0, a, 0, host.nbytes)
        out = np.empty_like(host)
        rt.copy_d2h(out, b, 0)
        np.testing.assert_array_equal(out, host)
        rt.memset(b, 0, 0x7F, host.nbytes)
        rt.copy_d2h(out, b, 0)
        assert (out.view(np.uint8) == 0x7F).all(), "memset(0x7F) did not set every byte"
    finally:
        rt.free(a)
        rt.free(b)


def test_copies_at_offsets(kit_dev):
    rt = kit_dev.runtime
    buf = rt.allocate(64)
    try:
        rt.copy_h2d(buf, 0, np.zeros(64, np.uint8))
        rt.copy_h2d(buf, 10, np.arange(1, 6, dtype=np.uint8))
        out = np.empty(8, np.uint8)
        rt.copy_d2h(out, buf, 8)
        np.testing.assert_array_equal(out, [0, 0, 1, 2, 3, 4, 5, 0])
    finally:
        rt.free(buf)


def test_async_copies_on_a_stream_keep_their_order(kit_dev):
    rt = kit_dev.runtime
    stream = rt.create_stream()
    assert isinstance(stream, Stream), f"create_stream() returned {type(stream).__name__}, not a Stream"
    n = 1 << 18
    first, second = np.full(n, 1.0, np.float32), np.full(n, 2.0, np.float32)
    buf = rt.allocate(first.nbytes)
    try:
        rt.copy_h2d(buf, 0, first, stream)
        rt.copy_h2d(buf, 0, second, stream)  # must land after the first
        out = np.empty(n, np.float32)
        rt.copy_d2h(out, buf, 0, stream)
        stream.synchronize()
        assert stream.query(), "query() is False after synchronize()"
        np.testing.assert_array_equal(out, second)
    finally:
        rt.synchronize()
        rt.free(buf)


def test_events_order_work_across_two_streams(kit_dev):
    rt = kit_dev.runtime
    s1, s2 = rt.create_stream(), rt.create_stream()
    event = rt.create_event()
    assert isinstance(event, Event), f"create_event() returned {type(event).__name__}, not an Event"
    data = np.arange(1 << 18, dtype=np.float32)
    a, b = rt.allocate(data.nbytes), rt.allocate(data.nbytes)
    try:
        rt.copy_h2d(a, 0, data, s1)
        event.record(s1)
        s2.wait_event(event)
        rt.copy_d2d(b, 0, a, 0, data.nbytes, s2)  # must see s1's copy
        out = np.empty_like(data)
        rt.copy_d2h(out, b, 0, s2)
        s2.synchronize()
        event.synchronize()
        assert event.query(), "query() is False after the event's synchronize()"
        np.testing.assert_array_equal(out, data)
    finally:
        rt.synchronize()
        rt.free(a)
        rt.free(b)


def test_synchronize(kit_device):
    t = hw.to_tensor(np.ones(1000, np.float32), device=kit_device)
    hw.device.synchronize(kit_device)
    assert t.numpy().sum() == 1000


def test_memory_info(kit_dev):
    free, total = kit_dev.runtime.memory_info()
    assert 0 <= free <= total or total == 0, f"memory_info() is (free {free}, total {total})"


def test_memory_stats_count_live_bytes(kit_dev):
    _device_memory(kit_dev)
    base = hw.device.memory_stats(kit_dev)
    a = DeviceArray.empty(kit_dev, (1000,), "float32")
    stats = hw.device.memory_stats(kit_dev)
    assert stats["allocated_bytes"] - base["allocated_bytes"] >= 4000
    assert stats["peak_allocated_bytes"] >= stats["allocated_bytes"]
    del a
    gc.collect()
    stats = hw.device.memory_stats(kit_dev)
    assert stats["allocated_bytes"] == base["allocated_bytes"]
    negative = {k: v for k, v in stats.items() if isinstance(v, (int, float)) and v < 0}
    assert not negative, f"negative memory stats: {negative}"


def test_free_gives_the_bytes_back(kit_dev):
    """memory_info() after allocate then free is where it was: free() keeps the accounting right."""
    _device_memory(kit_dev)
    rt, n = kit_dev.runtime, 4 << 20
    hw.device.empty_cache(kit_dev)
    free0, total = rt.memory_info()
    buf = rt.allocate(n)
    free1, _ = rt.memory_info()
    rt.free(buf)
    free2, total2 = rt.memory_info()
    assert 0 <= free2 <= total2, f"after free, memory_info() is (free {free2}, total {total2}): more free than there is"
    assert abs(free2 - free0) < n // 2, (f"free bytes were {free0} before allocate({n}), {free1} after it and {free2} "
                                         f"after free: the accounting is off by {free2 - free0}")


def test_out_of_memory_at_the_stated_capacity(kit_dev):
    _device_memory(kit_dev)
    total = kit_dev.runtime.properties().total_memory
    if not total:
        pytest.skip(f"{kit_dev} states no capacity (total_memory 0)")
    try:
        handle = kit_dev.runtime.allocate(total + 1)
    except OutOfMemoryError:
        pass
    else:
        kit_dev.runtime.free(handle)
        pytest.fail(f"allocate({total + 1}) on {kit_dev}, one byte over its stated total_memory, returned a buffer; "
                    f"it must raise hwadapter.api.errors.OutOfMemoryError")
    with pytest.raises(OutOfMemoryError):  # through the caching allocator as well
        DeviceArray.empty(kit_dev, (total + 1,), "uint8")


def test_double_free_raises(kit_dev):
    _device_memory(kit_dev)
    rt = kit_dev.runtime
    buf = rt.allocate(256)
    rt.free(buf)
    with pytest.raises(Exception):  # noqa: B017: any error, not a crash or a silent second release
        rt.free(buf)
    free, total = rt.memory_info()
    assert 0 <= free <= total, f"after a double free, memory_info() is (free {free}, total {total})"


def test_invalid_handle_raises(kit_dev):
    _device_memory(kit_dev)
    with pytest.raises(Exception):  # noqa: B017: any error, not a crash
        kit_dev.runtime.free(object())
