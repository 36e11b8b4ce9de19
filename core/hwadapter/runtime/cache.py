"""The on-disk cache of compiled artefacts. Its entries are native code we load (dlopen, clCreateProgramWithBinary),
so it is as careful as ccache, Python's bytecode cache and ssh with its key files (POSIX permissions):

- Trust comes from the directory. The cache directory is used only when it is a real directory (not a symbolic
  link) owned by this user and writable by nobody else, and every directory above it is owned by this user or root
  and writable by nobody else unless sticky (like /tmp). A group-writable directory is accepted only when the group is
  the user's private group (umask 002 systems, as Debian's ssh does). Directories we create are 0700, and each is
  checked after creation. An unsafe directory is never used: one warning names it and the fix, and the process
  caches in a private temporary directory (0700, removed at exit) instead, or not at all.
- Entries are regular files owned by this user and writable by nobody else, opened without following links and
  without blocking (a FIFO is refused, never waited on), read with bounds: the header, then exactly the payload size
  it states, and never an entry over MAX_ENTRY bytes. Anything else is a miss; a regular file is evicted, anything
  else is left for the next write to rename over.
- The SHA-256 in the header catches corruption (truncation, bit flips) but proves nothing about who wrote the entry:
  whoever can write the file can recompute it. So each entry also carries an HMAC-SHA256 under a random secret kept
  in the directory (KEY_FILE, 0600), and an entry without a valid one is refused: one written by anything that cannot
  read the key (through an ACL, a drop directory), copied in from another user or machine, or left by an older
  format. The secret does not stand against code running as this user, which can read it as it can read an ssh key;
  this user's processes share the cache, which is its point. The real protection is the directory's permissions.
- An entry that fails to load (the backend's load raises) is evicted and rebuilt from source once; a second failure
  is a CompileError naming the kernel, the device, the cache entry and the fix (`DiskCache.get_or_load`).

An entry is one file: a magic line, a JSON header line (key, payload size, SHA-256, HMAC, what was hashed into the
key), then the payload. Writes go to a private temporary file renamed into place. No pickles.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import json
import logging
import os
import re
import stat
import tempfile
import threading
from pathlib import Path

from ..api.errors import CompileError, DiskFullError
from . import diskroom

log = logging.getLogger("hwadapter")
MAGIC = b"HWADAPTER-CACHE 2\n"
_ANY_VERSION = b"HWADAPTER-CACHE "  # an entry of another format version is recompiled quietly
MAX_ENTRY = 256 << 20       # bytes: no compiled kernel comes near; a bigger file is not one of ours
MAX_HEADER = 64 << 10       # bytes of magic line and header read before the header says how much follows
KEY_FILE = "hmac-key"       # outside the */*/*.bin layout of entries
KEY_SIZE = 32
_OPEN = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NAMESPACE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def default_dir() -> Path:
    """HWADAPTER_CACHE_DIR, else $XDG_CACHE_HOME/hwadapter, else ~/.cache/hwadapter."""
    env = os.environ.get("HWADAPTER_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hwadapter"


def key_of(parts: dict) -> str:
    """The SHA-256 of the key parts, canonically serialised."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class _Unsafe(Exception):
    """A directory or key file the cache must not use: (what is wrong, the fix)."""


class _Refused(Exception):
    """An entry that is not served: why, and whether it is damage (else: not ours, or not a file)."""

    def __init__(self, why: str, corrupt: bool = True, stale: bool = False):
        super().__init__(why)
        self.corrupt, self.stale = corrupt and not stale, stale  # stale: another format version, a quiet miss


# --- directories -----------------------------------------------------------------------------------------------

