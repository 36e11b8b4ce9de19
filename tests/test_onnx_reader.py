"""Reading ONNX model files (hwadapter.onnx.reader): whatever the bytes, a clear InvalidArgumentError or a model.

Malformed, truncated and empty files; external data only from beside the model (an absolute or `..` location, a
link out of the directory, a missing or short data file, a bad offset are refused); the model's bytes, a path and
a ModelProto all load.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hwadapter.api.errors import HwAdapterError, InvalidArgumentError
from hwadapter.onnx import load
from hwadapter.onnx.reader import read_model

W = np.arange(12, dtype=np.float32).reshape(3, 4)


def mlp() -> onnx.ModelProto:
    """y = relu(x @ w) with w an initializer, opset 17."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [x], [y], [numpy_helper.from_array(W, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def with_external(tmp_path, location: str, *, write=True, data=None, offset=None, length=None):
    """mlp() saved to tmp_path/m/model.onnx with `w` stored externally at `location`."""
    m = mlp()
    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    w = m.graph.initializer[0]
    raw = w.raw_data
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    entries = {"location": location}
    if offset is not None:
        entries["offset"] = str(offset)
    if length is not None:
        entries["length"] = str(length)
    for k, v in entries.items():
        e = w.external_data.add()
        e.key, e.value = k, v
    if write:
        target = d / location if not os.path.isabs(location) else location
        with open(target, "wb") as f:
            f.write(raw if data is None else data)
    path = d / "model.onnx"
    path.write_bytes(m.SerializeToString())
    return path


