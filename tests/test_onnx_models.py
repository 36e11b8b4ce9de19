"""The light models the onnx wheel ships (AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet,
SqueezeNet, VGG-19, ZFNet-512) on cpu and opencl:0, through hwadapter.onnx.backend as onnx's own runner drives a
backend: its inputs, its expected outputs, its tolerances. ResNet-50 and SqueezeNet run in `make test`; the rest
are marked slow (`make test-slow`).

The shipped weights are fills of one value, so the expected output is a uniform softmax; the same models with
seeded random weights, their logits exposed, are compared against onnxruntime too (skipped without it)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from hwadapter.onnx import backend, light  # noqa: E402

FAST = ("resnet50", "squeezenet")  # in `make test`, on both devices
DEVICES = ("cpu", "opencl:0")


def _device(dev: str) -> str:
    if not backend.supports_device(dev):
        pytest.skip(f"no {dev} device here (install plugins/opencl and an OpenCL driver: scripts/ensure-opencl.sh)")
    return dev


def _params(models=light.MODELS):
    return [pytest.param(m, d, id=f"{m}-{d}", marks=() if m in FAST else pytest.mark.slow)
            for m in models for d in DEVICES]


def test_every_light_model_is_shipped_and_known():
    shipped = {p.name[len("light_"):-len(".onnx")] for p in (light.data_dir() / "light").glob("light_*.onnx")}
    assert shipped == set(light.MODELS), "the installed onnx ships other light models: update light.MODELS"


def test_inputs_are_the_ones_onnxs_runner_makes():
    from onnx.backend.test.runner import Runner
    model, feeds, _, tol = light.load("squeezenet")
    (vi,) = [v for v in model.graph.input if v.name in feeds]
    np.testing.assert_array_equal(feeds[vi.name], Runner.generate_dummy_data(vi, seed=0, random=False))
    assert tol == (1e-3, 1e-7)


@pytest.mark.parametrize("name,dev", _params())
def test_light_model_matches_its_expected_output(name, dev):
    model, feeds, expected, (rtol, atol) = light.load(name)
    rep = backend.prepare(model, _device(dev))
    got = rep.run([feeds[n] for n in rep.model.inputs])
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name,dev", _params())
def test_light_model_with_random_weights_matches_onnxruntime(name, dev):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is this test's oracle (test extra)")
    model, feeds, _, (rtol, _) = light.load(name)
    model = light.with_random_weights(model, seed=1)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    rep = backend.prepare(model, _device(dev))
    got = rep.run([feeds[n] for n in rep.model.inputs])
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape
        # float32 sums in another order over ~50 layers: relative to the output's scale, not each element's
        np.testing.assert_allclose(g, e, rtol=rtol, atol=1e-4 * float(np.abs(e).max()), err_msg=f"output {i}")
