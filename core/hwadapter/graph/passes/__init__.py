"""Graph passes: the device-independent pipeline `optimize` (infer, fold, cse, dce, fold_batch_norm, fold_pad) and the
device-dependent `fuse` (conv2d + activation epilogues, elementwise chains into "fused" kernels)."""
from __future__ import annotations

from .batchnorm import fold_batch_norm
from .common import PassReport, graph_error
from .cse import cse
from .dce import dce
from .fold import fold
from .fusion import ACTIVATIONS, conv_epilogues, conv_residual, fuse, linear_epilogues
from .infer import infer
from .pad import fold_pad

#: The device-independent passes, in the order `optimize` runs them.
PIPELINE = (("infer", infer), ("fold", fold), ("cse", cse), ("dce", dce), ("fold_batch_norm", fold_batch_norm),
            ("fold_pad", fold_pad))
#: Every pass name `disable` accepts: optimize's, fuse's ("fuse" switches off all four of its parts), and the memory
#: planner's "inplace" (no step writes its output over an input; hwadapter.graph.memory).
PASSES = frozenset(name for name, _ in PIPELINE) | {"fuse", "conv_residual", "conv_epilogue", "linear_epilogue",
                                                     "fuse_chains", "inplace"}

__all__ = ["ACTIVATIONS", "PASSES", "PIPELINE", "PassReport", "conv_epilogues", "conv_residual", "cse", "dce", "fold",
           "fold_batch_norm", "fold_pad", "fuse", "infer", "linear_epilogues", "optimize"]


def optimize(graph, disable=frozenset()):
    """(optimised graph, [PassReport]) after each pass of PIPELINE not named in `disable`; a disabled pass is
    reported as such. The result computes the same outputs, by the same names, from the same inputs."""
    unknown = set(disable) - PASSES
    if unknown:
        raise graph_error(f"optimize: unknown passes {sorted(unknown)} in disable", f"use names of {sorted(PASSES)}")
    reports = []
    for name, run in PIPELINE:
        n = len(graph.nodes)
        if name in disable:
            reports.append(PassReport(name, n, n, "disabled"))
            continue
        graph, report = run(graph)
        reports.append(report)
    return graph, reports
