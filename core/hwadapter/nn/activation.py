"""Activation layers: ReLU, GELU, Sigmoid, Tanh, Softmax, LogSoftmax (paddle's constructors and reprs)."""
from __future__ import annotations

from ..api import shapes
from ..api.errors import InvalidArgumentError
from . import functional as F
from .layer import Layer


class ReLU(Layer):
    """max(x, 0)."""

    def __init__(self, name=None):
        super().__init__()

    def forward(self, x):
        return F.relu(x)


class GELU(Layer):
    """Gaussian error linear unit; approximate=True (or 'tanh') uses the tanh form."""

    def __init__(self, approximate=False, name=None):
        super().__init__()
        if approximate in ("tanh", "none"):
            approximate = approximate == "tanh"
        if not isinstance(approximate, bool):
            raise InvalidArgumentError(f"GELU: approximate must be a bool, 'tanh' or 'none', not "
                                       f"{shapes.show(approximate)}. Fix: pass one of those")
        self._approximate = approximate

    def forward(self, x):
        return F.gelu(x, self._approximate)

    def extra_repr(self):
        return f"approximate={self._approximate}"


class Sigmoid(Layer):
    """1 / (1 + exp(-x))."""

    def __init__(self, name=None):
        super().__init__()

    def forward(self, x):
        return F.sigmoid(x)


class Tanh(Layer):
    """Hyperbolic tangent."""

    def __init__(self, name=None):
        super().__init__()

    def forward(self, x):
        return F.tanh(x)


class Softmax(Layer):
    """softmax along `axis`."""

    def __init__(self, axis=-1, name=None):
        super().__init__()
        self._axis = shapes.int_arg("Softmax", "axis", axis)

    def forward(self, x):
        return F.softmax(x, self._axis)

    def extra_repr(self):
        return f"axis={self._axis}"


class LogSoftmax(Layer):
    """log(softmax) along `axis`, computed stably."""

    def __init__(self, axis=-1, name=None):
        super().__init__()
        self._axis = shapes.int_arg("LogSoftmax", "axis", axis)

    def forward(self, x):
        return F.log_softmax(x, self._axis)

    def extra_repr(self):
        return f"axis={self._axis}"
