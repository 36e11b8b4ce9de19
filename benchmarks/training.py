"""Training steps: the digits MLP (64-256-256-10) and a small CNN, batch 64, Adam: hwadapter eager and to_static on
each device against PyTorch CPU eager and Paddle CPU eager, timed in the same run, interleaved (issue 23).

Every runner starts from the same weights and is checked first: its loss after a few steps must match PyTorch's
(float32 tolerance); a fast wrong step is an error, not a figure. Then rounds: per round each runner takes BLOCK
untimed-then-timed steps in turn; the table shows medians per step and the ratios the targets name:

- hwadapter eager on cpu       <= 1.5x PyTorch's eager step
- hwadapter to_static on cpu   <= 1.0x PyTorch's eager step
- to_static on opencl:0        >= 3x as fast as its own eager step
- memory: the captured CNN step's peak <= 70% of the eager step's peak on the same device (allocator peak on a
  device with its own memory, tracemalloc on cpu), measured in a fresh process per mode, above what the model,
  the optimizer and the batch hold before the first step.

    python benchmarks/training.py [--rounds N] [--device D ...] [--model mlp|cnn ...] [--no-memory]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc

import warnings

import numpy as np
from rich.console import Console
from rich.table import Table

import hwadapter as hw
from hwadapter import nn, optimizer

ROUNDS = int(os.environ.get("HWADAPTER_BENCH_ROUNDS", 7))
BLOCK = 5  # steps per runner per round (after one untimed step)
PAUSE = 0.3  # seconds of quiet before each block (see _time)
BATCH = 64
LR = 1e-3
TARGETS = {"eager_cpu": 1.5, "static_cpu": 1.0, "opencl_speedup": 3.0, "memory": 0.70}
console = Console(width=120)


# --- the models, the same in every framework --------------------------------------------------------------------
def weights(kind: str) -> dict:
    """The starting weights of `kind` (Paddle's layout: Linear weights are [in, out])."""
    rng = np.random.default_rng(0)
    if kind == "mlp":
        sizes = [64, 256, 256, 10]
        return {f"l{i}": ((rng.uniform(-1, 1, (a, b)) / np.sqrt(a)).astype("float32"), np.zeros(b, "float32"))
                for i, (a, b) in enumerate(zip(sizes, sizes[1:]))}
    return {"conv": ((rng.uniform(-1, 1, (16, 1, 3, 3)) / 3).astype("float32"), np.zeros(16, "float32")),
            "fc": ((rng.uniform(-1, 1, (256, 10)) / 16).astype("float32"), np.zeros(10, "float32"))}


def data():
    """The digits data set in batches: [(images (64, 1, 8, 8) float32 in [0, 1], labels int64)]. Steps cycle through
    them: a model trained on one batch over and over drives its gradients into subnormal numbers, which every
    framework then computes many times slower (PyTorch's CNN step grew 20x), and a benchmark measures the CPU's
    subnormal arithmetic instead of the framework."""
    from sklearn.datasets import load_digits  # lazy: only the benchmark needs scikit-learn
    d = load_digits()
    x = (d.images / 16.0).astype("float32").reshape(-1, 1, 8, 8)
    y = d.target.astype("int64")
    return [(x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, len(y) - BATCH + 1, BATCH)]


def hw_model(kind: str, w: dict):
    if kind == "mlp":
        net = nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 10))
        linears = [m for m in net if isinstance(m, nn.Linear)]
        for layer, (wt, b) in zip(linears, w.values()):
            layer.weight.set_value(wt)
            layer.bias.set_value(b)
        return net
    net = nn.Sequential(nn.Conv2D(1, 16, 3, padding=1), nn.BatchNorm2D(16), nn.ReLU(), nn.MaxPool2D(2), nn.Flatten(),
                        nn.Linear(16 * 4 * 4, 10))
    net[0].weight.set_value(w["conv"][0])
    net[0].bias.set_value(w["conv"][1])
    net[5].weight.set_value(w["fc"][0])
    net[5].bias.set_value(w["fc"][1])
    return net


