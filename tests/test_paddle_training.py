"""Paddle training on bridged devices: the grad, optimizer and forward kernels hwadapter_paddle/training.py writes in
hwadapter's ops, against Paddle's own CPU.

The cpu plugin (Paddle's hwa_cpu) and opencl are installed each into their own folder (Paddle 3.3 runs static graphs
on one custom type per process). Models train in children (tests/paddle_train/train.py); Paddle's CPU runs the same
cases in a child without custom devices, the oracle. `hwadapter paddle trace` watches the device runs: no kernel may
fall back on hwa_cpu. Kernel cases (broadcast grads, ignore_index, soft labels, nan, padding_idx, eval-mode batch
norm, ...) compare each kernel with Paddle's CPU kernel in one child.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from paddle_needs import PADDLE_SKIP

_SKIP = PADDLE_SKIP
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "paddle_train" / "train.py"
STEPS = 20
CASES = [f"{m}:{o}:{mode}" for m in ("mlp", "cnn") for o in ("sgd", "adam") for mode in ("eager", "static")]
BLOCK = ["block:sgd:eager", "block:adam:static"]
TIMEOUT = 600


def _opencl_usable() -> bool:
    from hwadapter import host
    record = host.plugin_record("opencl")
    try:
        return record is not None and record.plugin is not None and record.plugin.device_count() > 0
    except Exception:
        return False


def _install(kind: str, folder: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "hwadapter.cli", "paddle", "install", kind, "--dir", str(folder)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"install failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads((folder / "hwadapter_paddle.json").read_text())["shims"][kind]["kernels"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{hwadapter type: (its shim folder, its manifest's kernels entry)}, each type alone in its folder."""
    out = {}
    for kind in ["cpu"] + (["opencl"] if _opencl_usable() else []):
        folder = tmp_path_factory.mktemp(f"paddle-train-{kind}")
        out[kind] = (folder, _install(kind, folder))
    return out


