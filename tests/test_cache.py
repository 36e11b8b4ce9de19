"""The disk cache: hits, misses on any key change, corruption recovery, concurrent writers; and, since its entries
are native code we load, the care of ssh with its key files: unsafe files and directories refused, foreign entries
rejected, an entry that fails to load rebuilt once."""
from __future__ import annotations

import collections
import errno
import hashlib
import json
import logging
import multiprocessing as mp
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hwadapter.api.errors import DiskFullError
from hwadapter.runtime import diskroom
from hwadapter.runtime.cache import DiskCache, default, default_dir

PARTS = {"source": "int main(){}", "compiler": "gcc 12", "flags": "-O2", "target": "x86_64"}


@pytest.fixture
def cache(tmp_path):
    return DiskCache(tmp_path)


def test_hit_after_put(cache):
    assert cache.get("cpu-c", PARTS) is None
    cache.put("cpu-c", PARTS, b"\x7fELF binary")
    assert cache.get("cpu-c", PARTS) == b"\x7fELF binary"
    assert (cache.hits, cache.misses) == (1, 1)


@pytest.mark.parametrize("field", sorted(PARTS))
def test_any_key_change_is_a_miss(cache, field):
    cache.put("cpu-c", PARTS, b"one")
    changed = dict(PARTS, **{field: PARTS[field] + " changed"})
    assert cache.get("cpu-c", changed) is None
    assert cache.get("opencl", PARTS) is None  # namespaces are separate too


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "header", "nested", "hmac"])
def test_corrupted_entry_is_detected_removed_and_rebuilt(cache, damage):
    path = cache.put("cpu-c", PARTS, b"payload-bytes" * 100)
    data = path.read_bytes()
    magic, header, payload = data.split(b"\n", 2)
    broken = {"truncate": data[:-10], "flip": data[:-1] + bytes([data[-1] ^ 1]), "garbage": b"\x00" * 50,
              "empty": b"", "header": data.replace(b'"size"', b'"SIZE"'),
              "nested": magic + b"\n" + b"[" * 50000 + b"\n" + payload,
              "hmac": data.replace(b'"hmac": "', '"hmac": "\u00e9'.encode()) if b'"hmac"' in data else b""}[damage]
    path.write_bytes(broken)
    assert cache.get("cpu-c", PARTS) is None
    assert not path.exists() and cache.corrupt + getattr(cache, "refused", 0) == 1
    built = []
    assert cache.get_or_build("cpu-c", PARTS, lambda: built.append(1) or b"rebuilt") == b"rebuilt"
    assert built == [1] and cache.get("cpu-c", PARTS) == b"rebuilt"


def _writer(root, i, n):
    c = DiskCache(root)
    for j in range(n):
        c.put("ns", {"k": j % 5}, bytes([j % 5]) * (10000 + j % 5))
        got = c.get("ns", {"k": (j + i) % 5})
        assert got is None or got == bytes([(j + i) % 5]) * (10000 + (j + i) % 5)


def test_concurrent_writers_never_leave_a_broken_entry(tmp_path):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), i, 60)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    c = DiskCache(tmp_path)
    for k in range(5):
        assert c.get("ns", {"k": k}) == bytes([k]) * (10000 + k)
    assert c.corrupt == c.refused == 0  # the writers agreed on one secret: no entry refused as foreign
    assert not list(tmp_path.glob("ns/*/.tmp-*"))  # no temporary files left behind


def test_default_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HWADAPTER_CACHE_DIR", str(tmp_path / "c"))
    assert default_dir() == tmp_path / "c" and default().root == tmp_path / "c"


