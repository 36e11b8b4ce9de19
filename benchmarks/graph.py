"""Static graphs against eager, from one run, on cpu and on opencl:0 (issue 9):

* a 6-layer MLP (256 wide, relu) at batch 1: eager vs `hw.jit.to_static`, medians of interleaved rounds (each round
  times N calls of each variant, then the device's synchronize). Targets: to_static >= 1.5x eager on cpu and >= 3x
  eager on opencl:0 (eager pays the per-op overhead there); cuda:0, where there is one, is measured without one.
* a branching MLP at batch 1 (issue 27): the same layers, whose middle takes one of two paths by the mean of its
  activations (a Python `if` on a tensor: to_static converts it into one cond node). Targets: to_static >= eager on
  cpu and >= 2x eager on opencl:0.
* a small CNN (three conv-bn-relu blocks, max pooling, global average pooling, a linear head), the same comparison.
* kernel launches per conv-bn-relu block: the steps the profiler records for one to_static block (copies not
  counted). Target: 1 (conv + batch norm + relu fused into one conv with an epilogue).
* peak device memory of the CNN measured by the allocator (opencl:0): the planned execution (values dropped at their
  last use, buffers reused) against the naive one (every intermediate kept to the end: the reference executor over
  the unoptimised graph). Target: planned <= 60% of naive. The memory plan's own figures are printed beside.

What is not available in this build (hw.jit, the partitioner, a device) prints a SKIP line saying why; a missed
target prints FAIL. The script exits 0 either way; a wrong result is an error. Run: `python benchmarks/graph.py`.
"""
from __future__ import annotations

import importlib
import os
import sys
import time

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

import hwadapter as hw
import hwadapter.nn.functional as F

MLP_WIDTH, MLP_LAYERS = 256, 6
CNN_BATCH, CNN_SIZE, CNN_CHANNELS = 4, 32, (3, 16, 32, 64)
ROUNDS = int(os.environ.get("HWADAPTER_BENCH_ROUNDS", 9))
MIN_ROUND = 0.05  # seconds each variant runs per round, at least
TARGETS = {"cpu": 1.5, "opencl": 3.0}  # MLP: to_static / eager speed-up
BRANCH_TARGETS = {"cpu": 1.0, "opencl": 2.0}  # branching MLP: to_static / eager speed-up
LAUNCH_TARGET = 1  # steps per conv-bn-relu block
MEMORY_TARGET = 0.6  # planned / naive allocator peak

console = Console(width=100)
SKIPS: list[str] = []


def _verdict(ok: bool) -> str:
    return "[bold green]PASS[/]" if ok else "[bold red]FAIL[/]"


def _skip(what: str, why: str) -> None:
    SKIPS.append(what)
    console.print(f"{escape(what)}: [yellow]SKIP[/] ({escape(why)})")


def _table(title: str, columns: list[str], rows: list[list], text_columns: int = 0) -> None:
    """A table whose first column and last `text_columns` are text (left), the rest figures (right)."""
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 or i >= len(columns) - text_columns else "right")
    for r in rows:
        t.add_row(*[str(v) for v in r])
    console.print(t)


# --- what this build has -------------------------------------------------------------------------------------------
def _jit():
    """hwadapter.jit, or the reason it cannot be used."""
    try:
        jit = importlib.import_module("hwadapter.jit")
    except ImportError as err:
        return None, f"hwadapter.jit is not in this build ({err})"
    if not hasattr(jit, "to_static"):
        return None, "hwadapter.jit has no to_static yet"
    return jit, ""


def _partition():
    """hwadapter.graph.partition (the function), or the reason it cannot be used."""
    import hwadapter.graph
    try:
        fn = getattr(hwadapter.graph, "partition", None)
    except ImportError as err:
        return None, f"hwadapter.graph.partition is not in this build ({err})"
    fn = getattr(fn, "partition", fn)  # the submodule, where it shadows the function
    return (fn, "") if callable(fn) else (None, "hwadapter.graph.partition is not in this build")


