"""Depthwise and grouped float32 conv2d on the CPU plugin against onnxruntime, one-node ONNX Conv models.

Shapes from MobileNetV2 and EfficientNet (3x3 and 5x5 depthwise, stride 1 and 2), ConvNeXt-T (7x7 depthwise),
Segformer-B0's MixFFN (3x3 depthwise), ResNeXt and ShuffleNet (grouped, several channels per group). Both sides run
the same model (weights and bias as initializers) on batch 1: onnxruntime with intra_op_num_threads=2 (the crew's
size on the reference machine), hwadapter through its plan of the one-node graph on "cpu". Each time is the best of
a few calibrated loops, the two interleaved so that both see the same machine load; results are checked against
onnxruntime's. Run: `python benchmarks/conv_depthwise.py [PREFIX ...]` (prefixes such as dw3 dw7 pick rows by name;
PYTHONPATH=<a copy of an older hwadapter_cpu's parent folder> times that version instead).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import best_seconds, table  # noqa: E402

import hwadapter as hw  # noqa: E402

# (name, channels in, channels out, groups, size, kernel, stride)
SHAPES = [
    ("dw3 mbv2 32x112 s1", 32, 32, 32, 112, 3, 1), ("dw3 mbv2 144x56 s2", 144, 144, 144, 56, 3, 2),
    ("dw3 mbv2 384x14 s1", 384, 384, 384, 14, 3, 1), ("dw3 mbv2 960x7 s1", 960, 960, 960, 7, 3, 1),
    ("dw5 effnet 240x28 s2", 240, 240, 240, 28, 5, 2), ("dw5 effnet 672x14 s1", 672, 672, 672, 14, 5, 1),
    ("dw7 convnext 96x56", 96, 96, 96, 56, 7, 1), ("dw7 convnext 192x28", 192, 192, 192, 28, 7, 1),
    ("dw7 convnext 384x14", 384, 384, 384, 14, 7, 1), ("dw7 convnext 768x7", 768, 768, 768, 7, 7, 1),
    ("dw3 segformer 256x64", 256, 256, 256, 64, 3, 1), ("dw3 segformer 1024x16", 1024, 1024, 1024, 16, 3, 1),
    ("grp resnext 128x56 g32", 128, 128, 32, 56, 3, 1), ("grp resnext 256x56 g32 s2", 256, 256, 32, 56, 3, 2),
    ("grp resnext 512x14 g32", 512, 512, 32, 14, 3, 1), ("grp resnext 1024x7 g32", 1024, 1024, 32, 7, 3, 1),
    ("grp shufflenet 240x28 g3 1x1", 240, 60, 3, 28, 1, 1),
]
ONLY = [p for p in sys.argv[1:] if not p.startswith("-")]  # row name prefixes to run (none: every row)


def model(c, o, groups, size, k, stride):
    """A one-node Conv model (weights and bias initializers), ir_version 9, opset 17."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((o, c // groups, k, k)) / k).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    pad = k // 2
    out = (size + 2 * pad - k) // stride + 1
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=groups, kernel_shape=[k, k], pads=[pad] * 4,
                            strides=[stride] * 2)
    graph = helper.make_graph([node], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, out, out])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


def measure(c, o, groups, size, k, stride):
    import onnxruntime as ort
    m = model(c, o, groups, size, k, stride)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, c, size, size)).astype(np.float32)
    plan = hw.onnx.load(m).plan(["cpu"], {"x": x.shape})
    want = sess.run(None, {"x": x})[0]
    got = plan.run([x])[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    ours = theirs = float("inf")
    for _ in range(3):  # interleaved: both see the same machine load
        ours = min(ours, best_seconds(lambda: plan.run([x]), min_time=0.1, repeats=3))
        theirs = min(theirs, best_seconds(lambda: sess.run(None, {"x": x}), min_time=0.1, repeats=3))
    return ours, theirs


def main():
    rows = []
    for name, *shape in SHAPES:
        if ONLY and not any(name.startswith(p) for p in ONLY):
            continue
        ours, theirs = measure(*shape)
        rows.append([name, f"{ours * 1e3:.3f}", f"{theirs * 1e3:.3f}", f"{ours / theirs:.2f}"])
    table("conv2d depthwise / grouped, batch 1 (ms)", ["shape", "hwadapter", "onnxruntime", "ratio"], rows)


if __name__ == "__main__":
    main()
