"""hwadapter.serialize: nested dicts round trip on every device, and no damaged or foreign file gets past a clear
HwAdapterError (no pickle is ever loaded, no forged size allocates)."""
from __future__ import annotations

import io
import json
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.api.errors import HwAdapterError, InvalidArgumentError
from hwadapter.serialize import save, load
import hwadapter.serialize as serialize

OPENCL = "opencl:0" in hw.device.get_available_device()
WHERE = ["cpu:0"] + (["opencl:0"] if OPENCL else [])


def _sample(rng) -> np.ndarray:
    """An array of each hwadapter dtype, with values that stress it (negatives, fractions, both bools)."""
    return {d.name: (rng.integers(0, 2, (2, 3)).astype(d) if d == hw.bool_ else
                     (rng.standard_normal((2, 3)) * 50).astype(d)) for d in hw.dtypes.ALL}


def _state(rng, where: str) -> dict:
    arrays = _sample(rng)
    return {
        "model": {name: hw.to_tensor(a, device=where) for name, a in arrays.items()},
        "raw": {"scalar": np.array(3.5, dtype=np.float32), "empty": np.zeros((0, 4), np.int64),
                "deep": {"deeper": {"x": np.arange(5, dtype=np.uint8)}}, "nothing": {}},
        "opt": {"step": 7, "lr": 1e-3, "nesterov": False, "name": "Adam ✓", "none": None, "big": 2 ** 80,
                "inf": float("-inf"), "weird key.with/slash": 1},
        "last": hw.to_tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=where),
    }


def _same(a, b) -> None:
    """Nested dicts equal: tensors and arrays by dtype, shape and values, plain values by type and value."""
    assert isinstance(b, dict) and a.keys() == b.keys()
    for k, x in a.items():
        y = b[k]
        if isinstance(x, dict):
            _same(x, y)
        elif isinstance(x, (hw.Tensor, np.ndarray)):
            assert isinstance(y, hw.Tensor), k
            xs = x.numpy() if isinstance(x, hw.Tensor) else x
            assert y.dtype == xs.dtype and tuple(y.shape) == xs.shape, k
            np.testing.assert_array_equal(y.numpy(), xs)
        else:
            assert type(y) is type(x) and y == x, k


@pytest.mark.parametrize("saved_on", WHERE)
@pytest.mark.parametrize("loaded_on", WHERE)
def test_round_trip_of_nested_dicts_of_every_dtype(tmp_path, saved_on, loaded_on):
    state = _state(np.random.default_rng(0), saved_on)
    save(state, tmp_path / "s.hwparams")
    back = load(tmp_path / "s.hwparams", device=loaded_on)
    _same(state, back)
    assert str(back["model"]["float32"].device) == loaded_on
    assert str(back["raw"]["deep"]["deeper"]["x"].device) == loaded_on
    assert os.listdir(tmp_path) == ["s.hwparams"]  # the temporary file was renamed, nothing else left
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(tmp_path / "s.hwparams").st_mode & 0o777 == 0o666 & ~umask  # as open() would have made it


def test_load_defaults_to_the_current_device_and_empty_dicts_survive(tmp_path):
    save({}, tmp_path / "empty")
    assert load(tmp_path / "empty") == {}
    save({"t": np.ones(3, np.float32), "n": 1.5}, str(tmp_path / "s"))
    back = load(str(tmp_path / "s"))
    assert str(back["t"].device) == hw.get_device() and back["n"] == 1.5
    with pytest.raises(hw.InvalidDeviceError):
        load(str(tmp_path / "s"), device="nodevice:0")


def test_the_layout_is_aligned_and_little_endian(tmp_path):
    save({"a": np.array([1], np.uint8), "b": np.array([1.0, 2.0], ">f8")}, tmp_path / "s")
    raw = (tmp_path / "s").read_bytes()
    magic, version, length = struct.unpack("<8sQQ", raw[:24])
    assert magic == b"HWPARAMS" and version == 1 and (24 + length) % 64 == 0
    header = json.loads(raw[24:24 + length])
    b = header["entries"][1]
    assert b["dtype"] == "float64" and b["offset"] % 64 == 0
    start = 24 + length + b["offset"]
    assert np.frombuffer(raw[start:start + 16], "<f8").tolist() == [1.0, 2.0]
    assert load(tmp_path / "s")["b"].numpy().tolist() == [1.0, 2.0]


