"""hwadapter.optimizer: paddle.optimizer's names. SGD, Momentum, Adam, AdamW over parameters (or parameter groups),
gradient clipping (ClipGradByGlobalNorm, ...; also exported as hw.nn's), and learning-rate schedules in
hwadapter.optimizer.lr. Every piece of state is a device tensor, so `opt.step()` inside hw.jit.to_static is part of
one captured train step (docs/optimizer.md)."""
from __future__ import annotations

from . import lr  # noqa: F401
from .adam import Adam, AdamW
from .clip import ClipGradBase, ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue
from .optimizer import Optimizer
from .sgd import SGD, Momentum

__all__ = ["Optimizer", "SGD", "Momentum", "Adam", "AdamW", "lr", "ClipGradBase", "ClipGradByGlobalNorm",
           "ClipGradByNorm", "ClipGradByValue"]
