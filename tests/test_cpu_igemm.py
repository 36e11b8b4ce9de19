"""The CPU's implicit-product conv2d (tuning/igemm.c through blasconv.py) against the float64 reference kernel: kernel
sizes, strides, paddings, dilations, groups, batches, images whose pixels and channels are not whole register tiles,
taps past one pass of the tile, the fused bias, residual and every activation, weights packed at plan time and not,
NaN and infinities; equal filters give bit-equal channels; and which convolutions take it (the route table)."""
from __future__ import annotations

import numpy as np
import pytest

from hwadapter.plugin import reference
from hwadapter.runtime.device import get

blasconv = pytest.importorskip("hwadapter_cpu.tuning.blasconv")
KERNEL = blasconv.conv_kernel(get("cpu"))
if KERNEL.transforms.lib() is None or not KERNEL.transforms.cols or KERNEL.transforms.crew() is None:
    pytest.skip("igemm.c is not built here (no C compiler, or a compiler targeting neither AVX-512 nor AVX2 with FMA; "
                "the BLAS products run instead)", allow_module_level=True)

ACTIVATIONS = [None, *sorted(reference.CONV_ACTIVATIONS)]
# (batch, channels in, out, image (h, w), kernel, stride, padding (t, b, l, r), dilation, groups): tails of pixels
# (not a multiple of the tile's columns) and of channels (not a multiple of its rows), a strided and a dilated one,
# grouped ones, a 1x1 that reads the image as it is, taps past one pass (IG_KC), wide padding, a single pixel, rows of
# stride 2 wider than a vector (igemm.c's ig_copy2), a stride of 3, outputs narrower than the input, uneven
# padding and a dilated one on a wide image, stride-2 rows read once and split (1x1, 11x11 and 16x16 kernels),
# stride-1 'same' convolutions read from the image without patches (igemm.c's ig_tile_grid): uneven padding, an even
# kernel, images narrower than a strip (a strip spans many rows) and one pixel wide, grouped with taps past one pass;
# more output channels than pixels (each block of weights over every strip: igemm.c's span), from the image, grouped,
# from patches at stride 2, and past one pass
CASES = [
    (1, 3, 8, (9, 9), 3, 1, (1, 1, 1, 1), 1, 1),
    (2, 16, 20, (13, 11), 3, 2, (1, 0, 1, 1), 1, 1),
    (1, 32, 40, (17, 17), 5, 1, (2, 2, 2, 2), 1, 1),
    (1, 24, 36, (11, 12), 3, 1, (2, 2, 2, 2), 2, 4),
    (1, 12, 12, (10, 10), 1, 1, (0, 0, 0, 0), 1, 3),
    (2, 64, 70, (7, 7), 1, 1, (0, 0, 0, 0), 1, 1),
    (1, 300, 30, (7, 6), 3, 1, (1, 1, 1, 1), 1, 1),
    (1, 8, 9, (5, 6), 3, 1, (3, 1, 0, 4), 1, 1),
    (1, 5, 7, (1, 1), 1, 1, (0, 0, 0, 0), 1, 1),
    (1, 3, 16, (33, 30), 7, 2, (3, 3, 3, 3), 1, 1),
    (1, 4, 8, (40, 71), 3, 2, (0, 1, 1, 0), 1, 1),
    (1, 3, 10, (23, 26), 5, 3, (1, 1, 2, 2), 1, 1),
    (1, 10, 20, (12, 15), 3, 1, (0, 0, 0, 0), 1, 1),
    (2, 6, 10, (11, 13), 3, 1, (2, 0, 0, 1), 1, 2),
    (1, 40, 24, (9, 40), 3, 1, (1, 1, 1, 1), 3, 1),
    (1, 8, 12, (20, 45), 1, 2, (0, 0, 0, 0), 1, 1),
    (1, 2, 8, (9, 70), 11, 2, (5, 4, 5, 6), 1, 1),
    (1, 3, 9, (30, 80), 16, 2, (7, 8, 7, 8), 1, 1),
    (1, 6, 10, (11, 13), 3, 1, (2, 0, 0, 2), 1, 1),
    (1, 5, 9, (12, 14), 4, 1, (1, 2, 2, 1), 1, 1),
    (1, 9, 17, (20, 5), 3, 1, (1, 1, 1, 1), 1, 1),
    (2, 4, 8, (37, 1), 5, 1, (2, 2, 2, 2), 1, 1),
    (1, 64, 16, (6, 9), 7, 1, (3, 3, 3, 3), 1, 2),
    (1, 16, 160, (7, 9), 3, 1, (1, 1, 1, 1), 1, 2),
    (1, 24, 72, (13, 13), 3, 2, (1, 1, 1, 1), 1, 1),
    (1, 96, 40, (6, 6), 3, 1, (1, 1, 1, 1), 1, 1),
]


