"""What the section modules need at collection: the device type under test and what its plugin registered."""
from __future__ import annotations

from typing import Callable

import pytest


class Nothing:
    """The one parameter of a test that has nothing to check on this plugin: the test skips with `reason`."""

    def __init__(self, reason: str):
        self.reason = reason


def device_of(config) -> str | None:
    name = config.getoption("hwadapter_device", default=None)
    return f"{name}:0" if name else None


def params(config, listing, nothing: Callable[[object], str]) -> list:
    """listing(Device) as parameters. When it is empty, one "none" parameter saying why (nothing(Device)), and when the
    device cannot be had, one "unavailable" parameter carrying the error: the test then skips with that reason or
    fails with the plugin's own error (instead of pytest's "got empty parameter set", or a module that fails to
    collect)."""
    spec = device_of(config)
    if spec is None:
        return [pytest.param(Nothing("the conformance kit runs with --hwadapter-device TYPE"), id="none")]
    try:
        from hwadapter import host  # lazy: collected only with --hwadapter-device
        dev = host.device(spec)
        found = list(listing(dev))
        return found or [pytest.param(Nothing(nothing(dev)), id="none")]
    except Exception as err:  # noqa: BLE001: reported by the test
        return [pytest.param(err, id="unavailable")]


def usable(value) -> None:
    """Fail with the device's own error, or skip saying why the plugin gives this test nothing to check."""
    if isinstance(value, BaseException):
        pytest.fail(f"the device cannot be used: {type(value).__name__}: {value}")
    if isinstance(value, Nothing):
        pytest.skip(value.reason)
