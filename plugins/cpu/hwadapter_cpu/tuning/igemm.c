/* conv2d as an implicit product (blasconv.py's IGEMM phase): out (o x pixels) = weights (o x c*kh*kw) patches, the
 * weights packed once per plan in blocks of IG_ROWS output channels ([block][c*kh*kw][IG_ROWS], zero rows past o),
 * the patches gathered straight from the image one strip of IG_COLS pixels at a time (no whole im2col; a 1x1 stride-1
 * convolution's whole strips read the image as it is, and with AVX-512 a stride-1 convolution whose output is its
 * input's size reads every tap from the image under masks, without patches), and a register tile of IG_ROWS x
 * IG_COLS summed with fused multiply-adds, the bias, residual and activation applied as it is stored.
 * Every output element is summed over the same taps in the same order wherever its channel or pixel falls, so equal
 * filters give bit-equal channels. Built where the compiler targets AVX-512 or AVX2 with FMA; hwa_igemm_cols() is 0
 * elsewhere and blasconv.py keeps its BLAS products. */
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#if defined(__AVX512F__)
#define IG_LANES 16
#define IG_ROWS 8
typedef __m512 vec;
#define VZERO() _mm512_setzero_ps()
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VSET1(x) _mm512_set1_ps(x)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VMAX(a, b) _mm512_max_ps(a, b)
#else
#define IG_LANES 8
#define IG_ROWS 6
typedef __m256 vec;
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VSET1(x) _mm256_set1_ps(x)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VMAX(a, b) _mm256_max_ps(a, b)
#endif
#define IG_COLS (2 * IG_LANES)
/* taps per pass over a strip: its patches (IG_KC x IG_COLS floats) stay in L1 while every block of channels reads
 * them */
#define IG_KC 256
/* taps ahead that a tile asks for its weights: a small image's weights come from memory (ResNet's 7x7 layers waited
 * for them) */
#define IG_AHEAD 128

int64_t hwa_igemm_cols(void) { return IG_COLS; }
int64_t hwa_igemm_rows(void) { return IG_ROWS; }

#if defined(__AVX512F__)
/* The lanes below k of one vector, as a mask (k clamped to [0, IG_LANES]). */
static inline __mmask16 ig_below(int64_t k) {
  return k <= 0 ? 0 : k >= IG_LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << k) - 1);
}
/* d[k] = src[k] for lo <= k < hi, else 0, for k < n (n <= IG_COLS): masked loads read nothing outside [lo, hi),
 * so src may point before or past its row. */
static inline void ig_copy(float *d, const float *src, int64_t n, int64_t lo, int64_t hi) {
  for (int64_t k0 = 0; k0 < n; k0 += IG_LANES) {
    __mmask16 store = ig_below(n - k0), load = store & ig_below(hi - k0) & (__mmask16)~ig_below(lo - k0);
    _mm512_mask_storeu_ps(d + k0, store, _mm512_maskz_loadu_ps(load, src + k0));
  }
}
#if defined(__BMI2__)
#define IG_STRIDE2 1
/* d[k] = src[2 k] for lo <= k < hi, else 0, for k < n: 2 IG_LANES consecutive floats loaded (the unused odd ones and
 * those outside [lo, hi) masked off) and their even lanes kept. */
static inline void ig_copy2(float *d, const float *src, int64_t n, int64_t lo, int64_t hi) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t k0 = 0; k0 < n; k0 += IG_LANES) {
    __mmask16 store = ig_below(n - k0), lanes = store & ig_below(hi - k0) & (__mmask16)~ig_below(lo - k0);
    uint32_t wide = _pdep_u32(lanes, 0x55555555u); /* lane l's element is 2 l */
    __m512 a = _mm512_maskz_loadu_ps((__mmask16)wide, src + 2 * k0);
    __m512 b = _mm512_maskz_loadu_ps((__mmask16)(wide >> 16), src + 2 * k0 + IG_LANES);
    _mm512_mask_storeu_ps(d + k0, store, _mm512_permutex2var_ps(a, even, b));
  }
}
#endif
#else
/* The same with AVX2's masked moves: a lane is on where its mask's sign bit is set. */
static inline void ig_copy(float *d, const float *src, int64_t n, int64_t lo, int64_t hi) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t k0 = 0; k0 < n; k0 += IG_LANES) {
    __m256i k = _mm256_add_epi32(lane, _mm256_set1_epi32((int)k0));
    __m256i store = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), k);
    __m256i load = _mm256_and_si256(_mm256_and_si256(store, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), k)),
                                    _mm256_cmpgt_epi32(k, _mm256_set1_epi32((int)lo - 1)));
    _mm256_maskstore_ps(d + k0, store, _mm256_maskload_ps(src + k0, load));
  }
}
#endif

