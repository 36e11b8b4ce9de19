/* OpenCL devices as a device_api.h 1.1 library, for native hosts (the Paddle bridge); hwadapter itself uses the
 * pyopencl runtime (runtime.py). Memory is OpenCL 2.0 shared virtual memory (clSVMAlloc): flat pointers, which a
 * host such as Paddle offsets by pointer arithmetic (cl_mem buffers cannot be). Copies and memset are blocking
 * clEnqueueSVMMemcpy / clEnqueueSVMMemFill on one in-order queue per device, so no work is ever queued past a call
 * (clSVMFree need not wait for any); no streams. On a device with fine-grain buffer SVM the host reads and writes
 * the memory itself (memmove, memset): the queue costs more than the copy for small tensors.
 *
 * Devices are numbered as runtime.py numbers them: every device of every platform, in platform order. There are no
 * OpenCL headers on every build machine, so the few declarations needed are below and libOpenCL.so.1 (the ICD
 * loader) is opened at initialize. Built by native.py with -DDEVICE_TYPE="<entry-point name>".
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hwadapter/device_api.h"
#include "hwadapter/device_helpers.h" /* hwa_fail, the live-block table */

#ifndef DEVICE_TYPE
#define DEVICE_TYPE "an OpenCL device" /* native.py passes the plugin's entry-point name */
#endif
#define MAX_DEVICES 64

/* ---- the part of cl.h this library uses (OpenCL 2.0) ---- */
typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef struct _cl_platform_id *cl_platform_id;
typedef struct _cl_device_id *cl_device_id;
typedef struct _cl_context *cl_context;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_event *cl_event;
#define CL_SUCCESS 0
#define CL_TRUE 1
#define CL_DEVICE_TYPE_ALL 0xFFFFFFFFu
#define CL_DEVICE_MAX_COMPUTE_UNITS 0x1002
#define CL_DEVICE_MAX_WORK_GROUP_SIZE 0x1004
#define CL_DEVICE_MAX_MEM_ALLOC_SIZE 0x1010
#define CL_DEVICE_MEM_BASE_ADDR_ALIGN 0x1019
#define CL_DEVICE_GLOBAL_MEM_SIZE 0x101F
#define CL_DEVICE_NAME 0x102B
#define CL_DEVICE_VENDOR 0x102C
#define CL_DRIVER_VERSION 0x102D
#define CL_DEVICE_SVM_CAPABILITIES 0x1053
#define CL_DEVICE_SVM_COARSE_GRAIN_BUFFER 1u
#define CL_DEVICE_SVM_FINE_GRAIN_BUFFER 2u
#define CL_MEM_READ_WRITE 1u

static struct {
  cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id *, cl_uint *);
  cl_int (*GetDeviceIDs)(cl_platform_id, cl_ulong, cl_uint, cl_device_id *, cl_uint *);
  cl_int (*GetDeviceInfo)(cl_device_id, cl_uint, size_t, void *, size_t *);
  cl_context (*CreateContext)(const intptr_t *, cl_uint, const cl_device_id *, void *, void *, cl_int *);
  cl_command_queue (*CreateCommandQueueWithProperties)(cl_context, cl_device_id, const cl_ulong *, cl_int *);
  cl_int (*Finish)(cl_command_queue);
  void *(*SVMAlloc)(cl_context, cl_ulong, size_t, cl_uint);
  void (*SVMFree)(cl_context, void *);
  cl_int (*EnqueueSVMMemcpy)(cl_command_queue, cl_uint, void *, const void *, size_t, cl_uint, const cl_event *,
                             cl_event *);
  cl_int (*EnqueueSVMMemFill)(cl_command_queue, void *, const void *, size_t, size_t, cl_uint, const cl_event *,
                              cl_event *);
} cl;

static _Thread_local int current_device;

/* ---- devices, opened once ---- */
typedef struct {
  cl_device_id id;
  cl_context context;  /* NULL: the device has no SVM; `why` says so */
  cl_command_queue queue;
  int fine;  /* fine-grain buffer SVM: the host may read and write the memory directly */
  size_t total, max_alloc, alignment;
  HwaBlocks blocks;  /* live allocations (deallocate gets only the pointer) and the bytes they hold */
  char why[160];
} Device;

