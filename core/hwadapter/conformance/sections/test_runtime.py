"""The runtime contract: copies round-trip every dtype at sizes 0, 1, odd and large; memset; async copies keep their
order on a stream; events order work across streams; synchronize; memory stats and accounting; out-of-memory at the
stated capacity; invalid handles and double frees raise instead of crashing."""
from __future__ import annotations

import functools
import gc

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import host
from hwadapter.plugin import DeviceArray, Event, OutOfMemoryError, Runtime, Stream, dtypes

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


def _reproduce(dev, *steps: str) -> str:
    """The Python lines that show a runtime defect on dev, in the Runtime's own calls."""
    return (f"Reproduce: import numpy as np; from hwadapter import host; rt = host.device({str(dev)!r}).runtime; "
            + "; ".join(steps))


def _bytes(a: np.ndarray) -> str:
    """The non-zero bytes of a small uint8 array, by offset (what a reader compares at a glance)."""
    nonzero = {int(i): int(a[i]) for i in np.flatnonzero(a)}
    return f"non-zero bytes {nonzero}" if nonzero else "all bytes zero"


def _differ(got: np.ndarray, want: np.ndarray) -> str | None:
    """Where two host arrays of one dtype differ, in bytes (None when they are equal)."""
    g, w = got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8)
    if g.shape == w.shape and np.array_equal(g, w):
        return None
    bad = np.flatnonzero(g != w) if g.shape == w.shape else np.array([0])
    return (f"{len(bad)} of {w.size} bytes differ, the first at byte {int(bad[0])} (got {int(g[bad[0]])}, expected "
            f"{int(w[bad[0]])})")


def _round_trip(rt, dev, host_array: np.ndarray, label: str) -> None:
    """copy_h2d then copy_d2h of host_array through a fresh allocation; fails saying which call did what."""
    nbytes = max(host_array.nbytes, 1)
    steps = (f"h = rt.allocate({nbytes}); a = (np.arange({host_array.nbytes}) % 251).astype(np.uint8); "
             f"rt.copy_h2d(h, 0, a); b = np.empty_like(a); rt.copy_d2h(b, h, 0); assert (a == b).all()")
    buf = rt.allocate(nbytes)
    try:
        out = np.empty_like(host_array)
        try:
            rt.copy_h2d(buf, 0, host_array)
            rt.copy_d2h(out, buf, 0)
        except Exception as err:  # noqa: BLE001: whatever the runtime raised is the finding
            pytest.fail(f"{label}: copy_h2d then copy_d2h of {host_array.nbytes} bytes at offset 0 of allocate({nbytes}) "
                        f"raised {type(err).__name__}: {err}. A buffer from allocate(n) must hold n bytes, and the "
                        f"copies must take any byte count up to it. {_reproduce(dev, steps)}")
        wrong = _differ(out, host_array)
        if wrong:
            pytest.fail(f"{label}: copy_h2d then copy_d2h of {host_array.nbytes} bytes through allocate({nbytes}) "
                        f"read back other bytes: {wrong}. The copies must move the bytes unchanged. "
                        f"{_reproduce(dev, steps)}")
    finally:
        rt.free(buf)


def test_allocate_gives_the_bytes_asked_for(kit_dev):
    """A buffer from allocate(n) holds n bytes: every byte written at offset 0 reads back."""
    rt = kit_dev.runtime
    for n in (1, 4097, 1 << 20):
        _round_trip(rt, kit_dev, (np.arange(n) % 251 + 1).astype(np.uint8), f"allocate({n})")


