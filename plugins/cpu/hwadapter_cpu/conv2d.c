/* float32 conv2d as one product per image: out (O x P) = weights (O x K) @ patches (K x P), P the output positions,
 * K = C*kh*kw. The patches are packed once per image, in strips of 16 positions (im2col and packing in one pass,
 * reading the unpadded input, padding as zeros), then consumed by a 6x16 register tile of FMAs (6 output channels,
 * their weight rows read in place, by 16 positions) with bias, a residual and relu applied as the last block of K is
 * stored.
 * The OpenMP threads share the strips out for packing, then take tasks (a block of channels by a block of strips)
 * in turn. */
#define _POSIX_C_SOURCE 200112L /* posix_memalign under -std=c99 */
#include <stdint.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#define MR 6      /* output channels per register tile */
#define NR 16     /* output positions per register tile (two 8-float vectors) */
#define KC 256    /* rows of K per block: a block of a strip (KC x NR floats, 16 KiB) stays in L1 */
#define TASKS 16  /* tasks to aim for per image, at least: the threads take them in turn */
#define STRIPS 12 /* strips of NR positions per task, at most */
#define MAX_TAPS 16 /* kernel height and width packed by the one-row path; larger ones take the general path */

typedef struct {
  int64_t c, h, w, o, kh, kw, sh, sw, pt, pl, dh, dw, oh, ow;
} Shape;

/* The output positions of strip p0..p0+NR (-1 past the last). */
static void columns(const Shape *s, int64_t p0, int64_t *cols) {
  for (int q = 0; q < NR; q++) cols[q] = p0 + q < s->oh * s->ow ? p0 + q : -1;
}

/* Pack all K rows of the patch matrix for the NR positions p0.. into dst (K x NR), zeros where cols < 0. */
static void pack_strip(const float *x, const Shape *s, int64_t p0, float *dst) {
  int64_t cols[NR];
  columns(s, p0, cols);
  /* the strip's positions as runs along output rows: each run reads one input row with the stride */
  int64_t ry[NR], rx[NR], rlen[NR], nruns = 0;
  for (int q = 0; q < NR;) {
    if (cols[q] < 0) {
      ry[nruns] = -1, rx[nruns] = 0, rlen[nruns] = 1;
    } else {
      int len = 1;
      while (q + len < NR && cols[q + len] == cols[q] + len && (cols[q] + len) % s->ow) len++;
      ry[nruns] = cols[q] / s->ow, rx[nruns] = cols[q] % s->ow, rlen[nruns] = len;
    }
    q += rlen[nruns++];
  }
  const int64_t taps = s->kh * s->kw, plane = s->h * s->w, sw = s->sw;
  if (nruns == 1 && rlen[0] == NR && s->kh <= MAX_TAPS && s->kw <= MAX_TAPS) {
    /* the common case, one output row: which taps read inside the input depends on (i, j) only, not on the
     * channel, so it is worked out once and the rows are copied channel by channel */
    int64_t iy[MAX_TAPS], ix0[MAX_TAPS], lo[MAX_TAPS], hi[MAX_TAPS];
    for (int64_t i = 0; i < s->kh; i++) iy[i] = ry[0] * s->sh - s->pt + i * s->dh;
    for (int64_t j = 0; j < s->kw; j++) {
      ix0[j] = rx[0] * sw - s->pl + j * s->dw;
      lo[j] = ix0[j] >= 0 ? 0 : (-ix0[j] + sw - 1) / sw;
      hi[j] = ix0[j] >= s->w ? 0 : (s->w - ix0[j] + sw - 1) / sw;
      if (hi[j] > NR) hi[j] = NR;
      if (lo[j] > hi[j]) lo[j] = hi[j];
    }
    for (int64_t ch = 0; ch < s->c; ch++)
      for (int64_t i = 0; i < s->kh; i++) {
        const int inside = iy[i] >= 0 && iy[i] < s->h;
        const float *row = x + ch * plane + (inside ? iy[i] : 0) * s->w;
        for (int64_t j = 0; j < s->kw; j++, dst += NR) {
          if (inside && sw == 1 && lo[j] == 0 && hi[j] == NR) {
            for (int t = 0; t < NR; t++) dst[t] = row[ix0[j] + t];
            continue;
          }
          const int64_t a = inside ? lo[j] : NR, b = inside ? hi[j] : NR;
          for (int64_t t = 0; t < a; t++) dst[t] = 0.0f;
          for (int64_t t = a; t < b; t++) dst[t] = row[ix0[j] + t * sw];
          for (int64_t t = b; t < NR; t++) dst[t] = 0.0f;
        }
      }
    return;
  }
  for (int64_t k = 0; k < s->c * taps; k++, dst += NR) {
    const int64_t i = (k % taps) / s->kw, j = k % s->kw;
    const float *src = x + k / taps * plane;
    float *d = dst;
    for (int64_t r = 0; r < nruns; d += rlen[r], r++) {
      const int64_t iy = ry[r] * s->sh - s->pt + i * s->dh, len = rlen[r];
      if (ry[r] < 0 || iy < 0 || iy >= s->h) {
        for (int64_t t = 0; t < len; t++) d[t] = 0.0f;
        continue;
      }
      /* t in [lo, hi) reads inside the row: ix = ix0 + t*sw in [0, w) */
      const float *row = src + iy * s->w;
      const int64_t ix0 = rx[r] * sw - s->pl + j * s->dw;
      int64_t lo = ix0 >= 0 ? 0 : (-ix0 + sw - 1) / sw, hi = ix0 >= s->w ? 0 : (s->w - ix0 + sw - 1) / sw;
      if (hi > len) hi = len;
      if (lo > hi) lo = hi;
      if (sw == 1 && lo == 0 && hi == NR) { /* the common case, a whole strip inside one row: fixed-size copy */
        for (int t = 0; t < NR; t++) d[t] = row[ix0 + t];
        continue;
      }
      for (int64_t t = 0; t < lo; t++) d[t] = 0.0f;
      for (int64_t t = lo; t < hi; t++) d[t] = row[ix0 + t * sw];
      for (int64_t t = hi; t < len; t++) d[t] = 0.0f;
    }
  }
}