def _private_group(gid: int) -> bool:
    """Whether a group is this user's own private group (its name, its primary group, no other member)."""
    try:
        # lazy: POSIX only (the ImportError is caught here); asked only about group-writable directories
        import grp
        import pwd  # lazy: POSIX only, as grp
        user, group = pwd.getpwuid(os.geteuid()), grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == user.pw_gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def _check_dir(path: Path, st: os.stat_result, above: bool) -> None:
    """Raise _Unsafe unless a directory (the cache's own, or one `above` it) is safe to trust."""
    uid = os.geteuid()
    sticky = above and st.st_mode & stat.S_ISVTX  # others cannot rename what is ours in a sticky directory
    if stat.S_ISLNK(st.st_mode):
        raise _Unsafe(f"{path} is a symbolic link (to {os.readlink(path)})",
                      "point HWADAPTER_CACHE_DIR at a real directory of your own, not a link")
    if not stat.S_ISDIR(st.st_mode):
        raise _Unsafe(f"{path} is not a directory", "point HWADAPTER_CACHE_DIR at a directory")
    if st.st_uid != uid and not (above and st.st_uid == 0):
        raise _Unsafe(f"{path} is owned by uid {st.st_uid}, not by this user (uid {uid})",
                      "point HWADAPTER_CACHE_DIR at a directory of your own, e.g. ~/.cache/hwadapter")
    if st.st_mode & stat.S_IWOTH and not sticky:
        raise _Unsafe(f"{path} is writable by every user", f"chmod go-w {path}")
    if st.st_mode & stat.S_IWGRP and not sticky and not _private_group(st.st_gid):
        raise _Unsafe(f"{path} is writable by group {st.st_gid}", f"chmod g-w {path}")


def _check_above(path: Path) -> None:
    """Raise _Unsafe unless every directory of an existing real path is safe to hold the cache below it."""
    for d in [path, *path.parents]:
        _check_dir(d, os.lstat(d), above=True)


_ROOM = "the disk is full: free space on it, or point HWADAPTER_CACHE_DIR at a directory on a disk with room"


def _make_private(path: Path) -> None:
    """Create a directory 0700 unless it exists, then check it as the cache's own."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as err:
        raise _Unsafe(f"{path} cannot be created ({err.strerror})", _ROOM if diskroom.is_full(err) else
                      f"create it (mkdir -m 700 {path}) or point HWADAPTER_CACHE_DIR at a directory you can write")
    _check_dir(path, os.lstat(path), above=False)


def _prepare(root: Path) -> None:
    """Check the directories above `root`, then create (0700) and check `root` and any missing parent."""
    root = Path(os.path.abspath(root))
    missing, top = [], root.parent
    while not os.path.lexists(top):
        missing.append(top)
        top = top.parent
    _check_above(Path(os.path.realpath(top)))
    for d in [*reversed(missing), root]:
        _make_private(d)


# --- the secret --------------------------------------------------------------------------------------------------

def _read_key(path: Path) -> bytes | None:
    """The secret in `path`, or None when there is none; raise _Refused when the file is unusable."""
    try:
        fd = os.open(path, _OPEN)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _Refused(f"cannot be opened safely ({err.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077 or st.st_size != KEY_SIZE:
            raise _Refused("is not a private 0600 file of this user holding a key")
        return _read_upto(fd, KEY_SIZE)
    finally:
        os.close(fd)


def _write_key(path: Path, replace: bool) -> None:
    """Store a new random secret at `path`: atomically, and only if none is there unless `replace`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-key-")  # 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(KEY_SIZE))
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
            return
        try:
            os.link(tmp, path)  # atomic and exclusive: concurrent first users agree on one key
        except FileExistsError:
            pass
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _secret(root: Path) -> bytes:
    """This directory's HMAC secret, created on first use; an unusable key file is replaced (entries then rebuild)."""
    path = Path(root) / KEY_FILE
    for _ in range(3):
        try:
            key = _read_key(path)
            replace = False
        except _Refused as bad:
            log.warning("hwadapter cache key %s %s; replacing it (every entry will be compiled again)", path, bad)
            key, replace = None, True
        if key is not None:
            return key
        try:
            _write_key(path, replace)
        except OSError as err:
            raise _Unsafe(f"its key file {path} cannot be written ({err})",
                          _ROOM if diskroom.is_full(err) else f"remove {path}") from None
    raise _Unsafe(f"its key file {path} cannot be set up", f"remove {path}")


# --- entries -----------------------------------------------------------------------------------------------------

def _read_upto(fd: int, n: int) -> bytes:
    """At most n bytes from fd (fewer only at the end of the file)."""
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _mac(secret: bytes, key: str, size: int, sha256: str) -> str:
    return hmac.new(secret, f"{key}\n{size}\n{sha256}".encode(), hashlib.sha256).hexdigest()


