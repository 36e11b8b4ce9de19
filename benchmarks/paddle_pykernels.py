"""Per-call cost of the Paddle bridge's Python-kernel path alone (no Paddle): pykernels.run of `add` on memory of
the plugin's native library, as the shim calls it, against numpy's add of the same arrays on the host.

    python benchmarks/paddle_pykernels.py [opencl|cuda|cpu]

The library is initialised first, as Paddle's shim would, so that the plugin's runtime adopts its memory
(Runtime.adopt); `cpu` takes the numpy-view path.
"""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import best_seconds, table  # noqa: E402

from hwadapter import host  # noqa: E402
from hwadapter_paddle import pykernels  # noqa: E402
from hwadapter_paddle.optable import DTYPE_CODES  # noqa: E402


def main(device_type: str) -> None:
    rt = host.native_runtime(host.plugin_record(device_type).plugin.native_library())
    code = DTYPE_CODES["float32"]
    rows = []
    for n in (16, 1 << 16, 1 << 20):
        a = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        pa, po = rt.allocate(a.nbytes), rt.allocate(a.nbytes)
        rt.copy_h2d(pa, 0, a)
        view = [memoryview((ctypes.c_char * a.nbytes).from_address(p)).cast("B") for p in (pa, po)]
        t = (view[0], (n,), (1,), code)
        seconds = best_seconds(lambda: pykernels.run(device_type, "add", [t, t], (view[1], (n,), (1,), code), {}))
        host = best_seconds(lambda: np.add(a, a))
        got = np.empty_like(a)
        rt.copy_d2h(got, po, 0)
        rows.append([f"{n:,}", f"{seconds * 1e6:.1f}", f"{host * 1e6:.1f}", f"{seconds / host:.1f}x",
                     str(np.array_equal(got, a + a))])
        rt.free(pa)
        rt.free(po)
    table(f"pykernels.run('{device_type}', 'add', ...) on the native library's memory (µs per call, best of 5)",
          ["float32 elements", "pykernels.run", "numpy add on the host", "ratio", "right"], rows)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "opencl")
