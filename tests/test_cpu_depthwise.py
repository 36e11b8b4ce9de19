"""The CPU's direct depthwise conv2d (tuning/depthwise.c through blasconv.py) and its grouped convolutions against the
reference kernel and torch's conv2d(groups=C): kernel sizes, strides, paddings, multipliers, batches, image sizes
(both of depthwise.c's layouts: small planes sixteen at a time, wide planes one at a time), the fused bias, residual
and activations, NaN and infinities, in the crew's native form and the Python form."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from hwadapter.graph import Graph, GraphBuilder, partition, run
from hwadapter.plugin import reference
from hwadapter.runtime.device import get

blasconv = pytest.importorskip("hwadapter_cpu.tuning.blasconv")
FORMS = {"native": blasconv.conv_kernel(get("cpu")), "python": blasconv.conv_kernel(get("cpu"), native=False)}
if blasconv.Transforms(get("cpu")).lib() is None:
    pytest.skip("no C compiler: the C transforms are not built (the numpy form runs)", allow_module_level=True)

ACTIVATIONS = [None, *sorted(reference.CONV_ACTIVATIONS)]
#: (N, (H, W)): a single pixel, odd small planes (the sixteen-plane layout), a wide one (the wide layout under a 3x3
#: filter; 5x5 and 7x7 filters take the sixteen-plane layout there too)
CASES = [(2, (1, 1)), (1, (7, 13)), (2, (13, 7)), (1, (56, 56))]


def _want(x, w, bias, residual, **attrs):
    cast = [None if a is None else a.astype("float64") for a in (x, w, bias, residual)]
    with np.errstate(invalid="ignore"):  # the NaN cases' 0 * inf
        return reference.KERNELS["conv2d"](*cast, **attrs)


def _torch(x, w, bias, residual, stride, padding, dilation, groups, activation):
    """The same convolution by torch (float64): an independent oracle."""
    torch = pytest.importorskip("torch")
    fn = torch.nn.functional
    pt, pb, pl, pr = padding
    t = fn.pad(torch.from_numpy(x.astype("float64")), (pl, pr, pt, pb))
    y = fn.conv2d(t, torch.from_numpy(w.astype("float64")), None if bias is None else torch.from_numpy(
        bias.astype("float64")), stride=stride, dilation=dilation, groups=groups)
    if residual is not None:
        y = y + torch.from_numpy(residual.astype("float64"))
    act = {None: lambda v: v, "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
           "gelu": lambda v: fn.gelu(v, approximate="none"), "relu6": fn.relu6, "silu": fn.silu}[activation]
    return act(y).numpy()


def _close(got, want):
    """float32 rounding of sums of a few dozen products: relative to the result's own size."""
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * (1 + np.abs(want).max()))


