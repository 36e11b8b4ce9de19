"""The ONNX project's node test cases run through hwadapter's backend: `cases()`, `run_case(case, device)`.

Statuses: "pass"; "unsupported" (refused at prepare: an op, attribute, mode or dtype hwadapter does not convert,
with why); "wrong" (ran, and an output differs from onnx's expected one: a bug); "error" (anything else raised: a
crash in a converter or a kernel, also a bug).
"""
from __future__ import annotations

import argparse
import functools
import re
import warnings
from dataclasses import dataclass

import numpy as np
from onnx import numpy_helper, version_converter
from onnx.backend.test.case import node

from ..api.errors import UnsupportedDTypeError
from .backend import prepare
from .convert import DEFAULT_DOMAINS, MIN_OPSET, UnsupportedOpError

STATUSES = ("pass", "unsupported", "wrong", "error")


@functools.lru_cache(maxsize=1)
def cases() -> dict:
    """{name: onnx TestCase} of every node test case the installed onnx defines (generated, a few seconds)."""
    state = np.random.get_state()
    np.random.seed(0)  # the cases draw their inputs from numpy's global generator: the same data in every process
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return {c.name: c for c in node.collect_testcases(None)}
    finally:
        np.random.set_state(state)


def select(patterns=(), cases_: dict | None = None) -> dict:
    """The cases whose name matches any regex of `patterns` (all of them when there is none)."""
    cases_ = cases() if cases_ is None else cases_
    if not patterns:
        return dict(cases_)
    regexes = [re.compile(p) for p in patterns]
    return {n: c for n, c in cases_.items() if any(r.search(n) for r in regexes)}


def op_of(case) -> str:
    """The op type a case tests: its model's single node's, or the node types joined with '+'."""
    types = list(dict.fromkeys(n.op_type for n in case.model.graph.node))
    return types[0] if len(types) == 1 else "+".join(types[:3])


@dataclass
class Outcome:
    """How one case ended: "pass", "unsupported" (refused at prepare, with why), "wrong" or "error"."""
    name: str
    status: str
    detail: str = ""


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def prepare_case(case, device: str = "cpu"):
    """(rep, None) when the case's model converts, else (None, Outcome "unsupported" or "error"): no run."""
    case = cases()[case] if isinstance(case, str) else case
    try:
        return prepare(upgraded(case.model), device), None
    except (UnsupportedOpError, UnsupportedDTypeError) as err:
        return None, Outcome(case.name, "unsupported", _first_line(err))
    except Exception as err:  # noqa: BLE001 - any other failure is the case's error, reported, not raised
        return None, Outcome(case.name, "error", f"prepare: {type(err).__name__}: {_first_line(err)}")


def upgraded(model):
    """The model, or for one whose default-domain opset is older than hwadapter takes (a few cases of ops unchanged
    since opset 1, e.g. Not), the model upgraded to MIN_OPSET: the fix hwadapter's refusal of it gives."""
    old = [imp for imp in model.opset_import if imp.domain in DEFAULT_DOMAINS and imp.version < MIN_OPSET]
    return version_converter.convert_version(model, MIN_OPSET) if old else model


def run_case(case, device: str = "cpu", rep=None) -> Outcome:
    """Run every data set of `case` (a TestCase or its name) on `device`, compared as onnx's runner compares."""
    case = cases()[case] if isinstance(case, str) else case
    if rep is None:
        rep, failed = prepare_case(case, device)
        if failed is not None:
            return failed
    return _run_data_sets(case, rep.run)


def normalize(value):
    """A data set's value as onnx's runner loads it: TensorProto and numpy scalars as arrays, sequences as lists."""
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    if type(value).__name__ == "TensorProto":
        return numpy_helper.to_array(value)
    return np.asarray(value) if isinstance(value, np.generic) else value


def _run_data_sets(case, run) -> Outcome:
    for k, (inputs, expected) in enumerate(case.data_sets):
        inputs, expected = normalize(list(inputs)), normalize(list(expected))
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = run(inputs)
        except (UnsupportedOpError, UnsupportedDTypeError) as err:  # converted at run: it needed an input's value
            return Outcome(case.name, "unsupported", _first_line(err))
        except Exception as err:  # noqa: BLE001
            return Outcome(case.name, "error", f"run (data set {k}): {type(err).__name__}: {_first_line(err)}")
        problem = compare(got, expected, case.rtol, case.atol)
        if problem:
            return Outcome(case.name, "wrong", f"data set {k}: {problem}")
    return Outcome(case.name, "pass")


def run_case_ort(case) -> Outcome:
    """The same case on onnxruntime's CPU execution provider: the yardstick (session refused = "unsupported")."""
    import onnxruntime as ort  # lazy: onnxruntime is optional (the test extra) and costs ~80 ms to import
    case = cases()[case] if isinstance(case, str) else case
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    try:
        sess = ort.InferenceSession(case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 - onnxruntime refused the model: not implemented or not valid
        return Outcome(case.name, "unsupported", f"{type(err).__name__}: {_first_line(err)}")
    names = [i.name for i in sess.get_inputs()]
    return _run_data_sets(case, lambda inputs: sess.run(None, dict(zip(names, inputs))))


def compare(got, expected, rtol: float, atol: float) -> str:
    """'' when `got` matches `expected` (count, dtype, shape, values within tolerance), else what differs."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        problem = _compare_one(g, e, rtol, atol)
        if problem:
            return f"output {i}{problem}"
    return ""


def _compare_one(g, e, rtol: float, atol: float) -> str:
    """'' or what differs, for one output (a tensor, a sequence of them, or None for an empty optional)."""
    if e is None or g is None:
        return "" if e is None and g is None else f": {type(g).__name__}, expected {type(e).__name__}"
    if isinstance(e, list) or isinstance(g, list):
        if not (isinstance(e, list) and isinstance(g, list)) or len(g) != len(e):
            return f": {type(g).__name__} of {len(g)}, expected a sequence of {len(e)}"
        for k, (gk, ek) in enumerate(zip(g, e)):
            problem = _compare_one(gk, ek, rtol, atol)
            if problem:
                return f"[{k}]{problem}"
        return ""
    g, e = np.asarray(g), np.asarray(e)
    if g.dtype != e.dtype:
        return f" is {g.dtype}, expected {e.dtype}"
    if g.shape != e.shape:
        return f" has shape {g.shape}, expected {e.shape}"
    try:
        if e.dtype.kind in "fc":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
        elif e.dtype.kind in "biu":
            np.testing.assert_array_equal(g, e)
        else:  # strings, objects; ml_dtypes (bfloat16, float8) compare as float
            if e.dtype.kind == "V" or e.dtype.names is None and e.dtype.kind not in "OSU":
                np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol,
                                           equal_nan=True)
            else:
                np.testing.assert_array_equal(g, e)
    except AssertionError as err:
        return ": " + " ".join(str(err).split())[:300]
    return ""


def main(argv=None) -> int:
    """python -m hwadapter.onnx.nodetests [-d DEVICE] PATTERN...: each matching case's outcome."""
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("-d", "--device", default="cpu")
    p.add_argument("-q", "--quiet", action="store_true", help="print only cases that do not pass")
    p.add_argument("patterns", nargs="*")
    args = p.parse_args(argv)
    counts: dict = {}
    for name, case in select(args.patterns).items():
        out = run_case(case, args.device)
        counts[out.status] = counts.get(out.status, 0) + 1
        if not (args.quiet and out.status == "pass"):
            print(f"{out.status:12s} {name}  {out.detail}")
    print(counts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
