"""device_api.h 1.2: a C library brings its own communicators, and the version handshake is only extended.

The library (tests/native/mpi_comm_device.c) implements the communication functions on MPI, built with MPICH's
mpicc from the venv; its collectives run under `mpiexec -n 2` and are checked against numpy. A library built
against the frozen 1.1 header (tests/native/v1_1) still loads, with no collectives (the default MPI ones)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.api.errors import CollectiveError
from hwadapter.runtime.native import load_library
from hwadapter.runtime.native_comm import NativeCollectives, NativeCommunicator
from test_native import LIBRARY, _site

ROOT = Path(__file__).parents[1]
HEADER_DIR = ROOT / "core" / "hwadapter" / "include"
SOURCE = ROOT / "tests" / "native" / "mpi_comm_device.c"
HEADER_1_1 = ROOT / "tests" / "native" / "v1_1"
BIN = Path(sys.executable).parent
MPICC, MPIEXEC = BIN / "mpicc", BIN / "mpiexec"
COMM_FIELDS = 14  # function pointers 1.2 appended


def _mpi_library(tmp_path, name="libmpidev.so", defines=()) -> Path:
    if not MPICC.exists() or not MPIEXEC.exists():
        pytest.skip(f"MPICH's mpicc/mpiexec are not in {BIN}: pip install mpich builds the test library")
    lib = tmp_path / name
    proc = subprocess.run([str(MPICC), "-shared", "-fPIC", "-O1", "-std=c11", f"-I{HEADER_DIR}",
                           *[f"-D{d}" for d in defines], str(SOURCE), "-o", str(lib)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return lib


def _plugin(tmp_path, monkeypatch, reset_plugins, lib: Path, device_type: str, module: str) -> Path:
    """`lib` as device type `device_type` through an entry point (for this process and children via PYTHONPATH)."""
    site = _site(tmp_path, f"hwadapter_{device_type}", f"{device_type} = {module}:Shim", {
        f"{module}.py": f"from hwadapter.plugin import NativePlugin\nclass Shim(NativePlugin):\n"
                        f"    library = {str(lib)!r}\n"})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    reset_plugins()
    return site


def test_header_numbers_the_reduce_ops_as_paddle_does():
    from hwadapter import _native
    header = (HEADER_DIR / "hwadapter" / "device_api.h").read_text()
    codes = {name.lower(): int(v) for name, v in re.findall(r"HWA_REDUCE_(\w+) = (\d+)", header)}
    assert codes == _native.REDUCE_OPS == {"sum": 0, "avg": 1, "max": 2, "min": 3, "prod": 4}  # C_CCLReduceOp's
    assert re.search(r"#define HWA_API_MINOR 2\b", header) and _native.API_VERSION == (1, 2)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build a test device library")
def test_a_library_built_against_the_1_1_header_loads_unchanged(tmp_path, monkeypatch, reset_plugins):
    # test_native's library with its kernels, compiled against the frozen 1.1 header, as a vendor shipped it
    src = tmp_path / "c11.c"
    src.write_text(LIBRARY.replace("MAJOR", "1").replace("MINOR", "1").replace("D2H", "cp")
                   .replace("KERNEL_OP", '"relu"'))
    lib = tmp_path / "libc11.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f"-I{HEADER_1_1}", "-DKERNELS", str(src), "-o", str(lib)],
                   check=True, timeout=120)
    native = load_library(lib)
    assert native.api_version == (1, 1) and not native.has_collectives
    assert native.struct_size == hw._native.STRUCT_SIZE - COMM_FIELDS * 8  # 1.2 only appended
    assert not any(native.comm_functions.values())
    _plugin(tmp_path, monkeypatch, reset_plugins, lib, "c11", "c11_shim")
    from hwadapter.runtime.device import devices
    dev = devices.get("c11:0")
    assert dev.collectives is None  # the default communicator on MPI serves it
    assert "collectives" not in dev.plugin.levels() and "op" in dev.plugin.levels()
    host = np.arange(6, dtype=np.float32) - 2.5
    np.testing.assert_array_equal(hw.to_tensor(host, device="c11:0").numpy(), np.arange(6, dtype=np.float32) - 2.5)


def test_a_table_that_stops_before_the_communication_functions_has_none(tmp_path):
    # the functions are set, but past struct_size: a 1.1 table, whatever lies after it
    native = load_library(_mpi_library(tmp_path, defines=["TABLE_1_1"]))
    assert native.api_version == (1, 1) and not native.has_collectives and native.has_streams


def test_a_required_communication_function_missing_is_refused_by_name(tmp_path):
    with pytest.raises(hw.DeviceUnavailableError, match=r"leaves broadcast empty: a communicator needs "
                                                        r"comm_unique_id_size.*or none of them"):
        load_library(_mpi_library(tmp_path, defines=["NO_BROADCAST"]))


def test_device_picks_the_librarys_collectives_and_a_missing_one_is_named(tmp_path, monkeypatch, reset_plugins):
    lib = _mpi_library(tmp_path, defines=["NO_OPTIONAL"])
    _plugin(tmp_path, monkeypatch, reset_plugins, lib, "mpiopt", "mpiopt_shim")
    from hwadapter.runtime.device import devices
    dev = devices.get("mpiopt:0")
    assert isinstance(dev.collectives, NativeCollectives) and "collectives" in dev.plugin.levels()
    functions = dev.runtime.lib.comm_functions
    assert functions["all_reduce"] and functions["broadcast"] and not functions["reduce_scatter"]
    # no communicator is made (that needs MPI's ranks): the core refuses before it calls the library
    comm = NativeCommunicator(dev.runtime.lib, dev, 0, 0, 2)
    send = hw.plugin.DeviceArray.from_numpy(dev, np.ones(4, np.float32))
    recv = hw.plugin.DeviceArray.from_numpy(dev, np.zeros(2, np.float32))
    with pytest.raises(CollectiveError, match=r"reduce_scatter on mpiopt:0 \(rank 0 of 2\): .*has no "
                                                 r"reduce_scatter .*Fix: implement reduce_scatter"):
        comm.reduce_scatter(send, recv)
    with pytest.raises(hw.InvalidArgumentError, match="4 elements in is not 2 ranks x 3 out"):
        comm.reduce_scatter(send, hw.plugin.DeviceArray.from_numpy(dev, np.zeros(3, np.float32)))
    with pytest.raises(hw.InvalidArgumentError, match="unknown reduce op 'mean'"):
        comm.all_reduce(send, send, "mean")
    del send, recv


SCRIPT = r"""
import time
import numpy as np
from mpi4py import MPI
import hwadapter as hw
from hwadapter.api.errors import CollectiveError
from hwadapter.plugin import DeviceArray
from hwadapter.runtime.device import devices
from hwadapter.runtime.native_comm import NativeCollectives, NativeWork

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
dev = devices.get("mpidev:0")
coll = dev.collectives
assert isinstance(coll, NativeCollectives), coll
uid = world.bcast(coll.unique_id() if rank == 0 else None, root=0)
comm = coll.communicator(uid, rank, size)
assert (comm.rank, comm.size) == (rank, size)
up = lambda a: DeviceArray.from_numpy(dev, a)

