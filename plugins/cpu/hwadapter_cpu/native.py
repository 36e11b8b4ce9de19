"""The CPU as a device library for native hosts (the Paddle bridge): host_device.c, built on first use and kept."""
from __future__ import annotations

from pathlib import Path

from hwadapter.plugin import build_library

SOURCE = Path(__file__).with_name("host_device.c")


def library(device_type: str) -> str:
    """The path of the built library; its messages name `device_type` (the plugin's entry-point name)."""
    return str(build_library(SOURCE, f"{device_type}-device", defines={"DEVICE_TYPE": f'"{device_type}"'}))
