/* hwadapter-paddle: one hwadapter device type as a PaddlePaddle custom device (runtime only).
 *
 * Paddle dlopens every shared library in $CUSTOM_DEVICE_ROOT (else site-packages/paddle_custom_device) at
 * `import paddle` and calls its InitPlugin, which fills Paddle's C_DeviceInterface. This shim fills it by
 * delegating to a hwadapter native device library (device_api.h, HwaDeviceInterface 1.x) that it dlopens by
 * path. Everything stays in native code: no Python, no GIL, on any of Paddle's threads. Collectives (xccl_*) run on
 * the library's own communicator, else on a library beside this one that reaches hwadapter's in Python.
 *
 * Compiled by `hwadapter paddle install` with the system C++ compiler against the installed Paddle's headers
 * (paddle/phi/backends/device_ext.h; no link to libpaddle), once per device type, with:
 *   -DHWA_PD_DEVICE_TYPE="cdemo"           the device type Paddle will know (hwadapter's entry-point name)
 *   -DHWA_PD_LIBRARY="/path/libx.so"       the hwadapter device library to load
 *   -DHWA_PD_BUILT_FOR="paddlepaddle 3.3.1" what the headers came from (said in messages)
 * Optional, to simulate a shim built against another Paddle's headers (tests):
 *   -DHWA_PD_PARAMS_SIZE=N -DHWA_PD_INTERFACE_SIZE=N
 *
 * Failures in InitPlugin (Paddle's struct sizes differ, library missing, ABI mismatch, initialize failing,
 * no devices) register nothing and print one line to stderr; `import paddle` goes on without this device.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hwadapter/device_api.h"
#include "paddle/phi/backends/device_ext.h"

#ifndef HWA_PD_DEVICE_TYPE
#error "define HWA_PD_DEVICE_TYPE (the device type's name, a string)"
#endif
#ifndef HWA_PD_LIBRARY
#error "define HWA_PD_LIBRARY (the hwadapter device library's path, a string)"
#endif
#ifndef HWA_PD_BUILT_FOR
#define HWA_PD_BUILT_FOR "an unknown paddlepaddle"
#endif

/* The custom-runtime ABI this shim is written for: the fields it fills exist in 0.1.x. */
#if PADDLE_CUSTOM_RUNTIME_MAJOR_VERSION != 0 || PADDLE_CUSTOM_RUNTIME_MINOR_VERSION != 1
#error "hwadapter-paddle supports Paddle's custom-runtime ABI 0.1.x; these headers declare another version"
#endif

#ifndef HWA_PD_PARAMS_SIZE
#define HWA_PD_PARAMS_SIZE sizeof(CustomRuntimeParams)
#endif
#ifndef HWA_PD_INTERFACE_SIZE
#define HWA_PD_INTERFACE_SIZE sizeof(C_DeviceInterface)
#endif

#define STR2(x) #x
#define STR(x) STR2(x)
#define ABI_TEXT                                                                                      \
  STR(PADDLE_CUSTOM_RUNTIME_MAJOR_VERSION) "." STR(PADDLE_CUSTOM_RUNTIME_MINOR_VERSION) "." STR(    \
      PADDLE_CUSTOM_RUNTIME_PATCH_VERSION)

namespace {

char g_type[64] = HWA_PD_DEVICE_TYPE;
HwaDeviceInterface g_api;          /* the library's table, copied (struct_size bytes), the rest zero */
bool g_has_streams = false;
int g_count = 0;                   /* devices, counted once in InitPlugin: Paddle sizes its device list by it */
size_t g_min_chunk = 256, g_max_chunk = 0;
thread_local int t_device = 0;     /* used when the library has no set_device/get_device */

void say(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "hwadapter-paddle: %s: %s\n", g_type, line);
  fflush(stderr);
}

const char *status_name(int status) {
  switch (status) {
    case HWA_ERROR: return "HWA_ERROR";
    case HWA_OUT_OF_MEMORY: return "HWA_OUT_OF_MEMORY";
    case HWA_INVALID_ARGUMENT: return "HWA_INVALID_ARGUMENT";
    case HWA_NOT_READY: return "HWA_NOT_READY";
    case HWA_UNSUPPORTED: return "HWA_UNSUPPORTED";
    default: return "an unknown status";
  }
}

/* A failed library call: one line on stderr with the library's message (last_error; Paddle's own error only has
 * a number), and a Paddle status (Paddle raises it as an error in the calling Python code). */
