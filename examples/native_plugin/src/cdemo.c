/* cdemo: an emulated accelerator behind hwadapter's device C ABI (device_api.h 1.1).
 *
 * Two devices whose memory is malloc'd host memory with a stated capacity (CDEMO_CAPACITY bytes each):
 * allocations past it return HWA_OUT_OF_MEMORY; freeing or copying through an address that is not a live
 * allocation returns HWA_INVALID_ARGUMENT with a message (never a crash). Work runs when it is queued, so
 * streams and events are complete as soon as they are used, but their handles are real and checked.
 *
 * Kernels, with numpy's exact semantics for every input they accept:
 *   add, mul   float32 and int64 (int64 wraps around, as numpy), full broadcasting, any strides
 *   relu       float32
 *   matmul     float32: numpy's 1-D, batched and broadcast rules, attributes transpose_x / transpose_y
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hwadapter/device_api.h"
#include "hwadapter/device_helpers.h" /* hwa_fail, the live-block table */

#define NUM_DEVICES 2
#define CDEMO_CAPACITY ((size_t)256 << 20)
#define ALIGNMENT 64
#define MAX_DIMS 16

static _Thread_local int current_device;

/* ---- live allocations per device (and the bytes they hold), live streams and events ---- */
static HwaBlocks blocks[NUM_DEVICES] = {HWA_BLOCKS_INIT, HWA_BLOCKS_INIT};
static HwaBlocks streams = HWA_BLOCKS_INIT, events = HWA_BLOCKS_INIT;

/* 1 when [p, p+n) lies inside one live allocation of device d */
static int in_device_memory(int d, const void *p, size_t n) {
  return n == 0 || hwa_blocks_find(&blocks[d], p, n, d, NULL, NULL);
}

#define CHECK_DEVICE(d) \
  if ((d) < 0 || (d) >= NUM_DEVICES) return hwa_fail(HWA_INVALID_ARGUMENT, "cdemo: no device %d (there are %d)", (d), NUM_DEVICES)
#define CHECK_RANGE(d, p, n, what)                                                                                \
  if (!in_device_memory((d), (p), (n)))                                                                           \
  return hwa_fail(HWA_INVALID_ARGUMENT, "cdemo: %s %p (%zu bytes) is not inside a live allocation of device %d", what, \
              (const void *)(p), (size_t)(n), (d))

/* ---- device and memory ---- */
static int device_count(int *count) {
  *count = NUM_DEVICES;
  return HWA_OK;
}

