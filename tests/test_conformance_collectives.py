"""The conformance kit's collectives section: it passes on cpu and opencl:0 (the default MPI communicator) and on a
plugin with its own right communicator; a plugin communicator that gets all_reduce wrong fails exactly those cases,
naming rank, call and values; one that leaves a rank waiting fails its case within the time limit and the job
stops; without MPI the section skips saying what to install. The test plugins are tests/plugins/collkit_site, seen
only by the processes these tests start."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hwadapter as hw
from hwadapter import conformance, host
from hwadapter.conformance import collectives

SITE = Path(__file__).parent / "plugins" / "collkit_site"
CARRIED = ("float32", "float64", "int32", "int64", "bool")  # collkit's Collectives.dtypes(): no float16


def _use_site(monkeypatch, *paths) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*map(str, paths), *filter(None, [os.environ.get("PYTHONPATH")])]))


def _run(device_type, junit=None):
    result = conformance.run(device_type, ["collectives"], progress=False, junit=junit)
    return result.sections["collectives"]


def _tests(section) -> dict:
    return {name: (outcome, message) for name, outcome, message in section.tests}


def _case(name: str) -> str:
    return f"test_collective[{name}]"


@pytest.mark.parametrize("device_type", ["cpu", pytest.param("opencl", marks=pytest.mark.skipif(
    not hw.device.is_available("opencl"), reason="no OpenCL device (install pocl-opencl-icd and pip install -e "
                                                 "plugins/opencl)"))])
def test_the_section_passes_on_the_default_communicator(device_type):
    section = _run(device_type)
    tests = _tests(section)
    assert section.status == "passed", "\n".join(f"{f.test}: {f.message}" for f in section.failures)
    assert tests["test_communicator[default_mpi]"][0] == "passed"
    runnable = collectives.runnable(host.device(f"{device_type}:0"))
    assert section.passed == len(runnable) + 1 and len(runnable) == len(collectives.cases()) - 1
    assert tests[_case("all_reduce-avg-bool")] == ("skipped", "avg of bool tensors is not defined (bool sum and max "
                                                              "are or, min and prod are and)")
    for name in ("all_reduce-prod-float16", "broadcast-int64", "reduce_scatter-bool", "alltoall-float64",
                 "send_recv-int32", "all_reduce_large-float32", "zero_size-float32", "barrier"):
        assert tests[_case(name)][0] == "passed"


def test_a_plugin_communicator_is_used_and_a_wrong_all_reduce_fails_naming_the_case(monkeypatch, tmp_path):
    _use_site(monkeypatch, SITE)
    good = _run("collgood")
    tests = _tests(good)
    assert good.status == "passed", "\n".join(f"{f.test}: {f.message}" for f in good.failures)
    assert tests["test_communicator[plugin]"][0] == "passed"
    assert tests[_case("all_reduce-sum-float16")] == (
        "skipped", "the collgood plugin's communicator carries bool, float32, float64, int32, int64 "
                   "(Collectives.dtypes()), not float16")
    assert good.skipped == len(collectives.PER_DTYPE) + 1  # float16's cases, bool's avg

    bad = _run("collbad")
    assert bad.status == "failed"
    failed = {f.test: f.message for f in bad.failures}
    assert set(failed) == {_case(f"all_reduce-max-{d}") for d in CARRIED}  # its one defect, every dtype
    message = failed[_case("all_reduce-max-float32")].removeprefix("Failed: ")
    assert message.startswith("all_reduce-max-float32 on collbad in 2 ranks through the plugin's own communicator "
                              "(hwadapter_collkit.WrongCommunicator):\nranks 0, 1: all_reduce(op=max) of "
                              "float32[3, 5]: 15 of 15 elements differ; first at [0, 0]: got np.float32(-3.75), "
                              "expected np.float32(-2.25)"), message
    line = message.splitlines()[-1]
    assert line == "Reproduce: mpiexec -n 2 python -m hwadapter.conformance.collectives collbad --case " \
                   "all_reduce-max-float32"
    mpiexec = Path(sys.executable).parent / "mpiexec"
    again = subprocess.run([str(mpiexec), *line.split()[2:4], sys.executable, *line.split()[5:]], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert '"case": "all_reduce-max-float32", "result": "all_reduce(op=max) of float32[3, 5]: 15 of 15 elements ' \
           'differ' in again.stdout and again.stdout.count('"case": ') == 2  # that one case, on each rank


def test_a_rank_left_waiting_fails_its_case_within_the_time_limit_and_the_job_stops(monkeypatch):
    _use_site(monkeypatch, SITE)
    monkeypatch.setenv("HWADAPTER_COLLECTIVE_TIMEOUT", "3")
    start = time.monotonic()
    section = _run("collhang")
    assert time.monotonic() - start < 60
    assert section.status == "failed" and [f.test for f in section.failures] == [_case("all_gather-float32")]
    assert "rank 0: all_gather of float32[3, 5] raised CollectiveError: all_gather on collhang:0 (rank 0 of 2) did " \
           "not complete within 3 s" in section.failures[0].message
    tests = _tests(section)
    order = collectives.runnable(host.device("cpu:0"))
    stuck = order.index("all_gather-float32")
    assert all(tests[_case(c)][0] == "passed" for c in order[:stuck])
    assert tests[_case("reduce_scatter-float32")] == ("skipped", "not run: all_gather-float32 failed with a "
                                                                 "CollectiveError on rank 0 (its communicator may be "
                                                                 "out of step)")
    assert all(tests[_case(c)][0] == "skipped" for c in order[stuck + 1:] if "float16" not in c)


def test_without_mpi_the_section_skips_saying_how_to_install(monkeypatch, tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['mpi4py'] = None  # as if not installed\n")
    _use_site(monkeypatch, tmp_path)
    section = _run("cpu")
    assert section.status == "skipped" and section.passed == 0
    assert section.note == ("mpi4py is not installed, so the collectives cannot run in 2 ranks. Fix: pip install "
                            "'hwadapter[mpi]'")
