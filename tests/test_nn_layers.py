"""hw.nn layers against PyTorch CPU (same weights, float32 and float64), paddle's names, reprs and default
initialisers (the expected strings were printed by paddle 3.3.1), state dicts through hw.save / hw.load, their
bad inputs, and parameter gradients against torch's."""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest
import torch

import hwadapter as hw
from hwadapter import InvalidArgumentError, UnsupportedDTypeError, nn
from hwadapter import random as hw_random

DTYPES = ["float32", "float64"]
TOL = {"float32": 2e-5, "float64": 1e-11}


def opencl_available() -> bool:
    return "opencl:0" in hw.device.get_available_device()


DEVICES = ["cpu:0"] + (["opencl:0"] if opencl_available() else [])


@pytest.fixture(scope="module", autouse=True)
def _rng_state_allocated():
    """The per-device random stream's state lives as long as the process: made before the leak check's baseline."""
    for d in DEVICES:
        hw_random.state(d)


def rng(seed=0):
    return np.random.default_rng(seed)


def T(arr, device="cpu:0"):
    return hw.to_tensor(np.asarray(arr), device=device)


def tt(x):
    return torch.from_numpy(np.asarray(x.numpy() if isinstance(x, hw.Tensor) else x).copy())


def close(ours, theirs, dtype, scale=1.0):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    np.testing.assert_allclose(np.asarray(ours.numpy()), theirs, rtol=TOL[dtype] * scale, atol=TOL[dtype] * scale)


# --- forward against torch ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_matches_torch_with_paddle_weight_layout(dtype):
    layer = nn.Linear(5, 3).to(dtype=dtype)
    assert layer.weight.shape == (5, 3) and layer.bias.shape == (3,) and layer.weight.dtype == dtype
    x = rng().standard_normal((4, 5)).astype(dtype)
    want = torch.nn.functional.linear(tt(x), tt(layer.weight).T, tt(layer.bias))
    close(layer(T(x)), want, dtype)
    assert nn.Linear(5, 3, bias_attr=False).bias is None


