"""The ONNX project's node test cases (hwadapter.onnx.nodetests) for the ops the plugin claims, run through the ONNX
backend on the device: a bounded subset, the first cases of each op. Skipped when onnx is not installed."""
from __future__ import annotations

import importlib
import warnings

import numpy as np

import pytest

from hwadapter.conformance.sections._target import params, usable
from hwadapter.plugin import primitive_ops

pytestmark = pytest.mark.usefixtures("kit_live_bytes")

#: ONNX op type -> the hwadapter op its converter maps it to, one to one (the ops a plugin can claim).
ONNX_OPS = {
    "Abs": "abs", "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow", "Neg": "neg", "Exp": "exp",
    "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh",
    "Erf": "erf", "Sin": "sin", "Cos": "cos", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign",
    "Equal": "equal", "Less": "less", "Greater": "greater", "Where": "where", "Not": "logical_not",
    "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor", "Cast": "cast", "Clip": "clip", "Mod": "mod",
    "MatMul": "matmul", "Softmax": "softmax", "LogSoftmax": "log_softmax", "Conv": "conv2d",
    "ReduceSum": "sum", "ReduceMean": "mean",
    "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod", "ArgMax": "argmax", "ArgMin": "argmin",
    "Transpose": "transpose", "Concat": "concat", "Split": "split", "Gather": "gather", "Expand": "expand",
    "Pad": "pad", "CumSum": "cumsum", "TopK": "topk", "GatherElements": "gather_elements", "LRN": "lrn",
    "BatchNormalization": "batch_norm", "LayerNormalization": "layer_norm", "Gelu": "gelu",
}
# MaxPool and AveragePool are left out: generating their onnx cases takes seconds (the kernels section covers pools).
#: onnx's module of an op type's cases, where it is not the lower-case name.
MODULES = {"Not": "not_", "And": "and_", "Or": "or_", "BatchNormalization": "batch_normalization"}
CASES_PER_OP = 1  # the first cases of each op (by name): a bounded subset, so the section stays fast


def _claimed(dev) -> list:
    ops = set(dev.kernels.ops()) | (set(primitive_ops()) if dev.codegen is not None else set())
    return [t for t, op in ONNX_OPS.items() if op in ops]


def _none_claimed(dev) -> str:
    return (f"the {dev.type} plugin runs none of the ops this section checks through ONNX (neither a kernel nor a "
            f"codegen backend for {', '.join(sorted(set(ONNX_OPS.values()))[:6])}, ...)")


def pytest_generate_tests(metafunc):
    if "op_type" in metafunc.fixturenames:
        metafunc.parametrize("op_type", params(metafunc.config, _claimed, _none_claimed))


def _cases(op_type: str) -> list:
    """The node test cases of one op type: only its onnx module is imported (collecting every case takes 10 s)."""
    from onnx.backend.test.case import node  # lazy: onnx is optional: without it this section skips, not fails
    before = len(node._NodeTestCases)
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # onnx's own generators overflow on purpose
        warnings.simplefilter("ignore")
        importlib.import_module(f"onnx.backend.test.case.node.{MODULES.get(op_type, op_type.lower())}")  # exports run
    mine = [c for c in node._NodeTestCases[before:]]
    if not mine:  # imported before, in this process: its cases are already in the list
        mine = [c for c in node._NodeTestCases
                if c.model.graph.node and c.model.graph.node[0].op_type == op_type]
    return sorted(mine, key=lambda c: c.name)


def test_onnx_node_cases(kit_device, op_type):
    usable(op_type)
    pytest.importorskip("onnx", reason="onnx is not installed (pip install hwadapter[onnx])")
    from hwadapter.onnx import nodetests  # lazy: it needs onnx, which is optional (see importorskip above)
    try:
        cases = _cases(op_type)
    except ImportError:
        pytest.skip(f"this onnx has no node test cases for {op_type}")
    passed, unsupported, problems = 0, [], []
    for case in cases:
        if passed >= CASES_PER_OP:
            break
        out = nodetests.run_case(case, kit_device)
        if out.status == "pass":
            passed += 1
        elif out.status == "unsupported":
            unsupported.append(f"{case.name}: {out.detail}")
        else:
            problems.append(f"{case.name}: {out.status}: {out.detail} (rerun: python -m hwadapter.onnx.nodetests "
                            f"-d {kit_device} '^{case.name}$')")
        if len(problems) >= CASES_PER_OP:
            break
    assert not problems, "\n".join(problems)
    if not passed:
        pytest.skip(f"no {op_type} case converts: " + "; ".join(unsupported[:2]))
