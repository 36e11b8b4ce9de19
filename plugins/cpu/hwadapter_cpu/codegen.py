"""The CPU compiler backend: kernel-primitive C compiled by the system C compiler (OpenMP), loaded with ctypes."""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import hwadapter_kp as kp
from hwadapter.plugin import CodegenBackend, CompileError, Program

_BASE_FLAGS = ["-O3", "-fPIC", "-shared", "-std=c99", "-ffp-contract=off"]
# Used when the compiler accepts them. -fno-trapping-math: generated kernels never read the floating-point
# exception flags, and under gcc's default (-ftrapping-math) an operation moved into one arm of a NaN-propagating
# select (relu, minimum, maximum) may not be executed speculatively, so the loop is not if-converted and runs scalar
# (many times slower). -fno-math-errno: kernels never read errno, and setting it puts a branch and a call around every
# sqrt. Neither changes a result: NaNs, infinities and signed zeros keep IEEE semantics (that is -ffast-math's
# -ffinite-math-only / -fno-signed-zeros, which stay off).
_OPTIONAL_FLAGS = ["-march=native", "-fno-trapping-math", "-fno-math-errno", "-fopenmp"]


def _find_compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "")) or shutil.which("gcc") or shutil.which("cc")


def _accepts(cc: str, *flags: str) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "t.c"
        src.write_text("int main(void) { return 0; }\n")
        return subprocess.run([cc, *flags, str(src), "-o", str(Path(tmp) / "t")], capture_output=True).returncode == 0


def _accepted(cc: str, flags: list[str]) -> list[str]:
    """The flags `cc` accepts: one trial compile when it takes them all (the usual case), else one per flag."""
    if _accepts(cc, *flags):
        return list(flags)
    return [flag for flag in flags if _accepts(cc, flag)]


class CProgram(Program):
    """One compiled entry point; the whole grid runs in one call, GIL released (ctypes)."""

    def __init__(self, fn, library=None):
        self.fn = fn
        self.library = library  # the loaded shared library: its other entry points, for hand-written kernels

    def launch(self, global_size, buffers, scalars, stream=None):
        args = [ctypes.c_void_p(b.ctypes.data) for b in buffers] + [ctypes.c_int64(s) for s in scalars]
        self.fn(*args)


class CpuCodegenBackend(CodegenBackend):
    """C99 + OpenMP through gcc/cc; unavailable, with the reason, when there is no C compiler."""

    dialect = kp.C

    def __init__(self):
        self.cc = _find_compiler()
        self._lock = threading.Lock()
        self._libs: dict[str, ctypes.CDLL] = {}
        self.flags = list(_BASE_FLAGS)
        self.version = ""
        if self.cc:
            self.flags += _accepted(self.cc, _OPTIONAL_FLAGS)
            out = subprocess.run([self.cc, "--version"], capture_output=True, text=True)
            self.version = (out.stdout.splitlines() or ["?"])[0]

    def available(self) -> str | None:
        if self.cc is None:
            return ("no C compiler found (looked for $CC, gcc, cc); install gcc (apt-get install gcc) to compile "
                    "kernel primitives, until then the CPU uses its numpy kernels")
        return None

    @property
    def openmp(self) -> bool:
        return "-fopenmp" in self.flags

    def cache_key(self) -> dict:
        """What a compiled binary depends on besides its source."""
        from .runtime import _cpu_name
        return {"compiler": self.version, "flags": " ".join(self.flags), "target": platform.machine(),
                "cpu": _cpu_name()}

    def compile(self, source: str, name: str) -> bytes:
        return self._compile(source, name)[0]

    def vectorizer_report(self, source: str, name: str) -> str | None:
        """gcc's -fopt-info-vec report (loops vectorised and missed) of `source` under this backend's flags; None
        when the compiler is not gcc. Lines read `<name>.c:<line>:<column>: optimized: loop vectorized ...`."""
        if "Free Software Foundation" not in self._version_text():
            return None
        return self._compile(source, name, ["-fopt-info-vec-optimized", "-fopt-info-vec-missed"])[1]

    def _version_text(self) -> str:
        return subprocess.run([self.cc, "--version"], capture_output=True, text=True).stdout

    def _compile(self, source: str, name: str, extra: tuple | list = ()) -> tuple[bytes, str]:
        """(shared library, compiler diagnostics) of `source` under this backend's flags plus `extra`."""
        with tempfile.TemporaryDirectory(prefix="hwadapter-cc-") as tmp:
            src, lib = Path(tmp) / f"{name}.c", Path(tmp) / f"{name}.so"
            src.write_text(source)
            proc = subprocess.run([self.cc, *self.flags, *extra, str(src), "-o", str(lib), "-lm"],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise CompileError(f"cpu: {Path(self.cc).name} could not compile kernel {name!r}. Fix: this is a "
                                   f"bug in the generated code or the kernel; report it with the source below",
                                   source=source, log=proc.stderr or proc.stdout)
            return lib.read_bytes(), proc.stderr

    def load(self, binary: bytes, name: str) -> CProgram:
        digest = hashlib.sha256(binary).hexdigest()
        with self._lock:
            lib = self._libs.get(digest)
            if lib is None:
                # dlopen needs a file: a private one, removed at once (the mapping stays valid)
                with tempfile.TemporaryDirectory(prefix="hwadapter-so-") as tmp:
                    path = Path(tmp) / f"{digest}.so"
                    path.write_bytes(binary)
                    lib = self._libs[digest] = ctypes.CDLL(str(path))
        fn = getattr(lib, name)
        fn.restype = None
        return CProgram(fn, lib)
