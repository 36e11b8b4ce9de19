"""Pooling layers: MaxPool2D, AvgPool2D, AdaptiveAvgPool2D, AdaptiveMaxPool2D (paddle's constructors)."""
from __future__ import annotations

from ..api.errors import InvalidArgumentError
from . import functional as F
from .layer import Layer


class MaxPool2D(Layer):
    """Max over sliding windows (return_mask is not supported)."""

    def __init__(self, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False, data_format="NCHW",
                 name=None):
        super().__init__()
        if return_mask:
            raise InvalidArgumentError("MaxPool2D: return_mask=True is not supported. Fix: leave it False")
        self.ksize, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.data_format = ceil_mode, data_format

    def forward(self, x):
        return F.max_pool2d(x, self.ksize, self.stride, self.padding, self.ceil_mode, self.data_format)

    def extra_repr(self):
        return f"kernel_size={self.ksize}, stride={self.stride}, padding={self.padding}"


class AvgPool2D(Layer):
    """Mean over sliding windows; exclusive=True (paddle's default) leaves padding out of the count."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True, divisor_override=None,
                 data_format="NCHW", name=None):
        super().__init__()
        if divisor_override is not None:
            raise InvalidArgumentError("AvgPool2D: divisor_override is not supported. Fix: leave it None, or scale "
                                       "the result yourself")
        self.ksize, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.exclusive, self.data_format = ceil_mode, exclusive, data_format

    def forward(self, x):
        return F.avg_pool2d(x, self.ksize, self.stride, self.padding, self.ceil_mode, self.exclusive,
                            self.data_format)

    def extra_repr(self):
        return f"kernel_size={self.ksize}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2D(Layer):
    """Average pooling to a fixed output size (1: global average pooling)."""

    def __init__(self, output_size, data_format="NCHW", name=None):
        super().__init__()
        self._output_size, self._data_format = output_size, data_format

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self._output_size, self._data_format)

    def extra_repr(self):
        return f"output_size={self._output_size}"


class AdaptiveMaxPool2D(Layer):
    """Max pooling to a fixed output size (return_mask is not supported)."""

    def __init__(self, output_size, return_mask=False, name=None):
        super().__init__()
        if return_mask:
            raise InvalidArgumentError("AdaptiveMaxPool2D: return_mask=True is not supported. Fix: leave it False")
        self._output_size, self._return_mask = output_size, return_mask

    def forward(self, x):
        return F.adaptive_max_pool2d(x, self._output_size)

    def extra_repr(self):
        return f"output_size={self._output_size}, return_mask={self._return_mask}"