def inputs(dtype, n=7, seed=0):
    # every rank's input, so each rank computes the oracle itself
    out = []
    for r in range(size):
        g = np.random.default_rng(seed * 100 + r)
        if dtype == np.bool_:
            out.append(g.random(n) < 0.5)
        elif np.dtype(dtype).kind == "f":
            out.append((g.standard_normal(n) * 3).astype(dtype))
        else:
            out.append(g.integers(-9 if np.dtype(dtype).kind == "i" else 0, 10, n).astype(dtype))
    return out

def check(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype, got.shape)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)

ORACLE = {"sum": np.add.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce, "prod": np.multiply.reduce}
checks = 0
for dtype in (np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8):
    for op in ("sum", "avg", "max", "min", "prod"):
        xs = inputs(dtype, seed=checks)
        stack = np.stack(xs)
        total = np.add.reduce(stack, axis=0, dtype=dtype)  # in the dtype, as the library sums
        if op == "avg":
            want = total / dtype(size) if stack.dtype.kind == "f" else total // dtype(size)
        else:
            want = ORACLE[op](stack, axis=0, dtype=dtype) if op in ("sum", "prod") else ORACLE[op](stack, axis=0)
        src, dst = up(xs[rank]), up(np.zeros_like(xs[rank]))
        comm.all_reduce(src, dst, op).wait()
        check(dst.numpy(), want, f"all_reduce {op} {np.dtype(dtype).name}")
        comm.all_reduce(src, src, op).wait()  # in place
        check(src.numpy(), want, f"in-place all_reduce {op} {np.dtype(dtype).name}")
        checks += 2
xs = inputs(np.bool_)
b = up(xs[rank]); comm.all_reduce(b, b, "sum").wait()
check(b.numpy(), np.logical_or.reduce(np.stack(xs)), "bool sum = or")

# on a stream of the library: the call returns at once (rank 1 joins later); wait() synchronises the stream
s = dev.runtime.create_stream()
xs = inputs(np.float32, n=1000, seed=99)
src, dst = up(xs[rank]), up(np.zeros(1000, np.float32))
if rank == 1:
    time.sleep(0.3)
