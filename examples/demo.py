"""The demo: the light ResNet-50 the onnx wheel ships, on every available device: the devices, the partition
picture written to a file, the result checked against the expected output (and, with random weights, against
onnxruntime), the latency beside onnxruntime's and the top kernels of the profile; then a small MLP, one
kernel-primitive op and one compiled subgraph on every device, the digits CNN trained on every device (accuracy
table, loss curves in build/demo/loss_curves.svg), then on two processes with data parallelism, and what fell
back."""
from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

import hwadapter as hw
import hwadapter.nn.functional as F
from hwadapter import cli, kp

import train_digits  # examples/: the training part of the demo

console = Console(width=max(Console().width, 120))  # tables whole in a pipe or a narrow terminal


def mlp_numpy(x, params):
    """The oracle: the same network written with numpy alone."""
    (w1, b1), (w2, b2), (w3, b3) = params
    h = np.maximum(x @ w1 + b1, 0)
    h = h @ w2 + b2
    h = 0.5 * h * (1 + np.tanh(float(np.sqrt(2 / np.pi)) * (h + 0.044715 * h ** 3)))  # a Python float keeps float32
    logits = h @ w3 + b3
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def mlp_hw(x, params):
    """The network in hwadapter ops on the current device."""
    (w1, b1), (w2, b2), (w3, b3) = params
    h = F.relu(F.linear(x, w1, b1))
    h = F.gelu(F.linear(h, w2, b2), approximate=True)
    return F.softmax(F.linear(h, w3, b3), axis=-1)


def kernel_primitive_demo(x) -> None:
    """bias + gelu written once in kernel primitives; each device compiles it with its own backend."""
    @kp.kernel
    def bias_gelu(x: kp.In["T"], b: kp.In["T"], out: kp.Out["T"]):
        kp.write(out, kp.unary(kp.ops.gelu, kp.read(x) + kp.read_broadcast(b, like=x)))

    op = kp.register_op("demo_bias_gelu", bias_gelu)
    b = np.linspace(-1, 1, x.shape[1], dtype=np.float32)
    expected = kp.interpret(bias_gelu, {"x": x, "b": b})["out"]
    t = Table("device", "ran as", "max |error| vs interpreter")
    for name in hw.device.get_available_device():
        with hw.profiler.profile() as prof, hw.device_guard(name):
            got = op(hw.to_tensor(x), hw.to_tensor(b)).numpy()
        route = next(r["route"] for r in prof.table() if r["op"] == "demo_bias_gelu")
        t.add_row(name, route, f"{np.abs(got - expected).max():.2e}")
    console.print(t)


def subgraph_demo() -> None:
    """The subgraph level: a hand-built graph handed whole to each device that compiles subgraphs."""
    from hwadapter.graph import GraphBuilder, run
    from hwadapter.plugin import DeviceArray
    from hwadapter.host import device as get  # the public host API: a Device by name

    g = GraphBuilder()
    x, w, b = g.input("x", (16, 32)), g.input("w", (32, 8)), g.input("b", (8,))
    out = g.op("softmax", [g.op("relu", [g.op("add", [g.op("matmul", [x, w]), b])])], axis=1)
    graph = g.build(out)
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((16, 32)).astype(np.float32),
             "w": rng.standard_normal((32, 8)).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32)}
    expected = run(graph, feeds, device="cpu")[out].numpy()
    t = Table("device", "nodes claimed", "compiled as", "max |error| vs eager CPU")
    for name in hw.device.get_available_device():
        dev = get(name)
        backend = dev.subgraph
        if backend is None:
            continue
        claimed = backend.supported_nodes(graph)
        program = backend.compile(graph.subgraph(claimed))
        got = program.run([DeviceArray.from_numpy(dev, feeds[i]) for i in graph.inputs])[0].numpy()
        t.add_row(name, f"{len(claimed)} of {len(graph.nodes)}", "one device program",
                  f"{np.abs(got - expected).max():.2e}")
    console.print(t)


RUNS = 5  # timed runs per runtime (median), after a warm-up
PICTURES = Path("build") / "demo"  # the plan pictures (build/ is ignored by git)
TOP = 8


