"""Per-op overhead of a small `add` and the latency of an MLP and a small CNN on a bridged Paddle device, against
Paddle's own CPU in the same run.

    hwadapter paddle install cdemo --dir /tmp/pd
    CUSTOM_DEVICE_ROOT=/tmp/pd python benchmarks/paddle_overhead.py [cdemo:0]

With the kernels library installed, `add` (float32) on the device is a phi kernel calling the device library's C
kernel; `subtract` has no kernel in cdemo, so it shows the price of Paddle's CPU fallback (its kernel plus the copies
through the device library) in the same run. The MLP (Linear, ReLU) runs matmul and add on the device's kernels and
relu through the fallback. The small CNN (tests/test_paddle_reference.py's: Conv2D, BatchNorm2D, ReLU, MaxPool2D,
Conv2D, ReLU, Flatten, Linear; batch 2, 3x12x12) runs conv2d, pool2d, add and matmul on the device's kernels where it
has them (hwa_cpu: the cpu plugin's Python kernels), batch_norm and relu through the fallback. Installed with
--runtime-only, every op on the device falls back.

Training steps (issue 25): `python benchmarks/paddle_overhead.py train [TYPE ...]` (default hwa_cpu opencl cdemo;
CUSTOM_DEVICE_ROOT the folder `hwadapter paddle install cpu opencl cdemo --dir DIR` filled; cdemo after `pip install
examples/native_plugin`, types not installed there are skipped, saying so) times one step (forward, cross-entropy,
backward, optimizer) of the MLP (batch 32) and the CNN (batch norm in training mode, batch 2), with SGD and with
Adam, eager and with the model under to_static, on `TYPE:0` and on Paddle's CPU in the same child, interleaved
(best of 3 rounds). Each type runs in its own children with a folder holding only its shim (Paddle 3.3 runs static
graphs on one custom type per process), one child per mode, so a to_static that fails or hangs leaves eager's
figures. A second child per mode runs the same steps under `hwadapter paddle trace` (hwadapter_paddle.trace) and
counts the kernels that fell back in a step and the calls to Paddle's CPU per step (static programs: their CPU ops,
each run once a step). Then the 2-rank data-parallel MLP step against 1 rank (`hwadapter paddle launch`; alone:
`paddle_overhead.py dp [TYPE]`).

Under to_static, Paddle's executor starts and joins a thread for each device event between a device op and a
fallback op (docs/paddle-bridge.md, Limits): compare a run with FLAGS_new_executor_serial_run=1 in the environment.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import paddle
from rich.progress import track

sys.path.insert(0, str(Path(__file__).parent))
from _util import best_seconds, table  # noqa: E402


def mlp(train: bool = False):
    """The MLP (64-256-256-10, ReLU; eval mode unless `train`), seeded alike on every device."""
    paddle.seed(0)
    net = paddle.nn.Sequential(paddle.nn.Linear(64, 256), paddle.nn.ReLU(), paddle.nn.Linear(256, 256),
                               paddle.nn.ReLU(), paddle.nn.Linear(256, 10))
    net.train() if train else net.eval()
    return net


def cnn(train: bool = False):
    """The small CNN of tests/test_paddle_reference.py (eval mode unless `train`) and its input, on the current
    device."""
    paddle.seed(11)
    net = paddle.nn.Sequential(paddle.nn.Conv2D(3, 8, 3, padding=1), paddle.nn.BatchNorm2D(8), paddle.nn.ReLU(),
                               paddle.nn.MaxPool2D(2), paddle.nn.Conv2D(8, 4, 3), paddle.nn.ReLU(),
                               paddle.nn.Flatten(), paddle.nn.Linear(4 * 4 * 4, 5))
    net.train() if train else net.eval()
    return net, paddle.to_tensor(np.random.default_rng(1).standard_normal((2, 3, 12, 12)).astype("float32"))


def cases():
    """(name, fn) on the current device: each a call to time."""
    a = paddle.to_tensor(np.ones(16, "float32"))
    b = paddle.to_tensor(np.ones(16, "float32"))
    net, static_net = mlp(), paddle.jit.to_static(mlp(), full_graph=True)  # to_static converts in place: its own
    x = paddle.to_tensor(np.random.default_rng(0).standard_normal((32, 64)).astype("float32"))
    cnn_net, image = cnn()
    return [("add float32[16]", lambda: paddle.add(a, b)), ("subtract float32[16]", lambda: paddle.subtract(a, b)),
            ("MLP eager", lambda: net(x)), ("MLP to_static", lambda: static_net(x)),
            ("MLP + .numpy()", lambda: net(x).numpy()), ("CNN eager", lambda: cnn_net(image))]


def main(device: str) -> None:
    types = paddle.device.get_all_custom_device_type()
    print(f"paddle {paddle.__version__}; custom devices {types}")
    if device.split(":")[0] not in types:
        sys.exit(f"{device} is not a Paddle device in this process (custom devices: {types}). Fix: `hwadapter paddle "
                 f"install <type> --dir DIR` (cdemo: after `pip install examples/native_plugin`), then run with "
                 f"CUSTOM_DEVICE_ROOT=DIR")
    seconds = {}
    for place in ("cpu", device):
        paddle.set_device(place)
        with paddle.no_grad():
            for name, fn in track(cases(), description=f"timing on {place}", transient=True):
                seconds[place, name] = best_seconds(fn)
    rows = [[name, f"{seconds['cpu', name] * 1e6:.1f}", f"{seconds[device, name] * 1e6:.1f}",
             f"{seconds[device, name] / seconds['cpu', name]:.1f}x"] for place, name in seconds if place == "cpu"]
    table(f"{device} against Paddle's CPU (µs per call, best of 5)", ["", "Paddle CPU", device, "ratio"], rows)
    print("On the device, add and subtract run a registered kernel where `hwadapter paddle status` lists one (cdemo: "
          "a C kernel for add only, so its subtract shows Paddle's CPU fallback), else the fallback.")


# ---- training steps (`train`): each device type in its own child process, against Paddle's CPU there ----

TRAIN_TYPES = ("hwa_cpu", "opencl", "cdemo")
MODELS, OPTIMIZERS, MODES = ("MLP", "CNN"), ("SGD", "Adam"), ("eager", "to_static")
TRACED_STEPS = 3
CHILD_TIMEOUT = 300  # seconds a child may take (a device's to_static may hang: the rest still reports)


def train_step(model: str, optimizer: str, mode: str):
    """One training step's call (forward, cross-entropy, backward, optimizer step) of a fresh model on the current
    device: the MLP on a batch of 32, the CNN (batch norm in training mode) on its batch of 2."""
    if model == "MLP":
        net = mlp(train=True)
        x = paddle.to_tensor(np.random.default_rng(0).standard_normal((32, 64)).astype("float32"))
        y = paddle.to_tensor(np.random.default_rng(1).integers(0, 10, 32))
    else:
        net, x = cnn(train=True)
        y = paddle.to_tensor(np.array([1, 3]))
    opt = (paddle.optimizer.SGD if optimizer == "SGD" else paddle.optimizer.Adam)(1e-3, parameters=net.parameters())
    forward = paddle.jit.to_static(net, full_graph=True) if mode == "to_static" else net

    def step():
        loss = paddle.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss
    return step


def _configs(mode: str):
    return [(m, o, mode) for m in MODELS for o in OPTIMIZERS]


def child_time(device: str, rounds: int, mode: str) -> None:
    """Child: each configuration's step on Paddle's CPU and on `device`, interleaved over `rounds`; prints RESULT=."""
    import json
    steps, best, failed = {}, {}, {}
    for cfg in _configs(mode):
        for place in ("cpu", device):
            paddle.set_device(place)
            try:
                steps[cfg, place] = train_step(*cfg)
                steps[cfg, place]()  # the first step builds static programs and optimizer state
            except Exception as err:  # noqa: BLE001 (reported: to_static may not work on a device)
                failed[" ".join(cfg)] = f"{place}: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
    for _ in range(rounds):
        for (cfg, place), fn in steps.items():
            if " ".join(cfg) in failed:
                continue
            paddle.set_device(place)
            t = best_seconds(fn, min_time=0.1, repeats=3)
            best[cfg, place] = min(best.get((cfg, place), t), t)
    out = {" ".join(cfg): {"cpu": best[cfg, "cpu"], "device": best[cfg, device]} for cfg in _configs(mode)
           if (cfg, "cpu") in best and (cfg, device) in best}
    print("RESULT=" + json.dumps({"seconds": out, "failed": failed}), flush=True)


def child_steps(device: str, mode: str) -> None:
    """Child, traced: each configuration's warm-up step, then TRACED_STEPS steps between markers on stderr."""
    paddle.set_device(device)
    for cfg in _configs(mode):
        name = " ".join(cfg)
        print(f"HWA_CONFIG {name}", file=sys.stderr, flush=True)
        try:
            step = train_step(*cfg)
            step()
        except Exception as err:  # noqa: BLE001 (the timing child reports it)
            print(f"HWA_FAILED {name}: {err}", file=sys.stderr, flush=True)
            continue
        print(f"HWA_STEPS {name}", file=sys.stderr, flush=True)
        for _ in range(TRACED_STEPS):
            step()
        paddle.device.synchronize()
        print(f"HWA_END {name}", file=sys.stderr, flush=True)


