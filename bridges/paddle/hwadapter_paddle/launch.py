"""`hwadapter paddle launch`: a Paddle script as N ranks of one MPI job (mpiexec), with Paddle's distributed variables.

Each rank gets PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, its endpoint and the master's (free ports on this machine),
PADDLE_DISTRI_BACKEND, and for xccl PADDLE_XCCL_BACKEND and FLAGS_selected_<type>s, so that
paddle.distributed.init_parallel_env() makes its process group on the bridged device and its collectives reach
hwadapter's communicator (hwadapter_paddle.xccl: MPI, so the ranks must be one MPI job). Paddle's own launcher
(python -m paddle.distributed.launch) starts no MPI job: with it only a device library with its own communicator
works. Paddle runs collectives on the first custom device type it lists: when the shim folder holds other types,
the ranks get a folder of links to the chosen type's files alone.
"""
from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from hwadapter.distributed.launch import find_mpiexec

from . import bridge
from . import kernels as _kernels
from . import xccl as _xccl


class LaunchError(Exception):
    """Why the job cannot start, with the fix."""


def free_ports(n: int) -> list[int]:
    """n ports free on this machine now (each bound once by the OS's choice)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def choose_device(wanted: str | None) -> tuple[str, str, Path, dict]:
    """(hwadapter type, Paddle type, shim folder, manifest entry) of the installed shim named by `wanted` (either
    name; default: the only one, else the first by name)."""
    paddle = bridge.find_paddle()
    folder = bridge.target_dir(None, paddle)
    shims = bridge.read_manifest(folder).get("shims", {})
    present = {t: e for t, e in shims.items() if (folder / bridge.shim_filename(t)).exists()}
    if not present:
        raise LaunchError(f"no hwadapter-paddle shim in {folder}. Fix: run `hwadapter paddle install`, and set "
                          f"CUSTOM_DEVICE_ROOT to its folder if it is not Paddle's default")
    names = {t: e.get("paddle_type") or bridge.paddle_type(t) for t, e in present.items()}
    if wanted:
        found = [t for t, p in names.items() if wanted in (t, p)]
        if not found:
            raise LaunchError(f"--device {wanted}: no shim of that type in {folder} (installed: "
                              f"{', '.join(sorted(names.values()))}). Fix: `hwadapter paddle install` it, or pick one")
        hwa = found[0]
    else:
        hwa = sorted(present)[0]
    return hwa, names[hwa], folder, present[hwa]


def job_folder(folder: Path, hwa: str) -> Path:
    """`folder` when the chosen type's shim is its only *.so (what Paddle loads), else a new folder of links to that
    type's files alone (Paddle runs collectives on the first custom type it lists)."""
    shim = bridge.shim_filename(hwa)
    if [p.name for p in folder.glob("*.so")] == [shim]:
        return folder
    own = Path(tempfile.mkdtemp(prefix="hwadapter-paddle-launch-"))
    for name in (shim, _kernels.kernels_filename(hwa), _kernels.kernels_filename(hwa, True), _xccl.filename(hwa)):
        if (folder / name).exists():
            (own / name).symlink_to(folder / name)
    return own


def devices_of(spec: str | None, nprocs: int, hwa: str) -> list[int]:
    """The device id of each rank: --devices (one per rank, or one for all), else 0 for all when the type has one
    device, else rank i on device i."""
    if spec:
        try:
            ids = [int(x) for x in spec.split(",") if x.strip()]
        except ValueError:
            raise LaunchError(f"--devices {spec}: not a comma-separated list of device ids. Fix: e.g. --devices 0,0")
        if len(ids) == 1:
            ids *= nprocs
        if len(ids) != nprocs:
            raise LaunchError(f"--devices {spec} names {len(ids)} devices for {nprocs} ranks. Fix: name one per rank")
        return ids
    from hwadapter import host  # lazy: loads the plugin only to count its devices
    record = host.plugin_record(hwa)
    count = record.device_count if record is not None else 1
    return [0] * nprocs if count <= 1 else [i % count for i in range(nprocs)]


def plan(args) -> tuple[list[str], dict[str, str]]:
    """The mpiexec command line (one block per rank, each with its variables) and the job's environment."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise LaunchError("no command to run. Fix: hwadapter paddle launch -n 2 -- python train.py")
    n = args.nprocs
    if n < 1:
        raise LaunchError(f"-n {n}: at least one rank is needed")
    env = dict(os.environ)
    ports = free_ports(n + 1)
    endpoints = [f"127.0.0.1:{p}" for p in ports[1:]]
    common = {"PADDLE_TRAINERS_NUM": str(n), "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints),
              "PADDLE_MASTER": f"127.0.0.1:{ports[0]}", "PADDLE_DISTRI_BACKEND": args.backend}
    if args.timeout is not None:
        if args.timeout <= 0:
            raise LaunchError(f"--timeout {args.timeout}: a positive number of seconds is needed")
        common["HWADAPTER_COLLECTIVE_TIMEOUT"] = f"{args.timeout:g}"
    ranks = [{"PADDLE_TRAINER_ID": str(i), "PADDLE_CURRENT_ENDPOINT": endpoints[i], "PADDLE_LOCAL_RANK": str(i),
              "PADDLE_RANK_IN_NODE": str(i)} for i in range(n)]
    if args.backend == "xccl":
        try:
            hwa, ptype, folder, _ = choose_device(args.device)
        except bridge.BridgeError as err:
            raise LaunchError(str(err)) from None
        env["CUSTOM_DEVICE_ROOT"] = str(job_folder(folder, hwa))
        common["PADDLE_XCCL_BACKEND"] = ptype
        common["HWADAPTER_PADDLE_MPI"] = "1"  # each rank joins the MPI job at `import paddle` (hwadapter_paddle.xccl)
        for rank, dev in zip(ranks, devices_of(args.devices, n, hwa)):
            rank[f"FLAGS_selected_{ptype}s"] = str(dev)
            rank["HWADAPTER_DEVICE"] = f"{hwa}:{dev}"
    env.update(common)
    try:
        mpiexec = find_mpiexec(None)
    except Exception as err:  # HwAdapterError: no MPICH
        raise LaunchError(str(err)) from None
    cmd = [mpiexec]
    for i, rank in enumerate(ranks):
        cmd += ["-n", "1"] + [x for k, v in rank.items() for x in ("-env", k, v)] + command + ([":"] if i < n - 1
                                                                                              else [])
    return cmd, env


def main(args) -> int:
    """Run the job; its exit status (mpiexec's), after a line saying what failed when it is not 0."""
    try:
        cmd, env = plan(args)
    except LaunchError as err:
        print(f"hwadapter paddle launch: {err}", file=sys.stderr)
        return 2
    if os.environ.get("HWADAPTER_PADDLE_LAUNCH_VERBOSE"):
        print(shlex.join(cmd), file=sys.stderr, flush=True)
    try:
        code = subprocess.run(cmd, env=env).returncode
    except KeyboardInterrupt:  # Ctrl-C reached mpiexec too (one process group); it stops the ranks
        code = 130
    code = 128 - code if code < 0 else code
    if code:
        print(f"hwadapter paddle launch: the job failed (mpiexec exit status {code}): a rank's error is above "
              f"(a rank that exits early stops the others)", file=sys.stderr)
    return code