/* c[r][0..NR) = (or +=) a[r][0..kc) @ B for r < MR, where row k of B is ROW; then + bias[r] and relu when given.
 * 12 accumulators, 2 vectors of B and a broadcast: 15 of the 16 registers, so B stays in registers. */
#ifdef __AVX2__
#define TILE(NAME, ROW)                                                                                            \
  static void NAME(int64_t kc, const float *const *a, const float *b, float *const *c, int accumulate,            \
                   const float *bias, const float *const *res, int relu) {                                        \
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;                                            \
    if (accumulate) {                                                                                             \
      c00 = _mm256_loadu_ps(c[0]); c01 = _mm256_loadu_ps(c[0] + 8);                                               \
      c10 = _mm256_loadu_ps(c[1]); c11 = _mm256_loadu_ps(c[1] + 8);                                               \
      c20 = _mm256_loadu_ps(c[2]); c21 = _mm256_loadu_ps(c[2] + 8);                                               \
      c30 = _mm256_loadu_ps(c[3]); c31 = _mm256_loadu_ps(c[3] + 8);                                               \
      c40 = _mm256_loadu_ps(c[4]); c41 = _mm256_loadu_ps(c[4] + 8);                                               \
      c50 = _mm256_loadu_ps(c[5]); c51 = _mm256_loadu_ps(c[5] + 8);                                               \
    } else {                                                                                                      \
      c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();                \
    }                                                                                                             \
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];                          \
    for (int64_t k = 0; k < kc; k++) {                                                                            \
      const float *row = ROW;                                                                                     \
      const __m256 b0 = _mm256_loadu_ps(row), b1 = _mm256_loadu_ps(row + 8);                                      \
      __m256 w = _mm256_broadcast_ss(a0 + k);                                                                     \
      c00 = _mm256_fmadd_ps(w, b0, c00); c01 = _mm256_fmadd_ps(w, b1, c01);                                       \
      w = _mm256_broadcast_ss(a1 + k);                                                                            \
      c10 = _mm256_fmadd_ps(w, b0, c10); c11 = _mm256_fmadd_ps(w, b1, c11);                                       \
      w = _mm256_broadcast_ss(a2 + k);                                                                            \
      c20 = _mm256_fmadd_ps(w, b0, c20); c21 = _mm256_fmadd_ps(w, b1, c21);                                       \
      w = _mm256_broadcast_ss(a3 + k);                                                                            \
      c30 = _mm256_fmadd_ps(w, b0, c30); c31 = _mm256_fmadd_ps(w, b1, c31);                                       \
      w = _mm256_broadcast_ss(a4 + k);                                                                            \
      c40 = _mm256_fmadd_ps(w, b0, c40); c41 = _mm256_fmadd_ps(w, b1, c41);                                       \
      w = _mm256_broadcast_ss(a5 + k);                                                                            \
      c50 = _mm256_fmadd_ps(w, b0, c50); c51 = _mm256_fmadd_ps(w, b1, c51);                                       \
    }                                                                                                             \
    __m256 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};                 \
    const __m256 zero = _mm256_setzero_ps();                                                                      \
    for (int r = 0; r < MR; r++)                                                                                  \
      for (int v = 0; v < 2; v++) {                                                                               \
        __m256 t = acc[r][v];                                                                                     \
        if (bias) t = _mm256_add_ps(t, _mm256_broadcast_ss(bias + r));                                            \
        if (res) t = _mm256_add_ps(t, _mm256_loadu_ps(res[r] + 8 * v));                                            \
        if (relu) t = _mm256_max_ps(zero, t); /* max(0, NaN) is NaN, as numpy's maximum */                        \
        _mm256_storeu_ps(c[r] + 8 * v, t);                                                                        \
      }                                                                                                           \
  }
