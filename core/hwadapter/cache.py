"""The on-disk cache of compiled artefacts: bytes only (no pickles), atomic writes, validated on every read.

An entry is one file: a magic line, a JSON header line (what was hashed into the key, payload size and
SHA-256), then the payload. A truncated, corrupted or foreign file is deleted and reported as a miss,
so the caller rebuilds it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger("hwadapter")
MAGIC = b"HWADAPTER-CACHE 1\n"


def default_dir() -> Path:
    """HWADAPTER_CACHE_DIR, else $XDG_CACHE_HOME/hwadapter, else ~/.cache/hwadapter."""
    env = os.environ.get("HWADAPTER_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hwadapter"


def key_of(parts: dict) -> str:
    """The SHA-256 of the key parts, canonically serialised."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class DiskCache:
    """A directory of validated entries, grouped by namespace (e.g. "cpu-c", "opencl")."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_dir()
        self.hits = self.misses = self.corrupt = 0

    def _path(self, namespace: str, key: str) -> Path:
        return self.root / namespace / key[:2] / f"{key}.bin"

    def get(self, namespace: str, parts: dict) -> bytes | None:
        """The payload stored under these key parts, or None (missing or invalid, which is then removed)."""
        key = key_of(parts)
        path = self._path(namespace, key)
        try:
            data = path.read_bytes()
        except OSError:
            self.misses += 1
            return None
        payload = self._validate(data, key)
        if payload is None:
            self.corrupt += 1
            self.misses += 1
            log.warning("cache entry %s is corrupted or truncated; rebuilding it", path)
            try:
                path.unlink()
            except OSError:
                pass
            return None
        self.hits += 1
        return payload

    @staticmethod
    def _validate(data: bytes, key: str) -> bytes | None:
        if not data.startswith(MAGIC):
            return None
        head_end = data.find(b"\n", len(MAGIC))
        if head_end < 0:
            return None
        try:
            header = json.loads(data[len(MAGIC):head_end])
        except ValueError:
            return None
        payload = data[head_end + 1:]
        if (not isinstance(header, dict) or header.get("key") != key or header.get("size") != len(payload)
                or header.get("sha256") != hashlib.sha256(payload).hexdigest()):
            return None
        return payload

    def put(self, namespace: str, parts: dict, payload: bytes) -> Path:
        """Store a payload atomically (write a temporary file, then rename over the entry)."""
        key = key_of(parts)
        path = self._path(namespace, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {"key": key, "size": len(payload), "sha256": hashlib.sha256(payload).hexdigest(),
                  "parts": {k: (v if len(str(v)) < 200 else hashlib.sha256(str(v).encode()).hexdigest())
                            for k, v in parts.items()}}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return path

    def get_or_build(self, namespace: str, parts: dict, build) -> bytes:
        """The cached payload, or `build()`'s result stored for next time."""
        payload = self.get(namespace, parts)
        if payload is None:
            payload = build()
            try:
                self.put(namespace, parts, payload)
            except OSError as err:  # a read-only or full disk costs speed, never correctness
                log.warning("could not write the kernel cache under %s: %s", self.root, err)
        return payload

    def entries(self) -> list[Path]:
        """Every entry file."""
        return sorted(self.root.glob("*/*/*.bin")) if self.root.exists() else []

    def clear(self) -> None:
        """Delete every entry."""
        for p in self.entries():
            p.unlink(missing_ok=True)


_default: DiskCache | None = None


def default() -> DiskCache:
    """The process's cache at default_dir() (re-read when HWADAPTER_CACHE_DIR changes)."""
    global _default
    if _default is None or _default.root != default_dir():
        _default = DiskCache()
    return _default
