"""A plugin's C device library (device_api.h) built from the source it ships, once per machine, as a file on disk.

A native host (the Paddle bridge's shim) dlopens the library by path in another process, so unlike load_source's
programs it cannot live in the kernel cache's entries: it is kept beside them, <cache>/native/<name>-<key>.so, in
the same checked private directory, and named by a hash of everything it is built from.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from . import cache, diskroom
from ..api.errors import CompileError
from .native import NATIVE_INCLUDE

_FLAGS = ["-O2", "-fPIC", "-shared", "-std=c11", "-fvisibility=hidden"]
_lock = threading.Lock()


def _compiler() -> str:
    cc = shutil.which(os.environ.get("CC", "")) or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise CompileError("no C compiler found (looked for $CC, gcc, cc) to build the native device library",
                           fix="install one (apt-get install gcc)")
    return cc


@functools.lru_cache(maxsize=None)
def _version(cc: str) -> list:
    """The first line of `cc --version`, asked once per process (a cache key part: another compiler, another build)."""
    return subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]


def build_library(source: str | os.PathLike, name: str, defines: dict | None = None, libs: tuple = ()) -> Path:
    """The shared library built from C file `source` against hwadapter's device_api.h with the system C compiler
    ($CC, gcc, cc), `defines` as -D flags and `libs` (e.g. "-ldl") appended; built on first use, then reused.
    CompileError (with the compiler's log) when it cannot be built or kept."""
    text = Path(source).read_text()
    cc = _compiler()
    version = _version(cc)
    flags = [*_FLAGS, f"-I{NATIVE_INCLUDE}", *(f"-D{k}={v}" for k, v in sorted((defines or {}).items()))]
    header = (NATIVE_INCLUDE / "hwadapter" / "device_api.h").read_text()
    key = hashlib.sha256("\0".join([text, header, *version, *flags, *libs]).encode()).hexdigest()[:24]
    disk = cache.default()
    root = disk.directory
    if root != disk.root:  # none, or this process's temporary one: another process could not load the library later
        raise CompileError(f"{name}: the cache directory {disk.root} is not usable (see the warning above), and the "
                           f"native library needs a lasting place", fix="point HWADAPTER_CACHE_DIR at a directory "
                                                                        "of your own")
    folder = root / "native"
    path = folder / f"{name}-{key}.so"
    with _lock:
        if path.is_file():
            return path
        with tempfile.TemporaryDirectory(prefix="hwadapter-native-") as tmp:
            out = Path(tmp) / path.name
            proc = subprocess.run([cc, *flags, str(source), "-o", str(out), *libs], capture_output=True, text=True)
            if proc.returncode != 0:
                log = proc.stderr or proc.stdout
                full = diskroom.no_room(f"{name}: the native device library", log, diskroom.scratch_dir(), "TMPDIR")
                if full is not None:
                    raise full
                raise CompileError(f"{name}: {Path(cc).name} could not build the native device library from {source}",
                                   log=log, fix="report it to the plugin's vendor with this log")
            _keep(out, folder, path, name)
    return path


def _keep(out: Path, folder: Path, path: Path, name: str) -> None:
    """Copy the built library into the cache folder as `path`: atomically, and a DiskFullError when there is no
    room (the library must last: it cannot stay in a temporary directory)."""
    staged = folder / f".tmp-{os.getpid()}-{path.name}"
    try:
        if not diskroom.fits(out.stat().st_size):  # a write past the limit kills a process not ignoring SIGXFSZ
            raise OSError(errno.EFBIG, "over this process's file-size limit")
        folder.mkdir(mode=0o700, exist_ok=True)
        shutil.copyfile(out, staged)
        os.replace(staged, path)  # atomic: another process building the same library meanwhile is harmless
    except OSError as err:
        if os.path.lexists(staged):
            os.unlink(staged)
        if not diskroom.is_full(err):
            raise
        raise diskroom.full_error(f"{name}: the native device library", folder, f"it cannot be kept in {folder}: "
                                  f"{err.strerror or err}", "HWADAPTER_CACHE_DIR") from err