/* The same for a strip of at most 8 positions (the last of a small image): half the FMAs. */
static void tile8(int64_t kc, const float *const *a, const float *b, float *const *c, int accumulate,
                  const float *bias, const float *const *res, int relu) {
  __m256 acc[MR];
  for (int r = 0; r < MR; r++) acc[r] = accumulate ? _mm256_loadu_ps(c[r]) : _mm256_setzero_ps();
  const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
  for (int64_t k = 0; k < kc; k++, b += NR) {
    const __m256 b0 = _mm256_loadu_ps(b);
    acc[0] = _mm256_fmadd_ps(_mm256_broadcast_ss(a0 + k), b0, acc[0]);
    acc[1] = _mm256_fmadd_ps(_mm256_broadcast_ss(a1 + k), b0, acc[1]);
    acc[2] = _mm256_fmadd_ps(_mm256_broadcast_ss(a2 + k), b0, acc[2]);
    acc[3] = _mm256_fmadd_ps(_mm256_broadcast_ss(a3 + k), b0, acc[3]);
    acc[4] = _mm256_fmadd_ps(_mm256_broadcast_ss(a4 + k), b0, acc[4]);
    acc[5] = _mm256_fmadd_ps(_mm256_broadcast_ss(a5 + k), b0, acc[5]);
  }
  for (int r = 0; r < MR; r++) {
    __m256 t = acc[r];
    if (bias) t = _mm256_add_ps(t, _mm256_broadcast_ss(bias + r));
    if (res) t = _mm256_add_ps(t, _mm256_loadu_ps(res[r]));
    if (relu) t = _mm256_max_ps(_mm256_setzero_ps(), t);
    _mm256_storeu_ps(c[r], t);
  }
}
#else
#define TILE(NAME, ROW)                                                                                            \
  static void NAME(int64_t kc, const float *const *a, const float *b, float *const *c, int accumulate,            \
                   const float *bias, const float *const *res, int relu) {                                        \
    float acc[MR][NR];                                                                                            \
    for (int r = 0; r < MR; r++)                                                                                  \
      for (int q = 0; q < NR; q++) acc[r][q] = accumulate ? c[r][q] : 0.0f;                                      \
    for (int64_t k = 0; k < kc; k++) {                                                                            \
      const float *row = ROW;                                                                                     \
      for (int r = 0; r < MR; r++)                                                                                \
        for (int q = 0; q < NR; q++) acc[r][q] += a[r][k] * row[q];                                               \
    }                                                                                                             \
    for (int r = 0; r < MR; r++)                                                                                  \
      for (int q = 0; q < NR; q++) {                                                                              \
        float t = acc[r][q] + (bias ? bias[r] : 0.0f) + (res ? res[r][q] : 0.0f);                                 \
        if (relu && t < 0.0f) t = 0.0f;                                                                           \
        c[r][q] = t;                                                                                              \
      }                                                                                                           \
  }
