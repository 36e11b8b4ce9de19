"""`hwadapter run MODEL.onnx`: run an ONNX model on devices, with seeded random inputs or .npy files; optionally
time it (`--bench N`), compare it with onnxruntime (`--compare onnxruntime`) and profile it (`--profile trace.json`).

onnxruntime is never needed to run: `--compare` says so clearly when it is missing.
"""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import numpy as np
from rich.table import Table

from hwadapter.api.errors import HwAdapterError
from hwadapter.device import synchronize
from hwadapter.runtime.device import devices

from .common import _console, _positive_int, _text, _whole_number

#: The IR version a model is given for onnxruntime when it refuses a newer one (what onnxruntime 1.2x reads).
ORT_IR_VERSION = 10
#: Runs of each side when --compare times without --bench.
COMPARE_RUNS = 5
TOP_KERNELS = 10


class _Fail(Exception):
    """A message for the user and the exit status."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def _add_run(sub) -> None:
    p = sub.add_parser("run", help="run an ONNX model on devices: outputs, latency, onnxruntime comparison, profile",
                       description="Load an ONNX model, run it on the devices given (highest priority first; the "
                                   "cpu is added as fallback) with seeded random inputs or .npy files, and print a "
                                   "summary of its outputs. --bench times it, --compare onnxruntime checks it "
                                   "against onnxruntime's CPU execution provider, --profile writes a Chrome/Perfetto "
                                   "trace and prints the top kernels.")
    p.add_argument("model", metavar="MODEL.onnx", help="the ONNX model file")
    p.add_argument("--device", action="append", metavar="DEVICE", dest="devices",
                   help="a device to run on, highest priority first; repeat it (default: cpu)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", dest="inputs",
                   help="an input from a .npy file (repeatable); inputs not given are seeded random")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...", dest="shapes",
                   help="a shape for an input whose dims the model leaves open (default: 1 for each open dim)")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--bench", type=_positive_int, metavar="N", help="time N runs after a warm-up; print the latency")
    p.add_argument("--compare", choices=["onnxruntime"], help="run onnxruntime (CPU) on the same inputs: max "
                   "abs/rel error per output and the speed ratio")
    p.add_argument("--profile", metavar="TRACE.json", help="profile one run: write a Chrome/Perfetto trace and "
                   "print the top kernels")
    p.add_argument("--no-subgraphs", action="store_true", help="run op by op, no compiled subgraphs (a profile then "
                   "names every kernel instead of one subgraph step)")
    p.add_argument("--save-outputs", metavar="DIR", help="write each output as DIR/<name>.npy")
    p.set_defaults(func=_cmd_run)


_seed = _whole_number(0, "a whole number of zero or more")  # numpy's generators refuse negative seeds


# --- inputs ----------------------------------------------------------------------------------------------------
def _parse_pairs(pairs: list, what: str) -> dict:
    out = {}
    for item in pairs:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise _Fail(f"--{what} {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


def random_input(shape, dtype, rng) -> np.ndarray:
    """A seeded random array: floats standard normal, integers in [0, 10), bools fair coins."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 10, shape).astype(dtype)


def make_inputs(model, files: dict, shapes: dict, seed: int) -> dict:
    """{name: array}: the .npy files given, seeded random arrays for the rest (declared shapes, `shapes` for open
    dims)."""
    unknown = (set(files) | set(shapes)) - set(model.inputs)
    if unknown:
        raise _Fail(f"the model has no input {sorted(unknown)[0]!r}; its inputs are {model.inputs}")
    rng = np.random.default_rng(seed)
    for name, dims in shapes.items():
        _agrees(name, dims, model.declared()[name][0])
    concrete = model.shapes(shapes)
    out = {}
    for name, (_, dtype) in model.declared().items():
        if name in files:
            try:
                out[name] = np.load(files[name], allow_pickle=False)  # never unpickle: a file must not run code
            except (OSError, ValueError) as err:
                raise _Fail(f"--input {name}={files[name]}: cannot read it as a .npy array ({err})") from None
        else:
            out[name] = random_input(_checked_shape(name, concrete[name], dtype), dtype, rng)
    return out


#: The largest random input made for a model (bytes): beyond it the declared shape is more likely a mistake or a
#: hostile file than a wish, and the input is better given (--input) or its shape chosen (--shape).
MAX_RANDOM_INPUT = 1 << 31


