"""The CUDA reference plugin: NVIDIA GPUs through cupy, at all three levels, and NCCL as its collectives.

Op level: cuBLAS matmul/conv2d and CUDA C pooling/arg-reduction kernels (`kernels.py`); compiler level: kernel
primitives rendered as CUDA C and compiled by NVRTC (`codegen.py`); subgraph level: whole graphs prepared into one
stream of launches (`subgraph.py`); collectives: NCCL through cupy (`collectives.py`). `import hwadapter_cuda` never imports cupy: `device_count()` does, and says
precisely why no GPU can be used (no cupy, no driver, no GPU) and how to fix it.
"""
from __future__ import annotations

import os

from hwadapter.plugin import DeviceUnavailableError, Plugin

__all__ = ["CudaPlugin", "load_cupy", "INSTALL_FIX"]

INSTALL_FIX = "pip install 'hwadapter-cuda[cuda13]' (or 'hwadapter-cuda[cuda12]' for a CUDA 12 driver)"

# cudaError_t codes that mean "this machine cannot run CUDA", each with its fix.
_DRIVER_ERRORS = {
    35: ("the NVIDIA driver is missing or older than the CUDA runtime cupy was built for (cudaErrorInsufficientDriver)",
         "install or upgrade the NVIDIA driver until `nvidia-smi` works, or install the cupy extra matching the "
         "driver's CUDA version (`nvidia-smi` shows it): " + INSTALL_FIX),
    34: ("the CUDA driver stub library was loaded instead of the real driver (cudaErrorStubLibrary)",
         "remove the CUDA 'stubs' directory from LD_LIBRARY_PATH"),
    100: ("no NVIDIA GPU is visible to this process (cudaErrorNoDevice)",
          "check `nvidia-smi` lists a GPU, and that CUDA_VISIBLE_DEVICES (now {visible!r}) does not hide it"),
    803: ("the NVIDIA driver's user-space library and kernel module differ in version (cudaErrorSystemDriverMismatch)",
          "reboot, or reinstall the NVIDIA driver so both parts match"),
}


def _unavailable(cause: str, fix: str) -> DeviceUnavailableError:
    return DeviceUnavailableError(cause, fix=fix)  # the fix is shown by `hwadapter doctor` and set_device's error


def load_cupy():
    """The cupy module, or DeviceUnavailableError saying why it cannot be imported and how to fix that."""
    try:
        import cupy
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] in ("cupy", "cupy_backends"):
            raise _unavailable("cupy is not installed, so hwadapter-cuda cannot reach an NVIDIA GPU",
                               INSTALL_FIX) from None
        raise _unavailable(f"cupy is installed but its dependency {err.name!r} is missing: {err}",
                           f"reinstall cupy with its dependencies: {INSTALL_FIX}") from err
    except Exception as err:  # cupy raises ImportError/RuntimeError when the CUDA libraries it needs are absent
        raise _unavailable(f"cupy is installed but could not be imported: {type(err).__name__}: {err}",
                           "install exactly one cupy wheel matching the driver's CUDA version (`pip list | grep "
                           f"cupy`; `nvidia-smi` shows the version): {INSTALL_FIX}") from err
    return cupy


def _device_error(status, err: Exception | None = None) -> DeviceUnavailableError:
    if status in _DRIVER_ERRORS:
        cause, fix = _DRIVER_ERRORS[status]
        return _unavailable(cause, fix.format(visible=os.environ.get("CUDA_VISIBLE_DEVICES")))
    return _unavailable(f"the CUDA runtime could not count GPUs: {type(err).__name__}: {err}",
                        "check that `nvidia-smi` works and that the cupy extra matches the driver: " + INSTALL_FIX)


class CudaPlugin(Plugin):
    """Every NVIDIA GPU cupy sees, as <type>:0, <type>:1, ..."""

    api_version = (2, 1)

    def device_count(self) -> int:
        cupy = load_cupy()
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as err:  # CUDARuntimeError; anything else cupy raises here means the same: no GPU
            raise _device_error(getattr(err, "status", None), err) from err
        if count == 0:
            raise _device_error(100)
        return count

    def native_library(self) -> str:
        """The GPUs through the CUDA runtime in C (cuda_device.c), for native hosts such as the Paddle bridge."""
        from . import native
        return native.library(self.name)

    def create_runtime(self, index: int):
        from .runtime import CudaRuntime
        return CudaRuntime(index, f"{self.name}:{index}")

    def register_kernels(self, kernels) -> None:
        from .kernels import register
        register(kernels)

    def codegen_backend(self, device):
        from .codegen import CudaCodegenBackend
        return CudaCodegenBackend(device.runtime)

    def subgraph_backend(self, device):
        from .subgraph import CudaSubgraphBackend
        return CudaSubgraphBackend(device)

    def collectives(self, device):
        """NCCL on this GPU (collectives.py), or None, so the MPI communicator is used staged through host memory:
        without cupy's NCCL, on a device that is no GPU, or when ranks on this machine outnumber its GPUs."""
        from .collectives import collectives_for
        return collectives_for(device)
