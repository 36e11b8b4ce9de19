"""Settings: keyword arguments to `hwadapter.configure` first, `HWADAPTER_*` environment variables second."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from .errors import InvalidArgumentError


def _csv(value: str | None) -> tuple[str, ...]:
    return tuple(x.strip() for x in (value or "").split(",") if x.strip())


@dataclass
class Config:
    """The process-wide settings; read the environment once, then changed by `configure`."""
    fallback: str = field(default_factory=lambda: os.environ.get("HWADAPTER_FALLBACK", "warn").lower())
    fallback_device: str = field(default_factory=lambda: os.environ.get("HWADAPTER_FALLBACK_DEVICE", "cpu"))
    plugins: tuple = field(default_factory=lambda: _csv(os.environ.get("HWADAPTER_PLUGINS")))
    disable_plugins: tuple = field(default_factory=lambda: _csv(os.environ.get("HWADAPTER_DISABLE_PLUGINS")))


config = Config()
FALLBACK_MODES = ("warn", "error")


def check_fallback_mode() -> None:
    """Reject an unknown HWADAPTER_FALLBACK value loudly instead of guessing."""
    if config.fallback not in FALLBACK_MODES:
        bad, config.fallback = config.fallback, "warn"
        raise InvalidArgumentError(f"HWADAPTER_FALLBACK={bad!r} is not one of {FALLBACK_MODES}; unset it or pick one")
