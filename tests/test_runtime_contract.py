"""The Runtime contract every plugin keeps, checked on every available device through its raw runtime."""
from __future__ import annotations

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.plugin import DeviceArray, DeviceProperties, Event, Stream
from hwadapter.runtime.device import get

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"]
SIZES = [0, 1, 7, 1001, 1 << 16]


def _random(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 100).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", SIZES)
def test_tensor_round_trip(device, dtype, size):
    host = _random((size,), dtype)
    t = hw.to_tensor(host, device=device)
    assert t.device is get(device) and t.dtype == np.dtype(dtype) and t.shape == (size,)
    np.testing.assert_array_equal(t.numpy(), host)


@pytest.mark.parametrize("size", SIZES)
def test_raw_copies_memset_and_device_to_device(device, size):
    rt = get(device).runtime
    host = _random((size,), "float32", seed=size)
    nbytes = max(host.nbytes, 1)
    a, b = rt.allocate(nbytes), rt.allocate(nbytes)
    try:
        if size:
            rt.copy_h2d(a, 0, host)
            rt.copy_d2d(b, 0, a, 0, host.nbytes)
            out = np.empty_like(host)
            rt.copy_d2h(out, b, 0)
            np.testing.assert_array_equal(out, host)
            rt.memset(b, 0, 0x7F, host.nbytes)
            rt.copy_d2h(out, b, 0)
            assert (out.view(np.uint8) == 0x7F).all()
    finally:
        rt.free(a)
        rt.free(b)


def test_copies_at_offsets(device):
    rt = get(device).runtime
    buf = rt.allocate(64)
    try:
        rt.copy_h2d(buf, 0, np.zeros(64, np.uint8))
        rt.copy_h2d(buf, 10, np.arange(1, 6, dtype=np.uint8))
        out = np.empty(8, np.uint8)
        rt.copy_d2h(out, buf, 8)
        np.testing.assert_array_equal(out, [0, 0, 1, 2, 3, 4, 5, 0])
    finally:
        rt.free(buf)


def test_async_copies_on_a_stream_keep_their_order(device):
    rt = get(device).runtime
    stream = rt.create_stream()
    assert isinstance(stream, Stream)
    n = 1 << 18
    first, second = np.full(n, 1.0, np.float32), np.full(n, 2.0, np.float32)
    buf = rt.allocate(first.nbytes)
    try:
        rt.copy_h2d(buf, 0, first, stream)
        rt.copy_h2d(buf, 0, second, stream)  # must land after the first
        out = np.empty(n, np.float32)
        rt.copy_d2h(out, buf, 0, stream)
        stream.synchronize()
        assert stream.query()
        np.testing.assert_array_equal(out, second)
    finally:
        rt.free(buf)


def test_events_order_work_across_two_streams(device):
    rt = get(device).runtime
    s1, s2 = rt.create_stream(), rt.create_stream()
    event = rt.create_event()
    assert isinstance(event, Event)
    n = 1 << 18
    data = np.arange(n, dtype=np.float32)
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
        assert event.query()
        np.testing.assert_array_equal(out, data)
    finally:
        rt.synchronize()
        rt.free(a)
        rt.free(b)


def test_properties_and_memory_info(device):
    rt = get(device).runtime
    props = hw.device.get_device_properties(device)
    assert isinstance(props, DeviceProperties) and props.name
    free, total = rt.memory_info()
    assert 0 <= free <= total or total == 0


def test_device_array_round_trip_through_the_allocator(device):
    dev = get(device)
    if dev.host_memory:
        pytest.skip(f"{device} keeps tensors in host memory (numpy); its allocator is not used")
    host = _random((33, 5), "float64")
    arr = DeviceArray.from_numpy(dev, host)
    np.testing.assert_array_equal(arr.numpy(), host)
    np.testing.assert_array_equal(arr.reshape((5, 33)).numpy(), host.reshape(5, 33))


def test_synchronize_through_the_device_api(device):
    t = hw.to_tensor(np.ones(10, np.float32), device=device)
    hw.device.synchronize(device)
    assert t.numpy().sum() == 10


def test_device_array_reshape_takes_one_minus_one_as_the_reshape_op_does():
    """The reshape op's shape rule infers one -1 (numpy's); a subgraph reshaping a DeviceArray by that attribute
    failed on cuda:0 with "cannot reshape (3, 4, 2, 2) to (3, 2, -1)" (ONNX GroupNormalization, found on an H100)."""
    dev = get("testdev:0")
    arr = DeviceArray.empty(dev, (3, 4, 2, 2), np.dtype("float32"))
    assert arr.reshape((3, 2, -1)).shape == (3, 2, 8)
    assert arr.reshape((-1,)).shape == (48,)
    for bad in [(3, -1, -1), (5, -1), (7, 7)]:
        with pytest.raises(ValueError, match="cannot reshape"):
            arr.reshape(bad)