def _env(root: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLOG_", "FLAGS_"))}
    env["CUSTOM_DEVICE_ROOT"] = str(root) if root else ""
    env["GLOG_minloglevel"] = "2"
    return env


def _train(device: str, cases: list[str], root: Path | None, out: Path, steps: int = STEPS) -> dict:
    proc = subprocess.run([sys.executable, str(TRAIN), str(out), device, ",".join(cases), str(steps)],
                          capture_output=True, text=True, timeout=TIMEOUT, env=_env(root))
    assert proc.returncode == 0, f"training on {device} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Paddle's own CPU on every case: the oracle."""
    empty = tmp_path_factory.mktemp("no-custom-devices")
    return _train("cpu", CASES + BLOCK, empty, empty / "cpu.json")


def _compare(got: dict, want: dict, device: str) -> None:
    for case, w in want.items():
        g = got[case]
        # float32 rounding, which Adam's normalised steps carry further than SGD's over 20 steps
        tol = 1e-4 if ":adam:" in case else 2e-5
        np.testing.assert_allclose(g["losses"], w["losses"], rtol=tol, atol=tol / 10, err_msg=f"{device} {case} losses")
        assert w["losses"][-1] < w["losses"][0], f"{case} does not train on the CPU either"
        if ":sgd:" in case:  # Adam's step is about lr wherever a gradient is ~0: rounding decides its sign
            for i, (p, q) in enumerate(zip(g["params"], w["params"])):
                np.testing.assert_allclose(p, q, rtol=1e-4, atol=2e-6, err_msg=f"{device} {case} parameter {i}")


def test_hwa_cpu_trains_mlp_cnn_and_a_transformer_block_with_no_kernel_falling_back(folders, reference, tmp_path):
    out = tmp_path / "hwa_cpu.json"
    kernels = _traced([sys.executable, str(TRAIN), str(out), "hwa_cpu:0", ",".join(CASES + BLOCK), str(STEPS)],
                      folders["cpu"][0], "hwa_cpu")
    _compare(json.loads(out.read_text()), reference, "hwa_cpu:0")
    # what ran on the device: the grads and optimizers training.py writes, eager and in static programs
    for name in ("matmul_grad", "conv2d_grad", "batch_norm_grad", "pool2d_grad", "relu_grad", "layer_norm_grad",
                 "embedding_grad", "softmax_grad", "gelu_grad", "cross_entropy_with_softmax_grad", "sgd", "adam",
                 "uniform"):
        assert kernels[name].device_calls > 0, (name, kernels.get(name))
    assert kernels["conv2d_grad"].static_device_ops > 0  # lowered to the device's kernel in to_static programs


def _traced(command: list, root: Path, paddle_type: str) -> dict:
    """Run `command` under `hwadapter paddle trace`: {kernel: its Kernel record} for `paddle_type`, having asserted
    that the command succeeded and nothing fell back (equal results would prove nothing if Paddle's CPU ran them)."""
    from hwadapter_paddle import trace
    report = trace.run(command, env=_env(root), sink=lambda data: None)
    assert report.returncode == 0, report.as_dict()
    kernels = {k.kernel: k for k in report.kernels.values() if k.type == paddle_type}
    fell = {name: (k.fallback_calls, k.static_fallback_ops) for name, k in kernels.items() if k.fell_back}
    assert not fell, f"kernels fell back to Paddle's CPU on {paddle_type}: {fell}"
    return kernels


def test_opencl_trains_the_mlp_and_cnn_like_paddles_cpu(folders, reference, tmp_path):
    if "opencl" not in folders:
        pytest.skip("no OpenCL device here")
    out = tmp_path / "opencl.json"
    kernels = _traced([sys.executable, str(TRAIN), str(out), "opencl:0", ",".join(CASES), str(STEPS)],
                      folders["opencl"][0], "opencl")
    _compare(json.loads(out.read_text()), {c: reference[c] for c in CASES}, "opencl:0")
    for name in ("matmul_grad", "conv2d_grad", "batch_norm_grad", "pool2d_grad", "sgd", "adam"):
        assert kernels[name].device_calls > 0, (name, kernels.get(name))


# Each kernel against Paddle's CPU: the same calls on hwa_cpu:0 and cpu, gradients through paddle.grad.
KERNEL_CASES = r"""
import json, sys
import numpy as np, paddle
F = paddle.nn.functional
def run(place):
    paddle.set_device(place)
    r = np.random.RandomState(3)  # the same numbers on each device
    out = {}
    def grads(name, fn, *arrays, dtype="float32"):
        xs = [paddle.to_tensor(a.astype(dtype) if a.dtype.kind == "f" else a, stop_gradient=a.dtype.kind != "f")
              for a in arrays]
        y = fn(*xs)
        g = paddle.to_tensor(np.linspace(-1, 1, int(np.prod(y.shape))).reshape(y.shape).astype(y.numpy().dtype))
        ds = paddle.grad([y], [x for x in xs if not x.stop_gradient], [g], allow_unused=True)
        out[name] = [y.numpy().tolist()] + [None if d is None else d.numpy().tolist() for d in ds]
    a, b = r.rand(3, 4) - 0.5, r.rand(4) + 0.5
    grads("add_broadcast", lambda x, y: x + y, a, b)
    grads("sub_broadcast", lambda x, y: x - y, a, b[None, :])
    grads("mul_div", lambda x, y: x * y / (y + 1), a, b)
    grads("matmul_t", lambda x, y: paddle.matmul(x, y, transpose_y=True), a, r.rand(5, 4))
    grads("matmul_batch", lambda x, y: paddle.matmul(x, y), r.rand(2, 3, 4), r.rand(4, 2))
    grads("relu_nan", lambda x: F.relu(x), np.array([np.nan, -1.0, 0.0, -0.0, 2.0]))
    grads("gelu", lambda x: F.gelu(x), a)
    grads("gelu_tanh", lambda x: F.gelu(x, approximate=True), a)
    grads("softmax_axis0", lambda x: F.softmax(x, axis=0), a)
    grads("sum_mean", lambda x: x.sum(axis=1, keepdim=True) + x.mean(), a)
    grads("scale", lambda x: paddle.scale(x, 2.5, bias=-1.0, bias_after_scale=False), a)
    labels = np.array([[0], [3], [-100]], np.int64)
    grads("ce_ignore", lambda x: F.cross_entropy(x, paddle.to_tensor(labels), reduction="none", ignore_index=-100),
          r.rand(3, 4))
    soft = r.rand(3, 4)
    soft /= soft.sum(1, keepdims=True)
    grads("ce_soft", lambda x: F.cross_entropy(x, paddle.to_tensor(soft.astype("float32")), soft_label=True), r.rand(3, 4))
    grads("conv_same_stride", lambda x, w: F.conv2d(x, w, stride=2, padding="SAME"), r.rand(1, 2, 7, 7), r.rand(3, 2, 3, 3))
    grads("conv_groups_dilation", lambda x, w: F.conv2d(x, w, padding=[1, 2], dilation=2, groups=2), r.rand(1, 4, 6, 6),
          r.rand(4, 2, 3, 3))
    tie = np.zeros((1, 1, 4, 4))
    tie[0, 0, 0, 1] = tie[0, 0, 1, 0] = -1.0
    grads("maxpool_ties", lambda x: F.max_pool2d(x, 2), tie)
    grads("maxpool_pad", lambda x: F.max_pool2d(x, 3, stride=2, padding=1), r.rand(1, 2, 5, 5))
    grads("avgpool_inclusive", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, exclusive=False), r.rand(1, 2, 5, 5))
    grads("adaptive_avg", lambda x: F.adaptive_avg_pool2d(x, 1), r.rand(2, 3, 4, 4))
    m, v = paddle.to_tensor(r.rand(3).astype("float32")), paddle.to_tensor(r.rand(3).astype("float32") + 0.5)
    grads("bn_train", lambda x, w, b: F.batch_norm(x, m, v, w, b, training=True), r.rand(2, 3, 2, 2), r.rand(3), r.rand(3))
    out["bn_running"] = [m.numpy().tolist(), v.numpy().tolist()]
    grads("bn_eval", lambda x, w, b: F.batch_norm(x, m, v, w, b, training=False), r.rand(2, 3, 2, 2), r.rand(3), r.rand(3))
    grads("layer_norm_2axes", lambda x, w, b: F.layer_norm(x, [3, 4], w, b), r.rand(2, 3, 4), r.rand(12), r.rand(12))
    ids = np.array([[1, 0, 3], [3, 3, 2]], np.int64)
    grads("embedding_pad", lambda w: F.embedding(paddle.to_tensor(ids), w, padding_idx=0), r.rand(4, 5))
    grads("transpose_reshape", lambda x: paddle.transpose(x, [1, 0, 2]).reshape([4, 6]), r.rand(2, 4, 3))
    grads("float64_matmul", lambda x, y: paddle.matmul(x, y), a, r.rand(4, 2), dtype="float64")
    out["cast"] = [paddle.cast(paddle.to_tensor(np.array([-1.5, 0.0, 2.7, np.nan], "float32")), d).numpy().tolist()
                   for d in ("int32", "int64", "bool")]
    out["full"] = [paddle.full([2, 2], 2.5, "int64").numpy().tolist(), paddle.full_like(paddle.ones([3]), -0.5).numpy().tolist()]
    paddle.seed(9)
    out["random"] = [paddle.uniform([3, 4], min=-1, max=2).numpy().tolist(), paddle.randn([5]).numpy().tolist(),
                     paddle.uniform([4], seed=5).numpy().tolist()]
    return out
res = {"device": run("hwa_cpu:0"), "cpu": run("cpu")}
with open(sys.argv[1], "w") as f:
    json.dump(res, f)
"""


def test_each_kernel_equals_paddles_cpu_kernel(folders, tmp_path):
    script, out = tmp_path / "cases.py", tmp_path / "cases.json"
    script.write_text(KERNEL_CASES)
    kernels = _traced([sys.executable, str(script), str(out)], folders["cpu"][0], "hwa_cpu")
    ran = {name for name, k in kernels.items() if k.device_calls}
    assert ran >= {"add_grad", "subtract_grad", "multiply_grad", "divide_grad", "matmul_grad", "relu", "relu_grad",
                   "gelu", "gelu_grad", "softmax_grad", "scale", "sum_grad", "mean_grad", "mean_all",
                   "cross_entropy_with_softmax", "cross_entropy_with_softmax_grad", "conv2d_grad", "pool2d_grad",
                   "batch_norm", "batch_norm_grad", "layer_norm", "layer_norm_grad", "embedding", "embedding_grad",
                   "cast", "full", "full_like", "uniform", "gaussian"}, sorted(ran)
    res = json.loads(out.read_text())
    for name, want in res["cpu"].items():
        got = res["device"][name]
        for i, (g, w) in enumerate(zip(got, want)):
            if w is None:
                assert g is None, (name, i)
                continue
            g, w = np.array(g, dtype=float), np.array(w, dtype=float)
            exact = name in ("relu_nan", "maxpool_ties", "cast", "full", "random", "embedding_pad", "transpose_reshape")
            if exact:
                np.testing.assert_array_equal(g, w, err_msg=f"{name} output {i}")
            else:
                np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6, err_msg=f"{name} output {i}")