def _padding(kind, k):
    return {"same": (k // 2,) * 4, "asymmetric": (0, k - 1, k // 2 + 1, 1), "none": (0, 0, 0, 0)}[kind]


@pytest.mark.parametrize("multiplier", [1, 2])
@pytest.mark.parametrize("pad", ["same", "asymmetric", "none"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("k", [3, 5, 7])
def test_matches_the_reference_and_torch(k, stride, pad, multiplier):
    """Every batch and image size, bias or none, each activation, residual or none, in both forms; 19 channels: a
    full block of sixteen planes and a partial one."""
    rng = np.random.default_rng(k * 100 + stride * 10 + multiplier)
    c, padding = 19, _padding(pad, k)
    for i, (n, (h, w)) in enumerate(CASES):
        if h + padding[0] + padding[1] < k or w + padding[2] + padding[3] < k:
            continue  # no output
        x = rng.standard_normal((n, c, h, w)).astype("float32")
        wt = rng.standard_normal((c * multiplier, 1, k, k)).astype("float32")
        bias = rng.standard_normal(c * multiplier).astype("float32") if i % 2 else None
        attrs = dict(stride=(stride, stride), padding=padding, dilation=(1, 1), groups=c,
                     activation=ACTIVATIONS[(i + k + stride + multiplier) % len(ACTIVATIONS)])
        shape = _want(x, wt, None, None, **attrs).shape
        residual = rng.standard_normal(shape).astype("float32") if i % 3 else None
        want = _want(x, wt, bias, residual, **attrs)
        np.testing.assert_allclose(_torch(x, wt, bias, residual, **attrs), want, rtol=1e-9, atol=1e-9)
        for form, kernel in FORMS.items():
            _close(kernel(x, wt, bias, residual, **attrs), want)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kernel, stride, dilation, padding", [
    ((1, 1), (1, 1), (1, 1), (0, 0, 0, 0)), ((2, 2), (1, 1), (1, 1), (1, 0, 0, 1)),
    ((4, 4), (2, 2), (1, 1), (1, 2, 2, 1)), ((3, 5), (1, 2), (1, 1), (1, 1, 2, 2)),
    ((5, 3), (3, 1), (1, 1), (2, 2, 1, 1)), ((3, 3), (3, 3), (1, 1), (1, 1, 1, 1)),
    ((3, 3), (1, 1), (2, 2), (2, 2, 2, 2)), ((3, 3), (1, 1), (2, 1), (2, 2, 1, 1)),
    ((3, 3), (2, 1), (1, 3), (0, 3, 3, 0)), ((7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),
    ((9, 1), (1, 1), (1, 1), (4, 4, 0, 0))])
def test_other_kernels_strides_and_dilations(kernel, stride, dilation, padding, form):
    """The general taps (any width, stride or dilation) and the fast passes with dilated rows, both layouts."""
    rng = np.random.default_rng(sum(kernel) + 7 * sum(stride) + 3 * sum(dilation))
    for (h, w), c, m in [((9, 11), 17, 1), ((40, 37), 6, 3)]:
        x = rng.standard_normal((2, c, h, w)).astype("float32")
        wt = rng.standard_normal((c * m, 1, *kernel)).astype("float32")
        bias = rng.standard_normal(c * m).astype("float32")
        attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=c, activation="relu")
        _close(FORMS[form](x, wt, bias, None, **attrs), _want(x, wt, bias, None, **attrs))


@pytest.mark.parametrize("form", FORMS)
def test_strips_of_one_column_or_one_row(form):
    """1-D convolutions as conv2d: a tall strip of one column (the wide layout: sixteen interleaved copies would be
    large), one row, a short strip (the sixteen-plane layout)."""
    rng = np.random.default_rng(9)
    for shape, kernel, padding in [((70000, 1), (5, 1), (2, 2, 0, 0)), ((1, 3000), (1, 7), (0, 0, 3, 3)),
                                   ((300, 1), (3, 1), (1, 1, 0, 0))]:
        x = rng.standard_normal((1, 17, *shape)).astype("float32")
        wt = rng.standard_normal((17, 1, *kernel)).astype("float32")
        attrs = dict(stride=(1, 1), padding=padding, dilation=(1, 1), groups=17, activation="tanh")
        _close(FORMS[form](x, wt, None, None, **attrs), _want(x, wt, None, None, **attrs))


@pytest.mark.parametrize("size", [7, 40])
def test_nan_and_infinities_propagate_as_in_the_reference(size):
    """A NaN or an infinity in x reaches exactly the outputs whose window holds it; an infinite weight makes NaN of
    its taps over the padding too (0 * inf, as the reference's product has it)."""
    rng = np.random.default_rng(size)
    x = rng.standard_normal((1, 18, size, size)).astype("float32")
    x[0, 0, 2, 3], x[0, 5, size - 1, 0], x[0, 17, 0, size - 1] = np.nan, np.inf, -np.inf
    wt = rng.standard_normal((18, 1, 3, 3)).astype("float32")
    wt[3, 0, 0, 0], wt[9, 0, 2, 1] = np.inf, np.nan
    attrs = dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=18)
    for activation in ACTIVATIONS:
        want = _want(x, wt, None, None, **attrs, activation=activation)
        for form, kernel in FORMS.items():
            got = kernel(x, wt, None, None, **attrs, activation=activation)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{form} {activation}")
            np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=f"{form} {activation}")
            finite = np.isfinite(want)
            _close(got[finite], want[finite])


@pytest.mark.parametrize("form", FORMS)
def test_activations_over_their_whole_range(form):
    """The fused sigmoid, tanh and gelu (depthwise.c's own exp) against the reference's, from far below to far above
    their saturation, near zero, at the infinities and NaN (through the residual)."""
    values = np.concatenate([np.linspace(-120, 120, 2001), np.geomspace(1e-8, 20, 300), -np.geomspace(1e-8, 20, 300),
                             [0.0, -0.0, np.inf, -np.inf, np.nan, 88.7, 89.0, -87.5, -104.0, -110.0]]).astype("float32")
    n = values.size
    x = np.zeros((1, 2, 1, n), np.float32)
    wt = np.zeros((2, 1, 1, 1), np.float32)
    residual = np.stack([values, values[::-1]]).reshape(1, 2, 1, n)
    for activation in ACTIVATIONS:
        attrs = dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=2, activation=activation)
        want = _want(x, wt, None, residual, **attrs)
        got = FORMS[form](x, wt, None, residual, **attrs)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-30, err_msg=str(activation))
        np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("c, o, groups, k, stride, size", [
    (1024, 1024, 32, 3, 1, 7), (512, 512, 32, 3, 2, 14),  # ResNeXt's later stages: too few rows for bands
    (128, 128, 32, 3, 1, 56), (240, 60, 3, 1, 1, 28), (96, 48, 3, 1, 1, 7), (24, 48, 4, 3, 1, 5)])
