"""Parameter initialisers with paddle's names and formulas (paddle.nn.initializer): each is a callable
(shape, dtype) -> numpy array, drawn on the host from the generator hw.seed seeds, as hw.rand is."""
from __future__ import annotations

import math

import numpy as np

from ..api import shapes
from ..autograd.params import fans as _fans
from ..api.errors import InvalidArgumentError
from ..ops import creation
from ..ops._common import number_arg

__all__ = ["Initializer", "Constant", "Normal", "TruncatedNormal", "Uniform", "XavierUniform", "XavierNormal",
           "KaimingUniform", "KaimingNormal", "Assign", "calculate_gain"]


def _finite(op: str, name: str, value) -> float:
    value = number_arg(op, name, value)
    if isinstance(value, bool) or not math.isfinite(value):
        raise InvalidArgumentError(f"{op}: {name} must be a finite number, not {value!r}. Fix: pass a float")
    return float(value)


class Initializer:
    """Base class: `init(shape, dtype)` is the array a parameter starts from."""

    def __call__(self, shape, dtype="float32") -> np.ndarray:
        return np.asarray(self._sample(tuple(shape)), dtype=np.float64).astype(dtype)

    def _sample(self, shape: tuple) -> np.ndarray:
        raise NotImplementedError

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class Constant(Initializer):
    """Every element `value`."""

    def __init__(self, value=0.0):
        self.value = _finite("Constant", "value", value)

    def _sample(self, shape):
        return np.full(shape, self.value)


class Normal(Initializer):
    """Normal(mean, std)."""

    def __init__(self, mean=0.0, std=1.0, name=None):
        self.mean, self.std = _finite("Normal", "mean", mean), _finite("Normal", "std", std)

    def _sample(self, shape):
        return creation._rng.normal(self.mean, self.std, shape)


class TruncatedNormal(Initializer):
    """Normal(mean, std) redrawn outside [a, b] (paddle's defaults: two standard deviations either side)."""

    def __init__(self, mean=0.0, std=1.0, a=-2.0, b=2.0, name=None):
        self.mean, self.std = _finite("TruncatedNormal", "mean", mean), _finite("TruncatedNormal", "std", std)
        self.a, self.b = _finite("TruncatedNormal", "a", a), _finite("TruncatedNormal", "b", b)
        if self.a >= self.b:
            raise InvalidArgumentError(f"TruncatedNormal: a={a} must be below b={b}. Fix: pass a < b")

    def _sample(self, shape):
        out = creation._rng.normal(self.mean, self.std, shape)
        for _ in range(100):  # each pass keeps most of what is left; 100 leave nothing out for any sane [a, b]
            bad = (out < self.a) | (out > self.b)
            if not bad.any():
                break
            out[bad] = creation._rng.normal(self.mean, self.std, int(bad.sum()))
        return np.clip(out, self.a, self.b)


class Uniform(Initializer):
    """Uniform [low, high)."""

    def __init__(self, low=-1.0, high=1.0, name=None):
        self.low, self.high = _finite("Uniform", "low", low), _finite("Uniform", "high", high)
        if self.low > self.high:
            raise InvalidArgumentError(f"Uniform: low={low} is above high={high}. Fix: pass low <= high")

    def _sample(self, shape):
        return creation._rng.uniform(self.low, self.high, shape)


class _Fans(Initializer):
    def __init__(self, fan_in=None, fan_out=None, gain=1.0):
        self.fan_in, self.fan_out = fan_in, fan_out
        self.gain = _finite(type(self).__name__, "gain", gain)

    def _fans(self, shape):
        fan_in, fan_out = _fans(shape)
        return (fan_in if self.fan_in is None else self.fan_in), (fan_out if self.fan_out is None else self.fan_out)


class XavierUniform(_Fans):
    """Glorot uniform: limit gain * sqrt(6 / (fan_in + fan_out)) (paddle's default for weights)."""

    def __init__(self, fan_in=None, fan_out=None, gain=1.0, name=None):
        super().__init__(fan_in, fan_out, gain)

    def _sample(self, shape):
        fan_in, fan_out = self._fans(shape)
        limit = self.gain * math.sqrt(6.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0
        return creation._rng.uniform(-limit, limit, shape)


class XavierNormal(_Fans):
    """Glorot normal: std gain * sqrt(2 / (fan_in + fan_out))."""

    def __init__(self, fan_in=None, fan_out=None, gain=1.0, name=None):
        super().__init__(fan_in, fan_out, gain)

    def _sample(self, shape):
        fan_in, fan_out = self._fans(shape)
        std = self.gain * math.sqrt(2.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0
        return creation._rng.normal(0.0, std, shape)


_GAINS = {"sigmoid": 1.0, "linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "conv1d_transpose": 1.0,
          "conv2d_transpose": 1.0, "conv3d_transpose": 1.0, "tanh": 5.0 / 3, "relu": math.sqrt(2.0), "selu": 3.0 / 4}


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain of a nonlinearity (paddle's table; leaky_relu takes its slope as `param`)."""
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else _finite("calculate_gain", "param", param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity not in _GAINS:
        raise InvalidArgumentError(f"calculate_gain: unknown nonlinearity {shapes.show(nonlinearity)}. Fix: pass "
                                   f"one of {', '.join(sorted(_GAINS))}, leaky_relu")
    return _GAINS[nonlinearity]


class _Kaiming(Initializer):
    def __init__(self, fan_in=None, negative_slope=0.0, nonlinearity="relu", mode="fan_in"):
        if mode not in ("fan_in", "fan_out"):
            raise InvalidArgumentError(f"{type(self).__name__}: mode must be 'fan_in' or 'fan_out', not "
                                       f"{shapes.show(mode)}. Fix: pass one of those")
        self.fan_in, self.mode = fan_in, mode
        self.gain = calculate_gain(nonlinearity, negative_slope)

    def _fan(self, shape):
        """The fan the variance is kept over: fan_in (or the given one), or fan_out with mode='fan_out'."""
        if self.fan_in is not None:
            return self.fan_in
        return _fans(shape)[0 if self.mode == "fan_in" else 1]


class KaimingUniform(_Kaiming):
    """He uniform: limit gain * sqrt(3 / fan_in)."""

    def __init__(self, fan_in=None, negative_slope=0.0, nonlinearity="relu", mode="fan_in"):
        super().__init__(fan_in, negative_slope, nonlinearity, mode)

    def _sample(self, shape):
        fan_in = self._fan(shape)
        limit = self.gain * math.sqrt(3.0 / fan_in) if fan_in else 0.0
        return creation._rng.uniform(-limit, limit, shape)


class KaimingNormal(_Kaiming):
    """He normal: std gain / sqrt(fan_in)."""

    def __init__(self, fan_in=None, negative_slope=0.0, nonlinearity="relu", mode="fan_in"):
        super().__init__(fan_in, negative_slope, nonlinearity, mode)

    def _sample(self, shape):
        fan_in = self._fan(shape)
        std = self.gain / math.sqrt(fan_in) if fan_in else 0.0
        return creation._rng.normal(0.0, std, shape)


class Assign(Initializer):
    """A given value (array, list or tensor) of the parameter's shape."""

    def __init__(self, value, name=None):
        self.value = np.asarray(value)

    def __call__(self, shape, dtype="float32"):
        if tuple(self.value.shape) != tuple(shape):
            raise InvalidArgumentError(f"Assign: the value has shape {list(self.value.shape)}, the parameter "
                                       f"{list(shape)}. Fix: pass a value of shape {list(shape)}")
        return self.value.astype(dtype)
