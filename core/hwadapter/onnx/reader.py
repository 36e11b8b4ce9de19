"""Reading a model file safely: parse errors named, external data only from beside the model, nothing executed."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np

from ..api.errors import InvalidArgumentError

_FIX = "check that the file is a complete ONNX model (onnx.checker.check_model) and was not truncated"


def _onnx():
    try:
        import onnx  # lazy: onnx is an optional package (the onnx extra): this says so when it is missing
    except ImportError as err:
        raise InvalidArgumentError("onnx: the onnx package is not installed",
                                   fix="pip install 'hwadapter[onnx]' (or pip install onnx)") from err
    return onnx


def read_model(source):
    """A ModelProto from a path, bytes or a ModelProto, with its external data loaded from beside the file."""
    onnx = _onnx()
    if isinstance(source, onnx.ModelProto):
        _refuse_external(onnx, source, "<ModelProto>")
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        model = _parse(onnx, bytes(source), "<bytes>")
        _refuse_external(onnx, model, "<bytes>")
        return model
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
    if not model.opset_import:  # required since IR version 3; a file cut before its last field loses it
        raise InvalidArgumentError(f"onnx: {where} imports no opset (a truncated file, or not a model)", fix=_FIX)
    return model


def _tensors(onnx, model):
    """Every TensorProto of the model: initializers and Constant attributes, in subgraphs too."""
    return onnx.external_data_helper._get_all_tensors(model)  # `import onnx` imports its external_data_helper


def _refuse_external(onnx, model, where: str) -> None:
    """A model given as bytes or a proto has no directory: external data would be read from wherever; refuse."""
    for tensor in _tensors(onnx, model):
        if onnx.external_data_helper.uses_external_data(tensor):
            raise InvalidArgumentError(
                f"onnx: {where}: tensor {tensor.name!r} keeps its data in an external file, and a model given as "
                "bytes or a ModelProto has no directory to read it from",
                fix="pass the model's path (its data files beside it), or save it with the data inside")


def _int_field(info: dict, key: str, where: str, tensor) -> int | None:
    """An external-data offset or length: a non-negative integer, or None when absent."""
    text = info.get(key)
    if text in (None, ""):
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidArgumentError(f"onnx: {where}: tensor {tensor.name!r} has external data {key} {text!r}",
                                   fix="the " + key + " must be a non-negative integer: " + _FIX)
    return value


def _expected_bytes(onnx, tensor) -> int | None:
    """How many raw bytes the tensor's dims and type need (None for types without a fixed size: strings)."""
    try:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except Exception:
        return None
    if tensor.data_type == onnx.TensorProto.STRING or itemsize == 0:
        return None
    n = 1
    for d in tensor.dims:
        n *= int(d)
    bits = {onnx.TensorProto.INT4: 4, onnx.TensorProto.UINT4: 4}.get(tensor.data_type)
    for name in ("INT2", "UINT2", "FLOAT4E2M1"):
        if getattr(onnx.TensorProto, name, None) == tensor.data_type:
            bits = 4 if name == "FLOAT4E2M1" else 2
    return (n * bits + 7) // 8 if bits else n * itemsize


def _inside(base: Path, rel: str, where: str, tensor) -> Path:
    """The external data file `rel` names, refused unless it is a relative name of a file under `base`."""
    try:
        target = (base / rel).resolve()  # a symlink loop raises RuntimeError, a NUL byte ValueError
        inside = not os.path.isabs(rel) and ".." not in Path(rel).parts and base in target.parents
    except (OSError, RuntimeError, ValueError) as err:
        raise InvalidArgumentError(f"onnx: {where}: tensor {tensor.name!r} names its external data {rel[:80]!r}, "
                                   f"which is not a usable file name ({type(err).__name__}: {err})",
                                   fix="keep external data files beside the model and refer to them by a relative "
                                       "name") from None
    if not inside:
        raise InvalidArgumentError(
            f"onnx: {where}: tensor {tensor.name!r} points outside the model's directory ({rel[:80]!r})",
            fix="keep external data files beside the model and refer to them by a relative name")
    return target


def _read_external(target: Path, rel: str, offset: int, length: int | None, need: int | None, where: str, tensor):
    """The bytes of one tensor's external data: a regular file with one link (a hard link may lead anywhere), the
    range checked against the file's and the tensor's size before it is read."""
    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        what = "is missing" if isinstance(err, FileNotFoundError) else f"cannot be opened ({err.strerror or err})"
        raise InvalidArgumentError(f"onnx: {where}: external data {rel[:80]!r} of tensor {tensor.name!r} {what}",
                                   fix="copy the model's data files beside it") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InvalidArgumentError(f"onnx: {where}: external data {rel[:80]!r} of tensor {tensor.name!r} is not a "
                                   f"regular file", fix="copy the model's data files beside it")
    with os.fdopen(fd, "rb") as f:
        if st.st_nlink > 1:
            raise InvalidArgumentError(
                f"onnx: {where}: external data {rel[:80]!r} of tensor {tensor.name!r} is a hard link "
                f"({st.st_nlink} names): it may be a file from outside the model's directory, which is never read",
                fix="copy the data file beside the model instead of linking it")
        want = length if length is not None else max(0, st.st_size - offset)
        if offset + want > st.st_size:
            raise InvalidArgumentError(f"onnx: {where}: external data {rel[:80]!r} is shorter than tensor "
                                       f"{tensor.name!r} says ({max(0, st.st_size - offset)} of {want} bytes from "
                                       f"offset {offset})", fix=_FIX)
        if need is not None and want != need:
            raise InvalidArgumentError(f"onnx: {where}: tensor {tensor.name!r} of shape {tuple(tensor.dims)} needs "
                                       f"{need} bytes, its external data {rel[:80]!r} has {want}", fix=_FIX)
        f.seek(offset)
        data = f.read(want)
    if len(data) != want:  # the file shrank meanwhile
        raise InvalidArgumentError(f"onnx: {where}: external data {rel[:80]!r} changed while it was read", fix=_FIX)
    return data


def _load_external(onnx, model, base: Path, where: str) -> None:
    """Fill tensors stored outside the model, reading only regular files under the model's own directory, each
    checked for its size before anything is read."""
    for tensor in _tensors(onnx, model):
        if not onnx.external_data_helper.uses_external_data(tensor):
            continue
        info = {e.key: e.value for e in tensor.external_data}
        rel = info.get("location", "")
        target = _inside(base, rel, where, tensor)
        offset = _int_field(info, "offset", where, tensor) or 0
        length = _int_field(info, "length", where, tensor)
        data = _read_external(target, rel, offset, length, _expected_bytes(onnx, tensor), where, tensor)
        tensor.raw_data = data
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
