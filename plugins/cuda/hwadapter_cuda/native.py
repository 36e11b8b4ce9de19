"""NVIDIA GPUs as a device library for native hosts (the Paddle bridge): cuda_device.c over the CUDA runtime API,
built on first use and kept. It needs no CUDA toolkit to build: libcudart is opened when a host initializes it
($HWADAPTER_CUDART, else libcudart.so.13/.12/.so), so a machine without the runtime or a GPU learns why there."""
from __future__ import annotations

from pathlib import Path

from hwadapter.plugin import build_library

SOURCE = Path(__file__).with_name("cuda_device.c")


def library(device_type: str) -> str:
    """The path of the built library; its messages name `device_type` (the plugin's entry-point name)."""
    return str(build_library(SOURCE, f"{device_type}-device", defines={"DEVICE_TYPE": f'"{device_type}"'},
                             libs=("-ldl", "-lpthread")))
