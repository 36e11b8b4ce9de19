"""numpy's BLAS for the tuned kernels: the cblas_sgemm C calls (a private one-thread copy of numpy's OpenBLAS), run
single-threaded while the device's own threads (crew.c) share the work, and how that work is cut.

Why not BLAS's own threads: OpenBLAS splits each product evenly up front, waits for every thread at its end, and its
threads spin between products, so on a busy machine a descheduled thread holds back every product. With the crew a
descheduled thread holds back only the task it took.

Why a private copy of numpy's OpenBLAS: the kernels' products run on a copy of numpy's library loaded once more from
memory, with one thread of its own, so that the crew's tasks never share a library with numpy's own threaded calls:
setting numpy's library to one thread around every kernel and back (what SingleBlas does where there is no copy) cost
more than a small product, and its threads, woken by numpy's calls, spun beside the crew. And on the kernels the CPU
admits: OpenBLAS runs the kernels of the core it recognises, or of the one OPENBLAS_CORETYPE names (a core named for
safety on every host: this AMD host's environment sets Haswell), and a CPU a build does not know may fall back to an
older core's (OpenMathLib/OpenBLAS#6029, Zen 5). On a CPU with AVX-512, Haswell's AVX2 kernels ran the products at
half the speed of SkylakeX's. numpy's own calls keep numpy's library and its settings. HWADAPTER_CPU_BLAS=numpy keeps
numpy's library for the kernels too.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading

from hwadapter.plugin import InvalidArgumentError

from ..runtime import cpuinfo

log = logging.getLogger(__name__)

#: products below this many multiply-adds run as one task: sharing them costs more than it saves
SPLIT_FLOPS = 1 << 21
#: the least a block of one product holds: each block's BLAS call packs the other operand again
ROWS, COLUMNS = 64, 256
#: OpenBLAS's cores with AVX-512 kernels (lower case, as openblas_get_corename names them), and the CPU flags the
#: first of them needs: on such a CPU, another core's kernels are a misrecognised CPU's fallback
AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")
AVX512_FLAGS = frozenset({"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"})


def split(n: int, parts: int, least: int = 1) -> list:
    """[start, end) ranges cutting range(n) into at most `parts` pieces of at least `least` (the last may be less)."""
    step = max(least, -(-n // max(1, parts)))
    return [(a, min(n, a + step)) for a in range(0, n, step)]


def cpu_flags() -> frozenset:
    """The CPU's feature flags as Linux names them (empty where /proc/cpuinfo does not say)."""
    return frozenset(cpuinfo("flags").split())


def blas_setting(environ=os.environ) -> str:
    """HWADAPTER_CPU_BLAS: "auto" (the default: the products on the kernels the CPU admits) or "numpy" (on numpy's
    library as it is loaded and set)."""
    text = environ.get("HWADAPTER_CPU_BLAS", "auto")
    if text not in ("auto", "numpy"):
        raise InvalidArgumentError(f"HWADAPTER_CPU_BLAS={text!r} is not a choice of BLAS for the CPU's products",
                                   fix="unset it, or set it to auto (the kernels the CPU admits) or numpy")
    return text


def better_core(core: str, flags: frozenset) -> str:
    """The OpenBLAS core type whose kernels this CPU should run where numpy's OpenBLAS runs `core` (its corename):
    SkylakeX's on a CPU with AVX-512 where the core is not one of AVX-512's, else `core` itself."""
    if not AVX512_FLAGS <= flags or core.lower() in AVX512_CORES:
        return core
    return "SkylakeX"


