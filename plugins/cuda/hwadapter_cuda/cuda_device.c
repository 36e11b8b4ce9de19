/* NVIDIA GPUs as a device_api.h 1.1 library over the CUDA runtime API, for native hosts (the Paddle bridge);
 * hwadapter itself uses the cupy runtime (runtime.py). Memory is cudaMalloc's: flat device pointers, which a host
 * such as Paddle offsets by pointer arithmetic. Copies are cudaMemcpy / cudaMemset on the legacy default stream (the
 * NULL stream) or cudaMemcpyAsync / cudaMemsetAsync on a stream; streams are CUDA streams created blocking, so that
 * the NULL stream's synchronous copies are ordered after everything queued on them (the ABI's rule); events are CUDA
 * events without timing. Every call first makes its device the calling thread's current CUDA device.
 *
 * No CUDA headers or toolkit are needed to build it: the few declarations used are below (values as in CUDA 12/13's
 * driver_types.h), and the runtime is opened with dlopen at initialize: $HWADAPTER_CUDART (a path) when set, else
 * libcudart.so.13, libcudart.so.12, libcudart.so. Devices are numbered as the CUDA runtime numbers them
 * (CUDA_VISIBLE_DEVICES applies). Built by native.py with -DDEVICE_TYPE="<entry-point name>".
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hwadapter/device_api.h"
#include "hwadapter/device_helpers.h" /* hwa_fail, the live-block table */

#ifndef DEVICE_TYPE
#define DEVICE_TYPE "a CUDA device" /* native.py passes the plugin's entry-point name */
#endif
#define CUDART_ENV "HWADAPTER_CUDART"
#define ALIGNMENT 256 /* cudaMalloc's guarantee */

#ifdef __cplusplus /* the file also compiles as C++ (a vendor may build it into a C++ project) */
#define EXPORT extern "C" __attribute__((visibility("default")))
#else
#define EXPORT __attribute__((visibility("default")))
#endif

/* ---- the part of the CUDA runtime API this library uses; own names, so cuda_runtime.h may be included too ---- */
typedef int cuda_status;                   /* cudaError_t: an int-sized enum */
typedef struct CUstream_st *cuda_stream;   /* cudaStream_t (NULL: the legacy default stream) */
typedef struct CUevent_st *cuda_event;     /* cudaEvent_t */
enum {
  CUDA_SUCCESS_ = 0,
  CUDA_INVALID_VALUE = 1,           /* cudaErrorInvalidValue */
  CUDA_MEMORY_ALLOCATION = 2,       /* cudaErrorMemoryAllocation */
  CUDA_INVALID_DEVICE_POINTER = 17, /* cudaErrorInvalidDevicePointer */
  CUDA_STUB_LIBRARY = 34,           /* cudaErrorStubLibrary */
  CUDA_INSUFFICIENT_DRIVER = 35,    /* cudaErrorInsufficientDriver */
  CUDA_NO_DEVICE = 100,             /* cudaErrorNoDevice */
  CUDA_INVALID_DEVICE = 101,        /* cudaErrorInvalidDevice */
  CUDA_INVALID_HANDLE = 400,        /* cudaErrorInvalidResourceHandle */
  CUDA_NOT_READY = 600,             /* cudaErrorNotReady */
  CUDA_DRIVER_MISMATCH = 803        /* cudaErrorSystemDriverMismatch */
};
enum { H2D = 1, D2H = 2, D2D = 3 }; /* cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice */
enum {
  ATTR_MAX_THREADS_PER_BLOCK = 1, /* cudaDevAttrMaxThreadsPerBlock */
  ATTR_MULTIPROCESSORS = 16       /* cudaDevAttrMultiProcessorCount */
};
#define STREAM_BLOCKING 0u       /* cudaStreamDefault: ordered with the legacy default stream */
#define EVENT_DISABLE_TIMING 2u  /* cudaEventDisableTiming */
#define DEVICE_PROP_BYTES 8192   /* >= sizeof(cudaDeviceProp) (1008 in CUDA 13); its first field is char name[256] */

