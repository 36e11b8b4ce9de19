"""Reading a model file safely: parse errors named, external data only from beside the model, nothing executed."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import InvalidArgumentError

_FIX = "check that the file is a complete ONNX model (onnx.checker.check_model) and was not truncated"


def _onnx():
    try:
        import onnx
    except ImportError as err:
        raise InvalidArgumentError("onnx: the onnx package is not installed",
                                   fix="pip install 'hwadapter[onnx]' (or pip install onnx)") from err
    return onnx


def read_model(source):
    """A ModelProto from a path, bytes or a ModelProto, with its external data loaded from beside the file."""
    onnx = _onnx()
    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, (bytes, bytearray)):
        return _parse(onnx, bytes(source), "<bytes>")
    path = Path(os.fspath(source))
    if not path.is_file():
        raise InvalidArgumentError(f"onnx: no model file {str(path)!r}", fix="pass the path of an .onnx file")
    model = _parse(onnx, path.read_bytes(), str(path))
    _load_external(onnx, model, path.parent.resolve(), str(path))
    return model


def _parse(onnx, data: bytes, where: str):
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError and friends: the file is not a model
        raise InvalidArgumentError(f"onnx: {where} is not a valid ONNX model ({type(err).__name__}: {err})",
                                   fix=_FIX) from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise InvalidArgumentError(f"onnx: {where} holds no graph (empty or truncated file)", fix=_FIX)
    return model


def _tensors(onnx, model):
    """Every TensorProto of the model: initializers and Constant attributes, in subgraphs too."""
    from onnx.external_data_helper import _get_all_tensors
    return _get_all_tensors(model)


def _load_external(onnx, model, base: Path, where: str) -> None:
    """Fill tensors stored outside the model, reading only files under the model's own directory."""
    from onnx.external_data_helper import uses_external_data
    for tensor in _tensors(onnx, model):
        if not uses_external_data(tensor):
            continue
        info = {e.key: e.value for e in tensor.external_data}
        rel = info.get("location", "")
        target = (base / rel).resolve()
        if os.path.isabs(rel) or ".." in Path(rel).parts or base not in target.parents:
            raise InvalidArgumentError(
                f"onnx: {where}: tensor {tensor.name!r} points outside the model's directory ({rel!r})",
                fix="keep external data files beside the model and refer to them by a relative name")
        if not target.is_file():
            raise InvalidArgumentError(f"onnx: {where}: external data {rel!r} of tensor {tensor.name!r} is missing",
                                       fix="copy the model's data files beside it")
        offset, length = int(info.get("offset", 0) or 0), info.get("length")
        with open(target, "rb") as f:
            f.seek(offset)
            data = f.read(int(length)) if length else f.read()
        if length and len(data) != int(length):
            raise InvalidArgumentError(f"onnx: {where}: external data {rel!r} is shorter than tensor "
                                       f"{tensor.name!r} says", fix=_FIX)
        tensor.raw_data = data
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
