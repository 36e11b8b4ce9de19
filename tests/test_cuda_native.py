"""The cuda plugin's native device library (plugins/cuda/hwadapter_cuda/cuda_device.c), checked without a GPU.

The library opens libcudart with dlopen when a host initializes it, so it builds with gcc alone. Here it is driven
through hwadapter's own NativeRuntime against a FAKE libcudart (FAKE_CUDART below: two devices of host memory, copies
that check their cudaMemcpyKind against where the pointers live, streams whose work runs only when synchronised, and
failures injected with $FAKE_CUDART_FAIL), pointed to by $HWADAPTER_CUDART. Everything that loads a library runs in a
child process with a time limit: a crash fails a test instead of killing pytest. The real runtime is tried too: on a
machine without a GPU it must say why (the driver, the runtime), and on one with a GPU (`make test-gpu`) a round trip
on cuda:0 must work.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from children import ERROR_OF, result_of

ROOT = Path(__file__).parents[1]
SOURCE = ROOT / "plugins" / "cuda" / "hwadapter_cuda" / "cuda_device.c"
INCLUDE = ROOT / "core" / "hwadapter" / "include"
CHILD_TIMEOUT = 120

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the cuda device library")

# A stand-in for libcudart: the functions cuda_device.c calls, with CUDA's semantics where the library relies on them
# (the current device is per thread, cudaMalloc allocates on it, cudaMemGetInfo reports it; the legacy NULL stream
# waits for the work of every other stream; a stream's work is pending until something synchronises it).
FAKE_CUDART = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define NDEV 2
#define TOTAL (64u << 20)
typedef struct Block { char *p; size_t n; int dev; struct Block *next; } Block;
typedef struct Op { int kind; void *dst; const void *src; size_t n; int value; struct Stream *other; } Op;
typedef struct Stream { int dev; Op ops[64]; int queued, done; } Stream;
typedef struct Event { Stream *s; int at; } Event;
static _Thread_local int current;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Block *blocks;
static size_t used[NDEV];
static Stream *streams[256];
static int last;

/* The code $FAKE_CUDART_FAIL gives `name` ("cudaMalloc=2,cudaMemcpy=700"), else 0. */
static int injected(const char *name) {
  const char *spec = getenv("FAKE_CUDART_FAIL");
  size_t len = strlen(name);
  for (const char *p = spec; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (!strncmp(p, name, len) && p[len] == '=') return atoi(p + len + 1);
  return 0;
}
#define FAIL(name) do { int c_ = injected(name); if (c_) return last = c_; } while (0)
static Block *find(const void *p, size_t n) {
  pthread_mutex_lock(&lock);
  Block *b = blocks;
  while (b && !((const char *)p >= b->p && (const char *)p + n <= b->p + b->n)) b = b->next;
  pthread_mutex_unlock(&lock);
  return b;
}
static int check(void *dst, const void *src, size_t n, int kind) {
  int dd = find(dst, n) != NULL, sd = src == NULL || find(src, n) != NULL;
  if ((kind == 1 && (!dd || sd)) || (kind == 2 && (dd || !sd)) || (kind == 3 && (!dd || !sd)) || kind < 1 || kind > 3) {
    fprintf(stderr, "fake cudart: kind %d does not match the pointers %p <- %p (%zu bytes)\n", kind, dst, src, n);
    return last = 1;
  }
  return 0;
}
static void run(Op *op);
static void flush(Stream *s) { while (s->done < s->queued) run(&s->ops[s->done++]); }
static void flush_device(int dev) {
  for (int i = 0; i < 256; ++i) if (streams[i] && streams[i]->dev == dev) flush(streams[i]);
}
static void run(Op *op) {
  if (op->kind == 0) memmove(op->dst, op->src, op->n);
  else if (op->kind == 1) memset(op->dst, op->value, op->n);
  else flush(op->other);
}
static int enqueue(Stream *s, Op op) {
  if (!s) { flush_device(current); run(&op); return 0; }  /* the legacy stream: after everything queued */
  if (s->queued == 64) flush(s);
  if (s->queued == 64) s->queued = s->done = 0;
  s->ops[s->queued++] = op;
  return 0;
}

int cudaGetDeviceCount(int *n) { FAIL("cudaGetDeviceCount"); *n = NDEV; return 0; }
int cudaSetDevice(int d) { FAIL("cudaSetDevice"); if (d < 0 || d >= NDEV) return last = 101; current = d; return 0; }
int cudaGetDevice(int *d) { *d = current; return 0; }
int cudaMalloc(void **p, size_t n) {
  FAIL("cudaMalloc");
  pthread_mutex_lock(&lock);
  int room = used[current] + n <= TOTAL;
  Block *b = room ? malloc(sizeof *b) : NULL;
  if (b) { b->p = aligned_alloc(256, (n + 255) / 256 * 256); b->n = n; b->dev = current; b->next = blocks; blocks = b;
           used[current] += n; *p = b->p; }
  pthread_mutex_unlock(&lock);
  return b ? 0 : (last = 2);
}
int cudaFree(void *p) {
  pthread_mutex_lock(&lock);
  Block **l = &blocks;
  while (*l && (*l)->p != p) l = &(*l)->next;
  Block *b = *l;
  if (b) { *l = b->next; used[b->dev] -= b->n; free(b->p); free(b); }
  pthread_mutex_unlock(&lock);
  return b ? 0 : (last = 1);
}
int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
  FAIL("cudaMemcpy");
  if (check(dst, src, n, kind)) return last;
  Op op = {0, dst, src, n, 0, NULL};
  return enqueue(NULL, op);
}
int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, Stream *s) {
  FAIL("cudaMemcpyAsync");
  if (check(dst, src, n, kind)) return last;
  Op op = {0, dst, src, n, 0, NULL};
  return enqueue(s, op);
}
int cudaMemset(void *dst, int v, size_t n) {
  if (check(dst, NULL, n, 3)) return last;
  Op op = {1, dst, NULL, n, v, NULL};
  return enqueue(NULL, op);
}
int cudaMemsetAsync(void *dst, int v, size_t n, Stream *s) {
  if (check(dst, NULL, n, 3)) return last;
  Op op = {1, dst, NULL, n, v, NULL};
  return enqueue(s, op);
}
int cudaDeviceSynchronize(void) { flush_device(current); return 0; }
int cudaMemGetInfo(size_t *f, size_t *t) { *f = TOTAL - used[current]; *t = TOTAL; return 0; }
int cudaDeviceGetAttribute(int *v, int attr, int d) { *v = attr == 16 ? 4 + d : attr == 1 ? 1024 : 0; return 0; }
int cudaDriverGetVersion(int *v) { *v = 13000; return 0; }
int cudaGetDeviceProperties(char *prop, int d) { snprintf(prop, 256, "Fake GPU %d", d); return 0; }
int cudaStreamCreateWithFlags(Stream **s, unsigned flags) {
  if (flags != 0) return last = 1;  /* the library's streams must be blocking: ordered with the NULL stream */
  *s = calloc(1, sizeof **s);
  (*s)->dev = current;
  for (int i = 0; i < 256; ++i) if (!streams[i]) { streams[i] = *s; break; }
  return 0;
}
int cudaStreamDestroy(Stream *s) {
  for (int i = 0; i < 256; ++i) if (streams[i] == s) { flush(s); streams[i] = NULL; free(s); return 0; }
  return last = 400;
}
int cudaStreamSynchronize(Stream *s) { if (s) flush(s); else flush_device(current); return 0; }
int cudaStreamQuery(Stream *s) { return s && s->done < s->queued ? 600 : 0; }
int cudaStreamWaitEvent(Stream *s, Event *e, unsigned flags) {
  Op op = {2, NULL, NULL, 0, 0, e->s};
  return flags || !e->s ? 0 : enqueue(s, op);
}
int cudaEventCreateWithFlags(Event **e, unsigned flags) { (void)flags; *e = calloc(1, sizeof **e); return 0; }
int cudaEventDestroy(Event *e) { free(e); return 0; }
int cudaEventRecord(Event *e, Stream *s) { e->s = s; e->at = s ? s->queued : 0; return 0; }
int cudaEventQuery(Event *e) { return e->s && e->s->done < e->at ? 600 : 0; }
int cudaEventSynchronize(Event *e) { if (e->s) flush(e->s); return 0; }
int cudaGetLastError(void) { int e = last; last = 0; return e; }
const char *cudaGetErrorName(int e) {
  return e == 2 ? "cudaErrorMemoryAllocation" : e == 35 ? "cudaErrorInsufficientDriver" : e == 700
      ? "cudaErrorIllegalAddress" : e == 1 ? "cudaErrorInvalidValue" : "cudaErrorUnknown";
}
const char *cudaGetErrorString(int e) { return e == 2 ? "out of memory" : "fake error"; }
"""

