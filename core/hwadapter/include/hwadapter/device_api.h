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
 * without each one. 1.1 added properties, streams, events and kernels; 1.2 communicators (collectives).
 *
 * Memory is flat: `allocate` returns a device address that the core (and a second framework, e.g. a
 * Paddle custom-device shim) may offset by pointer arithmetic. Threads: the core calls memory,
 * copy, kernel and communication functions without holding Python's GIL, possibly from several
 * threads at once.
 */
#ifndef HWADAPTER_DEVICE_API_H
#define HWADAPTER_DEVICE_API_H

#include <stddef.h>
#include <stdint.h>

#define HWA_API_MAJOR 1
#define HWA_API_MINOR 2

/* Statuses. */
#define HWA_OK 0
#define HWA_ERROR 1            /* any other failure */
#define HWA_OUT_OF_MEMORY 2    /* allocate: the device has no room (the core empties its cache, retries once) */
#define HWA_INVALID_ARGUMENT 3 /* 1.1: a bad pointer/handle (e.g. a double free), shape or attribute */
#define HWA_NOT_READY 4        /* 1.1: stream_query/event_query: work is still pending (not an error) */
#define HWA_UNSUPPORTED 5      /* 1.1: the library does not implement this request */

/* 1.1: element types; the numbering is Paddle's C_DataType's, so a Paddle shim passes them through. The unsigned
 * 16-, 32- and 64-bit codes came later, inside 1.2 (no field changed): a core that predates them refuses to load a
 * library that registers a kernel for one, naming the code. (Paddle's C_DataType has BFLOAT16 = 13, which hwadapter
 * has no dtype for.) */
typedef enum HwaDType {
  HWA_DTYPE_INVALID = 0,
  HWA_BOOL = 1,
  HWA_UINT8 = 2,
  HWA_UINT16 = 3,
  HWA_UINT32 = 4,
  HWA_UINT64 = 5,
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
/* 1.2: a communicator the library defines: one device's member of a group of ranks (NCCL's ncclComm_t,
 * Paddle's C_CCLComm). */
typedef struct HwaComm_st *HwaComm;

/* 1.2: reductions; the numbering is Paddle's C_CCLReduceOp's. AVG is the sum divided by the number of ranks
 * (floor division for integers, as numpy's //). */
typedef enum HwaReduceOp {
  HWA_REDUCE_SUM = 0,
  HWA_REDUCE_AVG = 1,
  HWA_REDUCE_MAX = 2,
  HWA_REDUCE_MIN = 3,
  HWA_REDUCE_PROD = 4
} HwaReduceOp;

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

  /* ---- 1.2: communication, all optional ----
   * A library brings its own communicator (as NCCL, or Paddle's xccl_* functions) with the six required ones
   * (comm_unique_id_size, comm_unique_id, comm_init_rank, comm_destroy, all_reduce, broadcast) or none of them:
   * without them hwadapter runs collectives on its default MPI communicator, staged through host memory. Each
   * of the others is optional: called without it, the core raises CollectiveError naming it.
   *
   * Set-up, as ncclGetUniqueId / ncclCommInitRank: the core calls comm_unique_id on the group's rank 0, hands
   * those bytes to every rank of the group (over MPI), and every rank calls comm_init_rank with them.
   * Buffers are device addresses (from allocate, possibly offset); counts are elements of `dtype`; ranks and
   * roots are ranks in the communicator's group. Each call is queued on `stream` (NULL: the default stream)
   * after the work queued there before it; it may return before it completes: it has completed once that
   * stream is synchronised (or queried done). A library without streams completes each call before it
   * returns. The core keeps the buffers alive until then. Every rank of a group must make the same calls in
   * the same order. An unsupported dtype or op: HWA_UNSUPPORTED with a last_error message. */
  int (*comm_unique_id_size)(size_t *size);        /* bytes of a unique id (at most 4096) */
  int (*comm_unique_id)(void *id, size_t size);    /* writes a new id: what the group's ranks need to meet */
  int (*comm_init_rank)(int device, const void *id, size_t size, int nranks, int rank, HwaComm *comm);
  int (*comm_destroy)(HwaComm comm);
  /* recv = op over every rank's send; recv may equal send (in place). */
  int (*all_reduce)(const void *send, void *recv, size_t count, HwaDType dtype, HwaReduceOp op, HwaComm comm,
                    HwaStream stream);
  /* Every rank's buf = rank root's buf. */
  int (*broadcast)(void *buf, size_t count, HwaDType dtype, int root, HwaComm comm, HwaStream stream);
  /* Rank root's recv = op over every rank's send; the others' recv is not written. */
  int (*reduce)(const void *send, void *recv, size_t count, HwaDType dtype, HwaReduceOp op, int root, HwaComm comm,
                HwaStream stream);
  /* recv (nranks * count elements) = every rank's send (count elements), in rank order. */
  int (*all_gather)(const void *send, void *recv, size_t count, HwaDType dtype, HwaComm comm, HwaStream stream);
  /* recv (recv_count elements) = this rank's part of op over every rank's send (nranks * recv_count). */
  int (*reduce_scatter)(const void *send, void *recv, size_t recv_count, HwaDType dtype, HwaReduceOp op,
                        HwaComm comm, HwaStream stream);
  /* send and recv in nranks parts of count elements: recv's part j = rank j's send's part (this rank). */
  int (*all_to_all)(const void *send, void *recv, size_t count, HwaDType dtype, HwaComm comm, HwaStream stream);
  /* Point to point: rank peer posts the matching recv / send. */
  int (*send)(const void *buf, size_t count, HwaDType dtype, int peer, HwaComm comm, HwaStream stream);
  int (*recv)(void *buf, size_t count, HwaDType dtype, int peer, HwaComm comm, HwaStream stream);
  /* Calls between them may be fused (NCCL's ncclGroupStart/End); both or neither. */
  int (*group_start)(void);
  int (*group_end)(void);
} HwaDeviceInterface;

/* The one symbol a vendor library exports. */
typedef const HwaDeviceInterface *(*HwaGetDeviceInterfaceFn)(void);
#define HWA_GET_DEVICE_INTERFACE "hwadapter_get_device_interface"

#ifdef __cplusplus
}
#endif
#endif
