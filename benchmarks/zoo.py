"""The benchmark zoo (issue 26): the model families people run today, at batch 1, hwadapter against onnxruntime's CPU
execution provider in the same run, interleaved, as benchmarks/onnx_models.py times the light models.

The models are built reproducibly from the model definitions of `transformers` (a config and random weights from a
fixed seed; nothing is downloaded: benchmarks/_zoo_models.py holds the recipes), exported to ONNX once and cached in
~/.cache/hwadapter/zoo/<name>-<key>.onnx, the key hashing the config, the inputs, the versions of transformers and
torch and the export settings (a changed recipe builds anew). Each model is checked first: hwadapter's outputs
against onnxruntime's on the same inputs, within rtol 1e-3 and atol 1e-3 x max(1, the output's largest magnitude)
(a fast wrong result is an error, not a figure). A model hwadapter cannot import or run is an error row naming the
op and the message; the others go on. Then rounds of blocks (per round, each runtime one untimed call, then BLOCK
timed ones). Target: the zoo's geometric mean on cpu at most 1.5x onnxruntime's time, and no model above 2.5x.

    python benchmarks/zoo.py [MODEL ...] [--rounds N] [--device D ...] [--profile MODEL] [--build-only]

--profile MODEL: where hwadapter's time goes for that model on each device (onnx_models.py's profile: the profiler's
rows, then each step alone with GFLOP/s). --build-only: build, export and cache the models, nothing timed. Needs
torch, transformers and onnxruntime (pip install -e '.[bench]'). Exits 1 when a result is wrong, else 0.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

import hwadapter as hw
from _zoo_models import EXPORT, RECIPES, export
from onnx_models import _devices, _ort_session, _runner, console, profile, time_blocks

ROUNDS = 5
CACHE = Path.home() / ".cache" / "hwadapter" / "zoo"
TARGET = ("cpu", 1.5, 2.5)  # device, geometric mean at most, no model above
RTOL, ATOL = 1e-3, 1e-3  # atol: times max(1, the output's largest magnitude)


def path_of(name: str) -> Path:
    return CACHE / f"{name}-{RECIPES[name].key('full')}.onnx"


def build(name: str, progress: Progress) -> Path:
    """The model's cached ONNX file, built and exported first when missing (written to a temporary file, then
    renamed: an interrupted build leaves no half file). The export is checked by onnx.checker, loaded by onnxruntime
    and its outputs compared with torch's."""
    path = path_of(name)
    if path.exists():
        return path
    import torch
    recipe = RECIPES[name]
    task = progress.add_task(f"{name}: building (transformers {recipe.model})", total=None)
    model, inputs = recipe.build("full")
    progress.update(task, description=f"{name}: exporting to ONNX (opset {EXPORT['opset_version']})")
    proto = export(model, inputs, recipe.outputs)
    progress.update(task, description=f"{name}: checking the export against torch with onnxruntime")
    with torch.no_grad():
        want = [t.numpy() for t in model(*inputs.values())]
    got = _ort_session(proto).run(None, {k: v.numpy() for k, v in inputs.items()})
    for g, w, out in zip(got, want, recipe.outputs):
        err = _error(g, w)
        if err:
            console.print(f"[yellow]{name}: onnxruntime's {out} differs from torch's[/] ({err}): the export or "
                          f"onnxruntime is off, not hwadapter")
    progress.update(task, description=f"{name}: writing {path.name}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".onnx.tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(proto.SerializeToString())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's file is the owner's alone
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    progress.remove_task(task)
    return path


def feeds_of(name: str) -> dict:
    """The model's example inputs as numpy arrays (the recipe's, from its seed: the ones it was exported with)."""
    return {k: v.numpy() for k, v in RECIPES[name].example("full").items()}


def _error(got, want) -> str:
    """'' when got matches want within the zoo's tolerance, else what is off."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    bad = ~np.isclose(got, want, rtol=RTOL, atol=ATOL * scale)
    if not bad.any():
        return ""
    diff = np.abs(got.astype(np.float64) - want)
    return (f"{int(bad.sum())} of {bad.size} values off, max |diff| {float(np.nanmax(diff)):.3g} "
            f"(tolerance rtol {RTOL:g}, atol {ATOL * scale:.3g})")


def _describe_failure(exc: BaseException) -> str:
    """The error's type and message (its first lines): an unsupported op names itself there."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {' '.join(text[:3])[:300]}" if text else type(exc).__name__


def bench(names, devices, rounds: int):
    """[(model, {runtime: [seconds per round]}, {runtime: error})]: every model checked, then timed in rounds of
    blocks; a runtime that failed or was wrong has an error and no times."""
    results = []
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        overall = progress.add_task("zoo", total=len(names))
        for name in names:
            path = build(name, progress)
            task = progress.add_task(f"{name}: loading, planning, checking", total=rounds)
            model = onnx.load(str(path))
            feeds = feeds_of(name)
            session = _ort_session(model)
            want = session.run(None, feeds)
            calls, errors = {"onnxruntime": lambda s=session: s.run(None, feeds)}, {}
            for dev in devices:
                label = f"hwadapter {dev}"
                try:
                    _, call = _runner(model, dev, feeds)
                    got = call()  # the warm-up too: kernels built, constants uploaded
                except Exception as exc:  # an unsupported op, a failed kernel: the error row, and on to the next
                    errors[label] = _describe_failure(exc)
                    continue
                outputs = [o.name for o in model.graph.output]
                wrong = [f"{out}: {e}" for out, g, w in zip(outputs, got, want) if (e := _error(g, w))]
                if wrong:
                    errors[label] = "WRONG RESULT " + "; ".join(wrong)
                    continue
                calls[label] = call
            del model
            progress.update(task, description=f"{name}: timing {len(calls)} runtimes")
            times = time_blocks(calls, rounds, lambda: progress.advance(task))
            progress.remove_task(task)
            progress.advance(overall)
            results.append((name, times, errors))
    return results


def _ms(xs) -> str:
    return f"{statistics.median(xs) * 1e3:.1f}"


def _geomean(xs) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def print_table(results, devices, rounds: int) -> dict:
    """The latency table; {device: {model: hwadapter / onnxruntime median time}}."""
    labels = [(d, f"hwadapter {d}") for d in devices]
    t = Table(title=f"model zoo, batch 1: median ms of {rounds} rounds; x = hwadapter's time / onnxruntime's",
              title_justify="left")
    t.add_column("model")
    t.add_column("family")
    for c in ["onnxruntime ms"] + [f"{label} ms" for _, label in labels] + [f"{label} x" for _, label in labels]:
        t.add_column(c, justify="right")
    errors_seen = any(errors for _, _, errors in results)
    if errors_seen:
        t.add_column("error", overflow="fold", max_width=48)
    ratios: dict = {d: {} for d in devices}
    for name, times, errors in results:
        ort = times["onnxruntime"]
        row = [name, RECIPES[name].family, _ms(ort)]
        row += [_ms(times[label]) if label in times else "[red]error[/]" for _, label in labels]
        for d, label in labels:
            if label in times:
                ratios[d][name] = statistics.median(times[label]) / statistics.median(ort)
                row.append(f"{ratios[d][name]:.2f}x")
            else:
                row.append("[red]error[/]")
        if errors_seen:
            row.append("\n".join(f"{label}: {e}" for label, e in errors.items()))
        t.add_row(*row, style="red" if errors else None)
    t.add_section()
    row = ["geometric mean", "", ""] + [""] * len(labels)
    for d, _ in labels:
        r = ratios[d]
        row.append(f"{_geomean(r.values()):.2f}x" if r else "n/a")
    counted = [f"{d}: {len(ratios[d])} of {len(results)} models" for d in devices if len(ratios[d]) < len(results)]
    t.add_row(*row, *(["; ".join(counted)] if errors_seen else []))
    console.print(t)
    return ratios


def verdict(ratios: dict, names) -> None:
    dev, mean_target, max_target = TARGET
    if dev not in ratios:
        return
    r = ratios[dev]
    failed = [n for n in names if n not in r]
    if r:
        worst = max(r, key=r.get)
        ok = not failed and _geomean(r.values()) <= mean_target and r[worst] <= max_target
        what = f"geometric mean {_geomean(r.values()):.2f}x, slowest {worst} {r[worst]:.2f}x"
    else:
        ok, what = False, "no model ran"
    if failed:
        what += f"; failed or wrong: {', '.join(failed)}"
    mark = "[bold green]PASS[/]" if ok else "[bold red]FAIL[/]"
    console.print(f"target: zoo geometric mean <= {mean_target:g}x and no model above {max_target:g}x onnxruntime on "
                  f"{dev}: {mark} ({what})")


def _resolve(name: str) -> str:
    """A zoo model's name from itself or a prefix naming one model (vit: vit_b16)."""
    found = [n for n in RECIPES if n == name] or [n for n in RECIPES if n.startswith(name)]
    if len(found) != 1:
        raise KeyError(f"{'ambiguous' if found else 'unknown'} model {name!r}: the zoo has {', '.join(RECIPES)}")
    return found[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", help=f"zoo models or a prefix of one (default: all of {', '.join(RECIPES)})")
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--device", action="append", dest="devices", help="cpu (the default), opencl:0, ...")
    p.add_argument("--profile", metavar="MODEL", help="where hwadapter's time goes for MODEL on each device")
    p.add_argument("--build-only", action="store_true", help="build, export and cache the models; time nothing")
    args = p.parse_args(argv)
    try:
        args.models = [_resolve(n) for n in args.models]
        args.profile = args.profile and _resolve(args.profile)
    except KeyError as exc:
        p.error(exc.args[0])
    names = args.models or ([] if args.profile else list(RECIPES))
    import onnxruntime
    import torch
    import transformers
    console.print(f"[bold]model zoo[/]: hwadapter {hw.__version__}, onnxruntime {onnxruntime.__version__}, "
                  f"transformers {transformers.__version__}, torch {torch.__version__}, {platform.machine()} with "
                  f"{os.cpu_count()} cores, {args.rounds} rounds, models in {CACHE}")
    if args.build_only:
        columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            for name in names or [args.profile]:
                start = time.perf_counter()
                built = not path_of(name).exists()
                path = build(name, progress)
                console.print(f"{name} ({RECIPES[name].what}): {path} ({path.stat().st_size / 2**20:.0f} MiB, "
                              f"{f'built in {time.perf_counter() - start:.0f} s' if built else 'cached'})")
        return 0
    devices = _devices(args.devices or ["cpu"])
    status = 0
    if names:
        results = bench(names, devices, args.rounds)
        ratios = print_table(results, devices, args.rounds)
        verdict(ratios, names)
        if any(e.startswith("WRONG") for _, _, errors in results for e in errors.values()):
            status = 1
    if args.profile:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=console, transient=True) as pr:
            path = build(args.profile, pr)
        model = onnx.load(str(path))
        for d in devices:
            try:
                profile(args.profile, d, model=model, feeds=feeds_of(args.profile))
            except Exception as exc:
                console.print(f"[red]{args.profile} on {d}: the profile failed[/]: {_describe_failure(exc)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