#if defined(__AVX512F__)
#define IG_ROWS_SHIFTED 1
/* ig_patches for strides of 1 or 2 and dilations of 1 along the rows (most 3x3 and 5x5 layers, stems, downsampling
 * layers), whole channels of taps: each run of a (channel, kernel row) is loaded once, 48 columns under masks (80 for
 * stride 2, split into its even and odd columns; zero in the padding), and tap s is that row (stride 2: its even
 * columns for even s, odd for odd) shifted by s (s / 2), two permutes each, where one masked copy or gather per tap
 * recomputed its masks kw times. */
static inline __attribute__((always_inline)) void ig_shifted(const float *x, float *dst, int64_t channels,
                                                              int64_t h, int64_t iw, int64_t kh, int64_t kw, int sw,
                                                              int64_t dh, int64_t runs, const int64_t *run_j,
                                                              const int64_t *run_n, const int64_t *run_y,
                                                              const int64_t *run_x, int64_t cols) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i evens = _mm512_add_epi32(lane, lane), odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
  __m512i shift[16];
  for (int64_t s = 0; s < 16; s++) shift[s] = _mm512_add_epi32(lane, _mm512_set1_epi32((int)s));
  int loads = sw == 2 ? 5 : 3;
  for (int64_t c = 0; c < channels; c++)
    for (int64_t r = 0; r < kh; r++) {
      float *d = dst + (c * kh + r) * kw * IG_COLS; /* tap (c, r, s) at d + s * IG_COLS */
      if (cols < IG_COLS)
        for (int64_t s = 0; s < kw; s++) memset(d + s * IG_COLS + cols, 0, (IG_COLS - cols) * sizeof(float));
      for (int64_t k = 0; k < runs; k++) {
        int64_t j = run_j[k], n = run_n[k], iy = run_y[k] + r * dh, ix0 = run_x[k];
        __mmask16 s0 = ig_below(n), s1 = ig_below(n - IG_LANES);
        if (iy < 0 || iy >= h) {
          for (int64_t s = 0; s < kw; s++) {
            _mm512_mask_storeu_ps(d + s * IG_COLS + j, s0, _mm512_setzero_ps());
            _mm512_mask_storeu_ps(d + s * IG_COLS + j + IG_LANES, s1, _mm512_setzero_ps());
          }
          continue;
        }
        const float *row = x + (c * h + iy) * iw + ix0;
        __m512 v[5], e[3], o[3];
        for (int i = 0; i < loads; i++)
          v[i] = _mm512_maskz_loadu_ps(ig_below(iw - ix0 - 16 * i) & (__mmask16)~ig_below(-ix0 - 16 * i), row + 16 * i);
        if (sw == 2) {
          e[0] = _mm512_permutex2var_ps(v[0], evens, v[1]), o[0] = _mm512_permutex2var_ps(v[0], odds, v[1]);
          e[1] = _mm512_permutex2var_ps(v[2], evens, v[3]), o[1] = _mm512_permutex2var_ps(v[2], odds, v[3]);
          e[2] = _mm512_permutex2var_ps(v[4], evens, v[4]), o[2] = _mm512_permutex2var_ps(v[4], odds, v[4]);
        } else {
          e[0] = v[0], e[1] = v[1], e[2] = v[2];
        }
        for (int64_t s = 0; s < kw; s++) { /* column sw l + s of the run */
          const __m512 *src = sw == 2 && (s & 1) ? o : e;
          int64_t q = sw == 2 ? s / 2 : s;
          __m512 lo = q ? _mm512_permutex2var_ps(src[0], shift[q], src[1]) : src[0];
          __m512 hi = q ? _mm512_permutex2var_ps(src[1], shift[q], src[2]) : src[1];
          _mm512_mask_storeu_ps(d + s * IG_COLS + j, s0, lo);
          _mm512_mask_storeu_ps(d + s * IG_COLS + j + IG_LANES, s1, hi);
        }
      }
    }
}
/* ig_shifted compiled for each stride (a constant there: no branch on it per tap) */
static void ig_patches_shifted(const float *x, float *dst, int64_t channels, int64_t h, int64_t iw, int64_t kh,
                               int64_t kw, int64_t sw, int64_t dh, int64_t runs, const int64_t *run_j,
                               const int64_t *run_n, const int64_t *run_y, const int64_t *run_x, int64_t cols) {
  if (sw == 2)
    ig_shifted(x, dst, channels, h, iw, kh, kw, 2, dh, runs, run_j, run_n, run_y, run_x, cols);
  else
    ig_shifted(x, dst, channels, h, iw, kh, kw, 1, dh, runs, run_j, run_n, run_y, run_x, cols);
}
#endif