def type_view(root: Path, paddle_type: str, into: Path) -> Path | None:
    """A folder holding only `paddle_type`'s shim files of `root` (links) and its manifest entry: Paddle 3.3 runs
    static graphs on one custom type per process (docs/paddle-bridge.md). None when it is not installed there."""
    import json
    from hwadapter_paddle.bridge import MANIFEST, read_manifest
    manifest = read_manifest(root)
    for name, entry in manifest.get("shims", {}).items():
        if entry.get("paddle_type") == paddle_type:
            into.mkdir(parents=True, exist_ok=True)
            for path in root.glob(f"libhwadapter_paddle_{name}.*"):
                (into / path.name).symlink_to(path)
            (into / MANIFEST).write_text(json.dumps({**manifest, "shims": {name: entry}}))
            return into
    return None


def fallbacks_per_step(view: Path, device: str, mode: str, timeout: float) -> dict:
    """Per configuration, from a traced child: {"kernels": the phi kernels that fell back in a step, "calls": calls
    to Paddle's CPU per step (eager calls, plus static programs' CPU ops, each run once a step)}."""
    from hwadapter_paddle import trace
    report = trace.Report([], 0)
    marks: dict = {}

    def snapshot() -> dict:
        return {key: (k.fallback_calls, k.static_fallback_ops) for key, k in report.kernels.items()}

    def sink(data: bytes) -> None:
        text = data.decode(errors="replace").strip()
        for tag in ("HWA_CONFIG ", "HWA_STEPS ", "HWA_END "):
            if text.startswith(tag):
                marks[text[len(tag):], tag.strip()] = snapshot()
    env = {**os.environ, "CUSTOM_DEVICE_ROOT": str(view)}
    trace.run(["timeout", str(int(timeout)), sys.executable, __file__, "_child_steps", device, mode], env=env,
              sink=sink, report=report)
    out = {}
    for cfg in _configs(mode):
        name = " ".join(cfg)
        if (name, "HWA_END") not in marks:
            continue
        begin, steps, end = marks[name, "HWA_CONFIG"], marks[name, "HWA_STEPS"], marks[name, "HWA_END"]
        kernels, calls = set(), 0.0
        for key, (eager, _) in end.items():
            per_step = (eager - steps.get(key, (0, 0))[0]) / TRACED_STEPS
            static_ops = steps.get(key, (0, 0))[1] - begin.get(key, (0, 0))[1]  # lowered in the warm-up step
            if per_step or static_ops:
                kernels.add(key[1])
                calls += per_step + static_ops
        out[name] = {"kernels": sorted(kernels), "calls": calls}
    return out