def test_a_path_bytes_and_a_proto_load_the_same_model(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(mlp().SerializeToString())
    for src in (path, str(path), path.read_bytes(), mlp()):
        m = read_model(src)
        assert [n.op_type for n in m.graph.node] == ["MatMul", "Relu"]


def test_the_file_is_never_executed_only_parsed(tmp_path):
    # a model file is data: reading one runs nothing (no pickle, no custom code); a Python file is just not a model
    path = tmp_path / "evil.onnx"
    path.write_text("import os; os.system('touch PWNED')")
    with pytest.raises(InvalidArgumentError):
        read_model(path)
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("data", [b"", b"\x00" * 64, b"not an onnx model at all", bytes(range(256)) * 4])
def test_malformed_and_empty_files_are_named(tmp_path, data):
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    with pytest.raises(InvalidArgumentError, match=r"bad\.onnx.*(not a valid ONNX model|holds no graph)") as e:
        read_model(path)
    assert "truncated" in e.value.fix or "truncated" in str(e.value)


def test_a_missing_file_is_named():
    with pytest.raises(InvalidArgumentError, match="no model file"):
        read_model("/nonexistent/model.onnx")


def test_every_truncation_of_a_model_is_refused_clearly():
    data = mlp().SerializeToString()
    for n in range(len(data)):
        try:
            m = load(data[:n])
            m.run([np.ones((2, 3), np.float32)])
        except HwAdapterError:
            continue  # a clear error from hwadapter's hierarchy: refused
        raise AssertionError(f"the model cut to {n} of {len(data)} bytes loaded and ran")


def test_external_data_beside_the_model_loads(tmp_path):
    path = with_external(tmp_path, "weights.bin")
    m = load(path)
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(m.run([x])[0], np.maximum(x @ W, 0))


def test_external_data_at_an_offset_loads(tmp_path):
    raw = W.tobytes()
    path = with_external(tmp_path, "weights.bin", data=b"\xff" * 16 + raw, offset=16, length=len(raw))
    np.testing.assert_array_equal(numpy_helper.to_array(read_model(path).graph.initializer[0]), W)


def test_an_absolute_external_location_is_refused(tmp_path):
    outside = tmp_path / "outside.bin"
    path = with_external(tmp_path, str(outside))
    with pytest.raises(InvalidArgumentError, match="outside the model's directory") as e:
        read_model(path)
    assert "beside the model" in e.value.fix


def test_a_dotdot_external_location_is_refused(tmp_path):
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    path = with_external(tmp_path, "../secret.bin", write=False)
    with pytest.raises(InvalidArgumentError, match="outside the model's directory"):
        read_model(path)


def test_a_link_out_of_the_directory_is_refused(tmp_path):
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    path = with_external(tmp_path, "weights.bin", write=False)
    os.symlink(tmp_path / "secret.bin", tmp_path / "m" / "weights.bin")
    with pytest.raises(InvalidArgumentError, match="outside the model's directory"):
        read_model(path)


def test_a_hard_link_in_the_directory_is_refused(tmp_path):
    """A hard link looks like a file of the directory, and may be any file of the same file system."""
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    path = with_external(tmp_path, "weights.bin", write=False)
    os.link(tmp_path / "secret.bin", tmp_path / "m" / "weights.bin")
    with pytest.raises(InvalidArgumentError, match="hard link") as e:
        read_model(path)
    assert "copy" in e.value.fix


@pytest.mark.parametrize("offset,length", [(0, 2**62), (2**62, None), (2**62, 48), (4, 48)])
def test_a_huge_or_past_the_end_range_is_refused_before_reading(tmp_path, offset, length):
    path = with_external(tmp_path, "weights.bin", offset=offset, length=length)
    with pytest.raises(InvalidArgumentError, match="'w'"):
        read_model(path)


@pytest.mark.parametrize("name", ["a\x00b.bin", "x" * 300 + ".bin", "loop.bin", "sub"])
def test_unusable_external_data_names_are_refused(tmp_path, name):
    path = with_external(tmp_path, name, write=False)
    if name == "loop.bin":  # a symlink loop
        os.symlink(tmp_path / "m" / "loop.bin", tmp_path / "m" / "loop.bin")
    if name == "sub":  # a directory, not a file
        (tmp_path / "m" / "sub").mkdir()
    with pytest.raises(InvalidArgumentError, match="'w'|external data"):
        read_model(path)


def test_missing_external_data_is_named(tmp_path):
    path = with_external(tmp_path, "weights.bin", write=False)
    with pytest.raises(InvalidArgumentError, match="'weights.bin'.*missing") as e:
        read_model(path)
    assert "data files beside it" in e.value.fix


def test_short_external_data_is_refused(tmp_path):
    path = with_external(tmp_path, "weights.bin", data=W.tobytes()[:20], length=48)
    with pytest.raises(InvalidArgumentError, match="shorter"):
        read_model(path)


def test_external_data_too_short_for_the_tensor_is_refused(tmp_path):
    path = with_external(tmp_path, "weights.bin", data=W.tobytes()[:20])  # no length given: the dims decide
    with pytest.raises(InvalidArgumentError, match="'w'"):
        read_model(path)


@pytest.mark.parametrize("offset,length", [(-4, None), ("x", None), (0, -1)])
def test_a_bad_offset_or_length_is_refused(tmp_path, offset, length):
    path = with_external(tmp_path, "weights.bin", offset=offset, length=length)
    with pytest.raises(InvalidArgumentError, match="offset|length"):
        read_model(path)


def test_external_data_in_bytes_is_refused_with_the_fix(tmp_path):
    path = with_external(tmp_path, "weights.bin")
    with pytest.raises(InvalidArgumentError, match="external file") as e:
        read_model(path.read_bytes())
    assert "path" in e.value.fix


def test_an_initializer_whose_data_does_not_fit_its_shape_is_named():
    m = mlp()
    m.graph.initializer[0].dims[:] = [300, 4]  # 1200 floats claimed, 12 stored
    with pytest.raises(InvalidArgumentError, match="initializer 'w' of shape \\(300, 4\\)"):
        load(m.SerializeToString()).run([np.ones((2, 3), np.float32)])


def test_a_constant_attribute_whose_data_does_not_fit_its_shape_is_named():
    t = numpy_helper.from_array(np.float32([1, 2, 3]), "c")
    t.dims[:] = [7]
    g = helper.make_graph([helper.make_node("Constant", [], ["y"], name="k", value=t)], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [7])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InvalidArgumentError, match="attribute 'value' of node 'k'"):
        load(m).run([])
