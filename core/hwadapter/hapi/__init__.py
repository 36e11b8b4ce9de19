"""hwadapter.hapi: the high-level API, paddle's hapi: `Model` (exported as hw.Model) and its progress display."""
from __future__ import annotations

from .model import Model

__all__ = ["Model"]