def _want(x, w, bias, residual, **attrs):
    cast = [None if a is None else a.astype("float64") for a in (x, w, bias, residual)]
    with np.errstate(invalid="ignore", over="ignore"):
        return reference.KERNELS["conv2d"](*cast, **attrs)


def _conv(x, w, bias, residual, packed, **attrs):
    shapes = [x.shape]
    weight = KERNEL.prepack[1](w, shapes, stride=attrs["stride"], dilation=attrs["dilation"],
                               groups=attrs["groups"]) if packed else w
    assert KERNEL.transforms.igemm_takes(w if weight is None else weight)  # these all take igemm.c's route
    return KERNEL(x, w if weight is None else weight, bias, residual, **attrs)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[1]}to{c[2]}k{c[4]}s{c[5]}d{c[7]}g{c[8]}" for c in CASES])
@pytest.mark.parametrize("packed", [False, True], ids=["eager", "packed"])
def test_igemm_equals_the_float64_reference(case, packed):
    n, c, o, (h, wd), k, s, pad, d, g = case
    rng = np.random.default_rng(hash(case) % 2**32)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((o, c // g, k, k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    attrs = dict(stride=(s, s), padding=pad, dilation=(d, d), groups=g)
    plain = _want(x, w, b, None, **attrs)
    r = rng.standard_normal(plain.shape).astype(np.float32)
    scale = np.sqrt(c // g * k * k)  # a sum of that many unit products: its float32 rounding grows with it
    for act in ACTIVATIONS:
        for bias, res in ((None, None), (b, None), (b, r)):
            got = _conv(x, w, bias, res, packed, activation=act, **attrs)
            want = _want(x, w, bias, res, activation=act, **attrs)
            assert got.dtype == np.float32 and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * scale, err_msg=f"{act}, bias "
                                       f"{bias is not None}, residual {res is not None}")


def test_igemm_special_values_follow_ieee_and_the_reference():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
    x[0, 1, 2, 3], x[0, 2, 5, 5], x[0, 3, 0, 0] = np.nan, np.inf, -np.inf
    w = rng.standard_normal((10, 8, 3, 3)).astype(np.float32)
    attrs = dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    for act in ACTIVATIONS:
        got = _conv(x, w, None, None, True, activation=act, **attrs)
        want = _want(x, w, None, None, activation=act, **attrs)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{act}: nan where the reference has")
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=f"{act}: inf where the reference has")
        fine = np.isfinite(want)
        np.testing.assert_allclose(got[fine], want[fine], rtol=1e-5, atol=1e-4)
    neg = -np.abs(rng.standard_normal((1, 8, 9, 9))).astype(np.float32)  # relu of negative sums: +0.0, as np.maximum
    got = _conv(neg, np.abs(w), None, None, True, activation="relu", **attrs)
    assert not np.signbit(got).any()


def test_equal_filters_give_bit_equal_channels():
    """Every output element is summed over the same taps in the same order wherever its channel or pixel falls."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 400, 9, 9)).astype(np.float32)  # taps past one pass of the tile
    w = rng.standard_normal((21, 400, 3, 3)).astype(np.float32)
    w[7] = w[0]
    w[20] = w[0]  # in another block of the tile's rows, and the last, partial one
    for packed in (False, True):
        out = _conv(x, w, None, None, packed, stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1,
                    activation=None)
        assert np.array_equal(out[0, 7], out[0, 0]) and np.array_equal(out[0, 20], out[0, 0])


def test_the_route_igemm_blas_or_winograd():
    """igemm.c takes what the plan does not give Winograd F(4,3) (3x3 over many channels, or fewer on large images)
    up to IGEMM_TAPS taps; depthwise convolutions keep depthwise.c."""
    pack = KERNEL.prepack[1]
    w3 = np.ones((64, 64, 3, 3), np.float32)
    assert pack(w3, [(1, 64, 56, 56)]).tile == 4  # Winograd F(4,3)
    assert pack(w3, [(1, 64, 14, 14)]).a is not None  # F(2,3)'s size: igemm.c
    w32 = np.ones((128, 32, 3, 3), np.float32)
    assert pack(w32, [(1, 32, 27, 27)]).a is not None  # few channels on a small image: igemm.c
    assert pack(w32, [(1, 32, 56, 56)]).tile == 4  # on a large one: F(4,3)
    assert pack(np.ones((8, 512, 3, 3), np.float32), [(1, 512, 7, 7)]).a is not None  # 4608 taps: igemm.c
    assert pack(np.ones((8, 2048, 3, 3), np.float32), [(1, 2048, 7, 7)]).a is None  # 18432 taps: BLAS
    assert pack(np.ones((96, 1, 3, 3), np.float32), [(1, 96, 28, 28)], groups=96) is None  # depthwise
    grouped = pack(np.ones((12, 4, 3, 3), np.float32), [(1, 12, 8, 8)], groups=3)
    assert grouped.a.shape == (3, 1, 36, KERNEL.transforms.rows)


def test_a_run_of_strips_gathers_within_its_scratch_budget():
    """More output channels than pixels: a unit's run takes every strip of a small image, but never more strips than
    blasconv.SPAN_BYTES of patches (a 1x1 over 64x64 of 2048 channels would gather 16 times that)."""
    t = KERNEL.transforms
    slot = blasconv.SLOTS.index
    for x, w, pad, want in [((1, 512, 7, 7), (512, 512, 3, 3), 1, 2), ((1, 64, 13, 13), (256, 64, 3, 3), 1, 6),
                            ((1, 2048, 64, 64), (4096, 2048, 1, 1), 0, None), ((1, 512, 28, 28), (128, 512, 1, 1), 0, 1)]:
        _, params, _, _, _ = t._igemm_plan(x, w, None, (1, 1), (pad,) * 4, (1, 1), None, 1)
        span, taps = params[slot("span")], w[1] * w[2] * w[3]
        assert span == want if want is not None else 1 < span < -(-x[2] * x[3] // t.cols)
        assert span == 1 or span * taps * t.cols * 4 <= blasconv.SPAN_BYTES


def test_runs_of_some_strips_equal_the_reference(monkeypatch):
    """With a small scratch budget a small image's strips run in several runs (the last one shorter)."""
    monkeypatch.setattr(blasconv, "SPAN_BYTES", 2 * 40 * 9 * KERNEL.transforms.cols * 4)  # 2 strips a run
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 40, 8, 10)).astype(np.float32)  # 80 pixels: strips of 32, 32 and 16
    w = rng.standard_normal((104, 40, 3, 3)).astype(np.float32)
    attrs = dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1, activation="relu")
    _, params, _, _, _ = KERNEL.transforms._igemm_plan(x.shape, w.shape, None, attrs["stride"], attrs["padding"],
                                                       attrs["dilation"], None, 1)
    assert params[blasconv.SLOTS.index("span")] == 2
    got = _conv(x, w, None, None, True, **attrs)
    np.testing.assert_allclose(got, _want(x, w, None, None, **attrs), rtol=1e-5, atol=1e-4)


