"""The core's calls into a plugin's Runtime, checked: a raw exception or a result of the wrong type becomes an error
naming the plugin, its distribution and the call, never a raw TypeError somewhere later.

Only calls off the per-op path go through here (create_runtime, device allocations on a cache miss, copies to and
from the host, frees, properties, synchronize): an op served from the caching allocator never reaches it.
"""
from __future__ import annotations

from ..api.errors import HwAdapterError, OutOfMemoryError, PluginError, short_repr


def who(device) -> str:
    """"the 'acme' plugin (distribution acme-hw 1.2)" for a Device (or a "type:index" string), for messages."""
    record = getattr(device, "record", None)
    if record is None:
        return f"the {str(device).partition(':')[0]!r} plugin"
    try:
        name, version = record.distribution
    except Exception:  # naming the culprit must not fail on a broken METADATA
        name = version = "?"
    plugin = f"the {record.name!r} plugin"
    return plugin if name == "?" else f"{plugin} (distribution {name} {version})"


def fix_for(device) -> str:
    """What to do about a plugin's bug."""
    return (f"report it to the plugin's vendor with this message; meanwhile use another device, or switch the "
            f"plugin off with HWADAPTER_DISABLE_PLUGINS={str(device).partition(':')[0]}")


def broken(device, call: str, what: str) -> PluginError:
    """The error for `call` (e.g. "Runtime.allocate(512)") on `device`, which `what` did."""
    fix = fix_for(device)
    return PluginError(f"{who(device)}: {call} on {device} {what}. This is a bug in the plugin, not in your program. "
                       f"Fix: {fix}", fix=fix)


def raised(device, call: str, err: BaseException) -> HwAdapterError:
    """What an exception out of a plugin's call becomes: hwadapter's own errors (the plugin's explained refusals)
    stay as they are; anything else is a PluginError (chain it: `raise raised(...) from err`)."""
    if isinstance(err, HwAdapterError):
        return err
    text = str(err)
    return broken(device, call, f"raised {type(err).__name__}: {text if len(text) <= 300 else text[:297] + '...'}")


def returned(device, call: str, value, due: str) -> PluginError:
    """The error for a call that returned `value` where `due` was."""
    return broken(device, call, f"returned {short_repr(value, 80)} ({type(value).__name__}), not {due}")


def out_of_memory(device, call: str, err: MemoryError) -> OutOfMemoryError:
    """A raw MemoryError of an allocation, as the OutOfMemoryError the allocator empties its cache and retries on."""
    return OutOfMemoryError(f"{who(device)}: {call} on {device} ran out of memory ({type(err).__name__}: {err})")


def call(device, name: str, fn, *args):
    """fn(*args), which is the plugin's Runtime.<name> of `device`; a raw exception becomes a PluginError."""
    try:
        return fn(*args)
    except HwAdapterError:
        raise
    except Exception as err:
        raise raised(device, f"Runtime.{name}()", err) from err
