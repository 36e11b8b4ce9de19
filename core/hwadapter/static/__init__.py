"""hwadapter.static: graph-building APIs under paddle's names; `hw.static.nn.cond` and `hw.static.nn.while_loop` run
eagerly as Python control flow and, on traced tensors (hwadapter.jit.to_static), record cond and while_loop nodes."""
from __future__ import annotations

from . import nn

__all__ = ["nn"]