/* Taps [t0, t1) of pixels [q0, q0 + cols) (row-major over oh x ow): dst[(t - t0) * IG_COLS + j], zero past cols and
 * where the tap falls in the padding. Pixels of one output row are one run, found once per strip (a division per tap
 * or run would cost more than the copies); a run of stride 1 is one masked vector copy. */
static void ig_patches(const float *x, float *dst, int64_t t0, int64_t t1, int64_t h, int64_t iw, int64_t kh,
                       int64_t kw, int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t dh, int64_t dw, int64_t oh,
                       int64_t ow, int64_t q0, int64_t cols) {
  int whole = kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && iw == ow && h == oh;
  int64_t run_j[IG_COLS], run_n[IG_COLS], run_y[IG_COLS], run_x[IG_COLS], runs = 0;
  for (int64_t j = 0, q = q0; j < cols; runs++) {
    int64_t oy = q / ow, ox = q % ow, n = ow - ox < cols - j ? ow - ox : cols - j;
    run_j[runs] = j, run_n[runs] = n, run_y[runs] = oy * sh - pt, run_x[runs] = ox * sw - pl;
    j += n;
    q += n;
  }
#ifdef IG_ROWS_SHIFTED
  if (!whole && (sw == 1 || sw == 2) && dw == 1 && kw <= 16 && t0 % (kh * kw) == 0 && t1 % (kh * kw) == 0) {
    ig_patches_shifted(x + t0 / (kh * kw) * h * iw, dst, (t1 - t0) / (kh * kw), h, iw, kh, kw, sw, dh, runs, run_j,
                       run_n, run_y, run_x, cols);
    return;
  }
#endif
  int64_t c = t0 / (kh * kw), r = t0 / kw % kh, s = t0 % kw;
  for (int64_t t = t0; t < t1; t++) {
    float *d = dst + (t - t0) * IG_COLS;
    if (whole) { /* a 1x1 convolution reads the image as it is */
      ig_copy(d, x + c * h * iw + q0, IG_COLS, 0, cols);
    } else {
      if (cols < IG_COLS) memset(d + cols, 0, (IG_COLS - cols) * sizeof(float));
      for (int64_t k = 0; k < runs; k++) {
        int64_t j = run_j[k], n = run_n[k], iy = run_y[k] + r * dh, ix0 = run_x[k] + s * dw;
        float *dj = d + j;
        if (iy < 0 || iy >= h) {
          ig_copy(dj, x, n, 0, 0);
          continue;
        }
        const float *row = x + (c * h + iy) * iw;
        if (sw == 1) {
          ig_copy(dj, row + ix0, n, -ix0, iw - ix0);
#ifdef IG_STRIDE2
        } else if (sw == 2) {
          ig_copy2(dj, row + ix0, n, (-ix0 + 1) / 2, (iw - ix0 + 1) / 2);
#endif
        } else { /* the run's taps inside the image, [lo, hi), read without a bounds check per element */
          int64_t lo = ix0 < 0 ? (-ix0 + sw - 1) / sw : 0, hi = ix0 < iw ? (iw - ix0 + sw - 1) / sw : 0;
          if (lo > n) lo = n;
          if (hi > n) hi = n;
          if (hi < lo) hi = lo;
          const float *src = row + ix0;
          for (int64_t k2 = 0; k2 < lo; k2++) dj[k2] = 0.0f;
          for (int64_t k2 = lo; k2 < hi; k2++) dj[k2] = src[k2 * sw];
          for (int64_t k2 = hi; k2 < n; k2++) dj[k2] = 0.0f;
        }
      }
    }
    if (++s == kw) { /* the next tap: (channel, row, column) counted without dividing */
      s = 0;
      if (++r == kh) {
        r = 0;
        c++;
      }
    }
  }
}

