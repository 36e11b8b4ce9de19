"""The ONNX project's node test cases run through hwadapter's backend: `cases()`, `run_case(case, device)`."""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedDTypeError
from .convert import UnsupportedOpError


@functools.lru_cache(maxsize=1)
def cases() -> dict:
    """{name: onnx TestCase} of every node test case the installed onnx defines (generated, a few seconds)."""
    from onnx.backend.test.case import node
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {c.name: c for c in node.collect_testcases(None)}


@dataclass
class Outcome:
    """How one case ended: "pass", "unsupported" (refused at prepare, with why), "wrong" or "error"."""
    name: str
    status: str
    detail: str = ""


def run_case(case, device: str = "cpu") -> Outcome:
    """Run every data set of `case` (a TestCase or its name) on `device`, compared as onnx's runner compares."""
    from .backend import prepare
    case = cases()[case] if isinstance(case, str) else case
    try:
        rep = prepare(case.model, device)
    except (UnsupportedOpError, UnsupportedDTypeError) as err:
        return Outcome(case.name, "unsupported", str(err).splitlines()[0])
    except Exception as err:  # noqa: BLE001 - any other failure is the case's error, reported, not raised
        return Outcome(case.name, "error", f"prepare: {type(err).__name__}: {err}")
    for k, (inputs, expected) in enumerate(case.data_sets):
        try:
            with np.errstate(all="ignore"):
                got = rep.run(list(inputs))
        except Exception as err:  # noqa: BLE001
            return Outcome(case.name, "error", f"run (data set {k}): {type(err).__name__}: {err}")
        problem = compare(got, expected, case.rtol, case.atol)
        if problem:
            return Outcome(case.name, "wrong", f"data set {k}: {problem}")
    return Outcome(case.name, "pass")


def compare(got, expected, rtol: float, atol: float) -> str:
    """'' when `got` matches `expected` (count, dtype, shape, values within tolerance), else what differs."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        g, e = np.asarray(g), np.asarray(e)
        if g.dtype != e.dtype:
            return f"output {i} is {g.dtype}, expected {e.dtype}"
        if g.shape != e.shape:
            return f"output {i} has shape {g.shape}, expected {e.shape}"
        try:
            if e.dtype.kind in "fc":
                np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
            else:
                np.testing.assert_array_equal(g, e)
        except AssertionError as err:
            return f"output {i}: " + " ".join(str(err).split())[:300]
    return ""


def main(argv=None) -> int:
    """python -m hwadapter.onnx.nodetests [-d DEVICE] PATTERN...: each matching case's outcome."""
    import argparse
    import re
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("-d", "--device", default="cpu")
    p.add_argument("patterns", nargs="*", default=[""])
    args = p.parse_args(argv)
    counts: dict = {}
    for name, case in cases().items():
        if any(re.search(pat, name) for pat in args.patterns):
            out = run_case(case, args.device)
            counts[out.status] = counts.get(out.status, 0) + 1
            print(f"{out.status:12s} {name}  {out.detail}")
    print(counts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
