"""CUDA plugin on cuda:0: the fused 8-op elementwise chain against the device's copy bandwidth, and matmul against
cupy.matmul, all measured in the same run with CUDA events on the plugin's stream.

Targets: the fused chain over 16M float32 reaches ≥ 80% of the device-to-device copy bandwidth cupy measures (the
better of cudaMemcpy and cupy.copyto); hw.matmul of 4096² float32 reaches ≥ 90% of cupy.matmul. Device times are
taken with the launches queued behind a long memset, so host overhead cannot leave the GPU idle; the eager op's
wall time per call is reported too. Run: `python benchmarks/cuda_plugin.py` (make test-gpu); without a GPU it says why.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import best_seconds, table  # noqa: E402
from fused_elementwise import CHAIN, numpy_chain  # noqa: E402  the same chain as the CPU/OpenCL benchmark

import hwadapter as hw  # noqa: E402
from hwadapter import kp  # noqa: E402

N = int(os.environ.get("HWADAPTER_BENCH_N", 16 << 20))
MATMUL = int(os.environ.get("HWADAPTER_BENCH_MATMUL", 4096))
REPEATS = 20


def device_seconds(cp, stream, fn, repeats=REPEATS) -> float:
    """Seconds per call of fn on the GPU: calls queued behind a long memset, timed between two events."""
    free = cp.cuda.runtime.memGetInfo()[0]
    hold = cp.empty(min(8 << 30, free // 4), np.uint8)  # a few ms of work: the host queues every call meanwhile
    fn()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    cp.cuda.runtime.memsetAsync(hold.data.ptr, 0, hold.nbytes, stream.ptr)
    start.record(stream)
    for _ in range(repeats):
        fn()
    end.record(stream)
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / 1e3 / repeats


def main() -> int:
    if not hw.device.is_available("cuda"):
        from hwadapter.runtime.discovery import registry
        rec = registry.get("cuda")
        why = rec.explain() if rec else "the hwadapter-cuda plugin is not installed (pip install -e plugins/cuda)"
        print(f"benchmarks/cuda_plugin.py: no usable NVIDIA GPU, nothing to measure. {why}")
        return 0
    import cupy as cp
    from hwadapter.plugin import DeviceArray
    from hwadapter.runtime.device import get
    dev = get("cuda:0")
    stream = dev.runtime.default_stream.cupy
    with cp.cuda.Device(0), stream:
        return _fused(cp, stream, dev, DeviceArray) | _matmul(cp, stream)


def _fused(cp, stream, dev, DeviceArray) -> int:
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    chain8 = kp.register_op("chain8", kp.fuse(CHAIN, ["x"], ["y"], name="chain8"))
    xt = hw.to_tensor(x, device="cuda:0")
    np.testing.assert_allclose(chain8(xt).numpy(), numpy_chain(x), rtol=1e-6)
    runner = dev.primitive("chain8")
    inputs, program = runner.program([xt._data], {})
    loaded, launch = runner.load(program), program.bind(inputs, dev.codegen.dialect)  # the plugin's schedule
    out = DeviceArray.empty(dev, x.shape, x.dtype)
    buffers = [xt._data, out]
    a, b = cp.asarray(x), cp.empty(N, cp.float32)
    moved = 2 * x.nbytes  # read once, written once
    t_memcpy = device_seconds(cp, stream, lambda: cp.cuda.runtime.memcpyAsync(
        b.data.ptr, a.data.ptr, a.nbytes, cp.cuda.runtime.memcpyDeviceToDevice, stream.ptr))
    t_copyto = device_seconds(cp, stream, lambda: cp.copyto(b, a))
    t_copy = min(t_memcpy, t_copyto)
    t_fused = device_seconds(cp, stream, lambda: loaded.launch(launch.global_size, buffers, launch.scalar_args))
    t_eager = device_seconds(cp, stream, lambda: chain8(xt))
    t_wall = best_seconds(lambda: (chain8(xt), stream.synchronize()), repeats=3)
    frac = t_copy / t_fused
    gbs = lambda t: f"{moved / t / 1e9:.0f}"  # noqa: E731
    rows = [["cudaMemcpy device to device (cupy)", f"{t_memcpy * 1e6:.1f}", gbs(t_memcpy), "", ""],
            ["cupy.copyto", f"{t_copyto * 1e6:.1f}", gbs(t_copyto), "", ""],
            ["fused chain8 program, launched back to back", f"{t_fused * 1e6:.1f}", gbs(t_fused),
             f"{frac * 100:.0f}%", ("PASS" if frac >= 0.8 else "FAIL") + " (≥80% of copy bandwidth)"],
            ["fused chain8 as an eager op (device time)", f"{t_eager * 1e6:.1f}", gbs(t_eager),
             f"{t_copy / t_eager * 100:.0f}%", "(reported)"],
            ["fused chain8 as an eager op (wall, with sync)", f"{t_wall * 1e6:.1f}", gbs(t_wall), "", "(reported)"]]
    table(f"8-op elementwise chain over {N:,} float32 on cuda:0 (µs per run)",
          ["implementation", "µs", "GB/s", "of copy bw", "target"], rows)
    return int(frac < 0.8)


def _matmul(cp, stream) -> int:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((MATMUL, MATMUL)).astype(np.float32)
    b = rng.standard_normal((MATMUL, MATMUL)).astype(np.float32)
    at, bt = hw.to_tensor(a, device="cuda:0"), hw.to_tensor(b, device="cuda:0")
    ca, cb = cp.asarray(a), cp.asarray(b)
    cc = cp.empty_like(ca)
    got, want = hw.matmul(at, bt).numpy(), cp.matmul(ca, cb).get()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    t_cupy = device_seconds(cp, stream, lambda: cp.matmul(ca, cb, out=cc), repeats=10)
    t_hw = device_seconds(cp, stream, lambda: hw.matmul(at, bt), repeats=10)
    flops, ratio = 2 * MATMUL ** 3, t_cupy / t_hw
    rows = [["cupy.matmul (cuBLAS)", f"{t_cupy * 1e3:.2f}", f"{flops / t_cupy / 1e12:.1f}", "1.00x", ""],
            ["hw.matmul on cuda:0", f"{t_hw * 1e3:.2f}", f"{flops / t_hw / 1e12:.1f}", f"{ratio:.2f}x",
             ("PASS" if ratio >= 0.9 else "FAIL") + " (≥90% of cupy)"]]
    table(f"matmul {MATMUL}x{MATMUL} float32 on cuda:0 (ms per call)", ["implementation", "ms", "TFLOP/s",
                                                                         "vs cupy", "target"], rows)
    return int(ratio < 0.9)


if __name__ == "__main__":
    sys.exit(main())