def _checked_shape(name: str, shape, dtype) -> tuple:
    """A random input's shape, refused when a dim is negative or the input would be larger than MAX_RANDOM_INPUT."""
    dims = tuple(int(d) for d in shape)
    fix = f"give the input (--input {name}=file.npy) or its shape (--shape {name}=D0,D1,...)"
    if any(d < 0 for d in dims):
        raise _Fail(f"input {name!r}: the model declares the shape {dims}, with a negative dim. Fix: {fix}")
    size = int(np.prod(dims, dtype=object)) * np.dtype(dtype).itemsize
    if size > MAX_RANDOM_INPUT:
        raise _Fail(f"input {name!r}: the model declares the shape {dims}, {size:,} bytes of {np.dtype(dtype).name}; "
                    f"random inputs are made up to {MAX_RANDOM_INPUT:,} bytes. Fix: {fix}")
    return dims


def _agrees(name: str, dims: tuple, declared) -> None:
    """Refuse a --shape of another rank than the model declares, or with another size where a dim is fixed."""
    if declared is None:
        return
    want = ",".join("?" if d is None else str(d) for d in declared)
    if len(dims) != len(declared) or any(d is not None and d != g for d, g in zip(declared, dims)):
        raise _Fail(f"--shape {name}={','.join(map(str, dims))}: the model declares {name!r} as [{want}] (? is open). "
                    f"Fix: give {len(declared)} dims, changing only the open ones")


def _writable(option: str, path: str, directory: bool) -> None:
    """Refuse, before anything runs, an output path that cannot be written."""
    target = Path(path)
    parent = target if directory and target.exists() else target.parent
    if target.exists() and target.is_dir() != directory:
        raise _Fail(f"{option} {path}: it is {'not ' if directory else ''}a directory. Fix: give "
                    f"{'a directory' if directory else 'a file path'}")
    if not (parent.exists() or directory) or (parent.exists() and not os.access(parent, os.W_OK)):
        raise _Fail(f"{option} {path}: {parent} is not a directory this user can write. Fix: give a path in a "
                    f"writable directory")


def _parse_shapes(pairs: dict) -> dict:
    out = {}
    for name, text in pairs.items():
        try:
            out[name] = tuple(int(d) for d in text.split(",") if d.strip())
        except ValueError:
            raise _Fail(f"--shape {name}={text}: dims must be whole numbers, e.g. 1,3,224,224") from None
        if any(d < 0 for d in out[name]):
            raise _Fail(f"--shape {name}={text}: dims must not be negative, e.g. 1,3,224,224")
    return out


# --- devices ---------------------------------------------------------------------------------------------------
def device_list(names) -> list:
    """The devices to run on: those named, then the cpu as fallback."""
    names = list(names or ["cpu"])
    try:
        out = [str(devices.get(d)) for d in names]
    except HwAdapterError as err:
        raise _Fail(str(err).splitlines()[0]) from None
    cpu = str(devices.get("cpu"))
    return list(dict.fromkeys(out + [cpu]))


# --- timing ----------------------------------------------------------------------------------------------------
def time_runs(fn, n: int, progress=None, label: str = "") -> list:
    """Seconds of each of `n` calls of fn, after one warm-up call; a progress bar task per call when given."""
    fn()
    task = progress.add_task(label, total=n) if progress is not None else None
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        if task is not None:
            progress.advance(task)
    if task is not None:
        progress.remove_task(task)
    return times


def latency_row(label: str, times: list) -> list:
    ms = sorted(t * 1e3 for t in times)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    return [label, str(len(ms)), f"{ms[0]:.2f}", f"{statistics.median(ms):.2f}", f"{statistics.fmean(ms):.2f}",
            f"{p90:.2f}", f"{ms[-1]:.2f}"]


def _progress(console):
    # lazy: the CLI's startup stays fast (rich.progress costs ~10 ms); only `hwadapter run` draws progress
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


