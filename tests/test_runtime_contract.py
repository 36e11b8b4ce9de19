"""The Runtime contract every plugin keeps: the conformance kit's runtime section on testdev:0, and DeviceArray over
the allocator on every available device."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from hwadapter import conformance
from hwadapter.plugin import DeviceArray
from hwadapter.runtime.device import get

PLUGINS = Path(__file__).parent / "plugins"  # testdev: on sys.path here (conftest), PYTHONPATH of the kit's children


def _random(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 100).astype(dtype)


def test_the_kits_runtime_section_passes_on_testdev(monkeypatch):
    """The contract's checks (copies of every dtype at sizes 0, 1, odd and large, memset, stream order, events,
    synchronize, memory stats and accounting, out-of-memory, double frees) live in the conformance kit's runtime
    section; cpu and opencl:0 run it in test_conformance.py, testdev:0 (separate, limited memory) runs it here."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(PLUGINS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    result = conformance.run("testdev", ["runtime"], progress=False)
    section = result.sections["runtime"]
    assert result.ok, "\n".join(f"{f.test}: {f.message}\n  {f.reproducer}" for f in result.failures)
    assert section.skipped == 0 and section.passed >= 25  # separate memory: the allocator checks run too


def test_device_array_round_trip_through_the_allocator(device):
    dev = get(device)
    if dev.host_memory:
        pytest.skip(f"{device} keeps tensors in host memory (numpy); its allocator is not used")
    host = _random((33, 5), "float64")
    arr = DeviceArray.from_numpy(dev, host)
    np.testing.assert_array_equal(arr.numpy(), host)
    np.testing.assert_array_equal(arr.reshape((5, 33)).numpy(), host.reshape(5, 33))


def test_device_array_reshape_takes_one_minus_one_as_the_reshape_op_does():
    """The reshape op's shape rule infers one -1 (numpy's); a subgraph reshaping a DeviceArray by that attribute
    failed on cuda:0 with "cannot reshape (3, 4, 2, 2) to (3, 2, -1)" (ONNX GroupNormalization, found on an H100)."""
    dev = get("testdev:0")
    arr = DeviceArray.empty(dev, (3, 4, 2, 2), np.dtype("float32"))
    assert arr.reshape((3, 2, -1)).shape == (3, 2, 8)
    assert arr.reshape((-1,)).shape == (48,)
    for bad in [(3, -1, -1), (5, -1), (7, 7)]:
        with pytest.raises(ValueError, match="cannot reshape"):
            arr.reshape(bad)