@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_round_trip(kit_dev, dtype):
    rt = kit_dev.runtime
    for size in SIZES:
        _round_trip(rt, kit_dev, _random((size,), dtype, seed=size), f"{dtype}[{size}]")


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_round_trip(kit_device, dtype):
    dev = host.device(kit_device)
    for size in SIZES:
        data = _random((size,), dtype, seed=size)
        t = hw.to_tensor(data, device=kit_device)
        assert t.device is dev and t.dtype == np.dtype(dtype) and t.shape == (size,), (
            f"hwadapter.to_tensor of {dtype}[{size}] on {kit_device} gave a tensor on {t.device}, {t.dtype}"
            f"{list(t.shape)}")
        wrong = _differ(t.numpy(), data)
        assert not wrong, (f"{dtype}[{size}] through a tensor on {kit_device} (allocate, copy_h2d, then copy_d2h) "
                           f"came back changed: {wrong}. Reproduce: import hwadapter as hw, numpy as np; "
                           f"x = np.arange({size}).astype({dtype!r}); "
                           f"assert (hw.to_tensor(x, device={kit_device!r}).numpy() == x).all()")
        del t


@pytest.mark.parametrize("size", [0, 1, 1001])
def test_memset_and_device_to_device_copy(kit_dev, size):
    rt = kit_dev.runtime
    data = _random((size,), "float32", seed=size)
    nbytes = max(data.nbytes, 1)
    a, b = rt.allocate(nbytes), rt.allocate(nbytes)
    try:
        rt.copy_h2d(a, 0, data)
        rt.copy_d2d(b, 0, a, 0, data.nbytes)
        out = np.empty_like(data)
        rt.copy_d2h(out, b, 0)
        wrong = _differ(out, data)
        assert not wrong, (
            f"copy_d2d(b, 0, a, 0, {data.nbytes}) did not copy a's bytes into b: {wrong}. It must copy nbytes bytes "
            f"from src at src_offset to dst at dst_offset. " + _reproduce(
                kit_dev, f"a, b = rt.allocate({nbytes}), rt.allocate({nbytes})",
                f"x = np.arange({data.nbytes}, dtype=np.uint8)", "rt.copy_h2d(a, 0, x)",
                f"rt.copy_d2d(b, 0, a, 0, {data.nbytes})", "y = np.empty_like(x)", "rt.copy_d2h(y, b, 0)",
                "assert (x == y).all()"))
        rt.memset(b, 0, 0x7F, data.nbytes)
        rt.copy_d2h(out, b, 0)
        set_ = int((out.view(np.uint8) == 0x7F).sum())
        assert set_ == data.nbytes, (
            f"memset(b, 0, 0x7F, {data.nbytes}) set {set_} of the {data.nbytes} bytes to 0x7F: it must set nbytes bytes "
            f"from offset to the byte value. " + _reproduce(
                kit_dev, f"b = rt.allocate({nbytes})", f"rt.memset(b, 0, 0x7F, {data.nbytes})",
                f"y = np.empty({data.nbytes}, np.uint8)", "rt.copy_d2h(y, b, 0)", "assert (y == 0x7F).all()"))
    finally:
        rt.free(a)
        rt.free(b)