work = comm.all_reduce(src, dst, "sum", stream=s)
assert isinstance(work, NativeWork)
assert rank == 1 or not work.is_completed()  # rank 1 has not joined yet
work.wait()
assert work.is_completed() and dev.runtime.lib.stream_query(0, s.handle)  # the library's stream is done
check(dst.numpy(), np.add.reduce(np.stack(xs)), "all_reduce on a stream")

for root in range(size):
    xs = inputs(np.float16, n=5, seed=200 + root)  # data movement carries every dtype
    buf = up(xs[rank]); comm.broadcast(buf, root).wait()
    check(buf.numpy(), xs[root], f"broadcast from {root}")
xs = inputs(np.int64, n=3, seed=300)
out = up(np.zeros(3 * size, np.int64)); comm.all_gather(up(xs[rank]), out).wait()
check(out.numpy(), np.concatenate(xs), "all_gather")
xs = inputs(np.float32, n=4, seed=400)
out = up(np.full(4, -1, np.float32)); comm.reduce(up(xs[rank]), out, "max", 1).wait()
check(out.numpy(), np.maximum.reduce(np.stack(xs)) if rank == 1 else np.full(4, -1, np.float32), "reduce to 1")
xs = inputs(np.float64, n=3 * size, seed=500)
out = up(np.zeros(3, np.float64)); comm.reduce_scatter(up(xs[rank]), out, "sum").wait()
check(out.numpy(), np.add.reduce(np.stack(xs))[3 * rank:3 * rank + 3], "reduce_scatter")
xs = inputs(np.int32, n=2 * size, seed=600)
out = up(np.zeros(2 * size, np.int32)); comm.all_to_all(up(xs[rank]), out).wait()
check(out.numpy(), np.concatenate([x[2 * rank:2 * rank + 2] for x in xs]), "all_to_all")
xs = inputs(np.float32, n=6, seed=700)
if rank == 0:
    comm.send(up(xs[0]), 1).wait()
elif rank == 1:
    got = up(np.zeros(6, np.float32)); comm.recv(got, 0).wait()
    check(got.numpy(), xs[0], "send/recv")
comm.barrier()

# a Work waits at most comm.timeout: rank 1 joins only after rank 0 gave up, then rank 0's call completes
buf = up(np.full(3, rank + 1.0, np.float32))
if rank == 0:
    comm.timeout = 0.2
    work = comm.all_reduce(buf, buf, "sum")
    try:
        work.wait()
        raise SystemExit("a wait for a rank that had not joined returned")
    except CollectiveError as err:
        assert "all_reduce on mpidev:0 (rank 0 of 2) did not complete within 0.2 s" in str(err), err
    comm.timeout = None
world.Barrier()
if rank != 0:
    work = comm.all_reduce(buf, buf, "sum")
work.wait()
check(buf.numpy(), np.full(3, sum(range(1, size + 1)), np.float32), "all_reduce after a timed-out wait")
try:
    comm.all_reduce(up(np.ones(3, np.float16)), up(np.ones(3, np.float16)), "sum")
    raise SystemExit("a float16 reduction was not refused")
except CollectiveError as err:
    assert "all_reduce on mpidev:0 (rank %d of %d)" % (rank, size) in str(err) and "no reduction of dtype 10" in str(err), err
comm.destroy()

# end to end: hwadapter.distributed picks the library's communicator for tensors on the device
from hwadapter import distributed as dist
from hwadapter.runtime.native_comm import NativeCommunicator
hw.set_device("mpidev:0")
dist.init_parallel_env()
t = hw.to_tensor(np.arange(5, dtype=np.float32) * (rank + 1), device="mpidev:0")
dist.all_reduce(t)
check(t.numpy(), np.arange(5, dtype=np.float32) * sum(range(1, size + 1)), "dist.all_reduce")
used = dev.comms[0]
assert isinstance(getattr(used, "inner", used), NativeCommunicator), used  # (inner: the cross-rank checking wrapper)
t = hw.to_tensor(np.full(2, rank, np.int64), device="mpidev:0")
dist.broadcast(t, src=1)
check(t.numpy(), np.full(2, 1, np.int64), "dist.broadcast")
print(f"rank {rank}: {checks + 13} checks passed", flush=True)
"""


def test_collectives_of_the_librarys_communicator_equal_numpy_under_mpiexec(tmp_path, monkeypatch, reset_plugins):
    lib = _mpi_library(tmp_path)
    _plugin(tmp_path, monkeypatch, reset_plugins, lib, "mpidev", "mpidev_shim")
    script = tmp_path / "collectives.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)  # PYTHONPATH (set by _plugin) finds the shim
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert sorted(re.findall(r"rank (\d): 73 checks passed", proc.stdout)) == ["0", "1"], proc.stdout