def train(types: list[str], rounds: int = 3) -> None:
    """The training-step table: each type in its own children (timing; fallbacks traced), against Paddle's CPU."""
    import json
    import subprocess
    import tempfile
    root = os.environ.get("CUSTOM_DEVICE_ROOT")
    if not root:
        sys.exit("Set CUSTOM_DEVICE_ROOT to the folder `hwadapter paddle install cpu opencl cdemo --dir DIR` filled")
    rows, skipped, which = [], [], {}
    with tempfile.TemporaryDirectory(prefix="paddle-overhead-") as tmp:
        for paddle_type in types:
            view = type_view(Path(root), paddle_type, Path(tmp) / paddle_type)
            if view is None:
                skipped.append(f"{paddle_type}: not installed in {root} (`hwadapter paddle install`)")
                continue
            device = f"{paddle_type}:0"
            env = {**os.environ, "CUSTOM_DEVICE_ROOT": str(view), "GLOG_minloglevel": "2"}
            for mode in MODES:  # a child each: a to_static that hangs or fails leaves eager's figures
                try:
                    proc = subprocess.run([sys.executable, __file__, "_child_time", device, str(rounds), mode],
                                          env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
                except subprocess.TimeoutExpired:
                    skipped.append(f"{device} {mode}: the timing child did not finish in {CHILD_TIMEOUT} s (hung?)")
                    continue
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT=")]
                if proc.returncode or not lines:
                    skipped.append(f"{device} {mode}: the timing child failed ({proc.returncode}): "
                                   f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
                    continue
                result = json.loads(lines[-1][len("RESULT="):])
                falls = fallbacks_per_step(view, device, mode, CHILD_TIMEOUT)
                for name, why in result["failed"].items():
                    skipped.append(f"{device} {name}: {why}")
                for name, t in result["seconds"].items():
                    fb = falls.get(name, {"kernels": ["?"], "calls": float("nan")})
                    rows.append([device, name, f"{t['cpu'] * 1e3:.2f}", f"{t['device'] * 1e3:.2f}",
                                 f"{t['device'] / t['cpu']:.1f}x", len(fb["kernels"]), f"{fb['calls']:g}"])
                    if fb["kernels"]:
                        which.setdefault((device, ", ".join(fb["kernels"])), []).append(name)
    table("Training step against Paddle's CPU in the same process (ms per step, best of rounds, interleaved)",
          ["device", "model optimizer mode", "Paddle CPU", "on the device", "ratio", "kernels fell back",
           "CPU calls/step"], rows)
    for (device, kernels), names in which.items():
        print(f"fell back on {device} in {', '.join(names)}: {kernels}")
    for line in skipped:
        print(f"skipped: {line}")
    print("Target (issue 25): hwa_cpu:0 step <= 2x Paddle CPU's, and no kernel of the step falls back on hwa_cpu. "
          "'CPU calls/step': eager fallback calls per step plus the CPU ops of static programs (each run once a "
          "step); `hwadapter paddle trace` shows them per kernel.")
    data_parallel_hook()


DP_STEPS, DP_ROUNDS = 20, 3


def child_data_parallel() -> None:
    """A rank of `hwadapter paddle launch`: the MLP's SGD step under paddle.DataParallel, a fixed number of steps a
    round (every rank must run as many all-reduces), best round; rank 0 prints RESULT=."""
    import json
    import time
    import paddle.distributed as dist
    kind = os.environ.get("PADDLE_XCCL_BACKEND")
    if kind:  # the rank's device, as the launcher chose it
        paddle.set_device(f"{kind}:{os.environ.get(f'FLAGS_selected_{kind}s', '0')}")
    dist.init_parallel_env()
    net = paddle.DataParallel(mlp(train=True)) if dist.get_world_size() > 1 else mlp(train=True)
    opt = paddle.optimizer.SGD(1e-3, parameters=net.parameters())
    x = paddle.to_tensor(np.random.default_rng(dist.get_rank()).standard_normal((32, 64)).astype("float32"))
    y = paddle.to_tensor(np.random.default_rng(1).integers(0, 10, 32))

    def step():
        loss = paddle.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return float(loss)  # waits for the step (and its all-reduce) to finish
    for _ in range(3):
        step()
    best = float("inf")
    for _ in range(DP_ROUNDS):
        start = time.perf_counter()
        for _ in range(DP_STEPS):
            step()
        best = min(best, (time.perf_counter() - start) / DP_STEPS)
    if dist.get_rank() == 0:
        print("RESULT=" + json.dumps({"seconds": best, "world": dist.get_world_size(), "device": paddle.get_device()}),
              flush=True)


def data_parallel_hook(paddle_type: str = "hwa_cpu") -> None:
    """The 2-rank data-parallel MLP step (each rank its own batch of 32) against 1 rank, through `hwadapter paddle
    launch` (hwadapter_paddle.launch: MPI ranks, Paddle's xccl on the bridged device's collectives)."""
    import importlib.util
    import json
    import subprocess
    if importlib.util.find_spec("hwadapter_paddle.launch") is None:
        print("2-rank data parallel: not measured (hwadapter_paddle.launch is not there)")
        return
    seconds = {}
    for n in (1, 2):
        cmd = [sys.executable, "-m", "hwadapter.cli", "paddle", "launch", "-n", str(n), "--device", paddle_type,
               "--", sys.executable, __file__, "_child_dp"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT,
                                  env={**os.environ, "GLOG_minloglevel": "2"})
        except subprocess.TimeoutExpired:
            print(f"2-rank data parallel: {n} rank(s) did not finish in {CHILD_TIMEOUT} s")
            return
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT=")]
        if proc.returncode or not lines:
            print(f"2-rank data parallel: {n} rank(s) failed ({proc.returncode}): "
                  f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
            return
        result = json.loads(lines[-1][len("RESULT="):])
        if not result["device"].startswith(paddle_type):
            print(f"2-rank data parallel: the ranks ran on {result['device']}, not {paddle_type}")
            return
        seconds[n] = result["seconds"]
    table(f"Data-parallel MLP SGD step on {paddle_type}:0, hwadapter paddle launch (ms per step, best of "
          f"{DP_ROUNDS} rounds of {DP_STEPS})", ["ranks", "ms per step", "against 1 rank"],
          [[n, f"{t * 1e3:.2f}", f"{t / seconds[1]:.2f}x"] for n, t in seconds.items()])
    print("Each rank has its own batch: 2 ranks do twice the work of 1 (on this machine's cores, shared).")


if __name__ == "__main__":
    if sys.argv[1:2] == ["_child_time"]:
        child_time(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1:2] == ["_child_steps"]:
        child_steps(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["_child_dp"]:
        child_data_parallel()
    elif sys.argv[1:2] == ["dp"]:
        data_parallel_hook(*sys.argv[2:3])
    elif sys.argv[1:2] == ["train"]:
        train(sys.argv[2:] or list(TRAIN_TYPES))
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "cdemo:0")
