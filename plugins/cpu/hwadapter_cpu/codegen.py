"""The CPU compiler backend: kernel-primitive C compiled by the system C compiler (OpenMP), loaded with ctypes."""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

import hwadapter_kp as kp
from hwadapter.plugin import CodegenBackend, CompileError, Program

_BASE_FLAGS = ["-O3", "-fPIC", "-shared", "-std=c99", "-ffp-contract=off"]
# Used when the compiler accepts them. -fno-trapping-math: generated kernels never read the floating-point
# exception flags, and under gcc's default (-ftrapping-math) an operation moved into one arm of a NaN-propagating
# select (relu, minimum, maximum) may not be executed speculatively, so the loop is not if-converted and runs scalar
# (many times slower). -fno-math-errno: kernels never read errno, and setting it puts a branch and a call around every
# sqrt. Neither changes a result: NaNs, infinities and signed zeros keep IEEE semantics (that is -ffast-math's
# -ffinite-math-only / -fno-signed-zeros, which stay off).
# -fopenmp-simd: OpenMP's `simd` loops, without its threads (a forked child of a process that ran OpenMP threads hangs
# in its first parallel loop); the device's threads run a program's parts instead (CProgram.launch).
_OPTIONAL_FLAGS = ["-march=native", "-fno-trapping-math", "-fno-math-errno", "-fopenmp-simd"]
#: The float math functions generated loops may call in vector form, where the C library has them (glibc's libmvec).
#: Each keeps IEEE nan/inf/signed-zero results; the error bound, in float32 ulps against float64 over the float32
#: range, is what tests/test_vector_math.py measures and asserts.
VECTOR_MATH = ("expf", "logf", "tanhf", "erff", "erfcf", "sinf", "cosf", "powf")


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


def _vector_symbol(binary: bytes, fn: str) -> bool:
    """True when `binary` calls a vector variant of `fn` (x86_64 vector ABI names: _ZGV<isa><mask><lanes>v_<fn>)."""
    return re.search(rb"_ZGV[a-z]N\d+v+_" + fn.encode() + rb"\b", binary) is not None


class CProgram(Program):
    """One compiled entry point, run through its `_task` form (hwadapter_kp's C): on the calling thread, or in parts
    on `threads` (set by the plugin's tuning: `threads.run(task, args, parts)` runs them, False if it cannot); the
    GIL is released (ctypes)."""

    def __init__(self, fn, library=None, task=None, threads=None):
        self.fn = fn
        self.library = library  # the loaded shared library: its other entry points, for hand-written kernels
        self.task, self.threads = task, threads

    def launch(self, global_size, buffers, scalars, stream=None):
        self.launcher(global_size, tuple(scalars))(buffers)

    def lowered(self, global_size, scalars, buffers):
        """The launch as a segment's record (tuning/segments.py): its task in parts as `launcher` runs it, buffers as
        the records name them; None without a task or the device's threads."""
        if self.task is None or self.threads is None or not hasattr(self.threads, "lowered"):
            return None
        address = ctypes.cast(self.task, ctypes.c_void_p).value
        template = np.array([0] * len(buffers) + list(scalars), np.int64)
        units = global_size if global_size > 1 else 0
        return self.threads.lowered(address, template, units, [(k, where, 0) for k, where in enumerate(buffers)])

    def launcher(self, global_size, scalars):
        if self.task is None:  # a hand-written entry point: its own arguments
            return lambda buffers: self.fn(*[ctypes.c_void_p(b.ctypes.data) for b in buffers],
                                           *[ctypes.c_int64(s) for s in scalars])
        task, threads, fixed = self.task, self.threads, list(scalars)
        parallel = threads is not None and global_size > 1
        address = ctypes.cast(task, ctypes.c_void_p).value

        def run(buffers):
            args = np.array([b.ctypes.data for b in buffers] + fixed, np.int64)
            if not (parallel and threads.run(address, args, global_size)):
                task(args.ctypes.data, 0, 1)
        return run


class CpuCodegenBackend(CodegenBackend):
    """C99 + OpenMP through gcc/cc; unavailable, with the reason, when there is no C compiler."""

    dialect = kp.C
    #: the device's threads (the plugin's tuning sets them; None: every program runs on the calling thread)
    threads = None

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
            found = self._vector_math()
            if found:
                self.dialect = dataclasses.replace(kp.C, vector_math=found)

    def _vector_math(self) -> tuple:
        """The VECTOR_MATH functions whose vector forms a loop of this compiler links to and loads (glibc's libmvec),
        found by compiling one loop per function: none without OpenMP's `simd` or where the library lacks them."""
        if "-fopenmp-simd" not in self.flags:
            return ()
        probe = dataclasses.replace(kp.C, vector_math=VECTOR_MATH)
        lines = probe.features_prelude(set())
        for fn in VECTOR_MATH:
            args = "x[i], x[i]" if fn == "powf" else "x[i]"
            lines.append(f"void probe_{fn}(const float* restrict x, float* restrict y, const int64_t n) {{\n"
                         f"#pragma omp simd\n    for (int64_t i = 0; i < n; ++i) y[i] = {fn}({args});\n}}")
        try:
            binary, _ = self._compile("\n".join(lines), "vector_math")
            self.load(binary, f"probe_{VECTOR_MATH[0]}")  # loading resolves the vector symbols (ctypes: RTLD_NOW)
        except (CompileError, OSError):
            return ()
        return tuple(fn for fn in VECTOR_MATH if _vector_symbol(binary, fn))

    def available(self) -> str | None:
        if self.cc is None:
            return ("no C compiler found (looked for $CC, gcc, cc); install gcc (apt-get install gcc) to compile "
                    "kernel primitives, until then the CPU uses its numpy kernels")
        return None

    @property
    def openmp(self) -> bool:
        return "-fopenmp-simd" in self.flags

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
        task = getattr(lib, f"{name}_task", None)  # hwadapter_kp's generated code has one; hand-written code not
        if task is not None:
            task.restype, task.argtypes = None, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
        return CProgram(fn, lib, task, self.threads)