def private_openblas(path: str, core: str):
    """numpy's OpenBLAS at `path` loaded once more, from a copy in memory (the same file would be the same library),
    on `core`'s kernels with one thread; None where that cannot be done or OpenBLAS took another core."""
    if not hasattr(os, "memfd_create"):
        return None
    settings = {"OPENBLAS_CORETYPE": core, "OPENBLAS_NUM_THREADS": "1"}  # read once, while the library loads
    saved = {name: os.environ.get(name) for name in settings}
    try:
        # the descriptor stays open once loaded: glibc knows a library by its path, and a closed descriptor's
        # number (so /proc/self/fd/N) would be reused by the next copy, which would then be this one
        fd = os.memfd_create("hwadapter-openblas")
        try:
            with open(path, "rb") as source:
                os.sendfile(fd, source.fileno(), 0, os.fstat(source.fileno()).st_size)
            os.environ.update(settings)
            dll = ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_LOCAL)
        except OSError:
            os.close(fd)
            raise
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    except OSError as exc:
        log.info("numpy's OpenBLAS could not be loaded again on %s kernels (%s): its own run", core, exc)
        return None
    # an AVX-512 core asked for and not taken (an older OpenBLAS): numpy's library is as good
    return dll if corename(dll) == core.lower() or core.lower() not in AVX512_CORES else None


def corename(dll) -> str:
    """The core type an OpenBLAS library runs (lower case), or "" where it does not say."""
    for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename64_",
                 "openblas_get_corename"):
        fn = getattr(dll, name, None)
        if fn is not None:
            fn.restype = ctypes.c_char_p
            return (fn() or b"").decode(errors="replace").strip().lower()
    return ""


def cblas_sgemm(dll):
    """(the function, ilp64) of a BLAS library's cblas_sgemm, or None; ilp64: its integers are 64-bit (a "64_"
    symbol suffix)."""
    for name in ("scipy_cblas_sgemm64_", "cblas_sgemm64_", "scipy_cblas_sgemm", "cblas_sgemm"):
        fn = getattr(dll, name, None)
        if fn is not None:
            return fn, name.endswith("64_")
    return None


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class SingleBlas:
    """The kernels' BLAS, single-threaded while any kernel is inside (the crew parallelises): a private copy that has
    one thread, or the libraries numpy loaded set to one thread each meanwhile."""

    def __init__(self):
        self._lock = threading.Lock()
        self._inside = 0
        self._saved: list = []
        self._libs = None
        self._found = None  # (sgemm's answer,) once found
        self.private = False  # the kernels' sgemm is a private one-thread copy: numpy's library is left alone

    def sgemm(self):
        """(address, ilp64) of the cblas_sgemm the kernels call: a private one-thread copy of numpy's OpenBLAS on the
        core the CPU admits (better_core), else that of the BLAS numpy loaded; None when threadpoolctl knows none.
        ilp64: its integers are 64-bit (a "64_" symbol suffix)."""
        with self._lock:
            if self._found is None:
                self._found = (self._find(),)
        return self._found[0]

    def _find(self):
        for lib in self._controllers():
            try:
                dll = ctypes.CDLL(lib.filepath)
            except OSError:
                continue
            core = corename(dll) if lib.internal_api == "openblas" and blas_setting() == "auto" else ""
            private = private_openblas(lib.filepath, better_core(core, cpu_flags())) if core else None
            if private is not None:
                log.info("the kernels' products run on a private one-thread copy of numpy's OpenBLAS on %s's kernels "
                         "(numpy's runs %s's; HWADAPTER_CPU_BLAS=numpy: numpy's)", corename(private), core)
                dll, self.private = private, True
            found = cblas_sgemm(dll)
            if found is not None:
                return ctypes.cast(found[0], ctypes.c_void_p).value, found[1]
        return None

    def _controllers(self) -> list:
        if self._libs is None:
            try:
                from threadpoolctl import ThreadpoolController  # lazy: it inspects every loaded library once
                self._libs = list(ThreadpoolController().select(user_api="blas").lib_controllers)
            except Exception:  # noqa: BLE001 - without it BLAS keeps its threads: slower under load, still right
                self._libs = []
        return self._libs

    @contextlib.contextmanager
    def __call__(self):
        if self.private:  # the kernels' library has one thread of its own
            yield
            return
        with self._lock:
            if self._inside == 0:
                self._saved = [(lib, lib.get_num_threads()) for lib in self._controllers()]
                for lib, _ in self._saved:
                    lib.set_num_threads(1)
            self._inside += 1
        try:
            yield
        finally:
            with self._lock:
                self._inside -= 1
                if self._inside == 0:
                    for lib, n in self._saved:
                        lib.set_num_threads(n)


single_blas = SingleBlas()
