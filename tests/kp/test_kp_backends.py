"""Every corpus program through every backend, against the interpreter.

C: compiled by gcc into shared libraries and called through ctypes.
OpenCL: built on the first OpenCL platform (PoCL here) with pyopencl and run.
CUDA: compiled to PTX with nvcc for sm_90 (no GPU needed); the entry points must be there.
Sources of a backend are built in one batch, which also proves they can share a translation unit.
"""

import re

import pytest

import hwadapter_kp as kp
import kp_harness as H
from kp_corpus import cases

CASES = cases()
IDS = [c.id for c in CASES]
# schedules the renderer must honour: several work units per item, SIMD width (C), other group sizes;
# the C variant also forces the OpenMP threads on for every size
C_VARIANT = kp.CDialect(schedule=kp.Schedule(local_size=1, elems_per_item=4, vector_width=4), parallel_threshold=0)
CL_VARIANT = kp.OPENCL.with_schedule(local_size=32, elems_per_item=3)
CUDA_VARIANT = kp.CUDA.with_schedule(local_size=128, elems_per_item=4)


@pytest.fixture(scope="module")
def programs():
    return [c.program() for c in CASES]


def _check(case, program, run):
    expected = kp.interpret(program, case.inputs)
    got = run()
    assert set(got) == set(expected)
    for name in expected:
        H.assert_same(got[name], expected[name], f"{case.id}:{name}")


# --- C ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def c_funcs(programs):
    return H.build_c(programs)


@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_c(index, programs, c_funcs):
    case, program = CASES[index], programs[index]
    _check(case, program, lambda: H.run_c(program, case.inputs, c_funcs))


@pytest.mark.slow
def test_c_schedule_variant(programs):
    funcs = H.build_c(programs[::4], C_VARIANT)
    for case, program in zip(CASES[::4], programs[::4]):
        src = program.source(C_VARIANT)
        assert "elems_per_item=4" in src
        assert ("#pragma omp simd simdlen(4)" in src) == (not program.has_reduce)
        _check(case, program, lambda: H.run_c(program, case.inputs, funcs, C_VARIANT))


# --- OpenCL ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cl_prog(programs):
    env, reason = H.cl_env()
    if env is None:
        print(f"skipping OpenCL: {reason}")
        pytest.skip(reason)
    return H.build_cl(programs)


@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_opencl(index, programs, cl_prog):
    case, program = CASES[index], programs[index]
    _check(case, program, lambda: H.run_cl(program, case.inputs, cl_prog))


@pytest.mark.slow
def test_opencl_schedule_variant(programs, cl_prog):
    subset = list(zip(CASES, programs))[1::5]
    clp = H.build_cl([p for _, p in subset], CL_VARIANT)
    for case, program in subset:
        assert "reqd_work_group_size(32, 1, 1)" in program.source(CL_VARIANT)
        _check(case, program, lambda: H.run_cl(program, case.inputs, clp, CL_VARIANT))


def test_opencl_uses_fp64_pragma_only_when_needed(programs):
    for case, program in zip(CASES, programs):
        uses_f64 = any(p.dtype == "float64" for p in program.params) or "double" in program.source("opencl")
        assert ("cl_khr_fp64" in program.source("opencl")) == uses_f64, case.id
        assert "cl_khr_fp16" not in program.source("opencl")


# --- CUDA ------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(H.NVCC is None, reason="nvcc not found")
@pytest.mark.parametrize("dialect", [kp.CUDA, CUDA_VARIANT], ids=["default", "variant"])
def test_cuda_compiles_with_nvcc(programs, dialect):
    programs = programs if dialect is kp.CUDA else programs[::3]     # the variant only changes the grid loop
    ptx = H.nvcc_ptx(programs, dialect)
    entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
    missing = {p.name for p in programs} - entries
    assert not missing, f"entry points missing from PTX: {sorted(missing)[:5]}"


def test_cuda_sources_are_well_formed(programs):
    for program in programs[:20]:
        src = program.source("cuda")
        assert f'extern "C" __global__ void __launch_bounds__(256)\n{program.name}(' in src
        assert "gridDim.x * blockDim.x" in src      # grid-stride loop
        if any(p.dtype == "float16" for p in program.params):
            assert "#include <cuda_fp16.h>" in src and "__half" in src


def test_corpus_covers_every_library_kernel():
    assert {c.kernel.name for c in CASES} == set(kp.library.KERNELS)
