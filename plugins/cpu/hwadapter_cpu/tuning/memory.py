"""Freed host memory kept for the next call: glibc's malloc gives each block over 32 MiB back to the kernel when it is
freed (mmap's threshold), and trims its heap's free top, so a model's large activations (SegFormer's 64 MiB concat,
GPT-2's logits) faulted in afresh, page by page, on every run. Raising both thresholds keeps them in the heap for reuse,
as onnxruntime's arena keeps its own. Process-wide: freed memory up to KEEP stays with the process."""
from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
#: blocks up to this size come from the heap, and this much free memory at its top stays there
KEEP = 1 << 30


def keep_freed_memory() -> bool:
    """Raises glibc's thresholds (harmless again on each registration); False where the C library has no mallopt or
    refuses (not glibc: nothing changes)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.restype, mallopt.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_int]
    kept = bool(mallopt(M_MMAP_THRESHOLD, KEEP)) and bool(mallopt(M_TRIM_THRESHOLD, KEEP))
    log.debug("host memory: freed blocks up to %d bytes %s", KEEP, "kept for reuse" if kept else "not kept (no mallopt)")
    return kept