C_Status fail(int status, const char *call, int device) {
  const char *msg = g_api.last_error ? g_api.last_error() : nullptr;
  say("%s on device %d failed (%s)%s%s", call, device, status_name(status), msg && *msg ? ": " : "",
      msg && *msg ? msg : "");
  return status == HWA_OUT_OF_MEMORY ? C_FAILED : C_ERROR;
}

#define CALL(expr, what, dev)                  \
  do {                                         \
    int rc_ = (expr);                          \
    if (rc_ != HWA_OK) return fail(rc_, what, dev); \
  } while (0)

/* ---- device ---- */
C_Status get_device_count(size_t *count) {
  *count = (size_t)g_count;
  return C_SUCCESS;
}
C_Status get_device_list(size_t *devices) {
  for (int i = 0; i < g_count; ++i) devices[i] = (size_t)i;
  return C_SUCCESS;
}
C_Status set_device(const C_Device d) {
  if (g_api.set_device) CALL(g_api.set_device(d->id), "set_device", d->id);
  t_device = d->id;
  return C_SUCCESS;
}
C_Status get_device(const C_Device d) {
  int id = t_device;
  if (g_api.get_device) CALL(g_api.get_device(&id), "get_device", -1);
  d->id = id;
  return C_SUCCESS;
}
C_Status synchronize_device(const C_Device d) {
  CALL(g_api.synchronize(d->id), "synchronize", d->id);
  return C_SUCCESS;
}
C_Status finalize() {
  /* Paddle exits the process when finalize fails: report, never fail. */
  if (g_api.finalize) {
    int rc = g_api.finalize();
    if (rc != HWA_OK) fail(rc, "finalize", -1);
  }
  return C_SUCCESS;
}

