"""Source dumping through HWADAPTER_DUMP_KERNELS and line-numbered listings."""

import os

import hwadapter_kp as kp
from hwadapter_kp import library


def test_dump_env_writes_each_source(tmp_path, monkeypatch):
    monkeypatch.setenv(kp.DUMP_ENV, str(tmp_path / "dump"))
    program = library.get("softmax").specialize({"T": "float32"}, {"x": (3, 4)})
    written = {}
    for dialect, ext in (("c", ".c"), ("opencl", ".cl"), ("cuda", ".cu")):
        src = program.source(dialect)
        written[f"{program.name}.{kp.source_hash(src)}{ext}"] = src
    files = sorted(os.listdir(tmp_path / "dump"))
    assert files == sorted(written)
    for name, src in written.items():
        assert (tmp_path / "dump" / name).read_text() == src


def test_no_dump_without_env(tmp_path, monkeypatch):
    monkeypatch.delenv(kp.DUMP_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    library.get("exp").specialize({"T": "float32"}, {"x": (3,)}).source("c")
    assert os.listdir(tmp_path) == []


def test_source_hash_is_content_only():
    a = library.get("exp").specialize({"T": "float32"}, {"x": (3,)}).source("c")
    b = library.get("exp").specialize({"T": "float32"}, {"x": (7, 9)}).source("c")
    assert a == b and kp.source_hash(a) == kp.source_hash(b)
    assert kp.source_hash(a) != kp.source_hash(a + " ")


def test_number_lines():
    src = "int a;\nint b;\nint c;\n" + "\n".join(f"x{i};" for i in range(9))
    assert kp.number_lines("a\nb") == " 1 | a\n 2 | b"
    listing = kp.number_lines(src, highlight=2)
    assert listing.splitlines()[1] == "> 2 | int b;" and listing.splitlines()[0] == "  1 | int a;"
    assert len(listing.splitlines()) == 12
    window = kp.number_lines(src, highlight=10, context=1).splitlines()
    assert window == ["  9 | x5;", ">10 | x6;", " 11 | x7;"]