def test_unwritable_cache_still_builds(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    c = DiskCache(blocker / "sub")
    assert c.get_or_build("ns", PARTS, lambda: b"x") == b"x"


# --- the cache holds code we execute: it trusts files and directories the way ssh trusts its key files -----------

_OTHER_ID = 65534  # nobody / nogroup: someone else


def _entry(cache) -> Path:
    return cache.put("cpu-c", PARTS, b"\x7fELF real binary")


def _rewrite_payload(path: Path, payload: bytes) -> None:
    """Give an entry another payload with a recomputed size and checksum: what anyone who can write it can do."""
    magic, header, _ = path.read_bytes().split(b"\n", 2)
    header = json.loads(header)
    header.update(size=len(payload), sha256=hashlib.sha256(payload).hexdigest())
    path.write_bytes(magic + b"\n" + json.dumps(header).encode() + b"\n" + payload)


@pytest.mark.timeout(20)
def test_a_fifo_in_place_of_an_entry_is_a_miss_not_a_hang(cache):
    path = _entry(cache)
    path.unlink()
    os.mkfifo(path)
    assert cache.get("cpu-c", PARTS) is None  # opened without blocking, refused: no writer is ever waited for
    assert stat.S_ISFIFO(os.lstat(path).st_mode)  # not ours to delete: the next write renames over it
    assert cache.get_or_build("cpu-c", PARTS, lambda: b"rebuilt") == b"rebuilt"
    assert cache.get("cpu-c", PARTS) == b"rebuilt"


_DEV_ZERO = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # a read of /dev/zero ends in MemoryError, not swap
from hwadapter.runtime.cache import DiskCache
c = DiskCache(sys.argv[1])
print(c.get("cpu-c", {PARTS!r}), c.hits, c.misses)
"""


def test_a_symlink_to_dev_zero_is_a_miss_and_never_read(cache, tmp_path):
    path = _entry(cache)
    path.unlink()
    path.symlink_to("/dev/zero")
    child = subprocess.run([sys.executable, "-c", _DEV_ZERO.format(PARTS=PARTS), str(tmp_path)],
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split() == ["None", "0", "1"]
    assert path.is_symlink()  # a link is not followed, and not ours to delete


def test_a_symlink_to_a_valid_entry_elsewhere_is_not_followed(cache, tmp_path):
    path = _entry(cache)
    elsewhere = tmp_path / "elsewhere.bin"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    assert cache.get("cpu-c", PARTS) is None and cache.refused == 1
    assert elsewhere.exists()


def test_an_entry_with_a_recomputed_checksum_but_no_valid_hmac_is_refused_and_evicted(cache):
    path = _entry(cache)
    _rewrite_payload(path, b"\x7fELF with a constructor of someone else's")
    assert cache.get("cpu-c", PARTS) is None
    assert (cache.refused, cache.corrupt) == (1, 0) and not path.exists()


def test_an_entry_copied_from_another_cache_directory_is_refused(tmp_path):
    theirs, ours = DiskCache(tmp_path / "theirs"), DiskCache(tmp_path / "ours")
    ours_path = _entry(ours)
    ours_path.write_bytes(_entry(theirs).read_bytes())  # a valid entry, but under another directory's secret
    assert ours.get("cpu-c", PARTS) is None and ours.refused == 1


def test_an_entry_others_can_write_is_refused(cache):
    path = _entry(cache)
    path.chmod(0o620)
    assert cache.get("cpu-c", PARTS) is None and cache.refused == 1 and not path.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_an_entry_owned_by_another_user_is_refused(cache):
    path = _entry(cache)
    os.chown(path, _OTHER_ID, _OTHER_ID)
    assert cache.get("cpu-c", PARTS) is None and cache.refused == 1


def test_an_entry_over_the_size_cap_is_refused_without_reading_it(cache, monkeypatch):
    from hwadapter.runtime import cache as module
    path = cache.put("cpu-c", PARTS, b"x" * 5000)
    monkeypatch.setattr(module, "MAX_ENTRY", 4096, raising=False)
    assert cache.get("cpu-c", PARTS) is None and not path.exists()


def test_what_the_cache_creates_is_private(tmp_path):
    root = tmp_path / "a" / "b" / "cache"
    c = DiskCache(root)
    path = c.put("cpu-c", PARTS, b"payload")
    for d in (tmp_path / "a", tmp_path / "a" / "b", root, path.parent.parent, path.parent):
        assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700, d
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert [stat.S_IMODE(p.stat().st_mode) for p in root.iterdir() if p.is_file()] == [0o600]  # the secret


def _share(d: Path, how: str) -> None:
    """Make directory `d` unsafe for a cache in the way `how` says."""
    if how == "group-writable":
        other_groups = [g for g in os.getgroups() if g != os.getegid()]
        if os.geteuid() != 0 and not other_groups:
            pytest.skip("no group but the user's own to give the directory to")
        os.chown(d, -1, _OTHER_ID if os.geteuid() == 0 else other_groups[0])
        d.chmod(0o770)
    elif how == "world-writable":
        d.chmod(0o777)
    elif how == "owned by another user":
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another user needs root")
        os.chown(d, _OTHER_ID, -1)


@pytest.mark.parametrize("how", ["group-writable", "world-writable", "owned by another user", "a symlink",
                                 "below a world-writable directory"])
def test_an_unsafe_cache_directory_is_never_used(tmp_path, how, caplog):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    root = shared
    if how == "a symlink":
        root = tmp_path / "link"
        root.symlink_to(shared)
    elif how == "below a world-writable directory":
        shared.chmod(0o777)
        root = shared / "cache"
    else:
        _share(shared, how)
    with caplog.at_level(logging.WARNING, logger="hwadapter"):
        for _ in range(2):  # a second cache on the same directory: no second warning
            c = DiskCache(root)
            assert c.get_or_build("cpu-c", PARTS, lambda: b"built") == b"built"
            assert c.get("cpu-c", PARTS) == b"built"  # served from a private fallback directory
    assert list(shared.iterdir()) == []  # nothing written to, or created in, the unsafe directory
    assert c.directory is not None and c.directory != root and stat.S_IMODE(c.directory.stat().st_mode) == 0o700
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(root) in warnings[0] and "Fix:" in warnings[0]


def test_a_group_writable_cache_directory_names_the_fix(tmp_path, caplog):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    _share(shared, "group-writable")
    with caplog.at_level(logging.WARNING, logger="hwadapter"):
        DiskCache(shared).get("cpu-c", PARTS)
    assert f"chmod g-w {shared}" in caplog.text


def test_an_unusable_key_file_is_replaced_and_entries_under_the_old_key_are_rebuilt(tmp_path):
    c = DiskCache(tmp_path)
    path = _entry(c)
    key_file = next(p for p in tmp_path.iterdir() if p.is_file())
    key_file.chmod(0o644)  # readable by others: the secret is out
    fresh = DiskCache(tmp_path)
    assert fresh.get("cpu-c", PARTS) is None and fresh.refused == 1 and not path.exists()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


# --- an entry that fails to load is evicted and rebuilt once ------------------------------------------------------

def _codegen_devices() -> list[str]:
    import hwadapter as hw
    from hwadapter.runtime.device import get
    names = [d for d in ("cpu:0", "opencl:0") if d in hw.device.get_available_device()]
    return [d for d in names if get(d).codegen is not None]


@pytest.fixture
def compiled(tmp_path, monkeypatch, reset_plugins, request):
    """A device whose `exp` runs compiled, a private cache, and the key parts of every entry `exp` looked up."""
    device = request.param
    monkeypatch.setenv("HWADAPTER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HWADAPTER_CPU_KERNELS", "codegen")
    reset_plugins()
    looked_up, real_get = [], DiskCache.get

    def get(self, namespace, parts):
        looked_up.append((namespace, parts))
        return real_get(self, namespace, parts)

    monkeypatch.setattr(DiskCache, "get", get)
    x = np.linspace(-2, 2, 9, dtype=np.float32)

    def run():
        import hwadapter as hw
        return hw.exp(hw.to_tensor(x, device=device)).numpy()

    np.testing.assert_allclose(run(), np.exp(x), rtol=1e-6)  # compiled and stored
    assert looked_up
    reset_plugins()  # a new Device: nothing loaded in memory, every binary comes from the disk cache
    return device, run, list(looked_up), np.exp(x)


def _count_compiles(device: str, monkeypatch) -> list:
    from hwadapter.runtime.device import get
    backend, calls = type(get(device).codegen), []
    real = backend.compile
    monkeypatch.setattr(backend, "compile", lambda self, source, name: calls.append(name) or real(self, source, name))
    return calls


@pytest.mark.parametrize("compiled", _codegen_devices(), indirect=True)
def test_a_cached_binary_that_fails_to_load_is_evicted_rebuilt_once_and_the_op_succeeds(compiled, monkeypatch, caplog):
    from hwadapter.runtime import cache
    device, run, looked_up, expected = compiled
    for ns, parts in looked_up:  # a valid header over bytes the loader rejects
        cache.default().put(ns, parts, b"\x7fELF\x02\x01\x01 not a shared object, not a program binary" * 8)
    compiles = _count_compiles(device, monkeypatch)
    with caplog.at_level(logging.WARNING, logger="hwadapter"):
        np.testing.assert_allclose(run(), expected, rtol=1e-6)
    assert len(compiles) == len(looked_up)  # each bad entry rebuilt exactly once
    assert "failed to load" in caplog.text and str(cache.default().path_of(*looked_up[0])) in caplog.text
    import hwadapter as hw
    hw.device.reset_plugins()
    np.testing.assert_allclose(run(), expected, rtol=1e-6)
    assert len(compiles) == len(looked_up)  # the rebuilt entries load: no further compile


@pytest.mark.parametrize("warm", [True, False])
@pytest.mark.parametrize("compiled", _codegen_devices(), indirect=True)
def test_a_backend_that_cannot_load_its_binaries_is_a_clear_error_after_one_rebuild(compiled, warm, monkeypatch):
    from hwadapter.runtime import cache
    from hwadapter.api.errors import HwAdapterError
    from hwadapter.plugin import CompileError
    from hwadapter.runtime.device import get
    device, run, looked_up, _ = compiled
    if not warm:
        cache.default().clear()
    compiles = _count_compiles(device, monkeypatch)

    def refuse(self, binary, name):
        raise OSError("simulated loader failure: invalid ELF header")

    monkeypatch.setattr(type(get(device).codegen), "load", refuse)
    with pytest.raises(CompileError) as err:
        run()
    assert isinstance(err.value, HwAdapterError)
    message, entry = str(err.value), cache.default().path_of(*looked_up[0])
    assert compiles and f"kernel {compiles[0]!r}" in message and device in message
    assert str(entry) in message and "simulated loader failure" in message and "Fix:" in message
    assert len(compiles) == 1  # warm: the cached entry is rebuilt once; cold: the fresh build is not repeated
    assert not entry.exists()  # a binary that does not load is not left to fail the next run


def test_get_or_load_rebuilds_an_entry_the_loader_rejects_once(cache):
    cache.put("cpu-c", PARTS, b"stale binary")
    builds = []

    def load(binary):
        if binary != b"good binary":
            raise OSError("wrong ELF class")
        return ("loaded", binary)

    got = cache.get_or_load("cpu-c", PARTS, lambda: builds.append(1) or b"good binary", load, "cpu:0: kernel 'k'")
    assert got == ("loaded", b"good binary") and builds == [1]
    assert cache.get("cpu-c", PARTS) == b"good binary"


def test_running_out_of_memory_while_loading_keeps_the_entry(cache):
    path = _entry(cache)

    def load(binary):
        raise MemoryError("device memory exhausted")

    with pytest.raises(MemoryError):
        cache.get_or_load("cpu-c", PARTS, lambda: pytest.fail("rebuilt"), load, "cpu:0: kernel 'k'")
    assert path.exists() and cache.get("cpu-c", PARTS) == b"\x7fELF real binary"


def test_an_entry_of_the_previous_format_is_a_quiet_miss(cache, caplog):
    path = _entry(cache)
    payload = b"\x7fELF from an older hwadapter"
    header = {"key": json.loads(path.read_bytes().split(b"\n")[1])["key"], "size": len(payload),
              "sha256": hashlib.sha256(payload).hexdigest()}
    path.write_bytes(b"HWADAPTER-CACHE 1\n" + json.dumps(header).encode() + b"\n" + payload)  # checksum only
    with caplog.at_level(logging.WARNING, logger="hwadapter"):
        assert cache.get("cpu-c", PARTS) is None
    assert not path.exists() and not caplog.records and cache.misses == 1


def test_a_directory_writable_only_by_the_users_private_group_is_used(tmp_path, caplog):
    import grp
    import pwd
    user = pwd.getpwuid(os.geteuid())
    group = grp.getgrgid(user.pw_gid)
    if group.gr_name != user.pw_name or set(group.gr_mem) - {user.pw_name}:
        pytest.skip("the user has no private group")
    root = tmp_path / "umask-002"
    root.mkdir()
    os.chown(root, -1, user.pw_gid)
    root.chmod(0o775)  # what umask 002 makes on systems with a group per user: nobody else can write it
    with caplog.at_level(logging.WARNING, logger="hwadapter"):
        path = DiskCache(root).put("cpu-c", PARTS, b"payload")
    assert path is not None and path.is_relative_to(root) and not caplog.records


# --- a full disk, or a file-size limit, while compiling ------------------------------------------------------------

#: Child code: compile `exp` on each codegen device (argv[1], comma-separated) after the setup in argv[2], printing
#: per device "<device> <error class> <words>" (each of NO_ROOM_WORDS found in the message and fix) or "<device> ok".
NO_ROOM_CHILD = r"""
import os, resource, signal, sys
import numpy as np
import hwadapter as hw
exec(sys.argv[2])
for device in sys.argv[1].split(","):
    try:
        hw.exp(hw.to_tensor(np.ones(3, np.float32), device=device)).numpy()
        print(device, "ok", flush=True)
    except Exception as err:
        text = f"{err} {getattr(err, 'fix', '')}"
        print(device, type(err).__name__, *[w.replace(" ", "_") for w in NO_ROOM_WORDS if w in text], flush=True)
"""
#: What an error about a full disk says (see the child above).
NO_ROOM_WORDS = ("cannot compile", "file-size limit", "ulimit -f", "disk is full", "Nothing is wrong with the kernel")


def _no_room_child(tmp_path, setup: str, **env) -> tuple[subprocess.CompletedProcess, dict]:
    devices = _codegen_devices()
    if not devices:
        pytest.skip("no device compiles kernels here")
    full = {**os.environ, "HWADAPTER_CPU_KERNELS": "codegen", "PYTHONDONTWRITEBYTECODE": "1",
            "HWADAPTER_CACHE_DIR": str(tmp_path / "cache"), "POCL_CACHE_DIR": str(tmp_path / "pocl"),
            # an empty user cache: stevedore writes its entry-point cache there when it has none for this sys.path
            "XDG_CACHE_HOME": str(tmp_path / "xdg"), **env}
    code = f"NO_ROOM_WORDS = {NO_ROOM_WORDS!r}\n" + NO_ROOM_CHILD
    proc = subprocess.run([sys.executable, "-c", code, ",".join(devices), setup], env=full, capture_output=True,
                          text=True, timeout=120)
    said = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines() if line.split()}
    assert proc.returncode == 0 and set(said) == set(devices), proc.stdout + proc.stderr
    return proc, said


@pytest.mark.parametrize("sigxfsz", ["ignored", "default"])
def test_a_file_size_limit_is_an_error_saying_so_and_never_kills_the_process(tmp_path, sigxfsz):
    # PoCL's LLVM aborted the process ("IO failure on output stream: File too large"); gcc, killed by SIGXFSZ, was
    # reported as a bug in the kernel. With SIGXFSZ at its default, any write past the limit would kill the process.
    setup = ("signal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n" if sigxfsz == "default" else "") + \
        "resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))"
    _, said = _no_room_child(tmp_path, setup)
    for device, words in said.items():
        assert words == ["DiskFullError", "cannot_compile", "file-size_limit", "ulimit_-f",
                         "Nothing_is_wrong_with_the_kernel"], (device, words)


@pytest.fixture
def full_disk(tmp_path):
    """A directory on a 64 KiB tmpfs filled to the last block (root only: it mounts one)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    mount = tmp_path / "full"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:  # full
            pass
        finally:
            os.close(fd)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_a_full_disk_is_an_error_saying_so_not_a_bug_in_the_kernel(tmp_path, full_disk):
    # PoCL's kernel cache (POCL_CACHE_DIR), gcc's temporary files (TMPDIR) and the kernel cache on the full disk.
    proc, said = _no_room_child(tmp_path, "", POCL_CACHE_DIR=str(full_disk / "pocl"), TMPDIR=str(full_disk),
                                HWADAPTER_CACHE_DIR=str(full_disk / "cache"))
    for device, words in said.items():
        assert words[:2] == ["DiskFullError", "cannot_compile"] and "disk_is_full" in words, (device, words)
        assert "Nothing_is_wrong_with_the_kernel" in words, (device, words)
    # the kernel cache on the full disk: its warning says so, and what to do
    assert "the disk is full: free space on it, or point HWADAPTER_CACHE_DIR at a directory" in proc.stderr


def test_a_full_kernel_cache_costs_speed_only(tmp_path, full_disk):
    proc, said = _no_room_child(tmp_path, "", HWADAPTER_CACHE_DIR=str(full_disk / "cache"))
    assert all(words == ["ok"] for words in said.values()), said
    assert "the disk is full: free space on it, or point HWADAPTER_CACHE_DIR at a directory" in proc.stderr


# --- diskroom in-process: its verdicts with the disk and the limit faked (the children above check the real thing) --
def test_diskroom_says_which_is_short_and_only_when_it_is(monkeypatch, tmp_path):
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(diskroom, "file_limit", lambda: None)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 40, 0, 1 << 40))
    assert diskroom.shortage(tmp_path / "not" / "made") is None
    diskroom.check_room("k", tmp_path, "POCL_CACHE_DIR")  # room: nothing raised
    assert diskroom.no_room("k", OSError(errno.EACCES, "denied"), tmp_path, "S") is None  # not about room
    err = diskroom.no_room("k", "ld: write failed: No space left on device\nmore", tmp_path, "S")
    assert isinstance(err, DiskFullError) and "No space left on device" in str(err) and "S" in err.fix
    assert isinstance(diskroom.no_room("k", OSError(errno.ENOSPC, "full"), tmp_path, "S"), DiskFullError)

    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 40, 0, diskroom.NEED - 1))
    with pytest.raises(DiskFullError, match="the disk is full") as info:
        diskroom.check_room("kernel add", tmp_path, "POCL_CACHE_DIR")
    assert "kernel add" in str(info.value) and "POCL_CACHE_DIR" in info.value.fix

    monkeypatch.setattr(diskroom, "file_limit", lambda: 1 << 20)
    with pytest.raises(DiskFullError, match="file-size limit") as info:
        diskroom.check_room("kernel add", tmp_path, "POCL_CACHE_DIR")
    assert "ulimit -f" in info.value.fix