def onnxruntime_session(proto):
    """An onnxruntime CPU session of the model, or _Fail saying how to install it."""
    try:
        import onnxruntime as ort  # lazy: onnxruntime is an optional package (a test and benchmark extra)
    except ImportError:
        raise _Fail("--compare onnxruntime: onnxruntime is not installed. Fix: pip install onnxruntime (a test and "
                    "benchmark extra: hwadapter itself does not need it)", 1) from None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # its warnings about unused initializers are not ours to print
    try:
        return ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 - onnxruntime's own exception types: its refusal, said plainly
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if proto.ir_version > ORT_IR_VERSION:  # a newer onnx writes IR versions onnxruntime does not read yet
        older = type(proto)()
        older.CopyFrom(proto)
        older.ir_version = ORT_IR_VERSION
        try:
            return ort.InferenceSession(older.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001 - as above: the first refusal is the one to report
            pass
    raise _Fail(f"--compare onnxruntime: onnxruntime cannot load this model ({first}); hwadapter's run above is "
                f"unaffected. Fix: compare against a model onnxruntime accepts, or drop --compare", 1)


def errors(got, expected) -> tuple:
    """(max abs error, max rel error) of got against expected (rel: |d| / max(|e|, tiny))."""
    g, e = np.asarray(got), np.asarray(expected)
    if g.shape != e.shape:
        return float("inf"), float("inf")
    if e.dtype.kind not in "fc":
        d = np.abs(g.astype(np.float64) - e.astype(np.float64))
        return (float(d.max()) if d.size else 0.0), (float((d / np.maximum(np.abs(e), 1)).max()) if d.size else 0.0)
    g64, e64 = g.astype(np.float64), e.astype(np.float64)
    with np.errstate(all="ignore"):
        d = np.abs(g64 - e64)
        same = (g64 == e64) | (np.isnan(g64) & np.isnan(e64))
        d[same] = 0
        rel = d / np.maximum(np.abs(e64), np.finfo(np.float32).tiny)
    return (float(np.nanmax(d)) if d.size else 0.0), (float(np.nanmax(rel)) if d.size else 0.0)


# --- tables ----------------------------------------------------------------------------------------------------
def _number(v: float) -> str:
    """A statistic in at most 10 characters (4 significant digits, %g form): a column never has to cut it, so its
    exponent is never lost at 80 columns."""
    return f"{v:.4g}"


def _outputs_table(names, outputs) -> Table:
    t = Table(title="outputs", title_justify="left")
    t.add_column("output", overflow="fold")
    for heading in ("shape", "dtype", "min", "max", "mean"):  # whole or not at all: never cut to "-3.05…"
        t.add_column(heading, no_wrap=True)
    t.add_column("first values", overflow="fold")  # the one column that folds when the terminal is narrow
    for name, arr in zip(names, outputs):
        a = np.asarray(arr)
        stats = ["-", "-", "-"]
        if a.size and a.dtype.kind in "biuf":
            f = a.astype(np.float64)
            stats = [_number(np.nanmin(f)), _number(np.nanmax(f)), _number(np.nanmean(f))]
        first = np.array2string(a.reshape(-1)[:4], precision=3, separator=", ")
        t.add_row(name, str(tuple(a.shape)), str(a.dtype), *stats, first)
    return t


def top_kernels(prof, n: int = TOP_KERNELS, wall: float | None = None) -> list:
    """The profile's rows by total time, the first `n`, with each one's share of `wall` (default: of the rows'
    total)."""
    rows = prof.table()
    total = wall or sum(r["seconds"] for r in rows) or 1.0
    return [{**r, "share": r["seconds"] / total} for r in rows[:n]]


def top_kernels_table(prof, n: int = TOP_KERNELS, wall: float | None = None) -> Table:
    title = "top kernels (one profiled run" + (f", {wall * 1e3:.1f} ms)" if wall else ")")
    t = Table("op", "device", "route", "calls", "total ms", "share of run" if wall else "share", title=title,
              title_justify="left")
    for r in top_kernels(prof, n, wall):
        t.add_row(r["op"], r["device"], r["route"], str(r["calls"]), f"{r['seconds'] * 1e3:.2f}", f"{r['share']:.0%}")
    return t


# --- the command -----------------------------------------------------------------------------------------------
def _cmd_run(args) -> int:
    console, err_console = _console(), _console(stderr=True)
    try:
        return _run(args, console, err_console)
    except _Fail as err:
        err_console.print(_text(f"hwadapter run: {err}", "red"))
        return err.status
    except HwAdapterError as err:
        err_console.print(_text(f"hwadapter run: {err}", "red"))
        return 1


def _run(args, console, err_console) -> int:
    import hwadapter.onnx as hwonnx  # lazy: the ONNX frontend costs ~140 ms; `hwadapter --help` imports this module
    from hwadapter import profiler  # lazy: it loads the dispatch layer (~20 ms) that `hwadapter --help` does not need
    if not Path(args.model).is_file():
        raise _Fail(f"{args.model}: no such file")
    try:
        model = hwonnx.load(args.model)
    except HwAdapterError as err:
        raise _Fail(str(err)) from None
    if args.save_outputs:
        _writable("--save-outputs", args.save_outputs, directory=True)
    if args.profile:
        _writable("--profile", args.profile, directory=False)
    shapes = _parse_shapes(_parse_pairs(args.shapes, "shape"))
    feeds = make_inputs(model, _parse_pairs(args.inputs, "input"), shapes, args.seed)
    devs = device_list(args.devices)
    with _progress(err_console) as progress:
        task = progress.add_task(f"converting and planning on {', '.join(devs)}", total=None)
        how = {"min_subgraph": 1 << 30} if args.no_subgraphs else {}
        plan = model.plan(devs, {k: v.shape for k, v in feeds.items()}, **how)
        progress.remove_task(task)

    def run_once():
        return model.run(feeds, devs, **how)

    outputs = run_once()
    graph = model.graph({k: v.shape for k, v in feeds.items()})
    console.print(_text(f"{args.model}: {len(model.proto.graph.node)} ONNX nodes -> {len(graph.nodes)} hwadapter "
                        f"ops -> {len(plan.graph.nodes)} plan steps on {', '.join(devs)}"))
    console.print(_outputs_table(model.outputs, outputs))
    if args.save_outputs:
        out_dir = Path(args.save_outputs)
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            for name, arr in zip(model.outputs, outputs):
                np.save(out_dir / (name.replace("/", "_") + ".npy"), np.asarray(arr))
        except OSError as err:
            raise _Fail(f"--save-outputs {out_dir}: {err.strerror or err}. Fix: give a writable directory", 1) from None
        console.print(_text(f"wrote {len(outputs)} output(s) to {out_dir}"))

    session = onnxruntime_session(model.proto) if args.compare else None
    ort_feeds = {k: v for k, v in feeds.items()}
    rows, hw_times, ort_times = [], None, None
    runs = args.bench or (COMPARE_RUNS if session is not None else 0)
    if runs:
        with _progress(err_console) as progress:
            hw_times = time_runs(run_once, runs, progress, f"hwadapter on {devs[0]}")
            if session is not None:
                ort_times = time_runs(lambda: session.run(None, ort_feeds), runs, progress, "onnxruntime (CPU)")
        rows.append(latency_row(f"hwadapter ({devs[0]})", hw_times))
        if ort_times:
            rows.append(latency_row("onnxruntime (CPU EP)", ort_times))
        if args.bench:
            t = Table("runtime", "runs", "min ms", "median ms", "mean ms", "p90 ms", "max ms",
                      title=f"latency ({runs} runs after a warm-up)", title_justify="left")
            for r in rows:
                t.add_row(*r)
            console.print(t)

    if session is not None:
        expected = session.run(None, ort_feeds)
        t = Table("output", "max abs error", "max rel error", title="hwadapter vs onnxruntime", title_justify="left")
        for name, g, e in zip(model.outputs, outputs, expected):
            abs_err, rel_err = errors(g, e)
            t.add_row(name, f"{abs_err:.3e}", f"{rel_err:.3e}")
        console.print(t)
        ratio = statistics.median(hw_times) / statistics.median(ort_times)
        console.print(_text(f"speed: hwadapter {statistics.median(hw_times) * 1e3:.2f} ms, onnxruntime "
                            f"{statistics.median(ort_times) * 1e3:.2f} ms (median of {runs}): hwadapter takes "
                            f"{ratio:.2f}x onnxruntime's time"))

    if args.profile:
        start = time.perf_counter()
        with profiler.profile() as prof:
            run_once()
            for d in devs:
                synchronize(d)
        wall = time.perf_counter() - start
        try:
            path = prof.export_chrome_trace(args.profile)
        except OSError as err:
            raise _Fail(f"--profile {args.profile}: {err.strerror or err}. Fix: give a writable file path", 1) from None
        console.print(top_kernels_table(prof, wall=wall))
        recorded = sum(r["seconds"] for r in prof.table())
        if recorded < 0.5 * wall:
            console.print(_text(f"the recorded steps took {recorded * 1e3:.1f} ms of the run's {wall * 1e3:.1f} ms: "
                                f"an asynchronous device queues kernels and the run waits for them when it reads the "
                                f"outputs" + ("" if args.no_subgraphs else "; --no-subgraphs names every kernel")))
        console.print(_text(f"wrote {path} (open it in https://ui.perfetto.dev or chrome://tracing)"))
    return 0
