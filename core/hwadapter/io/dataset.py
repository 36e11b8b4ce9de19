"""Map-style datasets: the `Dataset` base class and `TensorDataset` over arrays sharing their first dimension."""
from __future__ import annotations

import numpy as np

from ..api.errors import InvalidArgumentError
from ..dispatch.tensor import Tensor


class Dataset:
    """A map-style dataset: subclasses give `__getitem__(index)` (one sample) and `__len__` (how many)."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} does not implement __getitem__. Fix: define "
                                  f"__getitem__(self, index) returning sample `index` of the dataset")

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement __len__. Fix: define __len__(self) "
                                  f"returning the number of samples")


def _host(field, i: int) -> np.ndarray:
    """Field `i` of a TensorDataset as a host array (a tensor is downloaded once, here, not once per sample)."""
    if isinstance(field, Tensor):
        arr = field.numpy()
    elif isinstance(field, np.ndarray):
        arr = field  # kept, not copied, as paddle keeps the tensors it is given
    else:
        raise InvalidArgumentError(f"TensorDataset: field {i} is a {type(field).__name__}, not a Tensor or numpy "
                                   f"array", fix="pass a list of Tensors or numpy arrays")
    if arr.ndim == 0:
        raise InvalidArgumentError(f"TensorDataset: field {i} is 0-d (shape ()), it has no first dimension to "
                                   f"index samples by", fix="pass arrays of at least one dimension")
    return arr


class TensorDataset(Dataset):
    """Samples are the rows of a list of Tensors or numpy arrays that share their first dimension.

    Item i is a tuple of the i-th rows, as numpy arrays on the host: the DataLoader uploads a whole batch at once.
    """

    def __init__(self, tensors):
        if not isinstance(tensors, (list, tuple)) or not tensors:
            raise InvalidArgumentError(f"TensorDataset: tensors must be a non-empty list of Tensors or numpy arrays, "
                                       f"got {type(tensors).__name__}", fix="pass e.g. TensorDataset([x, y])")
        self.arrays = tuple(_host(field, i) for i, field in enumerate(tensors))
        shapes = [a.shape for a in self.arrays]
        if len({s[0] for s in shapes}) != 1:
            raise InvalidArgumentError(f"TensorDataset: the fields must have the same first dimension (the number "
                                       f"of samples); their shapes are {', '.join(map(str, shapes))}",
                                       fix="pass arrays with one row per sample each")

    def __getitem__(self, index):
        return tuple(a[index] for a in self.arrays)

    def __len__(self):
        return self.arrays[0].shape[0]