def test_copies_at_offsets(kit_dev):
    """Every copy and memset honours its offsets (bytes from the start of the allocation): hosts such as Paddle
    sub-allocate, and hwadapter's own views do."""
    rt = kit_dev.runtime
    buf, other = rt.allocate(64), rt.allocate(64)
    five = np.arange(1, 6, dtype=np.uint8)
    setup = ["h = rt.allocate(64)", "rt.copy_h2d(h, 0, np.zeros(64, np.uint8))"]
    try:
        rt.copy_h2d(buf, 0, np.zeros(64, np.uint8))
        rt.copy_h2d(buf, 10, five)
        whole = np.empty(64, np.uint8)
        rt.copy_d2h(whole, buf, 0)
        want = np.zeros(64, np.uint8)
        want[10:15] = five
        assert np.array_equal(whole, want), (
            f"copy_h2d(h, 10, bytes 1..5) into 64 zero bytes left {_bytes(whole)}; expected {_bytes(want)}: copy_h2d "
            f"must write at dst_offset. " + _reproduce(kit_dev, *setup, "rt.copy_h2d(h, 10, np.arange(1, 6, dtype="
                                                        "np.uint8))", "y = np.empty(64, np.uint8)", "rt.copy_d2h(y, h, 0)",
                                                        "print(y[:16])"))
        out = np.empty(8, np.uint8)
        rt.copy_d2h(out, buf, 8)
        assert out.tolist() == want[8:16].tolist(), (
            f"copy_d2h(y, h, 8) of 8 bytes read {out.tolist()} from a buffer holding {_bytes(want)}; expected bytes "
            f"8..15, {want[8:16].tolist()}: copy_d2h must read from src_offset. " + _reproduce(
                kit_dev, *setup, "rt.copy_h2d(h, 10, np.arange(1, 6, dtype=np.uint8))", "y = np.empty(8, np.uint8)",
                "rt.copy_d2h(y, h, 8)", "print(y)"))
        rt.copy_h2d(other, 0, np.zeros(64, np.uint8))
        rt.copy_d2d(other, 30, buf, 10, 5)
        rt.copy_d2h(whole, other, 0)
        want_d2d = np.zeros(64, np.uint8)
        want_d2d[30:35] = five
        assert np.array_equal(whole, want_d2d), (
            f"copy_d2d(g, 30, h, 10, 5) from a buffer holding {_bytes(want)} into 64 zero bytes left {_bytes(whole)}; "
            f"expected {_bytes(want_d2d)}: copy_d2d must read at src_offset and write at dst_offset. " + _reproduce(
                kit_dev, *setup, "rt.copy_h2d(h, 10, np.arange(1, 6, dtype=np.uint8))", "g = rt.allocate(64)",
                "rt.copy_h2d(g, 0, np.zeros(64, np.uint8))", "rt.copy_d2d(g, 30, h, 10, 5)", "y = np.empty(64, np.uint8)",
                "rt.copy_d2h(y, g, 0)", "print(y[24:40])"))
        rt.memset(other, 40, 9, 3)
        rt.copy_d2h(whole, other, 0)
        want_d2d[40:43] = 9
        assert np.array_equal(whole, want_d2d), (
            f"memset(g, 40, 9, 3) left {_bytes(whole)}; expected {_bytes(want_d2d)}: memset must set nbytes bytes "
            f"from offset. " + _reproduce(
                kit_dev, *setup, "rt.memset(h, 40, 9, 3)", "y = np.empty(64, np.uint8)", "rt.copy_d2h(y, h, 0)",
                "print(y[32:48])"))
    finally:
        rt.free(buf)
        rt.free(other)


def test_async_copies_on_a_stream_keep_their_order(kit_dev):
    rt = kit_dev.runtime
    stream = rt.create_stream()
    assert isinstance(stream, Stream), (f"create_stream() returned {type(stream).__name__}: it must return a "
                                        f"hwadapter.plugin.Stream (HostStream for a runtime without streams)")
    n = 1 << 18
    first, second = np.full(n, 1.0, np.float32), np.full(n, 2.0, np.float32)
    buf = rt.allocate(first.nbytes)
    try:
        rt.copy_h2d(buf, 0, first, stream)
        rt.copy_h2d(buf, 0, second, stream)  # must land after the first
        out = np.empty(n, np.float32)
        rt.copy_d2h(out, buf, 0, stream)
        stream.synchronize()
        assert stream.query(), "Stream.query() is False after Stream.synchronize(): it must be True once all is done"
        ones = int((out == 1.0).sum())
        assert ones == 0 and (out == 2.0).all(), (
            f"two copy_h2d on one stream to the same bytes, then copy_d2h on it: {ones} of {n} floats hold the first "
            f"copy's 1.0 where the second's 2.0 is expected: work on one stream must run in the order it was queued. "
            + _reproduce(kit_dev, "s = rt.create_stream()", f"h = rt.allocate({first.nbytes})",
                         f"rt.copy_h2d(h, 0, np.full({n}, 1.0, np.float32), s)",
                         f"rt.copy_h2d(h, 0, np.full({n}, 2.0, np.float32), s)", f"y = np.empty({n}, np.float32)",
                         "rt.copy_d2h(y, h, 0, s)", "s.synchronize()", "assert (y == 2.0).all()"))
    finally:
        rt.synchronize()
        rt.free(buf)


