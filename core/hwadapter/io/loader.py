"""`DataLoader`: batches of a map-style dataset, shuffled by a seeded numpy Generator, stacked on the host."""
from __future__ import annotations

import operator

import numpy as np

from ..api.errors import InvalidArgumentError, short_repr
from ..runtime import device as _device
from ..tensor import target_device, to_tensor
from .collate import stack, upload
from .dataset import TensorDataset


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidArgumentError(f"DataLoader: {name} must be a positive int, got {short_repr(value)}",
                                   fix=f"pass e.g. {name}=64")
    return int(value)


def _flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"DataLoader: {name} must be True or False, got {short_repr(value)}",
                                   fix=f"pass {name}=True or {name}=False")
    return bool(value)


def _seed(value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InvalidArgumentError(f"DataLoader: seed must be None or a non-negative int, got {short_repr(value)}",
                                   fix="pass e.g. seed=0, or seed=None for a fresh random order per loader")
    return int(value)


class DataLoader:
    """Iterates a map-style dataset in batches: `for x, y in DataLoader(train_set, batch_size=64, shuffle=True)`.

    Each `iter()` is one epoch; with shuffle, each epoch draws a new permutation from a numpy Generator seeded by
    `seed` (None: a fresh random seed), so a given seed gives the same sequence of epochs. Batches go to `device`
    (None: the current device when iteration starts).
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, seed=None, device=None,
                 collate_fn=None):
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise InvalidArgumentError(f"DataLoader: dataset must have __len__ and __getitem__ (a map-style dataset), "
                                       f"{type(dataset).__name__} does not",
                                       fix="subclass hwadapter.io.Dataset, or wrap arrays in TensorDataset")
        if collate_fn is not None and not callable(collate_fn):
            raise InvalidArgumentError(f"DataLoader: collate_fn must be callable, got {short_repr(collate_fn)}",
                                       fix="pass a function from a list of samples to a batch, or None")
        self.dataset, self.collate_fn = dataset, collate_fn
        self.batch_size = _positive_int("batch_size", batch_size)
        self.shuffle, self.drop_last = _flag("shuffle", shuffle), _flag("drop_last", drop_last)
        self.seed = _seed(seed)
        self.device = None if device is None else _device.get(device)  # a bad device string fails here, not later
        self._rng = np.random.default_rng(self.seed)

    def _size(self) -> int:
        try:
            n = operator.index(len(self.dataset))
        except TypeError:
            raise InvalidArgumentError(f"DataLoader: len() of the dataset ({type(self.dataset).__name__}) is not an "
                                       f"int", fix="return the number of samples from __len__") from None
        return n

    def __len__(self) -> int:
        """The number of batches of one epoch."""
        n = self._size()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        # not a generator: the epoch's order and device are fixed by iter() itself, not by the first next()
        n = self._size()
        order = self._rng.permutation(n) if self.shuffle else np.arange(n)
        device = target_device(self.device)  # once per epoch: a set_device inside the loop applies to the next one
        stop = n - n % self.batch_size if self.drop_last else n
        return (self._batch(order[start:start + self.batch_size], device)
                for start in range(0, stop, self.batch_size))

    def _batch(self, indices: np.ndarray, device):
        if self.collate_fn is None and type(self.dataset) is TensorDataset:
            # rows gathered by one fancy index per field, the same arrays as stacking the samples one by one
            return tuple(to_tensor(a[indices], device=device) for a in self.dataset.arrays)
        samples = [self.dataset[int(i)] for i in indices]
        if self.collate_fn is not None:
            return self.collate_fn(samples)
        return upload(stack(samples, indices.tolist()), device)
