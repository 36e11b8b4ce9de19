"""Gradient clipping with paddle's names (exported as hw.nn.ClipGradByGlobalNorm, ...): an optimizer given one as
`grad_clip` applies it to its (parameter, gradient) pairs in step(). Computed with tensor ops only (no value read
on the host), so it runs inside a to_static train step."""
from __future__ import annotations

import numpy as np

from ..api.errors import InvalidArgumentError
from ..dispatch.tensor import Tensor
from ..ops import api as ops
from .lr import rate

__all__ = ["ClipGradBase", "ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue"]

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def _wide(g: Tensor) -> np.dtype:
    """The dtype a norm of g is summed in: float64 for float64, else float32 (float16 squares overflow)."""
    return _F64 if g.dtype == _F64 else _F32


def _as(t: Tensor, dtype) -> Tensor:
    return t if t.dtype == dtype else ops.cast(t, dtype)


def _sum_squares(g: Tensor, dtype) -> Tensor:
    g = _as(g, dtype)
    return ops.sum(ops.multiply(g, g))


def _positive(owner: str, name: str, value) -> float:
    value = rate(owner, name, value)
    if value <= 0:
        raise InvalidArgumentError(f"{owner}: {name} must be > 0, not {value}. Fix: pass e.g. {name}=1.0",
                                   fix=f"pass {name} > 0")
    return value


class ClipGradBase:
    """Called with [(param, grad), ...], returns the pairs with the gradients clipped (params untouched)."""

    def __call__(self, params_grads: list) -> list:
        pairs = list(params_grads)
        if not pairs:
            return pairs
        return self._clip(pairs)

    def _clip(self, pairs: list) -> list:
        raise NotImplementedError


class ClipGradByGlobalNorm(ClipGradBase):
    """Scale every gradient by clip_norm / max(global_norm, clip_norm), global_norm the L2 norm of all gradients
    together (summed in float32, or float64 when one of them is)."""

    def __init__(self, clip_norm, group_name: str = "default_group", auto_skip_clip: bool = False):
        self.clip_norm = _positive("ClipGradByGlobalNorm", "clip_norm", clip_norm)
        self.group_name, self.auto_skip_clip = group_name, auto_skip_clip

    def global_norm(self, grads: list) -> Tensor:
        """The L2 norm of all `grads` together, as a 0-d tensor."""
        dtype = _F64 if any(g.dtype == _F64 for g in grads) else _F32
        total = _sum_squares(grads[0], dtype)
        for g in grads[1:]:
            total = ops.add(total, _sum_squares(g, dtype))
        return ops.sqrt(total)

    def _clip(self, pairs: list) -> list:
        norm = self.global_norm([g for _, g in pairs])
        scale = ops.divide(self.clip_norm, ops.maximum(norm, self.clip_norm))
        return [(p, ops.multiply(g, _as(scale, g.dtype))) for p, g in pairs]

    def __repr__(self):
        return f"ClipGradByGlobalNorm(clip_norm={self.clip_norm})"


class ClipGradByNorm(ClipGradBase):
    """Scale each gradient on its own by clip_norm / max(its L2 norm, clip_norm)."""

    def __init__(self, clip_norm):
        self.clip_norm = _positive("ClipGradByNorm", "clip_norm", clip_norm)

    def _clip(self, pairs: list) -> list:
        out = []
        for p, g in pairs:
            norm = ops.sqrt(_sum_squares(g, _wide(g)))
            scale = ops.divide(self.clip_norm, ops.maximum(norm, self.clip_norm))
            out.append((p, ops.multiply(g, _as(scale, g.dtype))))
        return out

    def __repr__(self):
        return f"ClipGradByNorm(clip_norm={self.clip_norm})"


class ClipGradByValue(ClipGradBase):
    """Clip each gradient element to [min, max] (min defaults to -max)."""

    def __init__(self, max, min=None):  # noqa: A002 paddle's names
        self.max = _finite("max", max)
        self.min = -self.max if min is None else _finite("min", min)
        if self.min > self.max:
            raise InvalidArgumentError(f"ClipGradByValue: min ({self.min}) is greater than max ({self.max}). Fix: "
                                       f"pass min <= max", fix="pass min <= max")

    def _clip(self, pairs: list) -> list:
        return [(p, ops.clip(g, self.min, self.max)) for p, g in pairs]

    def __repr__(self):
        return f"ClipGradByValue(min={self.min}, max={self.max})"


def _finite(name: str, value) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not ok or not np.isfinite(value):
        raise InvalidArgumentError(f"ClipGradByValue: {name} must be a finite number, not {value!r}. Fix: pass e.g. "
                                   f"{name}=1.0", fix=f"pass a finite number as {name}")
    return float(value)
