"""Collectives on MPI (issue 24): all-reduce of float32 tensors through hwadapter on cpu:0 and opencl:0 against
mpi4py's own `Allreduce` on numpy buffers, and data-parallel training steps against one rank, timed in the same run.

The script starts itself under mpiexec (the one beside this Python) with `--worker`; the ranks time, rank 0 writes
the figures to a file, and this process prints the tables. Per round, per size: mpi4py `Allreduce(send, recv)` (a
separate output, as hwadapter's eager all_reduce writes a new array), then hwadapter's `dist.all_reduce(t)` on each
device; a barrier before every timed block, each block calibrated to about BLOCK_S seconds, its time the slowest
rank's. Figures are the best of the rounds (the machine's other work only ever adds time). Bandwidth as nccl-tests
reports it: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n. At 4 KiB each call is also timed on its own and
the median call reported: on a shared machine a rank preempted for a time slice stalls every rank, and those few
calls decide a block's mean.

Targets (PASS/MISS):
- cpu:0 (host-addressable memory): busbw >= 0.9x mpi4py's from 1 MiB up
- cpu:0: the median call at 4 KiB <= 2x mpi4py's (with the cross-rank shape/dtype check, the default, and
  without it, each measured in the same run)
- opencl:0 is staged through host buffers: its ratio is reported, no target
- data parallel: the step on N ranks, each with 1/N of the batch, against one process with the same per-rank batch
  (reported; 1.0 would be free communication). The ranks are bound to a core each (mpiexec -bind-to core) and the
  one-process run is rank 0 alone while the others sleep, so both have the same cores per process
- with cupy and a cuda device: hwadapter's all-reduce on cuda:0 against cupy's NCCL bindings (reported)

    python benchmarks/collectives.py [--nproc 2] [--devices cpu:0,opencl:0] [--rounds 3] [--sizes 4K,1M,64M]
                                     [--check/--no-check] [--quick]
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
QUICK_SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20]
ROUNDS, QUICK_ROUNDS = 5, 2
BLOCK_S = 0.15  # seconds per timed block
MIN_CALLS = 3  # calls per timed block at least
PAUSE = 0.2  # seconds of quiet before each timed block (see Ranks.block)
TARGET_BW, TARGET_BW_FROM, TARGET_SMALL, SMALL = 0.9, 1 << 20, 2.0, 4 << 10
DP_GLOBAL_BATCH, DP_SHAPE, DP_LR, DP_BATCHES = 64, (256, 512, 10), 0.01, 8
console = Console(width=120)
progress_console = Console(stderr=True)  # progress on stderr: report.py keeps stdout (the tables) only


def _size(text: str) -> int:
    """'4K', '1M', '4096' -> bytes."""
    text = text.strip().upper().rstrip("B").rstrip("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * scale)


def _label(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def busbw(nbytes: int, seconds: float, n: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce, GB/s."""
    return nbytes / seconds / 1e9 * 2 * (n - 1) / n


# --- the ranks' side (under mpiexec) ------------------------------------------------------------------------------
class Ranks:
    """mpi4py's own communicator of the job (apart from hwadapter's), timing blocks and reporting progress."""

    def __init__(self, total_steps: int):
        self.MPI = importlib.import_module("mpi4py.MPI")
        self.comm = self.MPI.COMM_WORLD.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.step, self.total = 0, total_steps

    def progress(self, text: str, advance: int = 1) -> None:
        self.step += advance
        if self.rank == 0:
            print(f"PROGRESS {self.step} {self.total} {text}", flush=True)

    def block(self, call, sync, calls: int, pause: float = PAUSE) -> float:
        """Seconds per call over `calls` calls after a pause and a barrier, the slowest rank's. The pause lets the
        previous runner's threads (PoCL's, the CPU device's), which spin a while after their last task, go to sleep:
        on 2 cores they otherwise take the cores the ranks' MPI calls spin on."""
        time.sleep(pause)
        self.comm.Barrier()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        sync()
        return self.comm.allreduce((time.perf_counter() - start) / calls, op=self.MPI.MAX)

    def calls(self, call, calls: int, pause: float = PAUSE) -> float:
        """The median of `calls` calls timed one by one, the slowest rank's: a call's own cost without the few that
        another process on these cores preempted (a rank descheduled for a time slice holds every rank up, and a
        1% of calls 5 ms long decide a block's mean at 4 KiB)."""
        time.sleep(pause)
        self.comm.Barrier()
        each = np.empty(calls)
        clock = time.perf_counter
        for i in range(calls):
            start = clock()
            call()
            each[i] = clock() - start
        return self.comm.allreduce(float(np.median(each)), op=self.MPI.MAX)

    def calibrate(self, call, sync) -> int:
        """Calls per timed block: about BLOCK_S seconds, at least MIN_CALLS (the same number on every rank)."""
        calls = 1
        while True:
            per = self.block(call, sync, calls, pause=0)
            if per * calls >= BLOCK_S / 8 or calls >= 1 << 16:
                return max(MIN_CALLS, int(BLOCK_S / per))
            calls *= 4

    def polite_barrier(self) -> None:
        """A barrier that sleeps while it waits: a rank sitting out a single-process block leaves the cores alone."""
        req = self.comm.Ibarrier()
        while not req.Test():
            time.sleep(0.0005)


