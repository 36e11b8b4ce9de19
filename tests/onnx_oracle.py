"""onnxruntime as the oracle of hand-built ONNX models: `agree(model, feeds)` runs both and compares every output."""
from __future__ import annotations

import numpy as np

import hwadapter as hw

DEVICES = ["cpu"] + (["opencl:0"] if hw.device.is_available("opencl") else [])


def same(got, want, where: str, rtol: float = 1e-6, atol: float = 1e-6) -> None:
    """got equals want: arrays alike in dtype, shape and values; lists alike element by element; None alike."""
    if want is None or got is None:
        assert got is None and want is None, f"{where}: {got!r} vs {want!r}"
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} vs {want!r}"
        for k, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{where}[{k}]", rtol, atol)
    else:
        got = got.numpy() if hasattr(got, "numpy") else got
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape, \
            f"{where}: {got!r} vs {want!r}"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=where)


def agree(model, feeds_list, devices=DEVICES, rtol: float = 1e-6, atol: float = 1e-6):
    """hwadapter's outputs equal onnxruntime's for every feed, on every device; the loaded model."""
    import onnxruntime as ort  # lazy: the tests that use it skip without it
    import hwadapter.onnx as hwonnx  # lazy: as above, onnx
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    loaded = hwonnx.load(model)
    for feeds in feeds_list:
        want = session.run(None, feeds)
        for dev in devices:
            got = loaded.run(feeds, [dev, "cpu"])
            assert len(got) == len(want)
            for k, (g, w) in enumerate(zip(got, want)):
                same(g, w, f"{dev}, output {k}", rtol, atol)
    return loaded
