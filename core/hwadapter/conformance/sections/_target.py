"""What the section modules need at collection: the device type under test and what its plugin registered."""
from __future__ import annotations

import pytest


def device_of(config) -> str | None:
    name = config.getoption("hwadapter_device", default=None)
    return f"{name}:0" if name else None


def params(config, listing) -> list:
    """listing(Device) as parameters; one "unavailable" parameter carrying the error when the device cannot be had
    (the test then fails with the plugin's own reason, instead of the module failing to collect)."""
    spec = device_of(config)
    if spec is None:
        return []
    try:
        from hwadapter.runtime.device import get
        return list(listing(get(spec)))
    except Exception as err:  # noqa: BLE001: reported by the test
        return [pytest.param(err, id="unavailable")]


def fail_if_unavailable(value) -> None:
    if isinstance(value, BaseException):
        pytest.fail(f"the device cannot be used: {type(value).__name__}: {value}")
