"""float16 without native half types: the C helpers and OpenCL vload/vstore_half against numpy, bit for bit."""

import numpy as np
import pytest

import hwadapter_kp as kp
import kp_harness as H
from hwadapter_kp import library

EDGES = np.array([0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e9, -1e9, 2.0**-24, 2.0**-25, 2.0**-25 * 1.0001,
                  2.0**-24 * 1.5, 2.0**-24 * 2.5, 2.0**-14, 2.0**-14 * (1 - 2.0**-11), 1 + 2.0**-11,
                  1 + 3 * 2.0**-11, np.inf, -np.inf, np.nan, 3.14159, -2.71828], np.float32)


def _float32_samples():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    narrow = rng.uniform(-7e4, 7e4, 50_000).astype(np.float32)     # mostly in half range
    tiny = rng.uniform(-1e-4, 1e-4, 50_000).astype(np.float32)     # subnormal halves
    return np.concatenate([EDGES, bits.view(np.float32), narrow, tiny])


def _same_half(a, b):
    assert a.dtype == b.dtype == np.float16
    nan = np.isnan(a)
    np.testing.assert_array_equal(nan, np.isnan(b))
    np.testing.assert_array_equal(a[~nan].view(np.uint16), b[~nan].view(np.uint16))


def _runners():
    yield "c", H.run_c
    env, _ = H.cl_env()
    if env is not None:
        yield "opencl", H.run_cl


@pytest.mark.parametrize("backend", ["c", "opencl"])
def test_every_half_converts_to_float_exactly(backend):
    run = dict(_runners()).get(backend)
    if run is None:
        pytest.skip("no OpenCL platform")
    x = np.arange(2**16, dtype=np.uint16).view(np.float16)
    p = library.get("cast").specialize_for({"x": x}, dtypes={"U": "float32"})
    got = run(p, {"x": x})["out"]
    nan = np.isnan(x)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), x[~nan].astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("backend", ["c", "opencl"])
def test_float_to_half_rounds_to_nearest_even(backend):
    run = dict(_runners()).get(backend)
    if run is None:
        pytest.skip("no OpenCL platform")
    x = _float32_samples()
    p = library.get("cast").specialize_for({"x": x}, dtypes={"U": "float16"})
    with np.errstate(all="ignore"):
        _same_half(run(p, {"x": x})["out"], x.astype(np.float16))


@pytest.mark.parametrize("backend", ["c", "opencl"])
def test_cast_to_half_inside_a_computation_rounds(backend):
    run = dict(_runners()).get(backend)
    if run is None:
        pytest.skip("no OpenCL platform")

    @kp.kernel
    def through_half(x: kp.In["float32"], out: kp.Out["float32"]):
        kp.write(out, kp.cast(kp.cast(kp.read(x), "float16"), "float32"))
    x = _float32_samples()[:60_000]
    got = run(through_half.specialize_for({"x": x}), {"x": x})["out"]
    with np.errstate(all="ignore"):
        expected = x.astype(np.float16).astype(np.float32)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan], expected[~nan])


def _float64_samples():
    """Random doubles, every finite half, the ties between neighbouring halves and the doubles either side of them."""
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2**63, 100_000, dtype=np.uint64) | (rng.integers(0, 2, 100_000, dtype=np.uint64) << 63)
    scaled = rng.standard_normal(50_000) * 10.0 ** rng.integers(-10, 6, 50_000)
    halves = np.arange(2**16, dtype=np.uint16).view(np.float16)
    halves = np.sort(halves[np.isfinite(halves)].astype(np.float64))
    ties = (halves[:-1] + halves[1:]) / 2
    return np.concatenate([EDGES.astype(np.float64), bits.view(np.float64), scaled, halves, ties,
                           np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf), [65519.99999999, 1 + 2.0**-40]])


@pytest.mark.parametrize("backend", ["c", "opencl"])
def test_double_to_half_rounds_once(backend):
    """float64 -> float16 in one rounding: through float32 a double just below a tie would round up twice."""
    run = dict(_runners()).get(backend)
    if run is None:
        pytest.skip("no OpenCL platform")
    x = _float64_samples()
    p = library.get("cast").specialize_for({"x": x}, dtypes={"U": "float16"})
    with np.errstate(all="ignore"):
        _same_half(run(p, {"x": x})["out"], x.astype(np.float16))


@pytest.mark.parametrize("backend", ["c", "opencl"])
@pytest.mark.parametrize("source", ["float32", "float64"])
def test_nan_keeps_its_sign_as_half(backend, source):
    """A NaN stored as float16 keeps its sign (numpy's conversion does): abs(nan) is not a negative NaN."""
    run = dict(_runners()).get(backend)
    if run is None:
        pytest.skip("no OpenCL platform")
    x = np.array([np.nan, -np.nan, np.inf, -np.inf], source)
    got = run(library.get("cast").specialize_for({"x": x}, dtypes={"U": "float16"}), {"x": x})["out"]
    np.testing.assert_array_equal(np.signbit(got), np.signbit(x))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