def test_events_order_work_across_two_streams(kit_dev):
    rt = kit_dev.runtime
    s1, s2 = rt.create_stream(), rt.create_stream()
    event = rt.create_event()
    assert isinstance(event, Event), (f"create_event() returned {type(event).__name__}: it must return a "
                                      f"hwadapter.plugin.Event (HostEvent for a runtime without streams)")
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
        assert event.query(), "Event.query() is False after Event.synchronize(): it must be True once it is reached"
        wrong = _differ(out, data)
        assert not wrong, (
            f"copy_h2d on stream s1, event.record(s1), s2.wait_event(event), then copy_d2d and copy_d2h on s2: the "
            f"copy on s2 did not see s1's data ({wrong}): work queued on s2 after wait_event must wait for what s1 "
            f"queued before record. " + _reproduce(
                kit_dev, "s1, s2, e = rt.create_stream(), rt.create_stream(), rt.create_event()",
                f"x = np.arange({data.size}, dtype=np.float32)", f"a, b = rt.allocate({data.nbytes}), "
                f"rt.allocate({data.nbytes})", "rt.copy_h2d(a, 0, x, s1)", "e.record(s1)", "s2.wait_event(e)",
                f"rt.copy_d2d(b, 0, a, 0, {data.nbytes}, s2)", "y = np.empty_like(x)", "rt.copy_d2h(y, b, 0, s2)",
                "s2.synchronize()", "assert (x == y).all()"))
    finally:
        rt.synchronize()
        rt.free(a)
        rt.free(b)


def test_synchronize(kit_device):
    t = hw.to_tensor(np.ones(1000, np.float32), device=kit_device)
    hw.device.synchronize(kit_device)
    total = t.numpy().sum()
    assert total == 1000, (f"1000 float32 ones uploaded to {kit_device}, Runtime.synchronize(), then read back sum to "
                           f"{total}: after synchronize every queued copy must be done")


def test_memory_info(kit_dev):
    free, total = kit_dev.runtime.memory_info()
    assert 0 <= free <= total or total == 0, (f"memory_info() is (free {free}, total {total}): it must return (free "
                                              f"bytes, total bytes) with 0 <= free <= total")


def test_memory_stats_count_live_bytes(kit_dev):
    _device_memory(kit_dev)
    base = hw.device.memory_stats(kit_dev)
    a = DeviceArray.empty(kit_dev, (1000,), "float32")
    stats = hw.device.memory_stats(kit_dev)
    grew = stats["allocated_bytes"] - base["allocated_bytes"]
    assert grew >= 4000, f"hwadapter's allocated_bytes grew by {grew} for a 4000-byte array on {kit_dev}"
    assert stats["peak_allocated_bytes"] >= stats["allocated_bytes"], f"peak below the allocated bytes: {stats}"
    del a
    gc.collect()
    stats = hw.device.memory_stats(kit_dev)
    assert stats["allocated_bytes"] == base["allocated_bytes"], (
        f"allocated_bytes is {stats['allocated_bytes']} after the array was released, {base['allocated_bytes']} "
        f"before it was made")
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
    repro = _reproduce(kit_dev, "print(rt.memory_info())", f"h = rt.allocate({n})", "rt.free(h)",
                       "print(rt.memory_info())")
    assert 0 <= free2 <= total2, (f"after free, memory_info() is (free {free2}, total {total2}): more free than there "
                                  f"is; free(h) must give back exactly what allocate took. {repro}")
    assert abs(free2 - free0) < n // 2, (f"free bytes were {free0} before allocate({n}), {free1} after it and {free2} "
                                         f"after free: the accounting is off by {free2 - free0}; free(h) must give "
                                         f"back exactly what allocate took. {repro}")


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
                    f"it must raise hwadapter.plugin.OutOfMemoryError. "
                    + _reproduce(kit_dev, f"rt.allocate(rt.properties().total_memory + 1)"))
    try:  # through hwadapter's caching allocator as well: it empties its cache and asks again, then raises
        a = DeviceArray.empty(kit_dev, (total + 1,), "uint8")
    except OutOfMemoryError:
        return
    del a
    pytest.fail(f"a {total + 1}-byte array on {kit_dev} (one byte over its stated total_memory) was allocated through "
                f"hwadapter's caching allocator; allocate must raise hwadapter.plugin.OutOfMemoryError. "
                f"Reproduce: import hwadapter as hw; hw.zeros([{total + 1}], 'uint8', device={str(kit_dev)!r})")


