"""cdemo: hwadapter's example C device plugin. The whole Python side is this shim naming the library."""
from __future__ import annotations

from pathlib import Path

from hwadapter.plugin import DeviceUnavailableError, NativePlugin

#: Built from src/cdemo.c when the package is installed (setup.py), or by hand: see README.md.
LIBRARY = Path(__file__).with_name("libhwadapter_cdemo.so")


class CDemoPlugin(NativePlugin):
    """Two emulated devices, their memory, streams, events and kernels all in C (device_api.h 1.1)."""

    api_version = (2, 0)

    def library_path(self) -> str:
        if not LIBRARY.exists():
            raise DeviceUnavailableError(f"cdemo: {LIBRARY} is not built; reinstall hwadapter-cdemo (pip install "
                                         f"examples/native_plugin) or compile src/cdemo.c there (see its README)")
        return str(LIBRARY)