def _check_file(st: os.stat_result) -> None:
    """Raise _Refused unless an opened entry is a regular file of this user, writable by nobody else, not too big."""
    if not stat.S_ISREG(st.st_mode):
        raise _Refused("is not a regular file", corrupt=False)
    if st.st_uid != os.geteuid():
        raise _Refused(f"is owned by uid {st.st_uid}, not by this user", corrupt=False)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _Refused("is writable by other users", corrupt=False)
    if st.st_size > MAX_ENTRY:
        raise _Refused(f"is larger than {MAX_ENTRY} bytes")


def _read_entry(fd: int, size: int, key: str, secret: bytes) -> bytes:
    """The payload of an entry file of `size` bytes, read with bounds and checked; raise _Refused when invalid."""
    head = _read_upto(fd, min(size, MAX_HEADER))
    if head.startswith(_ANY_VERSION) and not head.startswith(MAGIC):
        raise _Refused("is in another version's format", stale=True)
    end = head.find(b"\n", len(MAGIC))
    if not head.startswith(MAGIC) or end < 0:
        raise _Refused("has no valid header")
    try:
        header = json.loads(head[len(MAGIC):end])
    except (ValueError, RecursionError):  # RecursionError: a header of deeply nested brackets
        raise _Refused("has no valid header") from None
    if not isinstance(header, dict) or header.get("key") != key:
        raise _Refused("has no valid header")
    n = header.get("size")
    if type(n) is not int or end + 1 + n != size:
        raise _Refused("is truncated or has the wrong size")
    payload = head[end + 1:] + _read_upto(fd, size - len(head))
    digest = hashlib.sha256(payload).hexdigest()
    if len(payload) != n or header.get("sha256") != digest:
        raise _Refused("is corrupted (checksum mismatch)")
    if not hmac.compare_digest(str(header.get("hmac", "")).encode(), _mac(secret, key, n, digest).encode()):
        raise _Refused("was not written by this cache (no valid HMAC under this directory's key)", corrupt=False)
    return payload


_fallback: tempfile.TemporaryDirectory | None = None
_fallback_lock = threading.Lock()
_warned: set[str] = set()
_full_warned: set[str] = set()


def _fallback_dir() -> Path:
    """A private directory (0700) for this process's cache, removed at exit."""
    global _fallback
    with _fallback_lock:
        if _fallback is None:
            _fallback = tempfile.TemporaryDirectory(prefix="hwadapter-cache-")
    return Path(_fallback.name)