# Run in a child: builds the plugin's library (native_library()), loads copies of it (each copy its own instance, so
# its own initialize) with $HWADAPTER_CUDART set as each check needs, and prints RESULT=<json>.
CHILD_PRELUDE = r"""
import json, os, shutil, tempfile
import numpy as np
from hwadapter.plugin import DeviceUnavailableError, NativeRuntime
from hwadapter.runtime.discovery import registry
from hwadapter.runtime.native import load_library
PATH = registry.get("cuda").plugin.native_library()
_copies = tempfile.TemporaryDirectory()  # removed at exit; a loaded copy stays mapped
def fresh(cudart=None):
    '''The library loaded anew (a copy: its own initialize) with HWADAPTER_CUDART=cudart (None: unset).'''
    copy = os.path.join(_copies.name, f"lib{len(os.listdir(_copies.name))}.so")
    shutil.copy(PATH, copy)
    if cudart is None:
        os.environ.pop("HWADAPTER_CUDART", None)
    else:
        os.environ["HWADAPTER_CUDART"] = cudart
    return load_library(copy)
out = {}
""" + ERROR_OF


def _child(code: str, cudart: Path | None = None) -> dict:
    """Run CHILD_PRELUDE + code in a child Python with a time limit (CUDART: the fake's path); the dict it printed
    as RESULT=."""
    code = f"CUDART = {str(cudart) if cudart else None!r}\n" + textwrap.dedent(code)
    env = {k: v for k, v in os.environ.items() if k not in ("HWADAPTER_CUDART", "FAKE_CUDART_FAIL")}
    return result_of(CHILD_PRELUDE + code, CHILD_TIMEOUT, env=env)


