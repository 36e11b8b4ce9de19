"""Linear, Embedding, Dropout and Flatten with paddle's constructors and default initialisers."""
from __future__ import annotations

import numpy as np

from ..api import shapes
from ..api.errors import InvalidArgumentError
from ..autograd import mark_parameter
from ..dispatch.tensor import Tensor
from ..ops.manipulation import flatten
from . import functional as F
from .initializer import Constant, XavierUniform
from .layer import Layer


def _positive(layer: str, name: str, value) -> int:
    return shapes.int_arg(layer, name, value, low=1)


class Linear(Layer):
    """y = x @ weight + bias with weight [in_features, out_features] (Xavier uniform) and bias zeros."""

    def __init__(self, in_features, out_features, weight_attr=None, bias_attr=None, name=None):
        super().__init__()
        self.in_features = _positive("Linear", "in_features", in_features)
        self.out_features = _positive("Linear", "out_features", out_features)
        self.weight = self.create_parameter([self.in_features, self.out_features], weight_attr,
                                            default_initializer=XavierUniform())
        self.bias = self.create_parameter([self.out_features], bias_attr, is_bias=True,
                                          default_initializer=Constant(0.0))
        self.name = name

    def forward(self, input):  # noqa: A002  paddle's name
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, dtype={self._dtype.name}"


class Embedding(Layer):
    """A table of num_embeddings rows of embedding_dim (Xavier uniform); the padding_idx row starts at zero and
    gives zeros."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0, *,
                 scale_grad_by_freq=False, sparse=False, _weight=None, _freeze=False, device=None, dtype=None,
                 weight_attr=None, name=None):
        super().__init__()
        self._num_embeddings = _positive("Embedding", "num_embeddings", num_embeddings)
        self._embedding_dim = _positive("Embedding", "embedding_dim", embedding_dim)
        if max_norm is not None or scale_grad_by_freq:
            raise InvalidArgumentError("Embedding: max_norm and scale_grad_by_freq are not supported. Fix: leave "
                                       "them at None and False")
        rows = self._num_embeddings
        self._padding_idx = padding_idx
        pad = None if padding_idx is None else \
            shapes.int_arg("Embedding", "padding_idx", padding_idx, low=-rows, high=rows - 1) % rows
        self._pad_row, self._sparse, self._scale_grad_by_freq = pad, bool(sparse), False
        shape = [rows, self._embedding_dim]
        if _weight is not None:
            if not isinstance(_weight, Tensor) or list(_weight.shape) != shape:
                raise InvalidArgumentError(f"Embedding: _weight must be a tensor of shape {shape}. Fix: pass a "
                                           f"[num_embeddings, embedding_dim] tensor")
            self.weight = mark_parameter(_weight)
        else:
            init = XavierUniform()
            if pad is not None:
                init = _ZeroRow(init, pad)
            self.weight = self.create_parameter(shape, weight_attr, dtype=dtype, default_initializer=init,
                                                device=device)
        if _freeze:
            self.weight.stop_gradient = True
        self._name = name

    @property
    def padding_idx(self):
        return self._padding_idx

    def forward(self, x):
        return F.embedding(x, self.weight, padding_idx=self._pad_row)

    def extra_repr(self):
        pad = "" if self._padding_idx is None else f", padding_idx={self._padding_idx}"
        return (f"{self._num_embeddings}, {self._embedding_dim}{pad}, sparse={self._sparse}, "
                f"scale_grad_by_freq={self._scale_grad_by_freq}")


class _ZeroRow:
    """An initializer with one row set to zero (Embedding's padding row, as paddle zeroes it at construction)."""

    def __init__(self, base, row: int):
        self.base, self.row = base, row

    def __call__(self, shape, dtype):
        arr = np.array(self.base(shape, dtype))
        arr[self.row] = 0
        return arr


class Dropout(Layer):
    """Zero elements with probability p in training (scaled by 1 / (1 - p) in paddle's default mode); the
    identity in eval."""

    def __init__(self, p=0.5, inplace=False, axis=None, mode="upscale_in_train", name=None):
        super().__init__()
        F.dropout_args(p, mode)  # a bad p or mode is refused here, not at the first forward
        self.p, self.inplace, self.axis, self.mode, self.name = p, inplace, axis, mode, name

    def forward(self, input):  # noqa: A002
        return F.dropout(input, self.p, axis=self.axis, training=self.training, mode=self.mode)

    def extra_repr(self):
        return f"p={self.p}, axis={self.axis}, mode={self.mode}, inplace={self.inplace}"


class Flatten(Layer):
    """Merge axes start_axis..stop_axis (default: everything after the batch axis)."""

    def __init__(self, start_axis=1, stop_axis=-1):
        super().__init__()
        self.start_axis, self.stop_axis = start_axis, stop_axis

    def forward(self, input):  # noqa: A002
        return flatten(input, self.start_axis, self.stop_axis)