#endif
TILE(tile, b + k * NR)
#ifndef __AVX2__
#define tile8 tile
#endif

/* One task: channels m0..m1 by strips s0..s1 of one image, over all of K, from the packed strips. */
static void task(const float *packed, const float *wt, const float *bias, const float *residual, float *out,
                 const Shape *s, int64_t m0, int64_t m1, int64_t s0, int64_t s1, int relu, const float *zeros) {
  const int64_t kdim = s->c * s->kh * s->kw, npos = s->oh * s->ow;
  float edge[MR * NR], edge_res[MR * NR] = {0}, scratch[NR], brow[MR];
  const float *a[MR], *res[MR];
  float *c[MR];
  for (int64_t k0 = 0; k0 < kdim; k0 += KC) {
    const int64_t kc = kdim - k0 < KC ? kdim - k0 : KC;
    const int last = k0 + kc == kdim;
    for (int64_t st = s0; st < s1; st++) {
      const float *b = packed + (st * kdim + k0) * NR;
      const int64_t p0 = st * NR, cols = npos - p0 < NR ? npos - p0 : NR;
      for (int64_t m = m0; m < m1; m += MR) {
        /* rows past the last channel read zeros and write scratch; a partial strip goes through `edge` */
        for (int r = 0; r < MR; r++) {
          const int live = m + r < m1;
          a[r] = live ? wt + (m + r) * kdim + k0 : zeros;
          c[r] = cols < NR ? edge + r * NR : live ? out + (m + r) * npos + p0 : scratch;
          brow[r] = live && bias ? bias[m + r] : 0.0f;
          res[r] = cols < NR ? edge_res + r * NR : live ? residual + (m + r) * npos + p0 : zeros;
        }
        if (last && residual && cols < NR)
          for (int r = 0; r < MR && m + r < m1; r++) memcpy(edge_res + r * NR, residual + (m + r) * npos + p0, cols * 4);
        if (cols < NR && k0 > 0)
          for (int r = 0; r < MR && m + r < m1; r++) memcpy(edge + r * NR, out + (m + r) * npos + p0, cols * 4);
        (cols <= 8 ? tile8 : tile)(kc, a, b, c, k0 > 0, last && bias ? brow : NULL, last && residual ? res : NULL,
                                   last && relu);
        if (cols < NR)
          for (int r = 0; r < MR && m + r < m1; r++) memcpy(out + (m + r) * npos + p0, edge + r * NR, cols * 4);
      }
    }
  }
}

/* One convolution, shared by the threads that work on it: its arguments, plan, scratch and work counters. */
typedef struct {
  const float *x, *wt, *bias, *residual;
  float *out, *packed;
  Shape s;
  int64_t n, relu, kdim, spi, nblocks, per, mblocks, mb, ntasks, owns_packed;
  int64_t next_strip, packed_strips, next_task, done_tasks, refs; /* updated atomically */
} Call;

#define LOAD(p) __atomic_load_n(p, __ATOMIC_ACQUIRE)
#define ADD(p, v) __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL)

/* The floats of scratch a convolution packs its patches into: n * c*kh*kw * (oh*ow rounded up to NR). */
int64_t hwa_conv2d_scratch(int64_t n, int64_t c, int64_t kh, int64_t kw, int64_t oh, int64_t ow) {
  return n * c * kh * kw * ((oh * ow + NR - 1) / NR) * NR;
}

/* A convolution to run by `threads` calls of hwa_conv2d_work, each of which may start late or never run: x (n, c,
 * h, w), wt (o, c*kh*kw), bias (o) or NULL, residual (added before relu) and out (n, o, oh*ow), all float32 and
 * contiguous; scratch (hwa_conv2d_scratch floats, 64-byte aligned) or NULL to allocate it. NULL: out of memory. */
