"""Start a script in N processes through MPICH's mpiexec.

    python -m hwadapter.distributed.launch --nproc 4 train.py --epochs 3
    python -m hwadapter.distributed.launch --nproc 8 --hostfile hosts --ppn 4 --devices opencl train.py
"""
from __future__ import annotations

import argparse
import importlib
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from ..api.errors import HwAdapterError, InvalidArgumentError

INSTALL = "pip install 'hwadapter[mpi]'"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m hwadapter.distributed.launch",
                                description="Run a script in N processes with mpiexec (MPICH).")
    p.add_argument("--nproc", type=int, required=True, help="number of processes (ranks) in all")
    p.add_argument("--hostfile", help="MPICH hostfile: one `host[:slots]` a line (mpiexec -f)")
    p.add_argument("--ppn", type=int, help="processes per node (mpiexec -ppn)")
    p.add_argument("--mpiexec", help="the mpiexec to run (default: the one beside this Python, then PATH)")
    p.add_argument("--timeout", type=float, help="seconds the whole job may run before it is stopped")
    p.add_argument("--devices", metavar="TYPE", help="device type of the ranks (sets HWADAPTER_DEVICE for them)")
    p.add_argument("--check-devices", action="store_true",
                   help="warn when a node has more ranks than devices of the type (they share devices)")
    p.add_argument("script", help="the Python script each rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return p.parse_args(argv)


def find_mpiexec(given: str | None) -> str:
    """The mpiexec to run: `given`, else the one installed beside sys.executable (the mpich wheel), else PATH's."""
    if given:
        found = shutil.which(given)
        if not found:
            raise InvalidArgumentError(f"--mpiexec {given}: no such executable. Fix: pass the path of MPICH's "
                                       f"mpiexec, or {INSTALL}")
        return found
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.is_file() else shutil.which("mpiexec")
    if not found:
        raise HwAdapterError(f"mpiexec not found beside {sys.executable} or on PATH. Fix: {INSTALL}")
    return found


def ranks_per_node(nproc: int, hostfile: str | None, ppn: int | None) -> int:
    """The most ranks any node gets, as MPICH places them: `ppn` each, or the hostfile's slots round robin."""
    if ppn:
        return min(ppn, nproc)
    if not hostfile:
        return nproc
    slots = []
    for line in Path(hostfile).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            _, _, n = line.split()[0].partition(":")  # `host:slots`, maybe followed by options
            slots.append(int(n) if n.strip().isdigit() else 1)
    if not slots:
        return nproc
    # hydra fills each host's slots in turn and starts again from the first host past the last one
    per_round = sum(slots)
    full, rest = divmod(nproc, per_round)
    return max(full * s + min(s, max(0, rest - sum(slots[:i]))) for i, s in enumerate(slots))


def check_devices(kind: str | None, per_node: int) -> None:
    """Warn (never fail) when a node's ranks outnumber its devices of the type: they will share devices."""
    device = importlib.import_module("hwadapter.device")  # loads the plugins: only when the check is asked for
    kind = (kind or device.get_device()).split(":")[0]
    count = device.device_count(kind)
    if count == 0:
        print(f"warning: no {kind!r} device in this process (`hwadapter devices` lists them); the ranks will fail "
              f"in init_parallel_env unless the nodes have one", file=sys.stderr)
    elif per_node > count:
        print(f"warning: {per_node} ranks per node and {count} {kind} device(s): ranks share devices "
              f"(local rank % {count})", file=sys.stderr)


def command(ns: argparse.Namespace) -> list[str]:
    """The mpiexec command line for the parsed options, after checking they can work."""
    if ns.nproc < 1:
        raise InvalidArgumentError(f"--nproc {ns.nproc}: at least one process is needed. Fix: pass --nproc 1 or more")
    if ns.ppn is not None and ns.ppn < 1:
        raise InvalidArgumentError(f"--ppn {ns.ppn}: at least one process per node is needed. Fix: pass --ppn 1 or "
                                   f"more")
    if not Path(ns.script).is_file():
        raise InvalidArgumentError(f"script {ns.script!r} does not exist. Fix: pass the path of a Python script")
    if ns.hostfile and not Path(ns.hostfile).is_file():
        raise InvalidArgumentError(f"--hostfile {ns.hostfile!r} does not exist. Fix: write one `host[:slots]` a line")
    try:
        importlib.import_module("mpi4py")  # the package only: MPI itself starts in the ranks, not here
    except ImportError as err:
        raise HwAdapterError(f"mpi4py is not installed for {sys.executable} ({err}). Fix: {INSTALL}") from None
    cmd = [find_mpiexec(ns.mpiexec), "-n", str(ns.nproc)]
    if ns.hostfile:
        cmd += ["-f", ns.hostfile]
    if ns.ppn:
        cmd += ["-ppn", str(ns.ppn)]
    if ns.devices:
        cmd += ["-genv", "HWADAPTER_DEVICE", ns.devices]  # -genv: reaches the ranks on every node
    return cmd + [sys.executable, ns.script, *ns.args]


def run(cmd: list[str], timeout: float | None) -> int:
    """Run mpiexec; its exit status (128 + signal when killed; 124 past the timeout)."""
    proc = subprocess.Popen(cmd)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"error: the job ran past --timeout {timeout:g} s and was stopped. Fix: raise --timeout, or look for "
              f"a rank that hangs", file=sys.stderr)
        proc.send_signal(signal.SIGTERM)  # hydra passes it on to every rank
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 124
    except KeyboardInterrupt:  # Ctrl-C reached mpiexec too (one process group); it stops the ranks
        code = proc.wait()
    return 128 - code if code < 0 else code


def main(argv: list[str] | None = None) -> None:
    ns = parse(argv)
    try:
        cmd = command(ns)
        if ns.check_devices:
            check_devices(ns.devices, ranks_per_node(ns.nproc, ns.hostfile, ns.ppn))
    except HwAdapterError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(shlex.join(cmd), file=sys.stderr, flush=True)
    sys.exit(run(cmd, ns.timeout))


if __name__ == "__main__":
    main()
