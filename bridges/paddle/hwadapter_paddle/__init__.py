"""hwadapter-paddle: every hwadapter device whose runtime is a native library (device_api.h) as a PaddlePaddle
custom device, so that `paddle.set_device("cdemo:0")` works with no code from the vendor.

`hwadapter paddle install|status|remove` (or the functions below) compile a small C++ shim per device type against
the installed Paddle's headers and place it where Paddle loads custom devices. Nothing here imports paddle.
"""
from __future__ import annotations

from .bridge import (COVERS, SUPPORTED_RUNTIME_ABI, BridgeError, Candidate, PaddleInstall, candidates, check_abi,
                     compile_shim, find_paddle, install, registered_types, remove, shim_filename, shim_info, status)

__version__ = "0.1.0"
__all__ = ["COVERS", "SUPPORTED_RUNTIME_ABI", "BridgeError", "Candidate", "PaddleInstall", "candidates", "check_abi",
           "compile_shim", "find_paddle", "install", "registered_types", "remove", "shim_filename", "shim_info",
           "status"]