/* A tile's sums as they start: zero where `first` (out not read) or the strip is short, else what out holds. */
static inline __attribute__((always_inline)) void ig_start(vec acc[IG_ROWS][2], const float *out, int64_t ld,
                                                           int64_t rows, int64_t cols, int first) {
  if (first || cols < IG_COLS) {
#pragma GCC unroll 16
    for (int i = 0; i < IG_ROWS; i++) acc[i][0] = acc[i][1] = VZERO();
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < IG_ROWS; i++) {
      acc[i][0] = VZERO();
      acc[i][1] = VZERO();
      if (i < rows) {
        acc[i][0] = VLOAD(out + i * ld);
        acc[i][1] = VLOAD(out + i * ld + IG_LANES);
      }
    }
  }
}

/* A tile's sums stored to rows x cols of out (row stride ld): added to what is there unless `first`; with `last`,
 * bias, residual (same layout as out) and the activation (depthwise.c's ACT_* codes, its dw_act) as they are stored. */
static inline __attribute__((always_inline)) void ig_store(vec acc[IG_ROWS][2], float *out, int64_t ld, int64_t rows,
                                                           int64_t cols, int first, int last, const float *bias,
                                                           const float *res, int64_t act) {
  float tmp[IG_COLS];
  for (int i = 0; i < rows; i++) {
    float *o = out + i * ld;
    vec v0 = acc[i][0], v1 = acc[i][1];
    if (cols < IG_COLS) { /* a strip's last pixels: through a full-width row */
      VSTORE(tmp, v0);
      VSTORE(tmp + IG_LANES, v1);
      for (int64_t j = 0; j < cols; j++) {
        float v = tmp[j] + (first ? 0.0f : o[j]);
        if (last) {
          if (bias) v += bias[i];
          if (res) v += res[i * ld + j];
        }
        o[j] = v;
      }
      if (last && act) dw_act(o, cols, act);
      continue;
    }
    if (last) {
      if (bias) {
        vec bi = VSET1(bias[i]);
        v0 = VADD(v0, bi);
        v1 = VADD(v1, bi);
      }
      if (res) {
        v0 = VADD(v0, VLOAD(res + i * ld));
        v1 = VADD(v1, VLOAD(res + i * ld + IG_LANES));
      }
      if (act == ACT_RELU) { /* max(0, v) returns its second operand for nan and for -0.0: both stay */
        v0 = VMAX(VZERO(), v0);
        v1 = VMAX(VZERO(), v1);
      }
    }
    VSTORE(o, v0);
    VSTORE(o + IG_LANES, v1);
    if (last && act > ACT_RELU) dw_act(o, IG_COLS, act);
  }
}

/* One tap of a tile: sums[i][v] += a_k[i] b_v for the tile's rows i, over one vector (b0) or two (b0, b1); macros,
 * not functions, so that the sums stay in registers */
#define IG_TAP1(sums, ak, b0) \
  _Pragma("GCC unroll 16") for (int i = 0; i < IG_ROWS; i++) sums[i][0] = VFMA(VSET1((ak)[i]), b0, sums[i][0])