class DiskCache:
    """A private directory of validated entries, grouped by namespace (e.g. "cpu", "opencl")."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_dir()
        self.hits = self.misses = self.corrupt = self.refused = 0
        self._state: tuple | None = None  # (directory, secret), or () without a usable one; set on first use
        self._lock = threading.Lock()
        self._checked: set[Path] = set()  # entry subdirectories verified private

    # -- the directory --

    @property
    def directory(self) -> Path | None:
        """Where entries live: root when it is safe, else a private fallback, or None (no disk cache)."""
        state = self._open()
        return state[0] if state else None

    def _open(self) -> tuple:
        if self._state is None:
            with self._lock:
                if self._state is None:
                    self._state = self._choose()
        return self._state

    def _choose(self) -> tuple:
        try:
            return _usable(self.root)
        except _Unsafe as err:
            what, fix = err.args
        try:
            state = _usable(_fallback_dir())
            instead = f"compiled kernels are cached in {state[0]} for this process only"
        except (_Unsafe, OSError):
            state, instead = (), "compiled kernels are not cached on disk"
        if str(self.root) not in _warned:
            _warned.add(str(self.root))
            log.warning("hwadapter: not using the kernel cache directory %s: %s. Fix: %s. Until then %s.",
                        self.root, what, fix, instead)
        return state

    def _entry(self, namespace: str, key: str, create: bool = False) -> Path | None:
        """The entry's path under a verified private subdirectory, or None (no usable directory for it)."""
        state = self._open()
        if not state or not _NAMESPACE.fullmatch(namespace):
            return None
        sub = state[0] / namespace / key[:2]
        for d in (sub.parent, sub):
            if d not in self._checked:
                try:
                    if create:
                        _make_private(d)
                    else:
                        _check_dir(d, os.lstat(d), above=False)
                except OSError:  # not there yet (a miss), or vanished
                    return None
                except _Unsafe as err:
                    log.warning("hwadapter: not using the kernel cache directory %s: %s. Fix: %s.", d, *err.args)
                    return None
                self._checked.add(d)
        return sub / f"{key}.bin"

    def path_of(self, namespace: str, parts: dict) -> Path | None:
        """Where the entry for these key parts is (or would be) stored; None without a usable cache."""
        state = self._open()
        if not state or not _NAMESPACE.fullmatch(namespace):
            return None
        key = key_of(parts)
        return state[0] / namespace / key[:2] / f"{key}.bin"

    # -- entries --

    def get(self, namespace: str, parts: dict) -> bytes | None:
        """The payload stored under these key parts, or None (missing, or refused: an invalid file is evicted)."""
        key = key_of(parts)
        path = self._entry(namespace, key)
        try:
            payload = self._read(path, key) if path is not None else None
        except _Refused as bad:
            self.corrupt += bad.corrupt
            self.refused += not (bad.corrupt or bad.stale)
            log.log(logging.DEBUG if bad.stale else logging.WARNING,
                    "hwadapter: cache entry %s %s; ignoring it and compiling again", path, bad)
            _evict(path)
            payload = None
        if payload is None:
            self.misses += 1
        else:
            self.hits += 1
        return payload

    def _read(self, path: Path, key: str) -> bytes | None:
        try:
            fd = os.open(path, _OPEN)  # no link followed; a FIFO opens at once and is refused below
        except FileNotFoundError:
            return None
        except OSError as err:  # ELOOP: a symbolic link; ENXIO: a socket
            raise _Refused(f"cannot be opened as a plain file ({err.strerror})", corrupt=False) from None
        try:
            st = os.fstat(fd)
            _check_file(st)
            return _read_entry(fd, st.st_size, key, self._open()[1])
        finally:
            os.close(fd)

    def put(self, namespace: str, parts: dict, payload: bytes) -> Path | None:
        """Store a payload atomically (a private temporary file renamed over the entry); None when not stored."""
        key = key_of(parts)
        if len(payload) > MAX_ENTRY - MAX_HEADER:
            log.warning("hwadapter: not caching a %d-byte binary (over %d bytes)", len(payload), MAX_ENTRY)
            return None
        path = self._entry(namespace, key, create=True)
        if path is None:
            return None
        digest = hashlib.sha256(payload).hexdigest()
        header = {"key": key, "size": len(payload), "sha256": digest,
                  "hmac": _mac(self._open()[1], key, len(payload), digest),
                  "parts": {k: (v if len(str(v)) < 200 else hashlib.sha256(str(v).encode()).hexdigest())
                            for k, v in parts.items()}}
        data = MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload
        if not diskroom.fits(len(data)):  # a write past the limit kills a process that does not ignore SIGXFSZ
            raise OSError(errno.EFBIG, f"a {len(data)}-byte entry is over this process's file-size limit "
                                       f"({diskroom.file_limit()} bytes, `ulimit -f`)")
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")  # 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
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

    def evict(self, namespace: str, parts: dict) -> None:
        """Remove the entry for these key parts, if it is a regular file."""
        path = self._entry(namespace, key_of(parts))
        if path is not None:
            _evict(path)

    def get_or_build(self, namespace: str, parts: dict, build, what: str = "") -> bytes:
        """The cached payload, or `build()`'s result stored for next time."""
        payload = self.get(namespace, parts)
        return self._build(namespace, parts, build, what) if payload is None else payload

    def _build(self, namespace: str, parts: dict, build, what: str = "") -> bytes:
        try:
            payload = build()
        except DiskFullError:
            raise
        except (CompileError, OSError) as err:  # a compiler that found no room says so, not that the kernel is wrong
            full = diskroom.no_room(what or f"a {namespace} kernel", getattr(err, "log", "") or err,
                                    diskroom.scratch_dir(), "TMPDIR")
            if full is None:
                raise
            raise full from err
        try:
            self.put(namespace, parts, payload)
        except OSError as err:  # a read-only or full disk costs speed, never correctness
            self._not_kept(err)
        return payload

    def _not_kept(self, err: OSError) -> None:
        if not diskroom.is_full(err):
            log.warning("could not write the kernel cache under %s: %s", self.root, err)
        elif str(self.root) not in _full_warned:  # once: every compile would say it again
            _full_warned.add(str(self.root))
            log.warning("hwadapter: compiled kernels are not kept in the kernel cache %s: %s. Fix: %s; until then "
                        "each process compiles them again", self.root, err, _ROOM)

    def get_or_load(self, namespace: str, parts: dict, build, load, what: str):
        """`load(payload)` of the cached entry, else of `build()`'s payload, stored. A cached entry that fails to load
        is evicted and rebuilt once; a second failure, or a fresh build that fails to load, is a CompileError naming
        `what` (the device and the kernel), the entry and the fix."""
        payload = self.get(namespace, parts)
        cached = payload is not None
        loaded, failure = _try_load(load, payload if cached else self._build(namespace, parts, build, what))
        if failure is None:
            return loaded
        path = self.path_of(namespace, parts)
        self.evict(namespace, parts)
        if cached:
            log.warning("hwadapter: %s: the cached binary %s failed to load (%s: %s); removed it, compiling again",
                        what, path, type(failure).__name__, str(failure))  # str: the exception would keep its frames alive
            loaded, failure = _try_load(load, self._build(namespace, parts, build, what))
            if failure is None:
                return loaded
            self.evict(namespace, parts)
        raise _load_error(what, namespace, path, failure, cached) from failure

    def entries(self) -> list[Path]:
        """Every entry: a regular file `<namespace>/<xx>/<key>.bin` in real subdirectories. Links are never followed
        (a symlinked subdirectory leads out of the cache), so nothing outside it is listed, or deleted by `clear`."""
        d = self.directory
        if d is None:
            return []
        return sorted(p for ns in _children(d, stat.S_ISDIR) for sub in _children(ns, stat.S_ISDIR)
                      for p in _children(sub, stat.S_ISREG) if p.suffix == ".bin")

    def clear(self) -> list[tuple[Path, str]]:
        """Delete every entry; (entry, why) for each that could not be deleted (a read-only directory, say)."""
        failed = []
        for p in self.entries():
            try:
                os.unlink(p)
            except FileNotFoundError:  # deleted meanwhile: what was asked
                pass
            except OSError as err:
                failed.append((p, err.strerror or str(err)))
        return failed


