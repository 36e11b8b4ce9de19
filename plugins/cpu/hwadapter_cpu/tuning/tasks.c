/* conv2d's and float32 matmul's tasks for the native crew (crew.c), over the transforms (transforms.c), the direct
 * depthwise convolution (depthwise.c) and BLAS's sgemm: each task is one range of one phase, all of its work in C, so
 * a call never takes the GIL. blasconv.py and matmul.py plan the phases and fill the parameters; blasconv.py's Python
 * form runs the same conv2d phases on one thread when numpy's BLAS cannot be called from C. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The parameters of one image's conv2d, an int64 array filled by blasconv.py (pointers as integers). */
enum {
  P_X, P_OUT, P_WEIGHT, P_BIAS, P_RES, P_REP, P_COLS, P_RAW, P_SGEMM, P_ILP64, P_FAILED,
  P_C, P_H, P_IW, P_O, P_OH, P_OW, P_KH, P_KW, P_SH, P_SW, P_PT, P_PL, P_DH, P_DW,
  P_RELU, P_EPILOGUE, P_DIRECT, P_TILE, P_TW, P_GROUPS, P_TRANSB, P_ACT, P_PARTS, P_SPAN, P_COUNT
};
enum { K_WINOGRAD, K_BAND, K_PATCHES, K_BLOCK, K_STORE, K_ROWS, K_COLUMNS, K_DOTS, K_DEPTHWISE, K_GROUPS, K_IGEMM,
       K_LINEAR, K_WINOGRAD_CHANNELS };

#define PTR(type, i) ((type *)(intptr_t)p[i])

/* c (m x n, row stride ldc) = a (m x k) b (k x n), row-major, through the cblas_sgemm blasconv.py found; with
 * P_TRANSB, b is stored transposed (n x k). */
static void gemm(const int64_t *p, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float *c, int64_t ldc) {
  sgemm_call(p[P_SGEMM], p[P_ILP64], 111, p[P_TRANSB] ? 112 : 111, m, n, k, a, lda, b, ldb, c, ldc);
}

/* Each thread's scratch, kept between calls (fresh megabytes fault in) and freed when the thread ends. */
typedef struct {
  float *buf[2];
  size_t cap[2];
} scratch_t;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *s) {
  scratch_t *t = s;
  free(t->buf[0]);
  free(t->buf[1]);
  free(t);
}
static void scratch_key_make(void) { pthread_key_create(&scratch_key, scratch_free); }

/* This thread's scratch `which` of at least n floats, or NULL (out of memory: the call says so). */
static float *scratch(int which, int64_t n) {
  pthread_once(&scratch_once, scratch_key_make);
  scratch_t *t = pthread_getspecific(scratch_key);
  if (!t) {
    if (!(t = calloc(1, sizeof *t))) return NULL;
    pthread_setspecific(scratch_key, t);
  }
  size_t bytes = ((size_t)n * sizeof(float) + 63) & ~(size_t)63;
  if (t->cap[which] < bytes) {
    void *buf = NULL;
    free(t->buf[which]);
    t->buf[which] = posix_memalign(&buf, 64, bytes ? bytes : 64) == 0 ? buf : NULL;
    t->cap[which] = t->buf[which] ? bytes : 0;
  }
  return t->buf[which];
}

static void failed(const int64_t *p) { /* the call's flag: blasconv.py raises MemoryError */ __atomic_store_n(PTR(int64_t, P_FAILED), 1, __ATOMIC_RELAXED); }

/* Winograd over tile rows [ty0, ty1) and output channels [o0, o1): the tiles' input transform, (tile + 2)^2 products
 * of those channels' weights, their output with the epilogue. P_REP (a channel reading another's row of products)
 * comes only with every channel (blasconv.py never shares channels then). */
