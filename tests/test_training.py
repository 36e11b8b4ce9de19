"""Training end to end against PyTorch as the oracle: an MLP and a small CNN from the same weights, fed the same
batches, trained 20 steps with SGD and with Adam, eager and as one captured to_static step, on cpu and opencl:0;
the CNN on scikit-learn's digits to >= 95% test accuracy; and the bad inputs of a training loop."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import hwadapter as hw
from hwadapter import nn, optimizer
from hwadapter.api.errors import HwAdapterError, InvalidArgumentError, UnsupportedDTypeError

DEVICES = ["cpu:0"] + [d for d in ("opencl:0",) if d in hw.device.get_available_device()] + \
    [pytest.param("cuda:0", marks=pytest.mark.gpu)]  # make test-gpu; skipped where there is none
STEPS = 20


def _have(dev):
    if dev not in hw.device.get_available_device():
        pytest.skip(f"{dev} is not available here (cuda:0 needs an NVIDIA GPU: make test-gpu)")


# --- the same network in both frameworks ---------------------------------------------------------------------------
def mlp_pair():
    torch.manual_seed(0)
    t = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                            torch.nn.Linear(32, 5)).double()
    h = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 5))
    return t, h, [(0, 0), (2, 2), (4, 4)]


def cnn_pair():
    torch.manual_seed(0)
    t = torch.nn.Sequential(torch.nn.Conv2d(1, 6, 3, padding=1), torch.nn.BatchNorm2d(6, momentum=0.1),
                            torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(6 * 4 * 4, 5)
                            ).double()
    h = nn.Sequential(nn.Conv2D(1, 6, 3, padding=1), nn.BatchNorm2D(6), nn.ReLU(), nn.MaxPool2D(2), nn.Flatten(),
                      nn.Linear(6 * 4 * 4, 5))
    return t, h, [(0, 0), (1, 1), (5, 5)]


def copy_weights(t, h, pairs):
    """hwadapter's layers get the torch layers' weights (Linear: paddle's [in, out] is torch's transposed)."""
    for ti, hi in pairs:
        tl, hl = t[ti], h[hi]
        w = tl.weight.detach().numpy().astype("float32")
        hl.weight.set_value(w.T.copy() if isinstance(hl, nn.Linear) else w)
        hl.bias.set_value(tl.bias.detach().numpy().astype("float32"))


def batches(kind, n=STEPS):
    rng = np.random.default_rng(1)
    shape = (8, 16) if kind == "mlp" else (8, 1, 8, 8)
    return [(rng.standard_normal(shape).astype("float32"), rng.integers(0, 5, 8)) for _ in range(n)]


def torch_run(t, kind, opt_name, data):
    opt = torch.optim.SGD(t.parameters(), lr=0.1) if opt_name == "sgd" else torch.optim.Adam(t.parameters(), lr=0.01)
    losses = []
    for x, y in data:
        loss = torch.nn.functional.cross_entropy(t(torch.from_numpy(x).double()), torch.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_step(model, opt, loss_fn):
    """One train step (forward, loss, backward, update, clear) as a function of a batch."""
    def step(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss
    return step


def hw_run(h, opt_name, data, device, static):
    opt = optimizer.SGD(learning_rate=0.1, parameters=h.parameters()) if opt_name == "sgd" else \
        optimizer.Adam(learning_rate=0.01, parameters=h.parameters())
    step = train_step(h, opt, nn.CrossEntropyLoss())
    run = hw.jit.to_static(step) if static else step
    losses = [run(hw.to_tensor(x, device=device), hw.to_tensor(y, device=device)) for x, y in data]
    if static:
        assert run.cache_info()["traces"] == 1  # one captured step, run STEPS times
    return [float(v) for v in losses]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("static", [False, True], ids=["eager", "to_static"])
@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_training_matches_pytorch(kind, opt_name, static, dev):
    _have(dev)
    t, h, pairs = mlp_pair() if kind == "mlp" else cnn_pair()
    with hw.device_guard(dev):
        h.to(dev)
        copy_weights(t, h, pairs)
        data = batches(kind)
        want = torch_run(t, kind, opt_name, data)
        got = hw_run(h, opt_name, data, dev, static)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    for ti, hi in pairs:
        w = h[hi].weight.numpy()
        tw = t[ti].weight.detach().numpy()
        np.testing.assert_allclose(w.T if isinstance(h[hi], nn.Linear) else w, tw, rtol=1e-3, atol=1e-4)


# --- real data ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dev", DEVICES)
def test_the_cnn_learns_digits_to_95_percent(dev):
    _have(dev)
    from sklearn.datasets import load_digits
    d = load_digits()
    order = np.random.default_rng(0).permutation(len(d.target))
    x = (d.images[order] / 16.0).astype("float32")[:, None]
    y = d.target[order].astype("int64")
    cut = len(y) * 3 // 4
    with hw.device_guard(dev):
        hw.seed(0)
        model = nn.Sequential(nn.Conv2D(1, 16, 3, padding=1), nn.BatchNorm2D(16), nn.ReLU(), nn.MaxPool2D(2),
                              nn.Flatten(), nn.Linear(16 * 4 * 4, 10))
        opt = optimizer.Adam(learning_rate=3e-3, parameters=model.parameters())
        step = hw.jit.to_static(train_step(model, opt, nn.CrossEntropyLoss()))
        loader = hw.io.DataLoader(hw.io.TensorDataset([x[:cut], y[:cut]]), batch_size=64, shuffle=True,
                                  drop_last=True, seed=0)
        first = None
        for _ in range(8):
            for xb, yb in loader:
                loss = step(xb, yb)
                first = float(loss) if first is None else first
        model.eval()
        with hw.no_grad():
            pred = model(hw.to_tensor(x[cut:])).numpy().argmax(-1)
    accuracy = (pred == y[cut:]).mean()
    assert float(loss) < first / 4
    assert accuracy >= 0.95, accuracy


# --- bad input ------------------------------------------------------------------------------------------------------
def _param():
    return hw.create_parameter([3], initializer=np.array([1.0, 2.0, 3.0], "float32"))


def test_backward_twice_without_retain_graph_says_how():
    p = _param()
    loss = (p * p).sum()
    loss.backward()
    with pytest.raises(InvalidArgumentError, match="retain_graph=True"):
        loss.backward()


def test_integer_tensors_have_no_gradient():
    x = hw.to_tensor([1, 2, 3])
    with pytest.raises(UnsupportedDTypeError, match="floating-point"):
        x.stop_gradient = False
    p = _param()
    with pytest.raises(UnsupportedDTypeError, match="int64"):
        hw.grad((p * 2).astype("int64").sum(), [p])


def test_grad_outputs_of_the_wrong_shape_are_refused():
    p = _param()
    y = p * 2
    with pytest.raises(InvalidArgumentError, match=r"shape \[2\].*\[3\]"):
        hw.grad([y], [p], grad_outputs=[hw.ones([2])])


def test_a_state_dict_of_the_wrong_shapes_or_a_corrupt_file_is_refused(tmp_path):
    model = nn.Linear(4, 3)
    other = nn.Linear(5, 3)
    with pytest.raises(HwAdapterError, match="weight"):
        model.set_state_dict(other.state_dict())
    path = tmp_path / "m.hwparams"
    hw.save(model.state_dict(), str(path))
    data = bytearray(path.read_bytes())
    data[len(data) // 2:] = b"\x00" * (len(data) - len(data) // 2)
    bad = tmp_path / "bad.hwparams"
    bad.write_bytes(bytes(data[:len(data) - 7]))
    with pytest.raises(HwAdapterError):
        model.set_state_dict(hw.load(str(bad)))
    model.set_state_dict(hw.load(str(path)))  # the good file loads


def test_an_optimizer_refuses_what_is_not_a_parameter():
    x = hw.to_tensor([1.0, 2.0])  # stop_gradient=True: nothing would ever train it
    with pytest.raises(InvalidArgumentError, match="stop_gradient"):
        optimizer.SGD(learning_rate=0.1, parameters=[x])
    with pytest.raises(InvalidArgumentError):
        optimizer.Adam(learning_rate=0.1, parameters=[np.zeros(3)])


def test_changing_a_parameter_a_pending_gradient_needs_is_an_error_naming_the_op():
    p = _param()
    loss = (p * p).sum()
    with hw.no_grad():
        p.set_value(p * 0)
    with pytest.raises(InvalidArgumentError, match="'mul'.*changed in place"):
        loss.backward()


@pytest.mark.parametrize("dev", ["cpu:0"])
def test_gradients_accumulate_across_to_static_calls_as_eagerly(dev):
    """Micro-batches whose backward runs in one to_static function and the step in another: the second reads the
    .grad the first left (a state input read at each run, never a constant of the trace), and a function traced
    with no .grad present is traced again the first time one is (accumulating is another graph)."""
    def run(static: bool):
        hw.seed(0)
        net = nn.Linear(3, 2)
        opt = optimizer.SGD(learning_rate=0.1, parameters=net.parameters())

        def grads(x):
            loss = net(x).sum()
            loss.backward()
            return loss

        def step(x):
            loss = (net(x) ** 2).sum()
            loss.backward()
            opt.step()
            opt.clear_grad()
            return loss
        if static:
            grads, step = hw.jit.to_static(grads), hw.jit.to_static(step)
        rng = np.random.default_rng(0)
        for i in range(4):
            for _ in range(1 + i % 2):  # one micro-batch, then two (the second accumulates into the first's .grad)
                grads(hw.to_tensor(rng.standard_normal((2, 3)).astype(np.float32), device=dev))
            step(hw.to_tensor(rng.standard_normal((2, 3)).astype(np.float32), device=dev))
        return [p.numpy() for p in net.parameters()]
    for a, b in zip(run(False), run(True)):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)
