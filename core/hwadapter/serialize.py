"""save/load of nested dicts of tensors and plain values in a binary file that is never unpickled (docs/saving.md)."""
from __future__ import annotations

import json
import math
import os
import secrets
import struct

import numpy as np

from .api import dtypes as _dt
from .api.shapes import MAX_RANK
from .api.errors import HwAdapterError, InvalidArgumentError
from .dispatch.tensor import Tensor
from .runtime.memory import check_fits
from .tensor import target_device, to_tensor

MAGIC = b"HWPARAMS"
VERSION = 1
_PREAMBLE = struct.Struct("<8sQQ")  # magic, format version, header length: 24 bytes
ALIGN = 64
MAX_HEADER = 100 * 1024 * 1024  # far above any real header; stops a forged length from allocating gigabytes
_DTYPES = {d.name: d for d in _dt.ALL}
_PLAIN = (type(None), bool, int, float, str)
_TENSOR_FIELDS = {"key", "kind", "dtype", "shape", "offset", "nbytes"}
# what other formats begin with, to say what a refused file is instead of "bad magic"
_FOREIGN = ((b"\x80", "a pickle, as torch.save, paddle.save and pickle.dump write"),
            (b"PK\x03\x04", "a zip archive, as torch.save writes its pickles in"),
            (b"\x93NUMPY", "a numpy .npy file"))


def _error(verb: str, path, what: str, fix: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{verb} {os.fspath(path)!r}: {what}. Fix: {fix}", fix=fix)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# ---------------------------------------------------------------------------------------------------------------
# save

def _flatten(obj, path, prefix: tuple, out: list) -> None:
    """Append (key path, value) for every leaf; an empty dict is a leaf so that it comes back."""
    if not obj and prefix:
        out.append((list(prefix), {}))
    for key, value in obj.items():
        where = "/".join(map(str, prefix + (key,)))
        if not isinstance(key, str):
            raise _error("save", path, f"key {where!r} is a {type(key).__name__}, not a str",
                         "use str keys (as state_dict() does)")
        if isinstance(value, dict):
            _flatten(value, path, prefix + (key,), out)
        elif isinstance(value, (Tensor, np.ndarray, np.generic)):
            dt = np.dtype(value.dtype)
            if dt.newbyteorder("=") not in _dt.ALL:
                raise _error("save", path, f"value {where!r} has dtype {dt}, which hwadapter lacks",
                             "convert it to one of " + ", ".join(_DTYPES))
            out.append((list(prefix + (key,)), value))
        elif isinstance(value, _PLAIN):
            out.append((list(prefix + (key,)), value))
        else:
            raise _error("save", path, f"value {where!r} is a {type(value).__name__}", "store tensors, numpy "
                         "arrays, dicts of them, or int, float, bool, str, None (convert lists to tensors)")


def _host(value) -> np.ndarray:
    """`value` as a little-endian C-contiguous host array (device tensors are read back here, one at a time)."""
    arr = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
    return np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))


