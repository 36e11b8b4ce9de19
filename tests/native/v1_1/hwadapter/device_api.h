/* Frozen: device_api.h as of ABI 1.1 (commit 5636b57). tests/test_native_collectives.py builds a library against it
 * as a vendor did before 1.2, and checks that today's core loads it unchanged. Never edit. */
/* hwadapter device C ABI: a vendor with a C driver fills this table in a shared library.
 *
 * In the spirit of Paddle's C_DeviceInterface and the PJRT C API: a struct of function pointers
 * with its own size and version, so the core can check what it was given before calling anything.
 * Every function returns 0 (HWA_OK) on success and a non-zero HWA_* status on failure.
 *
 * Versioning: a library is accepted when its api_major equals HWA_API_MAJOR and its api_minor is not
 * newer. Minor versions only append fields, so a table built against an older header still loads:
 * the core reads no field at or past the library's struct_size (those are treated as absent, NULL).
 * Every function added after 1.0 is optional; see docs/native-abi.md for what the core does
 * without each one.
 *
 * Memory is flat: `allocate` returns a device address that the core (and a second framework, e.g. a
 * Paddle custom-device shim) may offset by pointer arithmetic. Threads: the core calls memory,
 * copy and kernel functions without holding Python's GIL, possibly from several threads at once.
 */
#ifndef HWADAPTER_DEVICE_API_H
#define HWADAPTER_DEVICE_API_H

#include <stddef.h>
#include <stdint.h>

#define HWA_API_MAJOR 1
#define HWA_API_MINOR 1

/* Statuses. */
#define HWA_OK 0
#define HWA_ERROR 1            /* any other failure */
#define HWA_OUT_OF_MEMORY 2    /* allocate: the device has no room (the core empties its cache, retries once) */
#define HWA_INVALID_ARGUMENT 3 /* 1.1: a bad pointer/handle (e.g. a double free), shape or attribute */
#define HWA_NOT_READY 4        /* 1.1: stream_query/event_query: work is still pending (not an error) */
#define HWA_UNSUPPORTED 5      /* 1.1: the library does not implement this request */

/* 1.1: element types; the numbering is Paddle's C_DataType's, so a Paddle shim passes them through. */
typedef enum HwaDType {
  HWA_DTYPE_INVALID = 0,
  HWA_BOOL = 1,
  HWA_UINT8 = 2,
  HWA_INT8 = 6,
  HWA_INT16 = 7,
  HWA_INT32 = 8,
  HWA_INT64 = 9,
  HWA_FLOAT16 = 10,
  HWA_FLOAT32 = 11,
  HWA_FLOAT64 = 12
} HwaDType;

