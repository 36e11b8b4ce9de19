"""Per-call cost of the Python-kernel path alone (no Paddle): pykernels.run of `add` on memory of the plugin's
native library, as the shim calls it, against numpy's add of the same arrays on the host.

    python bridges/paddle/benchmarks/pykernels.py [opencl|cuda|cpu]

The library is initialised first, as Paddle's shim would, so that the plugin's runtime adopts its memory
(Runtime.adopt); `cpu` takes the numpy-view path. Each figure is the median of 7 runs of 200 calls.
"""
from __future__ import annotations

import ctypes
import sys

import numpy as np
from rich.console import Console
from rich.table import Table

from hwadapter.runtime.discovery import registry
from hwadapter.runtime.native import NativeRuntime, load_library
from hwadapter_paddle import pykernels
from hwadapter_paddle.optable import DTYPE_CODES
from timing import per_call


def main(device_type: str) -> None:
    rt = NativeRuntime(load_library(registry.get(device_type).plugin.native_library()), 0)
    code = DTYPE_CODES["float32"]
    table = Table(title=f"pykernels.run('{device_type}', 'add', ...) on the native library's memory (µs per call)")
    for col in ("float32 elements", "pykernels.run", "numpy add on the host", "right"):
        table.add_column(col, justify="right")
    for n in (16, 1 << 16, 1 << 20):
        a = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        pa, po = rt.allocate(a.nbytes), rt.allocate(a.nbytes)
        rt.copy_h2d(pa, 0, a)
        view = [memoryview((ctypes.c_char * a.nbytes).from_address(p)).cast("B") for p in (pa, po)]
        t = (view[0], (n,), (1,), code)
        seconds = per_call(lambda: pykernels.run(device_type, "add", [t, t], (view[1], (n,), (1,), code), {}), 200)
        host = per_call(lambda: np.add(a, a), 200)
        got = np.empty_like(a)
        rt.copy_d2h(got, po, 0)
        table.add_row(f"{n:,}", f"{seconds * 1e6:.1f}", f"{host * 1e6:.1f}", str(np.array_equal(got, a + a)))
        rt.free(pa)
        rt.free(po)
    Console().print(table)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "opencl")
