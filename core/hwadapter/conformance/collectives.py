"""The collectives section's job: two ranks (one `mpiexec -n 2`) run every collective of hwadapter.distributed on the
device under test and check each result against numpy on the inputs every rank knows; `run_job` starts the job and
reads what each rank wrote, case by case, so a crash or a hang still names the case it was in.

    mpiexec -n 2 python -m hwadapter.conformance.collectives TYPE [--case NAME ...] [--out DIR]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import reduce as fold
from pathlib import Path

import numpy as np

import hwadapter as hw
from hwadapter import distributed as dist
from hwadapter import CollectiveError, HwAdapterError
from hwadapter.distributed.launch import INSTALL, find_mpiexec
from hwadapter.plugin import REDUCE_OPS, poll

RANKS = 2
#: The dtypes each collective runs over (those a plugin's Collectives.dtypes() leaves out are skipped).
DTYPES = ("float32", "float16", "float64", "int32", "int64", "bool")
SHAPE = (3, 5)
#: float32 elements of the large all-reduce: past the default communicator's 4 MiB staging chunk.
LARGE = (1 << 20) + 3
#: Seconds the whole job may run (less than the kit's 120 s a section); seconds a collective may wait
#: (HWADAPTER_COLLECTIVE_TIMEOUT, unless set lower).
JOB_TIMEOUT, CALL_TIMEOUT = 90.0, 30.0
#: Cases of each dtype, in the order they run.
PER_DTYPE = tuple(f"all_reduce-{op}" for op in REDUCE_OPS) + ("broadcast", "reduce", "all_gather", "reduce_scatter",
                                                              "alltoall", "send_recv")
EXTRA = ("all_reduce_async-float32", "all_reduce_large-float32", "zero_size-float32", "barrier")
_TOL = {"float16": 1e-3, "float32": 1e-6, "float64": 1e-12}
_MODULE = "hwadapter.conformance.collectives"


def cases() -> list[str]:
    """Every case, in the order the job runs them: `<collective>-<dtype>`, then the extras."""
    return [f"{c}-{d}" for d in DTYPES for c in PER_DTYPE] + list(EXTRA)


def dtype_of(case: str) -> str | None:
    tail = case.rsplit("-", 1)[-1]
    return tail if tail in DTYPES else None


def skip_reason(case: str, device) -> str | None:
    """Why `case` does not apply to `device` (a Device), or None."""
    dtype = dtype_of(case)
    if dtype == "bool" and case.startswith("all_reduce-avg"):
        return "avg of bool tensors is not defined (bool sum and max are or, min and prod are and)"
    own = device.collectives
    carried = own.dtypes() if own is not None else None
    if dtype is not None and carried is not None and dtype not in carried:
        return (f"the {device.type} plugin's communicator carries {', '.join(sorted(carried))} "
                f"(Collectives.dtypes()), not {dtype}")
    return None


def runnable(device) -> list[str]:
    """The cases that apply to `device`, in the order the job runs them."""
    return [c for c in cases() if skip_reason(c, device) is None]


def mpi_missing() -> str | None:
    """Why the job cannot start here (no mpi4py, no mpiexec), or None."""
    if importlib.util.find_spec("mpi4py") is None:
        return f"mpi4py is not installed, so the collectives cannot run in 2 ranks. Fix: {INSTALL}"
    try:
        find_mpiexec(None)
    except HwAdapterError as err:
        return str(err)
    return None


def reproducer(device_type: str, case: str | None = None) -> str:
    """The command that runs the job (or one case of it) again, printing each rank's results."""
    line = f"mpiexec -n {RANKS} python -m {_MODULE} {device_type}"
    return line + (f" --case {case}" if case else "")


# ---------------------------------------------------------------------------------------------------------------
# Inputs and the numpy oracle

def data(rank: int, dtype: str, shape=SHAPE, salt: int = 0) -> np.ndarray:
    """Rank `rank`'s input: small values every dtype holds exactly, and their sums and products too."""
    k = (np.arange(int(np.prod(shape)), dtype=np.int64) * 7 + rank * 13 + salt * 5) % 11
    if dtype == "bool":
        a = k % 3 == 0
    elif dtype.startswith("float"):
        a = (k - 5) * 0.75
    else:
        a = (k - 5) * 2  # even: an average of two ranks' values is exact in integers too
    return a.astype(dtype).reshape(shape)


