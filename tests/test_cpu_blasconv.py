"""The CPU's conv2d (tuning/blasconv.py: BLAS products with C im2col, Winograd transforms and epilogue) against
the reference kernel, and the plan executor's prepack of constant weights."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hwadapter as hw
from hwadapter.graph import Graph, GraphBuilder, run
from hwadapter.plugin import reference
from hwadapter.runtime.device import get

blasconv = pytest.importorskip("hwadapter_cpu.tuning.blasconv")
KERNEL = blasconv.conv_kernel(get("cpu"))
# the same tasks in Python on one thread (numpy's matmul), as where numpy's BLAS cannot be called from C
FORMS = {"native": KERNEL, "python": blasconv.conv_kernel(get("cpu"), native=False)}
IGEMM = KERNEL.transforms.lib() is not None and KERNEL.transforms.cols > 0  # igemm.c is built here
if blasconv.Transforms(get("cpu")).lib() is None:
    pytest.skip("no C compiler: the C transforms are not built (the numpy form runs)", allow_module_level=True)


def _want(x, w, bias, residual, **attrs):
    cast = [None if a is None else a.astype("float64") for a in (x, w, bias, residual)]
    return reference.KERNELS["conv2d"](*cast, **attrs)


@st.composite
def cases(draw):
    """float32 convolutions: every kernel size, stride, dilation and padding the C im2col and Winograd meet."""
    c, o = draw(st.integers(1, 20)), draw(st.integers(1, 20))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride = draw(st.tuples(st.integers(1, 3), st.integers(1, 3)))
    dilation = draw(st.tuples(st.integers(1, 2), st.integers(1, 2)))
    if draw(st.booleans()):  # the Winograd shape, often
        kh = kw = 3
        stride = dilation = (1, 1)
    padding = draw(st.tuples(*[st.integers(0, 3)] * 4))
    h = draw(st.integers(max(1, (kh - 1) * dilation[0] + 1 - padding[0] - padding[1]), 13))
    w = draw(st.integers(max(1, (kw - 1) * dilation[1] + 1 - padding[2] - padding[3]), 13))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    x = rng.standard_normal((draw(st.integers(1, 2)), c, h, w)).astype("float32")
    wt = rng.standard_normal((o, c, kh, kw)).astype("float32")
    bias = rng.standard_normal(o).astype("float32") if draw(st.booleans()) else None
    act = draw(st.sampled_from([None, *sorted(reference.CONV_ACTIVATIONS)]))
    attrs = dict(stride=stride, padding=padding, dilation=dilation, activation=act)
    shape = reference.KERNELS["conv2d"](x, wt, **attrs).shape
    residual = rng.standard_normal(shape).astype("float32") if draw(st.booleans()) else None
    return x, wt, bias, residual, attrs


@settings(max_examples=200, deadline=None)
@given(cases())
def test_matches_the_reference_kernel_as_given_and_prepacked(case):
    x, w, bias, residual, attrs = case
    want = _want(x, w, bias, residual, **attrs)
    # Winograd rounds relative to the convolution's own size (before a bounding activation such as tanh)
    scale = 1 + np.abs(_want(x, w, bias, residual, **{**attrs, "activation": None})).max()
    winograd = w.shape[2:] == (3, 3) and all(w.shape) and attrs["stride"] == attrs["dilation"] == (1, 1)
    for weight in (w, *((blasconv.Packed(w, 2), blasconv.Packed(w, 4)) if winograd else ())):
        for kernel in FORMS.values():
            got = kernel(x, weight, bias, residual, **attrs)
            assert got.dtype == np.float32 and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)


RESNET_LAYERS = [  # (in channels, size, out channels, kernel, stride, padding, the Winograd tile it gets; F(2,3)
    # for 256 over 14x14; 96 over 14x14 runs faster as igemm.c's implicit product where that is built)
    (64, 56, 64, 3, 1, 1, 4), (128, 28, 128, 3, 1, 1, 4), (64, 56, 256, 1, 1, 0, 0), (256, 56, 128, 1, 2, 0, 0),
    (128, 28, 128, 3, 2, 1, 0), (256, 14, 256, 3, 1, 1, 2), (96, 14, 128, 3, 1, 1, 0 if IGEMM else 2),
    (512, 7, 512, 3, 1, 1, 0),
    (3, 224, 64, 7, 2, 3, 0)]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("c, size, o, k, stride, pad, tile", RESNET_LAYERS)
def test_resnet_layers_with_bias_residual_and_relu(c, size, o, k, stride, pad, tile, form):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, c, size, size)).astype("float32")
    w = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype("float32")
    b = rng.standard_normal(o).astype("float32")
    attrs = dict(stride=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), activation="relu")
    out = (size + 2 * pad - k) // stride + 1
    r = rng.standard_normal((1, o, out, out)).astype("float32")
    packed = KERNEL.prepack[1](w, (x.shape, w.shape), **attrs)
    assert getattr(packed, "tile", 0) == tile  # Winograd exactly where it applies, F(4,3) on the larger images
    got = FORMS[form](x, packed if packed is not None else w, b, r, **attrs)
    np.testing.assert_allclose(got, _want(x, w, b, r, **attrs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("c, size, o, tile, copies", [(128, 28, 128, 4, False), (64, 14, 160, 2, False),
                                                      (64, 14, 128, 2, True)])
def test_winograd_on_few_tile_rows_shares_channels_not_bands(c, size, o, tile, copies, form):
    """7 tile rows split 4 and 3 between two threads; channels split evenly (each task transforms the whole image's
    input). Identical filters (a rep map) keep the bands: a channel there reads another's products."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, c, size, size)).astype("float32")
    w = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(c * 9)).astype("float32")
    if copies:
        w[1::7] = w[0]
    b, r = rng.standard_normal(o).astype("float32"), rng.standard_normal((1, o, size, size)).astype("float32")
    packed = blasconv.Packed(w, tile)
    image = blasconv.Image(KERNEL.transforms, x[0], w, packed.u, tile, b, r[0], packed.rep, np.empty((o, size, size),
                           np.float32), (1, 1), (1, 1, 1, 1), (1, 1), 1)
    (kind, ranges), = image.phases(2)
    assert kind == (blasconv.WINOGRAD if copies else blasconv.WINOGRAD_CHANNELS)
    if not copies:
        assert ranges == blasconv.split(o, 2, blasconv.ROWS)
    attrs = dict(stride=(1, 1), padding=(1,) * 4, dilation=(1, 1), activation="relu")
    np.testing.assert_allclose(FORMS[form](x, packed, b, r, **attrs), _want(x, w, b, r, **attrs), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("c, o, groups, k, stride, size", [
    (24, 24, 24, 3, 1, 28), (24, 24, 24, 3, 2, 28),  # depthwise, as ShuffleNet's
    (240, 60, 3, 1, 1, 14), (12, 18, 3, 3, 2, 9), (8, 8, 2, 1, 1, 40)])  # grouped 1x1 and 3x3
def test_grouped_convolutions_run_as_one_product_per_group(c, o, groups, k, stride, size, form):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, c, size, size)).astype("float32")
    w = rng.standard_normal((o, c // groups, k, k)).astype("float32")
    b = rng.standard_normal(o).astype("float32")
    attrs = dict(stride=(stride, stride), padding=(k // 2,) * 4, dilation=(1, 1), groups=groups, activation="relu")
    out = (size + 2 * (k // 2) - k) // stride + 1
    r = rng.standard_normal((2, o, out, out)).astype("float32")
    got = FORMS[form](x, w, b, r, **attrs)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, _want(x, w, b, r, **attrs), rtol=1e-4, atol=1e-4)


def test_other_dtypes_run_the_numpy_form_and_grouped_weights_are_not_prepacked():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((1, 4, 6, 6)), rng.standard_normal((4, 2, 3, 3))
    got = KERNEL(x, w, groups=2, padding=(1, 1, 1, 1))  # float64: numpy
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, reference.KERNELS["conv2d"](x, w, groups=2, padding=(1, 1, 1, 1)), rtol=1e-12)
    packed = KERNEL.prepack[1](w.astype("float32"), ((1, 4, 6, 6), w.shape), groups=2)
    if IGEMM:  # for igemm.c: (groups, blocks of its tile's rows, taps, rows), each group's filters zero-padded
        assert packed.a.shape == (2, 1, 18, KERNEL.transforms.rows) and packed.tile == 0
        np.testing.assert_array_equal(packed.a[1, 0, :, :2].T, w[2:].reshape(2, 18).astype("float32"))
        assert not packed.a[:, :, :, 2:].any()
    else:
        assert packed is None


def test_a_residual_of_another_shape_is_refused_before_c_reads_it():
    from hwadapter.plugin import InvalidArgumentError
    x, w = np.ones((1, 4, 6, 6), "float32"), np.ones((8, 4, 3, 3), "float32")
    with pytest.raises(InvalidArgumentError, match="the residual input has shape"):
        KERNEL(x, w, np.zeros(8, "float32"), np.ones((1, 8, 2, 2), "float32"))


@pytest.mark.parametrize("form", FORMS)
def test_calls_from_several_threads_at_once_each_get_their_own_result(form):
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(5)
    cases = [(rng.standard_normal((1, 32, 20, 20)).astype("float32"),
              blasconv.Packed(rng.standard_normal((48, 32, 3, 3)).astype("float32"))) for _ in range(8)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda xw: FORMS[form](*xw, padding=(1, 1, 1, 1)), cases * 3))
    for (x, w), g in zip(cases * 3, got):
        np.testing.assert_allclose(g, reference.KERNELS["conv2d"](x, w.weight, padding=(1, 1, 1, 1)), rtol=1e-4,
                                   atol=1e-3)


def test_without_a_compiler_the_numpy_form_runs_and_says_why(monkeypatch, caplog):
    from hwadapter.plugin import CompileError

    def no_compiler(*args):
        raise CompileError("cpu: no C compiler found")
    monkeypatch.setattr("hwadapter_cpu.tuning.clib.load_source", no_compiler)
    kernel = blasconv.conv_kernel(get("cpu"))
    x, w = np.ones((1, 2, 4, 4), "float32"), np.ones((3, 2, 3, 3), "float32")
    np.testing.assert_array_equal(kernel(x, w), reference.KERNELS["conv2d"](x, w))
    assert ("conv2d runs in numpy: crew.c, depthwise.c, transforms.c, igemm.c, sgemm.c, tasks.c could not be built: "
            "cpu: no C compiler found") in caplog.text


def conv_graph(channels=24, size=16):
    """x -> conv2d 3x3 (constant weight) -> relu -> conv2d 1x1 (constant weight)."""
    rng = np.random.default_rng(3)
    consts = {"w3": rng.standard_normal((channels, channels, 3, 3)).astype("float32") / 10,
              "w1": rng.standard_normal((8, channels, 1, 1)).astype("float32")}
    b = GraphBuilder()
    x = b.input("x", (1, channels, size, size))
    w3, w1 = (b.input(k, a.shape) for k, a in consts.items())
    attrs = dict(stride=(1, 1), dilation=(1, 1), groups=1)
    h = b.op("relu", [b.op("conv2d", [x, w3], padding=(1, 1, 1, 1), **attrs)])
    g = b.build([b.op("conv2d", [h, w1], padding=(0, 0, 0, 0), **attrs)])
    return Graph(g.nodes, g.values, ["x"], g.outputs, constants=consts), rng.standard_normal((1, channels, size, size))


def test_a_plan_prepacks_the_constant_3x3_weight_once_and_matches_the_reference_executor():
    graph, x = conv_graph()
    plan = hw.graph.partition(graph, devices=["cpu"])
    x = x.astype("float32")
    got = plan.run([x])[0].numpy()
    packed = [v for v in plan.schedule.constants.values() if isinstance(v, blasconv.Packed)]
    if IGEMM:  # both for igemm.c (F(2,3)'s size runs faster there), the 1x1's too
        assert sorted(p.weight.shape for p in packed) == [(8, 24, 1, 1), (24, 24, 3, 3)]
        assert all(p.tile == 0 and p.a is not None for p in packed)
    else:
        assert len(packed) == 1 and packed[0].weight.shape == (24, 24, 3, 3) and packed[0].tile == 2  # not the 1x1's
    want = run(graph, {"x": x})[graph.outputs[0]].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(plan.run([x])[0].numpy(), got)  # the generated function, same packed weight


def test_a_failing_prepack_is_a_kernel_error_naming_the_step(monkeypatch):
    graph, x = conv_graph()
    kernel = get("cpu").kernels.find("conv2d", (np.dtype("float32"),) * 2)

    def broken(weight, shapes, **attrs):
        raise ValueError("packing broke")
    monkeypatch.setattr(kernel, "prepack", {1: broken})
    with pytest.raises(hw.errors.KernelExecutionError, match=r"conv2d.*prepack of input 1 failed.*packing broke"):
        hw.graph.partition(graph, devices=["cpu"])  # a plan prepacks its constants when it is built


@pytest.mark.parametrize("k, size, stride, c, copies", [
    (3, 12, 1, 40, [7, 30, 27]),      # Winograd
    (1, 13, 1, 40, [7, 30, 27]),      # a 1x1 product in bands, straight into the output
    (3, 3, 1, 40, [7, 30, 27]),       # im2col (too few tiles)
    (3, 40, 2, 40, [7, 30, 27]),      # stride 2: im2col in bands of output rows
    (1, 13, 1, 128, [40, 60, 60]),    # few pixels, many filters: blocks of channels, then a store phase
])
@pytest.mark.parametrize("form", FORMS)
def test_identical_filters_give_bit_identical_channels_once_packed(k, size, stride, c, copies, form):
    """OpenBLAS alone rounds rows of one product differently; the packed row map makes copies of a filter agree,
    with the bias and relu applied where the product is stored."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((2, c, size, size)) * 1e6).astype("float32")
    w = np.repeat(rng.standard_normal((3, c, k, k)).astype("float32"), copies, axis=0)  # 3 distinct filters
    attrs = dict(stride=(stride, stride), padding=(k // 2,) * 4, dilation=(1, 1))
    packed = KERNEL.prepack[1](w, (x.shape, w.shape), **attrs)
    starts = np.cumsum([0] + copies)
    assert packed is not None and packed.rep.tolist() == np.repeat(starts[:-1], copies).tolist()
    bias = np.repeat(rng.standard_normal(3).astype("float32") * 1e6, copies)  # equal within each group of copies
    got = FORMS[form](x, packed, bias, activation="relu", **attrs)
    for first, last in zip(starts[:-1], starts[1:]):
        np.testing.assert_array_equal(got[:, first:last], np.broadcast_to(got[:, first:first + 1], got[:, first:last].shape))
    want = _want(x, w, bias, None, activation="relu", **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert blasconv._first_copies(rng.standard_normal((5, 2, 3, 3)).astype("float32")) is None


def test_the_native_crew_runs_where_numpys_blas_has_a_cblas_sgemm():
    transforms = blasconv.Transforms(get("cpu"))
    assert transforms.lib() is not None
    if blasconv.single_blas.sgemm() is None:
        pytest.skip("numpy's BLAS has no cblas_sgemm threadpoolctl can find: the Python form runs")
    assert transforms._native_crew is not None and transforms._sgemm is not None


def test_without_a_cblas_sgemm_the_python_form_runs_and_says_why(monkeypatch, caplog):
    monkeypatch.setattr(blasconv.single_blas, "sgemm", lambda: None)
    transforms = blasconv.Transforms(get("cpu"))
    kernel = blasconv.conv_kernel(get("cpu"))
    with caplog.at_level("INFO", logger="hwadapter_cpu.tuning.blasconv"):
        assert transforms.lib() is not None and transforms._native_crew is None
    assert "no cblas_sgemm" in caplog.text
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 8, 9, 9)).astype("float32"), rng.standard_normal((16, 8, 3, 3)).astype("float32")
    np.testing.assert_allclose(kernel(x, w, padding=(1, 1, 1, 1)), _want(x, w, None, None, padding=(1, 1, 1, 1)),
                               rtol=1e-4, atol=1e-4)


def test_a_forked_child_runs_its_own_crew():
    """A child forked while the crew's threads exist has none of them (crew.c resets its copy of the crew): conv2d
    there gives the right result, neither hanging nor crashing."""
    import multiprocessing
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("this platform cannot fork")
    rng = np.random.default_rng(12)
    x, w = rng.standard_normal((1, 32, 30, 30)).astype("float32"), rng.standard_normal((64, 32, 3, 3)).astype("float32")
    want = _want(x, w, None, None, stride=(2, 2), padding=(1, 1, 1, 1))
    KERNEL(x, w, stride=(2, 2), padding=(1, 1, 1, 1))  # the parent's threads are running now
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_conv_in_child, args=(x, w, want))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung running conv2d")
    assert child.exitcode == 0


def _conv_in_child(x, w, want):
    got = KERNEL(x, w, stride=(2, 2), padding=(1, 1, 1, 1))
    raise SystemExit(0 if np.allclose(got, want, rtol=1e-4, atol=1e-3) else 3)