static struct {
  cuda_status (*GetDeviceCount)(int *);
  cuda_status (*SetDevice)(int);
  cuda_status (*GetDevice)(int *);
  cuda_status (*Malloc)(void **, size_t);
  cuda_status (*Free)(void *);
  cuda_status (*Memcpy)(void *, const void *, size_t, int);
  cuda_status (*MemcpyAsync)(void *, const void *, size_t, int, cuda_stream);
  cuda_status (*Memset)(void *, int, size_t);
  cuda_status (*MemsetAsync)(void *, int, size_t, cuda_stream);
  cuda_status (*DeviceSynchronize)(void);
  cuda_status (*MemGetInfo)(size_t *, size_t *);
  cuda_status (*DeviceGetAttribute)(int *, int, int);
  cuda_status (*DriverGetVersion)(int *);
  cuda_status (*StreamCreateWithFlags)(cuda_stream *, unsigned);
  cuda_status (*StreamDestroy)(cuda_stream);
  cuda_status (*StreamSynchronize)(cuda_stream);
  cuda_status (*StreamQuery)(cuda_stream);
  cuda_status (*StreamWaitEvent)(cuda_stream, cuda_event, unsigned);
  cuda_status (*EventCreateWithFlags)(cuda_event *, unsigned);
  cuda_status (*EventDestroy)(cuda_event);
  cuda_status (*EventRecord)(cuda_event, cuda_stream);
  cuda_status (*EventQuery)(cuda_event);
  cuda_status (*EventSynchronize)(cuda_event);
  cuda_status (*GetLastError)(void);
  const char *(*GetErrorName)(cuda_status);
  const char *(*GetErrorString)(cuda_status);
  cuda_status (*GetDeviceProperties)(void *, int); /* optional: only the device's name is read */
} rt;

/* ---- errors (hwa_fail, hwa_last_error: device_helpers.h) ---- */
static const char *fix_for(cuda_status e) {
  switch (e) {
    case CUDA_MEMORY_ALLOCATION:
      return "free memory on the GPU (tensors, caches; other processes: nvidia-smi) or use smaller batches";
    case CUDA_INSUFFICIENT_DRIVER:
      return "install or upgrade the NVIDIA driver until `nvidia-smi` works, or use a libcudart no newer than the "
             "driver's CUDA version (set " CUDART_ENV " to its path)";
    case CUDA_STUB_LIBRARY: return "remove the CUDA 'stubs' directory from LD_LIBRARY_PATH";
    case CUDA_NO_DEVICE: return "check that `nvidia-smi` lists a GPU and that CUDA_VISIBLE_DEVICES does not hide it";
    case CUDA_DRIVER_MISMATCH: return "reboot, or reinstall the NVIDIA driver so its library and kernel module match";
    case CUDA_INVALID_VALUE:
    case CUDA_INVALID_DEVICE_POINTER:
    case CUDA_INVALID_HANDLE: return "pass a pointer, stream or event this library gave out for this device";
    default: return "check `nvidia-smi`; after an error such as an illegal address the process must be restarted";
  }
}

/* The HWA status for CUDA error `e` of a call described by fmt..., with the last error naming the call, the CUDA
 * error and the fix. */
