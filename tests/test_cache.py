"""The disk cache: hits, misses on any key change, corruption recovery, concurrent writers."""
from __future__ import annotations

import multiprocessing as mp

import pytest

from hwadapter.cache import DiskCache, default, default_dir

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


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "header"])
def test_corrupted_entry_is_detected_removed_and_rebuilt(cache, damage):
    path = cache.put("cpu-c", PARTS, b"payload-bytes" * 100)
    data = path.read_bytes()
    broken = {"truncate": data[:-10], "flip": data[:-1] + bytes([data[-1] ^ 1]), "garbage": b"\x00" * 50,
              "empty": b"", "header": data.replace(b'"size"', b'"SIZE"')}[damage]
    path.write_bytes(broken)
    assert cache.get("cpu-c", PARTS) is None
    assert not path.exists() and cache.corrupt == 1
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
    assert c.corrupt == 0
    assert not list(tmp_path.glob("ns/*/.tmp-*"))  # no temporary files left behind


def test_default_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HWADAPTER_CACHE_DIR", str(tmp_path / "c"))
    assert default_dir() == tmp_path / "c" and default().root == tmp_path / "c"


def test_unwritable_cache_still_builds(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    c = DiskCache(blocker / "sub")
    assert c.get_or_build("ns", PARTS, lambda: b"x") == b"x"