class HwRunner:
    """hwadapter on one device, eager or to_static: step() runs one Adam step and returns the loss tensor."""

    def __init__(self, kind, w, device, static):
        hw.set_device(device)
        self.net = hw_model(kind, w)
        self.opt = optimizer.Adam(learning_rate=LR, parameters=self.net.parameters())
        self.loss_fn = nn.CrossEntropyLoss()
        self.batches = [(hw.to_tensor(x, device=device), hw.to_tensor(y, device=device)) for x, y in data()]
        self.i = 0
        self.step_fn = hw.jit.to_static(self._step) if static else self._step
        self.name = f"hwadapter {'to_static' if static else 'eager'} {device}"

    def _step(self, x, y):
        loss = self.loss_fn(self.net(x), y)
        loss.backward()
        self.opt.step()
        self.opt.clear_grad()
        return loss

    def step(self):
        self.i += 1
        return self.step_fn(*self.batches[self.i % len(self.batches)])

    @staticmethod
    def value(loss) -> float:
        return float(loss)  # reads it back: the step has finished on the device


class TorchRunner:
    """PyTorch eager on the CPU, or on an NVIDIA GPU (device="cuda") where its torch has CUDA."""

    def __init__(self, kind, w, device="cpu"):
        import torch  # lazy: a competitor, imported only when it runs
        torch.set_num_threads(len(os.sched_getaffinity(0)))
        self.torch = torch
        self.name = "PyTorch CPU eager" if device == "cpu" else f"PyTorch {device} eager"
        if device != "cpu" and not torch.cuda.is_available():
            raise ImportError("this torch has no CUDA")
        if kind == "mlp":
            layers = [torch.nn.Flatten(), torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                      torch.nn.ReLU(), torch.nn.Linear(256, 10)]
            self.net = torch.nn.Sequential(*layers)
            linears = [m for m in layers if isinstance(m, torch.nn.Linear)]
            pairs = list(zip(linears, w.values()))
        else:
            self.net = torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.BatchNorm2d(16, momentum=0.1),
                                           torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                           torch.nn.Linear(256, 10))
            pairs = [(self.net[0], w["conv"]), (self.net[5], w["fc"])]
        with torch.no_grad():
            for layer, (wt, b) in pairs:
                layer.weight.copy_(torch.from_numpy(wt.T.copy() if wt.ndim == 2 else wt))
                layer.bias.copy_(torch.from_numpy(b))
        self.net.to(device)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=LR)
        self.batches = [(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)) for x, y in data()]
        self.i = 0

    def step(self):
        self.i += 1
        x, y = self.batches[self.i % len(self.batches)]
        loss = self.torch.nn.functional.cross_entropy(self.net(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss

    @staticmethod
    def value(loss) -> float:
        return loss.item()


class PaddleRunner:
    name = "Paddle CPU eager"

    def __init__(self, kind, w):
        with warnings.catch_warnings():  # paddle warns about ccache on import: nothing to do with this benchmark
            warnings.simplefilter("ignore")
            import paddle  # lazy: a competitor, imported only when it runs
        paddle.set_device("cpu")
        self.paddle = paddle
        pn = paddle.nn
        if kind == "mlp":
            self.net = pn.Sequential(pn.Flatten(), pn.Linear(64, 256), pn.ReLU(), pn.Linear(256, 256), pn.ReLU(),
                                     pn.Linear(256, 10))
            linears = [m for m in self.net if isinstance(m, pn.Linear)]
            pairs = list(zip(linears, w.values()))
        else:
            self.net = pn.Sequential(pn.Conv2D(1, 16, 3, padding=1), pn.BatchNorm2D(16), pn.ReLU(), pn.MaxPool2D(2),
                                     pn.Flatten(), pn.Linear(256, 10))
            pairs = [(self.net[0], w["conv"]), (self.net[5], w["fc"])]
        for layer, (wt, b) in pairs:
            layer.weight.set_value(wt)
            layer.bias.set_value(b)
        self.opt = paddle.optimizer.Adam(learning_rate=LR, parameters=self.net.parameters())
        self.batches = [(paddle.to_tensor(x), paddle.to_tensor(y)) for x, y in data()]
        self.i = 0
        self.loss_fn = pn.CrossEntropyLoss()

    def step(self):
        self.i += 1
        x, y = self.batches[self.i % len(self.batches)]
        loss = self.loss_fn(self.net(x), y)
        loss.backward()
        self.opt.step()
        self.opt.clear_grad()
        return loss

    @staticmethod
    def value(loss) -> float:
        return float(loss)


# --- timing -------------------------------------------------------------------------------------------------------
def _time(runner) -> float:
    """Seconds per step over BLOCK steps (after a pause and one untimed step), read back at the end. The pause lets
    the previous runner's worker threads, which spin for a while after their last task (OpenMP, BLAS), go to sleep:
    on 2 cores they otherwise take this runner's cores (PyTorch's step measured 50x slower right after another)."""
    time.sleep(PAUSE)
    runner.value(runner.step())
    start = time.perf_counter()
    for _ in range(BLOCK):
        loss = runner.step()
    runner.value(loss)
    return (time.perf_counter() - start) / BLOCK


def _make(spec):
    """A runner from its spec: ("torch", kind, device), ("paddle", kind) or ("hw", kind, device, static)."""
    what, kind, *rest = spec
    w = weights(kind)
    if what == "torch":
        return TorchRunner(kind, w, *rest)
    if what == "paddle":
        return PaddleRunner(kind, w)
    return HwRunner(kind, w, *rest)


def _serve(conn, spec) -> None:
    """A runner's own process: builds it, then answers "check" (its first 3 losses) and "time" (one block) until
    "stop". Each runtime keeps its threads and libraries to itself: PyTorch, Paddle and numpy's BLAS loaded in one
    process took each other's cores (PyTorch's step measured 50x slower after hwadapter's)."""
    try:
        runner = _make(spec)
        conn.send(("ok", runner.name))
        while True:
            cmd = conn.recv()
            if cmd == "stop":
                return
            conn.send(("ok", [runner.value(runner.step()) for _ in range(3)] if cmd == "check" else _time(runner)))
    except ImportError as err:
        conn.send(("missing", str(err)))
    except Exception:  # noqa: BLE001 - reported by the parent, which stops the run
        import traceback  # lazy: only a failing runner needs it
        conn.send(("error", traceback.format_exc()))


class Remote:
    """A runner in a process of its own, driven over a pipe."""

    def __init__(self, spec):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, spec), daemon=True)
        self.process.start()
        self.name = self.ask(None)

    def ask(self, cmd):
        if cmd is not None:
            self.conn.send(cmd)
        status, value = self.conn.recv()
        if status == "missing":
            raise ImportError(value)
        if status == "error":
            raise SystemExit(f"a runner failed:\n{value}")
        return value

    def close(self):
        try:
            self.conn.send("stop")
        except OSError:
            pass
        self.process.join(10)