def _devices() -> list[str]:
    out = ["cpu"]
    try:
        available = hw.device.get_available_device()
        out += [d for d in ("opencl:0", "cuda:0") if d in available]  # cuda:0 where a GPU is lent: no target
        if "opencl:0" not in available:
            _skip("opencl:0", "no opencl:0 device here: install plugins/opencl and an OpenCL driver "
                              "(PoCL: scripts/ensure-opencl.sh)")
    except hw.HwAdapterError as err:
        _skip("opencl:0", f"listing devices failed: {str(err).splitlines()[0]}")
    return out


# --- the models ----------------------------------------------------------------------------------------------------
def mlp_model(device: str):
    """(forward(x), input x): 6 dense layers with relu between, weights captured as constants when traced."""
    rng = np.random.default_rng(0)
    ws = [hw.to_tensor(rng.standard_normal((MLP_WIDTH, MLP_WIDTH), np.float32) / 16, device=device)
          for _ in range(MLP_LAYERS)]
    bs = [hw.to_tensor(rng.standard_normal(MLP_WIDTH, np.float32) / 16, device=device) for _ in range(MLP_LAYERS)]

    def forward(x):
        for i, (w, b) in enumerate(zip(ws, bs)):
            x = F.linear(x, w, b)
            if i < MLP_LAYERS - 1:
                x = F.relu(x)
        return x
    x = hw.to_tensor(rng.standard_normal((1, MLP_WIDTH), np.float32), device=device)
    return forward, x


def branching_model(device: str):
    """(forward(x), input x): two dense layers, then two more with relu or one halved by the mean of the activations
    (a data-dependent branch), then the head."""
    rng = np.random.default_rng(2)
    ws = [hw.to_tensor(rng.standard_normal((MLP_WIDTH, MLP_WIDTH), np.float32) / 16, device=device) for _ in range(6)]
    bs = [hw.to_tensor(rng.standard_normal(MLP_WIDTH, np.float32) / 16, device=device) for _ in range(6)]

    def forward(x):
        h = F.relu(F.linear(x, ws[0], bs[0]))
        h = F.relu(F.linear(h, ws[1], bs[1]))
        if h.mean() > 0.1:
            h = F.relu(F.linear(h, ws[2], bs[2]))
            h = F.relu(F.linear(h, ws[3], bs[3]))
        else:
            h = F.linear(h, ws[4], bs[4]) * 0.5
        return F.linear(h, ws[5], bs[5])
    x = hw.to_tensor(rng.standard_normal((1, MLP_WIDTH), np.float32), device=device)
    return forward, x


def _block_params(rng, cin: int, cout: int, device: str) -> list:
    """conv weight and bias, then batch norm's running mean, running variance, scale and shift."""
    arrays = [rng.standard_normal((cout, cin, 3, 3), np.float32) / float(np.sqrt(9 * cin)),  # float: stays float32
              rng.standard_normal(cout, np.float32) / 10, rng.standard_normal(cout, np.float32) / 10,
              rng.uniform(0.5, 1.5, cout).astype(np.float32), rng.uniform(0.5, 1.5, cout).astype(np.float32),
              rng.standard_normal(cout, np.float32) / 10]
    assert all(a.dtype == np.float32 for a in arrays)
    return [hw.to_tensor(a, device=device) for a in arrays]


def conv_bn_relu(x, p):
    w, b, mean, var, gamma, beta = p
    return F.relu(F.batch_norm(F.conv2d(x, w, b, padding=1), mean, var, gamma, beta))


def cnn_model(device: str):
    """(forward(x), input x, one block's function and its input): conv-bn-relu x3 with pooling, a linear head."""
    rng = np.random.default_rng(1)
    blocks = [_block_params(rng, cin, cout, device) for cin, cout in zip(CNN_CHANNELS, CNN_CHANNELS[1:])]
    head_w = hw.to_tensor(rng.standard_normal((CNN_CHANNELS[-1], 10), np.float32) / 8, device=device)
    head_b = hw.to_tensor(np.zeros(10, np.float32), device=device)

    def forward(x):
        for i, p in enumerate(blocks):
            x = conv_bn_relu(x, p)
            if i < len(blocks) - 1:
                x = F.max_pool2d(x, 2)
        x = hw.flatten(F.adaptive_avg_pool2d(x, 1), start_axis=1)
        return F.linear(x, head_w, head_b)

    def block(x):
        return conv_bn_relu(x, blocks[0])
    x = hw.to_tensor(rng.standard_normal((CNN_BATCH, 3, CNN_SIZE, CNN_SIZE), np.float32), device=device)
    return forward, x, block