def reduced(arrays: list, op: str, dtype: str) -> np.ndarray:
    """op over the ranks' arrays, as a communicator must compute it."""
    if dtype == "bool":
        return fold(np.logical_or if op in ("sum", "max") else np.logical_and, arrays)
    wide = np.stack([a.astype(np.float64 if dtype.startswith("float") else np.int64) for a in arrays])
    if op == "avg":
        out = wide.sum(0) / len(arrays) if dtype.startswith("float") else wide.sum(0) // len(arrays)
    else:
        out = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[op](wide, axis=0)
    return out.astype(dtype)


def differs(got: np.ndarray, want: np.ndarray) -> str | None:
    """How `got` differs from `want` (dtype, shape or values), or None."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"gave {got.dtype.name}{list(got.shape)}, expected {want.dtype.name}{list(want.shape)}"
    tol = _TOL.get(want.dtype.name)
    bad = ~np.isclose(got, want, rtol=tol, atol=tol) if tol else got != want
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} elements differ; first at {list(first)}: got {got[first]!r}, "
            f"expected {want[first]!r}")


# ---------------------------------------------------------------------------------------------------------------
# The rank side

class _Rank:
    """One rank's view: its place, its device, the call it is in, what it found wrong."""

    def __init__(self, device: str):
        self.rank, self.size, self.device = dist.get_rank(), dist.get_world_size(), device
        self.call, self.problems = "", []

    def doing(self, call: str, dtype: str, shape=SHAPE) -> None:
        self.call = f"{call} of {dtype}{list(shape)}"

    def tensor(self, a: np.ndarray):
        return hw.to_tensor(a, device=self.device)

    def inputs(self, dtype: str, salt: int = 0, shape=SHAPE) -> list:
        return [data(q, dtype, shape, salt) for q in range(self.size)]

    def check(self, t, want: np.ndarray, what: str = "") -> None:
        where = str(t.device)
        if where != self.device:
            self.problems.append(f"{self.call}{what}: the result is on {where}, not {self.device}")
            return
        wrong = differs(t.numpy(), want)
        if wrong:
            self.problems.append(f"{self.call}{what}: {wrong}")


def _all_reduce(k: _Rank, dtype: str, op: str) -> None:
    xs = k.inputs(dtype)
    t = k.tensor(xs[k.rank])
    k.doing(f"all_reduce(op={op})", dtype)
    dist.all_reduce(t, op=op)
    k.check(t, reduced(xs, op, dtype))


def _broadcast(k: _Rank, dtype: str) -> None:
    for root in range(k.size):
        xs = k.inputs(dtype, salt=root)
        t = k.tensor(xs[k.rank])
        k.doing(f"broadcast(src={root})", dtype)
        dist.broadcast(t, src=root)
        k.check(t, xs[root])


def _reduce(k: _Rank, dtype: str) -> None:
    for root, op in ((0, "sum"), (1 % k.size, "max")):
        xs = k.inputs(dtype, salt=root)
        t = k.tensor(xs[k.rank])
        k.doing(f"reduce(dst={root}, op={op})", dtype)
        dist.reduce(t, dst=root, op=op)
        k.check(t, reduced(xs, op, dtype) if k.rank == root else xs[k.rank],
                "" if k.rank == root else " (not the destination: its tensor must stay as it was)")


def _all_gather(k: _Rank, dtype: str) -> None:
    xs = k.inputs(dtype)
    out: list = []
    k.doing("all_gather", dtype)
    dist.all_gather(out, k.tensor(xs[k.rank]))
    if len(out) != k.size:
        k.problems.append(f"{k.call}: filled the list with {len(out)} tensors, not {k.size}")
        return
    for q, t in enumerate(out):
        k.check(t, xs[q], f" (rank {q}'s part)")


def _reduce_scatter(k: _Rank, dtype: str) -> None:
    for op in ("sum", "max"):
        parts = [k.inputs(dtype, salt=10 + j) for j in range(k.size)]  # parts[j][q]: rank q's part j
        t = k.tensor(np.zeros(SHAPE, dtype))
        k.doing(f"reduce_scatter(op={op})", dtype)
        dist.reduce_scatter(t, [k.tensor(parts[j][k.rank]) for j in range(k.size)], op=op)
        k.check(t, reduced(parts[k.rank], op, dtype))


