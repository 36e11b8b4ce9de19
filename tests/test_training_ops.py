"""The primitive ops training adds (issue 23) against PyTorch, on cpu:0 and opencl:0 (skipped without an OpenCL
device): max_pool2d_grad and adaptive_max_pool2d_grad against torch.autograd through max pooling (ties after relu,
padding, ceil_mode, overlapping windows), the fused optimizer updates against single torch.optim steps; on opencl:0
each runs on the device itself (strict mode: no fallback; the updates as one kernel-primitive program each), and the
CPU's compiled C program agrees; bad calls are hwadapter's errors on every device."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import hwadapter as hw
from hwadapter.api import reference
from hwadapter.api.errors import InvalidArgumentError, UnsupportedDTypeError
from hwadapter.dispatch import dispatcher
from hwadapter.runtime.device import get


def _opencl_missing() -> str | None:
    try:
        return None if hw.device.is_available("opencl") else "no OpenCL device here"
    except Exception as err:  # noqa: BLE001  pyopencl or its driver missing: the reason to skip
        return f"OpenCL unusable: {err}"


OPENCL = "opencl:0"
DEVICES = ["cpu:0", pytest.param(OPENCL, marks=pytest.mark.skipif(_opencl_missing() is not None,
                                                                  reason=str(_opencl_missing())))]
FLOATS = ["float16", "float32", "float64"]
TOL = {"float16": dict(rtol=2e-3, atol=2e-3), "float32": dict(rtol=1e-5, atol=1e-6),
       "float64": dict(rtol=1e-12, atol=1e-14)}
RNG = np.random.default_rng(23)


def run(device: str, op: str, arrays, attrs) -> list:
    """op through the dispatcher on `device`: its outputs as numpy arrays (a list, for one output too)."""
    out = dispatcher.dispatch(op, tuple(hw.to_tensor(a, device=device) for a in arrays), attrs)
    return [o.numpy() for o in out] if isinstance(out, tuple) else [out.numpy()]


def close(got, want, dtype, what=""):
    assert got.dtype == np.dtype(dtype) and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), err_msg=what, **TOL[dtype])


@pytest.fixture
def strict():
    """No fallback: an op the device cannot run itself is an error (conftest's clean_state resets the setting)."""
    hw.configure(strict=True)
    yield
    assert hw.profiler.fallback_count() == 0


# --- the pooling gradients against torch.autograd --------------------------------------------------------------
def _torch_dtype(dtype):
    return torch.float64 if dtype == "float64" else torch.float32  # float16 values are exact in float32


def _relu_ties(shape, dtype):
    """Integers in [-3, 3) after relu: about half the elements 0, so most windows hold ties."""
    return np.maximum(RNG.integers(-3, 3, shape), 0).astype(dtype)


def _grad_like(shape, dtype):
    """Small integers for float16 (every sum exact), normal values otherwise."""
    if dtype == "float16":
        return RNG.integers(-3, 4, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def torch_max_pool_grad(x, g, kernel, stride, padding, ceil):
    """d(sum(max_pool2d(x) * g))/dx by torch.autograd; padding (t, b, l, r): symmetric pairs go to torch's own
    padding (ceil_mode's rule needs it), others are -inf added first (without ceil_mode only)."""
    t, b, l, r = padding
    xt = torch.tensor(x, dtype=_torch_dtype(x.dtype), requires_grad=True)
    if (t, l) == (b, r):
        y = torch.nn.functional.max_pool2d(xt, kernel, stride, (t, l), ceil_mode=ceil)
    else:
        assert not ceil
        padded = torch.nn.functional.pad(xt, (l, r, t, b), value=-np.inf)
        y = torch.nn.functional.max_pool2d(padded, kernel, stride)
    y.backward(torch.tensor(g, dtype=xt.dtype))
    return xt.grad.numpy().astype(x.dtype)


POOLS = [  # (x shape, kernel, stride, padding (t, b, l, r), ceil_mode)
    ((2, 3, 6, 6), (2, 2), (2, 2), (0, 0, 0, 0), False),  # windows side by side
    ((2, 3, 7, 8), (3, 3), (2, 2), (1, 1, 1, 1), True),   # overlapping, padded, a last partial window
    ((1, 2, 6, 5), (3, 3), (1, 1), (1, 1, 1, 1), False),  # every element in up to nine windows
    ((1, 2, 5, 7), (2, 2), (2, 2), (0, 0, 0, 0), True),   # partial windows at the bottom and right
    ((2, 1, 7, 6), (3, 2), (2, 1), (1, 0, 0, 1), False),  # non-square, asymmetric padding
    ((1, 1, 4, 4), (4, 4), (1, 1), (2, 2, 2, 2), True),   # windows mostly padding
]


@pytest.mark.parametrize("where", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool2d_grad_matches_torch_autograd(where, dtype, strict):
    for shape, kernel, stride, padding, ceil in POOLS:
        attrs = {"kernel_size": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil}
        for x in (_relu_ties(shape, dtype), np.zeros(shape, dtype), RNG.standard_normal(shape).astype(dtype)):
            g = _grad_like(reference.KERNELS["max_pool2d"](x, **attrs).shape, dtype)
            got, = run(where, "max_pool2d_grad", [x, g], attrs)
            close(got, torch_max_pool_grad(x, g, kernel, stride, padding, ceil), dtype, str(attrs))


def test_a_window_of_ties_gives_its_grad_to_its_first_element_and_padding_never_wins():
    x = np.zeros((1, 1, 3, 3), "float32")
    x[0, 0, 2, 2] = -np.inf
    g = np.array([[[[1, 2], [4, 8]]]], "float32")  # windows of 2 x 2 at stride 2, padding 1 on every side
    got = reference.KERNELS["max_pool2d_grad"](x, g, kernel_size=(2, 2), stride=(2, 2), padding=(1, 1, 1, 1))
    # each window's first real element, in row-major order, takes its grad (never a padded position)
    np.testing.assert_array_equal(got[0, 0], [[1, 2, 0], [4, 8, 0], [0, 0, 0]])


ADAPTIVE = [((2, 3, 5, 7), (1, 1)), ((2, 3, 5, 7), (2, 3)), ((1, 2, 6, 6), (4, 4)), ((1, 2, 5, 7), (9, 8)),
            ((1, 1, 1, 1), (2, 3))]


@pytest.mark.parametrize("where", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_adaptive_max_pool2d_grad_matches_torch_autograd(where, dtype, strict):
    for shape, size in ADAPTIVE:
        for x in (_relu_ties(shape, dtype), RNG.standard_normal(shape).astype(dtype)):
            g = _grad_like(shape[:2] + size, dtype)
            xt = torch.tensor(x, dtype=_torch_dtype(dtype), requires_grad=True)
            torch.nn.functional.adaptive_max_pool2d(xt, size).backward(torch.tensor(g, dtype=xt.dtype))
            got, = run(where, "adaptive_max_pool2d_grad", [x, g], {"output_size": size})
            close(got, xt.grad.numpy().astype(dtype), dtype, str(size))


# --- the optimizer updates against single torch.optim steps ----------------------------------------------------
def _state(shape, dtype):
    """(param, grad, a momentum or first moment, a second moment >= 0), float64 to be cast."""
    return tuple(np.asarray(a) for a in (RNG.standard_normal(shape), RNG.standard_normal(shape),
                                         RNG.standard_normal(shape) * 0.1, RNG.random(shape) * 0.01))


def _torch_step(make, param, grad, state: dict, dtype):
    """(param after one step of optimizer `make([p])`, its state) from torch, with `state` preset; float16 is
    stepped in float32 and rounded at the end."""
    td = _torch_dtype(dtype)
    p = torch.tensor(param, dtype=td, requires_grad=True)
    opt = make([p])
    p.grad = torch.tensor(grad, dtype=td)
    if state:
        opt.state[p] = {k: (torch.tensor(v, dtype=td) if isinstance(v, np.ndarray) else v) for k, v in state.items()}
    opt.step()
    return p.detach().numpy().astype(dtype), {k: v.numpy().astype(dtype) for k, v in opt.state[p].items()
                                               if k != "step"}


def _scalars(values, dtype, shape):
    return [np.full(shape, v, dtype) for v in values]


SHAPES = [((4, 5), ()), ((7,), (1,)), ((), ())]  # (param shape, shape of the scalars)


@pytest.mark.parametrize("where", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_sgd_update_matches_torch_sgd(where, dtype, strict):
    for (shape, scalar), wd in zip(SHAPES, (0.0, 0.05, 0.01)):
        p, g, _, _ = (a.astype(dtype) for a in _state(shape, dtype))
        want, _ = _torch_step(lambda ps: torch.optim.SGD(ps, lr=0.1, weight_decay=wd), p, g, {}, dtype)
        got, = run(where, "sgd_update", [p, g, *_scalars([0.1], dtype, scalar)], {"weight_decay": wd})
        close(got, want, dtype, f"{shape} wd={wd}")


@pytest.mark.parametrize("where", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_momentum_update_matches_torch_sgd_with_momentum(where, dtype, strict):
    for (shape, scalar), nesterov, wd in zip(SHAPES * 2, (False, True) * 3, (0.0, 0.05, 0.01, 0.0, 0.1, 0.0)):
        p, g, v, _ = (a.astype(dtype) for a in _state(shape, dtype))
        want, state = _torch_step(lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, nesterov=nesterov,
                                                             weight_decay=wd),
                                  p, g, {"momentum_buffer": v}, dtype)
        got = run(where, "momentum_update", [p, g, v, *_scalars([0.05], dtype, scalar)],
                  {"momentum": 0.8, "use_nesterov": nesterov, "weight_decay": wd})
        what = f"{shape} nesterov={nesterov} wd={wd}"
        close(got[0], want, dtype, what)
        close(got[1], state["momentum_buffer"], dtype, what)


@pytest.mark.parametrize("where", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("decoupled", [False, True], ids=["adam", "adamw"])
def test_adam_update_matches_torch_adam_and_adamw(where, dtype, decoupled, strict):
    optimizer = torch.optim.AdamW if decoupled else torch.optim.Adam
    for (shape, scalar), wd, t in zip(SHAPES, (0.0, 0.05, 0.01), (1, 7, 30)):
        p, g, m, v = (a.astype(dtype) for a in _state(shape, dtype))
        b1, b2, lr, eps = 0.85, 0.99, 1e-2, 1e-6
        want, state = _torch_step(
            lambda ps: optimizer(ps, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False), p, g,
            {"step": torch.tensor(float(t - 1)), "exp_avg": m, "exp_avg_sq": v}, dtype)  # torch counts to t
        got = run(where, "adam_update", [p, g, m, v, *_scalars([lr, b1 ** t, b2 ** t], dtype, scalar)],
                  {"beta1": b1, "beta2": b2, "epsilon": eps, "weight_decay": wd, "decoupled": decoupled})
        what = f"{shape} t={t} wd={wd}"
        close(got[0], want, dtype, what)
        close(got[1], state["exp_avg"], dtype, what)
        close(got[2], state["exp_avg_sq"], dtype, what)


# --- on the device itself ------------------------------------------------------------------------------------------
def _update_case(op, dtype="float32", shape=(3, 4)):
    p, g, m, v = (a.astype(dtype) for a in _state(shape, dtype))
    scalars = _scalars([0.01, 0.9 ** 2, 0.999 ** 2], dtype, ())
    return {"sgd_update": [p, g, scalars[0]], "momentum_update": [p, g, m, scalars[0]],
            "adam_update": [p, g, m, v, *scalars]}[op]


UPDATES = ["sgd_update", "momentum_update", "adam_update"]


@pytest.mark.parametrize("op", UPDATES)
def test_on_opencl_each_update_is_one_kernel_primitive_program_with_no_fallback(op, strict):
    if _opencl_missing():
        pytest.skip(_opencl_missing())
    dev = get(OPENCL)
    for dtype in FLOATS:
        arrays = _update_case(op, dtype)
        dev.forget_routes(op)
        assert getattr(dispatcher.route(op, dev, tuple(a.dtype for a in arrays)), "route", None) == "codegen"
        want = reference.KERNELS[op](*arrays)
        for got, w in zip(run(OPENCL, op, arrays, {}), want if isinstance(want, list) else [want]):
            close(got, w, dtype, f"{op} {dtype}")


@pytest.mark.parametrize("op", ["max_pool2d_grad", "adaptive_max_pool2d_grad"])
def test_on_opencl_the_pooling_gradients_run_the_handwritten_kernels(op, strict):
    if _opencl_missing():
        pytest.skip(_opencl_missing())
    dev = get(OPENCL)
    attrs = {"output_size": (2, 3)} if op.startswith("adaptive") else \
        {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1), "ceil_mode": True}
    x = _relu_ties((2, 3, 7, 7), "float32")
    g = _grad_like(reference.KERNELS[op.removesuffix("_grad")](x, **attrs).shape, "float32")
    assert dispatcher.route(op, dev, (x.dtype, g.dtype)) is dev.kernels.find(op, (x.dtype, g.dtype)) is not None
    close(run(OPENCL, op, [x, g], attrs)[0], reference.KERNELS[op](x, g, **attrs), "float32", op)


@pytest.mark.parametrize("op", UPDATES)
def test_the_cpus_compiled_c_program_agrees_with_the_reference(op):
    """HWADAPTER_CPU_KERNELS=codegen runs these programs on cpu:0 (skipped without a C compiler)."""
    dev = get("cpu:0")
    if dev.codegen is None:
        pytest.skip(f"no C compiler: {dev.codegen_unavailable}")
    for dtype in FLOATS:
        arrays = _update_case(op, dtype, shape=(2, 3, 5))
        attrs = {"weight_decay": 0.1} if op != "momentum_update" else {"use_nesterov": True, "weight_decay": 0.1}
        got, want = dev.primitive(op)(*arrays, **attrs), reference.KERNELS[op](*arrays, **attrs)
        for a, b in zip(*((got, want) if isinstance(want, list) else ([got], [want]))):
            close(np.asarray(a), b, dtype, f"{op} {dtype}")


# --- bad calls -------------------------------------------------------------------------------------------------
X, G = np.ones((1, 2, 4, 4), "float32"), np.ones((1, 2, 2, 2), "float32")
P, LR = np.ones((3,), "float32"), np.array(0.1, "float32")
POOL = {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0, 0, 0), "ceil_mode": False}
BAD = [  # (op, inputs, attrs, error, words the message must hold)
    ("max_pool2d_grad", [X, G], {**POOL, "stride": (0, 2)}, InvalidArgumentError, "stride"),
    ("max_pool2d_grad", [X, G], {**POOL, "padding": (2, 0, 0, 0)}, InvalidArgumentError, "half the kernel"),
    ("max_pool2d_grad", [X, G], {**POOL, "padding": (0, 0)}, InvalidArgumentError, "padding"),
    ("max_pool2d_grad", [X, G], {**POOL, "ceil_mode": "yes"}, InvalidArgumentError, "ceil_mode"),
    ("max_pool2d_grad", [X, G], {**POOL, "kernel_size": (9, 9)}, InvalidArgumentError, "larger than"),
    ("max_pool2d_grad", [X, G], {**POOL, "dilation": (1, 1)}, InvalidArgumentError, "dilation"),
    ("max_pool2d_grad", [X, np.ones((1, 2, 3, 2), "float32")], POOL, InvalidArgumentError, "(1, 2, 2, 2)"),
    ("max_pool2d_grad", [X[0], G[0]], POOL, InvalidArgumentError, "4-D"),
    ("max_pool2d_grad", [X.astype("int32"), G.astype("int32")], POOL, UnsupportedDTypeError, "int32"),
    ("max_pool2d_grad", [X, G.astype("float64")], POOL, UnsupportedDTypeError, "float64"),
    ("adaptive_max_pool2d_grad", [X, G], {"output_size": (0, 2)}, InvalidArgumentError, "output_size"),
    ("adaptive_max_pool2d_grad", [X, G], {"output_size": (3, 3)}, InvalidArgumentError, "(1, 2, 3, 3)"),
    ("sgd_update", [P, P, np.ones(2, "float32")], {}, InvalidArgumentError, "lr"),
    ("sgd_update", [P, P[:2], LR], {}, InvalidArgumentError, "grad"),
    ("sgd_update", [P, P, LR], {"lr": 0.1}, InvalidArgumentError, "lr"),
    ("sgd_update", [P, P, LR], {"weight_decay": float("nan")}, InvalidArgumentError, "weight_decay"),
    ("sgd_update", [P, P], {}, InvalidArgumentError, "3 inputs"),
    ("sgd_update", [P.astype("int64"), P.astype("int64"), LR.astype("int64")], {}, UnsupportedDTypeError, "int64"),
    ("momentum_update", [P, P, P, LR], {"momentum": -0.5}, InvalidArgumentError, "momentum"),
    ("momentum_update", [P, P, P, LR], {"use_nesterov": "no"}, InvalidArgumentError, "use_nesterov"),
    ("momentum_update", [P, P, P, LR.astype("float16")], {}, UnsupportedDTypeError, "float16"),
    ("adam_update", [P, P, P, P, LR, LR, LR], {"beta1": 1.0}, InvalidArgumentError, "beta1"),
    ("adam_update", [P, P, P, P, LR, LR, LR], {"beta2": True}, InvalidArgumentError, "beta2"),
    ("adam_update", [P, P, P, P, LR, LR, LR], {"epsilon": -1e-8}, InvalidArgumentError, "epsilon"),
    ("adam_update", [P, P, P, P, LR, LR, np.ones((1, 1), "float32")], {}, InvalidArgumentError, "beta2_pow"),
]


@pytest.mark.parametrize("where", DEVICES)
def test_bad_calls_are_hwadapter_errors_naming_the_op(where):
    """On opencl:0 too: its handwritten kernels and kernel-primitive programs check the call by the op's rule (a
    dtype it has no kernel for falls back to the CPU, which refuses it alike). One test per device: each refused call
    leaves device tensors in its traceback, which only a collection frees."""
    wrong = []
    for op, arrays, attrs, error, words in BAD:
        with warnings.catch_warnings(), pytest.raises(error) as info:
            warnings.simplefilter("ignore")  # the fallback's announcement
            run(where, op, arrays, attrs)
        message = str(info.value)
        if not (message.startswith(f"{op}:") and words in message and "Fix:" in message):
            wrong.append(f"{op} {attrs}: {message}")
    assert not wrong, "\n".join(wrong)