static void winograd(const int64_t *p, int64_t ty0, int64_t ty1, int64_t o0, int64_t o1) {
  int64_t n = p[P_TILE] + 2, planes = n * n, c = p[P_C], o = p[P_O], k = o1 - o0, plane = p[P_OH] * p[P_OW];
  int64_t tiles = (ty1 - ty0) * p[P_TW];
  float *v = scratch(0, planes * c * tiles), *m = scratch(1, planes * k * tiles);
  if (!v || !m) {
    failed(p);
    return;
  }
  const float *x = PTR(const float, P_X), *u = PTR(const float, P_WEIGHT), *bias = PTR(const float, P_BIAS);
  const float *res = PTR(const float, P_RES);
  if (p[P_TILE] == 2)
    hwa_winograd_input(x, v, c, p[P_H], p[P_IW], p[P_PT], p[P_PL], p[P_TW], ty0, ty1);
  else
    hwa_winograd4_input(x, v, c, p[P_H], p[P_IW], p[P_PT], p[P_PL], p[P_TW], ty0, ty1);
  for (int64_t i = 0; i < planes; i++)
    gemm(p, k, tiles, c, u + (i * o + o0) * c, c, v + i * c * tiles, tiles, m + i * k * tiles, tiles);
  float *out = PTR(float, P_OUT) + o0 * plane;
  if (bias) bias += o0;
  if (res) res += o0 * plane;
  if (p[P_TILE] == 2)
    hwa_winograd_output(m, out, bias, res, PTR(const int64_t, P_REP), k, p[P_TW], p[P_OH], p[P_OW], p[P_RELU], ty0,
                        ty1);
  else
    hwa_winograd4_output(m, out, bias, res, PTR(const int64_t, P_REP), k, p[P_TW], p[P_OH], p[P_OW], p[P_RELU], ty0,
                         ty1);
}

/* Winograd, tile rows [ty0, ty1), every channel. */
static void task_winograd(const int64_t *p, int64_t ty0, int64_t ty1) { winograd(p, ty0, ty1, 0, p[P_O]); }

/* Winograd, output channels [o0, o1) over the whole image: for small images, whose few tile rows split unevenly into
 * bands (7 rows: 4 and 3); each task transforms the whole input (about 1/o of the products). */
static void task_winograd_channels(const int64_t *p, int64_t o0, int64_t o1) {
  winograd(p, 0, (p[P_OH] + p[P_TILE] - 1) / p[P_TILE], o0, o1);
}

/* Output rows [y0, y1): their patches (a 1x1 stride-1 convolution reads the input as they are), one product per
 * group straight into the output's columns, the epilogue in place. */
static void task_band(const int64_t *p, int64_t y0, int64_t y1) {
  int64_t ow = p[P_OW], points = p[P_OH] * ow, q0 = y0 * ow, q1 = y1 * ow, o = p[P_O], groups = p[P_GROUPS];
  int64_t cg = p[P_C] / groups, og = o / groups, k = cg * p[P_KH] * p[P_KW];
  float *cols = p[P_DIRECT] ? NULL : scratch(0, k * (q1 - q0));
  if (!p[P_DIRECT] && !cols) {
    failed(p);
    return;
  }
  for (int64_t g = 0; g < groups; g++) {
    const float *x = PTR(const float, P_X) + g * cg * p[P_H] * p[P_IW], *b = x + q0;
    int64_t ldb = points;
    if (cols) {
      hwa_im2col(x, cols, cg, p[P_H], p[P_IW], p[P_KH], p[P_KW], p[P_SH], p[P_SW], p[P_PT], p[P_PL], p[P_DH],
                 p[P_DW], ow, y0, y1);
      b = cols;
      ldb = q1 - q0;
    }
    gemm(p, og, q1 - q0, k, PTR(const float, P_WEIGHT) + g * og * k, k, b, ldb,
         PTR(float, P_OUT) + g * og * points + q0, points);
  }
  if (p[P_EPILOGUE])
    hwa_epilogue(PTR(float, P_OUT), PTR(const float, P_BIAS), PTR(const float, P_RES), PTR(const int64_t, P_REP),
                 points, p[P_RELU], 0, o, q0, q1);
}

/* Groups [g0, g1) of a grouped convolution over the whole image, for images too small to share by bands of rows:
 * each group's patches, its product straight into its output channels, the epilogue on them. */
