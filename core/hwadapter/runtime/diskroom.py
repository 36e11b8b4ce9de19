"""Room to write compiled files: the disk's free space and the process's file-size limit, checked where a compiler
writes, so that a full disk is an error saying so, never a kernel blamed for it nor a process killed.

hwadapter leaves SIGXFSZ alone: CPython ignores it at start-up (a write past the limit then fails with EFBIG), and
signal dispositions belong to the application, which may rely on them (only its main thread may set them anyway).
What kills the process is a compiler inside it that aborts on a failed write (PoCL's LLVM: "IO failure on output
stream"), so such a compiler is not started without room, and hwadapter's own writes stay below the limit.
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from ..api.errors import DiskFullError
from .memory import human

try:
    import resource
except ImportError:  # not POSIX: no file-size limit to respect
    resource = None

#: Bytes one compile may write (PoCL's temporary objects reach a few MiB): less room than this is a full disk.
NEED = 16 << 20
#: errnos of a write that found no room.
FULL = frozenset({errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)})
#: How compilers' logs say the same.
_WORDS = ("no space left on device", "file too large", "file size limit exceeded", "disk quota exceeded")


def file_limit() -> int | None:
    """The largest file this process may write (RLIMIT_FSIZE's soft limit) in bytes, None when unlimited."""
    if resource is None:
        return None
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def fits(nbytes: int) -> bool:
    """Whether a file of `nbytes` may be written under the file-size limit."""
    limit = file_limit()
    return limit is None or nbytes <= limit


def shortage(path: str | os.PathLike, need: int = NEED) -> str | None:
    """Why `need` bytes of files cannot be written under `path` (the file-size limit, or the disk's free space), or
    None when they can (or the disk cannot be asked)."""
    limit = file_limit()
    if limit is not None and limit < need:
        return (f"this process may write files of at most {human(limit)} (its file-size limit, RLIMIT_FSIZE or "
                f"`ulimit -f`), and a compile writes up to {human(need)}")
    existing = Path(os.path.abspath(path))
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return None
    if free < need:
        return f"the disk is full: {human(free)} free under {existing}, and a compile writes up to {human(need)}"
    return None


def is_full(err: BaseException | str | None) -> bool:
    """Whether an OSError, or a compiler's log, says that a write found no room."""
    if isinstance(err, OSError):
        return err.errno in FULL
    text = str(err or "").lower()
    return any(words in text for words in _WORDS)


def why_failed(err: BaseException | str | None, path: str | os.PathLike) -> str | None:
    """Why a compile that failed with `err` (an exception, or the compiler's log) writing under `path` found no room;
    None when room is not the cause."""
    why = shortage(path)
    if why is None and is_full(err):
        said = str(err) if isinstance(err, OSError) else _line(str(err))
        why = f"the disk is full, or a file reached the file-size limit ({said})"
    return why


def _line(log: str) -> str:
    """The line of a compiler's log that says it found no room."""
    return next((line.strip() for line in log.splitlines() if any(w in line.lower() for w in _WORDS)), log.strip())


def scratch_dir() -> str:
    """Where compilers started by hwadapter write their temporary files: $TMPDIR, else Python's temporary directory."""
    return os.environ.get("TMPDIR") or tempfile.gettempdir()


def full_error(what: str, path: str | os.PathLike, why: str, setting: str) -> DiskFullError:
    """The error for a compile of `what` that has no room under `path`; `setting` moves that directory."""
    if "file-size limit" in why and "disk is full" not in why:
        fix = "raise this process's file-size limit (`ulimit -f unlimited` in the shell that starts it; RLIMIT_FSIZE)"
    else:
        fix = (f"free space on the disk holding {path}, or point {setting} at a directory on a disk with room; where "
               f"a file-size limit is set (`ulimit -f`), raise it")
    return DiskFullError(f"{what}: cannot compile: {why}. Nothing is wrong with the kernel. Fix: {fix}", fix=fix)


def check_room(what: str, path: str | os.PathLike, setting: str) -> None:
    """Raise DiskFullError before a compile of `what` that writes under `path` (a directory `setting` moves) when it
    has no room: for compilers that abort the process on a failed write."""
    why = shortage(path)
    if why is not None:
        raise full_error(what, path, why, setting)


def no_room(what: str, err: BaseException | str | None, path: str | os.PathLike, setting: str) -> DiskFullError | None:
    """The DiskFullError to raise instead of a failed compile's error `err` (or log) when room was the cause, else
    None (the compiler's own error stands)."""
    why = why_failed(err, path)
    return None if why is None else full_error(what, path, why, setting)