def _onnxruntime():
    """The onnxruntime module, or None (the demo says so and goes on without it)."""
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime


def _median_ms(fn, runs: int = RUNS) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def resnet_demo() -> None:
    """The light ResNet-50 on every device: plan picture, result check, latency against onnxruntime, profile."""
    import hwadapter.onnx as hwonnx
    from hwadapter.onnx import light
    from hwadapter.onnx.backend import devices_for

    model, feeds, expected, (rtol, atol) = light.load("resnet50")
    m = hwonnx.load(model)
    graph = m.graph()
    console.print(f"{light.path('resnet50').name}: {len(model.graph.node)} ONNX nodes (opset "
                  f"{model.opset_import[0].version}) -> {len(graph.nodes)} hwadapter ops, input "
                  f"{m.inputs[0]} {tuple(feeds[m.inputs[0]].shape)}")
    ort = _onnxruntime()
    session = None
    if ort is None:
        console.print("[yellow]onnxruntime is not installed[/]: no latency comparison and no random-weight check "
                      "(pip install onnxruntime)")
    else:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    # the shipped weights are fills of one value (the expected output is a uniform softmax): the same network with
    # seeded random weights, its logits exposed, is checked against onnxruntime too
    random_model = light.with_random_weights(model, seed=1)
    random_m = hwonnx.load(random_model)
    random_expected = None
    if session is not None:
        random_sess = ort.InferenceSession(random_model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        random_expected = random_sess.run(None, feeds)

    checks = Table("device", "plan", "max |error| vs expected", "random weights: vs onnxruntime", "status")
    checks.add_column("picture", no_wrap=True)
    latency = Table("runtime", "median ms", "x onnxruntime", title=f"ResNet-50, batch 1: median of {RUNS} runs")
    ort_ms = _median_ms(lambda: session.run(None, feeds)) if session is not None else None
    profiles = []
    for name in hw.device.get_available_device():
        devs = devices_for(name)
        plan = m.plan(devs)
        picture = PICTURES / f"resnet50-plan-{name.replace(':', '')}.svg"
        picture.parent.mkdir(parents=True, exist_ok=True)
        plan.save_svg(picture)
        n_sub = len(plan.subgraphs)
        where = ", ".join(f"{sum(1 for v in plan.assignment.values() if v == d)} on {d}"
                          for d in dict.fromkeys(plan.assignment.values()))
        got = m.run(feeds, devs)
        err = max(float(np.abs(g - e).max()) for g, e in zip(got, expected))
        ok = all(np.allclose(g, e, rtol=rtol, atol=atol) for g, e in zip(got, expected))
        random_text = "-"
        if random_expected is not None:
            rgot = random_m.run(feeds, devs)
            scale = max(float(np.abs(e).max()) for e in random_expected)
            rerr = max(float(np.abs(g - e).max()) for g, e in zip(rgot, random_expected))
            rok = all(np.allclose(g, e, rtol=rtol, atol=1e-4 * float(np.abs(e).max()))
                      for g, e in zip(rgot, random_expected))
            ok = ok and rok
            random_text = f"{rerr:.1e} (logits up to {scale:.1f})"
        checks.add_row(name, f"{where}; {n_sub} subgraph(s)", f"{err:.1e}", random_text,
                       "[green]OK" if ok else "[red]MISMATCH", str(picture))
        if not ok:
            console.print(checks)
            raise SystemExit(f"{name}: ResNet-50 differs from the expected output")
        ms = _median_ms(lambda: m.run(feeds, devs))
        latency.add_row(f"hwadapter {name}", f"{ms:.1f}", f"{ms / ort_ms:.2f}x" if ort_ms else "n/a")
        # op by op (no compiled subgraph), so that the profile names the kernels
        m.run(feeds, devs, min_subgraph=1 << 30)
        start = time.perf_counter()
        with hw.profiler.profile() as prof:
            m.run(feeds, devs, min_subgraph=1 << 30)
            hw.device.synchronize(name)
        profiles.append((name, prof, time.perf_counter() - start))
    if ort_ms is not None:
        latency.add_row("onnxruntime (CPU EP)", f"{ort_ms:.1f}", "1.00x")
    console.print(checks)
    console.print(latency)
    for name, prof, wall in profiles:
        rows = prof.table()
        recorded = sum(r["seconds"] for r in rows)
        t = Table("op", "route", "calls", "host ms", "share of run",
                  title=f"top kernels on {name}: one profiled run, op by op, {wall * 1e3:.0f} ms")
        for r in rows[:TOP]:
            t.add_row(r["op"], r["route"], str(r["calls"]), f"{r['seconds'] * 1e3:.1f}", f"{r['seconds'] / wall:.0%}")
        console.print(t)
        if recorded < 0.5 * wall:
            console.print(f"{name} runs kernels asynchronously: the steps took {recorded * 1e3:.0f} ms to queue, the "
                          f"other {(wall - recorded) * 1e3:.0f} ms the run waited for the device to finish them")


def mlp_demo() -> None:
    rng = np.random.default_rng(0)
    sizes = [64, 128, 64, 10]
    params = [((rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32), rng.standard_normal(o).astype(np.float32))
              for i, o in zip(sizes, sizes[1:])]
    x = rng.standard_normal((32, sizes[0])).astype(np.float32)
    expected = mlp_numpy(x, params)
    assert expected.dtype == np.float32
    results = Table("device", "max |error| vs numpy", "argmax agrees", "fallbacks", "status")
    for name in hw.device.get_available_device():
        with hw.device_guard(name):
            dev_params = [(hw.to_tensor(w), hw.to_tensor(b)) for w, b in params]
            got = mlp_hw(hw.to_tensor(x), dev_params).numpy()
        err = float(np.abs(got - expected).max())
        agree = bool((got.argmax(-1) == expected.argmax(-1)).all())
        ok = err < 1e-4 and agree
        results.add_row(name, f"{err:.2e}", str(agree), str(hw.profiler.fallback_count(device=name)),
                        "[green]OK" if ok else "[red]MISMATCH")
        if not ok:
            raise SystemExit(f"{name}: result differs from numpy (max error {err})")
    console.print(results)
    return x


def parallel_demo() -> None:
    """examples/train_digits_parallel.py on two ranks through hwadapter's launcher (mpiexec)."""
    script = Path(__file__).with_name("train_digits_parallel.py")
    cmd = [sys.executable, "-m", "hwadapter.distributed.launch", "--nproc", "2", str(script), "--epochs", "2"]
    try:
        done = subprocess.run(cmd, timeout=300)
    except subprocess.TimeoutExpired:
        console.print("[red]the two ranks did not finish within 300 s[/]")
        return
    if done.returncode:
        console.print(f"[yellow]the data-parallel part exited with {done.returncode}[/] (MPI missing? pip install "
                      f"'hwadapter[mpi]')")


def main() -> None:
    console.rule("[bold]hwadapter devices")
    cli.main(["devices"])
    hw.profiler.reset_fallback()

    console.rule("[bold]ResNet-50 (ONNX, the light model onnx ships) on every device")
    try:
        import onnx  # noqa: F401
    except ImportError:
        console.print("[yellow]onnx is not installed[/]: no ResNet-50 (pip install 'hwadapter[onnx]')")
    else:
        resnet_demo()

    console.rule("[bold]MLP 64-128-64-10 forward pass, batch 32, eager on every device")
    x = mlp_demo()

    console.rule("[bold]one kernel-primitive op, compiled for every device")
    kernel_primitive_demo(x)

    console.rule("[bold]subgraph level: matmul → add → relu → softmax compiled whole")
    subgraph_demo()

    console.rule("[bold]training: the digits CNN, a few seconds on every device, each step one captured plan")
    train_digits.main([])

    console.rule("[bold]data parallel: the digits CNN on 2 processes (mpiexec), the all-reduce inside each captured "
                 "step")
    parallel_demo()

    console.rule("[bold]fallback report (ops that ran on the CPU instead)")
    report = hw.profiler.fallback_report()
    if not report:
        console.print("No op fell back: every op had a kernel on every device.")
    else:
        t = Table("op", "device", "dtypes", "ran on", "count")
        for r in report:
            t.add_row(r["op"], r["device"], ", ".join(r["dtypes"]), r["ran_on"], str(r["count"]))
        console.print(t)


if __name__ == "__main__":
    main()