static void task_groups(const int64_t *p, int64_t g0, int64_t g1) {
  int64_t points = p[P_OH] * p[P_OW], o = p[P_O], groups = p[P_GROUPS];
  int64_t cg = p[P_C] / groups, og = o / groups, k = cg * p[P_KH] * p[P_KW];
  float *cols = p[P_DIRECT] ? NULL : scratch(0, k * points);
  if (!p[P_DIRECT] && !cols) {
    failed(p);
    return;
  }
  for (int64_t g = g0; g < g1; g++) {
    const float *x = PTR(const float, P_X) + g * cg * p[P_H] * p[P_IW], *b = x;
    if (cols) {
      hwa_im2col(x, cols, cg, p[P_H], p[P_IW], p[P_KH], p[P_KW], p[P_SH], p[P_SW], p[P_PT], p[P_PL], p[P_DH],
                 p[P_DW], p[P_OW], 0, p[P_OH]);
      b = cols;
    }
    gemm(p, og, points, k, PTR(const float, P_WEIGHT) + g * og * k, k, b, points, PTR(float, P_OUT) + g * og * points,
         points);
  }
  if (p[P_EPILOGUE])
    hwa_epilogue(PTR(float, P_OUT), PTR(const float, P_BIAS), PTR(const float, P_RES), PTR(const int64_t, P_REP),
                 points, p[P_RELU], g0 * og, g1 * og, 0, points);
}

/* Input channels [c0, c1): their rows of the whole image's patches, in the shared P_COLS. */
static void task_patches(const int64_t *p, int64_t c0, int64_t c1) {
  int64_t points = p[P_OH] * p[P_OW];
  hwa_im2col(PTR(const float, P_X) + c0 * p[P_H] * p[P_IW], PTR(float, P_COLS) + c0 * p[P_KH] * p[P_KW] * points,
             c1 - c0, p[P_H], p[P_IW], p[P_KH], p[P_KW], p[P_SH], p[P_SW], p[P_PT], p[P_PL], p[P_DH], p[P_DW], p[P_OW],
             0, p[P_OH]);
}

/* Output channels [a, z): their rows of the product, into the output with the epilogue, or into P_RAW for the
 * store phase when a row map may read another block's rows. */
static void task_block(const int64_t *p, int64_t a, int64_t z) {
  int64_t points = p[P_OH] * p[P_OW], k = p[P_C] * p[P_KH] * p[P_KW];
  const float *b = p[P_DIRECT] ? PTR(const float, P_X) : PTR(const float, P_COLS);
  float *dst = p[P_RAW] ? PTR(float, P_RAW) : PTR(float, P_OUT);
  gemm(p, z - a, points, k, PTR(const float, P_WEIGHT) + a * k, k, b, points, dst + a * points, points);
  if (!p[P_RAW] && p[P_EPILOGUE])
    hwa_epilogue(PTR(float, P_OUT), PTR(const float, P_BIAS), PTR(const float, P_RES), NULL, points, p[P_RELU], a,
                 z, 0, points);
}

/* Output channels [a, z) from P_RAW, each from its row map's row, with the epilogue. */
static void task_store(const int64_t *p, int64_t a, int64_t z) {
  int64_t points = p[P_OH] * p[P_OW];
  hwa_store(PTR(float, P_OUT), PTR(const float, P_RAW), PTR(const float, P_BIAS), PTR(const float, P_RES),
            PTR(const int64_t, P_REP), points, 0, points, a, z, p[P_RELU]);
}

/* float32 matmul (matmul.py) uses the same slots: P_X the left operand (P_OH rows x P_C), P_WEIGHT the right (P_C x
 * P_OW, or P_OW x P_C with P_TRANSB), P_OUT the product (P_OH x P_OW); with P_EPILOGUE, a linear layer's: P_BIAS
 * (P_OW values, or none) added to each row, then activation P_ACT (depthwise.c's ACT_* codes). Its tasks: bands of
 * rows, or of columns when there are few rows, each applying the epilogue to its band while it is in the cache. */
static void linear_epilogue(const int64_t *p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  int64_t n = p[P_OW];
  const float *bias = PTR(const float, P_BIAS);
  for (int64_t r = r0; r < r1; r++) {
    float *o = PTR(float, P_OUT) + r * n;
    if (bias)
      for (int64_t j = c0; j < c1; j++) o[j] += bias[j];
    if (p[P_ACT]) dw_act(o + c0, c1 - c0, p[P_ACT]);
  }
}

