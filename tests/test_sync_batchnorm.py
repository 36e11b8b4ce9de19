"""nn.SyncBatchNorm: on N ranks (mpiexec) its forward, running statistics and gradients are BatchNorm2D's on the
global batch and numpy's formulas, with unequal batches per rank; a to_static DataParallel train step of a CNN
converted with convert_sync_batchnorm trains as one process with BatchNorm2D on the global batch; with one process
(no parallel environment) it is BatchNorm2D bit for bit."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import nn

MPIEXEC = Path(sys.executable).parent / "mpiexec"

#: The ranks' side. Each rank knows the global batch (same seed) and takes its slice; every rank checks its own part
#: against BatchNorm2D on the whole batch and against numpy, and rank 0 prints every rank's results as one line
#: `RESULT {json}` (case -> "ok" or what went wrong).
SCRIPT = r'''
import json
import numpy as np
from mpi4py import MPI
import hwadapter as hw
from hwadapter import distributed as dist, nn, optimizer

dist.init_parallel_env()
rank, n = dist.get_rank(), dist.get_world_size()
results = {}


def case(name, fn):
    try:
        fn()
        results[name] = "ok"
    except Exception as err:  # noqa: BLE001 - reported by name; the test names the case
        results[name] = f"{type(err).__name__}: {err}"


C, H, W, EPS, MOM = 3, 4, 5, 1e-5, 0.8
SIZES = [2 + 2 * r for r in range(n)]  # unequal batches: the counts must be summed, not assumed
lo, hi = sum(SIZES[:rank]), sum(SIZES[:rank + 1])
rng = np.random.default_rng(7)
X = (rng.standard_normal((sum(SIZES), C, H, W)) * 2 + 40).astype("float32")  # a mean far from 0: round 2 matters
G = rng.standard_normal(X.shape).astype("float32")  # d loss / d y
GAMMA, BETA = np.array([0.5, 2.0, -1.0], "float32"), np.array([0.1, -0.3, 1.0], "float32")
RUN_M, RUN_V = np.array([1.0, -1.0, 0.5], "float32"), np.array([2.0, 0.5, 1.0], "float32")


def numpy_bn(x, g):
    """y, batch mean, biased var and the gradients (x, weight, bias) of sum(y * g), per channel of NCHW x."""
    x, g = x.astype(np.float64), g.astype(np.float64)
    m, v = x.mean((0, 2, 3)), x.var((0, 2, 3))
    r = lambda a: a.reshape(1, -1, 1, 1)  # noqa: E731
    xhat = (x - r(m)) / np.sqrt(r(v) + EPS)
    y = xhat * r(GAMMA) + r(BETA)
    dxhat = g * r(GAMMA)
    dx = (dxhat - dxhat.mean((0, 2, 3), keepdims=True) - xhat * (dxhat * xhat).mean((0, 2, 3), keepdims=True)) \
        / np.sqrt(r(v) + EPS)
    return y, m, v, dx, (g * xhat).sum((0, 2, 3)), g.sum((0, 2, 3))


def layer(cls, **kw):
    bn = cls(C, momentum=MOM, epsilon=EPS, **kw)
    bn.weight.set_value(GAMMA)
    bn.bias.set_value(BETA)
    bn._mean.set_value(RUN_M)
    bn._variance.set_value(RUN_V)
    return bn


def close(got, want, what, tol=1e-4):
    """Within tol of each value's size plus the array's mean size (float32 rounding of a normalised value is
    relative to the whole batch's scale), and 1e-6 absolute (a conv bias before BatchNorm has a zero gradient, so
    rounding noise)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    bound = 1e-6 + tol * (np.abs(want) + np.abs(want).mean())
    i = np.argmax(np.abs(got - want) / bound)
    assert np.all(np.abs(got - want) <= bound), \
        f"{what}: at {np.unravel_index(i, got.shape)} got {got.ravel()[i]}, want {want.ravel()[i]}"


def leaf(a):
    t = hw.to_tensor(a)
    t.stop_gradient = False
    return t