def test_double_free_raises(kit_dev):
    _device_memory(kit_dev)
    rt = kit_dev.runtime
    buf = rt.allocate(256)
    rt.free(buf)
    repro = _reproduce(kit_dev, "h = rt.allocate(256)", "rt.free(h)", "rt.free(h)")
    try:
        rt.free(buf)
    except Exception:  # noqa: BLE001: any error, not a crash or a silent second release
        pass
    else:
        pytest.fail(f"free(h) of an allocation already freed returned without an error on {kit_dev}: free must raise "
                    f"(e.g. hwadapter.plugin.InvalidArgumentError) for a handle that is not live, never release the "
                    f"memory a second time or ignore it. {repro}")
    free, total = rt.memory_info()
    assert 0 <= free <= total, (f"after a double free, memory_info() is (free {free}, total {total}): the refused "
                                f"second free must leave the accounting alone. {repro}")


def test_invalid_handle_raises(kit_dev):
    _device_memory(kit_dev)
    try:
        kit_dev.runtime.free(object())
    except Exception:  # noqa: BLE001: any error, not a crash
        return
    pytest.fail(f"free(object()), a handle allocate never returned, returned without an error on {kit_dev}: free "
                f"must raise (e.g. hwadapter.plugin.InvalidArgumentError) for a handle that is not live. "
                + _reproduce(kit_dev, "rt.free(object())"))


def _culprit(err: BaseException) -> str:
    """The runtime's method an error came from (the innermost frame of a Runtime, Stream or Event), in words."""
    tb, found = err.__traceback__, None
    while tb is not None:
        me = tb.tb_frame.f_locals.get("self")
        if isinstance(me, (Runtime, Stream, Event)):
            found = f"{type(me).__module__}.{type(me).__qualname__}.{tb.tb_frame.f_code.co_name}"
        tb = tb.tb_next
    return found or "a runtime call"


def _in_plugin_terms(test):
    """An error a runtime call raises fails the test naming the runtime's method, not as a bare traceback line."""
    @functools.wraps(test)
    def checked(*args, **kwargs):
        try:
            return test(*args, **kwargs)
        except (AssertionError, pytest.fail.Exception, pytest.skip.Exception, OutOfMemoryError):
            raise
        except Exception as err:  # noqa: BLE001: whatever the runtime raised is the finding
            what = (test.__doc__ or "").strip().split("\n")[0] or test.__name__.removeprefix("test_").replace("_", " ")
            pytest.fail(f"{_culprit(err)} raised {type(err).__name__}: {err}; the test checks: {what}. Each Runtime "
                        f"call must do its job for any valid argument (a buffer from allocate(n) holds n bytes)")
    return checked


for _name, _test in list(globals().items()):
    if _name.startswith("test_") and callable(_test):
        globals()[_name] = _in_plugin_terms(_test)