#define IG_TAP2(sums, ak, b0, b1)                        \
  _Pragma("GCC unroll 16") for (int i = 0; i < IG_ROWS; i++) { \
    vec ai = VSET1((ak)[i]);                             \
    sums[i][0] = VFMA(ai, b0, sums[i][0]);               \
    sums[i][1] = VFMA(ai, b1, sums[i][1]);               \
  }

/* One register tile: rows x cols of out (row stride ld) += a ([kc][IG_ROWS]) b ([kc] rows, ldb floats apart). */
static void ig_tile(int64_t kc, const float *restrict a, const float *restrict b, int64_t ldb, float *out,
                    int64_t ld, int64_t rows, int64_t cols, int first, int last, const float *bias, const float *res,
                    int64_t act) {
  vec acc[IG_ROWS][2];
  ig_start(acc, out, ld, rows, cols, first);
  if (cols <= IG_LANES) { /* a strip's last pixels fit one vector (13x13: 9 of 169): half the multiply-adds */
    for (int64_t k = 0; k < kc; k++) {
      vec b0 = VLOAD(b + k * ldb);
      __builtin_prefetch(a + (k + IG_AHEAD) * IG_ROWS);
      IG_TAP1(acc, a + k * IG_ROWS, b0);
    }
  } else {
    for (int64_t k = 0; k < kc; k++) {
      vec b0 = VLOAD(b + k * ldb), b1 = VLOAD(b + k * ldb + IG_LANES);
      __builtin_prefetch(a + (k + IG_AHEAD) * IG_ROWS);
      IG_TAP2(acc, a + k * IG_ROWS, b0, b1);
    }
  }
  ig_store(acc, out, ld, rows, cols, first, last, bias, res, act);
}

#if defined(__AVX512F__)
#define IG_GRID 1
/* One register tile of a stride-1 convolution whose output is its input's size ('same' padding), read straight from
 * the image without patches: tap k of the strip's pixels is the image at x + off[k], its lanes in the padding masked
 * off (mask[2 k], mask[2 k + 1]: the two vectors'; a masked lane reads nothing, so a load may start before or run
 * past the image). a: [kc][IG_ROWS]. */