def forward_and_grads(channels_last):
    y_np, m_np, v_np, dx_np, dw_np, db_np = numpy_bn(X, G)
    perm = (0, 2, 3, 1) if channels_last else (0, 1, 2, 3)
    fmt = {"data_format": "NHWC"} if channels_last else {}
    sync, ref = layer(nn.SyncBatchNorm, **fmt), layer(nn.BatchNorm2D, **fmt)
    x = leaf(X[lo:hi].transpose(perm).copy())
    y = sync(x)
    (y * hw.to_tensor(G[lo:hi].transpose(perm).copy())).sum().backward()
    xg = leaf(X.transpose(perm).copy())
    yg = ref(xg)
    (yg * hw.to_tensor(G.transpose(perm).copy())).sum().backward()
    grads = {}
    for name in ("weight", "bias"):  # every collective before any check, so a failing check cannot strand a rank
        grads[name] = getattr(sync, name).grad
        dist.all_reduce(grads[name])  # each rank holds its part of the gradient: their sum is the global batch's
    back = np.argsort(perm)
    close(y.numpy().transpose(back), yg.numpy().transpose(back)[lo:hi], "y vs BatchNorm2D")
    close(y.numpy().transpose(back), y_np[lo:hi], "y vs numpy")
    close(sync._mean.numpy(), ref._mean.numpy(), "running mean vs BatchNorm2D")
    close(sync._variance.numpy(), ref._variance.numpy(), "running var vs BatchNorm2D")
    close(sync._mean.numpy(), MOM * RUN_M + (1 - MOM) * m_np, "running mean vs numpy")
    close(sync._variance.numpy(), MOM * RUN_V + (1 - MOM) * v_np, "running var vs numpy (biased)")
    close(x.grad.numpy().transpose(back), xg.grad.numpy().transpose(back)[lo:hi], "x grad vs BatchNorm2D")
    close(x.grad.numpy().transpose(back), dx_np[lo:hi], "x grad vs numpy", 1e-3)
    for name, want_np in (("weight", dw_np), ("bias", db_np)):
        close(grads[name].numpy(), getattr(ref, name).grad.numpy(), f"{name} grad summed vs BatchNorm2D")
        close(grads[name].numpy(), want_np, f"{name} grad summed vs numpy", 1e-3)
    sync.eval(), ref.eval()  # eval: the running statistics, no communication; BatchNorm2D's result from them
    ref._mean.set_value(sync._mean.numpy())
    ref._variance.set_value(sync._variance.numpy())
    assert np.array_equal(sync(x).numpy(), ref(x).numpy()), "eval differs from BatchNorm2D"


def two_d():
    """[N, C] input, from a converted BatchNorm1D: forward and running mean vs BatchNorm1D on the global batch."""
    flat = X[:, :, 0, 0].copy()
    sync, ref = nn.SyncBatchNorm.convert_sync_batchnorm(layer(nn.BatchNorm1D)), layer(nn.BatchNorm1D)
    y, yg = sync(hw.to_tensor(flat[lo:hi])), ref(hw.to_tensor(flat))
    close(y.numpy(), yg.numpy()[lo:hi], "[N, C] y vs BatchNorm1D")
    close(sync._variance.numpy(), ref._variance.numpy(), "[N, C] running var vs BatchNorm1D")


def empty_part():
    """The last rank's batch is empty: the others' statistics are the global batch's, on every rank."""
    keep = X[lo:hi] if rank < n - 1 else X[:0]
    sync, ref = layer(nn.SyncBatchNorm), layer(nn.BatchNorm2D)
    y = sync(hw.to_tensor(keep))
    ref(hw.to_tensor(X[:sum(SIZES[:-1])]))
    assert y.shape == keep.shape, y.shape
    close(sync._mean.numpy(), ref._mean.numpy(), "running mean with an empty rank vs BatchNorm2D")
    close(sync._variance.numpy(), ref._variance.numpy(), "running var with an empty rank vs BatchNorm2D")


case("nchw", lambda: forward_and_grads(False))
case("nhwc", lambda: forward_and_grads(True))
case("nc", two_d)
case("empty part", empty_part)

# --- a to_static DataParallel train step vs one process with BatchNorm2D on the global batch --------------------
STEPS, PER_RANK = 10, 4  # equal batches: DataParallel averages the ranks' mean losses


def cnn():
    hw.seed(0)
    return nn.Sequential(nn.Conv2D(1, 4, 3, padding=1), nn.BatchNorm2D(4), nn.ReLU(), nn.MaxPool2D(2), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, 3))


drng = np.random.default_rng(3)
DATA = [((drng.standard_normal((PER_RANK * n, 1, 6, 6)) + 1).astype("float32"), drng.integers(0, 3, PER_RANK * n))
        for _ in range(STEPS)]


def train(model, part, static=True):
    opt = optimizer.SGD(learning_rate=0.2, parameters=model.parameters())
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss
    run = hw.jit.to_static(step) if static else step
    for x, y in DATA:
        run(hw.to_tensor(x[part]), hw.to_tensor(y[part]))
    return run


