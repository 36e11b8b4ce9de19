"""The tuned kernels' C sources compiled for a device on first use (pool.c, norm.c; crew.c + transforms.c + tasks.c as
one library): the library, or None where it cannot be built (the kernel's numpy form serves, and the log says why
once)."""
from __future__ import annotations

import logging
import threading
from pathlib import Path

from hwadapter.plugin import load_source

log = logging.getLogger(__name__)


class CLibrary:
    """`sources` compiled as one; `signatures`: {function: (restype, argtypes)}, the first naming the library in the
    cache; `ready(lib)`, if given, runs once the library is loaded; `prelude`: the codegen dialect's prelude comes
    first (its includes and the C library's vector math declarations)."""

    def __init__(self, device, sources: tuple[Path, ...], signatures: dict, instead: str, ready=None,
                 prelude: bool = False):
        self.device, self.sources, self.signatures, self.instead, self.ready = (
            device, sources, signatures, instead, ready)
        self.prelude = prelude
        self._lib, self._lock = None, threading.Lock()

    def __call__(self):
        if self._lib is None:
            with self._lock:
                if self._lib is None:
                    self._lib = self._load() or False
        return self._lib or None

    def _load(self):
        try:
            source = "\n".join(path.read_text() for path in self.sources)
            if self.prelude and self.device.codegen is not None:
                source = "\n".join(self.device.codegen.dialect.features_prelude(set())) + "\n" + source
            lib = load_source(self.device, source, next(iter(self.signatures))).library
        except Exception as err:  # noqa: BLE001 - the numpy form gives the same results, slower
            log.warning("%s: %s: %s could not be built: %s", self.device, self.instead,
                        ", ".join(path.name for path in self.sources), err)
            return None
        for name, (restype, argtypes) in self.signatures.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        if self.ready is not None:
            self.ready(lib)
        return lib