# --- timing --------------------------------------------------------------------------------------------------------
def _calls_for(fn, device: str) -> int:
    """How many calls make a round of at least MIN_ROUND seconds."""
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        hw.device.synchronize(device)
        if time.perf_counter() - start >= MIN_ROUND or n >= 1 << 16:
            return n
        n *= 2


def _time_rounds(variants: dict, device: str, progress, task) -> dict:
    """{name: [seconds per call, one per round]}: each round times every variant in turn."""
    calls = {name: _calls_for(fn, device) for name, fn in variants.items()}
    times = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, fn in variants.items():
            start = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            hw.device.synchronize(device)
            times[name].append((time.perf_counter() - start) / calls[name])
        progress.advance(task)
    return times


def _median(xs: list) -> float:
    return sorted(xs)[len(xs) // 2]


def _check(static, eager, what: str) -> None:
    """A graph that is fast and wrong is an error, not a result."""
    np.testing.assert_allclose(static.numpy(), eager.numpy(), rtol=2e-4, atol=2e-5, err_msg=what)


def bench_speed(jit, devices: list[str]) -> None:
    rows, verdicts = [], []
    with Progress(console=console, transient=True) as progress:
        for device in devices:
            for model in ("MLP", "branching MLP", "CNN"):
                forward, x = {"MLP": mlp_model, "branching MLP": branching_model,
                              "CNN": lambda d: cnn_model(d)[:2]}[model](device)
                static = jit.to_static(forward)
                label = f"{model} on {device}"
                task = progress.add_task(f"{label}: tracing and timing", total=ROUNDS)
                try:
                    _check(static(x), forward(x), label)
                except hw.HwAdapterError as err:
                    progress.remove_task(task)
                    _skip(f"{label} to_static", f"{type(err).__name__}: {str(err).splitlines()[0]}")
                    continue
                times = _time_rounds({"eager": lambda: forward(x), "to_static": lambda: static(x)}, device,
                                     progress, task)
                progress.remove_task(task)
                ratios = [e / s for e, s in zip(times["eager"], times["to_static"])]
                ratio = _median(ratios)
                rows.append([label, f"{_median(times['eager']) * 1e6:.1f}", f"{_median(times['to_static']) * 1e6:.1f}",
                             f"{ratio:.2f}x", f"{min(ratios):.2f}-{max(ratios):.2f}x"])
                target = {"MLP": TARGETS, "branching MLP": BRANCH_TARGETS}.get(model, {}).get(device.split(":")[0])
                if target is not None:
                    verdicts.append(f"target: {model} batch 1 on {device}: to_static >= {target:g}x eager: "
                                    f"{_verdict(ratio >= target)} ({ratio:.2f}x)")
    if rows:
        _table(f"eager vs to_static (median µs per call of {ROUNDS} interleaved rounds)",
               ["model", "eager µs", "to_static µs", "speed-up", "spread"], rows)
    for line in verdicts:
        console.print(line)


# --- launches per block --------------------------------------------------------------------------------------------
def bench_launches(jit, devices: list[str]) -> None:
    rows, verdicts = [], []
    for device in devices:
        _, _, block = cnn_model(device)
        x = hw.to_tensor(np.random.default_rng(2).standard_normal((CNN_BATCH, 3, CNN_SIZE, CNN_SIZE), np.float32),
                         device=device)
        static = jit.to_static(block)
        try:
            _check(static(x), block(x), f"conv-bn-relu block on {device}")
        except hw.HwAdapterError as err:
            _skip(f"launches per block on {device}", f"{type(err).__name__}: {str(err).splitlines()[0]}")
            continue
        with hw.profiler.profile() as eager_prof:
            block(x)
        with hw.profiler.profile() as static_prof:
            static(x)
        steps = [e for e in static_prof.events if e.kind == "step" and e.args.get("op", e.name) != "copy"]
        ops = [e for e in static_prof.events if e.kind == "op"]
        if not steps and not ops:
            _skip(f"launches per block on {device}", "the graph executor records no steps into the profiler")
            continue
        launches = len(steps) + len(ops)  # ops: what a plan ran through eager dispatch, if anything
        what = ", ".join(f"{e.args.get('op', e.name)} ({e.route})" for e in steps + ops)
        rows.append([device, len(eager_prof.events), launches, what])
        verdicts.append(f"target: conv+bn+relu on {device} in {LAUNCH_TARGET} launch: "
                        f"{_verdict(launches <= LAUNCH_TARGET)} ({launches})")
    if rows:
        _table("kernel launches per conv-bn-relu block (steps recorded by the profiler, copies not counted)",
               ["device", "eager", "to_static", "to_static ran"], rows, text_columns=1)
    for line in verdicts:
        console.print(line)


# --- peak memory ---------------------------------------------------------------------------------------------------
def _peak_of(run, device: str) -> int:
    """Bytes the allocator's peak rose above what was allocated before `run()` (its results included)."""
    hw.device.synchronize(device)
    before = hw.device.memory_stats(device)["allocated_bytes"]
    hw.device.reset_peak_memory_stats(device)
    out = run()
    hw.device.synchronize(device)
    peak = hw.device.memory_stats(device)["peak_allocated_bytes"] - before
    del out
    return peak


def bench_memory(jit, partition, devices: list[str]) -> None:
    device = next((d for d in devices if d != "cpu"), None)
    if device is None:
        _skip("CNN peak memory", "no device with its own memory (cpu tensors are numpy's: no allocator to measure)")
        return
    from hwadapter.graph.reference import run as reference_run
    forward, x, _ = cnn_model(device)
    graph = jit.get_graph(forward, x)
    constants = {k: hw.to_tensor(a, device=device) for k, a in graph.constants.items()}
    inputs = {graph.inputs[0]: x}
    expected = forward(x)
    naive = _peak_of(lambda: reference_run(graph, {**constants, **inputs}, device), device)
    rows, measured = [["naive: unoptimised graph, every value kept to the end", f"{naive:,}", "100%", ""]], None
    # op by op (no subgraph): every buffer comes from the allocator, so its peak is the memory plan's at work; a
    # subgraph backend's program holds its intermediates itself, where the allocator does not see them
    for label, kwargs in (("planned, op by op (no subgraphs)", {"min_subgraph": 1 << 30}),
                          ("planned, with subgraphs", {})):
        plan = partition(graph, devices=[device, "cpu"], **kwargs)
        _check(plan.run([x])[0], expected, f"the {label} CNN on {device}")  # and warm: constants uploaded once
        peak = _peak_of(lambda: plan.run([x]), device)
        mem = plan.memory
        note = (f"plan computes {mem.planned_peak:,} vs naive {mem.naive_peak:,} "
                f"({mem.planned_peak / mem.naive_peak:.0%})" if mem.naive_peak else "")
        if plan.subgraphs:
            note += f"; {len(plan.subgraphs)} subgraph(s): their memory is the plugin's, not the allocator's"
        rows.append([label, f"{peak:,}", f"{peak / naive:.0%}" if naive else "-", note])
        measured = peak / naive if measured is None and naive else measured
    _table(f"CNN peak memory on {device} (batch {CNN_BATCH}, {CNN_SIZE}x{CNN_SIZE}): allocator peak above the "
           f"weights and input", ["execution", "peak bytes", "of naive", "note"], rows, text_columns=1)
    if measured is None:
        _skip("CNN peak memory target", "the naive run allocated nothing")
        return
    console.print(f"target: CNN planned peak <= {MEMORY_TARGET:.0%} of naive (allocator, op by op): "
                  f"{_verdict(measured <= MEMORY_TARGET)} ({measured:.0%})")


def main() -> int:
    console.print(f"[bold]static graphs vs eager[/] (hwadapter {hw.__version__}, {ROUNDS} rounds)")
    devices = _devices()
    jit, why = _jit()
    if jit is None:
        _skip("eager vs to_static, launches per block", why)
    else:
        bench_speed(jit, devices)
        bench_launches(jit, devices)
    partition, why_not = _partition()
    if jit is None or partition is None:
        _skip("CNN peak memory", why or why_not)
    else:
        bench_memory(jit, partition, devices)
    if SKIPS:
        console.print(f"skipped: {', '.join(SKIPS)}")
    return 0  # a missed target prints FAIL; it is a measurement, not an error


if __name__ == "__main__":
    sys.exit(main())