def data_parallel():
    model = nn.SyncBatchNorm.convert_sync_batchnorm(cnn())
    run = train(hw.DataParallel(model), slice(rank * PER_RANK, (rank + 1) * PER_RANK))
    mine = {k: v.numpy() for k, v in model.state_dict().items()}
    everyone = MPI.COMM_WORLD.allgather(mine)  # before any check: a failing check cannot strand a rank
    for r, theirs in enumerate(everyone):
        for k in mine:
            assert np.array_equal(theirs[k], mine[k]), f"rank {r}'s {k} differs from rank {rank}'s"
    if rank == 0:  # the single-process reference, in this job
        ref = cnn()
        train(ref, slice(None), static=False)
        for k, v in ref.state_dict().items():
            close(mine[k], v.numpy(), f"{k} after {STEPS} steps vs BatchNorm2D on the global batch", 2e-4)
    assert type(model[1]) is nn.SyncBatchNorm, type(model[1])
    assert run.cache_info()["traces"] == 1, run.cache_info()
    assert not np.allclose(mine["1._mean"], 0), "the running mean never moved"


case("to_static DataParallel", data_parallel)
everyone = MPI.COMM_WORLD.gather(results, root=0)
if rank == 0:
    print("RESULT " + json.dumps(everyone), flush=True)
'''


def run_ranks(tmp_path: Path, n: int, timeout: float) -> list[dict]:
    """Run SCRIPT on `n` ranks on the cpu; each rank's {case: "ok" or why not}."""
    script = tmp_path / "sync_bn_ranks.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "HWADAPTER_DEVICE": "cpu", "HWADAPTER_COLLECTIVE_TIMEOUT": str(timeout)}
    proc = subprocess.run([str(MPIEXEC), "-n", str(n), sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout + 30)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and len(lines) == 1, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return json.loads(lines[0].removeprefix("RESULT "))


@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_sync_batchnorm_is_batchnorm_on_the_global_batch(tmp_path, n):
    pytest.importorskip("mpi4py")
    if not MPIEXEC.is_file():
        pytest.skip("MPICH's mpiexec is not installed beside this Python (pip install '.[mpi]')")
    everyone = run_ranks(tmp_path, n, timeout=60)
    assert len(everyone) == n
    bad = {f"rank {r}: {k}": v for r, results in enumerate(everyone) for k, v in results.items() if v != "ok"}
    assert not bad, bad
    assert set(everyone[0]) == {"nchw", "nhwc", "nc", "empty part", "to_static DataParallel"}


# --- one process: BatchNorm2D, bit for bit --------------------------------------------------------------------------
def _pair():
    rng = np.random.default_rng(1)
    layers = nn.BatchNorm2D(3, momentum=0.7), nn.SyncBatchNorm(3, momentum=0.7)
    for bn in layers:
        bn.weight.set_value(np.array([1.5, -0.5, 2.0], "float32"))
        bn.bias.set_value(np.array([0.2, 0.0, -1.0], "float32"))
    x = (rng.standard_normal((4, 3, 5, 5)) * 3 + 1).astype("float32")
    return layers, x


def test_one_process_is_batchnorm2d_bit_for_bit():
    (bn, sync), data = _pair()
    outs = []
    for layer in (bn, sync):
        x = hw.to_tensor(data)
        x.stop_gradient = False
        y = layer(x)
        (y * y).sum().backward()
        outs.append([y.numpy(), x.grad.numpy(), layer.weight.grad.numpy(), layer.bias.grad.numpy(),
                     layer._mean.numpy(), layer._variance.numpy()])
    for a, b in zip(*outs):
        assert np.array_equal(a, b)
    assert not np.allclose(outs[1][4], 0)  # the running statistics did move
    bn.eval(), sync.eval()
    x = hw.to_tensor(data)
    assert np.array_equal(bn(x).numpy(), sync(x).numpy())


def test_convert_sync_batchnorm_shares_parameters_and_statistics():
    model = nn.Sequential(nn.Conv2D(3, 4, 3), nn.BatchNorm2D(4, momentum=0.5, epsilon=1e-3),
                          nn.Sequential(nn.BatchNorm1D(2, data_format="NLC")))
    model.eval()
    before = {k: v for k, v in model.state_dict().items()}
    bn = model[1]
    out = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert out is model and type(model[1]) is nn.SyncBatchNorm and type(model[2][0]) is nn.SyncBatchNorm
    assert model[1]._momentum == 0.5 and model[1]._epsilon == 1e-3 and model[2][0]._data_format == "NLC"
    assert not model[1].training  # the mode is kept
    after = model.state_dict()
    assert list(after) == list(before) and all(after[k] is before[k] for k in before)  # the same tensors
    assert model[1].weight is bn.weight and model[1]._variance is bn._variance
    alone = nn.SyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm2D(2))
    assert type(alone) is nn.SyncBatchNorm
    assert "SyncBatchNorm(num_features=4, momentum=0.5, epsilon=0.001)" in repr(model)


def test_wrong_rank_is_refused_as_batchnorm_does():
    with pytest.raises(hw.errors.InvalidArgumentError, match="SyncBatchNorm: input must be"):
        nn.SyncBatchNorm(3)(hw.to_tensor(np.zeros((2, 3, 1, 1, 1, 1), "float32")))
