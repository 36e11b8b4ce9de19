"""`hwadapter paddle install|status|remove|launch|trace`: hwadapter devices as PaddlePaddle custom devices (hwadapter-paddle).

The work is in the separate distribution hwadapter-paddle (bridges/paddle), imported when a subcommand runs; paddle
itself is never imported here (the bridge finds it through importlib and checks a new shim in a child process).
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path

from rich.table import Table

from .common import _console, _text, _usage

_MISSING = ("hwadapter-paddle is not installed: pip install hwadapter-paddle (in a checkout: pip install -e "
            "bridges/paddle)")


def _add_paddle(sub) -> None:
    p = sub.add_parser("paddle", help="make hwadapter devices PaddlePaddle custom devices (install, status, remove)",
                       description="Each hwadapter device type whose runtime is a native library (device_api.h) "
                                   "becomes a PaddlePaddle custom device: a shim compiled against the installed "
                                   "Paddle's headers, placed where Paddle loads custom devices, with a kernels "
                                   "library registering the device library's C kernels as Paddle's phi kernels "
                                   "(where their semantics are the same); other ops fall back to Paddle's CPU kernels.")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    inst = actions.add_parser("install", help="build and place the shims",
                              description="Compile a shim per device type (all bridgeable ones when none is named) "
                                          "against the installed Paddle, check in a child process that Paddle "
                                          "registers it, and place it in --dir, else $CUSTOM_DEVICE_ROOT, else "
                                          "site-packages/paddle_custom_device.")
    inst.add_argument("types", nargs="*", metavar="TYPE", help="device types (default: every bridgeable one)")
    inst.add_argument("--dir", help="the folder for the shims (Paddle reads it when CUSTOM_DEVICE_ROOT names it)")
    inst.add_argument("--no-verify", action="store_true", help="do not check the shims with `import paddle`")
    inst.add_argument("--runtime-only", action="store_true",
                      help="no kernels library: every op falls back to Paddle's CPU kernels")
    inst.set_defaults(func=_cmd_install)
    st = actions.add_parser("status", help="which Paddle the shims were built for, where they are, what they cover",
                            description="The Paddle found, the shim folder and whether Paddle reads it, each shim "
                                        "(built for which Paddle, which library, ok or stale) and every hwadapter "
                                        "plugin: bridgeable or why not.")
    st.add_argument("--dir", help="the shim folder (default as for install)")
    st.add_argument("--json", action="store_true", help="print machine-readable JSON instead of tables")
    st.set_defaults(func=_cmd_status)
    rm = actions.add_parser("remove", help="delete shims", description="Delete the shims of the types named (all of "
                            "hwadapter-paddle's when none); other files in the folder stay.")
    rm.add_argument("types", nargs="*", metavar="TYPE")
    rm.add_argument("--dir", help="the shim folder (default as for install)")
    rm.set_defaults(func=_cmd_remove)
    la = actions.add_parser("launch", help="run a Paddle script as N ranks over MPI on a bridged device",
                            description="Start N copies of a Paddle script under mpiexec, each with Paddle's "
                                        "distributed variables set (PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, "
                                        "PADDLE_DISTRI_BACKEND, PADDLE_XCCL_BACKEND, FLAGS_selected_<type>s), so "
                                        "paddle.distributed.init_parallel_env() and paddle.DataParallel run their "
                                        "collectives on the device's communicator (MPI unless the plugin has its "
                                        "own).")
    la.add_argument("-n", "--nprocs", type=int, default=2, help="ranks to start (default 2)")
    la.add_argument("--device", help="the device type ranks use (Paddle's name, e.g. hwa_cpu; default: the first "
                                     "custom device type Paddle lists)")
    la.add_argument("--devices", help="device ids, one per rank, comma separated (default: ranks share device 0 "
                                      "when there is one, else rank i takes device i)")
    la.add_argument("--backend", default="xccl", choices=("xccl", "gloo"),
                    help="xccl: the bridged device's collectives (default); gloo: Paddle's own on the CPU, a "
                         "reference run")
    la.add_argument("--timeout", type=float, help="seconds a collective may wait (HWADAPTER_COLLECTIVE_TIMEOUT)")
    la.add_argument("command", nargs="+", metavar="-- COMMAND", help="the script and its arguments")
    la.set_defaults(func=lambda args: _delegate("launch", args))
    tr = actions.add_parser("trace", help="run a Paddle script and show, per kernel, device or CPU fallback",
                            description="Run a command with the bridge's kernel counters and Paddle's fallback log "
                                        "on, then print per phi kernel how many calls ran on each bridged device "
                                        "and how many fell back to Paddle's CPU.")
    tr.add_argument("--json", action="store_true", help="print machine-readable JSON instead of tables")
    tr.add_argument("--strict", action="store_true", help="exit with status 3 when any kernel fell back")
    tr.add_argument("command", nargs="+", metavar="-- COMMAND", help="the command and its arguments")
    tr.set_defaults(func=lambda args: _delegate("trace", args))
    p.set_defaults(func=lambda args: _usage(p))


def _delegate(name: str, args) -> int:
    """Run hwadapter_paddle.<name>.main(args) (launch, trace): their options are parsed here, the work is there."""
    bridge = _bridge()
    if bridge is None:
        return 2
    return importlib.import_module(f"hwadapter_paddle.{name}").main(args)


def _bridge():
    try:
        import hwadapter_paddle  # lazy: hwadapter-paddle is an optional package
    except ImportError:
        _console(stderr=True).print(_text(f"hwadapter paddle: {_MISSING}", "red"))
        return None
    return hwadapter_paddle


def _cmd_install(args) -> int:
    bridge = _bridge()
    if bridge is None:
        return 2
    err = _console(stderr=True)
    try:
        report = bridge.install(args.types or None, args.dir, verify=not args.no_verify,
                                kernels=not args.runtime_only)
    except bridge.BridgeError as e:
        err.print(_text(f"hwadapter paddle install: {e}", "red"))
        return 1
    console = _console()
    console.print(_text(f"Paddle: {report.paddle.label} (custom-runtime ABI {report.paddle.abi_text}); shims in "
                        f"{report.directory}"))
    for o in report.outcomes:
        if o.ok:
            console.print(_text(f"  {o.device_type}: installed {o.message}", "green"))
        else:
            console.print(_text(f"  {o.device_type}: skipped: {o.message}", "yellow"))
    placed = [o for o in report.outcomes if o.ok]
    if placed:
        from hwadapter_paddle.bridge import paddle_reads  # lazy: hwadapter-paddle is an optional package
        reads, why = paddle_reads(report.directory, report.paddle)
        console.print(_text(f"Paddle loads them at `import paddle`: {'yes' if reads else 'no'} ({why})",
                            "" if reads else "yellow"))
        console.print(_text("`hwadapter paddle status` lists each type's phi kernels and the ops left to Paddle's "
                            "CPU fallback."))
        for note in report.notes:
            console.print(_text(f"Note: {note}", "yellow"))
    if not report.outcomes:
        console.print(_text("no hwadapter plugin installed"))
    named_failed = args.types and any(not o.ok for o in report.outcomes)
    return 1 if (named_failed or not placed) else 0


def _cmd_status(args) -> int:
    bridge = _bridge()
    if bridge is None:
        return 2
    data = bridge.status(args.dir)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    console = _console()
    if data["paddle"]:
        console.print(_text(f"Paddle: {data['paddle']} at {data['paddle_dir']} (custom-runtime ABI "
                            f"{data['custom_runtime_abi']})"))
    else:
        console.print(_text(f"Paddle: {data['paddle_error']}", "yellow"))
    if data["abi_error"]:
        console.print(_text(f"  refused: {data['abi_error']}", "bold red"))
    if data["directory"]:
        console.print(_text(f"Shims in {data['directory']}: Paddle reads this folder: "
                            f"{'yes' if data['paddle_reads_directory'] else 'no'} ({data['paddle_reads_why']})",
                            "" if data["paddle_reads_directory"] else "yellow"))
    def named(entry) -> str:  # a type Paddle reserves (cpu) has another name there (hwa_cpu)
        other = entry.get("paddle_type") or entry["type"]
        return entry["type"] if other == entry["type"] else f"{entry['type']} (Paddle: {other})"

    table = Table(title="Paddle custom devices from hwadapter", title_justify="left")
    for column in ("device type", "state", "built for", "library", "shim"):
        table.add_column(column, overflow="fold")
    for s in data["shims"]:
        table.add_row(_text(named(s), "bold"), _text(s["state"], "green" if s["state"] == "ok" else "bold red"),
                      _text(f"{s['built_for']} (ABI {s['custom_runtime_abi']})"), _text(s["library"]),
                      _text(Path(s["path"]).name))
    if data["shims"]:
        console.print(table)
        for s in data["shims"]:
            for problem in s["problems"]:
                console.print(_text(f"  {s['type']}: {problem}", "red"))
        _kernel_tables(console, data["shims"])
    else:
        console.print(_text("no shims installed: `hwadapter paddle install`"))
    plugins = Table(title="hwadapter plugins", title_justify="left")
    for column in ("device type", "distribution", "bridge", "library or why not"):
        plugins.add_column(column, overflow="fold")
    for p in data["plugins"]:
        state = "installed" if p["installed"] else ("bridgeable" if p["bridgeable"] else "not bridgeable")
        style = "green" if p["installed"] else ("" if p["bridgeable"] else "yellow")
        plugins.add_row(_text(named(p), "bold"), _text(p["distribution"]), _text(state, style),
                        _text(p["library"] if p["bridgeable"] else p["short"]))
    console.print(plugins)
    for p in data["plugins"]:
        if not p["bridgeable"]:
            console.print(_text(f"  {p['type']}: {p['reason']}", "yellow"))
    return 0 if not any(s["state"] != "ok" for s in data["shims"]) and not data["abi_error"] else 1


def _cmd_remove(args) -> int:
    bridge = _bridge()
    if bridge is None:
        return 2
    try:
        folder, outcomes = bridge.remove(args.types or None, args.dir)
    except bridge.BridgeError as e:
        _console(stderr=True).print(_text(f"hwadapter paddle remove: {e}", "red"))
        return 1
    console = _console()
    if not outcomes:
        console.print(_text(f"no shims in {folder}"))
    for o in outcomes:
        console.print(_text(f"  {o.device_type}: {o.message}", "green" if o.ok else "yellow"))
    return 1 if any(not o.ok for o in outcomes) else 0


def _ops(row: dict) -> str:
    """The hwadapter ops a registered phi kernel runs ("-" for one that only copies, as contiguous)."""
    return ", ".join(row.get("ops") or [row["op"]]) if row["op"] else "-"


def _kernel_tables(console, shims) -> None:
    """Per device type: each phi kernel its kernels library registers (hwadapter op, dtypes), then the library's
    kernels left to Paddle's CPU fallback, with why."""
    for s in shims:
        k = s.get("kernels") or {}
        if not k.get("file"):
            why = (k.get("error") or "installed before kernels were bridged").splitlines()[0]
            console.print(_text(f"{s['type']}: runtime only, every op falls back to Paddle's CPU kernels ({why}). "
                                f"Strided views (x.T, slicing) need FLAGS_use_stride_kernel=0.", "yellow"))
            continue
        table = Table(title=f"{s['type']}: Paddle kernels ({k['file']})", title_justify="left")
        for column in ("Paddle kernel", "hwadapter op", "dtypes", "how"):
            table.add_column(column, overflow="fold")
        rounding = {True: "", False: ", equal to rounding"}
        for r in k["registered"]:
            how = ("the library's copies (through the host)" if r["op"] is None else
                   "Paddle's CPU draws from the device's generator, copied in" if r["op"] == "random" else
                   "the library's C kernel" + rounding[bool(r["exact"])])
            table.add_row(_text(r["phi"], "bold"), _text(_ops(r)), _text(", ".join(r["dtypes"])),
                          _text(how, "green"))
        python = k.get("python") or {}
        for r in python.get("registered") or []:
            how = ("hwadapter's ops and vjp rules on the plugin's kernels (training.py)" if r.get("composite") else
                   "the plugin's Python kernel") + rounding[bool(r["exact"])]
            table.add_row(_text(r["phi"], "bold"), _text("-" if r.get("composite") else _ops(r)),
                          _text(", ".join(r["dtypes"])), _text(how, "green"))
        for r in k.get("left", []):
            table.add_row(_text("-"), _text(r["op"]), _text(", ".join(r["dtypes"])),
                          _text(f"left to Paddle's CPU: {r['why']}", "yellow"))
        for r in python.get("left") or []:  # training.py's kernels whose sample needed an op the plugin lacks
            table.add_row(_text(r["phi"], "bold"), _text("-"), _text(", ".join(r["dtypes"])),
                          _text(f"left to Paddle's CPU: {r['why']}", "yellow"))
        console.print(table)
        if python.get("error"):
            console.print(_text(f"  {s['type']}: no Python kernels: {python['error'].splitlines()[0]}", "yellow"))
    if shims:
        console.print(_text("Every other op falls back to Paddle's CPU kernels (copies through the host)."))
