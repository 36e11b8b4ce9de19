"""The light models the onnx wheel ships (onnx/backend/test/data/light): paths, the inputs onnx's own test runner
feeds them, their expected outputs and tolerances, and a variant with random weights for a sharper comparison.

onnx's runner (onnx.backend.test.runner.Runner._add_model_test, `use_dummy`) feeds each float input
`arange(n).reshape(shape) / n` (generate_dummy_data with random=False, unknown dims 1) and compares against
`<model>_output_<i>.pb` with the rtol/atol of `data/real/test_<model>/data.json` (default rtol 1e-3, atol 1e-7).
Their weights are ConstantOfShape fills of one value, so every class gets the same logit and the expected output is
a uniform softmax: `with_random_weights` replaces the fills by seeded random tensors for a comparison that sees
every channel (against onnxruntime).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

#: The light models, smallest work first (ResNet-50 and SqueezeNet run in `make test`).
MODELS = ("squeezenet", "resnet50", "shufflenet", "bvlc_alexnet", "zfnet512", "inception_v1", "inception_v2",
          "densenet121", "vgg19")
_DEFAULT_RTOL, _DEFAULT_ATOL = 1e-3, 1e-7


def data_dir() -> Path:
    """onnx/backend/test/data of the installed onnx."""
    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data"


def path(name: str) -> Path:
    """The light model's .onnx file."""
    return data_dir() / "light" / f"light_{name}.onnx"


def available() -> list:
    """The light models the installed onnx ships."""
    return [m for m in MODELS if path(m).is_file()]


def tolerances(name: str) -> tuple:
    """(rtol, atol) onnx's runner compares this model with."""
    meta = data_dir() / "real" / f"test_{name}" / "data.json"
    if meta.is_file():
        doc = json.loads(meta.read_text())
        return float(doc.get("rtol", _DEFAULT_RTOL)), float(doc.get("atol", _DEFAULT_ATOL))
    return _DEFAULT_RTOL, _DEFAULT_ATOL


def dummy_input(value_info) -> np.ndarray:
    """The input onnx's runner makes for a float graph input: arange(n) / n in its shape (unknown dims: 1)."""
    dims = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in value_info.type.tensor_type.shape.dim)
    n = int(np.prod(dims))
    return (np.arange(n).reshape(dims) / n).astype(np.float32)


def inputs(model) -> dict:
    """{input name: array} as onnx's runner feeds the model (initializers listed as inputs left out)."""
    inits = {t.name for t in model.graph.initializer}
    return {vi.name: dummy_input(vi) for vi in model.graph.input if vi.name not in inits}


def expected(name: str, model) -> list:
    """The expected outputs shipped beside the model."""
    out = []
    for i in range(len(model.graph.output)):
        out.append(numpy_helper.to_array(onnx.load_tensor(str(path(name))[:-5] + f"_output_{i}.pb")))
    return out


def load(name: str):
    """(ModelProto, inputs, expected outputs, (rtol, atol)) of a light model."""
    model = onnx.load(str(path(name)))
    return model, inputs(model), expected(name, model), tolerances(name)


def _fill(rng, shape, op: str, index: int) -> np.ndarray:
    """Random weights of a plausible scale for the input `index` of an `op` node (activations stay near unit size)."""
    shape = tuple(int(s) for s in shape)
    size = int(np.prod(shape)) or 1
    if op == "Conv" and index == 1:
        fan_in = size // shape[0]
        return rng.normal(0, np.sqrt(1.0 / fan_in), shape)
    if op == "Gemm" and index == 1:
        return rng.normal(0, 1 / np.sqrt(min(shape)), shape)
    if op == "BatchNormalization" and index in (1, 4):  # scale, variance
        return rng.uniform(0.5, 1.5, shape)
    return rng.normal(0, 0.1, shape)


def with_random_weights(model, seed: int = 0, logits: bool = True):
    """A copy of `model` whose ConstantOfShape weights are seeded random initializers; with `logits`, the input of
    the final Softmax is an extra graph output (the uniform softmax hides the logits)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    rng = np.random.default_rng(seed)
    consts = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    consumers = {}
    for n in m.graph.node:
        for k, name in enumerate(n.input):
            consumers.setdefault(name, (n.op_type, k))
    keep = []
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in consts:
            op, index = consumers.get(n.output[0], ("", 0))
            arr = _fill(rng, consts[n.input[0]], op, index).astype(np.float32)
            m.graph.initializer.append(numpy_helper.from_array(arr, n.output[0]))
        else:
            keep.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    if logits:
        soft = [n for n in keep if n.op_type == "Softmax"]
        if soft:
            logit = onnx.helper.make_tensor_value_info(soft[-1].input[0], onnx.TensorProto.FLOAT, None)
            m.graph.output.append(logit)
    return m