def test_the_avx2_tile_is_built_and_matches_the_reference(tmp_path):
    """igemm.c's other tile (6 x 16, AVX2 with FMA, for machines without AVX-512) compiled on its own with those
    flags and run on one thread through ctypes, where this CPU can run AVX2."""
    import ctypes
    import subprocess
    from hwadapter_cpu.tuning.blas import cpu_flags
    backend = get("cpu").codegen
    if backend is None or not {"avx2", "fma"} <= cpu_flags():
        pytest.skip("no C compiler, or a CPU without AVX2 and FMA: the AVX2 tile cannot run here")
    source = tmp_path / "all.c"
    source.write_text("\n".join(path.read_text() for path in blasconv.SOURCES))
    lib_path = tmp_path / "avx2.so"
    subprocess.run([backend.cc, "-O3", "-fPIC", "-shared", "-std=c99", "-ffp-contract=off", "-mavx2", "-mfma",
                    "-mno-avx512f", str(source), "-o", str(lib_path), "-lm", "-lpthread"], check=True,
                   capture_output=True)
    lib = ctypes.CDLL(str(lib_path))
    lib.hwa_igemm_cols.restype = lib.hwa_igemm_rows.restype = ctypes.c_int64
    cols, rows = lib.hwa_igemm_cols(), lib.hwa_igemm_rows()
    assert (rows, cols) == (6, 16)
    lib.hwa_igemm.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int64] * 20
    rng = np.random.default_rng(1)
    for c, o, s, k, st, pad, d, g in [(16, 20, 13, 3, 2, 1, 1, 1), (24, 36, 11, 3, 1, 2, 2, 4),
                                      (300, 13, 6, 3, 1, 1, 1, 1)]:
        x = rng.standard_normal((c, s, s)).astype(np.float32)
        w = rng.standard_normal((o, c // g, k, k)).astype(np.float32)
        b = rng.standard_normal(o).astype(np.float32)
        oh = (s + 2 * pad - d * (k - 1) - 1) // st + 1
        out, a = np.empty((o, oh, oh), np.float32), blasconv.igemm_weights(w, g, rows)
        strips = -(-oh * oh // cols)
        scratch = np.empty(strips * c // g * k * k * cols, np.float32)
        for act, span in ((None, 1), ("relu", strips), ("silu", 1)):  # a unit per strip, or one over all
            lib.hwa_igemm(x.ctypes.data, a.ctypes.data, b.ctypes.data, None, out.ctypes.data, scratch.ctypes.data, c,
                          s, s, o, oh, oh, k, k, st, st, pad, pad, d, d, blasconv.ACTIVATIONS[act], g, 1, span, 0,
                          g * -(-strips // span))
            want = _want(x[None], w, b, None, stride=(st, st), padding=(pad,) * 4, dilation=(d, d), groups=g,
                         activation=act)[0]
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=2e-6 * np.sqrt(c // g * k * k), err_msg=str(act))