def _alltoall(k: _Rank, dtype: str) -> None:
    parts = [k.inputs(dtype, salt=20 + j) for j in range(k.size)]
    out: list = []
    k.doing("alltoall", dtype)
    dist.alltoall([k.tensor(parts[j][k.rank]) for j in range(k.size)], out)
    if len(out) != k.size:
        k.problems.append(f"{k.call}: filled the list with {len(out)} tensors, not {k.size}")
        return
    for q, t in enumerate(out):
        k.check(t, parts[k.rank][q], f" (the part from rank {q})")


def _send_recv(k: _Rank, dtype: str) -> None:
    for src in range(k.size):
        dst = (src + 1) % k.size
        xs = k.inputs(dtype, salt=30 + src)
        if k.rank == src:
            k.doing(f"send(dst={dst})", dtype)
            dist.send(k.tensor(xs[src]), dst=dst)
        elif k.rank == dst:
            t = k.tensor(np.zeros(SHAPE, dtype))
            k.doing(f"recv(src={src})", dtype)
            dist.recv(t, src=src)
            k.check(t, xs[src])


def _all_reduce_async(k: _Rank, dtype: str) -> None:
    xs = k.inputs(dtype)
    t = k.tensor(xs[k.rank])
    k.doing("all_reduce(sync_op=False) then task.wait()", dtype)
    task = dist.all_reduce(t, sync_op=False)
    task.wait()
    k.check(t, reduced(xs, "sum", dtype))


def _all_reduce_large(k: _Rank, dtype: str) -> None:
    xs = k.inputs(dtype, shape=(LARGE,))
    t = k.tensor(xs[k.rank])
    k.doing("all_reduce(op=sum)", dtype, (LARGE,))
    dist.all_reduce(t)
    k.check(t, reduced(xs, "sum", dtype))


def _zero_size(k: _Rank, dtype: str) -> None:
    shape = (0, 3)
    x = np.zeros(shape, dtype)
    for call, run in (("all_reduce", lambda t: dist.all_reduce(t)), ("broadcast", lambda t: dist.broadcast(t, src=0)),
                      ("reduce", lambda t: dist.reduce(t, dst=0)),
                      ("reduce_scatter", lambda t: dist.reduce_scatter(t, [k.tensor(x) for _ in range(k.size)]))):
        t = k.tensor(x)
        k.doing(call, dtype, shape)
        run(t)
        k.check(t, x)
    for call in ("all_gather", "alltoall"):
        out: list = []
        k.doing(call, dtype, shape)
        if call == "all_gather":
            dist.all_gather(out, k.tensor(x))
        else:
            dist.alltoall([k.tensor(x) for _ in range(k.size)], out)
        if len(out) != k.size:
            k.problems.append(f"{k.call}: filled the list with {len(out)} tensors, not {k.size}")
        for t in out:
            k.check(t, x)
    k.doing("send/recv", dtype, shape)
    if k.rank == 0:
        dist.send(k.tensor(x), dst=1 % k.size)
    elif k.rank == 1:
        t = k.tensor(x)
        dist.recv(t, src=0)
        k.check(t, x)


def _barrier(k: _Rank) -> None:
    """dist.barrier() returns; then each rank in turn comes late to the communicator's own barrier (hwadapter's
    cross-rank check before a call would synchronise the ranks by itself): no rank may leave before the late one
    entered."""
    k.call = "dist.barrier()"
    dist.barrier()
    own = dist.communicator(k.device)
    for late in range(k.size):
        k.call = f"barrier() of the communicator with rank {late} entering 0.1 s late"
        if k.rank == late:
            time.sleep(0.1)
        entered = time.time()  # the wall clock: one machine's ranks read the same one
        own.barrier()
        left = time.time()
        every = np.zeros(k.size)
        req = _Kit.comm.Iallgather(np.array([entered]), every)
        poll(req.Test, "the kit's barrier times", dist.ParallelEnv().timeout)
        if left < every[late]:
            k.problems.append(f"{k.call}: rank {k.rank} left the barrier {every[late] - left:.3f} s before rank "
                              f"{late} entered it")


_RUNS = {"all_reduce": _all_reduce, "broadcast": _broadcast, "reduce": _reduce, "all_gather": _all_gather,
         "reduce_scatter": _reduce_scatter, "alltoall": _alltoall, "send_recv": _send_recv,
         "all_reduce_async": _all_reduce_async, "all_reduce_large": _all_reduce_large, "zero_size": _zero_size}


