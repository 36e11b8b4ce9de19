"""float32 matmul on opencl:0 (the OpenCL plugin's tiled local-memory GEMM) against numpy (BLAS) on the same cores.

1024² and 2048², inputs already on the device, timed to completion (synchronize). Target on PoCL: >= 0.5x numpy.
Run: `python benchmarks/matmul.py` (HWADAPTER_BENCH_SIZES=512,1024 to choose sizes).
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

DEV = "opencl:0"
SIZES = [int(s) for s in os.environ.get("HWADAPTER_BENCH_SIZES", "1024,2048").split(",")]


def main() -> int:
    if not hw.device.is_available("opencl"):
        print("opencl:0 is not available: pip install -e plugins/opencl (and pocl-opencl-icd for a CPU device)")
        return 1
    from hwadapter.runtime.device import get
    from hwadapter_opencl.kernels import _gemm_config

    rt = get(DEV).runtime
    props = hw.device.get_device_properties(DEV)
    rng = np.random.default_rng(0)
    rows, worst = [], float("inf")
    with Progress(transient=True) as progress:
        task = progress.add_task("timing", total=len(SIZES))
        for n in SIZES:
            a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
            ta, tb = hw.to_tensor(a, device=DEV), hw.to_tensor(b, device=DEV)
            np.testing.assert_allclose(hw.matmul(ta, tb).numpy(), a @ b, rtol=1e-3, atol=1e-2 * np.sqrt(n))

            def device():
                y = hw.matmul(ta, tb)
                hw.device.synchronize(DEV)
                return y
            # interleave the two, so both see the same machine load
            t_np = t_cl = float("inf")
            for _ in range(3):
                t_np = min(t_np, best_seconds(lambda: a @ b, repeats=2))
                t_cl = min(t_cl, best_seconds(device, repeats=2))
            flops = 2 * n ** 3
            ratio = t_np / t_cl
            worst = min(worst, ratio)
            rows.append([f"{n}x{n} @ {n}x{n}", f"{t_np * 1e3:.1f}", f"{flops / t_np / 1e9:.1f}", f"{t_cl * 1e3:.1f}",
                         f"{flops / t_cl / 1e9:.1f}", f"{ratio:.2f}x"])
            progress.advance(task)
    table(f"float32 matmul: numpy (BLAS) vs {DEV} ({props.name}, {props.compute_units} compute units)",
          ["shape", "numpy ms", "numpy GFLOP/s", "opencl ms", "opencl GFLOP/s", "opencl vs numpy"], rows)
    cfg = _gemm_config(rt, 2048, 2048, 4)
    ok = worst >= 0.5
    print(f"worst ratio {worst:.2f}x ({'PASS' if ok else 'FAIL'}, target >= 0.5x numpy). GEMM tiles on this device: "
          f"{cfg['TM']}x{cfg['TN']} per work-group, K panels of {cfg['TK']} in local memory, {cfg['RM']}x"
          f"{cfg['RN'] * cfg['VW']} register micro-tiles, {cfg['WG']} work item(s) per group.")
    if rt.is_cpu:
        print("What limits it: both sides are compute-bound on the same cores (FMA throughput). The OpenCL kernel's "
              f"inner loop is an {cfg['RM']}x{cfg['RN'] * cfg['VW']} FMA micro-kernel on float{cfg['VW']} vectors as "
              "the driver's compiler (LLVM) schedules it, and every work-group re-packs its A and B panels into local "
              "memory; BLAS runs hand-written assembly with prefetching and packs each panel once per cache block. "
              "The machine's other load moves both columns from run to run.")
    else:
        print("What limits it: on a GPU this simple 64x64 tile (4x4 per work item) is far from vendor BLAS; it is the "
              "readable reference, not a tuned kernel.")
    return int(not ok)


if __name__ == "__main__":
    sys.exit(main())
