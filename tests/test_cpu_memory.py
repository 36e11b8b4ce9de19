"""The CPU plugin keeps freed host memory for reuse (tuning/memory.py): a large array freed and allocated again does
not fault its pages in afresh, as glibc's default (blocks over 32 MiB back to the kernel at each free) would."""
from __future__ import annotations

import resource

import numpy as np
import pytest

from hwadapter.runtime.device import get

memory = pytest.importorskip("hwadapter_cpu.tuning.memory")


def _faults(fn) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_a_large_array_freed_is_reused_without_faulting_in_again():
    get("cpu")  # its tuning is registered with the device
    if not memory.keep_freed_memory():
        pytest.skip("the C library has no mallopt (not glibc): malloc keeps its own policy")
    n = 64 << 20  # bytes: SegFormer's concat, past glibc's default threshold of 32 MiB
    np.ones(n // 4, np.float32)  # faulted in once, then freed
    # glibc's default faults it all in again: 16384 pages, or 500-odd where numpy's huge pages apply. The count is the
    # process's: the crew's and BLAS's threads, or the interpreter, may fault a few pages of their own meanwhile (35
    # seen under a parallel test run), so the bound sits well between the two cases.
    assert _faults(lambda: np.ones(n // 4, np.float32)) < 128
