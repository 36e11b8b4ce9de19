"""Settings: keyword arguments to `hwadapter.configure` first, `HWADAPTER_*` environment variables second."""
from __future__ import annotations

import math
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
    #: iterations a while_loop without its own max_iters may run before it is stopped with LoopLimitError
    max_loop_iters: int = field(default_factory=lambda: loop_limit(os.environ.get("HWADAPTER_MAX_LOOP_ITERS")))


#: HWADAPTER_MAX_LOOP_ITERS unset: a loop this long is taken for one that never ends
MAX_LOOP_ITERS = 1_000_000


def loop_limit(text) -> int:
    """An iteration limit from its text (None: MAX_LOOP_ITERS); InvalidArgumentError unless an int >= 1."""
    if text is None:
        return MAX_LOOP_ITERS
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidArgumentError(f"HWADAPTER_MAX_LOOP_ITERS / max_loop_iters={text!r} is not a whole number >= 1",
                                   fix=f"unset it (default {MAX_LOOP_ITERS}) or give a count, e.g. 10000")
    return value


config = Config()
FALLBACK_MODES = ("warn", "error")
#: What HWADAPTER_CPU_KERNELS may say: the CPU plugin's numpy kernels (default) or its compiled C for the primitive ops
#: (and float32 conv2d and matmul).
CPU_KERNEL_MODES = ("numpy", "codegen")
#: Seconds `hwadapter doctor` and `hwadapter devices` give each plugin's probe (a child process) by default.
PROBE_TIMEOUT = 20.0


def check_fallback_mode() -> None:
    """Reject an unknown HWADAPTER_FALLBACK value loudly instead of guessing."""
    if config.fallback not in FALLBACK_MODES:
        bad, config.fallback = config.fallback, "warn"
        raise InvalidArgumentError(f"HWADAPTER_FALLBACK={bad!r} is not one of {FALLBACK_MODES}; unset it or pick one")


def cpu_kernels() -> str:
    """HWADAPTER_CPU_KERNELS (read when the CPU plugin registers its kernels); InvalidArgumentError for any value but
    'numpy' and 'codegen', rather than reading a typo as the default."""
    value = os.environ.get("HWADAPTER_CPU_KERNELS", "numpy")
    if value not in CPU_KERNEL_MODES:
        raise InvalidArgumentError(
            f"HWADAPTER_CPU_KERNELS={value!r} is not one of {', '.join(CPU_KERNEL_MODES)}. Fix: unset it (default "
            f"numpy: the CPU's numpy kernels) or set it to 'codegen' (the ops written in kernel primitives run as "
            f"compiled C)", fix="unset HWADAPTER_CPU_KERNELS, or set it to 'numpy' or 'codegen'")
    return value


def probe_timeout() -> float:
    """HWADAPTER_PROBE_TIMEOUT in seconds (default 20); InvalidArgumentError when it is not a positive number."""
    text = os.environ.get("HWADAPTER_PROBE_TIMEOUT")
    if text is None:
        return PROBE_TIMEOUT
    value = seconds(text)
    if value is None:
        raise InvalidArgumentError(f"HWADAPTER_PROBE_TIMEOUT={text!r} is not a positive number of seconds",
                                   fix=f"unset it (default {PROBE_TIMEOUT:g} s) or set it to e.g. 60")
    return value


def seconds(text: str) -> float | None:
    """A positive, finite number of seconds written as text; None when it is not one."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None
