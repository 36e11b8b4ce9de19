"""Test-side launchers: compile generated C with gcc, run OpenCL on PoCL, compile CUDA with nvcc.

These are deliberately independent of hwadapter_kp internals: they use only the
public launch contract (params, source, bind, output_shapes, local_size).
"""

import atexit
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import hwadapter_kp as kp

_TMP = tempfile.mkdtemp(prefix="kp_tests_")
atexit.register(shutil.rmtree, _TMP, True)
_LIBS = {}
NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if os.path.exists("/usr/local/bin/nvcc") else None)

STORAGE = {"float16": np.float16, "bool": np.bool_}


def out_dtype(dtype):
    """numpy dtype of an output buffer."""
    return np.dtype(STORAGE.get(dtype, dtype))


# --- C ---------------------------------------------------------------------------------------------

def _unique_by_name(programs, dialect):
    """{entry name: source}; one source per name (same name means same program)."""
    seen = {}
    for p in programs:
        seen.setdefault(p.name, p.source(dialect))
    return seen


def build_c(programs, dialect=kp.C, jobs=2):
    """Compile the programs' C sources into shared libraries (one gcc per chunk, chunks in parallel).

    Returns {entry name: ctypes function}; libraries are cached by source hash for the session.
    """
    sources = _unique_by_name(programs, dialect)
    names = sorted(sources)
    chunks = [names[i::jobs] for i in range(jobs)] if len(names) >= 8 else [names]
    funcs = {}
    with ThreadPoolExecutor(jobs) as pool:
        for lib, chunk in zip(pool.map(lambda c: _build_chunk([sources[n] for n in c]), chunks), chunks):
            for n in chunk:
                fn = getattr(lib, n)
                fn.restype = None
                funcs[n] = fn
    return funcs