def test_grouped_convolutions_share_groups_or_bands(c, o, groups, k, stride, size, form):
    rng = np.random.default_rng(c + o + size)
    x = rng.standard_normal((2, c, size, size)).astype("float32")
    w = (rng.standard_normal((o, c // groups, k, k)) / np.sqrt(c // groups * k * k)).astype("float32")
    b = rng.standard_normal(o).astype("float32")
    attrs = dict(stride=(stride, stride), padding=(k // 2,) * 4, dilation=(1, 1), groups=groups, activation="relu")
    out = (size + 2 * (k // 2) - k) // stride + 1
    r = rng.standard_normal((2, o, out, out)).astype("float32")
    np.testing.assert_allclose(FORMS[form](x, w, b, r, **attrs), _want(x, w, b, r, **attrs), rtol=1e-4, atol=1e-4)


def test_small_grouped_images_are_shared_by_groups_and_large_ones_by_bands():
    def kinds(c, groups, size):
        transforms = blasconv.Transforms(get("cpu"))
        x, w = np.zeros((c, size, size), np.float32), np.zeros((c, c // groups, 3, 3), np.float32)
        out = np.zeros((c, size, size), np.float32)
        image = blasconv.Image(transforms, x, w, None, 0, None, None, None, out, (1, 1), (1, 1, 1, 1), (1, 1), False,
                               groups)
        return [kind for kind, _ in image.phases(2)]
    assert kinds(1024, 32, 7) == [blasconv.GROUPS]
    assert kinds(128, 32, 56) == [blasconv.BAND]
    assert kinds(8, 2, 5) == [blasconv.BAND]  # too little work to share at all


def test_calls_from_several_threads_at_once_each_get_their_own_result():
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(5)
    cases = [(rng.standard_normal((1, 32, s, s)).astype("float32"),
              rng.standard_normal((32, 1, 3, 3)).astype("float32")) for s in (7, 14, 30, 7, 14, 30)]
    attrs = dict(padding=(1, 1, 1, 1), groups=32, activation="relu")
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda xw: FORMS["native"](*xw, **attrs), cases * 4))
    for (x, w), g in zip(cases * 4, got):
        _close(g, _want(x, w, None, None, **attrs))


def test_a_plan_runs_a_depthwise_conv_with_its_fused_epilogue():
    rng = np.random.default_rng(3)
    consts = {"w": rng.standard_normal((48, 1, 3, 3)).astype("float32"),
              "b": rng.standard_normal(48).astype("float32")}
    b = GraphBuilder()
    x = b.input("x", (1, 24, 14, 14))
    w, bias = (b.input(k, a.shape) for k, a in consts.items())
    y = b.op("conv2d", [x, w, bias], stride=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1), groups=24)
    g = b.build([b.op("sigmoid", [y])])
    graph = Graph(g.nodes, g.values, ["x"], g.outputs, constants=consts)
    xs = rng.standard_normal((1, 24, 14, 14)).astype("float32")
    got = partition(graph, devices=["cpu"]).run([xs])[0].numpy()
    _close(got, run(graph, {"x": xs})[graph.outputs[0]].numpy().astype("float64"))


def test_the_depthwise_loops_are_vectorised():
    """gcc reports every pass of both layouts, the small planes' interleaving and the activations vectorised under
    the CPU backend's own flags."""
    backend = get("cpu").codegen
    source = Path(blasconv.__file__).with_name("depthwise.c").read_text()
    report = backend.vectorizer_report(source, "depthwise")
    if report is None:
        pytest.skip(f"{backend.version}: not gcc, no -fopt-info-vec report")
    vectorised = {int(m.group(1)) for m in re.finditer(r"\.c:(\d+):\d+: optimized: loop vectorized", report)}
    lines = source.splitlines()
    wanted = [i for i, line in enumerate(lines, 1) if re.match(r"(DW_PASSES|DWB_PASSES)\(\d", line)
              or ("out[q] = " in line and "for (" in line)]  # the passes, the activations
    # the interleaving and its inverse: the loop along the planes (the lanes' loop inside is unrolled into permutes)
    moves = ("d[t * DW_LANES + l] = src[t + l * stride]", "out[t + l * stride] = s[t * DW_LANES + l]")
    wanted += [i - 1 for i, line in enumerate(lines, 1) if any(move in line for move in moves)]
    assert len(wanted) == 17
    missed = [f"{i}: {lines[i - 1].strip()}" for i in wanted if i not in vectorised]
    assert not missed, "left scalar:\n" + "\n".join(missed)