#ifdef __cplusplus
extern "C" {
#endif

/* 1.1: opaque handles the library defines. A NULL stream is the device's default stream. */
typedef struct HwaStream_st *HwaStream;
typedef struct HwaEvent_st *HwaEvent;

/* 1.1: what a device says about itself. The core zeroes it and sets struct_size to the size it was
 * compiled with; the library writes no field at or past struct_size (strings NUL-terminated). */
typedef struct HwaDeviceProperties {
  size_t struct_size;
  char name[128];
  char vendor[128];
  char driver_version[64];
  size_t total_memory;         /* bytes; the capacity past which allocate returns HWA_OUT_OF_MEMORY */
  int32_t compute_units;
  int32_t max_work_group_size;
  size_t alignment;            /* bytes every allocation is aligned to */
} HwaDeviceProperties;

/* 1.1: a tensor as a kernel sees it. Shapes and strides are in elements; the core passes C-contiguous
 * tensors today, but a kernel must read the strides. `data` is NULL for a tensor with no elements. */
typedef struct HwaTensor {
  void *data;
  int32_t dtype;               /* HwaDType */
  int32_t ndim;                /* 0 for a scalar */
  const int64_t *shape;
  const int64_t *strides;
} HwaTensor;

/* 1.1: one attribute of an op (docs/ops.md). Booleans are ints; an attribute whose value is None is
 * not passed. Only the member of `type` is meaningful. */
typedef enum HwaAttrType { HWA_ATTR_INT = 1, HWA_ATTR_FLOAT = 2, HWA_ATTR_INTS = 3, HWA_ATTR_STRING = 4 } HwaAttrType;
typedef struct HwaAttr {
  const char *name;
  int32_t type;                /* HwaAttrType */
  int64_t i;                   /* HWA_ATTR_INT */
  double f;                    /* HWA_ATTR_FLOAT */
  const int64_t *ints;         /* HWA_ATTR_INTS: `count` values */
  size_t count;
  const char *s;               /* HWA_ATTR_STRING */
} HwaAttr;

/* 1.1: a kernel. The core has allocated the outputs (shapes and dtypes from hwadapter's op rules)
 * before the call; the kernel writes them and returns a status (on failure, set the last error).
 * It runs on `stream` (NULL: the default stream), and is not called when every output is empty. */
typedef int (*HwaKernelFn)(int device, HwaStream stream, const HwaTensor *inputs, size_t num_inputs,
                           HwaTensor *outputs, size_t num_outputs, const HwaAttr *attrs, size_t num_attrs);

/* 1.1: registers `fn` for `op` (an op name of hwadapter, e.g. "add") and exactly these input dtypes.
 * A kernel must give the op's exact semantics (broadcasting, attributes) for every input it accepts. */
typedef struct HwaKernelDef {
  const char *op;
  size_t num_inputs;
  const int32_t *input_dtypes; /* num_inputs HwaDType values */
  HwaKernelFn fn;
} HwaKernelDef;

typedef struct HwaDeviceInterface {
  size_t struct_size;   /* sizeof(HwaDeviceInterface) as the vendor compiled it */
  uint32_t api_major;   /* must equal HWA_API_MAJOR */
  uint32_t api_minor;   /* must be <= HWA_API_MINOR */
  const char *device_type;

  /* ---- 1.0: required (memory_info optional) ---- */
  int (*device_count)(int *count);
  int (*allocate)(int device, size_t nbytes, void **ptr);
  int (*deallocate)(int device, void *ptr);
  int (*memcpy_h2d)(int device, void *dst, const void *src, size_t nbytes);
  int (*memcpy_d2h)(int device, void *dst, const void *src, size_t nbytes);
  int (*memcpy_d2d)(int device, void *dst, const void *src, size_t nbytes);
  int (*memset)(int device, void *dst, int value, size_t nbytes);
  int (*synchronize)(int device);  /* waits for all work on the device, every stream */
  int (*memory_info)(int device, size_t *free_bytes, size_t *total_bytes);

  /* ---- 1.1: all optional ---- */
  /* Called once after loading / before unloading. */
  int (*initialize)(void);
  int (*finalize)(void);
  int (*get_properties)(int device, HwaDeviceProperties *props);
  /* The calling thread's current device (for frameworks with that model, e.g. Paddle). */
  int (*set_device)(int device);
  int (*get_device)(int *device);

  /* Streams and events: all ten or none. Synchronous copies and memset are ordered after all work
   * queued on the device before them. */
  int (*stream_create)(int device, HwaStream *stream);
  int (*stream_destroy)(int device, HwaStream stream);
  int (*stream_synchronize)(int device, HwaStream stream);
  int (*stream_query)(int device, HwaStream stream);            /* HWA_OK: done; HWA_NOT_READY: pending */
  int (*stream_wait_event)(int device, HwaStream stream, HwaEvent event);
  int (*event_create)(int device, HwaEvent *event);
  int (*event_destroy)(int device, HwaEvent event);
  int (*event_record)(int device, HwaEvent event, HwaStream stream);
  int (*event_query)(int device, HwaEvent event);               /* HWA_OK: done; HWA_NOT_READY: pending */
  int (*event_synchronize)(int device, HwaEvent event);

  /* Copies and memset queued on a stream; they may return before the work is done (the core keeps the
   * host buffer alive until the stream is synchronised). Absent: the core uses the synchronous ones. */
  int (*memcpy_h2d_async)(int device, HwaStream stream, void *dst, const void *src, size_t nbytes);
  int (*memcpy_d2h_async)(int device, HwaStream stream, void *dst, const void *src, size_t nbytes);
  int (*memcpy_d2d_async)(int device, HwaStream stream, void *dst, const void *src, size_t nbytes);
  int (*memset_async)(int device, HwaStream stream, void *dst, int value, size_t nbytes);

  /* A message for the calling thread's last failed call (thread-local in the library), or NULL. The
   * core calls it right after a non-zero status, on the same thread, and puts it in its error. */
  const char *(*last_error)(void);

  /* The library's kernels: `num_kernels` definitions, registered with the device's kernel table. */
  size_t num_kernels;
  const HwaKernelDef *kernels;
} HwaDeviceInterface;

/* The one symbol a vendor library exports. */
typedef const HwaDeviceInterface *(*HwaGetDeviceInterfaceFn)(void);
#define HWA_GET_DEVICE_INTERFACE "hwadapter_get_device_interface"

#ifdef __cplusplus
}
#endif
#endif
