"""CrossEntropyLoss and MSELoss against PyTorch CPU where the two frameworks agree, against numpy formulas of
paddle's rules where they differ (noted at each case), their gradients against torch's, and their bad inputs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import hwadapter as hw
import hwadapter.nn.functional as F
from hwadapter import InvalidArgumentError, UnsupportedDTypeError, nn

DTYPES = ["float32", "float64"]
TOL = {"float32": 1e-5, "float64": 1e-12}
TF = torch.nn.functional


def T(arr, device="cpu:0"):
    return hw.to_tensor(np.asarray(arr), device=device)


def tt(arr):
    return torch.from_numpy(np.asarray(arr).copy())


def close(ours, theirs, dtype):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=TOL[dtype], atol=TOL[dtype])


def data(dtype, n=6, c=5, seed=0):
    r = np.random.default_rng(seed)
    return (r.standard_normal((n, c)) * 3).astype(dtype), r.integers(0, c, n), r.uniform(0.2, 2, c).astype(dtype)


def log_softmax(x, axis=-1):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_hard_labels_match_torch(dtype, reduction):
    x, y, w = data(dtype)
    close(nn.CrossEntropyLoss(reduction=reduction)(T(x), T(y)), TF.cross_entropy(tt(x), tt(y), reduction=reduction),
          dtype)
    close(F.cross_entropy(T(x), T(y), weight=T(w), reduction=reduction),
          TF.cross_entropy(tt(x), tt(y), weight=tt(w), reduction=reduction), dtype)
    y_ign = y.copy()
    y_ign[[1, 4]] = 3  # ignore_index may be a class's index: its labels count nothing
    close(F.cross_entropy(T(x), T(y_ign), ignore_index=3, weight=T(w), reduction=reduction),
          TF.cross_entropy(tt(x), tt(y_ign), ignore_index=3, weight=tt(w), reduction=reduction), dtype)
    close(F.cross_entropy(T(x), T(y), label_smoothing=0.2, reduction=reduction),
          TF.cross_entropy(tt(x), tt(y), label_smoothing=0.2, reduction=reduction), dtype)


def test_label_shapes_axis_and_int32():
    x, y, _ = data("float64")
    want = TF.cross_entropy(tt(x), tt(y), reduction="none").numpy()
    out = F.cross_entropy(T(x), T(y[:, None]), reduction="none")  # [N, 1] labels keep their axis, as paddle
    assert out.shape == (6, 1)
    np.testing.assert_allclose(out.numpy()[:, 0], want, rtol=1e-12)
    np.testing.assert_allclose(F.cross_entropy(T(x), T(y.astype("int32"))).numpy(), want.mean(), rtol=1e-12)
    x3 = np.random.default_rng(1).standard_normal((2, 4, 3))  # classes on axis 1 of [N, C, L]
    y3 = np.array([[0, 1, 3], [2, 2, 0]])
    close(F.cross_entropy(T(x3), T(y3), axis=1), TF.cross_entropy(tt(x3), tt(y3)), "float64")


@pytest.mark.parametrize("dtype", DTYPES)
def test_soft_labels(dtype):
    x, _, w = data(dtype)
    p = np.random.default_rng(2).uniform(0, 1, x.shape).astype(dtype)
    p /= p.sum(1, keepdims=True)
    out = F.cross_entropy(T(x), T(p), soft_label=True, reduction="none")
    assert out.shape == (6, 1)  # paddle keeps the class axis of soft-label losses
    close(out, TF.cross_entropy(tt(x), tt(p), reduction="none")[:, None], dtype)
    close(F.cross_entropy(T(x), T(p), soft_label=True), TF.cross_entropy(tt(x), tt(p)), dtype)
    # paddle (not torch) weighs a soft label's loss by label @ weight and divides the sum by those weights
    per = -(p * log_softmax(x.astype(np.float64))).sum(1) * (p @ w)
    close(F.cross_entropy(T(x), T(p), soft_label=True, weight=T(w)), per.sum() / (p @ w).sum(), dtype)


def test_paddles_mean_with_a_negative_ignore_index_counts_every_label():
    """paddle 3.3.1 divides by all N labels when ignore_index < 0 (torch: by those not ignored)."""
    x, y, _ = data("float64")
    y[[0, 2]] = -100
    nll = -log_softmax(x)[np.arange(6), np.where(y < 0, 0, y)] * (y >= 0)
    np.testing.assert_allclose(F.cross_entropy(T(x), T(y)).numpy(), nll.sum() / 6, rtol=1e-12)
    np.testing.assert_allclose(F.cross_entropy(T(x), T(y), reduction="sum").numpy(), nll.sum(), rtol=1e-12)
    all_ignored = np.full(6, 2)
    assert F.cross_entropy(T(x), T(all_ignored), ignore_index=2).item() == 0  # 0 / 0 is 0, as paddle


def test_use_softmax_false_takes_probabilities():
    x, y, _ = data("float64")
    prob = np.exp(log_softmax(x))
    np.testing.assert_allclose(F.cross_entropy(T(prob), T(y), use_softmax=False).numpy(),
                               TF.cross_entropy(tt(x), tt(y)).numpy(), rtol=1e-12)


def test_stable_for_huge_logits():
    x = np.array([[1e4, 0.0, -1e4], [-1e30, 1e30, 0.0]], "float32")
    y = np.array([1, 1])
    out = F.cross_entropy(T(x), T(y), reduction="none").numpy()
    np.testing.assert_allclose(out, [1e4, 0.0], rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_gradients_match_torch(dtype):
    x, y, w = data(dtype, seed=3)
    y[2] = 1
    for kw in ({}, {"weight": w, "ignore_index": 1}, {"label_smoothing": 0.1}):
        ours = T(x)
        ours.stop_gradient = False
        theirs = tt(x).requires_grad_()
        F.cross_entropy(ours, T(y), **{k: T(v) if k == "weight" else v for k, v in kw.items()}).backward()
        TF.cross_entropy(theirs, tt(y), **{k: tt(v) if k == "weight" else v for k, v in kw.items()}).backward()
        close(ours.grad, theirs.grad, dtype)
    p = np.abs(x) / np.abs(x).sum(1, keepdims=True)
    ours = T(x)
    ours.stop_gradient = False
    theirs = tt(x).requires_grad_()
    F.cross_entropy(ours, T(p), soft_label=True).backward()
    TF.cross_entropy(theirs, tt(p)).backward()
    close(ours.grad, theirs.grad, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mse_matches_torch(dtype):
    r = np.random.default_rng(4)
    a, b = r.standard_normal((3, 4)).astype(dtype), r.standard_normal((3, 4)).astype(dtype)
    for reduction in ("mean", "sum", "none"):
        close(nn.MSELoss(reduction)(T(a), T(b)), TF.mse_loss(tt(a), tt(b), reduction=reduction), dtype)
    ours = T(a)
    ours.stop_gradient = False
    theirs = tt(a).requires_grad_()
    F.mse_loss(ours, T(b)).backward()
    TF.mse_loss(theirs, tt(b)).backward()
    close(ours.grad, theirs.grad, dtype)


def test_bad_inputs_name_the_fix():
    x, y, _ = data("float32")
    loss = nn.CrossEntropyLoss()
    with pytest.raises(UnsupportedDTypeError, match="hard labels must be integer class indices, not float32.*Fix"):
        loss(T(x), T(y.astype("float32")))
    for bad in (5, -1, 99):
        labels = y.copy()
        labels[3] = bad
        with pytest.raises(InvalidArgumentError, match=r"a label is outside the 5 classes \[0, 5\).*Fix"):
            loss(T(x), T(labels))
    with pytest.raises(InvalidArgumentError, match="labels of shape \\[3\\] do not fit input \\[6, 5\\].*Fix"):
        loss(T(x), T(y[:3]))
    with pytest.raises(UnsupportedDTypeError, match="input must be floating-point"):
        loss(T(y[:, None].repeat(5, 1)), T(y))
    with pytest.raises(InvalidArgumentError, match="weight must be a float tensor of shape \\[5\\]"):
        F.cross_entropy(T(x), T(y), weight=T(np.ones(4, "float32")))
    with pytest.raises(UnsupportedDTypeError, match="soft labels .* must be floating-point"):
        F.cross_entropy(T(x), T(y), soft_label=True)
    with pytest.raises(InvalidArgumentError, match="soft labels of shape"):
        F.cross_entropy(T(x), T(x[:, :2]), soft_label=True)
    with pytest.raises(InvalidArgumentError, match="reduction must be 'mean', 'sum' or 'none'"):
        nn.CrossEntropyLoss(reduction="avg")
    with pytest.raises(InvalidArgumentError, match="reduction must be"):
        nn.MSELoss("batchmean")
    with pytest.raises(InvalidArgumentError, match="label_smoothing must be in"):
        F.cross_entropy(T(x), T(y), label_smoothing=1.0)


@pytest.mark.skipif("opencl:0" not in hw.device.get_available_device(), reason="no OpenCL device")
def test_cross_entropy_on_opencl_runs_natively_and_matches_torch():
    x, y, w = data("float32", seed=5)
    hw.profiler.reset_fallback()
    out = F.cross_entropy(T(x, "opencl:0"), T(y, "opencl:0"), weight=T(w, "opencl:0"))
    close(out, TF.cross_entropy(tt(x), tt(y), weight=tt(w)), "float32")
    assert not hw.profiler.fallback_report(), "cross_entropy should need no CPU fallback"
    with pytest.raises(InvalidArgumentError, match="a label is outside"):
        F.cross_entropy(T(x, "opencl:0"), T(y + 5, "opencl:0"))