void *hwa_conv2d_new(const float *x, const float *wt, const float *bias, const float *residual, float *out,
                     float *scratch, int64_t n, int64_t c, int64_t h,
                     int64_t w, int64_t o, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t pt, int64_t pl,
                     int64_t dh, int64_t dw, int64_t oh, int64_t ow, int64_t relu, int64_t threads) {
  Call *call = calloc(1, sizeof(Call));
  if (!call) return NULL;
  *call = (Call){x, wt, bias, residual, out, NULL, {c, h, w, o, kh, kw, sh, sw, pt, pl, dh, dw, oh, ow}, n, relu};
  call->kdim = c * kh * kw;
  call->spi = (oh * ow + NR - 1) / NR;
  call->nblocks = (call->spi + STRIPS - 1) / STRIPS;
  call->per = (call->spi + call->nblocks - 1) / call->nblocks;
  /* blocks of channels: enough tasks to share out */
  int64_t mblocks = (TASKS + call->nblocks - 1) / call->nblocks, tiles = (o + MR - 1) / MR;
  if (mblocks > tiles) mblocks = tiles;
  call->mb = (tiles + mblocks - 1) / mblocks * MR;
  call->mblocks = (o + call->mb - 1) / call->mb;
  call->ntasks = n * call->mblocks * call->nblocks;
  call->refs = threads;
  void *packed = scratch;
  if (!packed && posix_memalign(&packed, 64, sizeof(float) * call->kdim * n * call->spi * NR)) {
    free(call);
    return NULL;
  }
  call->packed = packed;
  call->owns_packed = scratch == NULL;
  return call;
}

/* Packs strips, then runs tasks, each taken from a shared counter, until none is left; the last thread to leave
 * frees the call. A thread descheduled holding a strip or a task delays only that one: the others go on. */
void hwa_conv2d_work(void *arg) {
  Call *call = arg;
  const Shape *s = &call->s;
  const int64_t nstrips = call->n * call->spi, kdim = call->kdim, o = s->o;
  for (int64_t st; (st = ADD(&call->next_strip, 1)) < nstrips;) {
    const int64_t img = st / call->spi;
    pack_strip(call->x + img * s->c * s->h * s->w, s, st % call->spi * NR, call->packed + st * kdim * NR);
    ADD(&call->packed_strips, 1);
  }
  while (LOAD(&call->packed_strips) < nstrips) sched_yield(); /* a strip still being packed by another thread */
  const float zeros[KC] = {0};
  for (int64_t t; (t = ADD(&call->next_task, 1)) < call->ntasks;) {
    const int64_t img = t / (call->mblocks * call->nblocks), rest = t % (call->mblocks * call->nblocks);
    const int64_t m0 = rest / call->nblocks * call->mb, m1 = m0 + call->mb < o ? m0 + call->mb : o;
    const int64_t s0 = rest % call->nblocks * call->per, s1 = s0 + call->per < call->spi ? s0 + call->per : call->spi;
    if (s0 < s1)
      task(call->packed + img * call->spi * kdim * NR, call->wt, call->bias,
           call->residual ? call->residual + img * o * s->oh * s->ow : NULL, call->out + img * o * s->oh * s->ow, s,
           m0, m1, s0, s1, (int)call->relu, zeros);
    ADD(&call->done_tasks, 1);
  }
}

/* 1 when every task is done (the output is complete). */
int64_t hwa_conv2d_done(void *arg) {
  Call *call = arg;
  return LOAD(&call->done_tasks) >= call->ntasks;
}

/* Waits for the output, then gives up this thread's share of the call (freed by the last thread to let go). */
void hwa_conv2d_wait(void *arg) {
  Call *call = arg;
  while (!hwa_conv2d_done(call)) sched_yield();
}

/* Gives up one thread's share of the call; the last one frees it. */
void hwa_conv2d_release(void *arg) {
  Call *call = arg;
  if (ADD(&call->refs, -1) == 1) {
    if (call->owns_packed) free(call->packed);
    free(call);
  }
}