static int allocate(int d, size_t nbytes, void **ptr) {
  CHECK_DEVICE(d);
  size_t rounded = (nbytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
  if (rounded == 0) rounded = ALIGNMENT;  /* a unique address even for 0 bytes */
  size_t in_use;
  if (!hwa_blocks_reserve(&blocks[d], nbytes, CDEMO_CAPACITY, &in_use))
    return hwa_fail(HWA_OUT_OF_MEMORY, "cdemo: device %d has %zu of %zu bytes free, %zu requested", d,
                    CDEMO_CAPACITY - in_use, (size_t)CDEMO_CAPACITY, nbytes);
  void *p = aligned_alloc(ALIGNMENT, rounded);
  if (!p || hwa_blocks_add(&blocks[d], p, nbytes, d) != HWA_OK) {
    hwa_blocks_release(&blocks[d], nbytes);
    free(p);
    return hwa_fail(HWA_OUT_OF_MEMORY, "cdemo: the host has no memory for %zu bytes", nbytes);
  }
  *ptr = p;
  return HWA_OK;
}

static int deallocate(int d, void *ptr) {
  CHECK_DEVICE(d);
  if (!ptr) return HWA_OK;
  size_t size;
  if (!hwa_blocks_remove(&blocks[d], ptr, d, &size))
    return hwa_fail(HWA_INVALID_ARGUMENT, "cdemo: %p is not a live allocation of device %d (freed twice, or never "
                    "allocated here)", ptr, d);
  hwa_blocks_release(&blocks[d], size);
  free(ptr);
  return HWA_OK;
}

static int memcpy_h2d(int d, void *dst, const void *src, size_t n) {
  CHECK_DEVICE(d);
  CHECK_RANGE(d, dst, n, "destination");
  if (n) memcpy(dst, src, n);
  return HWA_OK;
}
static int memcpy_d2h(int d, void *dst, const void *src, size_t n) {
  CHECK_DEVICE(d);
  CHECK_RANGE(d, src, n, "source");
  if (n) memcpy(dst, src, n);
  return HWA_OK;
}
static int memcpy_d2d(int d, void *dst, const void *src, size_t n) {
  CHECK_DEVICE(d);
  CHECK_RANGE(d, dst, n, "destination");
  CHECK_RANGE(d, src, n, "source");
  if (n) memmove(dst, src, n);
  return HWA_OK;
}
static int memset_(int d, void *dst, int value, size_t n) {
  CHECK_DEVICE(d);
  CHECK_RANGE(d, dst, n, "destination");
  if (n) memset(dst, value, n);
  return HWA_OK;
}
static int synchronize(int d) {
  CHECK_DEVICE(d);
  return HWA_OK;
}
static int memory_info(int d, size_t *free_b, size_t *total_b) {
  CHECK_DEVICE(d);
  *free_b = CDEMO_CAPACITY - hwa_blocks_used(&blocks[d]);
  *total_b = CDEMO_CAPACITY;
  return HWA_OK;
}

#define FITS(props, field) (offsetof(HwaDeviceProperties, field) + sizeof((props)->field) <= (props)->struct_size)
static int get_properties(int d, HwaDeviceProperties *p) {
  CHECK_DEVICE(d);
  if (FITS(p, name)) snprintf(p->name, sizeof p->name, "cdemo emulated device %d", d);
  if (FITS(p, vendor)) snprintf(p->vendor, sizeof p->vendor, "hwadapter examples");
  if (FITS(p, driver_version)) snprintf(p->driver_version, sizeof p->driver_version, "cdemo 1.1");
  if (FITS(p, total_memory)) p->total_memory = CDEMO_CAPACITY;
  if (FITS(p, compute_units)) p->compute_units = 1;
  if (FITS(p, max_work_group_size)) p->max_work_group_size = 1;
  if (FITS(p, alignment)) p->alignment = ALIGNMENT;
  return HWA_OK;
}
static int set_device(int d) {
  CHECK_DEVICE(d);
  current_device = d;
  return HWA_OK;
}
static int get_device(int *d) {
  *d = current_device;
  return HWA_OK;
}

/* ---- streams and events: handles are checked; the work behind them is already done ---- */
static int handle_new(HwaBlocks *s, int d, void **out) {
  CHECK_DEVICE(d);
  int *h = malloc(sizeof *h);
  if (!h || hwa_blocks_add(s, h, 0, d) != HWA_OK) {
    free(h);
    return hwa_fail(HWA_OUT_OF_MEMORY, "cdemo: no host memory for a handle");
  }
  *out = h;
  return HWA_OK;
}
static int handle_check(HwaBlocks *s, int d, const void *h, int destroy, const char *what) {
  CHECK_DEVICE(d);
  int ok = destroy ? hwa_blocks_remove(s, h, d, NULL) : hwa_blocks_live(s, h, d);
  if (!ok) return hwa_fail(HWA_INVALID_ARGUMENT, "cdemo: %p is not a live %s of device %d", h, what, d);
  if (destroy) free((void *)h);
  return HWA_OK;
}
#define STREAM_OK(d, s) ((s) == NULL ? HWA_OK : handle_check(&streams, (d), (s), 0, "stream"))

static int stream_create(int d, HwaStream *s) { return handle_new(&streams, d, (void **)s); }
static int stream_destroy(int d, HwaStream s) { return handle_check(&streams, d, s, 1, "stream"); }
static int stream_synchronize(int d, HwaStream s) { return STREAM_OK(d, s); }
static int stream_query(int d, HwaStream s) { return STREAM_OK(d, s); }
static int stream_wait_event(int d, HwaStream s, HwaEvent e) {
  int rc = STREAM_OK(d, s);
  return rc != HWA_OK ? rc : handle_check(&events, d, e, 0, "event");
}
static int event_create(int d, HwaEvent *e) { return handle_new(&events, d, (void **)e); }
static int event_destroy(int d, HwaEvent e) { return handle_check(&events, d, e, 1, "event"); }
static int event_record(int d, HwaEvent e, HwaStream s) {
  int rc = STREAM_OK(d, s);
  return rc != HWA_OK ? rc : handle_check(&events, d, e, 0, "event");
}
static int event_query(int d, HwaEvent e) { return handle_check(&events, d, e, 0, "event"); }
static int event_synchronize(int d, HwaEvent e) { return handle_check(&events, d, e, 0, "event"); }

static int h2d_async(int d, HwaStream s, void *dst, const void *src, size_t n) {
  int rc = STREAM_OK(d, s);
  return rc != HWA_OK ? rc : memcpy_h2d(d, dst, src, n);
}
static int d2h_async(int d, HwaStream s, void *dst, const void *src, size_t n) {
  int rc = STREAM_OK(d, s);
  return rc != HWA_OK ? rc : memcpy_d2h(d, dst, src, n);
}
static int d2d_async(int d, HwaStream s, void *dst, const void *src, size_t n) {
  int rc = STREAM_OK(d, s);
  return rc != HWA_OK ? rc : memcpy_d2d(d, dst, src, n);
}
static int memset_async(int d, HwaStream s, void *dst, int value, size_t n) {
  int rc = STREAM_OK(d, s);
  return rc != HWA_OK ? rc : memset_(d, dst, value, n);
}

/* ---- kernels ---- */
static int64_t numel(const HwaTensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}

/* Element strides of x read at the index of `out` under numpy broadcasting (dims aligned right; size 1 repeats). */
static void broadcast_strides(const HwaTensor *x, const HwaTensor *out, int64_t *st) {
  int off = out->ndim - x->ndim;
  for (int d = 0; d < out->ndim; ++d) {
    int xd = d - off;
    st[d] = (xd < 0 || x->shape[xd] == 1) ? 0 : x->strides[xd];
  }
}

static int check_args(const char *op, size_t nin, size_t want_in, size_t nout, size_t na, const HwaTensor *out) {
  if (nin != want_in || nout != 1)
    return hwa_fail(HWA_INVALID_ARGUMENT, "cdemo %s: %zu inputs and %zu outputs, expected %zu and 1", op, nin, nout, want_in);
  if (out->ndim > MAX_DIMS) return hwa_fail(HWA_INVALID_ARGUMENT, "cdemo %s: more than %d dimensions", op, MAX_DIMS);
  (void)na;
  return HWA_OK;
}

/* A broadcasting elementwise kernel over type T: o = EXPR of A (input 0) and B (input 1). */
#define BINARY(NAME, T, EXPR)                                                                                     \
  static int NAME(int dev, HwaStream s, const HwaTensor *in, size_t nin, HwaTensor *out, size_t nout,            \
                  const HwaAttr *attrs, size_t na) {                                                             \
    (void)dev; (void)s; (void)attrs;                                                                              \
    int rc = check_args(#NAME, nin, 2, nout, na, out);                                                           \
    if (rc != HWA_OK) return rc;                                                                                 \
    if (na) return hwa_fail(HWA_INVALID_ARGUMENT, "cdemo " #NAME ": unexpected attribute %s", attrs[0].name);      \
    int64_t sa[MAX_DIMS], sb[MAX_DIMS], idx[MAX_DIMS] = {0}, ia = 0, ib = 0, io = 0, n = numel(out);            \
    broadcast_strides(&in[0], out, sa);                                                                           \
    broadcast_strides(&in[1], out, sb);                                                                           \
    const T *x = in[0].data, *y = in[1].data;                                                                     \
    T *o = out->data;                                                                                             \
    for (int64_t i = 0; i < n; ++i) {                                                                             \
      T A = x[ia], B = y[ib];                                                                                     \
      o[io] = (EXPR);                                                                                             \
      for (int d = out->ndim - 1; d >= 0; --d) { /* next index, odometer style */                                \
        if (++idx[d] < out->shape[d]) {                                                                           \
          ia += sa[d]; ib += sb[d]; io += out->strides[d];                                                         \
          break;                                                                                                  \
        }                                                                                                         \
        ia -= sa[d] * (out->shape[d] - 1); ib -= sb[d] * (out->shape[d] - 1);                                    \
        io -= out->strides[d] * (out->shape[d] - 1);                                                              \
        idx[d] = 0;                                                                                               \
      }                                                                                                           \
    }                                                                                                             \
    return HWA_OK;                                                                                                \
  }

BINARY(add_f32, float, A + B)
BINARY(mul_f32, float, A * B)
/* numpy's int64 wraps around; signed overflow in C is undefined, unsigned is not */
BINARY(add_i64, int64_t, (int64_t)((uint64_t)A + (uint64_t)B))
BINARY(mul_i64, int64_t, (int64_t)((uint64_t)A * (uint64_t)B))

static int relu_f32(int dev, HwaStream s, const HwaTensor *in, size_t nin, HwaTensor *out, size_t nout,
                    const HwaAttr *attrs, size_t na) {
  (void)dev; (void)s; (void)attrs;
  int rc = check_args("relu", nin, 1, nout, na, out);
  if (rc != HWA_OK) return rc;
  int64_t idx[MAX_DIMS] = {0}, ix = 0, io = 0, n = numel(out);
  const float *x = in[0].data;
  float *o = out->data;
  for (int64_t i = 0; i < n; ++i) {
    o[io] = x[ix] < 0 ? 0.0f : x[ix];  /* NaN stays NaN, as np.maximum(x, 0) */
    for (int d = out->ndim - 1; d >= 0; --d) {
      if (++idx[d] < out->shape[d]) {
        ix += in[0].strides[d]; io += out->strides[d];
        break;
      }
      ix -= in[0].strides[d] * (out->shape[d] - 1); io -= out->strides[d] * (out->shape[d] - 1);
      idx[d] = 0;
    }
  }
  return HWA_OK;
}

/* One matmul operand as a batch of matrices: rows x cols with element strides, batch dims before them. */
typedef struct {
  int64_t rows, cols, s_row, s_col;
  int batch_ndim;
} Operand;

static Operand operand(const HwaTensor *t, int transpose, int is_left) {
  Operand m;
  if (t->ndim == 1) {  /* numpy: a 1-D left operand is a row, a 1-D right operand a column */
    m.rows = is_left ? 1 : t->shape[0];
    m.cols = is_left ? t->shape[0] : 1;
    m.s_row = is_left ? 0 : t->strides[0];
    m.s_col = is_left ? t->strides[0] : 0;
    m.batch_ndim = 0;
    return m;
  }
  int r = t->ndim - 2, c = t->ndim - 1;
  m.rows = transpose ? t->shape[c] : t->shape[r];
  m.cols = transpose ? t->shape[r] : t->shape[c];
  m.s_row = transpose ? t->strides[c] : t->strides[r];
  m.s_col = transpose ? t->strides[r] : t->strides[c];
  m.batch_ndim = t->ndim - 2;
  return m;
}

/* Offset of batch `b` (an index over the output's batch dims) in t, broadcasting t's batch dims. */
static int64_t batch_offset(const HwaTensor *t, int t_batch, const int64_t *b, int nb) {
  int64_t off = 0;
  for (int d = 0; d < t_batch; ++d) {
    int od = nb - t_batch + d;
    if (t->shape[d] != 1) off += b[od] * t->strides[d];
  }
  return off;
}

static int matmul_f32(int dev, HwaStream s, const HwaTensor *in, size_t nin, HwaTensor *out, size_t nout,
                      const HwaAttr *attrs, size_t na) {
  (void)dev; (void)s;
  if (nin != 2 || nout != 1) return hwa_fail(HWA_INVALID_ARGUMENT, "cdemo matmul: expected 2 inputs and 1 output");
  int tx = 0, ty = 0;
  for (size_t i = 0; i < na; ++i) {
    if (attrs[i].type == HWA_ATTR_INT && !strcmp(attrs[i].name, "transpose_x")) tx = attrs[i].i != 0;
    else if (attrs[i].type == HWA_ATTR_INT && !strcmp(attrs[i].name, "transpose_y")) ty = attrs[i].i != 0;
    else return hwa_fail(HWA_INVALID_ARGUMENT, "cdemo matmul: unexpected attribute %s", attrs[i].name);
  }
  if (in[0].ndim < 1 || in[1].ndim < 1) return hwa_fail(HWA_INVALID_ARGUMENT, "cdemo matmul: 0-d input");
  Operand a = operand(&in[0], tx, 1), b = operand(&in[1], ty, 0);
  if (a.cols != b.rows)
    return hwa_fail(HWA_INVALID_ARGUMENT, "cdemo matmul: inner dimensions %lld and %lld differ", (long long)a.cols,
                (long long)b.rows);
  /* output: batch dims, then M (unless x is 1-D), then N (unless y is 1-D) */
  int nb = out->ndim - (in[0].ndim > 1) - (in[1].ndim > 1);
  if (nb < 0 || nb > MAX_DIMS) return hwa_fail(HWA_INVALID_ARGUMENT, "cdemo matmul: output has %d dims", out->ndim);
  int64_t so_m = in[0].ndim > 1 ? out->strides[nb] : 0;
  int64_t so_n = in[1].ndim > 1 ? out->strides[out->ndim - 1] : 0;
  int64_t batches = 1, bidx[MAX_DIMS] = {0};
  for (int d = 0; d < nb; ++d) batches *= out->shape[d];
  const float *x = in[0].data, *y = in[1].data;
  float *o = out->data;
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t xo = batch_offset(&in[0], a.batch_ndim, bidx, nb), yo = batch_offset(&in[1], b.batch_ndim, bidx, nb);
    int64_t oo = 0;
    for (int d = 0; d < nb; ++d) oo += bidx[d] * out->strides[d];
    for (int64_t m = 0; m < a.rows; ++m)
      for (int64_t n = 0; n < b.cols; ++n) {
        double acc = 0;  /* a double accumulator: closer to the exact product than float32 BLAS, never further */
        for (int64_t k = 0; k < a.cols; ++k)
          acc += (double)x[xo + m * a.s_row + k * a.s_col] * (double)y[yo + k * b.s_row + n * b.s_col];
        o[oo + m * so_m + n * so_n] = (float)acc;
      }
    for (int d = nb - 1; d >= 0; --d) {
      if (++bidx[d] < out->shape[d]) break;
      bidx[d] = 0;
    }
  }
  return HWA_OK;
}

static const int32_t F32_F32[] = {HWA_FLOAT32, HWA_FLOAT32}, I64_I64[] = {HWA_INT64, HWA_INT64}, F32[] = {HWA_FLOAT32};
static const HwaKernelDef kernels[] = {
    {"add", 2, F32_F32, add_f32}, {"add", 2, I64_I64, add_i64}, {"mul", 2, F32_F32, mul_f32},
    {"mul", 2, I64_I64, mul_i64}, {"relu", 1, F32, relu_f32},   {"matmul", 2, F32_F32, matmul_f32},
};

static const HwaDeviceInterface api = {
    .struct_size = sizeof(HwaDeviceInterface),
    .api_major = HWA_API_MAJOR,
    .api_minor = HWA_API_MINOR,
    .device_type = "cdemo",
    .device_count = device_count,
    .allocate = allocate,
    .deallocate = deallocate,
    .memcpy_h2d = memcpy_h2d,
    .memcpy_d2h = memcpy_d2h,
    .memcpy_d2d = memcpy_d2d,
    .memset = memset_,
    .synchronize = synchronize,
    .memory_info = memory_info,
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
    .memcpy_h2d_async = h2d_async,
    .memcpy_d2h_async = d2h_async,
    .memcpy_d2d_async = d2d_async,
    .memset_async = memset_async,
    .last_error = hwa_last_error,
    .num_kernels = sizeof kernels / sizeof kernels[0],
    .kernels = kernels,
};

const HwaDeviceInterface *hwadapter_get_device_interface(void) { return &api; }