static Device devices[MAX_DEVICES];
static int num_devices;
static char init_error[512];  /* why initialize failed, kept for every later call */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int load_opencl(void) {
  void *lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(init_error, sizeof init_error, DEVICE_TYPE ": cannot load the OpenCL ICD loader (%s); install one "
             "(apt-get install ocl-icd-libopencl1 pocl-opencl-icd)", dlerror());
    return 0;
  }
#define LOAD(name)                                                                                     \
  if (!(*(void **)&cl.name = dlsym(lib, "cl" #name))) {                                                \
    snprintf(init_error, sizeof init_error, DEVICE_TYPE ": libOpenCL.so.1 has no cl" #name " (OpenCL " \
             "2.0 is needed for shared virtual memory)");                                              \
    return 0;                                                                                          \
  }
  LOAD(GetPlatformIDs) LOAD(GetDeviceIDs) LOAD(GetDeviceInfo) LOAD(CreateContext)
  LOAD(CreateCommandQueueWithProperties) LOAD(Finish) LOAD(SVMAlloc) LOAD(SVMFree) LOAD(EnqueueSVMMemcpy)
  LOAD(EnqueueSVMMemFill)
#undef LOAD
  return 1;
}

static void open_device(Device *dev) {
  cl_ulong caps = 0, total = 0, max_alloc = 0;
  cl_uint align_bits = 0;
  hwa_blocks_init(&dev->blocks);
  cl_int err = cl.GetDeviceInfo(dev->id, CL_DEVICE_SVM_CAPABILITIES, sizeof caps, &caps, NULL);
  if (err != CL_SUCCESS || !(caps & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER)) {
    snprintf(dev->why, sizeof dev->why, "it has no shared virtual memory (OpenCL 2.0 SVM), which flat pointers need");
    return;
  }
  cl.GetDeviceInfo(dev->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof total, &total, NULL);
  cl.GetDeviceInfo(dev->id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
  cl.GetDeviceInfo(dev->id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL);
  dev->total = total, dev->max_alloc = max_alloc;
#ifndef COARSE_GRAIN_ONLY /* tests define it to run the queue's path on a fine-grain device */
  dev->fine = (caps & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) != 0;
#endif
  dev->alignment = align_bits >= 8 * 64 ? align_bits / 8 : 64;
  dev->context = cl.CreateContext(NULL, 1, &dev->id, NULL, NULL, &err);
  if (dev->context) dev->queue = cl.CreateCommandQueueWithProperties(dev->context, dev->id, NULL, &err);
  if (!dev->queue) {
    snprintf(dev->why, sizeof dev->why, "creating its context or queue failed (OpenCL error %d)", err);
    dev->context = NULL;
  }
}

static void open_all(void) {
  if (!load_opencl()) return;
  cl_platform_id platforms[16];
  cl_uint np = 0;
  if (cl.GetPlatformIDs(16, platforms, &np) != CL_SUCCESS || np == 0) {
    snprintf(init_error, sizeof init_error, DEVICE_TYPE ": no OpenCL platform found; install a driver (apt-get "
             "install pocl-opencl-icd for the CPU, or your GPU vendor's ICD)");
    return;
  }
  for (cl_uint p = 0; p < np && p < 16; ++p) {
    cl_device_id ids[MAX_DEVICES];
    cl_uint nd = 0;
    if (cl.GetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, ids, &nd) != CL_SUCCESS) continue;
    for (cl_uint i = 0; i < nd && num_devices < MAX_DEVICES; ++i) {
      devices[num_devices].id = ids[i];
      open_device(&devices[num_devices++]);
    }
  }
  if (num_devices == 0) snprintf(init_error, sizeof init_error, DEVICE_TYPE ": the OpenCL platforms have no devices");
}

static int opened;  /* a host has called initialize (svm_device_handles answers only then); atomic builtins */

static int initialize(void) {
  pthread_once(&once, open_all);
  __atomic_store_n(&opened, 1, __ATOMIC_RELEASE);
  return init_error[0] ? hwa_fail(HWA_ERROR, "%s", init_error) : HWA_OK;
}

/* The usable device `d` in *out, or a status with the last error set. */
static int device(int d, Device **out) {
  if (initialize() != HWA_OK) return HWA_ERROR;
  if (d < 0 || d >= num_devices) return hwa_fail(HWA_INVALID_ARGUMENT, DEVICE_TYPE ": no device %d (there are %d)", d,
                                                 num_devices);
  if (!devices[d].context) return hwa_fail(HWA_UNSUPPORTED, DEVICE_TYPE ":%d cannot serve native hosts: %s", d,
                                           devices[d].why);
  *out = &devices[d];
  return HWA_OK;
}
#define DEVICE(dev, d)                  \
  Device *dev = NULL;                   \
  {                                     \
    int status_ = device((d), &dev);    \
    if (status_ != HWA_OK) return status_; \
  }

static int device_count(int *count) {
  if (initialize() != HWA_OK) return HWA_ERROR;
  *count = num_devices;
  return HWA_OK;
}

static int finalize(void) {
  /* Contexts stay: hwadapter and a second host may each initialize and finalize this one library in a process. */
  for (int d = 0; d < num_devices; ++d)
    if (devices[d].queue) cl.Finish(devices[d].queue);
  return HWA_OK;
}

static int allocate(int d, size_t nbytes, void **ptr) {
  DEVICE(dev, d);
  size_t in_use = hwa_blocks_used(&dev->blocks);
  int room = nbytes <= dev->max_alloc && hwa_blocks_reserve(&dev->blocks, nbytes, dev->total, &in_use);
  void *p = room ? cl.SVMAlloc(dev->context, CL_MEM_READ_WRITE, nbytes ? nbytes : 1, (cl_uint)dev->alignment) : NULL;
  if (p && hwa_blocks_add(&dev->blocks, p, nbytes, d) != HWA_OK) {
    cl.SVMFree(dev->context, p);
    p = NULL;
  }
  if (!p) {
    if (room) hwa_blocks_release(&dev->blocks, nbytes);
    return hwa_fail(HWA_OUT_OF_MEMORY, DEVICE_TYPE ":%d cannot allocate %zu bytes (%zu of %zu in use, at most %zu in "
                    "one allocation)", d, nbytes, in_use, dev->total, dev->max_alloc);
  }
  *ptr = p;
  return HWA_OK;
}

static int deallocate(int d, void *ptr) {
  DEVICE(dev, d);
  if (!ptr) return HWA_OK;
  size_t size;
  if (!hwa_blocks_remove(&dev->blocks, ptr, d, &size))
    return hwa_fail(HWA_INVALID_ARGUMENT, DEVICE_TYPE ":%d: %p is not a live allocation (freed twice, or never allocated "
                    "here)", d, ptr);
  hwa_blocks_release(&dev->blocks, size);
  cl.SVMFree(dev->context, ptr);
  return HWA_OK;
}

static int copy(int d, void *dst, const void *src, size_t n) {
  DEVICE(dev, d);
  if (!n) return HWA_OK;
  if (dev->fine) {  /* no queued work can touch the memory (every call here blocks): a plain copy is coherent */
    memmove(dst, src, n);
    return HWA_OK;
  }
  cl_int err = cl.EnqueueSVMMemcpy(dev->queue, CL_TRUE, dst, src, n, 0, NULL, NULL);
  return err == CL_SUCCESS ? HWA_OK
                           : hwa_fail(HWA_ERROR, DEVICE_TYPE ":%d: clEnqueueSVMMemcpy of %zu bytes failed (OpenCL error "
                                      "%d)", d, n, err);
}

static int set(int d, void *dst, int value, size_t n) {
  DEVICE(dev, d);
  if (!n) return HWA_OK;
  if (dev->fine) {
    memset(dst, value, n);
    return HWA_OK;
  }
  unsigned char byte = (unsigned char)value;
  cl_int err = cl.EnqueueSVMMemFill(dev->queue, dst, &byte, 1, n, 0, NULL, NULL);
  if (err == CL_SUCCESS) err = cl.Finish(dev->queue);
  return err == CL_SUCCESS ? HWA_OK
                           : hwa_fail(HWA_ERROR, DEVICE_TYPE ":%d: clEnqueueSVMMemFill of %zu bytes failed (OpenCL error "
                                      "%d)", d, n, err);
}

static int synchronize(int d) {
  DEVICE(dev, d);
  cl_int err = cl.Finish(dev->queue);
  return err == CL_SUCCESS ? HWA_OK : hwa_fail(HWA_ERROR, DEVICE_TYPE ":%d: clFinish failed (OpenCL error %d)", d, err);
}

static int memory_info(int d, size_t *free_bytes, size_t *total_bytes) {
  DEVICE(dev, d);
  *free_bytes = dev->total - hwa_blocks_used(&dev->blocks);
  *total_bytes = dev->total;
  return HWA_OK;
}

static int get_properties(int d, HwaDeviceProperties *p) {
  DEVICE(dev, d);
  size_t size = p->struct_size;  /* write nothing past what the caller's header had */
  HwaDeviceProperties full;
  memset(&full, 0, sizeof full);
  cl_uint units = 1;
  size_t group = 1;
  cl.GetDeviceInfo(dev->id, CL_DEVICE_NAME, sizeof full.name - 1, full.name, NULL);
  cl.GetDeviceInfo(dev->id, CL_DEVICE_VENDOR, sizeof full.vendor - 1, full.vendor, NULL);
  cl.GetDeviceInfo(dev->id, CL_DRIVER_VERSION, sizeof full.driver_version - 1, full.driver_version, NULL);
  cl.GetDeviceInfo(dev->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
  cl.GetDeviceInfo(dev->id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof group, &group, NULL);
  full.total_memory = dev->total;
  full.compute_units = (int32_t)units;
  full.max_work_group_size = (int32_t)group;
  full.alignment = dev->alignment;
  memcpy(p, &full, size < sizeof full ? size : sizeof full);
  p->struct_size = size;
  return HWA_OK;
}

static int set_device(int d) {
  DEVICE(dev, d);
  current_device = d;
  return HWA_OK;
}
static int get_device(int *d) {
  *d = current_device;
  return HWA_OK;
}

/* ---- for the plugin's own Python runtime (runtime.py adopts them), not part of device_api.h ---- */

/* Device d's context and device id, once a host has initialized this library: hwadapter's kernels then run in the
 * context its memory belongs to. HWA_UNSUPPORTED before that, or for a device without SVM. */
__attribute__((visibility("default"))) int svm_device_handles(int d, void **context, void **device_id) {
  if (!__atomic_load_n(&opened, __ATOMIC_ACQUIRE)) return hwa_fail(HWA_UNSUPPORTED, DEVICE_TYPE ": no host has initialized this library in this process");
  DEVICE(dev, d);
  *context = dev->context, *device_id = dev->id;
  return HWA_OK;
}

/* The live allocation of device d that holds `p`: a host such as Paddle passes pointers inside its allocations. */
__attribute__((visibility("default"))) int svm_device_block(int d, const void *p, void **base, size_t *size) {
  DEVICE(dev, d);
  return hwa_blocks_find(&dev->blocks, p, 0, d, base, size) ? HWA_OK : hwa_fail(HWA_INVALID_ARGUMENT, DEVICE_TYPE ":%d: %p is in no live allocation", d, p);
}

static const HwaDeviceInterface table = {
    .struct_size = sizeof(HwaDeviceInterface),
    .api_major = HWA_API_MAJOR,
    .api_minor = HWA_API_MINOR,
    .device_type = DEVICE_TYPE,
    .device_count = device_count,
    .allocate = allocate,
    .deallocate = deallocate,
    .memcpy_h2d = copy,
    .memcpy_d2h = copy,
    .memcpy_d2d = copy,
    .memset = set,
    .synchronize = synchronize,
    .memory_info = memory_info,
    .initialize = initialize,
    .finalize = finalize,
    .get_properties = get_properties,
    .set_device = set_device,
    .get_device = get_device,
    .last_error = hwa_last_error,
};

__attribute__((visibility("default"))) const HwaDeviceInterface *hwadapter_get_device_interface(void) {
  return &table;
}
