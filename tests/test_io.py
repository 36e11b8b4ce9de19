"""hwadapter.io: TensorDataset, the DataLoader's batches, order, seeds, drop_last, devices, collate and bad input."""
from __future__ import annotations

import numpy as np
import pytest

import hwadapter as hw
import hwadapter.io as hio
from hwadapter.api.errors import HwAdapterError, InvalidArgumentError, InvalidDeviceError
from hwadapter.io import DataLoader, Dataset, TensorDataset

X = np.arange(30, dtype=np.float32).reshape(10, 3)
Y = np.arange(10, dtype=np.int64) * 7


class Samples(Dataset):
    """A dataset returning whatever `make(i)` builds, to test the default collate."""

    def __init__(self, n, make):
        self.n, self.make = n, make

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.make(i)


def order_of(loader) -> list[int]:
    """The sample order of one epoch over TensorDataset([X, Y]), read back from the labels."""
    return [int(v) // 7 for _, y in loader for v in y.numpy()]


def test_tensor_dataset_over_numpy_and_tensors():
    for fields in ([X, Y], [hw.to_tensor(X), hw.to_tensor(Y)], (hw.to_tensor(X), Y)):
        ds = TensorDataset(fields)
        assert len(ds) == 10
        x, y = ds[4]
        np.testing.assert_array_equal(x, X[4])
        assert y == Y[4]
        x, y = ds[-1]
        np.testing.assert_array_equal(x, X[9])


def test_tensor_dataset_refuses_fields_of_different_lengths():
    with pytest.raises(InvalidArgumentError, match=r"\(10, 3\), \(9,\)"):
        TensorDataset([X, Y[:9]])
    for bad in ([], X, [X, [1, 2]], [np.float32(1)]):
        with pytest.raises(InvalidArgumentError):
            TensorDataset(bad)


@pytest.mark.parametrize("shuffle", [False, True])
def test_batches_are_numpy_slices_of_the_order(shuffle):
    loader = DataLoader(TensorDataset([X, Y]), batch_size=4, shuffle=shuffle, seed=3)
    batches = list(loader)
    order = np.random.default_rng(3).permutation(10) if shuffle else np.arange(10)
    assert len(batches) == len(loader) == 3
    for k, (x, y) in enumerate(batches):
        rows = order[4 * k:4 * k + 4]
        assert isinstance(x, hw.Tensor) and x.dtype == np.float32 and y.dtype == np.int64
        np.testing.assert_array_equal(x.numpy(), X[rows])
        np.testing.assert_array_equal(y.numpy(), Y[rows])


@pytest.mark.parametrize("n, batch_size, drop_last, batches", [
    (10, 5, False, 2), (10, 5, True, 2), (10, 4, False, 3), (10, 4, True, 2), (3, 4, False, 1), (3, 4, True, 0),
    (0, 4, False, 0), (10, 1, True, 10)])
def test_drop_last_and_len(n, batch_size, drop_last, batches):
    loader = DataLoader(TensorDataset([X[:n], Y[:n]]), batch_size=batch_size, drop_last=drop_last)
    sizes = [len(x) for x, _ in loader]
    assert len(loader) == len(sizes) == batches
    assert all(s == batch_size for s in (sizes if drop_last else sizes[:-1]))
    assert sum(sizes) == (n - n % batch_size if drop_last else n)


def test_a_seed_reproduces_its_epochs_and_epochs_differ():
    make = lambda seed: DataLoader(TensorDataset([X, Y]), batch_size=3, shuffle=True, seed=seed)  # noqa: E731
    a, b = make(7), make(7)
    epochs_a = [order_of(a) for _ in range(3)]
    assert epochs_a == [order_of(b) for _ in range(3)]
    assert all(sorted(e) == list(range(10)) for e in epochs_a)
    assert epochs_a[0] != epochs_a[1] != epochs_a[2]
    assert order_of(make(8)) != epochs_a[0]
    assert order_of(DataLoader(TensorDataset([X, Y]), batch_size=3)) == list(range(10))  # no shuffle: in order


def test_generic_datasets_collate_the_same_as_tensor_dataset():
    """A Dataset returning the rows one by one gives the same batches as TensorDataset's gathered ones."""
    rows = Samples(10, lambda i: (X[i], Y[i]))
    for (x1, y1), (x2, y2) in zip(DataLoader(rows, batch_size=4, shuffle=True, seed=1),
                                  DataLoader(TensorDataset([X, Y]), batch_size=4, shuffle=True, seed=1)):
        assert x1.dtype == x2.dtype and y1.dtype == y2.dtype
        np.testing.assert_array_equal(x1.numpy(), x2.numpy())
        np.testing.assert_array_equal(y1.numpy(), y2.numpy())


def test_one_upload_per_field_per_batch(monkeypatch):
    """Samples are stacked on the host: a batch of 4 samples with 2 fields is 2 uploads, not 8."""
    uploads = []
    real = hio.collate.to_tensor
    monkeypatch.setattr(hio.collate, "to_tensor", lambda arr, **kw: uploads.append(arr.shape) or real(arr, **kw))
    assert len(list(DataLoader(Samples(8, lambda i: (X[i], int(Y[i]))), batch_size=4))) == 2
    assert uploads == [(4, 3), (4,), (4, 3), (4,)]


def test_dict_tuple_list_number_and_string_samples():
    ds = Samples(5, lambda i: {"image": hw.to_tensor(X[i]), "pair": (i, [float(i), np.float64(i)]),
                               "flag": i % 2 == 0, "name": f"s{i}"})
    batch = next(iter(DataLoader(ds, batch_size=3)))
    assert sorted(batch) == ["flag", "image", "name", "pair"]
    np.testing.assert_array_equal(batch["image"].numpy(), X[:3])
    label, (py_float, np_float) = batch["pair"]
    assert isinstance(batch["pair"], tuple) and isinstance(batch["pair"][1], list)
    # Python ints -> int64, Python floats -> float32 (the default float), numpy scalars keep their dtype
    assert (label.dtype, py_float.dtype, np_float.dtype) == (np.int64, np.float32, np.float64)
    assert label.numpy().tolist() == [0, 1, 2] and py_float.numpy().tolist() == [0.0, 1.0, 2.0]
    assert batch["flag"].dtype == np.bool_ and batch["flag"].numpy().tolist() == [True, False, True]
    assert batch["name"] == ["s0", "s1", "s2"]


def test_custom_collate_fn_gets_the_samples():
    loader = DataLoader(TensorDataset([X, Y]), batch_size=4, collate_fn=lambda samples: [int(y) for _, y in samples])
    assert list(loader) == [[0, 7, 14, 21], [28, 35, 42, 49], [56, 63]]
    assert len(hio.default_collate_fn([(1, 2.5)])) == 2


def _devices():
    return ["cpu:0"] + [d for d in ("opencl:0",) if d in hw.device.get_available_device()]


@pytest.mark.parametrize("dev", _devices())
def test_batches_go_to_the_device(dev):
    for ds in (TensorDataset([X, Y]), Samples(10, lambda i: {"x": X[i], "y": int(Y[i])})):
        batch = next(iter(DataLoader(ds, batch_size=4, device=dev)))
        for t in (batch if isinstance(batch, tuple) else batch.values()):
            assert str(t.device) == dev
        with hw.device_guard(dev):  # default: the current device when iteration starts
            loader = iter(DataLoader(ds, batch_size=4))
        batch = next(loader)
        for t in (batch if isinstance(batch, tuple) else batch.values()):
            assert str(t.device) == dev
        del batch, loader


def test_digits_every_sample_once_per_epoch():
    datasets = pytest.importorskip("sklearn.datasets", reason="scikit-learn is not installed (the digits data set)")
    digits = datasets.load_digits()
    images, labels = digits.images.astype(np.float32)[:, None], digits.target.astype(np.int64)
    n = len(labels)
    loader = DataLoader(TensorDataset([images, np.arange(n)]), batch_size=64, shuffle=True, seed=0)
    assert len(loader) == -(-n // 64)
    epochs = []
    for _ in range(2):
        seen = []
        for x, index in loader:
            assert x.shape[1:] == (1, 8, 8) and x.shape[0] <= 64
            idx = index.numpy()
            np.testing.assert_array_equal(x.numpy(), images[idx])
            seen += idx.tolist()
        assert sorted(seen) == list(range(n))
        epochs.append(seen)
    assert epochs[0] != epochs[1]
    y_batches = [y.numpy() for _, y in DataLoader(TensorDataset([images, labels]), batch_size=500, drop_last=True)]
    assert len(y_batches) == n // 500 and np.array_equal(np.concatenate(y_batches), labels[:n // 500 * 500])


@pytest.mark.parametrize("kwargs", [
    {"batch_size": 0}, {"batch_size": -1}, {"batch_size": 2.0}, {"batch_size": True}, {"batch_size": None},
    {"shuffle": 1}, {"drop_last": "yes"}, {"seed": -1}, {"seed": 1.5}, {"collate_fn": 3}])
def test_bad_arguments(kwargs):
    with pytest.raises(InvalidArgumentError) as err:
        DataLoader(TensorDataset([X, Y]), **kwargs)
    assert next(iter(kwargs)) in str(err.value) and err.value.fix


def test_bad_dataset_and_device():
    with pytest.raises(InvalidArgumentError, match="__len__ and __getitem__"):
        DataLoader(iter(range(3)))
    with pytest.raises(InvalidDeviceError):
        DataLoader(TensorDataset([X]), device="nodevice:0")
    with pytest.raises(NotImplementedError, match="__getitem__"):
        Dataset()[0]


@pytest.mark.parametrize("make, message", [
    (lambda i: (X[i], Y[i]) if i != 2 else (X[i], Y[i], Y[i]), r"sample 2 has 3 fields, but sample 0 has 2"),
    (lambda i: (X[i] if i != 3 else X[i, :2], Y[i]), r"sample 3 \(field \[0\]\) has shape \(2,\), but sample 0"),
    (lambda i: {"a": i} if i != 1 else {"b": i}, r"sample 1 has the keys \['b'\], but sample 0 has \['a'\]"),
    (lambda i: {"a": X[i] if i != 1 else "x"}, r"sample 1 \(field \['a'\]\) is a str, but sample 0 is an array"),
    (lambda i: object(), r"sample 0 is a object"),
    (lambda i: {"a": np.array(["u"], dtype=object)}, r"field \['a'\]"),
])
def test_inconsistent_samples_name_the_sample_and_field(make, message):
    with pytest.raises(HwAdapterError, match=message) as err:
        list(DataLoader(Samples(4, make), batch_size=4))
    assert err.value.fix
