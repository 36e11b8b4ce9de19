"""Eager per-op latency of `add` on the cpu device against numpy and PyTorch CPU eager, from the same run.

Target (issue 2): small-op latency at most 1.5x PyTorch eager. Run: `make bench` or `python benchmarks/dispatch.py`.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from rich.progress import track

sys.path.insert(0, str(Path(__file__).parent))
from _util import best_seconds, table  # noqa: E402

import hwadapter as hw  # noqa: E402

TARGET = 1.5


def main() -> int:
    try:
        import torch
        torch.set_num_threads(max(1, torch.get_num_threads()))
    except ImportError:
        torch = None
    hw.set_device("cpu")
    rows, verdict = [], 0
    for n in track([1, 1 << 20], description="timing add"):
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
            ratio = t_hw / t_pt
            row += [f"{t_pt * 1e6:.2f}", f"{ratio:.2f}x"]
            if n == 1:
                row.append("PASS" if ratio <= TARGET else "FAIL")
                verdict |= ratio > TARGET
            else:
                row.append("(reported)")
        else:
            row += ["-", "-", "torch not installed"]
        rows.append(row)
    table("hwadapter eager add on cpu:0 (µs per op, best of 5)",
          ["elements", "hwadapter", "numpy", "hw/numpy", "torch eager", "hw/torch", f"target ≤{TARGET}x"], rows)
    return int(verdict)


if __name__ == "__main__":
    sys.exit(main())