def _sync(hw, dev: str):
    """What ends a timed block on `dev`: nothing on host memory, else waiting for the device's queue."""
    if hw.device.devices.get(dev).host_memory:
        return lambda: None
    return lambda: hw.device.synchronize(dev)


def _pattern(count: int, rank: int) -> np.ndarray:
    return (np.arange(count) % 7 + rank).astype(np.float32)


def allreduce_worker(args) -> dict:
    """Every size on every device, interleaved with mpi4py, plus the 4 KiB call with the check the other way."""
    import hwadapter as hw
    from hwadapter import distributed as dist
    from hwadapter.distributed import env

    hw.set_device("cpu")
    world = dist.init_parallel_env(check=args.check)
    available = hw.device.get_available_device()
    devices = [d for d in args.devices if d in available]
    sizes = args.sizes
    r = Ranks(total_steps=len(sizes) + args.rounds * len(sizes))
    n = r.size
    # The same ranks with the check the other way, for the 4 KiB rows: a group's communicators take the world's
    # setting when they are made (on a group's first call on a device), so the setting is flipped around those calls.
    w = env.world()
    w.check = not args.check
    other = dist.new_group(list(range(n)))
    for dev in devices:
        dist.all_reduce(hw.to_tensor(np.zeros(1, np.float32), device=dev), group=other)
    w.check = args.check

    runners = {}  # (size, name) -> (call, sync, calls)
    for nbytes in sizes:
        count = nbytes // 4
        expect = n * (np.arange(count) % 7).astype(np.float32) + sum(range(n))
        send, recv = np.zeros(count, np.float32), np.empty(count, np.float32)
        mine = [("mpi4py", lambda s=send, o=recv: r.comm.Allreduce(s, o), lambda: None)]
        probe = _pattern(count, r.rank)
        r.comm.Allreduce(probe, recv)
        if not np.array_equal(recv, expect):
            raise SystemExit(f"WRONG: mpi4py's Allreduce of {_label(nbytes)} differs from the sum")
        for dev in devices:
            t = hw.to_tensor(_pattern(count, r.rank), device=dev)
            dist.all_reduce(t)
            if not np.array_equal(t.numpy(), expect):
                raise SystemExit(f"WRONG: hwadapter's all_reduce of {_label(nbytes)} on {dev} differs from the sum")
            t = hw.to_tensor(np.zeros(count, np.float32), device=dev)  # zeros stay zeros: no overflow over calls
            mine.append((f"hw {dev}", lambda t=t: dist.all_reduce(t), _sync(hw, dev)))
            if nbytes == SMALL:
                mine.append((f"hw {dev} other", lambda t=t: dist.all_reduce(t, group=other), _sync(hw, dev)))
        for name, call, sync in mine:
            runners[nbytes, name] = (call, sync, r.calibrate(call, sync))
        r.progress(f"calibrated {_label(nbytes)}")
    times = {f"{k[0]} {k[1]}": [] for k in runners}
    medians = {f"{k[0]} {k[1]}": [] for k in runners if k[0] == SMALL}
    for i in range(args.rounds):
        for nbytes in sizes:
            for (size, name), (call, sync, calls) in runners.items():
                if size == nbytes:
                    times[f"{size} {name}"].append(r.block(call, sync, calls))
                    if size == SMALL:  # (a staged call may leave its last upload queued: its median can miss it)
                        medians[f"{size} {name}"].append(r.calls(call, calls))
            r.progress(f"round {i + 1}/{args.rounds}: {_label(nbytes)}")
    comms = {dev: repr(world.communicator(hw.device.devices.get(dev))) for dev in devices}
    return {"ranks": n, "devices": devices, "missing": [d for d in args.devices if d not in available],
            "sizes": sizes, "times": times, "medians": medians, "check": args.check, "communicators": comms,
            "host": {dev: hw.device.devices.get(dev).host_memory for dev in devices}}


