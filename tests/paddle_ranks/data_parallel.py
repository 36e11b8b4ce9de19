"""2-rank paddle.DataParallel of a small MLP, SGD, 5 steps, each rank its own data; rank 0 saves the weights to
argv[1] (npz). Weights start from numpy (not the device's random kernels) so every backend starts equal."""
import sys

import numpy as np
import paddle
import paddle.distributed as dist

dist.init_parallel_env()
rank = dist.get_rank()
model = paddle.nn.Sequential(paddle.nn.Linear(8, 16), paddle.nn.ReLU(), paddle.nn.Linear(16, 4))
init = np.random.default_rng(0)
for p in model.parameters():
    p.set_value((init.standard_normal(p.shape) * 0.3).astype("float32"))
dp = paddle.DataParallel(model)
opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=dp.parameters())
rng = np.random.default_rng(100 + rank)
losses = []
for step in range(5):
    x = paddle.to_tensor(rng.standard_normal((16, 8)).astype("float32"))
    y = paddle.to_tensor(rng.integers(0, 4, (16,)).astype("int64"))
    loss = paddle.nn.functional.cross_entropy(dp(x), y)
    loss.backward()
    opt.step()
    opt.clear_grad()
    losses.append(float(loss))
print(f"rank {rank} on {paddle.get_device()}: losses {losses}", flush=True)
if rank == 0:
    np.savez(sys.argv[1], place=str(paddle.get_device()), losses=np.array(losses),
             **{f"p{i}": p.numpy() for i, p in enumerate(model.parameters())})