static void task_rows(const int64_t *p, int64_t r0, int64_t r1) {
  int64_t k = p[P_C], n = p[P_OW];
  gemm(p, r1 - r0, n, k, PTR(const float, P_X) + r0 * k, k, PTR(const float, P_WEIGHT), p[P_TRANSB] ? k : n,
       PTR(float, P_OUT) + r0 * n, n);
  if (p[P_EPILOGUE]) linear_epilogue(p, r0, r1, 0, n);
}

static void task_columns(const int64_t *p, int64_t c0, int64_t c1) {
  int64_t k = p[P_C], n = p[P_OW];
  const float *b = PTR(const float, P_WEIGHT) + (p[P_TRANSB] ? c0 * k : c0);
  gemm(p, p[P_OH], c1 - c0, k, PTR(const float, P_X), k, b, p[P_TRANSB] ? k : n, PTR(float, P_OUT) + c0, n);
  if (p[P_EPILOGUE]) linear_epilogue(p, 0, p[P_OH], c0, c1);
}

/* Rows [r0, r1) of a product made elsewhere (numpy's threaded call, a batched one): the linear epilogue alone. */
static void task_linear(const int64_t *p, int64_t r0, int64_t r1) { linear_epilogue(p, r0, r1, 0, p[P_OW]); }

/* A product with few rows (matmul.py's DOT_ROWS), columns [c0, c1): every output element summed by the same code in
 * the same order, whatever the band it falls in, its place in the band and the number of bands, so that equal columns
 * of the right operand give bit-equal output columns (BLAS does not: OpenBLAS picks its kernel by the call's shape,
 * and a narrower last band, or the last columns of a call, round differently; the onnx light models' fills need
 * them equal: AlexNet's 1000 equal logits of 3.6e12 must stay equal for its uniform softmax). With few rows the
 * product is bound by reading the right operand once, which these loops do as fast as BLAS's gemv. */
#define DOT_LANES 16

/* The running sums of a[i] b[i] for i < k, DOT_LANES of them (vectorised), added pairwise in a fixed order. */
static float lanes_sum(float *acc) {
  for (int w = DOT_LANES / 2; w; w /= 2)
    for (int l = 0; l < w; l++) acc[l] += acc[l + w];
  return acc[0];
}

/* DOT_LANES floats as one value of GCC's vector extension: the running sums stay in registers (as float arrays they
 * lived on the stack, each step a store and a reload), with the same lanes and the same order of additions */
typedef float dot_vec __attribute__((vector_size(DOT_LANES * sizeof(float))));