def _children(d: Path, kind) -> list[Path]:
    """The entries of directory `d` whose own type (lstat: a link is a link) `kind` accepts; none when `d` cannot be
    read."""
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return []
    out = []
    for name in names:
        try:
            if kind(os.lstat(d / name).st_mode):
                out.append(d / name)
        except OSError:  # vanished meanwhile
            pass
    return out


def _usable(root: Path) -> tuple:
    """(root, its secret) once root is checked (and created) private; raise _Unsafe otherwise."""
    try:
        _prepare(root)
        return Path(root), _secret(Path(root))
    except OSError as err:  # a component vanished or cannot be read while checking
        raise _Unsafe(f"{root} cannot be checked ({err})", "point HWADAPTER_CACHE_DIR at a directory of your own")


def _try_load(load, payload: bytes) -> tuple:
    """(load(payload), None), or (None, why) when the loader rejects the payload; out of memory is raised."""
    try:
        return load(payload), None
    except MemoryError:  # out of (device) memory says nothing about the entry
        raise
    except Exception as err:  # dlopen, clCreateProgramWithBinary, a vendor's CompileError: the entry is suspect
        return None, err


def _evict(path: Path) -> None:
    """Unlink an entry if it is a regular file (a link, FIFO or device is left for the next write to rename over)."""
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass


def _load_error(what: str, namespace: str, path: Path | None, err: Exception, rebuilt: bool) -> CompileError:
    binary = "a binary rebuilt from source after the cached one failed too" if rebuilt else "the binary just compiled"
    where = f"cache entry {path} (removed)" if path else "no cache entry (the disk cache is off)"
    fix = (f"the {namespace} compiler builds what its loader rejects (a driver, toolchain or target mismatch): check "
           f"the {namespace} driver and compiler installation, and report it to the {namespace} plugin's vendor with "
           f"this message if it persists")
    return CompileError(f"{what}: the {namespace} backend could not load {binary}: {type(err).__name__}: {err}; "
                        f"{where}. Fix: {fix}", log=f"{type(err).__name__}: {err}", fix=fix)


_default: DiskCache | None = None


def default() -> DiskCache:
    """The process's cache at default_dir() (re-read when HWADAPTER_CACHE_DIR changes)."""
    global _default
    if _default is None or _default.root != default_dir():
        _default = DiskCache()
    return _default
