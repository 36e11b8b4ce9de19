"""The CUDA compiler backend: kernel primitives rendered as CUDA C, compiled by NVRTC (through cupy) for the GPU."""
from __future__ import annotations

import dataclasses
import glob
import os
import threading

import numpy as np

import hwadapter_kp as kp
from hwadapter.plugin import CodegenBackend, CompileError, Program

# No --use_fast_math (it changes NaN/inf semantics) and no FMA contraction, so results round like numpy's, as the
# CPU backend's -ffp-contract=off; nvcc accepts the same flags (the test suite compiles with both).
OPTIONS = ("--fmad=false",)
_MAX_GRID = 2**31 - 1  # gridDim.x limit; the grid-stride loop covers any remainder
#: kp's CUDA dialect with two work units per thread: each thread keeps two independent loads in flight, which
#: latency-bound streaming needs (figures for one, two, four and eight per thread: docs/performance.md).
DIALECT = dataclasses.replace(kp.CUDA, schedule=kp.Schedule(local_size=256, elems_per_item=2))


def _nvrtc(cupy):
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError:  # older cupy layouts
        nvrtc = cupy.cuda.nvrtc
    return nvrtc


def fp16_include_dirs(cupy, nvrtc_major: int) -> list[str]:
    """Where NVRTC finds cuda_fp16.h: cupy's bundled copy for this NVRTC, NVIDIA's pip wheels, or the toolkit."""
    cupy_dir = os.path.dirname(cupy.__file__)
    candidates = sorted(glob.glob(os.path.join(cupy_dir, "_core", "include", "cupy", "_cuda", f"cuda-{nvrtc_major}*")))
    try:
        import nvidia  # the nvidia-cuda-runtime-cuXX / nvidia-cuda-nvrtc wheels cupy may be installed with
        for root in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(root, "*", "include")))
    except ImportError:
        pass
    cuda_path = cupy.cuda.get_cuda_path() if hasattr(cupy.cuda, "get_cuda_path") else None
    candidates += [os.path.join(p, "include") for p in (cuda_path, os.environ.get("CUDA_PATH")) if p]
    # One directory only: headers of two CUDA versions must not mix.
    return [d for d in candidates if os.path.exists(os.path.join(d, "cuda_fp16.h"))][:1]


class CudaProgram(Program):
    """One loaded entry point; launches the grid the dialect asks for on a cupy stream."""

    def __init__(self, function, runtime, local_size: int):
        self.function, self.runtime, self.local_size = function, runtime, local_size

    def launch(self, global_size, buffers, scalars, stream=None):
        if global_size <= 0:
            return
        grid = min(global_size // self.local_size, _MAX_GRID)
        # Pointers as uint64 (cupy passes numpy scalars by value with their own width); sizes and strides as int64.
        args = tuple([np.uint64(getattr(b, "handle", b) or 0) for b in buffers] + [np.int64(s) for s in scalars])
        s = stream or self.runtime.default_stream
        with self.runtime.device:
            self.function((grid,), (self.local_size,), args, stream=s.cupy)


class CudaCodegenBackend(CodegenBackend):
    """NVRTC for the device's sm_XX (a cubin); PTX for the newest architecture NVRTC knows when it predates the GPU."""

    dialect = DIALECT

    def __init__(self, runtime):
        self.runtime, self.cp = runtime, runtime.cp
        self.binaries: dict[str, bytes] = {}  # entry name -> binary loaded, for subgraph serialisation
        self._lock = threading.Lock()
        self._probed = False
        self.reason = self.nvrtc = None
        self.version = self.target = self.kind = ""
        self.includes: list[str] = []

    def _probe(self) -> None:
        if self._probed:
            return
        try:
            self.nvrtc = _nvrtc(self.cp)
            major, minor = self.nvrtc.getVersion()
        except Exception as err:  # cupy loads libnvrtc lazily; a missing library surfaces here
            self.reason = (f"NVRTC could not be loaded for {self.runtime.name} ({type(err).__name__}: {err}); "
                           f"ops written in kernel primitives run on the CPU instead. Fix: install NVRTC for cupy's "
                           f"CUDA version, e.g. pip install 'cupy-cuda13x[ctk]' or a CUDA toolkit on CUDA_PATH")
            self._probed = True
            return
        cc = int(self.runtime.properties().extra["arch"][3:])
        archs = tuple(getattr(self.nvrtc, "getSupportedArchs", lambda: ())())
        if hasattr(self.nvrtc, "getCUBIN") and (not archs or cc in archs):
            self.target, self.kind = f"sm_{cc}", "cubin"
        else:  # NVRTC older than the GPU: PTX the driver compiles for it
            self.target, self.kind = f"compute_{max([a for a in archs if a <= cc] or [cc])}", "ptx"
        self.version = f"{major}.{minor}"
        self.includes = fp16_include_dirs(self.cp, major)
        self._probed = True

    def available(self) -> str | None:
        self._probe()
        return self.reason

    def cache_key(self) -> dict:
        self._probe()
        return {"backend": "cuda-nvrtc", "nvrtc": self.version, "target": self.target, "kind": self.kind,
                "options": " ".join(self.options())}

    def options(self) -> list[str]:
        """NVRTC options besides the target architecture."""
        self._probe()
        return [*OPTIONS, *(f"-I{d}" for d in self.includes)]

    def compile(self, source: str, name: str) -> bytes:
        self._probe()
        nvrtc, opts = self.nvrtc, [f"--gpu-architecture={self.target}", *self.options()]
        prog = nvrtc.createProgram(source, f"{name}.cu", [], [])
        try:
            try:
                nvrtc.compileProgram(prog, opts)
            except nvrtc.NVRTCError as err:
                log = nvrtc.getProgramLog(prog) or str(err)
                raise CompileError(
                    f"{self.runtime.name}: NVRTC {self.version} could not compile kernel {name!r} for "
                    f"{self.target} (options: {' '.join(opts)}). Fix: if it is your kernel, correct the line the log "
                    f"names; if it comes from hwadapter's op set, report it with this source and log",
                    source=source, log=log) from None
            if self.kind == "cubin":
                return bytes(nvrtc.getCUBIN(prog))
            ptx = nvrtc.getPTX(prog)
            ptx = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
            return ptx if ptx.endswith(b"\0") else ptx + b"\0"  # the driver reads PTX as a C string
        finally:
            nvrtc.destroyProgram(prog)

    def load(self, binary: bytes, name: str) -> CudaProgram:
        with self.runtime.device:
            module = self.cp.cuda.function.Module()
            try:
                module.load(bytes(binary))
                function = module.get_function(name)
            except Exception as err:  # CUDADriverError: e.g. PTX newer than the driver, or a foreign binary
                raise CompileError(f"{self.runtime.name}: the driver could not load kernel {name!r} "
                                   f"({self.kind} for {self.target}): {err}. Fix: upgrade the NVIDIA driver to "
                                   f"one supporting NVRTC {self.version}, or clear the kernel cache "
                                   f"(HWADAPTER_CACHE_DIR)") from err
        with self._lock:
            self.binaries[name] = bytes(binary)
        return CudaProgram(function, self.runtime, self.dialect.schedule.local_size)