REFUSED = r"""
import paddle, numpy as np
paddle.set_device("hwa_cpu:0")
w = paddle.create_parameter([3], "float32")
opt = paddle.optimizer.Adam(parameters=[w], amsgrad=True)
(w * w).sum().backward()
try:
    opt.step()
except Exception as err:
    print("REFUSED:", str(err).replace("\n", " "))
"""


def test_a_call_a_kernel_cannot_do_exactly_is_refused_naming_why(folders):
    proc = subprocess.run([sys.executable, "-c", REFUSED], capture_output=True, text=True, timeout=TIMEOUT,
                          env=_env(folders["cpu"][0]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stdout.split("REFUSED:", 1)[-1]
    assert "REFUSED:" in proc.stdout and "adam" in said and "amsgrad" in said and "hwa_cpu" in said, proc.stdout


def test_install_registers_composites_whose_sample_runs_and_leaves_the_rest_with_the_reason(monkeypatch):
    from hwadapter import host
    from hwadapter_paddle import kernels, training

    def needs_a_missing_op(dev, i, a, want):
        return {"out": host.tensor(dev, host.run_own_kernel("no_such_op", dev, host.data(i["x"])))}

    broken = training.Composite("relu6", "const DenseTensor& x, DenseTensor* out", ("float32",), needs_a_missing_op,
                                lambda d: ({"x": np.ones(3, d)}, {}))
    monkeypatch.setattr(training, "COMPOSITES", (training.BY_PHI["relu"], broken))
    found, left = kernels.plan_composites("cpu")
    assert found == {"relu": ["float32", "float64"]}
    assert [(x["phi"], x["dtypes"]) for x in left] == [("relu6", ["float32"])]
    assert "no_such_op" in left[0]["why"] and "KernelNotFoundError" in left[0]["why"]


def test_the_manifest_lists_the_composites_registered(folders):
    _, entry = folders["cpu"]
    python = entry["python"]
    composites = {r["phi"] for r in python["registered"] if r.get("composite")}
    assert {"matmul_grad", "adam", "sgd", "batch_norm_grad", "cross_entropy_with_softmax_grad"} <= composites
    assert python["left"] == []
    assert {r["phi"] for r in entry["registered"]} >= {"uniform", "gaussian", "contiguous"}
