"""Eager per-op latency of `add`, from one run:

* cpu:0 against numpy and PyTorch CPU eager. Target: 1-element add at or below PyTorch eager (1.0x).
* opencl:0 (when hwadapter has that device and pyopencl is installed) against pyopencl itself: the same
  `out[i] = a[i] + b[i]` kernel launched directly, and pyopencl.array `a + b`, 16 float32 each, timed as N calls
  then one queue finish. The variants take turns, one run each per round, so drift in the host (PoCL's worker
  threads share its cores) hits them alike; a ratio is the median of the rounds' ratios, its spread printed beside
  it. Targets: at most 2x the direct launch, and faster than pyopencl.array.

Each target prints PASS or FAIL; the script exits 0 either way. Run: `make bench` or `python benchmarks/dispatch.py`.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, track
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from _util import best_seconds  # noqa: E402

import hwadapter as hw  # noqa: E402

TARGET = 1.0  # cpu:0 1-element add / PyTorch eager (issue 7: at or below it)
CL_DIRECT_TARGET = 2.0  # opencl:0 add / direct pyopencl launch of the same kernel
CL_ELEMENTS = 16
CL_CALLS = 2000  # calls per timed repeat, then one finish
CL_REPEATS = 15  # rounds

console = Console(width=80)


def _table(title: str, columns: list[str], rows: list[list]) -> None:
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*[str(v) for v in r])
    console.print(t)


def _verdict(ok: bool) -> str:
    return "[bold green]PASS[/]" if ok else "[bold red]FAIL[/]"


# ------------------------------------------------------------------------------------------------------------------
# cpu:0

def bench_cpu() -> None:
    try:
        import torch
        torch.set_num_threads(max(1, torch.get_num_threads()))
    except ImportError:
        torch = None
    hw.set_device("cpu")
    rows, target_ratio = [], None
    for n in track([1, 1 << 20], description="timing add on cpu:0", console=console):
        a = np.random.default_rng(0).random(n, dtype=np.float32)
        b = np.random.default_rng(1).random(n, dtype=np.float32)
        x, y = hw.to_tensor(a), hw.to_tensor(b)
        np.testing.assert_array_equal((x + y).numpy(), a + b)
        t_hw = best_seconds(lambda: x + y)
        t_np = best_seconds(lambda: a + b)
        row = [f"{n:,}", f"{t_hw * 1e6:.2f}", f"{t_np * 1e6:.2f}", f"{t_hw / t_np:.2f}x"]
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            t_pt = best_seconds(lambda: ta + tb)
            row += [f"{t_pt * 1e6:.2f}", f"{t_hw / t_pt:.2f}x"]
            if n == 1:
                target_ratio = t_hw / t_pt
        else:
            row += ["-", "-"]
        rows.append(row)
    _table("eager add on cpu:0 (µs per op, best of 5)",
           ["elements", "hwadapter", "numpy", "hw/numpy", "torch", "hw/torch"], rows)
    label = f"target: cpu:0 1-element add <= {TARGET}x PyTorch eager:"
    if target_ratio is None:
        console.print(f"{label} [yellow]SKIP[/]\n  (PyTorch not installed; `make bench` installs it)")
    else:
        console.print(f"{label} {_verdict(target_ratio <= TARGET)} ({target_ratio:.2f}x)")


# ------------------------------------------------------------------------------------------------------------------
# opencl:0

ADD_SOURCE = """
__kernel void add(__global const float *a, __global const float *b, __global float *out) {
    size_t i = get_global_id(0);
    out[i] = a[i] + b[i];
}
"""


def _rounds(variants, calls: int, repeats: int, progress, task) -> dict:
    """{name: [seconds per call in each round]}: every round times each variant once (`calls` calls, then its
    finish), in turn."""
    for _, fn, finish in variants:  # warm: routes, kernels and allocator buckets
        fn()
        finish()
    times = {name: [] for name, _, _ in variants}
    for _ in range(repeats):
        for name, fn, finish in variants:
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            finish()
            times[name].append((time.perf_counter() - start) / calls)
        progress.advance(task)
    return times


def _ratio(mine: list, theirs: list) -> tuple[float, float, float]:
    """(median, min, max) of the per-round ratios."""
    r = sorted(a / b for a, b in zip(mine, theirs))
    return r[len(r) // 2], r[0], r[-1]


def _opencl_unavailable() -> str | None:
    """Why the opencl:0 row cannot run, or None."""
    try:
        import pyopencl  # noqa: F401
        import pyopencl.array  # noqa: F401,F811
    except ImportError as err:
        return f"pyopencl is not installed ({err})"
    try:
        available = hw.device.get_available_device()
    except hw.HwAdapterError as err:
        return f"listing hwadapter devices failed: {str(err).splitlines()[0]}"
    if "opencl:0" not in available:
        return (f"hwadapter has no opencl:0 device (available: {', '.join(available)}); install "
                "plugins/opencl and an OpenCL driver (PoCL: scripts/ensure-opencl.sh)")
    return None


def bench_opencl() -> None:
    console.print()
    why = _opencl_unavailable()
    if why is not None:
        console.print(f"[yellow]opencl:0 skipped:[/] {escape(why)}")
        return
    import pyopencl as cl
    import pyopencl.array as cl_array

    a = np.random.default_rng(0).random(CL_ELEMENTS, dtype=np.float32)
    b = np.random.default_rng(1).random(CL_ELEMENTS, dtype=np.float32)
    expected = a + b
    nbytes = expected.nbytes

    with Progress(console=console, transient=True) as progress:
        setup = progress.add_task("opencl:0: building kernels", total=None)
        # hwadapter: the eager op, finished by the device's queue.
        x, y = hw.to_tensor(a, device="opencl:0"), hw.to_tensor(b, device="opencl:0")
        np.testing.assert_array_equal((x + y).numpy(), expected)
        hw_finish = lambda: hw.device.synchronize("opencl:0")  # noqa: E731

        # pyopencl on the same device as hwadapter's opencl:0 (every platform's devices in platform order).
        device = [d for p in cl.get_platforms() for d in p.get_devices()][0]
        hw_name = hw.device.get_device_properties("opencl:0").name
        ctx = cl.Context([device])
        queue = cl.CommandQueue(ctx, device)
        mf = cl.mem_flags
        a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
        b_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
        kernel = cl.Program(ctx, ADD_SOURCE).build().add  # built once; one Kernel object reused

        def direct():
            out = cl.Buffer(ctx, mf.WRITE_ONLY, nbytes)  # a fresh output per call, as an eager op has
            kernel(queue, (CL_ELEMENTS,), None, a_buf, b_buf, out)
            return out

        got = np.empty_like(expected)
        cl.enqueue_copy(queue, got, direct())
        queue.finish()
        np.testing.assert_array_equal(got, expected)

        a_arr, b_arr = cl_array.to_device(queue, a), cl_array.to_device(queue, b)
        np.testing.assert_array_equal((a_arr + b_arr).get(), expected)
        progress.remove_task(setup)

        variants = [("hwadapter x + y", lambda: x + y, hw_finish),
                    ("pyopencl direct launch", direct, queue.finish),
                    ("pyopencl.array a + b", lambda: a_arr + b_arr, queue.finish)]
        task = progress.add_task("opencl:0: timing the variants in turn", total=CL_REPEATS)
        times = _rounds(variants, CL_CALLS, CL_REPEATS, progress, task)
        progress.remove_task(task)

    mine = times["hwadapter x + y"]
    ratios = {name: _ratio(mine, t) for name, t in times.items()}
    rows = [[name, f"{min(t) * 1e6:.2f}", f"{sorted(t)[len(t) // 2] * 1e6:.2f}",
             *(["", ""] if t is mine else [f"{ratios[name][0]:.2f}x", f"{ratios[name][1]:.2f}-{ratios[name][2]:.2f}x"])]
            for name, t in times.items()]
    _table(f"eager add of {CL_ELEMENTS} float32 on opencl:0",
           ["variant", "best µs", "median µs", "hw/this", "spread"], rows)
    console.print(f"{CL_REPEATS} rounds, each timing every variant once ({CL_CALLS} calls, then a queue finish); "
                  "hw/this: the median of the rounds' ratios")
    console.print(f"device: {device.name.strip()} ({device.platform.name.strip()})"
                  + ("" if device.name.strip() == hw_name.strip() else
                     f"; [yellow]hwadapter's opencl:0 is {hw_name!r}[/]"))
    r_direct = ratios["pyopencl direct launch"][0]
    r_array = ratios["pyopencl.array a + b"][0]
    console.print(f"target: opencl:0 add <= {CL_DIRECT_TARGET:g}x the direct launch: "
                  f"{_verdict(r_direct <= CL_DIRECT_TARGET)} ({r_direct:.2f}x)")
    console.print(f"target: opencl:0 add faster than pyopencl.array: {_verdict(r_array < 1)} ({r_array:.2f}x)")


def main() -> int:
    bench_cpu()
    bench_opencl()
    return 0  # a missed target prints FAIL; it is a measurement, not an error


if __name__ == "__main__":
    sys.exit(main())
