"""The default collate: samples stacked field by field on the host with numpy, then one upload per field."""
from __future__ import annotations

import numbers

import numpy as np

from ..api import dtypes as _dt
from ..api.errors import InvalidArgumentError, UnsupportedDTypeError, short_repr
from ..dispatch.tensor import Tensor
from ..tensor import to_tensor

_ARRAY, _NUMBER, _TEXT, _MAP, _SEQ = "an array or Tensor", "a number", "a string", "a dict", "a tuple or list"


def _kind(sample) -> str | None:
    # numpy scalars are numbers.Number too: test the array kinds first, so that they keep their dtype
    if isinstance(sample, (Tensor, np.ndarray, np.generic)):
        return _ARRAY
    if isinstance(sample, numbers.Number):
        return _NUMBER
    if isinstance(sample, (str, bytes)):
        return _TEXT
    if isinstance(sample, dict):
        return _MAP
    if isinstance(sample, (tuple, list)):
        return _SEQ
    return None


def _mismatch(index: int, where: str, mine: str, first: int, theirs: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"DataLoader: sample {index}{where} {mine}, but sample {first} {theirs}",
                                fix="make every sample of the dataset the same structure: the same fields, each of "
                                    "the same kind and shape")


def _field(path: str) -> str:
    return f" (field {path})" if path else ""


def stack(samples: list, indices: list, path: str = ""):
    """The samples (sample `indices[k]` of the dataset is `samples[k]`) stacked into host arrays, per field."""
    kind = _kind(samples[0])
    where = _field(path)
    if kind is None:
        raise InvalidArgumentError(f"DataLoader: sample {indices[0]}{where} is a {type(samples[0]).__name__} "
                                   f"({short_repr(samples[0])}), which the default collate cannot batch",
                                   fix="return numpy arrays, Tensors, numbers, strings, or tuples, lists or dicts of "
                                       "them from __getitem__, or pass collate_fn=")
    for s, i in zip(samples, indices):
        if _kind(s) != kind:
            raise _mismatch(i, where, f"is a {type(s).__name__}", indices[0], f"is {kind}")
    if kind == _MAP:
        keys = list(samples[0])
        for s, i in zip(samples, indices):
            if set(s) != set(keys):
                raise _mismatch(i, where, f"has the keys {sorted(map(str, s))}", indices[0],
                                f"has {sorted(map(str, keys))}")
        return {k: stack([s[k] for s in samples], indices, f"{path}[{k!r}]") for k in keys}
    if kind == _SEQ:
        n = len(samples[0])
        for s, i in zip(samples, indices):
            if len(s) != n:
                raise _mismatch(i, where, f"has {len(s)} fields", indices[0], f"has {n}")
        fields = [stack([s[j] for s in samples], indices, f"{path}[{j}]") for j in range(n)]
        return fields if isinstance(samples[0], list) else tuple(fields)
    if kind == _TEXT:
        return list(samples)  # strings stay a list, as in paddle: there is no tensor of strings
    if kind == _NUMBER:
        arr = np.asarray(samples)
        # Python floats become float32, the default float dtype, as to_tensor makes them; ints become int64
        return _dt.fitted("DataLoader", arr, _dt.DEFAULT_FLOAT) if arr.dtype == np.float64 else arr
    arrays = [s.numpy() if isinstance(s, Tensor) else np.asarray(s) for s in samples]
    for a, i in zip(arrays, indices):
        if a.shape != arrays[0].shape:
            raise _mismatch(i, where, f"has shape {a.shape}", indices[0], f"has shape {arrays[0].shape}")
    return np.stack(arrays)


def upload(batch, device, path: str = ""):
    """A stacked batch with every host array made a Tensor on `device` (one copy per array)."""
    if isinstance(batch, dict):
        return {k: upload(v, device, f"{path}[{k!r}]") for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(upload(v, device, f"{path}[{j}]") for j, v in enumerate(batch))
    if isinstance(batch, list) and not (batch and isinstance(batch[0], (str, bytes))):
        return [upload(v, device, f"{path}[{j}]") for j, v in enumerate(batch)]
    if not isinstance(batch, np.ndarray):
        return batch
    try:
        return to_tensor(batch, device=device)
    except (InvalidArgumentError, UnsupportedDTypeError) as err:  # say which field could not become a tensor
        raise type(err)(f"DataLoader{_field(path)}: {err}", fix=err.fix or "make this field numbers, or arrays of a "
                        "supported dtype, in every sample, or pass collate_fn=") from None


def default_collate_fn(batch: list, device=None):
    """A list of samples as one batch: arrays, Tensors and numbers stacked into Tensors on `device` (default: the
    current one), tuples, lists and dicts collated field by field, strings kept as a list."""
    if not isinstance(batch, (list, tuple)) or not batch:
        raise InvalidArgumentError(f"default_collate_fn: batch must be a non-empty list of samples, got "
                                   f"{short_repr(batch)}", fix="pass the list of samples that make one batch")
    return upload(stack(list(batch), list(range(len(batch)))), device)
