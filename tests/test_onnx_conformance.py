"""ONNX conformance: every onnx node test case through hwadapter.onnx.backend on every available device type.

One test per (case, device): `cpu`, `opencl:0` and every other plugin's first device; `cuda:0` is marked `gpu`
(make test-gpu). A case must pass (outputs equal to onnx's expected ones within the case's tolerances) unless the
reviewed list in tests/onnx_skips.py skips it, with its reason; a wrong result is a failure, never an xfail. A
listed case is still prepared (cheap: conversion only, nothing runs) so the list stays honest: one that converts
now fails, saying to take it off the list.
"""
from __future__ import annotations

import gc

import pytest

import hwadapter as hw
from hwadapter.onnx import nodetests
from onnx_skips import SKIPS

CASES = nodetests.cases()  # generated once per process (each xdist worker), a few seconds
NAMES = list(CASES)
# The cases are ~10^5 long-lived objects that every later full gc.collect() would walk again (conftest's
# clean_state runs one after each test of the suite: 65 ms with them). This runs while tests are collected, before
# any test has run, so nothing is garbage a test left: freeze what exists now into the permanent generation.
gc.collect()
gc.freeze()
TEST_PLUGINS = {"testdev"}  # tests/plugins' test double, not a real device type


def _device_params() -> list:
    """cpu, then the first device of every other available plugin type; cuda:0 always, marked gpu."""
    types = dict.fromkeys(d.partition(":")[0] for d in hw.device.get_available_device())
    params = [pytest.param("cpu", id="cpu")]
    for t in types:
        if t not in TEST_PLUGINS | {"cpu", "cuda"}:
            params.append(pytest.param(f"{t}:0", id=f"{t}:0"))
    no_cuda = "cuda" not in types
    params.append(pytest.param("cuda:0", id="cuda:0", marks=[
        pytest.mark.gpu, pytest.mark.skipif(no_cuda, reason="no usable cuda device (make test-gpu on a GPU host)")]))
    return params


DEVICES = _device_params()


def _live_bytes() -> dict:
    from hwadapter.runtime.device import devices
    for d in devices.all():
        d.constants.clear()  # scalars uploaded once and shared (Device.constant) are not the test's to free
    return {str(d): d._allocator.allocated for d in devices.all() if d._allocator is not None}


@pytest.fixture(autouse=True)
def clean_state():
    """conftest's clean_state, collecting garbage only when device bytes remain (a collection per test is most of
    these tests' time): fresh fallback counters, and every device's live bytes back to the baseline afterwards."""
    from hwadapter.dispatch import fallback
    fallback.reset()
    before = _live_bytes()
    yield
    hw.configure(fallback="warn")
    after = _live_bytes()
    for generation in (1, 2):  # a run's plans free their device buffers with the young cycles; the full walk is rare
        if after == before:
            break
        gc.collect(generation)
        after = _live_bytes()
    leaked = {d: n - before.get(d, 0) for d, n in after.items() if n != before.get(d, 0)}
    assert not leaked, f"device memory still allocated after the test: {leaked}"


def test_more_than_1000_cases_are_collected():
    assert len(NAMES) > 1000, f"only {len(NAMES)} onnx node test cases: the conformance tests would prove nothing"


def test_the_skip_list_names_only_real_cases_with_reasons():
    stale = sorted(set(SKIPS) - set(CASES))
    assert not stale, f"tests/onnx_skips.py lists cases this onnx does not define: {stale[:10]}"
    assert all(reason.strip() for reason in SKIPS.values())


def _outcome(case, device: str):
    """The case's Outcome on `device`; one refused when prepared is not run (cheap: conversion only). A function of
    its own so that no prepared model (device buffers) outlives it in a failed test's traceback."""
    rep, refused = nodetests.prepare_case(case, device)
    return refused if refused is not None else nodetests.run_case(case, device, rep)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_node_case(name, dev):
    device = dev  # not `device`: conftest parametrizes that over every device, the test double included
    reason = SKIPS.get(name)
    out = _outcome(CASES[name], device)
    if reason is not None:
        if out.status == "unsupported":  # refused when prepared, or when converted at run for an input's value
            pytest.skip(reason)
        if out.status == "pass":
            pytest.fail(f"{name} passes on {device} now: take it off tests/onnx_skips.py ({reason!r})")
        pytest.fail(f"{name} is skip-listed as unsupported ({reason!r}) but on {device} it is {out.status}: "
                    f"{out.detail}")
    assert out.status == "pass", (
        f"{name} on {device}: {out.status}: {out.detail}\n"
        f"rerun: python -m hwadapter.onnx.nodetests -d {device} '^{name}$'"
        + ("\nif hwadapter cannot support it, add it to tests/onnx_skips.py with the reason"
           if out.status == "unsupported" else ""))
