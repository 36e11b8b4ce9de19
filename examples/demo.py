"""The demo: list devices, run a small MLP on every available device, check it against numpy, show what fell back."""
from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.table import Table

import hwadapter as hw
import hwadapter.nn.functional as F
from hwadapter import cli, kp

console = Console()


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
    from hwadapter.runtime.device import get

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


def main() -> None:
    console.rule("[bold]hwadapter devices")
    cli.main(["devices"])
    rng = np.random.default_rng(0)
    sizes = [64, 128, 64, 10]
    params = [((rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32), rng.standard_normal(o).astype(np.float32))
              for i, o in zip(sizes, sizes[1:])]
    x = rng.standard_normal((32, sizes[0])).astype(np.float32)
    expected = mlp_numpy(x, params)

    console.rule("[bold]MLP 64-128-64-10 forward pass, batch 32, on every device")
    assert expected.dtype == np.float32
    results = Table("device", "max |error| vs numpy", "argmax agrees", "fallbacks", "status")
    hw.profiler.reset_fallback()
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

    console.rule("[bold]one kernel-primitive op, compiled for every device")
    kernel_primitive_demo(x)

    console.rule("[bold]subgraph level: matmul → add → relu → softmax compiled whole")
    subgraph_demo()

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