# ----------------------------------------------------------------------------------------------------------------
# save refuses what it cannot write faithfully

@pytest.mark.parametrize("obj, words", [
    ({1: np.zeros(1)}, "key"),
    ({"a": {("t",): 1}}, "key"),
    ({"a": [1, 2]}, "'a' is a list"),
    ({"a": {"b": object()}}, "'a/b' is a object"),
    ({"c": np.zeros(2, np.complex64)}, "complex64"),
    ({"l": np.zeros(2, np.longdouble)}, np.dtype(np.longdouble).name),
    ([np.zeros(1)], "not a dict"),
])
def test_save_refuses_what_it_cannot_store(tmp_path, obj, words):
    with pytest.raises(InvalidArgumentError, match="save .*" + words.replace("(", r"\(")) as err:
        save(obj, tmp_path / "x")
    assert err.value.fix and os.listdir(tmp_path) == []


def test_save_into_a_missing_directory_or_onto_a_directory_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidArgumentError, match="does not exist") as err:
        save({"a": 1}, tmp_path / "missing" / "x.hwparams")
    assert "makedirs" in err.value.fix
    (tmp_path / "dir").mkdir()
    with pytest.raises(InvalidArgumentError, match="cannot write"):
        save({"a": 1}, tmp_path / "dir")
    assert os.listdir(tmp_path) == ["dir"]


def test_a_save_that_fails_midway_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "s"
    save({"a": np.ones(3, np.float32)}, path)
    before = path.read_bytes()
    calls = []

    def failing(value):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return np.ascontiguousarray(value)

    monkeypatch.setattr(serialize, "_host", failing)
    with pytest.raises(InvalidArgumentError, match="No space left"):
        save({"a": np.zeros(3, np.float32), "b": np.zeros(3, np.float32)}, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["s"]


# ----------------------------------------------------------------------------------------------------------------
# load trusts nothing

def _load_fails(tmp_path, data: bytes, match: str | None = None) -> HwAdapterError:
    path = tmp_path / "bad"
    path.write_bytes(data)
    with pytest.raises(HwAdapterError, match=match) as err:
        load(path)
    assert "'" + str(path) in str(err.value) or "OutOfMemory" in type(err.value).__name__
    return err.value


def test_a_pickle_is_refused_without_being_unpickled(tmp_path, monkeypatch):
    monkeypatch.setattr(pickle, "loads", None)  # any attempt to unpickle would fail with a TypeError, not our error
    monkeypatch.setattr(pickle, "load", None)
    err = _load_fails(tmp_path, pickle.dumps({"w": [1.0, 2.0]}), "not a hwadapter file .*pickle")
    assert "never unpickles" in str(err)


def test_a_torch_like_zip_and_a_npy_file_are_named(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"w": 1}))
        z.writestr("archive/data/0", b"\0" * 16)
    _load_fails(tmp_path, buf.getvalue(), "zip archive")
    npy = io.BytesIO()
    np.save(npy, np.zeros(3))
    _load_fails(tmp_path, npy.getvalue(), "npy")


def test_random_bytes_missing_files_and_directories_are_refused(tmp_path):
    rng = np.random.default_rng(1)
    for n in (0, 5, 100, 5000):
        _load_fails(tmp_path, rng.bytes(n), "not a hwadapter file")
    for n in (0, 20, 100, 5000):  # the magic, then garbage
        _load_fails(tmp_path, b"HWPARAMS" + rng.bytes(n))
    with pytest.raises(InvalidArgumentError, match="cannot open"):
        load(tmp_path / "nowhere")
    with pytest.raises(InvalidArgumentError, match="cannot open"):
        load(tmp_path)


def test_every_truncation_is_refused(tmp_path):
    save({"a": {"b": np.arange(10, dtype=np.int16)}, "n": 3, "c": np.ones((2, 2), np.float32)}, tmp_path / "s")
    raw = (tmp_path / "s").read_bytes()
    for n in range(0, len(raw), 7):
        _load_fails(tmp_path, raw[:n])
    _load_fails(tmp_path, raw[:-1])


def _rebuild(header: dict, data: bytes, version: int = 1) -> bytes:
    body = json.dumps(header).encode()
    body += b" " * (-(24 + len(body)) % 64)
    return struct.pack("<8sQQ", b"HWPARAMS", version, len(body)) + body + data