def save(obj: dict, path) -> None:
    """Write a (nested) dict of tensors, numpy arrays and plain values to `path`, atomically."""
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(f"save: path is a {type(path).__name__}. Fix: pass a str or a pathlib.Path",
                                   fix="pass a str or a pathlib.Path")
    if not isinstance(obj, dict):
        raise _error("save", path, f"the object is a {type(obj).__name__}, not a dict",
                     "save a dict, e.g. model.state_dict()")
    leaves: list = []
    _flatten(obj, path, (), leaves)
    entries, tensors = [], []
    offset = end = 0  # offsets count from the start of the data section, so the header never depends on itself
    for key, value in leaves:
        if isinstance(value, (Tensor, np.ndarray, np.generic)):
            dt = np.dtype(value.dtype).newbyteorder("=")
            shape = [int(d) for d in value.shape]
            nbytes = math.prod(shape) * dt.itemsize
            entries.append({"key": key, "kind": "tensor", "dtype": dt.name, "shape": shape, "offset": offset,
                            "nbytes": nbytes})
            tensors.append(value)
            end = offset + nbytes
            offset = _align(end)
        elif isinstance(value, dict):
            entries.append({"key": key, "kind": "dict"})
        else:
            entries.append({"key": key, "kind": "value", "value": value})
    body = json.dumps({"entries": entries}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    header = body + b" " * (_align(_PREAMBLE.size + len(body)) - _PREAMBLE.size - len(body))  # aligns the data
    _write_atomically(path, header, entries, tensors, end)


def _write_atomically(path, header: bytes, entries: list, tensors: list, end: int) -> None:
    """Write to a temporary file beside `path`, then rename it over `path`: a crash leaves the old file or none."""
    target = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise _error("save", path, f"the directory {folder!r} does not exist", "create it first (os.makedirs)")
    try:
        # os.open with 0o666, not mkstemp (0o600): the saved file gets the permissions the user's umask gives
        tmp = os.path.join(folder, f".{os.path.basename(target)}.{secrets.token_hex(6)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as err:
        raise _error("save", path, f"cannot create a file in {folder!r} ({err.strerror})",
                     "save into a directory you can write") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_PREAMBLE.pack(MAGIC, VERSION, len(header)))
            f.write(header)
            start = f.tell()
            for e, value in zip((e for e in entries if e["kind"] == "tensor"), tensors):
                f.seek(start + e["offset"])  # the gaps that align each tensor read back as zeros
                f.write(_host(value).reshape(-1).view(np.uint8).data)
            f.truncate(start + end)  # a zero-size tensor last may sit past the last byte written
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass  # already renamed or gone; the original error is the one to report
        if isinstance(err, OSError):
            raise _error("save", path, f"cannot write it ({err.strerror or err})",
                         "check the path is a writable file name and the disk has room") from None
        raise


# ---------------------------------------------------------------------------------------------------------------
# load

def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a field appears twice in one object")
    return dict(pairs)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_entry(e, i: int, data_start: int, size: int, bad) -> None:
    """Refuse any entry whose fields are missing, of the wrong type, or out of bounds."""
    if not isinstance(e, dict) or not isinstance(e.get("kind"), str):
        bad(f"entry {i} is not an object with a str 'kind'")
    key = e.get("key")
    if not isinstance(key, list) or not key or not all(isinstance(k, str) for k in key):
        bad(f"entry {i} has key {str(key)[:80]}, not a non-empty list of str")
    name = "/".join(key)[:200]
    kind = e["kind"]
    if kind == "dict":
        if set(e) != {"key", "kind"}:
            bad(f"dict entry {name!r} has fields {sorted(e)}")
    elif kind == "value":
        if set(e) != {"key", "kind", "value"} or not isinstance(e["value"], _PLAIN):
            bad(f"value entry {name!r} is not {{key, kind, value}} with an int, float, bool, str or null value")
    elif kind == "tensor":
        if set(e) != _TENSOR_FIELDS:
            bad(f"tensor entry {name!r} has fields {sorted(e)}, not {sorted(_TENSOR_FIELDS)}")
        if not isinstance(e["dtype"], str) or e["dtype"] not in _DTYPES:
            bad(f"tensor {name!r} has dtype {str(e['dtype'])[:40]!r}, not one of {', '.join(_DTYPES)}")
        shape = e["shape"]
        if not isinstance(shape, list) or len(shape) > MAX_RANK or not all(_is_int(d) and d >= 0 for d in shape):
            bad(f"tensor {name!r} has shape {str(shape)[:80]}, not a list of at most {MAX_RANK} ints >= 0")
        offset, nbytes = e["offset"], e["nbytes"]
        if not _is_int(offset) or not _is_int(nbytes) or nbytes < 0 or offset < 0 or offset % ALIGN:
            bad(f"tensor {name!r} has offset {str(offset)[:30]} and length {str(nbytes)[:30]}: they must be ints "
                f">= 0, the offset a multiple of {ALIGN}")
        if data_start + offset + nbytes > size:
            bad(f"tensor {name!r} ends at byte {data_start + offset + nbytes}, past the end of the file ({size} "
                f"bytes): the file is truncated or corrupt")
        # math.prod of a forged shape is a big int, never an allocation: compared before anything is read
        if math.prod(shape) * _DTYPES[e["dtype"]].itemsize != nbytes:
            bad(f"tensor {name!r} has length {nbytes}, but shape {shape} of {e['dtype']} needs "
                f"{math.prod(shape) * _DTYPES[e['dtype']].itemsize} bytes")
    else:
        bad(f"entry {name!r} has kind {kind[:40]!r}, not 'tensor', 'value' or 'dict'")


def _read_header(f, path, size: int, bad) -> tuple[list, int]:
    """The checked entries of an open file, and where its data section starts."""
    head = f.read(_PREAMBLE.size)
    if len(head) < 8 or head[:8] != MAGIC:
        for prefix, what in _FOREIGN:
            if head.startswith(prefix):
                bad(f"not a hwadapter file (it looks like {what}); hwadapter never unpickles",
                    "load the file with the tool that wrote it, then hw.save its tensors")
        bad(f"not a hwadapter file: it does not begin with {MAGIC!r}", "pass a file written by hwadapter's save")
    if len(head) < _PREAMBLE.size:
        bad(f"the file is truncated ({size} bytes, shorter than the {_PREAMBLE.size}-byte preamble)")
    _, version, length = _PREAMBLE.unpack(head)
    if version != VERSION:
        bad(f"format version {version}, but this hwadapter reads version {VERSION}",
            "load it with the hwadapter version that wrote it")
    if length > MAX_HEADER or _PREAMBLE.size + length > size:
        bad(f"the header claims {length} bytes, but the file has {size} bytes and headers are at most "
            f"{MAX_HEADER}: the file is truncated or corrupt")
    raw = f.read(length)
    if len(raw) != length:
        bad("the file ended inside its header (it changed while being read?)")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        bad(f"the header is not valid UTF-8 JSON ({str(err)[:120]})")
    if not isinstance(header, dict) or set(header) != {"entries"} or not isinstance(header["entries"], list):
        bad("the header is not an object with one field, 'entries', a list")
    data_start = _PREAMBLE.size + length
    for i, e in enumerate(header["entries"]):
        _check_entry(e, i, data_start, size, bad)
    spans = sorted((e["offset"], e["offset"] + e["nbytes"], "/".join(e["key"])[:200])
                   for e in header["entries"] if e["kind"] == "tensor")
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
        if begin < end:
            bad(f"tensors {a!r} and {b!r} overlap in the file")
    return header["entries"], data_start


def _place(out: dict, key: list, value, bad) -> None:
    """Put `value` at the nested `key` of `out`, refusing a key given twice or both a value and a dict."""
    node = out
    for part in key[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            bad(f"key {'/'.join(key)[:200]!r} nests under a value that is not a dict")
    if key[-1] in node:
        bad(f"key {'/'.join(key)[:200]!r} appears twice")
    node[key[-1]] = value


def load(path, device=None) -> dict:
    """Read a file written by `save`: the same nested dict, with tensors on `device` (default: the current one)."""
    def bad(what: str, fix: str = "the file is damaged: save it again from its source") -> None:
        raise _error("load", path, what, fix)

    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(f"load: path is a {type(path).__name__}. Fix: pass a str or a pathlib.Path",
                                   fix="pass a str or a pathlib.Path")
    dev = target_device(device)  # a bad device is refused before the file is read
    try:
        f = open(path, "rb")
    except OSError as err:
        raise _error("load", path, f"cannot open it ({err.strerror or err})", "check the path") from None
    out: dict = {}
    with f:
        try:
            size = os.fstat(f.fileno()).st_size
            entries, data_start = _read_header(f, path, size, bad)
            skeleton: dict = {}
            for e in entries:  # a key given twice, or nested under a value, is refused before any tensor is read
                _place(skeleton, e["key"], {} if e["kind"] == "dict" else None, bad)
            total = sum(e["nbytes"] for e in entries if e["kind"] == "tensor")
            check_fits(f"load {os.fspath(path)!r}", (total,), np.uint8, None)  # before any tensor is read
            for e in entries:
                if e["kind"] == "tensor":
                    value = to_tensor(_read_tensor(f, e, data_start, bad), device=dev)
                else:
                    value = {} if e["kind"] == "dict" else e["value"]
                _place(out, e["key"], value, bad)
        except HwAdapterError:
            raise
        except OSError as err:
            bad(f"reading failed ({err.strerror or err})", "check the file and the disk")
    return out


def _read_tensor(f, e: dict, data_start: int, bad) -> np.ndarray:
    """One checked tensor entry's values, read straight into a new array (the file can close after)."""
    dt = _DTYPES[e["dtype"]]
    name = "/".join(e["key"])[:200]
    arr = np.empty(math.prod(e["shape"]), dtype=dt.newbyteorder("<"))
    f.seek(data_start + e["offset"])
    if (f.readinto(arr.view(np.uint8)) or 0) != e["nbytes"]:
        bad(f"the file ended inside tensor {name!r} (it changed while being read?)")
    if dt == _dt.bool_ and np.any(arr.view(np.uint8) > 1):
        bad(f"tensor {name!r} is bool but holds bytes other than 0 and 1")
    return arr.astype(dt, copy=False).reshape(e["shape"])
