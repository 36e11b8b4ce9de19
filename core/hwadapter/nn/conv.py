"""Conv2D with paddle's constructor: weight [out, in / groups, kh, kw] from Normal(0, sqrt(2 / (in * kh * kw))),
paddle's default, and a zero bias (bias_attr=False drops it)."""
from __future__ import annotations

import math

from ..api import shapes
from ..api.errors import InvalidArgumentError
from . import functional as F
from .initializer import Constant, Normal
from .layer import Layer


class Conv2D(Layer):
    """2-D convolution over NCHW (or NHWC) input."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, *,
                 bias=True, padding_mode="zeros", device=None, dtype=None, weight_attr=None, bias_attr=None,
                 data_format="NCHW"):
        super().__init__()
        self._in_channels = shapes.int_arg("Conv2D", "in_channels", in_channels, low=1)
        self._out_channels = shapes.int_arg("Conv2D", "out_channels", out_channels, low=1)
        self._groups = shapes.int_arg("Conv2D", "groups", groups, low=1)
        if self._in_channels % self._groups or self._out_channels % self._groups:
            raise InvalidArgumentError(f"Conv2D: in_channels {in_channels} and out_channels {out_channels} must both "
                                       f"be multiples of groups={groups}. Fix: pick channel counts divisible by "
                                       f"groups")
        if padding_mode != "zeros":
            raise InvalidArgumentError(f"Conv2D: padding_mode {shapes.show(padding_mode)} is not supported (only "
                                       f"'zeros'). Fix: pad the input with hw.nn.functional.pad first")
        if data_format not in ("NCHW", "NHWC"):
            raise InvalidArgumentError(f"Conv2D: data_format must be 'NCHW' or 'NHWC', not "
                                       f"{shapes.show(data_format)}. Fix: pass one of those")
        self._kernel_size = list(shapes.pair("Conv2D", "kernel_size", kernel_size))
        self._stride = list(shapes.pair("Conv2D", "stride", stride))
        self._dilation = list(shapes.pair("Conv2D", "dilation", dilation))
        self._padding, self._padding_mode, self._data_format = padding, padding_mode, data_format
        shape = [self._out_channels, self._in_channels // self._groups] + self._kernel_size
        std = math.sqrt(2.0 / (self._in_channels * math.prod(self._kernel_size)))  # paddle: all in_channels
        self.weight = self.create_parameter(shape, weight_attr, dtype=dtype, default_initializer=Normal(0.0, std),
                                            device=device)
        self.bias = self.create_parameter([self._out_channels], bias_attr if bias else False, dtype=dtype,
                                          is_bias=True, default_initializer=Constant(0.0), device=device)

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self._stride, self._padding, self._dilation, self._groups,
                        self._data_format)

    def extra_repr(self):
        out = f"{self._in_channels}, {self._out_channels}, kernel_size={self._kernel_size}"
        if self._stride != [1, 1]:
            out += f", stride={self._stride}"
        if self._padding != 0:
            out += f", padding={self._padding}"
        if self._dilation != [1, 1]:
            out += f", dilation={self._dilation}"
        if self._groups != 1:
            out += f", groups={self._groups}"
        return out + f", data_format={self._data_format}"
