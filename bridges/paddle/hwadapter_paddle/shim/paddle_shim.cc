/* hwadapter-paddle: one hwadapter device type as a PaddlePaddle custom device (runtime only).
 *
 * Paddle dlopens every shared library in $CUSTOM_DEVICE_ROOT (else site-packages/paddle_custom_device) at
 * `import paddle` and calls its InitPlugin, which fills Paddle's C_DeviceInterface. This shim fills it by
 * delegating to a hwadapter native device library (device_api.h, HwaDeviceInterface 1.x) that it dlopens by
 * path. Everything stays in native code: no Python, no GIL, on any of Paddle's threads.
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
void load_kernels(const void *self, const char *suffix) {
  Dl_info info;
  if (!dladdr(self, &info) || !info.dli_fname) return;
  char path[4096];
  size_t n = strlen(info.dli_fname);
  if (n < 3 || n + strlen(suffix) >= sizeof path || strcmp(info.dli_fname + n - 3, ".so") != 0) return;
  memcpy(path, info.dli_fname, n - 3);
  strcpy(path + n - 3, suffix);
  FILE *f = fopen(path, "rb");
  if (!f) return;  /* runtime only */
  fclose(f);
  if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    const char *err = dlerror();
    say("kernels not loaded: %s (%s); their ops fall back to Paddle's CPU kernels. Run `hwadapter paddle install` "
        "for this Paddle again", path, err ? err : "?");
  }
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
  if (py_ready && py_ready()) load_kernels((const void *)&InitPlugin, ".pykernels");
}

}  // extern "C"