/* ---- memory ---- */
C_Status allocate(const C_Device d, void **ptr, size_t size) {
  int rc = g_api.allocate(d->id, size, ptr);
  if (rc != HWA_OK) return fail(rc, "allocate", d->id);
  return C_SUCCESS;
}
C_Status deallocate(const C_Device d, void *ptr, size_t) { /* the library tracks sizes itself */
  CALL(g_api.deallocate(d->id, ptr), "deallocate", d->id);
  return C_SUCCESS;
}
C_Status memory_set(const C_Device d, void *ptr, unsigned char value, size_t size) {
  CALL(g_api.memset(d->id, ptr, value, size), "memset", d->id);
  return C_SUCCESS;
}
C_Status copy_h2d(const C_Device d, void *dst, const void *src, size_t n) {
  CALL(g_api.memcpy_h2d(d->id, dst, src, n), "memcpy_h2d", d->id);
  return C_SUCCESS;
}
C_Status copy_d2h(const C_Device d, void *dst, const void *src, size_t n) {
  CALL(g_api.memcpy_d2h(d->id, dst, src, n), "memcpy_d2h", d->id);
  return C_SUCCESS;
}
C_Status copy_d2d(const C_Device d, void *dst, const void *src, size_t n) {
  CALL(g_api.memcpy_d2d(d->id, dst, src, n), "memcpy_d2d", d->id);
  return C_SUCCESS;
}
/* Async copies: the library's own when it has them, else the synchronous copy (complete on return). */
#define ASYNC_COPY(NAME, FN)                                                                       \
  C_Status NAME(const C_Device d, C_Stream s, void *dst, const void *src, size_t n) {              \
    if (g_api.FN##_async)                                                                          \
      CALL(g_api.FN##_async(d->id, (HwaStream)s, dst, src, n), #FN "_async", d->id);               \
    else                                                                                           \
      CALL(g_api.FN(d->id, dst, src, n), #FN, d->id);                                              \
    return C_SUCCESS;                                                                              \
  }
ASYNC_COPY(acopy_h2d, memcpy_h2d)
ASYNC_COPY(acopy_d2h, memcpy_d2h)
ASYNC_COPY(acopy_d2d, memcpy_d2d)
#undef ASYNC_COPY
C_Status memory_stats(const C_Device d, size_t *total, size_t *free_bytes) {
  size_t f = 0, t = 0;
  CALL(g_api.memory_info(d->id, &f, &t), "memory_info", d->id);
  *total = t;
  *free_bytes = f;
  return C_SUCCESS;
}
C_Status min_chunk_size(const C_Device, size_t *size) {
  *size = g_min_chunk;
  return C_SUCCESS;
}
C_Status max_chunk_size(const C_Device, size_t *size) {
  *size = g_max_chunk;
  return C_SUCCESS;
}

/* ---- streams and events: the library's (all ten), else complete-at-once host handles ---- */
C_Status stream_create(const C_Device d, C_Stream *s) {
  HwaStream h = nullptr;
  CALL(g_api.stream_create(d->id, &h), "stream_create", d->id);
  *s = (C_Stream)h;
  return C_SUCCESS;
}
C_Status stream_destroy(const C_Device d, C_Stream s) {
  CALL(g_api.stream_destroy(d->id, (HwaStream)s), "stream_destroy", d->id);
  return C_SUCCESS;
}
C_Status stream_query(const C_Device d, C_Stream s) {
  int rc = g_api.stream_query(d->id, (HwaStream)s);
  if (rc == HWA_NOT_READY) return C_FAILED; /* pending, not an error */
  if (rc != HWA_OK) return fail(rc, "stream_query", d->id);
  return C_SUCCESS;
}
C_Status stream_synchronize(const C_Device d, C_Stream s) {
  CALL(g_api.stream_synchronize(d->id, (HwaStream)s), "stream_synchronize", d->id);
  return C_SUCCESS;
}
C_Status stream_wait_event(const C_Device d, C_Stream s, C_Event e) {
  CALL(g_api.stream_wait_event(d->id, (HwaStream)s, (HwaEvent)e), "stream_wait_event", d->id);
  return C_SUCCESS;
}
/* Paddle's callbacks run after the work queued before them: synchronise the stream, then call it. */
C_Status stream_add_callback(const C_Device d, C_Stream s, C_Callback callback, void *user_data) {
  if (g_has_streams)
    CALL(g_api.stream_synchronize(d->id, (HwaStream)s), "stream_synchronize", d->id);
  else
    CALL(g_api.synchronize(d->id), "synchronize", d->id);
  C_Status status = C_SUCCESS;
  callback(d, s, user_data, &status);
  return status;
}
C_Status event_create(const C_Device d, C_Event *e) {
  HwaEvent h = nullptr;
  CALL(g_api.event_create(d->id, &h), "event_create", d->id);
  *e = (C_Event)h;
  return C_SUCCESS;
}
C_Status event_destroy(const C_Device d, C_Event e) {
  CALL(g_api.event_destroy(d->id, (HwaEvent)e), "event_destroy", d->id);
  return C_SUCCESS;
}
C_Status event_record(const C_Device d, C_Stream s, C_Event e) {
  CALL(g_api.event_record(d->id, (HwaEvent)e, (HwaStream)s), "event_record", d->id);
  return C_SUCCESS;
}
C_Status event_query(const C_Device d, C_Event e) {
  int rc = g_api.event_query(d->id, (HwaEvent)e);
  if (rc == HWA_NOT_READY) return C_FAILED;
  if (rc != HWA_OK) return fail(rc, "event_query", d->id);
  return C_SUCCESS;
}
C_Status event_synchronize(const C_Device d, C_Event e) {
  CALL(g_api.event_synchronize(d->id, (HwaEvent)e), "event_synchronize", d->id);
  return C_SUCCESS;
}

/* Without the library's streams every call is synchronous: events are complete when created. */
char host_event;
C_Status host_event_create(const C_Device, C_Event *e) {
  *e = (C_Event)&host_event;
  return C_SUCCESS;
}
C_Status host_event_noop(const C_Device, C_Event) { return C_SUCCESS; }
C_Status host_event_record(const C_Device, C_Stream, C_Event) { return C_SUCCESS; }
C_Status host_stream_wait(const C_Device, C_Stream, C_Event) { return C_SUCCESS; }

/* ---- loading the library and checking its table ---- */
char why[768];

const char *check_library(void *handle);

const char *load_library() {  /* nullptr when g_api is filled and checked; else why not */
  void *handle = dlopen(HWA_PD_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *err = dlerror();
    snprintf(why, sizeof why, "cannot load its device library %s (%s); reinstall the plugin, then run "
             "`hwadapter paddle install %s`", HWA_PD_LIBRARY, err ? err : "?", g_type);
    return why;
  }
  const char *problem = check_library(handle);
  if (problem) {
    memset(&g_api, 0, sizeof g_api);
    dlclose(handle);
  }
  return problem;
}

const char *check_library(void *handle) {
  HwaGetDeviceInterfaceFn get = (HwaGetDeviceInterfaceFn)dlsym(handle, HWA_GET_DEVICE_INTERFACE);
  const HwaDeviceInterface *api = get ? get() : nullptr;
  if (!api) {
    snprintf(why, sizeof why, "%s %s (no %s, or it returned NULL): not a hwadapter device library",
             HWA_PD_LIBRARY, get ? "gave no table" : "does not export it", HWA_GET_DEVICE_INTERFACE);
    return why;
  }
  if (api->api_major != HWA_API_MAJOR || api->api_minor > HWA_API_MINOR) {
    snprintf(why, sizeof why, "%s implements device API %u.%u, this shim was built for %d.%d: rebuild the "
             "library or update hwadapter-paddle, then run `hwadapter paddle install %s`", HWA_PD_LIBRARY,
             api->api_major, api->api_minor, HWA_API_MAJOR, HWA_API_MINOR, g_type);
    return why;
  }
  const size_t v10 = offsetof(HwaDeviceInterface, initialize);
  if (api->struct_size < v10) {
    snprintf(why, sizeof why, "%s declares a table of %zu bytes, smaller than device API 1.0's %zu",
             HWA_PD_LIBRARY, api->struct_size, v10);
    return why;
  }
  memset(&g_api, 0, sizeof g_api);
  memcpy(&g_api, api, api->struct_size < sizeof g_api ? api->struct_size : sizeof g_api);
  struct { const void *fn; const char *name; } required[] = {
      {(const void *)g_api.device_count, "device_count"}, {(const void *)g_api.allocate, "allocate"},
      {(const void *)g_api.deallocate, "deallocate"},     {(const void *)g_api.memcpy_h2d, "memcpy_h2d"},
      {(const void *)g_api.memcpy_d2h, "memcpy_d2h"},     {(const void *)g_api.memcpy_d2d, "memcpy_d2d"},
      {(const void *)g_api.memset, "memset"},             {(const void *)g_api.synchronize, "synchronize"}};
  for (auto &r : required)
    if (!r.fn) {
      snprintf(why, sizeof why, "%s leaves the required function %s empty", HWA_PD_LIBRARY, r.name);
      return why;
    }
  const void *streams[] = {(const void *)g_api.stream_create, (const void *)g_api.stream_destroy,
                           (const void *)g_api.stream_synchronize, (const void *)g_api.stream_query,
                           (const void *)g_api.stream_wait_event, (const void *)g_api.event_create,
                           (const void *)g_api.event_destroy, (const void *)g_api.event_record,
                           (const void *)g_api.event_query, (const void *)g_api.event_synchronize};
  int have = 0;
  for (const void *fn : streams) have += fn != nullptr;
  if (have != 0 && have != 10) {
    snprintf(why, sizeof why, "%s has %d of the ten stream and event functions: all or none", HWA_PD_LIBRARY, have);
    return why;
  }
  g_has_streams = have == 10;
  if (g_api.initialize) {
    int rc = g_api.initialize();
    if (rc != HWA_OK) {
      const char *msg = g_api.last_error ? g_api.last_error() : nullptr;
      snprintf(why, sizeof why, "%s: initialize failed (%s)%s%s", HWA_PD_LIBRARY, status_name(rc),
               msg && *msg ? ": " : "", msg && *msg ? msg : "");
      return why;
    }
  }
  int n = 0;
  int rc = g_api.device_count(&n);
  if (rc != HWA_OK || n <= 0) {
    if (g_api.finalize) g_api.finalize();
    snprintf(why, sizeof why, "%s reports no device (device_count: status %d, %d devices)", HWA_PD_LIBRARY, rc, n);
    return why;
  }
  g_count = n;
  /* Chunk sizes for Paddle's allocator: the device's alignment, and an eighth of its memory. */
  size_t total = 0;
  if (g_api.get_properties) {
    HwaDeviceProperties props;
    memset(&props, 0, sizeof props);
    props.struct_size = sizeof props;
    if (g_api.get_properties(0, &props) == HWA_OK) {
      if (props.alignment) g_min_chunk = props.alignment;
      total = props.total_memory;
    }
  }
  if (!total && g_api.memory_info) {
    size_t f = 0;
    if (g_api.memory_info(0, &f, &total) != HWA_OK) total = 0;
  }
  g_max_chunk = total ? total / 8 : ((size_t)64 << 20);
  if (g_max_chunk < g_min_chunk) g_max_chunk = g_min_chunk;
  return nullptr;
}

/* A kernels library beside this shim: libhwadapter_paddle_<type>.kernels (phi kernels calling the library's C
 * kernels) or .pykernels (calling the plugin's Python kernels), linked to libpaddle; `hwadapter paddle install`
 * builds them unless --runtime-only. Loaded here, after every
 * check above has passed, so that a stale or broken one costs its kernels, never `import paddle`: Paddle itself loads
 * only *.so files from the folder. Its kernel registrars run now, before Paddle registers the custom kernels of the
 * libraries it has loaded. */
void *load_beside(const void *self, const char *suffix, const char *what) {
  Dl_info info;
  if (!dladdr(self, &info) || !info.dli_fname) return nullptr;
  char path[4096];
  size_t n = strlen(info.dli_fname);
  if (n < 3 || n + strlen(suffix) >= sizeof path || strcmp(info.dli_fname + n - 3, ".so") != 0) return nullptr;
  memcpy(path, info.dli_fname, n - 3);
  strcpy(path + n - 3, suffix);
  FILE *f = fopen(path, "rb");
  if (!f) return nullptr;  /* not installed */
  fclose(f);
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *err = dlerror();
    say("%s not loaded: %s (%s); %s. Run `hwadapter paddle install` for this Paddle again", what, path,
        err ? err : "?", strcmp(what, "kernels") == 0 ? "their ops fall back to Paddle's CPU kernels"
                                                     : "Paddle's collectives fail on this device");
  }
  return handle;
}
void load_kernels(const void *self, const char *suffix) { load_beside(self, suffix, "kernels"); }

/* ---- collectives: Paddle's xccl_* ----
 * On the device library's own communicator when it has one (device_api.h 1.2: the six required communication
 * functions), each call queued on Paddle's stream. Else on the table of libhwadapter_paddle_<type>.xccl, loaded
 * beside this shim in a process that runs Python: hwadapter's communicator for the device (the plugin's own, else
 * the default one on MPI), which completes each call before it returns, so the stream is completed first. */
const HwaDeviceInterface *g_comm = nullptr; /* &g_api, the .xccl library's table, or nullptr: none */
bool g_comm_native = false;                  /* g_comm is the device library's: calls go on Paddle's stream */
char g_no_comm[512] = "";                    /* why there is no communicator */

struct Comm {
  HwaComm inner;
  int device, rank, nranks;
};

C_Status no_comm(const char *call) {
  say("%s: no communicator: %s", call, g_no_comm);
  return C_ERROR;
}

/* A failed communication call: the communicator's message (its last_error), which rank, and the fix. */
C_Status comm_fail(int status, const char *call, const Comm *c) {
  const char *msg = g_comm->last_error ? g_comm->last_error() : nullptr;
  if (c)
    say("%s on device %d (rank %d of %d) failed (%s)%s%s", call, c->device, c->rank, c->nranks, status_name(status),
        msg && *msg ? ": " : "", msg && *msg ? msg : "");
  else
    say("%s failed (%s)%s%s", call, status_name(status), msg && *msg ? ": " : "", msg && *msg ? msg : "");
  return C_ERROR;
}

#define COMM_CALL(expr, what, c)                             \
  do {                                                       \
    int rc_ = (expr);                                        \
    if (rc_ != HWA_OK) return comm_fail(rc_, what, c);       \
  } while (0)

/* The stream a call goes on: Paddle's, for the library's own communicator; for hwadapter's (synchronous), none,
 * after completing Paddle's stream (or the device) so that the kernels queued before the call have written. */
C_Status settle(const Comm *c, C_Stream s, HwaStream *out) {
  *out = nullptr;
  if (g_comm_native) {
    *out = g_has_streams ? (HwaStream)s : nullptr;
    return C_SUCCESS;
  }
  if (g_has_streams && s)
    CALL(g_api.stream_synchronize(c->device, (HwaStream)s), "stream_synchronize", c->device);
  else
    CALL(g_api.synchronize(c->device), "synchronize", c->device);
  return C_SUCCESS;
}

#define NEED(fn, call)                                                                          \
  do {                                                                                          \
    if (!g_comm) return no_comm(call);                                                          \
    if (!g_comm->fn) {                                                                          \
      say("%s: the communicator of this device has no %s (device_api.h 1.2, optional)", call, #fn); \
      return C_ERROR;                                                                           \
    }                                                                                           \
  } while (0)

/* A collective call's start: the function needed, the communicator, and Paddle's stream settled (hs: the library's
 * stream to queue the call on). */
#define ON_STREAM(fn, call)                             \
  NEED(fn, call);                                       \
  Comm *c = (Comm *)comm;                               \
  HwaStream hs;                                         \
  if (C_Status st = settle(c, s, &hs)) return st

C_Status xccl_unique_id_size(size_t *size) {
  NEED(comm_unique_id_size, "xccl_get_unique_id_size");
  COMM_CALL(g_comm->comm_unique_id_size(size), "comm_unique_id_size", nullptr);
  return C_SUCCESS;
}
C_Status xccl_unique_id(C_CCLRootId *id) {
  NEED(comm_unique_id, "xccl_get_unique_id");
  COMM_CALL(g_comm->comm_unique_id(id->data, id->sz), "comm_unique_id", nullptr);
  return C_SUCCESS;
}
C_Status xccl_init_rank(size_t nranks, C_CCLRootId *id, size_t rank, C_CCLComm *out) {
  NEED(comm_init_rank, "xccl_comm_init_rank");
  int device = t_device;
  if (g_api.get_device) CALL(g_api.get_device(&device), "get_device", -1);
  Comm *c = new Comm{nullptr, device, (int)rank, (int)nranks};
  int rc = g_comm->comm_init_rank(device, id->data, id->sz, (int)nranks, (int)rank, &c->inner);
  if (rc != HWA_OK) {
    C_Status st = comm_fail(rc, "comm_init_rank", c);
    delete c;
    return st;
  }
  *out = (C_CCLComm)c;
  return C_SUCCESS;
}
C_Status xccl_destroy(C_CCLComm comm) {
  Comm *c = (Comm *)comm;
  if (!c || !g_comm) return C_SUCCESS;
  int rc = g_comm->comm_destroy ? g_comm->comm_destroy(c->inner) : HWA_OK;
  C_Status st = rc == HWA_OK ? C_SUCCESS : comm_fail(rc, "comm_destroy", c);
  delete c;
  return st;
}
C_Status xccl_all_reduce(void *send, void *recv, size_t count, C_DataType dtype, C_CCLReduceOp op, C_CCLComm comm,
                         C_Stream s) {
  ON_STREAM(all_reduce, "xccl_all_reduce");
  COMM_CALL(g_comm->all_reduce(send, recv, count, (HwaDType)dtype, (HwaReduceOp)op, c->inner, hs), "all_reduce", c);
  return C_SUCCESS;
}
C_Status xccl_broadcast(void *buf, size_t count, C_DataType dtype, size_t root, C_CCLComm comm, C_Stream s) {
  ON_STREAM(broadcast, "xccl_broadcast");
  COMM_CALL(g_comm->broadcast(buf, count, (HwaDType)dtype, (int)root, c->inner, hs), "broadcast", c);
  return C_SUCCESS;
}
C_Status xccl_reduce(void *send, void *recv, size_t count, C_DataType dtype, C_CCLReduceOp op, size_t root,
                     C_CCLComm comm, C_Stream s) {
  ON_STREAM(reduce, "xccl_reduce");
  COMM_CALL(g_comm->reduce(send, recv, count, (HwaDType)dtype, (HwaReduceOp)op, (int)root, c->inner, hs), "reduce",
            c);
  return C_SUCCESS;
}
C_Status xccl_all_gather(void *send, void *recv, size_t count, C_DataType dtype, C_CCLComm comm, C_Stream s) {
  ON_STREAM(all_gather, "xccl_all_gather");
  COMM_CALL(g_comm->all_gather(send, recv, count, (HwaDType)dtype, c->inner, hs), "all_gather", c);
  return C_SUCCESS;
}
C_Status xccl_reduce_scatter(void *send, void *recv, size_t count, C_DataType dtype, C_CCLReduceOp op,
                             C_CCLComm comm, C_Stream s) {
  ON_STREAM(reduce_scatter, "xccl_reduce_scatter");
  COMM_CALL(g_comm->reduce_scatter(send, recv, count, (HwaDType)dtype, (HwaReduceOp)op, c->inner, hs),
            "reduce_scatter", c);
  return C_SUCCESS;
}
C_Status xccl_send(void *buf, size_t count, C_DataType dtype, size_t peer, C_CCLComm comm, C_Stream s) {
  ON_STREAM(send, "xccl_send");
  COMM_CALL(g_comm->send(buf, count, (HwaDType)dtype, (int)peer, c->inner, hs), "send", c);
  return C_SUCCESS;
}
C_Status xccl_recv(void *buf, size_t count, C_DataType dtype, size_t peer, C_CCLComm comm, C_Stream s) {
  ON_STREAM(recv, "xccl_recv");
  COMM_CALL(g_comm->recv(buf, count, (HwaDType)dtype, (int)peer, c->inner, hs), "recv", c);
  return C_SUCCESS;
}
/* Paddle's all_to_all passes a buffer per rank: device_api.h's takes one contiguous buffer of equal parts (what
 * Paddle's alltoall of one tensor gives); other layouts go as sends and receives in a group. */
C_Status xccl_all_to_all(const void **send, const size_t *send_count, const C_DataType *send_dtype, void **recv,
                         const size_t *recv_count, const C_DataType *recv_dtype, size_t rank, size_t nranks,
                         C_CCLComm comm, C_Stream s) {
  if (!g_comm) return no_comm("xccl_all_to_all");
  Comm *c = (Comm *)comm;
  size_t item = 0;
  switch (send_dtype[0]) {
    case BOOL: case UINT8: case INT8: item = 1; break;
    case FLOAT16: case BFLOAT16: case INT16: case UINT16: item = 2; break;
    case FLOAT32: case INT32: case UINT32: item = 4; break;
    default: item = 8;
  }
  bool dense = true;
  for (size_t j = 0; j < nranks && dense; ++j)
    dense = send_count[j] == send_count[0] && recv_count[j] == send_count[0] && send_dtype[j] == send_dtype[0] &&
            recv_dtype[j] == send_dtype[0] && (const char *)send[j] == (const char *)send[0] + j * send_count[0] * item &&
            (char *)recv[j] == (char *)recv[0] + j * send_count[0] * item;
  HwaStream hs;
  if (C_Status st = settle(c, s, &hs)) return st;
  if (dense && g_comm->all_to_all) {
    COMM_CALL(g_comm->all_to_all(send[0], recv[0], send_count[0], (HwaDType)send_dtype[0], c->inner, hs),
              "all_to_all", c);
    return C_SUCCESS;
  }
  NEED(send, "xccl_all_to_all");
  NEED(recv, "xccl_all_to_all");
  if (g_comm->group_start) COMM_CALL(g_comm->group_start(), "group_start", c);
  for (size_t j = 0; j < nranks; ++j) {
    COMM_CALL(g_comm->send(send[j], send_count[j], (HwaDType)send_dtype[j], (int)j, c->inner, hs), "send", c);
    COMM_CALL(g_comm->recv(recv[j], recv_count[j], (HwaDType)recv_dtype[j], (int)j, c->inner, hs), "recv", c);
  }
  if (g_comm->group_end) COMM_CALL(g_comm->group_end(), "group_end", c);
  (void)rank;
  return C_SUCCESS;
}
C_Status xccl_group_start() {
  if (g_comm && g_comm->group_start) COMM_CALL(g_comm->group_start(), "group_start", nullptr);
  return C_SUCCESS;
}
C_Status xccl_group_end() {
  if (g_comm && g_comm->group_end) COMM_CALL(g_comm->group_end(), "group_end", nullptr);
  return C_SUCCESS;
}

/* Where collectives run: the library's communicator (all six required functions), else the .xccl library beside
 * this shim (only in a process that runs Python), else none, with why in g_no_comm. */
void find_communicator(const void *self, bool python) {
  const void *six[] = {(const void *)g_api.comm_unique_id_size, (const void *)g_api.comm_unique_id,
                       (const void *)g_api.comm_init_rank, (const void *)g_api.comm_destroy,
                       (const void *)g_api.all_reduce, (const void *)g_api.broadcast};
  int have = 0;
  for (const void *fn : six) have += fn != nullptr;
  if (have == 6) {
    g_comm = &g_api;
    g_comm_native = true;
    return;
  }
  if (!python) {
    snprintf(g_no_comm, sizeof g_no_comm, "%s has no communication functions (device_api.h 1.2) and hwadapter's "
             "communicators need Python, which this process does not run", HWA_PD_LIBRARY);
    return;
  }
  void *handle = load_beside(self, ".xccl", "collectives");
  auto table = handle ? (const HwaDeviceInterface *(*)(void))dlsym(handle, "hwadapter_paddle_xccl_interface") : nullptr;
  if (table) {
    g_comm = table();
    return;
  }
  snprintf(g_no_comm, sizeof g_no_comm, "the library beside this shim for hwadapter's communicators (*.xccl) is "
           "missing or broken; run `hwadapter paddle install` again");
}

}  // namespace

extern "C" {

/* For `hwadapter paddle status` and the tests: what this shim was built as (no Paddle needed). */
__attribute__((visibility("default"))) const char *hwadapter_paddle_shim_info(void) {
  return "device_type=" HWA_PD_DEVICE_TYPE ";library=" HWA_PD_LIBRARY ";built_for=" HWA_PD_BUILT_FOR
         ";custom_runtime_abi=" ABI_TEXT ";device_api=" STR(HWA_API_MAJOR) "." STR(HWA_API_MINOR);
}

__attribute__((visibility("default"))) void InitPlugin(CustomRuntimeParams *params) {
  if (!params) return;
  /* Paddle fills these sizes with its own struct sizes: a shim compiled against other headers would read
   * and write the wrong fields. Nothing is touched before this check. */
  if (params->size != HWA_PD_PARAMS_SIZE || !params->interface ||
      params->interface->size != HWA_PD_INTERFACE_SIZE) {
    say("not registered: this shim was built against %s (custom-runtime ABI %s: CustomRuntimeParams %zu bytes, "
        "C_DeviceInterface %zu bytes) but the running Paddle passes %zu and %zu bytes; run `hwadapter paddle "
        "install %s` again for this Paddle", HWA_PD_BUILT_FOR, ABI_TEXT, (size_t)HWA_PD_PARAMS_SIZE,
        (size_t)HWA_PD_INTERFACE_SIZE, params->size, params->interface ? params->interface->size : (size_t)0,
        g_type);
    return;
  }
  if (const char *why = load_library()) {
    say("not registered: %s", why);
    return;
  }
  C_DeviceInterface *in = params->interface;
  in->finalize = finalize;
  in->set_device = set_device;
  in->get_device = get_device;
  in->synchronize_device = synchronize_device;
  in->device_memory_allocate = allocate;
  in->device_memory_deallocate = deallocate;
  in->device_memory_set = memory_set;
  in->memory_copy_h2d = copy_h2d;
  in->memory_copy_d2h = copy_d2h;
  in->memory_copy_d2d = copy_d2d;
  in->async_memory_copy_h2d = acopy_h2d;
  in->async_memory_copy_d2h = acopy_d2h;
  in->async_memory_copy_d2d = acopy_d2d;
  in->get_device_count = get_device_count;
  in->get_device_list = get_device_list;
  if (g_api.memory_info) in->device_memory_stats = memory_stats;
  in->device_min_chunk_size = min_chunk_size;
  in->stream_add_callback = stream_add_callback;
  in->device_max_chunk_size = max_chunk_size;
  if (g_has_streams) {
    in->create_stream = stream_create;
    in->destroy_stream = stream_destroy;
    in->query_stream = stream_query;
    in->synchronize_stream = stream_synchronize;
    in->stream_wait_event = stream_wait_event;
    in->create_event = event_create;
    in->destroy_event = event_destroy;
    in->record_event = event_record;
    in->query_event = event_query;
    in->synchronize_event = event_synchronize;
  } else {
    in->create_event = host_event_create;
    in->destroy_event = host_event_noop;
    in->record_event = host_event_record;
    in->query_event = host_event_noop;
    in->synchronize_event = host_event_noop;
    in->stream_wait_event = host_stream_wait;
  }
  params->version.major = PADDLE_CUSTOM_RUNTIME_MAJOR_VERSION;
  params->version.minor = PADDLE_CUSTOM_RUNTIME_MINOR_VERSION;
  params->version.patch = PADDLE_CUSTOM_RUNTIME_PATCH_VERSION;
  params->device_type = g_type;
  params->sub_device_type = (char *)"hwadapter";
  load_kernels((const void *)&InitPlugin, ".kernels");
  /* The plugin's Python kernels (.pykernels, calling into the interpreter): only where one runs, i.e. not in a
   * C++ program using paddle_inference, where they would be registered kernels that cannot run. */
  auto py_ready = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
  bool python = py_ready && py_ready();
  if (python) load_kernels((const void *)&InitPlugin, ".pykernels");
  /* Collectives: set even without a communicator, so that the first one says why (Paddle's own error for an empty
   * field names no cause). */
  find_communicator((const void *)&InitPlugin, python);
  in->xccl_get_unique_id_size = xccl_unique_id_size;
  in->xccl_get_unique_id = xccl_unique_id;
  in->xccl_comm_init_rank = xccl_init_rank;
  in->xccl_destroy_comm = xccl_destroy;
  in->xccl_all_reduce = xccl_all_reduce;
  in->xccl_broadcast = xccl_broadcast;
  in->xccl_reduce = xccl_reduce;
  in->xccl_all_gather = xccl_all_gather;
  in->xccl_reduce_scatter = xccl_reduce_scatter;
  in->xccl_group_start = xccl_group_start;
  in->xccl_group_end = xccl_group_end;
  in->xccl_send = xccl_send;
  in->xccl_recv = xccl_recv;
  in->xccl_all_to_all = xccl_all_to_all;
}

}  // extern "C"
