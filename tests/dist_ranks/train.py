"""Rank side of tests/test_distributed.py: data-parallel training against one process training on the global batch.

`mpiexec -n N python train.py DEVICE MODEL MODE ACCUMULATE`: MODEL mlp or cnn, MODE eager or static, ACCUMULATE 1 for
two micro-batches per step (the first under no_sync). Every rank starts from its own random weights (DataParallel
must broadcast rank 0's); rank 0 then trains the same model alone on the global batches and prints
`RESULT {json}` with the largest difference between the weights.
"""
import json
import sys

import numpy as np

import hwadapter as hw
from hwadapter import distributed as dist
from hwadapter import nn, optimizer

STEPS, GLOBAL = 20, 16


def make(kind: str):
    if kind == "mlp":
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return nn.Sequential(nn.Conv2D(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2D(2), nn.Flatten(),
                         nn.Linear(4 * 4 * 4, 4))


def batches(kind: str, micro: int):
    rng = np.random.default_rng(0)
    shape = (8,) if kind == "mlp" else (1, 8, 8)
    x = rng.standard_normal((STEPS, micro, GLOBAL) + shape).astype(np.float32)
    return x, rng.integers(0, 4, (STEPS, micro, GLOBAL))


def main() -> None:
    device, kind, mode, accumulate = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    hw.set_device(device)
    dist.init_parallel_env()
    rank, n = dist.get_rank(), dist.get_world_size()
    micro = 2 if accumulate else 1
    X, Y = batches(kind, micro)
    hw.seed(100 + rank)
    net = make(kind)
    model = hw.DataParallel(net, comm_buffer_size=0.001)  # small buckets: several, started during backward
    opt = optimizer.Adam(learning_rate=1e-2, parameters=model.parameters())
    loss_fn = nn.CrossEntropyLoss()

    def grads(x, y):  # a micro-batch whose gradients only accumulate (called under no_sync)
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss

    def step(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss

    if mode == "static":  # two functions: what a trace captures (all-reduce or not) is fixed when it is traced
        grads, step = hw.jit.to_static(grads), hw.jit.to_static(step)
    per = GLOBAL // n
    for i in range(STEPS):
        for k in range(micro):
            x, y = (hw.to_tensor(a[i, k, rank * per:(rank + 1) * per]) for a in (X, Y))
            if k < micro - 1:
                with model.no_sync():
                    grads(x, y)
            else:
                step(x, y)
    mine = [p.numpy() for p in net.parameters()]
    others = []
    dist.all_gather(others, hw.to_tensor(np.concatenate([m.ravel() for m in mine])))
    replicas = max(float(np.abs(o.numpy() - others[0].numpy()).max()) for o in others)
    if rank == 0:
        hw.seed(100)
        ref = make(kind)
        opt2 = optimizer.Adam(learning_rate=1e-2, parameters=ref.parameters())
        for i in range(STEPS):
            for k in range(micro):
                loss_fn(ref(hw.to_tensor(X[i, k])), hw.to_tensor(Y[i, k])).backward()
            opt2.step()
            opt2.clear_grad()
        diff = max(float(np.abs(a - p.numpy()).max()) for a, p in zip(mine, ref.parameters()))
        scale = max(float(np.abs(p.numpy()).max()) for p in ref.parameters())
        print("RESULT " + json.dumps({"diff": diff, "replicas": replicas, "scale": scale, "ranks": n}), flush=True)


if __name__ == "__main__":
    main()
