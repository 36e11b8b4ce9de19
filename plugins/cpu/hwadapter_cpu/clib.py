"""One of this plugin's C sources compiled for a device on first use (pool.c, norm.c): the library, or None where it
cannot be built (the kernel's numpy form serves, and the log says why once)."""
from __future__ import annotations

import logging
import threading
from pathlib import Path

from hwadapter.plugin import load_source

log = logging.getLogger(__name__)


class CLibrary:
    """`signatures`: {function: (restype, argtypes)}; the first function names the library in the cache."""

    def __init__(self, device, source: Path, signatures: dict, instead: str):
        self.device, self.source, self.signatures, self.instead = device, source, signatures, instead
        self._lib, self._lock = None, threading.Lock()

    def __call__(self):
        with self._lock:
            if self._lib is None:
                self._lib = self._load() or False
        return self._lib or None

    def _load(self):
        try:
            lib = load_source(self.device, self.source.read_text(), next(iter(self.signatures))).library
        except Exception as err:  # noqa: BLE001 - the numpy form gives the same results, slower
            log.warning("%s: %s, %s is unavailable: %s", self.device, self.instead, self.source.name, err)
            return None
        for name, (restype, argtypes) in self.signatures.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        return lib
