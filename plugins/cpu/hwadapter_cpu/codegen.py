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

_BASE_FLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-std=c99", "-ffp-contract=off"]


def _find_compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "")) or shutil.which("gcc") or shutil.which("cc")


def _accepts(cc: str, flag: str) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "t.c"
        src.write_text("int main(void) { return 0; }\n")
        return subprocess.run([cc, flag, str(src), "-o", str(Path(tmp) / "t")], capture_output=True).returncode == 0


class CProgram(Program):
    """One compiled entry point; the whole grid runs in one call, GIL released (ctypes)."""

    def __init__(self, fn):
        self.fn = fn

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
            if not _accepts(self.cc, "-march=native"):
                self.flags.remove("-march=native")
            if _accepts(self.cc, "-fopenmp"):
                self.flags.append("-fopenmp")
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
        with tempfile.TemporaryDirectory(prefix="hwadapter-cc-") as tmp:
            src, lib = Path(tmp) / f"{name}.c", Path(tmp) / f"{name}.so"
            src.write_text(source)
            proc = subprocess.run([self.cc, *self.flags, str(src), "-o", str(lib), "-lm"],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise CompileError(f"cpu: {Path(self.cc).name} could not compile kernel {name!r}. Fix: this is a "
                                   f"bug in the generated code or the kernel; report it with the source below",
                                   source=source, log=proc.stderr or proc.stdout)
            return lib.read_bytes()

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
        return CProgram(fn)