def bench(kind: str, devices: list, rounds: int) -> dict:
    specs = [("torch", kind, "cpu")]
    if any(d.startswith("cuda") for d in devices):
        specs.append(("torch", kind, "cuda"))  # the same GPU, where this torch has CUDA
    specs += [("paddle", kind)] + [("hw", kind, d, s) for d in devices for s in (False, True)]
    runners = []
    with console.status(f"{kind}: starting {len(specs)} runners, one process each"):
        for spec in specs:
            try:
                runners.append(Remote(spec))
            except ImportError as err:
                console.print(f"[yellow]{spec[0]} {spec[2] if len(spec) > 2 else ''}: not here ({err}): its row "
                              f"is left out")
    try:
        # every runner starts from the same weights: its first losses must be PyTorch's (the BatchNorm CNN with
        # paddle's momentum convention mapped, 0.9 <-> 0.1)
        losses = {r.name: r.ask("check") for r in runners}
        want = losses["PyTorch CPU eager"]
        for name, got in losses.items():
            if not np.allclose(got, want, rtol=2e-3, atol=2e-4):
                raise SystemExit(f"WRONG: {name} losses {got} != PyTorch's {want}")
        times = {r.name: [] for r in runners}
        with console.status(f"{kind}: timing") as status:
            for i in range(rounds):
                status.update(f"{kind}: round {i + 1}/{rounds}")
                for r in runners:
                    times[r.name].append(r.ask("time"))
    finally:
        for r in runners:
            r.close()
    return {name: statistics.median(t) for name, t in times.items()}


# --- memory (a fresh process per mode) ----------------------------------------------------------------------------
def _array_bytes(snapshot) -> int:
    """Bytes of numpy data in a tracemalloc snapshot (numpy traces its buffers in a domain of their own)."""
    only = snapshot.filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
    return sum(stat.size for stat in only.statistics("filename"))


