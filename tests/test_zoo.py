"""The benchmark zoo's model families (issue 26: benchmarks/zoo.py times the full-size ones) in tiny versions: each
built from its transformers config (hidden sizes 16-64, 1-2 layers, 32-64 px images, 16 tokens; random weights
from a fixed seed) by the zoo's own recipes (benchmarks/_zoo_models.py, imported by path), exported to ONNX as the
zoo exports, run by hwadapter on cpu and compared with onnxruntime, the oracle, within the zoo's tolerance: rtol 1e-3,
atol 1e-3 x max(1, the output's largest magnitude). On opencl:0 they are slow (make test-slow)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[test]'): the zoo's "
                                           "models are built from its model definitions")
pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[test]'): it exports the zoo's models")
pytest.importorskip("onnx", reason="onnx is not installed (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install -e '.[test]'): the oracle")

import hwadapter.onnx as hwonnx  # noqa: E402
from hwadapter.onnx import backend  # noqa: E402

ROOT = Path(__file__).parents[1]
RTOL, ATOL = 1e-3, 1e-3


def _recipes():
    if "_zoo_models" not in sys.modules:
        spec = importlib.util.spec_from_file_location("_zoo_models", ROOT / "benchmarks" / "_zoo_models.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["_zoo_models"] = module
        spec.loader.exec_module(module)
    return sys.modules["_zoo_models"]


zoo = _recipes()


def _params():
    return [pytest.param(name, dev, id=f"{name}-{dev}", marks=() if dev == "cpu" else pytest.mark.slow)
            for dev in ("cpu", "opencl:0") for name in zoo.RECIPES]


@pytest.mark.parametrize("name, dev", _params())
def test_tiny_zoo_model_matches_onnxruntime(name, dev, tmp_path):
    if not backend.supports_device(dev):
        pytest.skip(f"no {dev} device here (install plugins/opencl and an OpenCL driver: scripts/ensure-opencl.sh)")
    recipe = zoo.RECIPES[name]
    model, inputs = recipe.build("tiny")
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(zoo.export(model, inputs, recipe.outputs).SerializeToString())
    feeds = zoo.feeds(inputs)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    m = hwonnx.load(str(path))
    assert m.outputs == list(recipe.outputs)
    devs = [dev] if dev == "cpu" else [dev, "cpu"]
    m.plan(devs, {k: v.shape for k, v in feeds.items()})
    got = m.run(feeds, devs)
    assert len(got) == len(want)
    for out, g, w in zip(recipe.outputs, got, want):
        # the random weights keep a signal: an output of ~0 would match anything (batch norm's statistics are set
        # from a random batch for this)
        assert np.abs(w).max() > 1e-2, f"{name}: onnxruntime's {out} is ~0: the recipe's weights lost the signal"
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL * max(1.0, float(np.abs(w).max())),
                                   err_msg=f"{name} on {dev}: {out} differs from onnxruntime's")


def test_the_cache_key_follows_the_recipe():
    recipe = zoo.RECIPES["vit_b16"]
    assert recipe.key("tiny") == recipe.key("tiny")
    assert recipe.key("tiny") != recipe.key("full")
    assert len({r.key("tiny") for r in zoo.RECIPES.values()}) == len(zoo.RECIPES)


def test_the_examples_are_the_inputs_the_model_was_built_with():
    recipe = zoo.RECIPES["bert_base"]
    _, inputs = recipe.build("tiny")
    example = recipe.example("tiny")
    assert list(example) == ["input_ids", "attention_mask"]
    for k in inputs:
        np.testing.assert_array_equal(example[k].numpy(), inputs[k].numpy())
