"""hw.Model (paddle's hapi) and hw.metric.Accuracy: fit against a torch loop over the same batches, to_static equal to
eager (a partial last batch traced on its own), accuracy on a synthetic problem, evaluate/predict against the
network itself, save/load, the progress display, and bad input."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import hwadapter as hw
from hwadapter import nn, optimizer
from hwadapter.api.errors import InvalidArgumentError
from hwadapter.hapi import Model
from hwadapter.io import DataLoader, TensorDataset
from hwadapter.metric import Accuracy

DEVICES = ["cpu:0"] + [d for d in ("opencl:0",) if d in hw.device.get_available_device()]


def blobs(n=300, classes=4, seed=0):
    """Well separated Gaussian blobs in 2-D: a small problem a tiny MLP learns to near 100%."""
    rng = np.random.default_rng(seed)
    centers = np.array([[4, 4], [-4, 4], [4, -4], [-4, -4]], "float32")[:classes]
    y = rng.integers(0, classes, n)
    return (centers[y] + rng.standard_normal((n, 2))).astype("float32"), y.astype("int64")


def mlp(seed=0, device=None):
    hw.seed(seed)
    net = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 4))
    if device is not None:
        net.to(device)
    return net


def model(net, to_static=True, lr=0.05, metrics=True):
    m = Model(net, to_static=to_static)
    m.prepare(optimizer.Adam(lr, parameters=net.parameters()), nn.CrossEntropyLoss(),
              Accuracy() if metrics else None)
    return m


def test_fit_reaches_high_accuracy_and_returns_the_history():
    x, y = blobs()
    m = model(mlp())
    history = m.fit(TensorDataset([x[:240], y[:240]]), TensorDataset([x[240:], y[240:]]), batch_size=32, epochs=4,
                    verbose=0)
    assert sorted(history) == ["acc", "eval_acc", "eval_loss", "loss"]
    assert all(len(v) == 4 for v in history.values())
    assert history["loss"][-1] < history["loss"][0]
    assert history["eval_acc"][-1] >= 0.95
    result = m.evaluate(TensorDataset([x[240:], y[240:]]), verbose=0)
    assert result["acc"] == pytest.approx(history["eval_acc"][-1])
    logits = m.predict(TensorDataset([x[240:], y[240:]]), stack_outputs=True, verbose=0)[0]
    assert (logits.argmax(1) == y[240:]).mean() == pytest.approx(result["acc"])


def test_fit_is_torchs_loop_over_the_same_batches():
    """SGD on one Linear layer with cross entropy, 2 epochs of seeded shuffled batches (the last one partial):
    torch's weights from the same start and the same batch order."""
    x, y = blobs(70)
    hw.seed(3)
    net = nn.Linear(2, 4)
    w, b = (torch.tensor(p.numpy(), requires_grad=True) for p in (net.weight, net.bias))
    m = Model(net)
    m.prepare(optimizer.SGD(0.1, parameters=net.parameters()), nn.CrossEntropyLoss())
    history = m.fit(DataLoader(TensorDataset([x, y]), batch_size=16, shuffle=True, seed=5), epochs=2, verbose=0)
    assert m._steps["train"].cache_info()["traces"] == 2  # full batches, and the partial last one
    rng, means = np.random.default_rng(5), []
    for _ in range(2):
        order, total = rng.permutation(70), 0.0
        for start in range(0, 70, 16):
            rows = order[start:start + 16]
            loss = torch.nn.functional.cross_entropy(torch.tensor(x[rows]) @ w + b, torch.tensor(y[rows]))
            gw, gb = torch.autograd.grad(loss, [w, b])
            with torch.no_grad():  # SGD by hand: torch.optim's first use imports torch._dynamo (seconds)
                w -= 0.1 * gw
                b -= 0.1 * gb
            total += loss.item() * len(rows)
        means.append(total / 70)
    np.testing.assert_allclose(net.weight.numpy(), w.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.bias.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(history["loss"], means, rtol=1e-5)


def test_to_static_fit_equals_eager_fit():
    x, y = blobs(100)
    runs = []
    for to_static in (True, False):
        net = mlp()
        m = model(net, to_static=to_static)
        h = m.fit(DataLoader(TensorDataset([x, y]), batch_size=32, shuffle=True, seed=1), epochs=2, verbose=0)
        runs.append((h, [p.numpy() for p in net.parameters()]))
    (h1, w1), (h2, w2) = runs
    np.testing.assert_allclose(h1["loss"], h2["loss"], rtol=1e-6)
    assert h1["acc"] == h2["acc"]
    for a, b in zip(w1, w2):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.skipif(len(DEVICES) < 2, reason="no OpenCL device")
def test_fit_on_opencl_matches_cpu():
    x, y = blobs(96)
    weights = []
    for dev in DEVICES[:2]:
        net = mlp(device=dev)
        model(net).fit(DataLoader(TensorDataset([x, y]), batch_size=32, seed=2, device=dev), epochs=1, verbose=0)
        assert str(net.parameters()[0].device) == dev
        weights.append([p.numpy() for p in net.parameters()])
    for a, b in zip(*weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_num_iters_stops_inside_an_epoch():
    x, y = blobs(64)
    net = mlp()
    m = model(net)
    m.fit(DataLoader(TensorDataset([x, y]), batch_size=16), epochs=3, num_iters=6, verbose=0)
    state = m._optimizer.state_dict()
    assert float(state["param_0_beta1_pow_acc"]) == pytest.approx(0.9 ** 7)  # six steps: beta ** (6 + 1)


def test_train_batch_accumulates_without_update():
    x, y = blobs(32)
    net = mlp()
    m = model(net, to_static=False)
    before = [p.numpy() for p in net.parameters()]
    loss = m.train_batch([x[:16]], [y[:16]], update=False)[0]
    assert np.isfinite(loss[0]) and all(p.grad is not None for p in net.parameters())
    assert all(np.array_equal(a, p.numpy()) for a, p in zip(before, net.parameters()))
    first = [p.grad.numpy() for p in net.parameters()]
    m.train_batch([x[16:]], [y[16:]], update=False)
    assert any(not np.allclose(a, p.grad.numpy()) for a, p in zip(first, net.parameters()))  # added up
    losses, metrics = m.train_batch([x], [y])
    assert all(p.grad is None for p in net.parameters()) and 0.0 <= metrics[0] <= 1.0
    assert any(not np.array_equal(a, p.numpy()) for a, p in zip(before, net.parameters()))


def test_save_and_load_restore_weights_and_optimizer(tmp_path):
    x, y = blobs(64)
    data = TensorDataset([x, y])
    net = mlp()
    m = model(net)
    m.fit(data, batch_size=32, epochs=1, verbose=0)
    m.save(tmp_path / "ckpt" / "model")
    assert (tmp_path / "ckpt" / "model.hwparams").exists() and (tmp_path / "ckpt" / "model.hwopt").exists()
    other = model(mlp(seed=9))
    other.load(tmp_path / "ckpt" / "model.hwparams")
    for a, b in zip(net.parameters(), other.network.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    ours, theirs = m._optimizer.state_dict(), other._optimizer.state_dict()
    assert ours.keys() == theirs.keys() and len(ours) == 16
    for k in ours:
        np.testing.assert_array_equal(ours[k].numpy(), theirs[k].numpy())
    assert other.evaluate(data, verbose=0) == m.evaluate(data, verbose=0)


def test_accuracy_matches_numpy_top_k():
    rng = np.random.default_rng(4)
    scores = rng.standard_normal((3, 10, 5)).astype("float32")
    labels = rng.integers(0, 5, (3, 10))
    acc = Accuracy(topk=(1, 3))
    assert acc.name() == ["acc_top1", "acc_top3"]
    ranks = (-scores).argsort(-1)
    forms = [labels[0], labels[1][:, None], np.eye(5, dtype="float32")[labels[2]]]  # [N], [N, 1], one-hot
    for i, label in enumerate(forms):
        correct = acc.compute(hw.to_tensor(scores[i]), hw.to_tensor(label))
        assert correct.shape == (10, 3)
        got = acc.update(correct)
        want = [(ranks[i][:, :k] == labels[i][:, None]).any(1).mean() for k in (1, 3)]
        np.testing.assert_allclose(got, want)
    total = [(ranks[:, :, :k] == labels[..., None]).any(-1).mean() for k in (1, 3)]
    np.testing.assert_allclose(acc.accumulate(), total)
    acc.reset()
    assert acc.accumulate() == [0.0, 0.0]
    with pytest.raises(InvalidArgumentError, match="topk"):
        Accuracy(topk=0)
    with pytest.raises(InvalidArgumentError, match="fewer than topk"):
        Accuracy(topk=6).compute(hw.to_tensor(scores[0]), hw.to_tensor(labels[0]))


@pytest.mark.parametrize("verbose", [0, 1, 2])
def test_progress_lines_when_not_a_terminal(verbose, capsys):
    x, y = blobs(64)
    model(mlp()).fit(TensorDataset([x, y]), batch_size=16, epochs=2, verbose=verbose, log_freq=2)
    lines = capsys.readouterr().out.splitlines()
    if verbose == 0:
        assert lines == []
    elif verbose == 1:  # every log_freq steps of 4
        assert [ln.split(" - ")[0] for ln in lines] == ["Epoch 1/2 step 2/4", "Epoch 1/2 step 4/4",
                                                        "Epoch 2/2 step 2/4", "Epoch 2/2 step 4/4"]
    else:
        assert len(lines) == 2 and lines[1].startswith("Epoch 2/2 step 4/4")
    for line in lines:
        assert "loss: " in line and "acc: " in line and line.endswith("steps/s")


def test_bad_input_is_refused_with_a_fix():
    x, y = blobs(16)
    data = TensorDataset([x, y])
    net = mlp()
    with pytest.raises(InvalidArgumentError, match="prepare"):
        Model(net).fit(data, verbose=0)
    m = model(net)
    cases = [(lambda: m.fit([x, y], verbose=0), "TensorDataset"), (lambda: m.fit(data, epochs=0), "epochs"),
             (lambda: m.fit(data, verbose=3), "verbose"), (lambda: m.fit(data, callbacks=[1]), "callbacks"),
             (lambda: m.prepare(optimizer="adam"), "optimizer"), (lambda: m.prepare(metrics=[1]), "Metric"),
             (lambda: Model(3), "layer"), (lambda: Model(net).evaluate(data), "nothing to evaluate"),
             (lambda: m.fit(TensorDataset([x]), verbose=0), "no label")]
    for call, words in cases:
        with pytest.raises(InvalidArgumentError, match=words) as err:
            call()
        assert "Fix:" in str(err.value)
