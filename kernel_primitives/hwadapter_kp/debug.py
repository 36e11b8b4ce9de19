"""Debugging aids: dumping generated sources and line-numbered listings."""

import hashlib
import os

DUMP_ENV = "HWADAPTER_DUMP_KERNELS"


def source_hash(source: str) -> str:
    """Short content hash of a source (what a compile cache keys on)."""
    return hashlib.sha256(source.encode()).hexdigest()[:12]


def dump_path(directory: str, name: str, extension: str, source: str) -> str:
    """Where a source is dumped: DIR/<name>.<hash><extension>."""
    return os.path.join(directory, f"{name}.{source_hash(source)}{extension}")


def maybe_dump(name: str, extension: str, source: str):
    """Write ``source`` under $HWADAPTER_DUMP_KERNELS if it is set; returns the path or None."""
    directory = os.environ.get(DUMP_ENV)
    if not directory:
        return None
    os.makedirs(directory, exist_ok=True)
    path = dump_path(directory, name, extension, source)
    if not os.path.exists(path):
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)   # atomic: concurrent dumps of one source never leave a torn file
    return path


def number_lines(source: str, highlight=None, context=None) -> str:
    """Source with right-aligned line numbers; ``highlight`` (1-based) gets a '>' marker.

    With ``context`` and ``highlight`` only that many lines around the highlighted
    one are shown (for compiler error messages).
    """
    lines = source.splitlines()
    width = len(str(len(lines)))
    first, last = 1, len(lines)
    if highlight is not None and context is not None:
        first, last = max(1, highlight - context), min(len(lines), highlight + context)
    out = []
    for i in range(first, last + 1):
        mark = ">" if i == highlight else " "
        out.append(f"{mark}{i:>{width}} | {lines[i - 1]}")
    return "\n".join(out)
