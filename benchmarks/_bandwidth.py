"""The host's real copy bandwidth (every core), the bound for a one-pass kernel, and what the host is made of.

A one-pass elementwise kernel reads x and writes y, as a copy does, so a copy over all cores is its ceiling. One
thread's `np.copyto` is not that ceiling: one core cannot saturate the memory system of most machines.
"""
from __future__ import annotations

import os
import platform
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from hwadapter import kp
from hwadapter.runtime.device import get

COPY = kp.fuse([("identity", ("x",), "y")], ["x"], ["y"], name="copy")


def cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def threaded_copy(src: np.ndarray, dst: np.ndarray, threads: int | None = None) -> Callable[[], None]:
    """np.copyto over `threads` equal chunks at once (numpy releases the GIL while it copies)."""
    threads = threads or cores()
    pool = ThreadPoolExecutor(threads)
    bounds = np.linspace(0, src.size, threads + 1).astype(int)
    chunks = [(dst[a:b], src[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]

    def run():
        for future in [pool.submit(np.copyto, d, s) for d, s in chunks]:
            future.result()
    return run


def compiled(kernel, inputs: dict, device: str = "cpu") -> tuple[Callable[[], None], dict]:
    """(launch, outputs): `kernel` built by `device`'s own codegen backend (its compiler and flags) and launched
    straight into outputs allocated once, so a timing sees the generated code alone, no allocation or dispatch."""
    backend = get(device).codegen
    program = kernel.specialize_for(inputs)
    loaded = backend.load(backend.compile(program.source(backend.dialect), program.name), program.name)
    launch = program.bind(inputs, backend.dialect)
    shapes = program.output_shapes(inputs)
    outputs = {p.name: np.empty(shapes[p.name], p.dtype) for p in program.outputs}
    buffers = [inputs[p.name] for p in program.inputs] + list(outputs.values())

    def run():
        loaded.launch(launch.global_size, buffers, launch.scalar_args)
    return run, outputs


def simd_extensions() -> str:
    """The widest x86 SIMD extension the CPU reports (or the machine name elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    for flag, name in (("avx512f", "AVX-512 (64-byte vectors, 32 registers)"),
                       ("avx2", "AVX2 (32-byte vectors, 16 registers)"), ("avx", "AVX (32-byte vectors)"),
                       ("sse2", "SSE2 (16-byte vectors)")):
        if flag in flags:
            return name + (" + FMA" if "fma" in flags else "")
    return platform.machine()


def cpu() -> str:
    """One line: CPU model, cores, SIMD."""
    from hwadapter_cpu.runtime import _cpu_name
    return f"{_cpu_name()}, {cores()} cores, {simd_extensions()}"


def host() -> str:
    """One line: the CPU, and the compiler and flags the CPU backend builds kernels with."""
    backend = get("cpu").codegen
    compiler = f"{backend.version}, {' '.join(backend.flags)}" if backend else "no C compiler"
    return f"{cpu()}; {compiler}"


def vectorised(kernel, inputs: dict) -> str:
    """What gcc says of the grid loop of `kernel` under the CPU backend's flags ('vectorized using 32 byte
    vectors', or why not), or 'unknown' for other compilers."""
    backend = get("cpu").codegen
    program = kernel.specialize_for(inputs)
    source = program.source(backend.dialect)
    report = backend.vectorizer_report(source, program.name) if backend else None
    if report is None:
        return "unknown (not gcc)"
    first = next(i for i, line in enumerate(source.splitlines(), 1) if "for (int64_t unit" in line)
    notes = [m.group(2) for m in re.finditer(r"\.c:(\d+):\d+: \w+: (.*)", report) if int(m.group(1)) >= first]
    done = [n for n in notes if n.startswith("loop vectorized")]
    return done[0].replace("loop ", "") if done else "NOT vectorised: " + "; ".join(notes[:2])
