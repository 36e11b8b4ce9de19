"""`hwadapter partition GRAPH.json|MODEL.onnx`: partition a graph file or an ONNX model over devices and print (or
draw) the plan."""
from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from hwadapter.api.errors import HwAdapterError
from hwadapter.runtime.device import devices

from .common import _console, _positive_int, _text
from .graph_file import _BadInput, load_graph


def _add_partition(sub) -> None:
    p = sub.add_parser("partition", help="split a graph over devices and show the plan (nodes, copies, memory)",
                       description="Read a graph file written by graph.save(path) (its JSON form, Graph.to_json()) "
                                   "or an ONNX model (.onnx), run the optimisation passes, partition it over "
                                   "the devices in priority order, and print the plan's summary: nodes per device, "
                                   "subgraphs, fallbacks, copies, planned vs naive peak memory, passes.")
    p.add_argument("graph", metavar="GRAPH.json|MODEL.onnx",
                   help="a graph file written by graph.save(path), or an ONNX model (a name ending in .onnx)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...", dest="shapes",
                   help="ONNX models: a shape for an input whose dims the model leaves open (default: 1 each)")
    p.add_argument("--device", action="append", metavar="DEVICE", dest="devices",
                   help="a device to place nodes on, highest priority first; repeat it (default: cpu)")
    p.add_argument("--svg", metavar="FILE", help="also draw the plan as SVG: nodes coloured by device, subgraphs boxed")
    p.add_argument("--min-subgraph", type=_positive_int, default=2, metavar="N",
                   help="smallest region of one device handed to its subgraph backend (default 2)")
    p.add_argument("--no-passes", action="store_true", help="partition the graph as written: no optimisation pass")
    p.add_argument("--disable-pass", action="append", default=[], metavar="PASS",
                   help="switch one optimisation pass off (repeatable), e.g. fold, cse, dce, fold_batch_norm")
    p.set_defaults(func=_cmd_partition)


def _partitioner():
    """The function hwadapter.graph.partition, or None when this build has no partitioner."""
    import hwadapter.graph as graph  # lazy: the graph layer costs ~90 ms; `hwadapter --help` imports this module
    module = "hwadapter.graph.partition"
    for find in (lambda: getattr(graph, "partition", None), lambda: importlib.import_module(module)):
        try:
            fn = find()
        except ImportError as err:  # a missing module of the partitioner's is "none"; any other one is a bug, raised
            if (getattr(err, "name", None) or "").startswith(module):
                continue
            raise
        fn = getattr(fn, "partition", None) if inspect.ismodule(fn) else fn  # the submodule shadows the function
        if callable(fn):
            return fn
    return None


def _load_onnx(args):
    """The hwadapter Graph of an ONNX model file (its declared input shapes, --shape for open dims)."""
    if not Path(args.graph).is_file():
        raise _BadInput(f"{args.graph}: no such file")
    shapes = {}
    for item in args.shapes:
        name, _, dims = item.partition("=")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            raise _BadInput(f"--shape {item!r}: expected NAME=D0,D1,... with whole numbers") from None
    try:
        import hwadapter.onnx as hwonnx  # lazy: the ONNX frontend costs ~140 ms; only .onnx files need it
        model = hwonnx.load(args.graph)
        unknown = set(shapes) - set(model.inputs)
        if unknown:
            raise _BadInput(f"--shape: the model has no input {sorted(unknown)[0]!r}; its inputs are {model.inputs}")
        return model.graph(shapes)
    except HwAdapterError as err:
        raise _BadInput(str(err)) from None


def _cmd_partition(args) -> int:
    console, err_console = _console(), _console(stderr=True)

    def fail(message: str, status: int) -> int:
        err_console.print(_text(f"hwadapter partition: {message}", "red"))
        return status

    try:
        graph = _load_onnx(args) if args.graph.lower().endswith(".onnx") else load_graph(args.graph)
    except _BadInput as err:
        return fail(str(err), 2)
    names = args.devices or ["cpu"]
    try:
        targets = [str(devices.get(d)) for d in names]
    except HwAdapterError as err:
        return fail(f"{err}", 2)
    partition = _partitioner()
    if partition is None:
        return fail("this build has no partitioner (the module hwadapter.graph.partition is missing). Fix: update "
                    "hwadapter to a version with static graphs (issue 9)", 1)
    passes = False if args.no_passes else (frozenset(args.disable_pass) if args.disable_pass else True)
    try:
        plan = partition(graph, devices=targets, min_subgraph=args.min_subgraph, passes=passes)
    except HwAdapterError as err:
        return fail(f"cannot partition {args.graph} over {', '.join(targets)}: {err}", 1)
    summary = plan.summary()
    print(summary) if isinstance(summary, str) else console.print(summary)
    if args.svg:
        try:
            plan.save_svg(args.svg)
        except (OSError, HwAdapterError, ImportError) as err:  # ImportError: a build without the drawing module
            return fail(f"cannot write {args.svg}: {type(err).__name__}: {err}", 1)
        console.print(_text(f"wrote {args.svg}"))
    return 0
