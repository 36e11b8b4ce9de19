"""A compiled OpenCL subgraph builds its kernels for their one geometry (sizes and strides as constants: the codegen
backend's codegen.Specialised, the handwritten kernels' -DFIXED_<struct>): each such kernel equals the CPU reference
executor, on shapes that are not powers of two, padding, overlapping and gapped windows, ties and NaN."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("pyopencl", reason="pyopencl is not installed: pip install -e plugins/opencl")

import hwadapter as hw  # noqa: E402
from hwadapter.graph import GraphBuilder, run  # noqa: E402
from hwadapter.plugin import DeviceArray  # noqa: E402
from hwadapter.runtime.device import get  # noqa: E402

DEV = os.environ.get("HWADAPTER_TEST_OPENCL", "opencl:0")

if not hw.device.is_available(DEV.partition(":")[0]):
    pytest.skip("no OpenCL device (install pocl-opencl-icd and pip install -e plugins/opencl)",
                allow_module_level=True)

RNG = np.random.default_rng(11)


def ties_and_nan(shape):
    """Small integers (many ties in a window) and a few NaN."""
    x = RNG.integers(0, 3, shape).astype(np.float32)
    x.reshape(-1)[RNG.choice(x.size, max(1, x.size // 50), replace=False)] = np.nan
    return x


def compiled_equals_reference(b, outputs, arrays, exact=True):
    graph = b.build(outputs)
    exe = get(DEV).subgraph.compile(graph)
    outs = exe.run([DeviceArray.from_numpy(get(DEV), a) for a in arrays])
    expected = run(graph, dict(zip(graph.inputs, arrays)), device="cpu")
    for name, out in zip(graph.outputs, outs):
        want = expected[name].numpy()
        assert out.shape == want.shape, name
        if exact:
            np.testing.assert_array_equal(out.numpy(), want, err_msg=name)
        else:
            np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=name)


POOLS = [  # (x shape, kernel, stride, padding, ceil_mode)
    ((3, 5, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0), False),  # windows tile the plane
    ((2, 3, 7, 9), (2, 2), (3, 3), (0, 0, 0, 0), True),   # gaps between windows, a partial last one
    ((2, 3, 7, 7), (2, 2), (2, 2), (1, 0, 1, 0), True),   # padding, a partial last window
    ((2, 3, 7, 6), (3, 3), (2, 2), (1, 1, 1, 1), False),  # overlapping windows
]


@pytest.mark.parametrize("shape,kernel,stride,padding,ceil_mode", POOLS)
def test_max_pool2d_and_its_gradient(shape, kernel, stride, padding, ceil_mode):
    attrs = dict(kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil_mode)
    b = GraphBuilder()
    x = b.input("x", shape)
    y = b.op("max_pool2d", [x], **attrs)
    probe = run(b.build([y]), {"x": np.zeros(shape, np.float32)}, device="cpu")
    g = b.input("g", next(iter(probe.values())).shape)
    dx = b.op("max_pool2d_grad", [x, g], **attrs)
    gv = RNG.standard_normal(b.build([dx]).values["g"].shape).astype(np.float32)
    compiled_equals_reference(b, [y, dx], [ties_and_nan(shape), gv])


@pytest.mark.parametrize("shape,kernel,stride,padding,ceil_mode", POOLS[1:3])
def test_avg_pool2d(shape, kernel, stride, padding, ceil_mode):
    b = GraphBuilder()
    y = b.op("avg_pool2d", [b.input("x", shape)], kernel_size=kernel, stride=stride, padding=padding,
             ceil_mode=ceil_mode, exclusive=True)
    compiled_equals_reference(b, [y], [RNG.standard_normal(shape).astype(np.float32)], exact=False)


def test_data_movement():
    b = GraphBuilder()
    x = b.input("x", (3, 5, 7, 6))
    moved = [b.op("transpose", [x], perm=(1, 0, 3, 2)),
             b.op("expand", [b.input("s", (5, 1, 6))], shape=(3, 5, 7, 6)),
             b.op("pad", [x], pads=((0, 0), (1, 2), (3, 0), (2, 2)), mode="reflect", value=0.0),
             b.op("pad", [x], pads=((1, 0), (0, 0), (1, 1), (0, 3)), mode="constant", value=1.5)]
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in [(3, 5, 7, 6), (5, 1, 6)]]
    compiled_equals_reference(b, moved, arrays)


def test_im2col_with_stride_padding_and_dilation():
    b = GraphBuilder()
    conv = b.op("conv2d", [b.input("x", (3, 5, 7, 6)), b.input("w", (4, 5, 3, 2))], stride=(2, 1),
                padding=(1, 2, 0, 1), dilation=(1, 2), groups=1)
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in [(3, 5, 7, 6), (4, 5, 3, 2)]]
    compiled_equals_reference(b, [conv], arrays, exact=False)


def test_codegen_broadcasts_and_reductions_over_odd_sizes():
    b = GraphBuilder()
    x, c = b.input("x", (7, 3, 5, 9)), b.input("c", (1, 3, 1, 1))
    prod = b.op("mul", [x, c])
    total = b.op("sum", [prod], axis=(0, 2, 3), keepdim=True)
    centred = b.op("sub", [x, total])
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in [(7, 3, 5, 9), (1, 3, 1, 1)]]
    compiled_equals_reference(b, [prod, total, centred], arrays, exact=False)
