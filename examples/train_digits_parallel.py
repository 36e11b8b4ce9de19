"""Data-parallel training: the digits CNN on N processes, each step one captured to_static plan whose gradient
all-reduce is part of the plan; batch norm synchronised across the ranks (SyncBatchNorm).

    python -m hwadapter.distributed.launch --nproc 2 examples/train_digits_parallel.py [--epochs E] [--device TYPE]
    mpiexec -n 2 python examples/train_digits_parallel.py

Rank 0 prints, per epoch, the global batch's mean loss and the test accuracy, then checks that every replica holds
the same weights.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from rich.console import Console
from rich.table import Table

import hwadapter as hw
from hwadapter import distributed as dist
from hwadapter import nn, optimizer

from train_digits import cnn, digits

console = Console(width=max(Console().width, 100))


def main(argv=None) -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--epochs", type=int, default=3)
    args.add_argument("--batch", type=int, default=64, help="the global batch, split evenly over the ranks")
    args.add_argument("--device", default="cpu", help="device type; each rank takes index local_rank %% count")
    opts = args.parse_args(argv)
    hw.set_device(f"{opts.device}:0")
    dist.init_parallel_env()
    rank, n = dist.get_rank(), dist.get_world_size()
    x, y, tx, ty = digits()
    hw.seed(0)
    net = nn.SyncBatchNorm.convert_sync_batchnorm(cnn())
    model = hw.DataParallel(net)
    opt = optimizer.Adam(learning_rate=3e-3, parameters=model.parameters())
    loss_fn = nn.CrossEntropyLoss()

    @hw.jit.to_static
    def step(xb, yb):
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss

    per = opts.batch // n
    steps = len(y) // opts.batch
    table = Table("epoch", "mean loss (global batch)", "test accuracy", "ms / step", title=f"{n} ranks on "
                  f"{hw.get_device()} (rank 0's device), global batch {per * n}")
    rng = np.random.default_rng(1)
    for epoch in range(opts.epochs):
        order = rng.permutation(len(y))  # the same on every rank: each takes its own slice of each global batch
        model.train()
        losses, start = [], time.perf_counter()
        for s in range(steps):
            idx = order[s * opts.batch + rank * per: s * opts.batch + (rank + 1) * per]
            loss = step(hw.to_tensor(x[idx]), hw.to_tensor(y[idx]))
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
            losses.append(float(loss.numpy()))
        ms = (time.perf_counter() - start) / steps * 1e3
        model.eval()
        with hw.no_grad():
            accuracy = float((net(hw.to_tensor(tx)).numpy().argmax(1) == ty).mean())
        table.add_row(str(epoch + 1), f"{np.mean(losses):.4f}", f"{accuracy:.3f}", f"{ms:.1f}")
    flat = hw.to_tensor(np.concatenate([p.numpy().ravel() for p in net.parameters()]))
    replicas: list = []
    dist.all_gather(replicas, flat)
    differ = max(float(np.abs(r.numpy() - flat.numpy()).max()) for r in replicas)
    if rank == 0:
        console.print(table)
        console.print(f"largest difference between the {n} replicas' weights: {differ:g}"
                      + (" (identical)" if differ == 0 else ""))


if __name__ == "__main__":
    main()