def _parts(tmp_path):
    """The header and data section of a saved file with three tensors and a value."""
    save({"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(4, np.float64), "n": 5,
          "m": np.array([True, False])}, tmp_path / "good")
    raw = (tmp_path / "good").read_bytes()
    (length,) = struct.unpack("<Q", raw[16:24])
    return json.loads(raw[24:24 + length]), raw[24 + length:]


@pytest.mark.parametrize("change, words", [
    (lambda h: h["entries"][0].update(dtype="complex64"), "dtype"),
    (lambda h: h["entries"][0].update(dtype=7), "dtype"),
    (lambda h: h["entries"][0].update(shape=[-1, 4]), "shape"),
    (lambda h: h["entries"][0].update(shape=[2 ** 40, 2 ** 40]), "length"),
    (lambda h: h["entries"][0].update(shape=[1] * 65), "shape"),
    (lambda h: h["entries"][0].update(shape=[3.0, 4]), "shape"),
    (lambda h: h["entries"][0].update(shape="3x4"), "shape"),
    (lambda h: h["entries"][0].update(nbytes=44), "length"),
    (lambda h: h["entries"][0].update(offset=10 ** 12), "past the end"),
    (lambda h: h["entries"][0].update(offset=-64), "offset"),
    (lambda h: h["entries"][0].update(offset=1), "multiple"),
    (lambda h: h["entries"][1].update(offset=0), "overlap"),
    (lambda h: h["entries"][0].update(key="w"), "key"),
    (lambda h: h["entries"][0].update(key=[]), "key"),
    (lambda h: h["entries"][1].update(key=["w"]), "twice"),
    (lambda h: h["entries"][0].update(kind="pickle"), "kind"),
    (lambda h: h["entries"][0].update(extra=1), "fields"),
    (lambda h: h["entries"][2].update(value=[1, 2]), "value"),
    (lambda h: h["entries"].append({"key": ["w", "x"], "kind": "value", "value": 1}), "not a dict"),
    (lambda h: h.update(entries={}), "entries"),
    (lambda h: h.update(more=1), "entries"),
])
def test_corrupted_header_fields_are_refused(tmp_path, change, words):
    header, data = _parts(tmp_path)
    change(header)
    _load_fails(tmp_path, _rebuild(header, data), words)


def test_version_length_json_and_bool_bytes_are_checked(tmp_path):
    header, data = _parts(tmp_path)
    _load_fails(tmp_path, _rebuild(header, data, version=2), "version 2")
    good = _rebuild(header, data)
    _load_fails(tmp_path, good[:16] + struct.pack("<Q", 2 ** 62) + good[24:], "header claims")
    _load_fails(tmp_path, good[:16] + struct.pack("<Q", 10) + good[24:], "JSON")
    _load_fails(tmp_path, good[:24] + b"\xff" + good[25:], "UTF-8 JSON")
    deep = b"[" * 100000 + b"]" * 100000  # a parser's recursion limit, not a crash
    _load_fails(tmp_path, struct.pack("<8sQQ", b"HWPARAMS", 1, len(deep)) + deep, "JSON")
    m = next(e for e in header["entries"] if e["key"] == ["m"])
    start = len(good) - len(data) + m["offset"]
    _load_fails(tmp_path, good[:start] + b"\x02" + good[start + 1:], "bool")


def test_seeded_header_fuzz_raises_only_hwadapter_errors(tmp_path):
    """Random field mutations: each file loads or raises HwAdapterError, never another exception or a hang."""
    rng = np.random.default_rng(23)
    header, data = _parts(tmp_path)
    junk = [None, True, -1, 0, 1, 63, 64, 2 ** 63, 10 ** 30, 1.5, float("nan"), "", "float32", "x" * 300, [],
            [-1], [2 ** 62], [1] * 100, {}, {"a": 1}, ["w"], ["w", "b"]]
    refused = 0
    for _ in range(300):
        h = json.loads(json.dumps(header))
        for _ in range(int(rng.integers(1, 4))):
            entry = h["entries"][int(rng.integers(len(h["entries"])))]
            field = ["key", "kind", "dtype", "shape", "offset", "nbytes", "value"][int(rng.integers(7))]
            entry[field] = junk[int(rng.integers(len(junk)))]
        path = tmp_path / "fuzz"
        path.write_bytes(_rebuild(h, data))
        try:
            assert isinstance(load(path), dict)
        except HwAdapterError:
            refused += 1
    assert refused > 250