def run_case(k: _Rank, case: str) -> str:
    """"ok", or what went wrong on this rank."""
    k.call, k.problems = "", []
    try:
        if case == "barrier":
            _barrier(k)
        else:
            head, dtype = case.rsplit("-", 1)
            name, _, op = head.partition("-")
            args = (op,) if op else ()
            _RUNS[name](k, dtype, *args)
    except Exception as err:  # noqa: BLE001: whatever the plugin raised is the finding
        k.problems.append(f"{k.call or case} raised {type(err).__name__}: {' '.join(str(err).split())[:600]}")
        _Kit.collective_error = _Kit.collective_error or isinstance(err, CollectiveError)
    return "; ".join(k.problems) or "ok"


def _mpi():
    """mpi4py.MPI: the kit's own messages between the ranks (not the collectives under test)."""
    return importlib.import_module("mpi4py.MPI")


class _Kit:
    """The job's own MPI communicator (a Dup of the world: never mixed with the collectives under test)."""
    comm = None
    collective_error = False


def _in_step(case: str, timeout: float) -> str | None:
    """After a case, the ranks agree whether they can go on; why they cannot (a collective failed with a
    CollectiveError, a rank is stuck), or None."""
    mine = np.array([1 if _Kit.collective_error else 0], np.int8)
    every = np.zeros(_Kit.comm.Get_size(), np.int8)
    try:
        req = _Kit.comm.Iallgather(mine, every)
        poll(req.Test, f"the kit's step after {case}", timeout)
    except CollectiveError:
        return f"a rank did not finish {case} within {timeout:g} s"
    failed = [r for r in range(every.size) if every[r]]
    if failed:
        return (f"{case} failed with a CollectiveError on rank {', '.join(map(str, failed))} (its communicator may be "
                f"out of step)")
    return None


class _Out:
    """One JSON line per record: into DIR/rank<r>.jsonl (flushed at once: a rank that dies later still leaves
    them), or printed."""

    def __init__(self, folder: str | None, rank: int):
        self.rank = rank
        self.file = open(Path(folder) / f"rank{rank}.jsonl", "a", buffering=1) if folder else None

    def write(self, **record) -> None:
        line = json.dumps(record)
        if self.file is not None:
            self.file.write(line + "\n")
            self.file.flush()
        else:
            print(f"rank {self.rank}: {line}", flush=True)


def _communicator(group, device: str) -> dict:
    """Which communicator the ranks use on `device` (made now, as every rank's first collective would)."""
    try:
        inner = dist.communicator(device, group)
        own = hw.set_device(device).collectives  # the Device: its plugin's Collectives, or None
    except Exception as err:  # noqa: BLE001: reported with every case
        return {"communicator_error": f"{type(err).__name__}: {' '.join(str(err).split())[:600]}"}
    kind = "default" if own is None else "plugin"
    return {"communicator": kind, "class": f"{type(inner).__module__}.{type(inner).__qualname__}"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=f"mpiexec -n {RANKS} python -m {_MODULE}",
                                description="The conformance kit's collectives job (each rank runs this).")
    p.add_argument("type", help="the device type under test")
    p.add_argument("--case", action="append", help="run only this case (repeatable)")
    p.add_argument("--out", help="write each rank's results to DIR/rank<r>.jsonl (default: print them)")
    args = p.parse_args(argv)
    header = {"pid": os.getpid()}
    try:
        hw.set_device(f"{args.type}:0")  # init_parallel_env then picks index local_rank % count: shared when 1
        group = dist.init_parallel_env()
    except Exception as err:  # noqa: BLE001: the section reports it
        out = _Out(args.out, int(os.environ.get("PMI_RANK", "0")))
        out.write(**header, error=f"init_parallel_env raised {type(err).__name__}: {' '.join(str(err).split())}")
        return 1
    penv = dist.ParallelEnv()
    k = _Rank(penv.device)
    out = _Out(args.out, k.rank)
    out.write(**header, rank=k.rank, size=k.size, device=penv.device, **_communicator(group, penv.device))
    _Kit.comm = _mpi().COMM_WORLD.Dup()
    stopped = None
    for case in args.case or runnable(hw.set_device(penv.device)):
        if stopped:
            out.write(case=case, result=f"not run: {stopped}")
            continue
        out.write(case=case, result=run_case(k, case))
        stopped = _in_step(case, penv.timeout + 5)
    out.write(done=True)
    if stopped:
        sys.stdout.flush()
        os._exit(0)  # requests of a failed collective may be pending: MPI_Finalize could wait for them forever
    _Kit.comm.Free()
    return 0


# ---------------------------------------------------------------------------------------------------------------
# The section's side: start the job, read what the ranks wrote