@pytest.fixture(scope="module")
def fake_cudart(tmp_path_factory) -> Path:
    """The fake libcudart, compiled here."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the fake libcudart")
    folder = tmp_path_factory.mktemp("fake-cudart")
    (folder / "fake_cudart.c").write_text(FAKE_CUDART)
    lib = folder / "libcudart.so.13"
    subprocess.run(["gcc", "-O1", "-fPIC", "-shared", "-std=c11", "-Wall", "-Werror", str(folder / "fake_cudart.c"),
                    "-o", str(lib), "-lpthread"], check=True)
    return lib


@needs_gcc
def test_the_library_compiles_warning_free_as_c_and_cpp_and_through_nvcc(tmp_path):
    from hwadapter.plugin import build_library
    built = build_library(SOURCE, "test-cuda", {"DEVICE_TYPE": '"gpu9"'}, ("-ldl", "-lpthread"))  # as native.py does
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(built)], capture_output=True, text=True).stdout
    assert " hwadapter_get_device_interface" in symbols
    assert " cuda" not in symbols and "libcudart" not in subprocess.run(
        ["ldd", str(built)], capture_output=True, text=True).stdout  # no link-time tie to the CUDA runtime
    flags = ["-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}",
             '-DDEVICE_TYPE="gpu9"', str(SOURCE), "-ldl", "-lpthread"]
    builds = {"C11, -Wpedantic": ["gcc", "-std=c11", "-Wpedantic", *flags, "-o", str(tmp_path / "c.so")]}
    if shutil.which("g++"):
        builds["C++20"] = ["g++", "-x", "c++", "-std=c++20", *flags, "-o", str(tmp_path / "cpp.so")]
    if shutil.which("nvcc"):  # nvcc's host compiler, and as CUDA source with cuda_runtime.h included: no clash
        host = [f for f in flags if f.startswith(("-I", "-D", "-l", "-O", "/"))]
        warn = "-Xcompiler=-fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror"
        builds["nvcc"] = ["nvcc", "-shared", warn, *host, "-o", str(tmp_path / "nv.so")]
        builds["nvcc -x cu"] = ["nvcc", "-x", "cu", "-shared", warn, *host, "-o", str(tmp_path / "cu.so")]
    for what, cmd in builds.items():
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, f"{what}: {' '.join(cmd)}\n{proc.stderr}"


# The values cuda_device.c declares itself, checked against the CUDA toolkit's headers where they are installed.
HEADER_CHECK = r"""
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "cuda_device.c"
#define SAME(mine, cudas) _Static_assert((long)(mine) == (long)(cudas), #mine " is not " #cudas);
SAME(CUDA_SUCCESS_, cudaSuccess) SAME(CUDA_INVALID_VALUE, cudaErrorInvalidValue)
SAME(CUDA_MEMORY_ALLOCATION, cudaErrorMemoryAllocation) SAME(CUDA_INVALID_DEVICE_POINTER, cudaErrorInvalidDevicePointer)
SAME(CUDA_STUB_LIBRARY, cudaErrorStubLibrary) SAME(CUDA_INSUFFICIENT_DRIVER, cudaErrorInsufficientDriver)
SAME(CUDA_NO_DEVICE, cudaErrorNoDevice) SAME(CUDA_INVALID_DEVICE, cudaErrorInvalidDevice)
SAME(CUDA_INVALID_HANDLE, cudaErrorInvalidResourceHandle) SAME(CUDA_NOT_READY, cudaErrorNotReady)
SAME(CUDA_DRIVER_MISMATCH, cudaErrorSystemDriverMismatch)
SAME(H2D, cudaMemcpyHostToDevice) SAME(D2H, cudaMemcpyDeviceToHost) SAME(D2D, cudaMemcpyDeviceToDevice)
SAME(ATTR_MAX_THREADS_PER_BLOCK, cudaDevAttrMaxThreadsPerBlock)
SAME(ATTR_MULTIPROCESSORS, cudaDevAttrMultiProcessorCount)
SAME(STREAM_BLOCKING, cudaStreamDefault) SAME(EVENT_DISABLE_TIMING, cudaEventDisableTiming)
_Static_assert(sizeof(cuda_status) == sizeof(cudaError_t), "cudaError_t is int-sized");
_Static_assert(DEVICE_PROP_BYTES >= sizeof(struct cudaDeviceProp), "cudaDeviceProp fits");
_Static_assert(offsetof(struct cudaDeviceProp, name) == 0, "cudaDeviceProp starts with its name");
"""


def _cuda_include() -> Path | None:
    """The CUDA toolkit's include folder (beside nvcc, else /usr/local/cuda), when it has cuda_runtime_api.h."""
    nvcc = shutil.which("nvcc")
    for folder in ([Path(nvcc).resolve().parents[1] / "include"] if nvcc else []) + [Path("/usr/local/cuda/include")]:
        if (folder / "cuda_runtime_api.h").is_file():
            return folder
    return None


