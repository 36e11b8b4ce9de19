"""The error hierarchy: every error says what failed, where, and how to fix it."""


class HwAdapterError(Exception):
    """Base class of every error hwadapter raises; `fix` says what to do, when the message alone does not."""

    def __init__(self, *args, fix: str = ""):
        super().__init__(*args)
        self.fix = fix


class InvalidDeviceError(HwAdapterError, ValueError):
    """A device string is malformed, names an unknown type, or an index out of range."""


class PluginLoadError(HwAdapterError, RuntimeError):
    """A plugin could not be imported, constructed, or failed the version handshake."""


class DeviceUnavailableError(HwAdapterError, RuntimeError):
    """A plugin loaded but has no usable device here (no driver, no hardware)."""


class KernelNotFoundError(HwAdapterError, NotImplementedError):
    """No kernel for an op on a device, and fallback is off."""


class OutOfMemoryError(HwAdapterError, MemoryError):
    """A device allocation failed even after the cache was emptied."""


class InvalidArgumentError(HwAdapterError, ValueError):
    """An op was called with arguments it cannot accept (shapes, axes, attributes)."""


class UnsupportedDTypeError(HwAdapterError, TypeError):
    """An op does not accept an input's dtype."""


class CompileError(HwAdapterError, RuntimeError):
    """A device compiler rejected generated source; carries the source and the build log."""

    def __init__(self, message: str, source: str = "", log: str = "", fix: str = ""):
        self.source, self.log = source, log
        numbered = "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), 1))
        parts = [message]
        if log:
            parts.append("build log:\n" + log.rstrip())
        if source:
            parts.append("source:\n" + numbered)
        super().__init__("\n".join(parts), fix=fix)


class DiskFullError(CompileError):
    """A compile found no room to write its files (a full disk, or the file-size limit); the kernel is not at fault."""


class PluginError(HwAdapterError, RuntimeError):
    """A plugin broke its contract at run time: a call into it raised a non-hwadapter error or returned the wrong
    type. A bug of the plugin, to report to its vendor."""


class KernelExecutionError(HwAdapterError, RuntimeError):
    """A device kernel raised while running an op."""


class TracingError(HwAdapterError, RuntimeError):
    """A traced function (hwadapter.jit.to_static) read a tensor's values, which do not exist while tracing."""


class LoopLimitError(HwAdapterError, RuntimeError):
    """A while_loop ran past its iteration limit (its max_iters, else hwadapter.configure(max_loop_iters=...))."""


def short_repr(obj, limit: int = 80) -> str:
    """repr() cut to `limit` characters, and safe from objects whose repr raises: for quoting input in messages."""
    try:
        text = repr(obj)
    except Exception:
        text = f"<{type(obj).__name__} object>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


class CollectiveError(HwAdapterError, RuntimeError):
    """A collective failed across ranks: a rank died, raised or never joined within the time limit, or the ranks
    disagreed (shapes, dtypes, op); or the device's communicator lacks what was asked."""