static void ig_tile_grid(int64_t kc, const float *restrict a, const float *x, const int64_t *off,
                         const __mmask16 *mask, float *out, int64_t ld, int64_t rows, int64_t cols, int first,
                         int last, const float *bias, const float *res, int64_t act) {
  vec acc[IG_ROWS][2], r[IG_ROWS][2]; /* r: the sums in registers (a masked load might read acc, GCC assumes) */
  ig_start(acc, out, ld, rows, cols, first);
#pragma GCC unroll 16
  for (int i = 0; i < IG_ROWS; i++) r[i][0] = acc[i][0], r[i][1] = acc[i][1];
  if (cols <= IG_LANES) {
    for (int64_t k = 0; k < kc; k++) {
      vec b0 = _mm512_maskz_loadu_ps(mask[2 * k], x + off[k]);
      __builtin_prefetch(a + (k + IG_AHEAD) * IG_ROWS);
      IG_TAP1(r, a + k * IG_ROWS, b0);
    }
  } else {
    for (int64_t k = 0; k < kc; k++) {
      const float *p = x + off[k];
      vec b0 = _mm512_maskz_loadu_ps(mask[2 * k], p), b1 = _mm512_maskz_loadu_ps(mask[2 * k + 1], p + IG_LANES);
      __builtin_prefetch(a + (k + IG_AHEAD) * IG_ROWS);
      IG_TAP2(r, a + k * IG_ROWS, b0, b1);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < IG_ROWS; i++) acc[i][0] = r[i][0], acc[i][1] = r[i][1];
  ig_store(acc, out, ld, rows, cols, first, last, bias, res, act);
}

/* For strip pixels [q0, q0 + cols) of an oh x ow output that is its image's size, every tap k = (channel, r, s) of
 * `channels` channels of planes floats: off[k], where the tap's pixels start in the image, and mask[2 k],
 * mask[2 k + 1], the lanes whose tap lies inside the image (none past cols). kh, kw <= 16. */
static void ig_grid_taps(int64_t q0, int64_t cols, int64_t channels, int64_t plane, int64_t oh, int64_t ow, int64_t kh,
                         int64_t kw, int64_t pt, int64_t pl, int64_t *off, __mmask16 *mask) {
  uint32_t row_ok[16], col_ok[16]; /* lanes whose tap row r (column s) lies inside the image */
  for (int64_t r = 0; r < kh; r++) row_ok[r] = 0;
  for (int64_t s = 0; s < kw; s++) col_ok[s] = 0;
  for (int64_t j = 0, q = q0; j < cols;) { /* runs of one output row */
    int64_t oy = q / ow, ox = q % ow, n = ow - ox < cols - j ? ow - ox : cols - j;
    uint32_t run = (uint32_t)((((uint64_t)1 << n) - 1) << j);
    for (int64_t r = 0; r < kh; r++)
      if (oy + r - pt >= 0 && oy + r - pt < oh) row_ok[r] |= run;
    for (int64_t s = 0; s < kw; s++) { /* the run's k < n whose column ox + k + s - pl lies in [0, ow) */
      int64_t lo = pl - s - ox > 0 ? pl - s - ox : 0, hi = ow + pl - s - ox < n ? ow + pl - s - ox : n;
      if (hi > lo) col_ok[s] |= (uint32_t)((((uint64_t)1 << (hi - lo)) - 1) << (j + lo));
    }
    j += n;
    q += n;
  }
  int64_t kt = kh * kw;
  for (int64_t r = 0, k = 0; r < kh; r++)
    for (int64_t s = 0; s < kw; s++, k++) {
      uint32_t ok = row_ok[r] & col_ok[s];
      off[k] = q0 + (r - pt) * ow + (s - pl);
      mask[2 * k] = (__mmask16)ok;
      mask[2 * k + 1] = (__mmask16)(ok >> 16);
    }
  uint32_t *restrict pairs = (uint32_t *)mask; /* a tap's two masks as one word */
  for (int64_t c = 1; c < channels; c++) { /* the other channels': the first's, c planes further */
    int64_t *restrict dst = off + c * kt;
    for (int64_t t = 0; t < kt; t++) {
      dst[t] = off[t] + c * plane;
      pairs[c * kt + t] = pairs[t];
    }
  }
}
#endif

/* The scratch floats one task needs: the patches over every tap of a group of `span` strips. */
int64_t hwa_igemm_scratch(int64_t taps, int64_t span) { return span * taps * IG_COLS; }

/* Units [u0, u1) of a conv2d of one image (act: the ACT_* code): unit u is group u / (runs * parts), run of `span`
 * strips of IG_COLS pixels u / parts % runs, part u % parts of that group's blocks of channels. `a`: the packed
 * weights, group after group ([group][block][taps][IG_ROWS]). A unit's strips are gathered first (consecutive units of
 * one run gather them once), then each block of weights serves every strip of the run: on a small image of many
 * channels (span: every strip) the weights are read once, not once per strip. */
void hwa_igemm(const float *x, const float *a, const float *bias, const float *res, float *out, float *buf, int64_t c,
               int64_t h, int64_t iw, int64_t o, int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh,
               int64_t sw, int64_t pt, int64_t pl, int64_t dh, int64_t dw, int64_t act, int64_t groups,
               int64_t parts, int64_t span, int64_t u0, int64_t u1) {
  int64_t points = oh * ow, strips = (points + IG_COLS - 1) / IG_COLS, cg = c / groups, og = o / groups;
  int64_t taps = cg * kh * kw, blocks = (og + IG_ROWS - 1) / IG_ROWS, runs = (strips + span - 1) / span;
  int64_t area = taps * IG_COLS, packed = -1; /* area: one strip's scratch */
  /* a whole strip of a 1x1 stride-1 convolution reads the image as it is, row k of its patches channel k: the copy
   * cost a seventh of such a layer (SqueezeNet's 128->16 over 55x55 ran at half the speed with it) */
  int one = kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && iw == ow && h == oh;
#ifdef IG_GRID
  /* a stride-1 'same' convolution reads its taps from the image (ig_tile_grid): no patches to gather */
  int grid = sh == 1 && sw == 1 && dh == 1 && dw == 1 && oh == h && ow == iw && kh <= 16 && kw <= 16;
#endif
  for (int64_t u = u0; u < u1; u++) {
    int64_t g = u / (runs * parts), run = u / parts % runs, part = u % parts;
    int64_t s0 = run * span, s1 = s0 + span < strips ? s0 + span : strips;
    int64_t b0 = part * blocks / parts, b1 = (part + 1) * blocks / parts;
    const float *xg = x + g * cg * h * iw;
    if (packed != g * runs + run) {
      for (int64_t s = s0; s < s1; s++) {
        int64_t q0 = s * IG_COLS, cols = points - q0 < IG_COLS ? points - q0 : IG_COLS;
        float *dst = buf + (s - s0) * area;
        if (one && cols == IG_COLS) continue;
#ifdef IG_GRID
        if (grid) { /* the taps' table in the patches' place */
          int64_t *off = (int64_t *)dst;
          ig_grid_taps(q0, cols, cg, h * iw, oh, ow, kh, kw, pt, pl, off, (__mmask16 *)(off + taps));
          continue;
        }
#endif
        ig_patches(xg, dst, 0, taps, h, iw, kh, kw, sh, sw, pt, pl, dh, dw, oh, ow, q0, cols);
      }
      packed = g * runs + run;
    }
    /* one strip: passes outside, each pass's patches kept in L1 while every block reads them; a run of strips:
     * blocks outside, each block's weights read in one prefetched sweep, the strips' patches from L2 */
    int64_t passes = (taps + IG_KC - 1) / IG_KC, nb = b1 - b0;
    for (int64_t i = 0; i < passes * nb; i++) {
      int64_t blk = b0 + (span == 1 ? i % nb : i / passes), t0 = (span == 1 ? i / nb : i % passes) * IG_KC;
      int64_t t1 = t0 + IG_KC < taps ? t0 + IG_KC : taps;
      int64_t k0 = g * og + blk * IG_ROWS, rows = og - blk * IG_ROWS < IG_ROWS ? og - blk * IG_ROWS : IG_ROWS;
      const float *ab = a + ((g * blocks + blk) * taps + t0) * IG_ROWS, *bk = bias ? bias + k0 : NULL;
      for (int64_t s = s0; s < s1; s++) {
        int64_t q0 = s * IG_COLS, cols = points - q0 < IG_COLS ? points - q0 : IG_COLS;
        float *dst = buf + (s - s0) * area, *y = out + k0 * points + q0;
        const float *rk = res ? res + k0 * points + q0 : NULL;
        if (one && cols == IG_COLS) {
          ig_tile(t1 - t0, ab, xg + t0 * points + q0, points, y, points, rows, cols, t0 == 0, t1 == taps, bk, rk, act);
          continue;
        }
#ifdef IG_GRID
        if (grid) {
          const int64_t *off = (const int64_t *)dst;
          ig_tile_grid(t1 - t0, ab, xg, off + t0, (const __mmask16 *)(off + taps) + 2 * t0, y, points, rows, cols,
                       t0 == 0, t1 == taps, bk, rk, act);
          continue;
        }
#endif
        ig_tile(t1 - t0, ab, dst + t0 * IG_COLS, IG_COLS, y, points, rows, cols, t0 == 0, t1 == taps, bk, rk, act);
      }
    }
  }
}
#else
int64_t hwa_igemm_cols(void) { return 0; }
int64_t hwa_igemm_rows(void) { return 0; }
int64_t hwa_igemm_scratch(int64_t taps, int64_t span) { return taps; }
void hwa_igemm(const float *x, const float *a, const float *bias, const float *res, float *out, float *buf, int64_t c,
               int64_t h, int64_t iw, int64_t o, int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh,
               int64_t sw, int64_t pt, int64_t pl, int64_t dh, int64_t dw, int64_t act, int64_t groups,
               int64_t parts, int64_t span, int64_t u0, int64_t u1) {}
#endif
