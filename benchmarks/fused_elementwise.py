"""A chain of 8 elementwise ops over 16M float32 values: numpy unfused vs one fused kernel-primitive program on cpu:0.

Rows (one run, interleaved so that all see the same machine load): numpy doing the 8 ops one by one; the host's copy
bandwidth, one core and all cores (np.copyto in one thread per core, and a compiled C + OpenMP copy loop built by the
CPU backend): the ceiling of any one-pass kernel; the fused program's generated code alone (launched into an output
allocated once) and the fused op end to end (a new output per call, as a user calls it); the copy as an op end to
end, which pays for its new output the same way. GB/s counts x in and y out. When an OpenCL device is present, the
same chain on opencl:0 follows (benchmarks/opencl_fused.py).

Targets (issues 3 and 8): the fused op >= 3x numpy, and >= 60% of the all-core copy bandwidth. Each prints PASS or
FAIL; the script exits 0 either way (a wrong result is an error). Run: `python benchmarks/fused_elementwise.py`.

`--crossover`: a graph's fused chain on cpu:0 run both ways a plan can run it, as its ops' numpy calls and as its one
compiled program, per kind of chain (ops numpy runs as one vectorised call each; with erf's series) and output size: the largest size
at which the numpy calls were faster, beside hostchain.NUMPY_UP_TO, the table the executor decides by.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).parent))
import _bandwidth as bw  # noqa: E402
from _util import best_seconds, table  # noqa: E402

import hwadapter as hw  # noqa: E402
from hwadapter import kp  # noqa: E402

N = int(os.environ.get("HWADAPTER_BENCH_N", 16 << 20))
ROUNDS = 5  # each row is the best of its rounds; rounds interleave the rows
SPEEDUP_TARGET, BANDWIDTH_TARGET = 3.0, 0.6
# y = min(|relu(x*1.5 + 0.25) * 0.5 - x|, 4) + 1  — eight ops, one input, one output
CHAIN = [("mul", ("x", 1.5), "a"), ("add", ("a", 0.25), "b"), ("relu", ("b",), "c"), ("mul", ("c", 0.5), "d"),
         ("sub", ("d", "x"), "e"), ("abs", ("e",), "f"), ("min", ("f", 4.0), "g"), ("add", ("g", 1.0), "y")]
FUSED = kp.fuse(CHAIN, ["x"], ["y"], name="chain8")


def numpy_chain(x):
    """The oracle and the unfused baseline: one numpy call (and one temporary) per op."""
    return np.minimum(np.abs(np.maximum(x * 1.5 + 0.25, 0) * 0.5 - x), 4.0) + 1.0


def _runs(x, expected) -> dict:
    """name -> callable, each checked against its oracle first."""
    chain8, copy_op = kp.register_op("chain8", FUSED), kp.register_op("copy", bw.COPY)
    xt = hw.to_tensor(x, device="cpu")
    np.testing.assert_allclose(chain8(xt).numpy(), expected, rtol=1e-6)
    np.testing.assert_array_equal(copy_op(xt).numpy(), x)
    fused_kernel, fused_out = bw.compiled(FUSED, {"x": x})
    copy_kernel, copy_out = bw.compiled(bw.COPY, {"x": x})
    fused_kernel(), copy_kernel()
    np.testing.assert_allclose(fused_out["y"], expected, rtol=1e-6)
    np.testing.assert_array_equal(copy_out["y"], x)
    dst, k = np.empty_like(x), bw.cores()
    return {"numpy, 8 ops unfused": lambda: numpy_chain(x),
            "copy, 1 core (np.copyto)": lambda: np.copyto(dst, x),
            f"copy, {k} cores (np.copyto, {k} threads)": bw.threaded_copy(x, dst, k),
            f"copy, {k} cores (C + OpenMP loop, cpu backend)": copy_kernel,
            "copy op on cpu:0, end to end": lambda: copy_op(xt),
            "fused kernel on cpu:0, output reused": fused_kernel,
            "fused op on cpu:0, end to end": lambda: chain8(xt)}


def _time(runs: dict) -> dict:
    """Best seconds per call of each run over ROUNDS interleaved rounds."""
    seconds = dict.fromkeys(runs, float("inf"))
    with Progress(transient=True) as progress:
        task = progress.add_task("timing", total=ROUNDS * len(runs))
        for _ in range(ROUNDS):
            for name, fn in runs.items():
                seconds[name] = min(seconds[name], best_seconds(fn, repeats=2))
                progress.advance(task)
    return seconds


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> int:
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    expected = numpy_chain(x)
    seconds = _time(_runs(x, expected))
    moved, t_np = 2 * x.nbytes, seconds["numpy, 8 ops unfused"]
    t_copy = min(t for name, t in seconds.items() if "cores" in name)  # the host's all-core copy bandwidth
    rows = [[name, f"{t * 1e3:.1f}", f"{moved / t / 1e9:.1f}", f"{t_np / t:.2f}x", f"{t_copy / t * 100:.0f}%"]
            for name, t in seconds.items()]
    table(f"8-op elementwise chain over {N:,} float32 on cpu:0 (ms per call, best of {ROUNDS} interleaved rounds)",
          ["implementation", "ms", "GB/s", "vs numpy", "of all-core copy"], rows)
    t_kernel, t_op = seconds["fused kernel on cpu:0, output reused"], seconds["fused op on cpu:0, end to end"]
    t_copy_op = seconds["copy op on cpu:0, end to end"]
    t_copy_kernel = next(t for name, t in seconds.items() if "OpenMP loop" in name)
    print(f"host: {bw.host()}")
    print(f"all-core copy bandwidth: {moved / t_copy / 1e9:.1f} GB/s (one core: "
          f"{moved / seconds['copy, 1 core (np.copyto)'] / 1e9:.1f} GB/s); the fused grid loop: "
          f"{bw.vectorised(FUSED, {'x': x[:64]})}")
    print(f"{_verdict(t_np / t_op >= SPEEDUP_TARGET)}  fused op end to end vs numpy: {t_np / t_op:.1f}x "
          f"(target >= {SPEEDUP_TARGET:g}x)")
    print(f"{_verdict(t_copy / t_kernel >= BANDWIDTH_TARGET)}  fused kernel: {t_copy / t_kernel * 100:.0f}% of the "
          f"all-core copy bandwidth (target >= {BANDWIDTH_TARGET * 100:.0f}%)")
    print(f"{_verdict(t_copy / t_op >= BANDWIDTH_TARGET)}  fused op end to end: {t_copy / t_op * 100:.0f}% of the "
          f"all-core copy bandwidth (target >= {BANDWIDTH_TARGET * 100:.0f}%); a copy op end to end reaches "
          f"{t_copy / t_copy_op * 100:.0f}%")
    print(f"What the op end to end pays over its kernel here: {(t_op - t_kernel) * 1e3:.1f} ms a call (the copy op: "
          f"{(t_copy_op - t_copy_kernel) * 1e3:.1f} ms), mostly for its new {x.nbytes >> 20} MB output, whose fresh "
          f"pages the operating system zero-fills as the kernel first touches them.")
    if hw.device.is_available("opencl"):  # the OpenCL rows: same chain, same run, against pyopencl.array
        import opencl_fused
        opencl_fused.main()
    else:
        print("opencl: no OpenCL device here, OpenCL rows skipped")
    return 0  # a missed target prints FAIL; it is a measurement, not an error


#: chains a plan fuses, by kind: (graph ops applied in turn to x, each after adding a bias row b)
CHAINS = {"vectorised": ("tanh", "neg", "abs"), "series": ("gelu",)}


def _fused_node(ops, shape):
    """(the fused node of x + b followed by `ops`, the graph's values) from a cpu:0 plan."""
    b = hw.graph.GraphBuilder()
    x, bias = b.input("x", shape), b.input("b", shape[-1:])
    y = b.op("add", [x, bias])
    for op in ops:
        y = b.op(op, [y])
    plan = hw.graph.partition(b.build([b.op("mul", [y, x])]), devices=["cpu"])
    node = next(n for n in plan.graph.nodes if n.op == "fused")
    return node, plan.graph.values


def crossover() -> int:
    """Per chain kind and size: the numpy calls' and the compiled program's seconds; the largest size numpy won."""
    from hwadapter.graph import hostchain
    from hwadapter.runtime.device import get
    from hwadapter.runtime.fused import fused_kernel
    device = get("cpu")
    if device.codegen is None:
        print(f"cpu: no codegen ({device.codegen_unavailable}): every chain runs as numpy calls")
        return 0
    sizes = [1 << k for k in range(8, 21, 2)]
    rows, found = [], {}
    with Progress(transient=True) as progress:
        task = progress.add_task("crossover", total=len(CHAINS) * len(sizes))
        for kind, ops in CHAINS.items():
            found[kind] = 0
            for size in sizes:
                shape = (size // 64, 64)
                node, values = _fused_node(ops, shape)
                arrays = [np.random.default_rng(0).standard_normal(values[v].shape).astype(np.float32)
                          for v in node.inputs]
                limits = hostchain.NUMPY_UP_TO
                hostchain.NUMPY_UP_TO = dict.fromkeys(limits, 1 << 40)  # measure the numpy form at every size
                try:
                    numpy_calls = hostchain.host_chain(device, node, values)
                finally:
                    hostchain.NUMPY_UP_TO = limits
                program = fused_kernel(device, node.attrs)
                t_np, t_c = best_seconds(lambda: numpy_calls(*arrays)), best_seconds(lambda: program(*arrays))
                if t_np < t_c:
                    found[kind] = size
                rows.append([kind, size, f"{t_np * 1e6:.1f}", f"{t_c * 1e6:.1f}", f"{t_np / t_c:.2f}x"])
                progress.advance(task)
    table("fused chain on cpu:0: numpy calls vs the compiled program (best of 5)",
          ["chain", "elements", "numpy us", "compiled us", "numpy / compiled"], rows)
    for kind, size in found.items():
        print(f"{kind}: numpy faster up to {size} elements here; hostchain.NUMPY_UP_TO[{kind!r}] = "
              f"{hostchain.NUMPY_UP_TO[kind]}")
    return 0


if __name__ == "__main__":
    sys.exit(crossover() if "--crossover" in sys.argv[1:] else main())
