"""BatchNorm1D, BatchNorm2D and LayerNorm with paddle's constructors: scale ones, shift zeros; BatchNorm's running
statistics are buffers `_mean` (zeros) and `_variance` (ones), as paddle names them in state dicts."""
from __future__ import annotations

import numpy as np

from ..api import dtypes as _dt
from ..api import shapes
from ..api.errors import InvalidArgumentError
from .. import autograd
from . import functional as F
from .initializer import Constant
from .layer import Layer


class _BatchNormBase(Layer):
    """Batch statistics (and running-average updates) in train mode, the running statistics in eval mode."""

    _formats: tuple = ()
    _ranks: tuple = ()

    def __init__(self, num_features, momentum=0.9, epsilon=1e-5, weight_attr=None, bias_attr=None,
                 data_format="NCHW", use_global_stats=None, name=None):
        super().__init__()
        layer = type(self).__name__
        self._num_features = shapes.int_arg(layer, "num_features", num_features, low=1)
        if data_format not in self._formats:
            raise InvalidArgumentError(f"{layer}: data_format must be one of {', '.join(self._formats)}, not "
                                       f"{shapes.show(data_format)}. Fix: pass one of those")
        self._momentum, self._epsilon, self._data_format = momentum, epsilon, data_format
        self._use_global_stats, self._name = use_global_stats, name
        c = [self._num_features]
        self.weight = self.create_parameter(c, weight_attr, default_initializer=Constant(1.0))
        self.bias = self.create_parameter(c, bias_attr, is_bias=True, default_initializer=Constant(0.0))
        dt = _dt.as_dtype(self._dtype)
        self.register_buffer("_mean", autograd.buffer(np.zeros(c, dt)))
        self.register_buffer("_variance", autograd.buffer(np.ones(c, dt)))

    def forward(self, input):  # noqa: A002
        if input.ndim not in self._ranks:
            raise InvalidArgumentError(f"{type(self).__name__}: input must be {' or '.join(map(str, self._ranks))}-D "
                                       f"({self._data_format}), got shape {list(input.shape)}. Fix: reshape it, or "
                                       f"use the BatchNorm of its rank")
        fmt = self._data_format
        if fmt in ("NC", "NCL", "NLC") and input.ndim == 2:
            fmt = "NC"
        return F.batch_norm(input, self._mean, self._variance, self.weight, self.bias, training=self.training,
                            momentum=self._momentum, epsilon=self._epsilon, data_format=fmt,
                            use_global_stats=self._use_global_stats)

    def extra_repr(self):
        out = f"num_features={self._num_features}, momentum={self._momentum}, epsilon={self._epsilon}"
        if self._data_format != "NCHW":
            out += f", data_format={self._data_format}"
        return out + ("" if self._name is None else f", name={self._name}")


class BatchNorm1D(_BatchNormBase):
    """Batch normalisation of [N, C] or [N, C, L] input (data_format 'NCL', or 'NLC' for channels last)."""

    _formats = ("NC", "NCL", "NLC")
    _ranks = (2, 3)

    def __init__(self, num_features, momentum=0.9, epsilon=1e-5, weight_attr=None, bias_attr=None,
                 data_format="NCL", use_global_stats=None, name=None):
        super().__init__(num_features, momentum, epsilon, weight_attr, bias_attr, data_format, use_global_stats,
                         name)


class BatchNorm2D(_BatchNormBase):
    """Batch normalisation of [N, C, H, W] input (or NHWC)."""

    _formats = ("NCHW", "NHWC")
    _ranks = (4,)


class LayerNorm(Layer):
    """Normalise over the trailing normalized_shape axes, then scale (ones) and shift (zeros)."""

    def __init__(self, normalized_shape, epsilon=1e-5, *, elementwise_affine=True, bias=True, device=None,
                 dtype=None, weight_attr=None, bias_attr=None, name=None):
        super().__init__()
        self._normalized_shape = list(shapes.int_list("LayerNorm", "normalized_shape", normalized_shape, low=1,
                                                      scalar_ok=True))
        self._epsilon, self._name = epsilon, name
        affine = elementwise_affine and weight_attr is not False
        self.weight = self.create_parameter(self._normalized_shape, weight_attr if affine else False, dtype=dtype,
                                            default_initializer=Constant(1.0), device=device)
        self.bias = self.create_parameter(self._normalized_shape, bias_attr if affine and bias else False,
                                          dtype=dtype, is_bias=True, default_initializer=Constant(0.0),
                                          device=device)

    def forward(self, input):  # noqa: A002
        return F.layer_norm(input, self._normalized_shape, self.weight, self.bias, self._epsilon)

    def extra_repr(self):
        return f"normalized_shape={self._normalized_shape}, epsilon={self._epsilon}"