@dataclass
class Job:
    """What the ranks wrote: a header each (device, communicator), each case's result per rank, and why the job did
    not finish when it did not."""
    device_type: str
    headers: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)  # case -> {rank: "ok" | "not run: ..." | what went wrong}
    done: set = field(default_factory=set)
    problem: str = ""
    order: list = field(default_factory=list)

    def communicator(self) -> str:
        """The communicator the ranks used, in words."""
        h = self.headers.get(0) or next(iter(self.headers.values()), {})
        if "communicator" not in h:
            return "no communicator"
        if h["communicator"] == "default":
            return "the default MPI communicator"
        return f"the plugin's own communicator ({h['class']})"

    def verdict(self, case: str) -> tuple[str, str]:
        """("passed" | "failed" | "skipped", why) for one case."""
        got = self.results.get(case, {})
        missing = [r for r in range(RANKS) if r not in got]
        if missing:
            first = next((c for c in self.order if len(self.results.get(c, {})) < RANKS), case)
            if first != case and not got:
                return "skipped", f"not run: the job stopped at {first}"
            return "failed", (f"rank {', '.join(map(str, missing))} wrote no result for {case}: "
                              f"{self.problem or 'the job ended early'}")
        wrong = {r: text for r, text in sorted(got.items()) if text != "ok"}
        if not wrong:
            return "passed", ""
        if all(text.startswith("not run: ") for text in wrong.values()):
            return "skipped", wrong[min(wrong)]
        said: dict[str, list[int]] = {}
        for r, text in wrong.items():
            said.setdefault(text, []).append(r)
        return "failed", "\n".join(f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}: {text}"
                                   for text, rs in said.items())


def _env(device_type: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "HWADAPTER_COLLECTIVE_CHECK"}
    try:
        given = float(environ.get("HWADAPTER_COLLECTIVE_TIMEOUT", ""))
    except ValueError:
        given = None
    environ["HWADAPTER_COLLECTIVE_TIMEOUT"] = f"{min(given or CALL_TIMEOUT, CALL_TIMEOUT):g}"
    environ["HWADAPTER_DEVICE"] = device_type
    return environ


def _stop(proc: subprocess.Popen, pids) -> None:
    """End the job: mpiexec's process group, which takes its ranks down (SIGTERM), then whatever is left."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
            break
        except subprocess.TimeoutExpired:
            continue
    for pid in pids:  # hydra runs each rank in a session of its own: a killed mpiexec leaves them
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _read(folder: Path, job: Job) -> None:
    for path in sorted(folder.glob("rank*.jsonl")):
        rank = int(path.stem[4:])
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:  # a line cut short by a kill
                continue
            if "case" in rec:
                job.results.setdefault(rec["case"], {})[rank] = rec["result"]
            elif rec.get("done"):
                job.done.add(rank)
            else:
                job.headers[rank] = rec


def run_job(device_type: str, wanted: list[str], timeout: float = JOB_TIMEOUT) -> Job:
    """Run the `wanted` cases, in that order, in RANKS ranks, at most `timeout` seconds."""
    job = Job(device_type, order=list(wanted))
    with tempfile.TemporaryDirectory(prefix="hwadapter-kit-collectives-") as tmp:
        cmd = [find_mpiexec(None), "-n", str(RANKS), sys.executable, "-m", _MODULE, device_type, "--out", tmp]
        for case in wanted:
            cmd += ["--case", case]
        log = Path(tmp) / "job.log"
        with open(log, "wb") as sink:
            proc = subprocess.Popen(cmd, env=_env(device_type), stdout=sink, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                proc.wait(timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                _read(Path(tmp), job)
                _stop(proc, [h["pid"] for h in job.headers.values() if "pid" in h])
        _read(Path(tmp), job)
        tail = " | ".join(ln for ln in log.read_text(errors="replace").splitlines() if ln.strip())[-1500:]
    errors = "; ".join(f"rank {r}: {h['error']}" for r, h in sorted(job.headers.items()) if "error" in h)
    if timed_out:
        job.problem = f"the job did not finish within {timeout:g} s and was killed (a rank hung)"
    elif len(job.done) < RANKS:
        job.problem = (f"the job ({shlex.join(cmd[:6])}) exited with status {proc.returncode} before every rank "
                       f"finished{': ' + errors if errors else ''}; its output: {tail}")
    return job


if __name__ == "__main__":
    sys.exit(main())