CONVS = [dict(), dict(stride=2, padding=1), dict(padding=2, dilation=2), dict(groups=2, stride=(2, 1), padding=(1, 0))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", CONVS, ids=str)
def test_conv2d_matches_torch(dtype, kw):
    layer = nn.Conv2D(4, 6, 3, **kw).to(dtype=dtype)
    assert layer.weight.shape == (6, 4 // kw.get("groups", 1), 3, 3)
    x = rng(1).standard_normal((2, 4, 7, 8)).astype(dtype)
    want = torch.nn.functional.conv2d(tt(x), tt(layer.weight), tt(layer.bias), kw.get("stride", 1),
                                      kw.get("padding", 0), kw.get("dilation", 1), kw.get("groups", 1))
    close(layer(T(x)), want, dtype, 10)


def test_conv2d_without_bias_and_nhwc():
    layer = nn.Conv2D(3, 2, 3, bias_attr=False, data_format="NHWC")
    assert layer.bias is None and list(layer.state_dict()) == ["weight"]
    x = rng(2).standard_normal((1, 5, 5, 3)).astype("float32")
    want = torch.nn.functional.conv2d(tt(x).permute(0, 3, 1, 2), tt(layer.weight)).permute(0, 2, 3, 1)
    close(layer(T(x)), want, "float32", 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batchnorm2d_train_uses_batch_statistics_and_paddles_running_average(dtype):
    bn = nn.BatchNorm2D(3, momentum=0.8).to(dtype=dtype)
    bn.weight.set_value(T(np.array([1.5, 0.5, 2.0], dtype)))
    bn.bias.set_value(T(np.array([0.1, -0.2, 0.3], dtype)))
    ref = torch.nn.BatchNorm2d(3, momentum=0.2, dtype=getattr(torch, dtype))
    with torch.no_grad():
        ref.weight.copy_(tt(bn.weight))
        ref.bias.copy_(tt(bn.bias))
    mean, var = np.zeros(3), np.ones(3)
    for step in range(2):
        x = (rng(step).standard_normal((4, 3, 5, 5)) * 3 + 1).astype(dtype)
        close(bn(T(x)), ref(tt(x)), dtype, 10)
        # paddle: running = momentum * running + (1 - momentum) * batch, with the biased variance (torch: unbiased)
        mean = 0.8 * mean + 0.2 * x.mean((0, 2, 3))
        var = 0.8 * var + 0.2 * x.var((0, 2, 3))
        close(bn._mean, mean, dtype, 10)
        close(bn._variance, var, dtype, 10)
    bn.eval()
    x = rng(9).standard_normal((2, 3, 4, 4)).astype(dtype)
    want = torch.nn.functional.batch_norm(tt(x), tt(bn._mean), tt(bn._variance), tt(bn.weight), tt(bn.bias),
                                          training=False, eps=1e-5)
    close(bn(T(x)), want, dtype, 10)
    close(bn._mean, mean, dtype, 10)  # eval leaves the running statistics alone


def test_batchnorm_use_global_stats_and_1d_shapes():
    bn = nn.BatchNorm1D(3)
    x2 = rng(3).standard_normal((6, 3)).astype("float32")
    ref = torch.nn.BatchNorm1d(3)
    close(bn(T(x2)), ref(tt(x2)), "float32", 10)
    x3 = rng(4).standard_normal((2, 3, 5)).astype("float32")
    close(bn(T(x3)), ref(tt(x3)), "float32", 10)
    fixed = nn.BatchNorm1D(3, use_global_stats=True)  # running statistics even in train mode, and no update
    close(fixed(T(x2)), x2 / np.sqrt(1 + 1e-5), "float32")
    close(fixed._mean, np.zeros(3), "float32")
    with pytest.raises(InvalidArgumentError, match="BatchNorm2D: input must be 4-D"):
        nn.BatchNorm2D(3)(T(x3))
    with pytest.raises(InvalidArgumentError, match="batch_norm: momentum must be a number in \\[0, 1\\].*Fix"):
        nn.BatchNorm1D(3, momentum=1.5)(T(x2))
    with pytest.raises(InvalidArgumentError, match="batch_norm: the batch .* is empty"):
        bn(T(np.zeros((0, 3), "float32")))


@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_matches_torch(dtype):
    ln = nn.LayerNorm([3, 4]).to(dtype=dtype)
    ln.weight.set_value(T(rng(5).standard_normal((3, 4)).astype(dtype)))
    x = rng(6).standard_normal((2, 3, 4)).astype(dtype)
    want = torch.nn.functional.layer_norm(tt(x), [3, 4], tt(ln.weight), tt(ln.bias), 1e-5)
    close(ln(T(x)), want, dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_gathers_rows_and_zeroes_padding(dtype):
    emb = nn.Embedding(6, 3, padding_idx=-2).to(dtype=dtype)  # paddle: the padding row is zero from the start
    np.testing.assert_array_equal(emb.weight.numpy()[4], 0)
    ids = np.array([[0, 4, 5], [4, 1, 2]])
    close(emb(T(ids)), torch.nn.functional.embedding(tt(ids), tt(emb.weight)), dtype)
    emb.weight.set_value(T(np.arange(18, dtype=dtype).reshape(6, 3)))  # padding ids give zeros whatever the row
    out = emb(T(ids)).numpy()
    np.testing.assert_array_equal(out[0, 1], 0)
    np.testing.assert_array_equal(out[0, 2], [15, 16, 17])
    with pytest.raises(UnsupportedDTypeError, match="embedding: ids must be integers"):
        emb(T(ids.astype("float32")))


@pytest.mark.parametrize("dtype", DTYPES)
def test_activations_match_torch(dtype):
    x = rng(7).standard_normal((3, 5)).astype(dtype)
    cases = [(nn.ReLU(), torch.relu), (nn.GELU(), torch.nn.functional.gelu),
             (nn.GELU(approximate=True), lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
             (nn.Sigmoid(), torch.sigmoid), (nn.Tanh(), torch.tanh), (nn.Softmax(axis=0), lambda t: t.softmax(0)),
             (nn.LogSoftmax(), lambda t: t.log_softmax(-1))]
    for layer, fn in cases:
        close(layer(T(x)), fn(tt(x)), dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pooling_and_flatten_match_torch(dtype):
    x = rng(8).standard_normal((2, 3, 7, 6)).astype(dtype)
    F = torch.nn.functional
    cases = [(nn.MaxPool2D(2), F.max_pool2d(tt(x), 2)),
             (nn.MaxPool2D(3, stride=2, padding=1), F.max_pool2d(tt(x), 3, 2, 1)),
             (nn.AvgPool2D(2), F.avg_pool2d(tt(x), 2)),
             (nn.AvgPool2D(3, stride=2, padding=1), F.avg_pool2d(tt(x), 3, 2, 1, count_include_pad=False)),
             (nn.AvgPool2D(3, stride=2, padding=1, exclusive=False), F.avg_pool2d(tt(x), 3, 2, 1)),
             (nn.AdaptiveAvgPool2D((2, 3)), F.adaptive_avg_pool2d(tt(x), (2, 3))),
             (nn.AdaptiveAvgPool2D(1), F.adaptive_avg_pool2d(tt(x), 1)),
             (nn.AdaptiveMaxPool2D(2), F.adaptive_max_pool2d(tt(x), 2)),
             (nn.Flatten(), tt(x).flatten(1)), (nn.Flatten(0, 2), tt(x).flatten(0, 2))]
    for layer, want in cases:
        close(layer(T(x)), want, dtype, 10)


def test_sequential_and_layerlist_index_like_lists():
    a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    seq = nn.Sequential(a, b, c)
    assert len(seq) == 3 and seq[0] is a and seq[-1] is c and list(seq) == [a, b, c]
    assert isinstance(seq[1:], nn.Sequential) and list(seq[1:]) == [b, c]
    x = T(rng(9).standard_normal((4, 2)).astype("float32"))
    np.testing.assert_array_equal(seq(x).numpy(), c(b(a(x))).numpy())
    named = nn.Sequential(("fc", a), ("act", b))
    assert [n for n, _ in named.named_children()] == ["fc", "act"] and named["fc"] is a
    assert list(nn.Sequential(OrderedDict(x=a)).state_dict()) == ["x.weight", "x.bias"]
    with pytest.raises(InvalidArgumentError, match="index 3 is out of range"):
        seq[3]
    with pytest.raises(InvalidArgumentError, match="not a Layer"):
        nn.Sequential(a, "relu")
    layers = nn.LayerList([a, b])
    layers.append(c)
    layers.insert(0, nn.Tanh())
    del layers[1]
    assert len(layers) == 3 and list(layers) == [layers[0], b, c] and layers[-1] is c
    assert list(layers.state_dict()) == ["2.weight", "2.bias"]  # renumbered after the deletion


def test_dropout_is_identity_in_eval_and_scaled_bernoulli_in_train():
    drop = nn.Dropout(0.3)
    x = T(np.full((200, 100), 2.0, "float32"))
    out = drop(x).numpy()
    kept = out != 0
    assert abs(1 - kept.mean() - 0.3) < 0.02  # 20000 draws: 7 standard deviations
    np.testing.assert_allclose(out[kept], 2.0 / 0.7, rtol=1e-6)
    assert not np.array_equal(drop(x).numpy(), out)  # each call draws anew
    drop.eval()
    assert drop(x) is x
    infer = nn.Dropout(0.3, mode="downscale_in_infer")
    assert set(np.unique(infer(x).numpy())) <= {0.0, 2.0}
    np.testing.assert_allclose(infer.eval()(x).numpy(), 1.4, rtol=1e-6)
    shared = nn.Dropout(0.5, axis=1)(T(np.ones((64, 32), "float32"))).numpy()
    assert (shared == shared[:1]).all()  # one draw per column, shared along axis 0
    assert (nn.Dropout(1.0)(x).numpy() == 0).all() and nn.Dropout(0.0)(x) is x
    with pytest.raises(InvalidArgumentError, match="dropout: p must be a probability"):
        nn.Dropout(1.5)
    with pytest.raises(InvalidArgumentError, match="mode must be"):
        nn.Dropout(0.5, mode="scale")


def test_dropout_masks_repeat_under_a_seed():
    x = T(np.ones((50,), "float32"))
    hw.seed(7)
    first = [nn.functional.dropout(x, 0.5).numpy() for _ in range(2)]
    hw.seed(7)
    again = [nn.functional.dropout(x, 0.5).numpy() for _ in range(2)]
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first[0], first[1])


# --- the Layer class ---------------------------------------------------------------------------------------------

class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 3)
        self.seq = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1D(3))
        self.scale = self.create_parameter([3], default_initializer=nn.initializer.Constant(2.0))
        self.register_buffer("steps", hw.zeros([1]), persistable=False)

    def forward(self, x):
        return self.seq(self.fc(x)) * self.scale


def test_registration_names_and_order_are_paddles():
    net = Net()
    # paddle orders a layer's own parameters, then its buffers, then its sublayers' (BatchNorm's running
    # statistics are buffers here; paddle makes them parameters that do not train, under the same names)
    assert list(net.state_dict()) == ["scale", "fc.weight", "fc.bias", "seq.0.weight", "seq.0.bias", "seq.1.weight",
                                      "seq.1.bias", "seq.1._mean", "seq.1._variance"]
    assert [n for n, _ in net.named_parameters()] == ["scale", "fc.weight", "fc.bias", "seq.0.weight", "seq.0.bias",
                                                      "seq.1.weight", "seq.1.bias"]
    assert [n for n, _ in net.named_sublayers()] == ["fc", "seq", "seq.0", "seq.1"]
    assert len(net.sublayers()) == 4 and len(list(net.children())) == 2
    assert [n for n, _ in net.named_buffers()] == ["steps", "seq.1._mean", "seq.1._variance"]
    assert all(p.is_parameter and not p.stop_gradient for p in net.parameters())
    assert all(b.persistable and b.stop_gradient for b in net.buffers())
    np.testing.assert_array_equal(net.scale.numpy(), 2.0)
    net.eval()
    assert not any(layer.training for layer in net.sublayers(include_self=True))
    net.train()
    assert all(layer.training for layer in net.sublayers(include_self=True))


def test_shared_parameters_count_once_and_attributes_are_guarded():
    a = nn.Linear(2, 2)
    seq = nn.Sequential(a, a)
    assert len(seq.parameters()) == 2
    with pytest.raises(InvalidArgumentError, match="is a parameter"):
        a.weight = hw.zeros([2, 2])
    a.bias = None
    assert a.bias is None and list(a.state_dict()) == ["weight"]
    seq.note = "kept as a plain attribute"
    assert seq.note == "kept as a plain attribute"
    with pytest.raises(AttributeError):
        seq.missing

    class Early(nn.Layer):
        def __init__(self):
            self.w = hw.create_parameter([1]) if hasattr(hw, "create_parameter") else \
                hw.autograd.create_parameter([1])
    with pytest.raises(InvalidArgumentError, match="super\\(\\).__init__\\(\\)"):
        Early()


def test_repr_is_paddles():
    """The strings paddle 3.3.1 prints for the same layers."""
    assert repr(nn.Sequential(nn.Conv2D(1, 2, 3), nn.BatchNorm2D(2), nn.ReLU())) == (
        "Sequential(\n  (0): Conv2D(1, 2, kernel_size=[3, 3], data_format=NCHW)\n"
        "  (1): BatchNorm2D(num_features=2, momentum=0.9, epsilon=1e-05)\n  (2): ReLU()\n)")
    expected = {
        nn.Conv2D(4, 8, 3, stride=2, padding=1, groups=2, bias_attr=False):
            "Conv2D(4, 8, kernel_size=[3, 3], stride=[2, 2], padding=1, groups=2, data_format=NCHW)",
        nn.Linear(3, 4): "Linear(in_features=3, out_features=4, dtype=float32)",
        nn.LayerNorm(5): "LayerNorm(normalized_shape=[5], epsilon=1e-05)",
        nn.Dropout(0.3): "Dropout(p=0.3, axis=None, mode=upscale_in_train, inplace=False)",
        nn.Embedding(10, 3): "Embedding(10, 3, sparse=False, scale_grad_by_freq=False)",
        nn.GELU(): "GELU(approximate=False)", nn.Softmax(): "Softmax(axis=-1)",
        nn.MaxPool2D(2): "MaxPool2D(kernel_size=2, stride=None, padding=0)",
        nn.AvgPool2D(2): "AvgPool2D(kernel_size=2, stride=None, padding=0)",
        nn.AdaptiveAvgPool2D(1): "AdaptiveAvgPool2D(output_size=1)", nn.Flatten(): "Flatten()",
        nn.CrossEntropyLoss(): "CrossEntropyLoss()", nn.MSELoss(): "MSELoss()",
        nn.BatchNorm1D(4): "BatchNorm1D(num_features=4, momentum=0.9, epsilon=1e-05, data_format=NCL)",
        nn.Sigmoid(): "Sigmoid()", nn.Tanh(): "Tanh()"}
    for layer, text in expected.items():
        assert repr(layer) == text


# --- initialisers ------------------------------------------------------------------------------------------------

def test_default_initialisers_are_paddles():
    lin = nn.Linear(200, 300)
    limit = math.sqrt(6 / 500)  # Xavier uniform over [in, out]
    w = lin.weight.numpy()
    assert np.abs(w).max() <= limit and abs(w.var() / (limit ** 2 / 3) - 1) < 0.03
    np.testing.assert_array_equal(lin.bias.numpy(), 0)
    conv = nn.Conv2D(16, 64, 3, groups=4)  # Normal(0, sqrt(2 / (in_channels * kh * kw))), all in_channels
    assert abs(conv.weight.numpy().std() / math.sqrt(2 / (16 * 9)) - 1) < 0.05
    bn, ln = nn.BatchNorm2D(5), nn.LayerNorm(5)
    for t, v in ((bn.weight, 1), (bn.bias, 0), (bn._mean, 0), (bn._variance, 1), (ln.weight, 1), (ln.bias, 0)):
        np.testing.assert_array_equal(t.numpy(), v)
    emb = nn.Embedding(100, 50).weight.numpy()
    assert np.abs(emb).max() <= math.sqrt(6 / 150)
    hw.seed(3)
    first = nn.Linear(4, 4).weight.numpy()
    hw.seed(3)
    np.testing.assert_array_equal(nn.Linear(4, 4).weight.numpy(), first)


def test_initializer_classes_and_param_attr():
    init = nn.initializer
    assert (init.Constant(0.5)((2, 3), "float64") == 0.5).all()
    k = init.KaimingNormal()((400, 300), "float64")  # std gain / sqrt(fan_in), gain sqrt(2) for relu
    assert abs(k.std() / math.sqrt(2 / 400) - 1) < 0.03
    ku = init.KaimingUniform(mode="fan_out")((40, 30, 3, 3), "float32")
    assert np.abs(ku).max() <= math.sqrt(2) * math.sqrt(3 / (40 * 9))
    tn = init.TruncatedNormal(1.0, 2.0)((1000,), "float32")
    assert tn.min() >= -2 and tn.max() <= 2 and tn.dtype == np.float32  # paddle: absolute bounds a, b
    xn = init.XavierNormal()((300, 200), "float64")
    assert abs(xn.std() / math.sqrt(2 / 500) - 1) < 0.03
    assert init.calculate_gain("tanh") == 5 / 3
    with pytest.raises(InvalidArgumentError, match="Assign: the value has shape"):
        nn.Linear(2, 2, weight_attr=init.Assign(np.zeros((3, 2))))
    lin = nn.Linear(2, 2, weight_attr=nn.ParamAttr(initializer=init.Constant(0.25), trainable=False),
                    bias_attr=init.Constant(1.0))
    assert (lin.weight.numpy() == 0.25).all() and lin.weight.stop_gradient and (lin.bias.numpy() == 1).all()
    with pytest.raises(InvalidArgumentError, match="learning_rate"):
        nn.ParamAttr(learning_rate=0.1)


# --- state dicts -------------------------------------------------------------------------------------------------

def test_state_dict_round_trip_through_save_and_load(tmp_path):
    hw.seed(1)
    net = Net()
    net(T(rng(10).standard_normal((4, 2)).astype("float32")))  # moves the running statistics off their start
    path = tmp_path / "net.hwparams"
    hw.save(net.state_dict(), path)
    other = Net()
    keep = other.fc.weight
    result = other.set_state_dict(hw.load(path))
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert other.fc.weight is keep  # values copied in: the parameter objects stay
    for (k, a), (_, b) in zip(net.state_dict().items(), other.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=k)
    x = T(rng(11).standard_normal((3, 2)).astype("float32"))
    net.eval(), other.eval()
    np.testing.assert_array_equal(net(x).numpy(), other(x).numpy())


def test_set_state_dict_refuses_what_does_not_fit():
    net = Net()
    sd = {k: v.numpy() for k, v in net.state_dict().items()}
    with pytest.raises(InvalidArgumentError, match=r"missing keys \['fc.bias'\].*Fix"):
        net.set_state_dict({k: v for k, v in sd.items() if k != "fc.bias"})
    with pytest.raises(InvalidArgumentError, match=r"unexpected keys \['fc.extra'\].*Fix"):
        net.set_state_dict({**sd, "fc.extra": np.zeros(1, "float32")})
    with pytest.raises(InvalidArgumentError, match=r"'fc.weight' has shape \[3, 2\], the layer's \[2, 3\].*Fix"):
        net.set_state_dict({**sd, "fc.weight": np.zeros((3, 2), "float32")})
    with pytest.raises(InvalidArgumentError, match=r"'seq.1._mean' is float64, the layer's is float32.*Fix"):
        net.set_state_dict({**sd, "seq.1._mean": np.zeros(3)})
    with pytest.raises(InvalidArgumentError, match="expected a dict"):
        net.set_state_dict([1, 2])
    before = net.fc.weight.numpy()
    with pytest.raises(InvalidArgumentError):  # a refused dict changes nothing: every entry is checked first
        net.set_state_dict({**sd, "fc.weight": sd["fc.weight"] + 1, "seq.0.bias": np.zeros(4, "float32")})
    np.testing.assert_array_equal(net.fc.weight.numpy(), before)
    missing, unexpected = net.set_state_dict({"fc.weight": sd["fc.weight"] * 0, "zzz": sd["scale"]}, strict=False)
    assert "fc.bias" in missing and unexpected == ["zzz"] and (net.fc.weight.numpy() == 0).all()


def test_to_moves_and_casts_in_place():
    net = Net()
    w = net.fc.weight
    net.to(dtype="float64")
    assert net.fc.weight is w and w.dtype == np.float64 and net.seq[1]._mean.dtype == np.float64
    assert net(T(np.ones((2, 2)))).dtype == np.float64
    with pytest.raises(UnsupportedDTypeError, match="floating-point"):
        net.to(dtype="int32")


# --- gradients against torch -------------------------------------------------------------------------------------

def _grads_match(layer, torch_fn, x, dtype, params, x_grad=True, scale=10):
    """sum(layer(x) * g) backward in both, for the parameters `params` (name -> torch transform of ours)."""
    xt = torch.tensor(x, requires_grad=x_grad)
    ours_x = T(x)
    if x_grad:
        ours_x.stop_gradient = False
    theirs = {n: tt(getattr(layer, n)).requires_grad_() for n in params}
    out = layer(ours_x)
    g = rng(99).standard_normal(out.shape).astype(dtype)
    (out * T(g)).sum().backward()
    ref = torch_fn(xt, {n: f(theirs[n]) for n, f in params.items()})
    close(out, ref, dtype, scale)
    (ref * tt(g)).sum().backward()
    for n in params:
        close(getattr(layer, n).grad, theirs[n].grad, dtype, scale)
    if x_grad:
        close(ours_x.grad, xt.grad, dtype, scale)


ID = (lambda t: t)


@pytest.mark.parametrize("dtype", DTYPES)
def test_parameter_gradients_match_torch(dtype):
    F = torch.nn.functional
    r = rng(12)
    _grads_match(nn.Linear(5, 3).to(dtype=dtype), lambda x, p: F.linear(x, p["weight"].T, p["bias"]),
                 r.standard_normal((4, 5)).astype(dtype), dtype, {"weight": ID, "bias": ID})
    _grads_match(nn.Conv2D(4, 6, 3, stride=2, padding=1, groups=2).to(dtype=dtype),
                 lambda x, p: F.conv2d(x, p["weight"], p["bias"], 2, 1, 1, 2),
                 r.standard_normal((2, 4, 6, 5)).astype(dtype), dtype, {"weight": ID, "bias": ID}, scale=100)
    bn = nn.BatchNorm2D(3).to(dtype=dtype)
    bn.weight.set_value(T(r.uniform(0.5, 2, 3).astype(dtype)))
    _grads_match(bn, lambda x, p: F.batch_norm(x, None, None, p["weight"], p["bias"], training=True),
                 (r.standard_normal((4, 3, 3, 3)) * 2).astype(dtype), dtype, {"weight": ID, "bias": ID}, scale=100)
    ln = nn.LayerNorm([4, 5]).to(dtype=dtype)
    ln.weight.set_value(T(r.uniform(0.5, 2, (4, 5)).astype(dtype)))
    _grads_match(ln, lambda x, p: F.layer_norm(x, [4, 5], p["weight"], p["bias"]),
                 r.standard_normal((3, 4, 5)).astype(dtype), dtype, {"weight": ID, "bias": ID}, scale=100)
    emb = nn.Embedding(7, 4, padding_idx=2).to(dtype=dtype)
    _grads_match(emb, lambda x, p: F.embedding(x, p["weight"], padding_idx=2), np.array([[0, 2, 5], [5, 5, 2]]),
                 dtype, {"weight": ID}, x_grad=False)
    np.testing.assert_array_equal(emb.weight.grad.numpy()[2], 0)  # the padding row learns nothing


def test_clear_gradients_keeps_zeros_as_paddle():
    lin = nn.Linear(3, 2)
    lin(T(np.ones((1, 3), "float32"))).sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.numpy().any()
    lin.clear_gradients()
    np.testing.assert_array_equal(lin.weight.grad.numpy(), 0)
    lin.clear_gradients(set_to_zero=False)
    assert lin.weight.grad is None


# --- other devices -----------------------------------------------------------------------------------------------

@pytest.mark.skipif(not opencl_available(), reason="no OpenCL device")
def test_a_small_cnn_on_opencl_matches_cpu():
    hw.seed(4)
    net = nn.Sequential(nn.Conv2D(1, 4, 3, padding=1), nn.BatchNorm2D(4), nn.ReLU(), nn.MaxPool2D(2), nn.Flatten(),
                        nn.Linear(4 * 4 * 4, 10))
    x = rng(13).standard_normal((8, 1, 8, 8)).astype("float32")
    y = rng(14).integers(0, 10, 8)
    loss_cpu = nn.CrossEntropyLoss()(net(T(x)), T(y))
    loss_cpu.backward()
    grads_cpu = [p.grad.numpy() for p in net.parameters()]
    mean_cpu = net[1]._mean.numpy()
    net.clear_gradients(set_to_zero=False)
    net[1]._mean.set_value(T(np.zeros(4, "float32")))
    net[1]._variance.set_value(T(np.ones(4, "float32")))
    net.to("opencl:0")
    assert all(str(p.device) == "opencl:0" for p in net.parameters() + net.buffers())
    loss = nn.CrossEntropyLoss()(net(T(x, "opencl:0")), T(y, "opencl:0"))
    loss.backward()
    np.testing.assert_allclose(loss.numpy(), loss_cpu.numpy(), rtol=1e-5)
    np.testing.assert_allclose(net[1]._mean.numpy(), mean_cpu, rtol=1e-5, atol=1e-6)
    for p, g in zip(net.parameters(), grads_cpu):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-4, atol=1e-5)
    drop = nn.Dropout(0.5)(T(np.ones((1000,), "float32"), "opencl:0")).numpy()
    assert set(np.unique(drop)) == {0.0, 2.0} and abs((drop == 0).mean() - 0.5) < 0.06


def test_batchnorm_running_statistics_update_inside_to_static():
    """A captured forward in train mode reads and writes the running statistics at every call, as eager does."""
    x = [hw.to_tensor(np.random.default_rng(s).standard_normal((4, 3)).astype("float32")) for s in range(3)]
    eager, static = nn.BatchNorm1D(3), nn.BatchNorm1D(3)
    step = hw.jit.to_static(lambda t: static(t))
    with hw.no_grad():
        for t in x:
            np.testing.assert_allclose(step(t).numpy(), eager(t).numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(static._mean.numpy(), eager._mean.numpy(), rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(static._variance.numpy(), eager._variance.numpy(), rtol=1e-6)
