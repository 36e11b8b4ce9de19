"""CPU fallback is never silent: counted, warned once per op and device, and an error in strict mode."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import hwadapter as hw


@pytest.fixture
def x(testdev):
    return hw.to_tensor(np.array([[-1.0, 0.5], [2.0, -3.0]], np.float32), device=testdev)


def test_ops_with_a_kernel_do_not_fall_back(x):
    y = hw.nn.functional.relu(x + x * x)
    a = x.numpy()
    np.testing.assert_allclose(y.numpy(), np.maximum(a + a * a, 0))
    assert hw.profiler.fallback_count() == 0


def test_missing_kernel_runs_on_cpu_with_copies_and_is_counted(x):
    y = hw.exp(x)
    assert y.device is x.device  # the result comes back to the device
    np.testing.assert_allclose(y.numpy(), np.exp(x.numpy()), rtol=1e-6)
    hw.exp(x)
    hw.tanh(x)
    assert hw.profiler.fallback_count("exp", "testdev:0") == 2
    assert hw.profiler.fallback_count("tanh") == 1
    rows = {r["op"]: r for r in hw.profiler.fallback_report()}
    assert rows["exp"] == {"op": "exp", "device": "testdev:0", "dtypes": ("float32",), "ran_on": "cpu:0", "count": 2}


def test_a_dtype_without_a_kernel_falls_back_too(testdev):
    a = hw.to_tensor(np.arange(4, dtype=np.int32), device=testdev)
    np.testing.assert_array_equal((a + a).numpy(), np.arange(4) * 2)  # testdev's add is float32-only
    assert hw.profiler.fallback_count("add", "testdev:0") == 1


def test_fallback_warns_once_per_op_and_device(x, caplog):
    with caplog.at_level(logging.WARNING, logger="hwadapter"):
        hw.sin(x)
        hw.sin(x)
        hw.cos(x)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([m for m in messages if "'sin'" in m]) == 1
    assert len([m for m in messages if "'cos'" in m]) == 1
    assert "testdev:0" in messages[0] and "cpu:0" in messages[0] and "HWADAPTER_FALLBACK=error" in messages[0]


def test_strict_mode_raises_kernel_not_found_naming_op_dtypes_device_and_who_has_it(x):
    hw.configure(strict=True)
    with pytest.raises(hw.KernelNotFoundError) as info:
        hw.exp(x)
    msg = str(info.value)
    assert "'exp'" in msg and "float32" in msg and "testdev:0" in msg and "cpu" in msg
    assert hw.profiler.fallback_count() == 0
    np.testing.assert_allclose((x + x).numpy(), 2 * x.numpy())  # ops with kernels still run


def test_env_variable_turns_fallback_into_an_error(x, monkeypatch):
    monkeypatch.setenv("HWADAPTER_FALLBACK", "error")
    from hwadapter.api.config import Config
    hw.configure(fallback=Config().fallback)
    with pytest.raises(hw.KernelNotFoundError):
        hw.log(x)


def test_unknown_fallback_mode_is_rejected():
    with pytest.raises(hw.InvalidArgumentError):
        hw.configure(fallback="sometimes")


def test_multi_output_ops_fall_back_and_come_back(x):
    parts = hw.split(x, 2, axis=1)
    assert [p.device for p in parts] == [x.device, x.device]
    np.testing.assert_array_equal(parts[1].numpy(), x.numpy()[:, 1:])


def test_inputs_on_different_devices_are_an_error_not_a_silent_copy(x):
    c = hw.to_tensor(np.ones((2, 2), np.float32), device="cpu")
    with pytest.raises(hw.InvalidArgumentError, match="different devices"):
        x + c


def test_profiler_shows_the_route_of_every_op(x):
    with hw.profiler.profile() as prof:
        hw.exp(x + x)
    routes = {r["op"]: r["route"] for r in prof.table()}
    assert routes == {"add": "kernel", "exp": "fallback to cpu:0"}


def test_an_invalid_fallback_setting_is_an_error_at_the_first_fallback(x, monkeypatch):
    from hwadapter.api.config import config
    monkeypatch.setattr(config, "fallback", "bogus")
    from hwadapter.runtime.device import devices
    devices.forget_routes()
    with pytest.raises(hw.InvalidArgumentError, match="HWADAPTER_FALLBACK='bogus'"):
        hw.exp(x)
