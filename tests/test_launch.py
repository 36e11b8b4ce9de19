"""`python -m hwadapter.distributed.launch`: ranks started through MPICH's mpiexec, exit status forwarded, clear errors
for what cannot start, and two "nodes" simulated on this machine with MPI's own hostfile."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import hwadapter.device
from hwadapter.distributed import launch

pytest.importorskip("mpi4py")
MPIEXEC = Path(sys.executable).parent / "mpiexec"
pytestmark = pytest.mark.skipif(not MPIEXEC.is_file(), reason="MPICH's mpiexec is not installed beside this Python")

#: What each rank reports: its rank, the world size, the global ranks MPI puts on its node (COMM_TYPE_SHARED: ranks
#: that share memory, i.e. one host), its host name, HWADAPTER_DEVICE and its arguments; rank 0 prints them all on one
#: line (the ranks' own prints may interleave mid-line in mpiexec's output). `--fail` makes rank 1 exit 3.
SCRIPT = """\
import json, os, sys
from mpi4py import MPI
w = MPI.COMM_WORLD
node = w.Split_type(MPI.COMM_TYPE_SHARED, key=w.Get_rank())
mine = {"rank": w.Get_rank(), "size": w.Get_size(), "node": node.allgather(w.Get_rank()),
        "host": MPI.Get_processor_name(), "device": os.environ.get("HWADAPTER_DEVICE"), "args": sys.argv[1:]}
everyone = w.gather(mine, root=0)
if w.Get_rank() == 0:
    print("REPORT", json.dumps(everyone), flush=True)
sys.exit(3 if "--fail" in sys.argv and w.Get_rank() == 1 else 0)
"""


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "ranks.py"
    path.write_text(SCRIPT)
    return path


def run_launcher(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hwadapter.distributed.launch", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def reports(stdout: str) -> list[dict]:
    """The ranks' reports, in rank order (each as that rank saw itself)."""
    lines = [line for line in stdout.splitlines() if line.startswith("REPORT ")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0].removeprefix("REPORT "))


def test_two_ranks_run_with_the_device_type_and_the_scripts_arguments(script):
    proc = run_launcher("--nproc", 2, "--devices", "cpu", "--check-devices", script, "--lr", "0.1", "--nproc", "7",
                        cwd=script.parent)
    assert proc.returncode == 0, proc.stderr
    got = reports(proc.stdout)
    assert [(r["rank"], r["size"]) for r in got] == [(0, 2), (1, 2)]
    assert all(r["device"] == "cpu" and r["args"] == ["--lr", "0.1", "--nproc", "7"] for r in got)
    assert all(r["node"] == [0, 1] for r in got)  # no hostfile: both on this machine
    # the command, one line, before the ranks' output
    assert f"{MPIEXEC} -n 2 -genv HWADAPTER_DEVICE cpu {sys.executable} {script} --lr 0.1 --nproc 7" in proc.stderr
    # --check-devices warns (and still launches) when the ranks outnumber this machine's cpu devices
    shared = hwadapter.device.device_count("cpu") < 2
    assert ("warning: 2 ranks per node" in proc.stderr) == shared, proc.stderr


def test_a_failing_rank_s_exit_status_is_forwarded(script):
    proc = run_launcher("--nproc", 2, script, "--fail", cwd=script.parent)
    assert proc.returncode == 3, proc.stderr
    assert [r["rank"] for r in reports(proc.stdout)] == [0, 1]


def test_two_nodes_from_a_hostfile(script, tmp_path):
    # Two hosts that are both this machine: MPICH's hydra starts ranks on a host it recognises as local with fork, not
    # ssh, so this needs no ssh server (on a real cluster: `-launcher ssh`, the default). MPI still counts them as two
    # nodes: COMM_TYPE_SHARED splits the ranks by host.
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:1\n127.0.0.1:1\n")
    proc = run_launcher("--nproc", 2, "--hostfile", hosts, script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"-n 2 -f {hosts} " in proc.stderr
    got = reports(proc.stdout)
    assert [(r["rank"], r["size"], r["node"]) for r in got] == [(0, 2, [0]), (1, 2, [1])]
    assert {r["host"] for r in got} == {socket.gethostname()}
    # -ppn 2: the first two ranks on the first host, the third on the second
    proc = run_launcher("--nproc", 3, "--hostfile", hosts, "--ppn", 2, script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [r["node"] for r in reports(proc.stdout)] == [[0, 1], [0, 1], [2]]


@pytest.mark.parametrize("args, said", [
    (["--nproc", "2", "--", "/no/such/script.py"], "script '/no/such/script.py' does not exist"),
    (["--nproc", "0"], "--nproc 0: at least one process"),
    (["--nproc", "2", "--ppn", "0"], "--ppn 0"),
    (["--nproc", "2", "--mpiexec", "/no/such/mpiexec"], "pip install 'hwadapter[mpi]'"),
    (["--nproc", "2", "--hostfile", "/no/such/hosts"], "--hostfile '/no/such/hosts' does not exist"),
])
def test_what_cannot_start_exits_2_with_a_fix(script, capsys, args, said):
    with pytest.raises(SystemExit) as exit_:
        launch.main([*args, str(script)])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and err.startswith("error: ") and said in err and "Fix:" in err, err
    assert f"{MPIEXEC} -n" not in out + err  # no command line: nothing was started


def test_missing_mpi_says_how_to_install_it(script, capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py raises ImportError, as where it is missing
    with pytest.raises(SystemExit) as exit_:
        launch.main(["--nproc", "2", str(script)])
    assert exit_.value.code == 2 and "mpi4py is not installed" in capsys.readouterr().err
    monkeypatch.delitem(sys.modules, "mpi4py")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # no mpiexec beside it
    monkeypatch.setenv("PATH", str(tmp_path))  # nor on PATH
    with pytest.raises(SystemExit) as exit_:
        launch.main(["--nproc", "2", str(script)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "mpiexec not found" in err and "Fix: pip install 'hwadapter[mpi]'" in err


@pytest.mark.parametrize("nproc, hostfile, ppn, most", [
    (4, None, None, 4),                     # one machine: all of them
    (4, None, 2, 2),                        # -ppn caps every node
    (1, None, 2, 1),
    (3, "localhost:1\n127.0.0.1:1", None, 2),  # round robin over the slots: ranks 0 and 2 on the first host
    (5, "a:2 # two slots\nb", None, 4),     # a: 0 1 3 4, b: 2
    (2, "a:2\nb:2", None, 2),
])
def test_ranks_per_node_follows_mpich_s_placement(tmp_path, nproc, hostfile, ppn, most):
    path = None
    if hostfile is not None:
        path = tmp_path / "hosts"
        path.write_text(hostfile)
    assert launch.ranks_per_node(nproc, path and str(path), ppn) == most
