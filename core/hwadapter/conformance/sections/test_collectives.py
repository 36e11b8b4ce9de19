"""Collectives: one `mpiexec -n 2` job runs every collective of hwadapter.distributed on the device (all_reduce with
each reduce op, broadcast from each root, reduce, all_gather, reduce_scatter, alltoall, send/recv, barrier; every
dtype its communicator carries; a zero-size and a large tensor) through the plugin's own communicator
(Plugin.collectives) or the default one on MPI; each case's results equal numpy's on the ranks' known inputs."""
from __future__ import annotations

import pytest

from hwadapter import host
from hwadapter.conformance import collectives
from hwadapter.conformance.sections._target import device_of


def _which(config) -> str:
    """The communicator the job must use, as the test's id: the plugin's own or the default MPI one."""
    spec = device_of(config)
    if spec is None:
        return "none"
    try:
        return "plugin" if host.device(spec).collectives is not None else "default_mpi"
    except Exception:  # noqa: BLE001: the test reports the device's own error
        return "unavailable"


def pytest_generate_tests(metafunc):
    if "communicator" in metafunc.fixturenames:
        metafunc.parametrize("communicator", [_which(metafunc.config)])


@pytest.fixture(scope="module")
def job(request, kit_type):
    """The job, run once for the cases this session selected (all, or those of a reproducer's -k)."""
    missing = collectives.mpi_missing()
    if missing:
        pytest.skip(missing)
    dev = host.device(f"{kit_type}:0")
    selected = {item.callspec.params["case"] for item in request.session.items
                if item.module is request.module and "case" in getattr(getattr(item, "callspec", None), "params", {})}
    wanted = [c for c in collectives.runnable(dev) if c in selected]
    return collectives.run_job(kit_type, wanted)


def test_communicator(kit_dev, job, communicator):
    """Every rank used the communicator the plugin offers (its own when Plugin.collectives gives one)."""
    want = "plugin" if kit_dev.collectives is not None else "default"
    again = f"Reproduce: {collectives.reproducer(kit_dev.type)}"
    if not job.headers:
        pytest.fail(f"no rank of the job started: {job.problem}. {again}", pytrace=False)
    for rank, h in sorted(job.headers.items()):
        trouble = h.get("error") or h.get("communicator_error")
        if trouble:
            pytest.fail(f"rank {rank} on {kit_dev.type} could not start its collectives: {trouble}. {again}",
                        pytrace=False)
        if h["communicator"] != want:
            pytest.fail(f"rank {rank} used the {h['communicator']} communicator ({h['class']}), but the "
                        f"{kit_dev.type} plugin's Plugin.collectives gives "
                        f"{'its own' if want == 'plugin' else 'none (so the default MPI one)'}. {again}", pytrace=False)


@pytest.mark.parametrize("case", collectives.cases())
def test_collective(kit_dev, job, case):
    reason = collectives.skip_reason(case, kit_dev)
    if reason:
        pytest.skip(reason)
    outcome, why = job.verdict(case)
    if outcome == "skipped":
        pytest.skip(why)
    if outcome != "passed":
        pytest.fail(f"{case} on {kit_dev.type} in {collectives.RANKS} ranks through {job.communicator()}:\n{why}\n"
                    f"Reproduce: {collectives.reproducer(kit_dev.type, case)}", pytrace=False)