def _build_chunk(sources):
    key = hashlib.sha256("\0".join(sources).encode()).hexdigest()[:16]
    if key in _LIBS:
        return _LIBS[key]
    files = []
    for src in sources:
        path = os.path.join(_TMP, hashlib.sha256(src.encode()).hexdigest()[:16] + ".c")
        with open(path, "w") as f:
            f.write(src)
        files.append(path)
    lib_path = os.path.join(_TMP, f"lib{key}.so")
    cmd = ["gcc", "-std=c99", "-O1", "-fPIC", "-shared", "-fopenmp", "-Wall", "-Werror=implicit-function-declaration",
           *files, "-o", lib_path, "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise AssertionError(f"gcc failed:\n{res.stderr[:4000]}\n{kp.number_lines(sources[0])[:6000]}")
    _LIBS[key] = ctypes.CDLL(lib_path)
    return _LIBS[key]


def _c_launch(program, inputs, dialect):
    """(numpy inputs, zeroed outputs, the launch, the entry's arguments: buffer addresses then scalars)."""
    inputs = {n: np.asarray(v) for n, v in inputs.items()}
    launch = program.bind(inputs, dialect)
    shapes = program.output_shapes(inputs)
    outs = {p.name: np.zeros(shapes[p.name], out_dtype(p.dtype)) for p in program.outputs}
    args = [(inputs[p.name] if p.is_input else outs[p.name]).ctypes.data for p in program.params]
    return inputs, outs, launch, args + [int(v) for v in launch.scalar_args]


def run_c(program, inputs, funcs=None, dialect=kp.C):
    """Launch ``program`` through its C entry point on numpy ``inputs``; returns outputs."""
    fn = (funcs or build_c([program], dialect))[program.name]
    inputs, outs, launch, args = _c_launch(program, inputs, dialect)
    buffers = len(program.params)
    if launch.global_size:
        fn(*[ctypes.c_void_p(a) for a in args[:buffers]], *[ctypes.c_int64(a) for a in args[buffers:]])
    return outs


def run_c_parts(program, inputs, parts: int, dialect=kp.C):
    """Launch ``program`` through its C `_task` entry, every part of ``parts`` in turn (what a host's threads share);
    returns outputs."""
    lib = _build_chunk([program.source(dialect)])
    task = getattr(lib, f"{program.name}_task")
    task.restype, task.argtypes = None, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    inputs, outs, _, args = _c_launch(program, inputs, dialect)
    packed = np.array(args, np.int64)
    for part in range(parts):
        task(packed.ctypes.data, part, parts)
    return outs


# --- OpenCL ----------------------------------------------------------------------------------------

_CL = {}


def cl_env():
    """(context, queue) on the first OpenCL platform, or None with the reason."""
    if "env" not in _CL:
        try:
            import pyopencl as cl
            platforms = cl.get_platforms()
            ctx = cl.Context(devices=[platforms[0].get_devices()[0]])
            _CL["env"] = (ctx, cl.CommandQueue(ctx)), None
        except Exception as exc:   # no ICD, no platform, no device
            _CL["env"] = None, f"no OpenCL platform: {exc}"
    return _CL["env"]


def build_cl(programs, dialect=kp.OPENCL):
    """Build all programs' OpenCL sources as ONE cl.Program (helpers are include-guarded)."""
    import pyopencl as cl
    (ctx, _), _ = cl_env()
    sources = _unique_by_name(programs, dialect)
    text = "\n".join(sources[n] for n in sorted(sources))
    key = ("cl", hashlib.sha256(text.encode()).hexdigest())
    if key not in _LIBS:
        try:
            _LIBS[key] = cl.Program(ctx, text).build()
        except cl.RuntimeError as exc:
            raise AssertionError(f"OpenCL build failed: {exc}") from None
    return _LIBS[key]


def run_cl(program, inputs, clprog=None, dialect=kp.OPENCL):
    """Launch ``program`` on the OpenCL device; inputs must be contiguous numpy arrays."""
    import pyopencl as cl
    (ctx, queue), _ = cl_env()
    clprog = clprog or build_cl([program], dialect)
    inputs = {n: np.array(v, order="C") for n, v in inputs.items()}   # buffers are copied densely
    launch = program.bind(inputs, dialect)
    shapes = program.output_shapes(inputs)
    outs = {p.name: np.zeros(shapes[p.name], out_dtype(p.dtype)) for p in program.outputs}
    mf = cl.mem_flags
    bufs = []
    for p in program.params:
        if p.is_input:
            arr = inputs[p.name]
            host = arr if arr.nbytes else np.zeros(1, np.uint8)   # OpenCL forbids empty buffers
            bufs.append(cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=host))
        else:
            bufs.append(cl.Buffer(ctx, mf.WRITE_ONLY, max(outs[p.name].nbytes, 1)))
    kernel = cl.Kernel(clprog, program.name)
    kernel.set_args(*bufs, *[np.int64(v) for v in launch.scalar_args])
    if launch.global_size:
        cl.enqueue_nd_range_kernel(queue, kernel, (launch.global_size,), (program.local_size(dialect),))
    for p, buf in zip(program.params, bufs):
        if not p.is_input and outs[p.name].nbytes:
            cl.enqueue_copy(queue, outs[p.name], buf)
    queue.finish()
    return outs


# --- CUDA ------------------------------------------------------------------------------------------

def nvcc_ptx(programs, dialect=kp.CUDA, arch="sm_90"):
    """Compile all programs' CUDA sources as one translation unit to PTX; returns the PTX text."""
    sources = _unique_by_name(programs, dialect)
    text = "\n".join(sources[n] for n in sorted(sources))
    path = os.path.join(_TMP, hashlib.sha256(text.encode()).hexdigest()[:16] + ".cu")
    with open(path, "w") as f:
        f.write(text)
    res = subprocess.run([NVCC, "-ptx", f"-arch={arch}", path, "-o", path + ".ptx"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise AssertionError(f"nvcc failed:\n{res.stderr[:4000]}")
    with open(path + ".ptx") as f:
        return f.read()


# --- comparison ------------------------------------------------------------------------------------

def tolerance(dtype):
    """(rtol, atol) for comparing a backend with the interpreter."""
    return {"float16": (4e-3, 1e-3), "float32": (2e-5, 1e-6), "float64": (1e-12, 1e-14)}.get(str(dtype), (0, 0))


def assert_same(actual, expected, what=""):
    """Equal dtype and shape; floats within dtype tolerance (NaN == NaN, inf == inf), others exact."""
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if actual.dtype.kind == "f":
        rtol, atol = tolerance(actual.dtype)
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)
