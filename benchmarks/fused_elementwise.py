"""A chain of 8 elementwise ops over 16M float32 values: numpy unfused vs one fused kernel-primitive program.

Columns (same run): numpy doing the 8 ops one by one; the fused program compiled by the CPU plugin's C/OpenMP
backend; the machine's copy bandwidth (`np.copyto`, bytes read + written); and, when an OpenCL device is present,
the fused program on opencl:0 against pyopencl.array doing the same 8 ops unfused (benchmarks/opencl_fused.py).
Targets (issue 3): fused CPU ≥ 3x numpy and ≥ 60% of the copy bandwidth.  Run: `python benchmarks/fused_elementwise.py`.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).parent))
from _util import best_seconds, table  # noqa: E402

import hwadapter as hw  # noqa: E402
from hwadapter import kp  # noqa: E402

N = int(os.environ.get("HWADAPTER_BENCH_N", 16 << 20))
# y = min(|relu(x*1.5 + 0.25) * 0.5 - x|, 4) + 1  — eight ops, one input, one output
CHAIN = [("mul", ("x", 1.5), "a"), ("add", ("a", 0.25), "b"), ("relu", ("b",), "c"), ("mul", ("c", 0.5), "d"),
         ("sub", ("d", "x"), "e"), ("abs", ("e",), "f"), ("min", ("f", 4.0), "g"), ("add", ("g", 1.0), "y")]


def numpy_chain(x):
    """The oracle and the unfused baseline: one numpy call (and one temporary) per op."""
    return np.minimum(np.abs(np.maximum(x * 1.5 + 0.25, 0) * 0.5 - x), 4.0) + 1.0


def main() -> int:
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    expected = numpy_chain(x)
    chain8 = kp.register_op("chain8", kp.fuse(CHAIN, ["x"], ["y"], name="chain8"))
    moved = 2 * x.nbytes  # one read of x, one write of y
    rows, verdict = [], 0
    with Progress(transient=True) as progress:
        task = progress.add_task("timing", total=4)
        t_np = best_seconds(lambda: numpy_chain(x), repeats=3)
        progress.advance(task)
        dst = np.empty_like(x)
        t_copy = best_seconds(lambda: np.copyto(dst, x), repeats=3)
        progress.advance(task)
        xt = hw.to_tensor(x, device="cpu")
        got = chain8(xt).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        t_cpu = best_seconds(lambda: chain8(xt), repeats=3)
        progress.advance(task)
        rows.append(["numpy, 8 ops unfused", f"{t_np * 1e3:.1f}", f"{moved / t_np / 1e9:.1f}", "1.00x", "", ""])
        rows.append(["np.copyto (copy bandwidth)", f"{t_copy * 1e3:.1f}", f"{moved / t_copy / 1e9:.1f}",
                     f"{t_np / t_copy:.2f}x", "", ""])
        speedup, frac = t_np / t_cpu, t_copy / t_cpu
        ok = speedup >= 3 and frac >= 0.6
        verdict |= not ok
        rows.append(["fused kernel, cpu:0 (C + OpenMP)", f"{t_cpu * 1e3:.1f}", f"{moved / t_cpu / 1e9:.1f}",
                     f"{speedup:.2f}x", f"{frac * 100:.0f}%", ("PASS" if ok else "FAIL") + " (≥3x, ≥60%)"])
        progress.advance(task)
    table(f"8-op elementwise chain over {N:,} float32 on cpu:0 (ms per run, best of 3)",
          ["implementation", "ms", "GB/s", "vs numpy", "of copy bw", "target"], rows)
    if hw.device.is_available("opencl"):  # the OpenCL column: same chain, same run, against pyopencl.array
        import opencl_fused
        verdict |= opencl_fused.main()
    else:
        print("opencl: no OpenCL device here, OpenCL column skipped")
    return int(verdict)


if __name__ == "__main__":
    sys.exit(main())
