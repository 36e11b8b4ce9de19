"""Settings: keyword arguments to `configure` first, `HWADAPTER_*` environment variables second."""
from __future__ import annotations

import os
from dataclasses import dataclass, field


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
_FALLBACK_MODES = ("warn", "error")


def configure(*, fallback: str | None = None, strict: bool | None = None, fallback_device: str | None = None,
              plugins=None, disable_plugins=None) -> Config:
    """Change settings for this process; `strict=True` is `fallback="error"`. Returns the settings."""
    from .errors import InvalidArgumentError
    if strict is not None:
        fallback = "error" if strict else "warn"
    if fallback is not None:
        if fallback not in _FALLBACK_MODES:
            raise InvalidArgumentError(f"fallback must be one of {_FALLBACK_MODES}, not {fallback!r}")
        config.fallback = fallback
    if fallback_device is not None:
        config.fallback_device = fallback_device
    if plugins is not None or disable_plugins is not None:
        if plugins is not None:
            config.plugins = tuple(plugins)
        if disable_plugins is not None:
            config.disable_plugins = tuple(disable_plugins)
        from .device import reset_plugins
        reset_plugins()
    from .dispatch import dispatcher
    dispatcher.clear_cache()
    return config


def check_fallback_mode() -> None:
    """Reject an unknown HWADAPTER_FALLBACK value loudly instead of guessing."""
    from .errors import InvalidArgumentError
    if config.fallback not in _FALLBACK_MODES:
        bad, config.fallback = config.fallback, "warn"
        raise InvalidArgumentError(f"HWADAPTER_FALLBACK={bad!r} is not one of {_FALLBACK_MODES}; unset it or pick one")
