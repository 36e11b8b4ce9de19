"""The on-disk caches `hwadapter cache` shows: kernel and program caches, their entries per namespace, sizes."""
from __future__ import annotations

import inspect
from pathlib import Path

from hwadapter.runtime import cache


def _program_cache():
    """(the program cache module, its DiskCache or None), or (None, None) when this build has none; imported only
    here: the program cache sits in the graph layer, which `hwadapter devices` never needs."""
    try:
        from hwadapter.graph import programs  # lazy: the graph layer costs ~90 ms; `hwadapter --help` imports this
    except ImportError as err:
        if getattr(err, "name", None) in ("hwadapter.graph.programs", "hwadapter.graph"):
            return None, None
        raise
    for name in ("default", "default_cache"):  # a store of its own; without one it shares the kernel cache's
        obj = getattr(programs, name, None)
        obj = obj() if inspect.isfunction(obj) else obj
        if hasattr(obj, "entries") and hasattr(obj, "root"):
            return programs, obj
    return programs, None


def _cache_sets() -> list[tuple[str, object]]:
    """(what, DiskCache) for the kernel cache and, when it lives elsewhere, the program cache."""
    kernels = cache.default()
    out = [("kernels", kernels)]
    _, programs = _program_cache()
    if programs is not None and Path(programs.root) != Path(kernels.root):
        out.append(("programs", programs))
    return out


def _entry_rows(label: str, disk, program_namespaces: set) -> list[dict]:
    """One row per namespace of a cache: its entries and their bytes (none when its directory does not exist)."""
    root = Path(disk.root)
    if not root.exists():  # asking must not create it (and its key): nothing was compiled yet
        return [{"cache": label, "namespace": "-", "directory": str(root), "entries": 0, "bytes": 0,
                 "note": "does not exist yet: nothing compiled"}]
    directory = disk.directory
    note = "" if directory == root else (f"not used: unsafe (see the warning above); this process uses "
                                         f"{directory or 'no disk cache'}")
    per: dict[str, list[int]] = {}
    for path in disk.entries():
        try:
            size = path.lstat().st_size
        except OSError:  # removed meanwhile
            continue
        row = per.setdefault(path.parent.parent.name, [0, 0])
        row[0] += 1
        row[1] += size
    if not per:
        return [{"cache": label, "namespace": "-", "directory": str(directory or root), "entries": 0, "bytes": 0,
                 "note": note or "empty"}]
    return [{"cache": "programs" if ns in program_namespaces else label, "namespace": ns,
             "directory": str(directory), "entries": n, "bytes": size, "note": note}
            for ns, (n, size) in sorted(per.items())]


def _program_namespaces() -> set:
    """Namespaces of the kernel cache directory that hold compiled programs (as the program cache names them)."""
    programs, _ = _program_cache()
    names = getattr(programs, "NAMESPACES", None) or [getattr(programs, "NAMESPACE", None)]
    return {n for n in names if isinstance(n, str)}


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _configured_dir() -> Path:
    return cache.default_dir()


def _lsize(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0