static inline dot_vec dot_load(const float *p) {
  dot_vec v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* dot(a, b[c], k) for c < `count` (at most 4), each summed exactly as dot sums it (a read once for all). */
static inline __attribute__((always_inline)) void dots(const float *restrict a, const float *const *b, int count,
                                                       int64_t k, float *out) {
  dot_vec s[4] = {{0}, {0}, {0}, {0}};
  int64_t i = 0;
  for (; i + DOT_LANES <= k; i += DOT_LANES) {
    dot_vec v = dot_load(a + i);
    for (int c = 0; c < count; c++) s[c] += v * dot_load(b[c] + i); /* no contraction: a product, then a sum */
  }
  for (int c = 0; c < count; c++) {
    float acc[DOT_LANES];
    memcpy(acc, &s[c], sizeof acc);
    for (int l = 0; i + l < k; l++) acc[l] += a[i + l] * b[c][i + l];
    out[c] = lanes_sum(acc);
  }
}

static float dot(const float *restrict a, const float *restrict b, int64_t k) {
  const float *rows[1] = {b};
  float v;
  dots(a, rows, 1, k, &v);
  return v;
}

/* dot(a, b[c], k) for c < 4. */
static void dot4(const float *restrict a, const float *restrict b0, const float *restrict b1,
                 const float *restrict b2, const float *restrict b3, int64_t k, float *out) {
  const float *b[4] = {b0, b1, b2, b3};
  dots(a, b, 4, k, out);
}

static void task_dots(const int64_t *p, int64_t c0, int64_t c1) {
  int64_t k = p[P_C], n = p[P_OW], m = p[P_OH];
  const float *x = PTR(const float, P_X), *y = PTR(const float, P_WEIGHT);
  float *out = PTR(float, P_OUT);
  if (p[P_TRANSB]) { /* column j is row j of y: one dot product per output element, four columns at a time */
    int64_t j = c0;
    for (; j + 4 <= c1; j += 4)
      for (int64_t r = 0; r < m; r++) {
        float v[4];
        const float *b = y + j * k;
        dot4(x + r * k, b, b + k, b + 2 * k, b + 3 * k, k, v);
        for (int c = 0; c < 4; c++) out[r * n + j + c] = v[c];
      }
    for (; j < c1; j++)
      for (int64_t r = 0; r < m; r++) out[r * n + j] = dot(x + r * k, y + j * k, k);
    if (p[P_EPILOGUE]) linear_epilogue(p, 0, m, c0, c1);
    return;
  }
  /* y is k x n: each output row's band summed over y's rows in order, y's band read once for all rows */
  for (int64_t r = 0; r < m; r++)
    for (int64_t j = c0; j < c1; j++) out[r * n + j] = 0.0f;
  for (int64_t i = 0; i < k; i++) {
    const float *restrict row = y + i * n;
    for (int64_t r = 0; r < m; r++) {
      float a = x[r * k + i], *restrict o = out + r * n;
      for (int64_t j = c0; j < c1; j++) o[j] += a * row[j];
    }
  }
  if (p[P_EPILOGUE]) linear_epilogue(p, 0, m, c0, c1);
}

/* A depthwise conv2d (depthwise.c) over the whole batch: output planes [q0, q1) (image-major, P_O per image), each
 * read from input plane q / (P_O / P_C); P_TILE the layout (hwa_depthwise_layout's), P_ACT the activation code. */
static void task_depthwise(const int64_t *p, int64_t q0, int64_t q1) {
  float *buf = scratch(0, hwa_depthwise_scratch(p[P_TILE], p[P_H], p[P_IW], p[P_OH], p[P_OW], p[P_KH], p[P_KW],
                                                p[P_SH], p[P_SW], p[P_DH], p[P_DW]));
  if (!buf) {
    failed(p);
    return;
  }
  hwa_depthwise(p[P_TILE], PTR(const float, P_X), PTR(const float, P_WEIGHT), PTR(const float, P_BIAS),
                PTR(const float, P_RES), PTR(float, P_OUT), buf, p[P_C], p[P_O] / p[P_C], p[P_H], p[P_IW], p[P_OH],
                p[P_OW], p[P_KH], p[P_KW], p[P_SH], p[P_SW], p[P_PT], p[P_PL], p[P_DH], p[P_DW], p[P_ACT], q0, q1);
}

/* An implicit product (igemm.c), units [u0, u1): P_WEIGHT its packed weights, P_PARTS the blocks of channels a
 * run of P_SPAN strips is cut into, P_ACT the activation code. */
static void task_igemm(const int64_t *p, int64_t u0, int64_t u1) {
  float *buf = scratch(0, hwa_igemm_scratch(p[P_C] / p[P_GROUPS] * p[P_KH] * p[P_KW], p[P_SPAN]));
  if (!buf) {
    failed(p);
    return;
  }
  hwa_igemm(PTR(const float, P_X), PTR(const float, P_WEIGHT), PTR(const float, P_BIAS), PTR(const float, P_RES),
            PTR(float, P_OUT), buf, p[P_C], p[P_H], p[P_IW], p[P_O], p[P_OH], p[P_OW], p[P_KH], p[P_KW], p[P_SH],
            p[P_SW], p[P_PT], p[P_PL], p[P_DH], p[P_DW], p[P_ACT], p[P_GROUPS], p[P_PARTS], p[P_SPAN], u0, u1);
}

/* One phase: the task `kind` for each of `count` ranges, shared with `crew`. Returns 0, or -1 when a thread's
 * scratch could not be allocated. */
int64_t hwa_phase(hwa_crew *crew, int64_t kind, int64_t *p, const int64_t *ranges, int64_t count) {
  static const hwa_task tasks[] = {task_winograd, task_band, task_patches, task_block, task_store, task_rows,
                                   task_columns, task_dots, task_depthwise, task_groups, task_igemm, task_linear,
                                   task_winograd_channels};
  if (kind < 0 || kind > K_WINOGRAD_CHANNELS) return -1;
  int64_t fail = 0;
  p[P_FAILED] = (int64_t)(intptr_t)&fail;
  hwa_crew_run(crew, tasks[kind], p, ranges, count);
  return fail ? -1 : 0;
}