def _dp_net(hw, nn):
    a, b, c = DP_SHAPE
    hw.seed(0)
    return nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, c))


class StepRunner:
    """One training step of the MLP with SGD, data parallel or alone, eager or to_static."""

    def __init__(self, hw, nn, optimizer, parallel: bool, static: bool, rank: int, n: int):
        net = _dp_net(hw, nn)
        self.model = hw.DataParallel(net) if parallel else net
        self.net = net
        self.opt = optimizer.SGD(learning_rate=DP_LR, parameters=self.model.parameters())
        self.loss_fn = nn.CrossEntropyLoss()
        per = DP_GLOBAL_BATCH // n
        rng = np.random.default_rng(1)
        xs = rng.standard_normal((DP_BATCHES, DP_GLOBAL_BATCH, DP_SHAPE[0])).astype(np.float32)
        ys = rng.integers(0, DP_SHAPE[2], (DP_BATCHES, DP_GLOBAL_BATCH))
        part = slice(rank * per, (rank + 1) * per)  # alone: rank 0's part, the same per-rank batch
        self.batches = [(hw.to_tensor(x[part]), hw.to_tensor(y[part])) for x, y in zip(xs, ys)]
        self.fn = hw.jit.to_static(self._step) if static else self._step
        self.i = 0
        self.name = f"{'data parallel' if parallel else 'one process'} {'to_static' if static else 'eager'}"

    def _step(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.opt.clear_grad()
        return loss

    def step(self):
        self.i += 1
        self.loss = self.fn(*self.batches[self.i % DP_BATCHES])
        return self.loss

    def finish(self) -> float:
        return float(self.loss)  # reads it back: the step has finished


def dp_worker(args) -> dict:
    """Data-parallel steps on every rank against rank 0 alone (the others sleeping), interleaved."""
    import hwadapter as hw
    from hwadapter import distributed as dist
    from hwadapter import nn, optimizer

    hw.set_device("cpu")
    dist.init_parallel_env(check=args.check)
    r = Ranks(total_steps=4 + args.rounds * 4)
    runners, failed = [], {}
    for parallel in (True, False):
        for static in (False, True):
            runner, error = None, ""
            try:
                if parallel or r.rank == 0:
                    runner = StepRunner(hw, nn, optimizer, parallel, static, r.rank, r.size)
                    runner.step()
                    runner.step()
                    runner.finish()
            except Exception as err:  # noqa: BLE001 - a mode that does not work is reported, the others still run
                error = f"{type(err).__name__}: {err}".splitlines()[0][:200]
            errors = r.comm.allgather(error)
            name = f"{'data parallel' if parallel else 'one process'} {'to_static' if static else 'eager'}"
            if any(errors):
                failed[name] = next(e for e in errors if e)
            else:
                runners.append((name, parallel, runner))
            r.progress(f"warmed up {name}")
    calls = {}

    def timed(parallel, runner, steps):
        if parallel:
            return r.block(runner.step, runner.finish, steps)
        time.sleep(PAUSE)
        r.comm.Barrier()
        per = None
        if r.rank == 0:
            start = time.perf_counter()
            for _ in range(steps):
                runner.step()
            runner.finish()
            per = (time.perf_counter() - start) / steps
        r.polite_barrier()
        return r.comm.bcast(per, root=0)

    for name, parallel, runner in runners:
        per = timed(parallel, runner, 1)
        calls[name] = max(MIN_CALLS, int(2 * BLOCK_S / per))
    times = {name: [] for name, _, _ in runners}
    for i in range(args.rounds):
        for name, parallel, runner in runners:
            times[name].append(timed(parallel, runner, calls[name]))
            r.progress(f"round {i + 1}/{args.rounds}: {name}")
    replicas = {}
    for name, parallel, runner in runners:  # a fast wrong step is an error, not a figure
        if parallel:
            flat = np.concatenate([p.numpy().ravel() for p in runner.net.parameters()])
            everyone = r.comm.allgather(flat)
            replicas[name] = max(float(np.abs(e - everyone[0]).max()) for e in everyone)
    return {"ranks": r.size, "per_rank_batch": DP_GLOBAL_BATCH // r.size, "times": times, "failed": failed,
            "replicas": replicas, "check": args.check}


def cuda_worker(args) -> dict:
    """hwadapter's all-reduce on cuda against cupy's NCCL bindings (one GPU per rank), interleaved."""
    import cupy
    from cupy.cuda import nccl

    import hwadapter as hw
    from hwadapter import distributed as dist

    hw.set_device("cuda")
    dist.init_parallel_env(check=args.check)
    dev = dist.ParallelEnv().device_id
    cupy.cuda.Device(dev).use()
    r = Ranks(total_steps=len(args.sizes) * (1 + args.rounds))
    uid = r.comm.bcast(nccl.get_unique_id() if r.rank == 0 else None, root=0)
    nc = nccl.NcclCommunicator(r.size, uid, r.rank)
    stream = cupy.cuda.Stream(non_blocking=True)
    name = f"cuda:{dev}"
    runners = {}
    for nbytes in args.sizes:
        count = nbytes // 4
        send, recv = cupy.zeros(count, cupy.float32), cupy.empty(count, cupy.float32)
        t = hw.to_tensor(np.zeros(count, np.float32), device=name)
        mine = [("cupy nccl", lambda s=send, o=recv, c=count: nc.allReduce(s.data.ptr, o.data.ptr, c, nccl.NCCL_FLOAT32,
                                                                          nccl.NCCL_SUM, stream.ptr),
                 stream.synchronize),
                (f"hw {name}", lambda t=t: dist.all_reduce(t), lambda: hw.device.synchronize(name))]
        for label, call, sync in mine:
            runners[nbytes, label] = (call, sync, r.calibrate(call, sync))
        r.progress(f"cuda: calibrated {_label(nbytes)}")
    times = {f"{k[0]} {k[1]}": [] for k in runners}
    for i in range(args.rounds):
        for nbytes in args.sizes:
            for (size, label), (call, sync, calls) in runners.items():
                if size == nbytes:
                    times[f"{size} {label}"].append(r.block(call, sync, calls))
            r.progress(f"cuda round {i + 1}/{args.rounds}: {_label(nbytes)}")
    comm = dist.get_group().communicator(hw.device.devices.get(name))
    return {"ranks": r.size, "device": name, "sizes": args.sizes, "times": times, "communicator": repr(comm)}


def worker(args) -> int:
    part = {"allreduce": allreduce_worker, "dp": dp_worker, "cuda": cuda_worker}[args.worker]
    result = part(args)
    if importlib.import_module("mpi4py.MPI").COMM_WORLD.Get_rank() == 0:
        Path(args.out).write_text(json.dumps(result))
    return 0


# --- this process: start the ranks, print the tables --------------------------------------------------------------
def mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def launch(part: str, nproc: int, args, progress: Progress, timeout: float) -> dict:
    """Run the `part` worker on `nproc` ranks; its results (rank 0's), progress shown as it comes."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    sizes = ",".join(str(s) for s in args.sizes)
    bind = ["-bind-to", args.dp_bind] if part == "dp" and args.dp_bind != "none" else []
    cmd = [mpiexec(), *bind, "-n", str(nproc), sys.executable, str(Path(__file__).resolve()), "--worker", part,
           "--out", out, "--rounds", str(args.rounds), "--sizes", sizes, "--devices", ",".join(args.devices),
           "--check" if args.check else "--no-check"]
    task = progress.add_task(f"{part} on {nproc} ranks: starting", total=None)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    killer = threading.Timer(timeout, proc.kill)  # a hung job ends; mpiexec takes its ranks with it
    killer.start()
    try:
        for line in proc.stdout:
            if line.startswith("PROGRESS "):
                _, done, total, text = line.rstrip("\n").split(" ", 3)
                progress.update(task, completed=int(done), total=int(total), description=f"{part}: {text}")
            else:
                progress_console.print(line.rstrip("\n"), markup=False, highlight=False)
        status = proc.wait()
    finally:
        killer.cancel()
    progress.remove_task(task)
    try:
        if status:
            raise SystemExit(f"the {part} ranks failed (exit status {status}{', timed out' if status < 0 else ''}); "
                             f"their output is above")
        return json.loads(Path(out).read_text())
    finally:
        os.unlink(out)


def _verdict(ok: bool) -> str:
    return "[bold green]PASS[/]" if ok else "[bold red]MISS[/]"


def _table(title: str, columns: list[str]) -> Table:
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right")
    return t


def report_allreduce(res: dict, rounds: int) -> list:
    n, best = res["ranks"], {k: min(v) for k, v in res["times"].items()}
    verdicts = []
    for dev in res["devices"]:
        host = res["host"][dev]
        title = (f"all-reduce float32 on {dev} ({'host memory, zero-copy' if host else 'staged through the host'}; "
                 f"{res['communicators'][dev]}), {n} ranks, best of {rounds} rounds")
        t = _table(title, ["size", "mpi4py µs", "mpi4py busbw GB/s", "hwadapter µs", "hwadapter busbw GB/s",
                           "bw x mpi4py", "target", "met"])
        for nbytes in res["sizes"]:
            m, h = best[f"{nbytes} mpi4py"], best[f"{nbytes} hw {dev}"]
            ratio = m / h
            if host and nbytes >= TARGET_BW_FROM:
                target, met = f">= {TARGET_BW}", _verdict(ratio >= TARGET_BW)
                verdicts.append((f"cpu busbw x mpi4py at {_label(nbytes)}", ratio, target, ratio >= TARGET_BW))
            else:
                target, met = ("(staged)" if not host else "-"), ""
            t.add_row(_label(nbytes), f"{m * 1e6:.1f}", f"{busbw(nbytes, m, n):.3f}", f"{h * 1e6:.1f}",
                      f"{busbw(nbytes, h, n):.3f}", f"{ratio:.2f}", target, met)
        console.print(t)
    if SMALL in res["sizes"]:
        med = {k: min(v) for k, v in res["medians"].items()}
        m, mm = best[f"{SMALL} mpi4py"], med[f"{SMALL} mpi4py"]
        t = _table(f"time per call at {_label(SMALL)}, hwadapter with and without the cross-rank shape/dtype check, "
                   f"{n} ranks, best of {rounds} rounds: the median call (target) and the block's mean (preempted "
                   f"calls included)", ["runner", "median µs", "x mpi4py", "µs over mpi4py", "mean µs", "x mpi4py",
                                        "target", "met"])
        t.add_row("mpi4py Allreduce(send, recv)", f"{mm * 1e6:.1f}", "1.00", "0.0", f"{m * 1e6:.1f}", "1.00", "", "")
        for dev in res["devices"]:
            for check, key in ((res["check"], f"{SMALL} hw {dev}"), (not res["check"], f"{SMALL} hw {dev} other")):
                h, hm = best[key], med[key]
                ratio = hm / mm
                on = "on" if check else "off"
                if res["host"][dev]:
                    target, met = f"<= {TARGET_SMALL}", _verdict(ratio <= TARGET_SMALL)
                    verdicts.append((f"cpu median call x mpi4py at {_label(SMALL)}, check {on}", ratio, target,
                                     ratio <= TARGET_SMALL))
                else:
                    target, met = "(staged)", ""
                t.add_row(f"hwadapter {dev}, check {on}", f"{hm * 1e6:.1f}", f"{ratio:.2f}", f"{(hm - mm) * 1e6:.1f}",
                          f"{h * 1e6:.1f}", f"{h / m:.2f}", target, met)
        console.print(t)
    for dev in res["missing"]:
        console.print(f"[yellow]{dev}: not a device here; its rows are left out")
    return verdicts


def report_dp(res: dict, rounds: int) -> None:
    best = {k: min(v) for k, v in res["times"].items()}
    n, per = res["ranks"], res["per_rank_batch"]
    t = _table(f"data-parallel training step, MLP {'-'.join(map(str, DP_SHAPE))}, SGD, cpu, global batch "
               f"{DP_GLOBAL_BATCH}: {n} ranks x {per} against one process with {per}, best of {rounds} rounds",
               ["mode", f"{n} ranks ms/step", "one process ms/step", f"{n} ranks / one", "replicas differ by"])
    for mode in ("eager", "to_static"):
        dp, one = best.get(f"data parallel {mode}"), best.get(f"one process {mode}")
        ratio = f"{dp / one:.2f}" if dp and one else "-"
        differ = res["replicas"].get(f"data parallel {mode}")
        t.add_row(mode, f"{dp * 1e3:.3f}" if dp else "failed", f"{one * 1e3:.3f}" if one else "failed", ratio,
                  f"{differ:.1e}" if differ is not None else "-")
    console.print(t)
    for name, error in res["failed"].items():
        console.print(f"[yellow]{name}: did not run: {error}")
    for name, differ in res["replicas"].items():
        if differ > 1e-5:
            raise SystemExit(f"WRONG: {name}: the ranks' weights differ by {differ:g} after training")


def report_cuda(res: dict, rounds: int) -> None:
    n, dev, best = res["ranks"], res["device"], {k: min(v) for k, v in res["times"].items()}
    t = _table(f"all-reduce float32 on {dev} ({res['communicator']}) against cupy's NCCL, {n} ranks, best of "
               f"{rounds} rounds", ["size", "cupy µs", "cupy algbw GB/s", "hwadapter µs", "hwadapter algbw GB/s",
                                    "busbw x cupy"])
    for nbytes in res["sizes"]:
        c, h = best[f"{nbytes} cupy nccl"], best[f"{nbytes} hw {dev}"]
        t.add_row(_label(nbytes), f"{c * 1e6:.1f}", f"{nbytes / c / 1e9:.2f}", f"{h * 1e6:.1f}",
                  f"{nbytes / h / 1e9:.2f}", f"{c / h:.2f}")
    console.print(t)
    if n == 1:
        console.print("one rank (one GPU): busbw is 0 by nccl-tests' formula; algbw shows the per-call cost")


def cuda_ranks(nproc: int) -> tuple[int, str]:
    """(ranks for the cuda part, or 0 with why it is skipped)."""
    if importlib.util.find_spec("cupy") is None:
        return 0, "cupy is not installed"
    import hwadapter as hw
    gpus = hw.device.device_count("cuda") if "cuda" in hw.device.get_all_device_type() else 0
    if gpus < 1:
        return 0, "no cuda device in hwadapter here"
    return min(nproc, gpus), ""  # NCCL refuses two ranks on one GPU


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--devices", default="cpu:0,opencl:0")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--sizes", help="comma-separated byte counts, K/M suffixes (default 4K..64M, powers of 4)")
    ap.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                    help="hwadapter's cross-rank shape/dtype check before each call (the default); the 4 KiB row is "
                         "measured both ways regardless")
    ap.add_argument("--quick", action="store_true", help=f"sizes {','.join(_label(s) for s in QUICK_SIZES)}, "
                                                          f"{QUICK_ROUNDS} rounds: a smoke run")
    ap.add_argument("--dp-bind", default="core", help="mpiexec's -bind-to for the data-parallel ranks (none: "
                                                      "unbound): a core each, as the one-process run has")
    ap.add_argument("--no-dp", action="store_true", help="leave out the data-parallel steps")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds each mpiexec job may take")
    ap.add_argument("--worker", choices=["allreduce", "dp", "cuda"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    args.sizes = [_size(s) for s in args.sizes.split(",")] if args.sizes else (QUICK_SIZES if args.quick else SIZES)
    args.rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    if args.worker:
        return worker(args)
    if mpiexec() is None or importlib.util.find_spec("mpi4py") is None:
        console.print("no mpiexec or mpi4py here. Fix: pip install 'hwadapter[mpi]' (MPICH and mpi4py from PyPI)")
        return 1
    console.print(f"[bold]collectives benchmark[/] on {platform.node()} ({os.cpu_count()} cores, load average "
                  f"{os.getloadavg()[0]:.2f}), {args.nproc} ranks, devices {', '.join(args.devices)}, {args.rounds} "
                  f"rounds, check {'on' if args.check else 'off'}")
    console.print(f"targets: cpu busbw >= {TARGET_BW}x mpi4py's from {_label(TARGET_BW_FROM)}; cpu time per call at "
                  f"{_label(SMALL)} <= {TARGET_SMALL}x mpi4py's; opencl:0 staged through the host: reported")
    verdicts = []
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=progress_console, transient=True) as progress:
        res = launch("allreduce", args.nproc, args, progress, args.timeout)
        verdicts += report_allreduce(res, args.rounds)
        if not args.no_dp:
            report_dp(launch("dp", args.nproc, args, progress, args.timeout), args.rounds)
        ranks, why = cuda_ranks(args.nproc)
        if ranks:
            try:
                report_cuda(launch("cuda", ranks, args, progress, args.timeout), args.rounds)
            except SystemExit as err:  # the GPU part is a guest here: the figures above stand without it
                console.print(f"[red]cuda: failed: {err}")
        else:
            console.print(f"cuda: skipped ({why})")
    console.print(f"load average at the end: {os.getloadavg()[0]:.2f} (other work on these cores stalls every rank)")
    t = _table("targets", ["measure", "value", "target", "met"])
    for name, value, target, ok in verdicts:
        t.add_row(name, f"{value:.2f}", target, _verdict(ok))
    console.print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
