"""The compiled CPU path's vector math (glibc's libmvec) over every float32: each op's largest error in float32 ulps
against float64, and how many nan/inf/zero/subnormal results differ, over all 2^32 bit patterns in chunks (about 15
minutes on 2 cores), or every STEP-th (`--step`). The bounds in tests/test_vector_math.py come from this table.

    python benchmarks/vector_math.py [--step N]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from test_vector_math import BOUNDS, EXPONENTS, POW_BOUND, SPECIAL, _compiled, _pow_oracle, ulps  # noqa: E402

CHUNK = 1 << 24


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step", type=int, default=1, help="every STEP-th float32 bit pattern (1: all of them)")
    args = p.parse_args(argv)
    device = _compiled()
    cases = {op: (lambda x, op=op: device.primitive(op)(x), oracle, bound) for op, (oracle, bound) in BOUNDS.items()}
    cases.update({f"pow^{e:.4g}": (lambda x, e=e: device.primitive("pow")(x, np.full_like(x, e)), _pow_oracle(e),
                                   POW_BOUND) for e in EXPONENTS})
    worst = {op: [0.0, 0] for op in cases}
    starts = range(0, 1 << 32, CHUNK * args.step)
    with Progress(console=Console(stderr=True), transient=True) as progress, np.errstate(all="ignore"):
        task = progress.add_task("float32 range", total=len(starts))
        for start in starts:
            bits = np.arange(start, min(start + CHUNK * args.step, 1 << 32), args.step, dtype=np.uint64)
            x = np.concatenate([bits.astype(np.uint32).view(np.float32), SPECIAL])
            for op, (run, oracle, _) in cases.items():
                err, wrong = ulps(np.asarray(run(x)), oracle(x.astype(np.float64)))
                worst[op][0] = max(worst[op][0], err)
                worst[op][1] += wrong
            progress.advance(task)
    t = Table(title=f"compiled float32 ops vs float64, every {args.step}th float32 bit pattern; vector math: "
                    f"{', '.join(device.codegen.dialect.vector_math)}", title_justify="left")
    for c in ("op", "max ulp", "test's bound", "nan/inf/zero/subnormal wrong"):
        t.add_column(c, justify="left" if c == "op" else "right")
    for op, (err, wrong) in worst.items():
        t.add_row(op, f"{err:.2f}", f"{cases[op][2]:.1f}", str(wrong))
    Console(width=120).print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