@needs_gcc
def test_declared_values_match_the_cuda_headers(tmp_path):
    include = _cuda_include()
    if include is None:
        pytest.skip("no CUDA toolkit headers (cuda_runtime_api.h) here to check the declared values against")
    (tmp_path / "check.c").write_text(HEADER_CHECK)
    proc = subprocess.run(["gcc", "-std=c11", "-fsyntax-only", "-Wall", "-Werror", f"-I{include}", f"-I{INCLUDE}",
                           f"-I{SOURCE.parent}", str(tmp_path / "check.c")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr


@needs_gcc
def test_memory_copies_streams_and_events_through_native_runtime(fake_cudart):
    result = _child("""
        lib = fresh(CUDART)
        out["count"], out["streams"], out["async"] = lib.device_count(), lib.has_streams, lib.async_copies
        rt = NativeRuntime(lib, 0)
        props = rt.properties()
        out["props"] = [props.name, props.vendor, props.total_memory, props.compute_units, props.max_work_group_size,
                        props.extra["alignment"], props.extra["driver_version"]]
        free0, total = rt.memory_info()
        data = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
        a, b = rt.allocate(data.nbytes), rt.allocate(data.nbytes)
        out["aligned"] = a % 256 == 0 and b % 256 == 0
        out["free_after_two"] = free0 - rt.memory_info()[0]
        rt.copy_h2d(a, 0, data)
        rt.copy_d2d(b, 0, a, 0, data.nbytes)
        rt.copy_d2d(b, 400, a, 0, 400)  # flat pointers: into the middle of an allocation
        rt.memset(b, 4000 - 8, 0, 8)
        got = np.empty_like(data)
        rt.copy_d2h(got, b, 0)
        want = data.copy(); want[100:200] = data[:100]; want[-2:] = 0
        out["sync_copies"] = bool(np.array_equal(got, want))
        # Streams: work stays queued (the fake runs it only when synchronised) and events order two streams.
        s1, s2 = rt.create_stream(), rt.create_stream()
        twice = (data * 2).astype(np.float32)
        rt.copy_h2d(a, 0, twice, stream=s1)
        rt.memset(a, 0, 0, 16, stream=s1)
        event = rt.create_event()
        event.record(s1)
        out["pending"] = [s1.query(), event.query()]
        s2.wait_event(event)
        rt.copy_d2d(b, 0, a, 0, data.nbytes, stream=s2)
        got2 = np.zeros_like(data)
        rt.copy_d2h(got2, b, 0, stream=s2)
        s2.synchronize()
        want2 = twice.copy(); want2[:4] = 0
        out["stream_copies"] = bool(np.array_equal(got2, want2))
        out["done"] = [s1.query(), event.query(), s2.query()]
        # A synchronous copy waits for what is queued on the streams (the NULL stream's rule).
        rt.copy_h2d(a, 0, data, stream=s1)
        got3 = np.zeros_like(data)
        rt.copy_d2h(got3, a, 0)
        out["sync_after_queued"] = bool(np.array_equal(got3, data))
        rt.synchronize()
        rt.free(a); rt.free(b)
        out["free_back"] = rt.memory_info()[0] == free0
        out["double_free"] = error_of(rt.free, a)
        out["oom"] = error_of(rt.allocate, total + 1)
        # Device 1 is another device: its memory is its own, set_device makes it current.
        rt1 = NativeRuntime(lib, 1)
        c = rt1.allocate(4096)
        out["per_device"] = [rt.memory_info()[0] == free0, rt1.memory_info()[0] == total - 4096]
        out["free_on_wrong_device"] = error_of(rt.free, c)
        rt1.free(c)
        # Threads on both devices at once (the GIL is released in the calls): each call makes its device current.
        import threading
        free_both = [rt.memory_info()[0], rt1.memory_info()[0]]
        wrong = []
        def work(i):
            r = NativeRuntime(lib, i % 2)
            for k in range(200):
                x = np.full(64 + k, i * 1000 + k, np.int32)
                h = r.allocate(x.nbytes)
                r.copy_h2d(h, 0, x)
                y = np.empty_like(x)
                r.copy_d2h(y, h, 0)
                r.free(h)
                if not np.array_equal(x, y):
                    wrong.append((i, k))
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        out["threads"] = [wrong, [rt.memory_info()[0], rt1.memory_info()[0]] == free_both]
        lib.set_device(1)
        out["current"] = lib.get_device()
        out["no_device"] = error_of(NativeRuntime(lib, 5).allocate, 8)
        print("RESULT=" + json.dumps(out))
    """, fake_cudart)
    assert result["count"] == 2 and result["streams"] is True
    assert result["async"] == {"h2d": True, "d2h": True, "d2d": True, "memset": True}
    assert result["props"] == ["Fake GPU 0", "NVIDIA", 64 << 20, 4, 1024, 256, "CUDA 13.0"]
    assert result["aligned"] and result["free_after_two"] == 8000  # cudaMemGetInfo of the current device
    assert result["sync_copies"] and result["stream_copies"] and result["sync_after_queued"]
    assert result["pending"] == [False, False] and result["done"] == [True, True, True]
    assert result["free_back"]
    assert result["double_free"][0] == "InvalidArgumentError" and "not a live allocation" in result["double_free"][1]
    kind, message = result["oom"]
    assert kind == "OutOfMemoryError", result["oom"]
    assert "cudaMalloc of 67108865 bytes" in message and "cudaErrorMemoryAllocation" in message
    assert "free memory on the GPU" in message and "cuda:0: cudaMalloc of" in message  # device, call, error, fix
    assert result["per_device"] == [True, True]
    assert result["free_on_wrong_device"][0] == "InvalidArgumentError"
    assert result["threads"] == [[], True]
    assert result["current"] == 1
    assert result["no_device"][0] == "InvalidArgumentError" and "no device 5 (there are 2)" in result["no_device"][1]


@needs_gcc
def test_failures_are_clear_errors_never_crashes(fake_cudart):
    result = _child("""
        out["missing"] = error_of(fresh, "/nonexistent/libcudart.so.13")
        out["not_cudart"] = error_of(fresh, "libm.so.6")
        os.environ["FAKE_CUDART_FAIL"] = "cudaGetDeviceCount=35"
        out["no_driver"] = error_of(fresh, CUDART)
        os.environ["FAKE_CUDART_FAIL"] = ""
        lib = fresh(CUDART)
        rt = NativeRuntime(lib, 0)
        os.environ["FAKE_CUDART_FAIL"] = "cudaMalloc=2"
        out["oom"] = error_of(rt.allocate, 64)
        os.environ["FAKE_CUDART_FAIL"] = "cudaMemcpy=700"
        a = None
        try:
            os.environ["FAKE_CUDART_FAIL"] = ""
            a = rt.allocate(64)
            os.environ["FAKE_CUDART_FAIL"] = "cudaMemcpy=700"
            out["copy"] = error_of(rt.copy_h2d, a, 0, np.ones(16, np.float32))
        finally:
            os.environ["FAKE_CUDART_FAIL"] = ""
        rt.copy_h2d(a, 0, np.arange(16, dtype=np.float32))  # a failed call leaves the device usable
        got = np.zeros(16, np.float32)
        rt.copy_d2h(got, a, 0)
        out["usable_after"] = got.tolist() == list(range(16))
        rt.free(a)
        print("RESULT=" + json.dumps(out))
    """, fake_cudart)
    kind, message = result["missing"]
    assert kind == "DeviceUnavailableError" and "cannot load the CUDA runtime /nonexistent/libcudart.so.13" in message
    assert "named by HWADAPTER_CUDART" in message and "cannot open shared object file" in message
    kind, message = result["not_cudart"]
    assert kind == "DeviceUnavailableError" and "libm.so.6 has no cudaGetDeviceCount" in message
    assert "set HWADAPTER_CUDART to a libcudart.so" in message
    kind, message = result["no_driver"]
    assert kind == "DeviceUnavailableError"
    assert "cuda: cudaGetDeviceCount failed: cudaErrorInsufficientDriver (35" in message
    assert "install or upgrade the NVIDIA driver" in message
    kind, message = result["oom"]
    assert kind == "OutOfMemoryError" and "cudaMalloc of 64 bytes (67108864 of 67108864 bytes free)" in message
    kind, message = result["copy"]
    assert kind == "HwAdapterError", result["copy"]
    assert "cuda:0: cudaMemcpy of 64 bytes host to device failed: cudaErrorIllegalAddress (700" in message
    assert "the process must be restarted" in message
    assert result["usable_after"]


def _real_runtime() -> dict:
    """The library over the system's CUDA runtime, as a native host finds it: a round trip on device 0 (with a
    stream), or the error it gives."""
    return _child("""
        try:
            lib = fresh(None)
        except DeviceUnavailableError as err:
            out["error"] = str(err)
        else:
            rt = NativeRuntime(lib, 0)
            props = rt.properties()
            out["device"] = [lib.device_count(), props.name, props.total_memory, props.extra["driver_version"]]
            data = np.random.default_rng(5).standard_normal(1 << 20).astype(np.float32)
            a, b = rt.allocate(data.nbytes), rt.allocate(data.nbytes)
            rt.copy_h2d(a, 0, data)
            rt.copy_d2d(b, 0, a, 0, data.nbytes)
            rt.memset(b, 0, 0, 64)
            got = np.empty_like(data)
            rt.copy_d2h(got, b, 0)
            want = data.copy(); want[:16] = 0
            s = rt.create_stream()
            e = rt.create_event()
            rt.copy_h2d(a, 0, want * 3, stream=s)
            e.record(s)
            e.synchronize()
            got2 = np.empty_like(data)
            rt.copy_d2h(got2, a, 0, stream=s)
            s.synchronize()
            out["round_trip"] = bool(np.array_equal(got, want)) and bool(np.array_equal(got2, want * 3))
            rt.free(a); rt.free(b)
            out["oom"] = error_of(rt.allocate, 1 << 60)
        print("RESULT=" + json.dumps(out))
    """)


@needs_gcc
def test_without_a_gpu_the_real_runtime_says_why():
    result = _real_runtime()
    if "error" not in result:
        pytest.skip(f"a GPU is usable here ({result['device']}): test_real_gpu_round_trip covers it")
    error = result["error"]
    if "cannot load the CUDA runtime" in error:  # no libcudart on this machine at all: the fix is named
        assert "install the CUDA runtime" in error and "HWADAPTER_CUDART" in error, error
        pytest.skip(f"the real libcudart is absent here; its error is checked: {error}")
    # libcudart is there but no driver or GPU: the call, CUDA's error and a fix are named.
    assert "cuda: cudaGetDeviceCount failed: cudaError" in error, error
    assert "nvidia-smi" in error or "NVIDIA driver" in error, error


@pytest.mark.gpu
@needs_gcc
def test_real_gpu_round_trip():
    result = _real_runtime()
    if "error" in result:
        pytest.skip(f"no usable NVIDIA GPU through the CUDA runtime: {result['error']}")
    count, name, total, driver = result["device"]
    assert count >= 1 and name and total > 0 and driver.startswith("CUDA ")
    assert result["round_trip"]
    assert result["oom"][0] == "OutOfMemoryError" and "cudaErrorMemoryAllocation" in result["oom"][1]


# One child with CUSTOM_DEVICE_ROOT at the shim: the library (over the fake runtime, so in host memory) serves Paddle
# as a custom device; Paddle's CPU kernels run on it through the fallback, so results equal Paddle's CPU bit for bit.
PADDLE_CHILD = r"""
import ctypes, json, os
import numpy as np
import paddle
ptype = os.environ["PADDLE_TYPE"]
table = ctypes.CDLL(os.environ["CUDA_LIBRARY"]).hwadapter_get_device_interface
table.restype = ctypes.POINTER(ctypes.c_void_p)
memory_info = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t),
                               ctypes.POINTER(ctypes.c_size_t))(table()[3 + 8])
def used(device):
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert memory_info(device, ctypes.byref(free), ctypes.byref(total)) == 0
    return total.value - free.value
out = {"types": paddle.device.get_all_custom_device_type()}
try:
    paddle.set_device(f"{ptype}:1")
    out["by_name"] = "ok"
except Exception as err:
    out["by_name"] = f"{type(err).__name__}: {err}"
x = np.random.default_rng(0).standard_normal((8, 16)).astype("float32")
def mlp():
    paddle.seed(7)
    return paddle.nn.Sequential(paddle.nn.Linear(16, 32), paddle.nn.ReLU(), paddle.nn.Linear(32, 4),
                                paddle.nn.Softmax())
paddle.set_device("cpu")
want = mlp()(paddle.to_tensor(x)).numpy()
before = used(1)
paddle.set_device(paddle.CustomPlace(ptype, 1))  # a Place: Paddle reads the string "cuda:1" as its own GPU
net = mlp()
t = paddle.to_tensor(x)
y = net(t)
out["place"] = str(y.place)
out["eager"] = bool(np.array_equal(y.numpy(), want))
out["lent"] = used(1) - before
del net, t, y
paddle.device.empty_cache()
out["returned"] = used(1) == before
# to_static's program cache keeps the net's parameters: checked after the bytes.
out["static"] = bool(np.array_equal(paddle.jit.to_static(mlp(), full_graph=True)(paddle.to_tensor(x)).numpy(), want))
try:
    paddle.empty([1 << 28], dtype="float32")  # 1 GiB: more than the fake's 64 MiB
    out["oom"] = None
except Exception as err:
    out["oom"] = type(err).__name__
print("RESULT=" + json.dumps(out))
"""


@needs_gcc
def test_paddle_uses_the_library_as_a_custom_device(fake_cudart, tmp_path):
    import importlib.util
    if importlib.util.find_spec("paddle") is None or importlib.util.find_spec("hwadapter_paddle") is None:
        pytest.skip("paddlepaddle and hwadapter-paddle are needed (make test installs both)")
    if shutil.which("g++") is None:
        pytest.skip("g++ is needed to build the Paddle shim")
    from hwadapter_paddle.bridge import paddle_type
    env = {k: v for k, v in os.environ.items() if k not in ("CUSTOM_DEVICE_ROOT", "FAKE_CUDART_FAIL")}
    env["HWADAPTER_CUDART"] = str(fake_cudart)
    root = tmp_path / "root"
    proc = subprocess.run([sys.executable, "-m", "hwadapter.cli", "paddle", "install", "cuda", "--dir", str(root),
                           "--runtime-only"], capture_output=True, text=True, timeout=CHILD_TIMEOUT, env=env)
    assert proc.returncode == 0 and "cuda: installed" in proc.stdout, f"{proc.stdout}\n{proc.stderr}"
    shim = json.loads((root / "hwadapter_paddle.json").read_text())["shims"]["cuda"]
    env.update(CUSTOM_DEVICE_ROOT=str(root), GLOG_minloglevel="2", PADDLE_TYPE=shim["paddle_type"],
               CUDA_LIBRARY=shim["library"])
    try:
        proc = subprocess.run([sys.executable, "-c", PADDLE_CHILD], capture_output=True, text=True,
                              timeout=CHILD_TIMEOUT, env=env)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"the Paddle child did not finish within {CHILD_TIMEOUT} s\n{err.stdout}\n{err.stderr}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT=")]
    assert lines, f"the Paddle child printed no result (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr[-3000:]}"
    out = json.loads(lines[-1][len("RESULT="):])
    ptype = paddle_type("cuda")
    assert ptype in out["types"] and out["place"] == f"Place({ptype}:1)"
    assert out["eager"] and out["static"] and out["lent"] > 0 and out["returned"]
    assert out["oom"] is not None and "cuda:1: cudaMalloc of 1073741824 bytes" in proc.stderr
    assert ptype == "hwa_cudart" and out["by_name"] == "ok", out["by_name"]  # selected by its name