def memory_child(kind: str, device: str, static: bool) -> dict:
    """In this process: one step's peak, counting what the steps keep between calls (a plan's buffers, the
    optimizer's state) and not what model and batch held before the first step. On a device with its own memory,
    its allocator's peak; on cpu, tracemalloc's (what a step keeps: numpy data only, not the trace's Python
    objects; its transient peak: everything, the eager tape's nodes too)."""
    host = device == "cpu"
    if host:
        tracemalloc.start()
    runner = HwRunner(kind, weights(kind), device, static)
    if host:
        before = _array_bytes(tracemalloc.take_snapshot())
    else:
        before = hw.device.memory_stats(device)["allocated_bytes"]
    runner.value(runner.step())  # the first step traces, plans and makes the optimizer's state
    runner.value(runner.step())
    if host:
        kept = _array_bytes(tracemalloc.take_snapshot()) - before
        now = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
    else:
        now = hw.device.memory_stats(device)["allocated_bytes"]
        kept = now - before
        hw.device.reset_peak_memory_stats(device)
    runner.value(runner.step())
    peak = tracemalloc.get_traced_memory()[1] if host else hw.device.memory_stats(device)["peak_allocated_bytes"]
    return {"kept": kept, "transient": peak - now, "step": kept + peak - now}


def memory(kind: str, device: str) -> dict:
    out = {}
    for static in (False, True):
        cmd = [sys.executable, __file__, "--memory-child", kind, device, str(int(static))]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode:
            raise SystemExit(f"memory child failed:\n{proc.stderr[-3000:]}")
        out["static" if static else "eager"] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


# --- report -------------------------------------------------------------------------------------------------------
def report(kind: str, med: dict, devices: list) -> list:
    torch_t = med["PyTorch CPU eager"]
    table = Table(title=f"{kind}: ms per training step (batch {BATCH}, Adam), medians")
    table.add_column("runner")
    table.add_column("ms/step", justify="right")
    table.add_column("x PyTorch", justify="right")
    for name, t in med.items():
        table.add_row(name, f"{t * 1e3:.3f}", f"{t / torch_t:.2f}")
    console.print(table)
    verdicts = []
    if "cpu" in devices:
        e, s = med["hwadapter eager cpu"] / torch_t, med["hwadapter to_static cpu"] / torch_t
        verdicts += [(f"{kind} eager cpu / PyTorch", e, f"<= {TARGETS['eager_cpu']}", e <= TARGETS["eager_cpu"]),
                     (f"{kind} to_static cpu / PyTorch", s, f"<= {TARGETS['static_cpu']}", s <= TARGETS["static_cpu"])]
    for d in devices:
        if d.startswith("cuda") and "PyTorch cuda eager" in med:
            r = med[f"hwadapter to_static {d}"] / med["PyTorch cuda eager"]
            verdicts.append((f"{kind} to_static {d} / PyTorch cuda eager", r, "(reported)", True))
        if d != "cpu":
            sp = med[f"hwadapter eager {d}"] / med[f"hwadapter to_static {d}"]
            verdicts.append((f"{kind} {d} to_static speed-up over eager", sp, f">= {TARGETS['opencl_speedup']}",
                             sp >= TARGETS["opencl_speedup"]))
    return verdicts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--device", action="append")
    ap.add_argument("--model", action="append", choices=["mlp", "cnn"])
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.memory_child:
        kind, device, static = args.memory_child
        print(json.dumps(memory_child(kind, device, bool(int(static)))))
        return 0
    available = hw.device.get_available_device()
    devices = [d for d in (args.device or ["cpu", "opencl:0"]) if d == "cpu" or d in available]
    console.print(f"[bold]training benchmark[/] on {platform.node()} ({os.cpu_count()} cores), devices: "
                  f"{', '.join(devices)}, {args.rounds} rounds of {BLOCK} steps")
    verdicts = []
    for kind in args.model or ["mlp", "cnn"]:
        med = bench(kind, devices, args.rounds)
        verdicts += report(kind, med, devices)
    if not args.no_memory:
        table = Table(title="cnn: memory of one training step above what model, optimizer and batch hold")
        for col in ("device", "eager step (KiB)", "to_static step (KiB)", "to_static / eager"):
            table.add_column(col, justify="right")
        for d in devices:
            m = memory("cnn", d)
            ratio = m["static"]["step"] / max(m["eager"]["step"], 1)
            table.add_row(d, f"{m['eager']['step'] / 1024:.0f}", f"{m['static']['step'] / 1024:.0f}", f"{ratio:.2f}")
            verdicts.append((f"cnn {d} captured step peak / eager step peak", ratio, f"<= {TARGETS['memory']}",
                             ratio <= TARGETS["memory"]))
        console.print(table)
    table = Table(title="targets")
    for col in ("measure", "value", "target", "met"):
        table.add_column(col)
    for name, value, target, ok in verdicts:
        table.add_row(name, f"{value:.2f}", target, "[green]yes" if ok else "[red]NO")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
