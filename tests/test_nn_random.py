"""hwadapter.random, the counter-based generator behind dropout: rough uniformity and independence, determinism
under hw.seed, one stream per device, and a to_static plan that draws anew at every call (never a baked mask)."""
from __future__ import annotations

import numpy as np
import pytest

import hwadapter as hw
import hwadapter.nn.functional as F
from hwadapter import InvalidArgumentError, UnsupportedDTypeError
from hwadapter import random as hw_random

DEVICES = ["cpu:0"] + (["opencl:0"] if "opencl:0" in hw.device.get_available_device() else [])


@pytest.fixture(scope="module", autouse=True)
def _rng_state_allocated():
    """The per-device stream's state lives as long as the process: made before the leak check's baseline."""
    for d in DEVICES:
        hw_random.state(d)


def test_draws_are_roughly_uniform_and_independent():
    hw.seed(11)
    a = hw_random.uniform([1 << 16]).numpy().astype(np.float64)
    b = hw_random.uniform([1 << 16]).numpy().astype(np.float64)
    n = a.size
    assert a.min() >= 0 and a.max() < 1
    assert abs(a.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)  # 5 standard errors
    assert abs(a.var() - 1 / 12) < 0.003
    counts = np.histogram(a, 64, (0, 1))[0]
    chi2 = ((counts - n / 64) ** 2 / (n / 64)).sum()
    assert chi2 < 63 + 5 * np.sqrt(2 * 63)  # chi-square with 63 degrees of freedom, 5 sigma
    for u, v in ((a[:-1], a[1:]), (a, b), (a[: n // 2], a[n // 2:])):  # neighbours, successive draws, halves
        assert abs(np.corrcoef(u, v)[0, 1]) < 5 / np.sqrt(u.size)


def test_seed_restarts_every_stream_and_counters_advance():
    hw.seed(5)
    first = [hw_random.uniform([8]).numpy() for _ in range(3)]
    hw.seed(5)
    again = [hw_random.uniform([8]).numpy() for _ in range(3)]
    np.testing.assert_array_equal(first, again)
    assert len({row.tobytes() for row in first}) == 3
    hw.seed(6)
    assert not np.array_equal(hw_random.uniform([8]).numpy(), first[0])
    hw.seed(5)
    seed_buf, counter_buf = hw_random.state("cpu:0")
    hw_random.uniform([4])
    assert counter_buf.item() == 1 and counter_buf.dtype == np.int64 and counter_buf.persistable


@pytest.mark.parametrize("dev", DEVICES)
def test_every_device_draws_the_same_stream(dev):
    hw.seed(9)
    cpu = hw_random.uniform([1000]).numpy()
    out = hw_random.uniform([1000], device=dev)
    assert str(out.device) == dev
    if dev != "cpu:0":
        np.testing.assert_array_equal(out.numpy(), cpu)  # each device's counter restarted at 0 by hw.seed


def test_dtypes_keep_values_below_one():
    for dtype, bits in (("float16", 11), ("float32", 24), ("float64", 31)):
        u = hw_random.uniform([4096], dtype).numpy()
        assert u.dtype == dtype and u.max() < 1 and u.min() >= 0
        np.testing.assert_array_equal(u * 2.0 ** bits, np.round(u * 2.0 ** bits))
    with pytest.raises(UnsupportedDTypeError, match="uniform: random values need a floating dtype"):
        hw_random.uniform([3], "int32")
    with pytest.raises(InvalidArgumentError, match="at most"):
        hw_random.uniform([1 << 16, 1 << 16])


def test_to_static_draws_a_new_mask_at_every_call_as_eager_does():
    x = hw.ones([64])

    @hw.jit.to_static
    def drop(x):
        return F.dropout(x, 0.5) + F.dropout(x, 0.5)  # two draws in one trace: two different masks

    hw.seed(2)
    eager = [(F.dropout(x, 0.5) + F.dropout(x, 0.5)).numpy() for _ in range(3)]
    hw.seed(2)
    static = [drop(x).numpy() for _ in range(3)]
    np.testing.assert_array_equal(static, eager)
    assert len({s.tobytes() for s in static}) == 3
    assert set(np.unique(static[0])) <= {0.0, 2.0, 4.0} and 2.0 in static[0]


def test_a_stream_made_before_the_device_registry_was_reset_is_made_again_on_the_new_device():
    from hwadapter.runtime import device as _device
    hw_random.uniform([4])
    _device.devices.reset()  # cpu:0 is a new Device object now; the old stream's buffers live on the old one
    hw.seed(3)
    a = hw_random.uniform([4]).numpy()
    hw.seed(3)
    np.testing.assert_array_equal(hw_random.uniform([4]).numpy(), a)