static int cuda_fail(int d, cuda_status e, const char *fmt, ...) {
  char call[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(call, sizeof call, fmt, ap);
  va_end(ap);
  rt.GetLastError(); /* clear the runtime's record of a non-sticky error: a later, unrelated check must not see it */
  const char *name = rt.GetErrorName ? rt.GetErrorName(e) : NULL;
  const char *text = rt.GetErrorString ? rt.GetErrorString(e) : NULL;
  int status = e == CUDA_MEMORY_ALLOCATION ? HWA_OUT_OF_MEMORY
               : (e == CUDA_INVALID_VALUE || e == CUDA_INVALID_DEVICE_POINTER || e == CUDA_INVALID_HANDLE ||
                  e == CUDA_INVALID_DEVICE) ? HWA_INVALID_ARGUMENT
                                            : HWA_ERROR;
  char where[24] = "";
  if (d >= 0) snprintf(where, sizeof where, ":%d", d); /* -1: before any device, e.g. counting them */
  return hwa_fail(status, DEVICE_TYPE "%s: %s failed: %s (%d: %s); %s", where, call, name ? name : "cudaError", e,
                  text ? text : "", fix_for(e));
}

/* ---- the runtime library and the devices, opened once ---- */
static HwaBlocks blocks = HWA_BLOCKS_INIT; /* live allocations: deallocate gets only the pointer */
static int num_devices;
static char init_error[768]; /* why initialize failed, kept for every later call */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *cudart_name; /* the file loaded, for messages */

static void *open_cudart(void) {
  const char *override = getenv(CUDART_ENV);
  if (override && *override) {
    void *lib = dlopen(override, RTLD_NOW | RTLD_LOCAL);
    cudart_name = override;
    if (!lib)
      snprintf(init_error, sizeof init_error, DEVICE_TYPE ": cannot load the CUDA runtime %s named by " CUDART_ENV
               " (%s); point " CUDART_ENV " at a libcudart.so, or unset it to use the system's", override, dlerror());
    return lib;
  }
  static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
  for (size_t i = 0; i < sizeof names / sizeof *names; ++i) {
    void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    cudart_name = names[i];
    if (lib) return lib;
  }
  snprintf(init_error, sizeof init_error, DEVICE_TYPE ": cannot load the CUDA runtime (no libcudart.so.13, "
           "libcudart.so.12 or libcudart.so on the library path: %s); install the CUDA runtime (the CUDA toolkit, or "
           "apt-get install cuda-cudart-13-0), or set " CUDART_ENV " to the path of a libcudart.so (e.g. pip install "
           "nvidia-cuda-runtime-cu12 ships one under site-packages/nvidia/cuda_runtime/lib)", dlerror());
  return NULL;
}

static int load_cudart(void) {
  void *lib = open_cudart();
  if (!lib) return 0;
#define LOAD(name)                                                                                            \
  if (!(*(void **)&rt.name = dlsym(lib, "cuda" #name))) {                                                     \
    snprintf(init_error, sizeof init_error, DEVICE_TYPE ": %s has no cuda" #name " (not a CUDA runtime of "   \
             "CUDA 11 or later?); set " CUDART_ENV " to a libcudart.so.12 or .13", cudart_name);               \
    return 0;                                                                                                 \
  }
  LOAD(GetDeviceCount) LOAD(SetDevice) LOAD(GetDevice) LOAD(Malloc) LOAD(Free) LOAD(Memcpy) LOAD(MemcpyAsync)
  LOAD(Memset) LOAD(MemsetAsync) LOAD(DeviceSynchronize) LOAD(MemGetInfo) LOAD(DeviceGetAttribute)
  LOAD(DriverGetVersion) LOAD(StreamCreateWithFlags) LOAD(StreamDestroy) LOAD(StreamSynchronize) LOAD(StreamQuery)
  LOAD(StreamWaitEvent) LOAD(EventCreateWithFlags) LOAD(EventDestroy) LOAD(EventRecord) LOAD(EventQuery)
  LOAD(EventSynchronize) LOAD(GetLastError) LOAD(GetErrorName) LOAD(GetErrorString)
#undef LOAD
  *(void **)&rt.GetDeviceProperties = dlsym(lib, "cudaGetDeviceProperties");
  return 1;
}

static void open_all(void) {
  if (!load_cudart()) return;
  cuda_status e = rt.GetDeviceCount(&num_devices);
  if (e == CUDA_SUCCESS_ && num_devices == 0) e = CUDA_NO_DEVICE;
  if (e != CUDA_SUCCESS_) {
    num_devices = 0;
    cuda_fail(-1, e, "cudaGetDeviceCount");
    snprintf(init_error, sizeof init_error, "%s", hwa_last_error());
  }
}

static int initialize(void) {
  pthread_once(&once, open_all);
  return init_error[0] ? hwa_fail(HWA_ERROR, "%s", init_error) : HWA_OK;
}

/* Initialises, checks `d` and makes it the calling thread's current CUDA device: cudaMalloc, cudaMemGetInfo and new
 * streams and events belong to the current device. */
static int use(int d) {
  if (initialize() != HWA_OK) return HWA_ERROR;
  if (d < 0 || d >= num_devices)
    return hwa_fail(HWA_INVALID_ARGUMENT, DEVICE_TYPE ": no device %d (there are %d)", d, num_devices);
  int current = -1;
  if (rt.GetDevice(&current) != CUDA_SUCCESS_ || current != d) {
    cuda_status e = rt.SetDevice(d);
    if (e != CUDA_SUCCESS_) return cuda_fail(d, e, "cudaSetDevice(%d)", d);
  }
  return HWA_OK;
}
#define USE(d)                  \
  do {                          \
    int status_ = use(d);       \
    if (status_ != HWA_OK) return status_; \
  } while (0)
#define CALL(d, expr, ...)                                       \
  do {                                                           \
    cuda_status e_ = (expr);                                     \
    if (e_ != CUDA_SUCCESS_) return cuda_fail((d), e_, __VA_ARGS__); \
  } while (0)

static int device_count(int *count) {
  if (initialize() != HWA_OK) return HWA_ERROR;
  *count = num_devices;
  return HWA_OK;
}

static int finalize(void) {
  /* Nothing to release: hwadapter and a second host may each initialize and finalize this one library, and at a
   * host's exit the CUDA runtime may already be unloading (its own atexit handler releases the contexts). */
  return HWA_OK;
}

/* ---- memory ---- */
static int allocate(int d, size_t nbytes, void **ptr) {
  USE(d);
  void *p = NULL;
  cuda_status e = rt.Malloc(&p, nbytes ? nbytes : 1); /* a distinct pointer even for 0 bytes, as the others give */
  if (e != CUDA_SUCCESS_) {
    size_t free_bytes = 0, total = 0;
    int known = e == CUDA_MEMORY_ALLOCATION && rt.MemGetInfo(&free_bytes, &total) == CUDA_SUCCESS_;
    if (!known) return cuda_fail(d, e, "cudaMalloc of %zu bytes", nbytes);
    return cuda_fail(d, e, "cudaMalloc of %zu bytes (%zu of %zu bytes free)", nbytes, free_bytes, total);
  }
  if (hwa_blocks_add(&blocks, p, nbytes, d) != HWA_OK) {
    rt.Free(p);
    return hwa_fail(HWA_OUT_OF_MEMORY, DEVICE_TYPE ":%d: no host memory for the allocation's record", d);
  }
  *ptr = p;
  return HWA_OK;
}

static int deallocate(int d, void *ptr) {
  USE(d);
  if (!ptr) return HWA_OK;
  if (!hwa_blocks_remove(&blocks, ptr, d, NULL))
    return hwa_fail(HWA_INVALID_ARGUMENT, DEVICE_TYPE ":%d: %p is not a live allocation of this device (freed twice, "
                    "or never allocated here)", d, ptr);
  CALL(d, rt.Free(ptr), "cudaFree(%p)", ptr); /* cudaFree waits for the device: no queued work still uses it */
  return HWA_OK;
}

/* Synchronous copies and memset go to the legacy default stream, which waits for the work queued on every blocking
 * stream of the device before it (all of this library's streams are blocking): the ABI's ordering. */
static int memcpy_h2d(int d, void *dst, const void *src, size_t n) {
  USE(d);
  if (n) CALL(d, rt.Memcpy(dst, src, n, H2D), "cudaMemcpy of %zu bytes host to device", n);
  return HWA_OK;
}
static int memcpy_d2h(int d, void *dst, const void *src, size_t n) {
  USE(d);
  if (n) CALL(d, rt.Memcpy(dst, src, n, D2H), "cudaMemcpy of %zu bytes device to host", n);
  return HWA_OK;
}
static int memcpy_d2d(int d, void *dst, const void *src, size_t n) {
  USE(d);
  if (n) CALL(d, rt.Memcpy(dst, src, n, D2D), "cudaMemcpy of %zu bytes device to device", n);
  return HWA_OK;
}
static int memset_(int d, void *dst, int value, size_t n) {
  USE(d);
  if (n) CALL(d, rt.Memset(dst, value, n), "cudaMemset of %zu bytes", n);
  return HWA_OK;
}

static int synchronize(int d) {
  USE(d);
  CALL(d, rt.DeviceSynchronize(), "cudaDeviceSynchronize");
  return HWA_OK;
}

static int memory_info(int d, size_t *free_bytes, size_t *total_bytes) {
  USE(d);
  CALL(d, rt.MemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
  return HWA_OK;
}

static int get_properties(int d, HwaDeviceProperties *p) {
  USE(d);
  size_t size = p->struct_size; /* write nothing past what the caller's header had */
  HwaDeviceProperties full;
  memset(&full, 0, sizeof full);
  if (rt.GetDeviceProperties) {
    uint64_t prop[DEVICE_PROP_BYTES / 8]; /* on the stack: 8 KiB of thread-local storage per thread would stay */
    memset(prop, 0, sizeof prop);
    if (rt.GetDeviceProperties(prop, d) == CUDA_SUCCESS_) {
      memcpy(full.name, prop, sizeof full.name - 1);
    } else {
      rt.GetLastError();
    }
  }
  snprintf(full.vendor, sizeof full.vendor, "NVIDIA");
  int driver = 0, units = 1, threads = 1;
  rt.DriverGetVersion(&driver);
  snprintf(full.driver_version, sizeof full.driver_version, "CUDA %d.%d", driver / 1000, driver % 1000 / 10);
  CALL(d, rt.DeviceGetAttribute(&units, ATTR_MULTIPROCESSORS, d), "cudaDeviceGetAttribute(MultiProcessorCount)");
  CALL(d, rt.DeviceGetAttribute(&threads, ATTR_MAX_THREADS_PER_BLOCK, d), "cudaDeviceGetAttribute(MaxThreadsPerBlock)");
  size_t free_bytes = 0;
  CALL(d, rt.MemGetInfo(&free_bytes, &full.total_memory), "cudaMemGetInfo");
  full.compute_units = units;
  full.max_work_group_size = threads;
  full.alignment = ALIGNMENT;
  memcpy(p, &full, size < sizeof full ? size : sizeof full);
  p->struct_size = size;
  return HWA_OK;
}

static int set_device(int d) {
  USE(d);
  return HWA_OK;
}
static int get_device(int *d) {
  if (initialize() != HWA_OK) return HWA_ERROR;
  CALL(-1, rt.GetDevice(d), "cudaGetDevice");
  return HWA_OK;
}

/* ---- streams and events: CUDA's own, the handles are theirs ---- */
#define STREAM(s) ((cuda_stream)(s))
#define EVENT(e) ((cuda_event)(e))

static int query_status(int d, cuda_status e, const char *call) {
  if (e == CUDA_NOT_READY) return HWA_NOT_READY; /* pending, not an error */
  return e == CUDA_SUCCESS_ ? HWA_OK : cuda_fail(d, e, "%s", call);
}

static int stream_create(int d, HwaStream *s) {
  USE(d);
  cuda_stream cs = NULL;
  CALL(d, rt.StreamCreateWithFlags(&cs, STREAM_BLOCKING), "cudaStreamCreateWithFlags");
  *s = (HwaStream)cs;
  return HWA_OK;
}
static int stream_destroy(int d, HwaStream s) {
  USE(d);
  if (!s) return hwa_fail(HWA_INVALID_ARGUMENT, DEVICE_TYPE ":%d: the default stream cannot be destroyed", d);
  CALL(d, rt.StreamDestroy(STREAM(s)), "cudaStreamDestroy");
  return HWA_OK;
}
static int stream_synchronize(int d, HwaStream s) {
  USE(d);
  CALL(d, rt.StreamSynchronize(STREAM(s)), "cudaStreamSynchronize");
  return HWA_OK;
}
static int stream_query(int d, HwaStream s) {
  USE(d);
  return query_status(d, rt.StreamQuery(STREAM(s)), "cudaStreamQuery");
}
static int stream_wait_event(int d, HwaStream s, HwaEvent e) {
  USE(d);
  CALL(d, rt.StreamWaitEvent(STREAM(s), EVENT(e), 0), "cudaStreamWaitEvent");
  return HWA_OK;
}
static int event_create(int d, HwaEvent *e) {
  USE(d);
  cuda_event ce = NULL;
  CALL(d, rt.EventCreateWithFlags(&ce, EVENT_DISABLE_TIMING), "cudaEventCreateWithFlags");
  *e = (HwaEvent)ce;
  return HWA_OK;
}
static int event_destroy(int d, HwaEvent e) {
  USE(d);
  CALL(d, rt.EventDestroy(EVENT(e)), "cudaEventDestroy");
  return HWA_OK;
}
static int event_record(int d, HwaEvent e, HwaStream s) {
  USE(d);
  CALL(d, rt.EventRecord(EVENT(e), STREAM(s)), "cudaEventRecord");
  return HWA_OK;
}
static int event_query(int d, HwaEvent e) {
  USE(d);
  return query_status(d, rt.EventQuery(EVENT(e)), "cudaEventQuery");
}
static int event_synchronize(int d, HwaEvent e) {
  USE(d);
  CALL(d, rt.EventSynchronize(EVENT(e)), "cudaEventSynchronize");
  return HWA_OK;
}

/* Queued on a stream; a pageable host buffer makes CUDA stage the copy, the core keeps the buffer alive anyway. */
static int memcpy_h2d_async(int d, HwaStream s, void *dst, const void *src, size_t n) {
  USE(d);
  if (n) CALL(d, rt.MemcpyAsync(dst, src, n, H2D, STREAM(s)), "cudaMemcpyAsync of %zu bytes host to device", n);
  return HWA_OK;
}
static int memcpy_d2h_async(int d, HwaStream s, void *dst, const void *src, size_t n) {
  USE(d);
  if (n) CALL(d, rt.MemcpyAsync(dst, src, n, D2H, STREAM(s)), "cudaMemcpyAsync of %zu bytes device to host", n);
  return HWA_OK;
}
static int memcpy_d2d_async(int d, HwaStream s, void *dst, const void *src, size_t n) {
  USE(d);
  if (n) CALL(d, rt.MemcpyAsync(dst, src, n, D2D, STREAM(s)), "cudaMemcpyAsync of %zu bytes device to device", n);
  return HWA_OK;
}
static int memset_async(int d, HwaStream s, void *dst, int value, size_t n) {
  USE(d);
  if (n) CALL(d, rt.MemsetAsync(dst, value, n, STREAM(s)), "cudaMemsetAsync of %zu bytes", n);
  return HWA_OK;
}

/* Designated initialisers in declaration order: valid C11 and C++20. */
static const HwaDeviceInterface table = {
    .struct_size = sizeof(HwaDeviceInterface),
    .api_major = HWA_API_MAJOR,
    .api_minor = HWA_API_MINOR,
    .device_type = DEVICE_TYPE,
    .device_count = device_count,
    .allocate = allocate,
    .deallocate = deallocate,
    .memcpy_h2d = memcpy_h2d,
    .memcpy_d2h = memcpy_d2h,
    .memcpy_d2d = memcpy_d2d,
    .memset = memset_,
    .synchronize = synchronize,
    .memory_info = memory_info,
    .initialize = initialize,
    .finalize = finalize,
    .get_properties = get_properties,
    .set_device = set_device,
    .get_device = get_device,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_synchronize = stream_synchronize,
    .stream_query = stream_query,
    .stream_wait_event = stream_wait_event,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_query = event_query,
    .event_synchronize = event_synchronize,
    .memcpy_h2d_async = memcpy_h2d_async,
    .memcpy_d2h_async = memcpy_d2h_async,
    .memcpy_d2d_async = memcpy_d2d_async,
    .memset_async = memset_async,
    .last_error = hwa_last_error,
    .num_kernels = 0, /* memory only: hwadapter's kernels for this device are cupy's (kernels.py), Python */
    .kernels = NULL,
    /* 1.2: no communicator here (NCCL is the Python plugin's, collectives.py); named so C++ sees every field set */
    .comm_unique_id_size = NULL,
    .comm_unique_id = NULL,
    .comm_init_rank = NULL,
    .comm_destroy = NULL,
    .all_reduce = NULL,
    .broadcast = NULL,
    .reduce = NULL,
    .all_gather = NULL,
    .reduce_scatter = NULL,
    .all_to_all = NULL,
    .send = NULL,
    .recv = NULL,
    .group_start = NULL,
    .group_end = NULL,
};

EXPORT const HwaDeviceInterface *hwadapter_get_device_interface(void) { return &table; }
