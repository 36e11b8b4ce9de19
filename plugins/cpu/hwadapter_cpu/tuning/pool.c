/* float32 max and average pooling over planes (pool.py), separably: each input row reduced across its windows'
 * columns once, then the output rows across those rows' results. Loops over whole rows, which the compiler
 * vectorises; a 3x3 stride-2 pool reads each input element once instead of 2.25 times. */
#define _POSIX_C_SOURCE 200809L /* posix_memalign under -std=c99 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* np.maximum: nan wins, then the first of equals; two selects, the form gcc vectorises (an `||` or `|` of the
 * comparisons keeps a strided loop scalar) */
static inline float pool_max(float m, float v) {
  float t = m >= v ? m : v;
  return m != m ? m : t;
}
#define MAX(m, v) pool_max((m), (v))

#define LANES 16 /* rows are computed in whole blocks of this many outputs: no scalar tail per row */

/* Input row y of `plane` padded to wp columns with `fill` (pl of them on the left). */
static void padded_row(float *restrict row, const float *restrict plane, int64_t y, int64_t w, int64_t pl,
                       int64_t wp, float fill) {
  int64_t n = w < wp - pl ? w : wp - pl;
  n = n > 0 ? n : 0;
  const float *src = plane + y * w;
  for (int64_t q = 0; q < pl && q < wp; q++) row[q] = fill;
  for (int64_t q = 0; q < n; q++) row[pl + q] = src[q]; /* rows are short: a call to memcpy costs more */
  for (int64_t q = pl + n; q < wp; q++) row[q] = fill;
}

/* dst[ox] = the max (or sum) of row[ox * sw + j] for j < kw, for owp (a multiple of LANES) outputs; sw, kw and sum
 * constants where inlined, so that the loop over ox vectorises and keeps each sum in a register */
static inline __attribute__((always_inline)) void across(float *restrict dst, const float *restrict row, int64_t owp,
                                                          int64_t sw, int64_t kw, int sum) {
  for (int64_t ox = 0; ox < owp; ox++) {
    float m = row[ox * sw];
    for (int64_t j = 1; j < kw; j++) {
      float v = row[ox * sw + j]; /* loaded once: a load in MAX's arms would read as control flow */
      m = sum ? m + v : MAX(m, v);
    }
    dst[ox] = m;
  }
}

/* o[ox] = the max (or sum) of rows[0][ox] .. rows[n - 1][ox], in that order, for owp outputs (n >= 1); a sum starts
 * from +0, as numpy's does (two -0 give +0) */
static inline __attribute__((always_inline)) void down(float *restrict o, const float *restrict c, int64_t owp,
                                                        int64_t n, int sum) {
  if (n == 3) {
    const float *c1 = c + owp, *c2 = c1 + owp;
    for (int64_t ox = 0; ox < owp; ox++) {
      float a = c[ox], b = c1[ox], d = c2[ox], m = MAX(a, b);
      o[ox] = sum ? 0.0f + a + b + d : MAX(m, d);
    }
    return;
  }
  for (int64_t ox = 0; ox < owp; ox++) o[ox] = sum ? 0.0f + c[ox] : c[ox];
  for (int64_t i = 1; i < n; i++)
    for (int64_t ox = 0; ox < owp; ox++) {
      float m = o[ox], v = c[i * owp + ox];
      o[ox] = sum ? m + v : MAX(m, v);
    }
}

/* The parameters of one pooling call, an int64 array filled by pool.py (pointers as integers). */
enum { Q_X, Q_OUT, Q_PLANES, Q_H, Q_W, Q_KH, Q_KW, Q_SH, Q_SW, Q_PT, Q_PL, Q_OH, Q_OW, Q_SUM, Q_EXCLUSIVE, Q_FAILED,
       Q_COUNT };

/* One plane: cols[y] for every input row y (its windows' columns reduced), then each output row from the rows of
 * its window inside the image (a window wholly in the padding gives fill: -inf for max, 0 for a sum), divided by
 * the window's count for an average. Horizontal first keeps the reference's order of a window's elements (row
 * by row), so the first of equal maxima (-0 or +0) is the one it keeps. */
static inline __attribute__((always_inline)) void pool_plane(const int64_t *q, const float *plane, float *out,
                                                              float *row, float *cols, float *acc,
                                                              const float *count, int sum) {
  int64_t h = q[Q_H], w = q[Q_W], kh = q[Q_KH], kw = q[Q_KW], sh = q[Q_SH], sw = q[Q_SW], pt = q[Q_PT];
  int64_t pl = q[Q_PL], oh = q[Q_OH], ow = q[Q_OW], owp = (ow + LANES - 1) / LANES * LANES, wp = (owp - 1) * sw + kw;
  float fill = sum ? 0.0f : -INFINITY;
  for (int64_t y = 0; y < h; y++) {
    padded_row(row, plane, y, w, pl, wp, fill);
    float *dst = cols + y * owp;
    if (sw == 1 && kw == 3)
      across(dst, row, owp, 1, 3, sum);
    else if (sw == 2 && kw == 3)
      across(dst, row, owp, 2, 3, sum);
    else if (sw == 2 && kw == 2)
      across(dst, row, owp, 2, 2, sum);
    else
      across(dst, row, owp, sw, kw, sum);
  }
  for (int64_t oy = 0; oy < oh; oy++) {
    int64_t y0 = oy * sh - pt, y1 = y0 + kh;
    y0 = y0 < 0 ? 0 : y0;
    y1 = y1 > h ? h : y1;
    if (y1 > y0)
      down(acc, cols + y0 * owp, owp, y1 - y0, sum);
    else
      for (int64_t ox = 0; ox < owp; ox++) acc[ox] = fill;
    float *o = out + oy * ow;
    if (!sum) {
      for (int64_t ox = 0; ox < ow; ox++) o[ox] = acc[ox];
      continue;
    }
    float rows = (float)(y1 - y0 > 0 ? y1 - y0 : 0), all = (float)(kh * kw); /* small integers: products exact */
    if (q[Q_EXCLUSIVE])
      for (int64_t ox = 0; ox < ow; ox++) o[ox] = acc[ox] / (rows * count[ox]);
    else
      for (int64_t ox = 0; ox < ow; ox++) o[ox] = acc[ox] / all;
  }
}

#if defined(__AVX512F__)
#include <immintrin.h>
/* The same plane with AVX-512 intrinsics for strides 1 and 2 (the common pools): the taps loaded from the plane's
 * rows under masks (lanes outside the image read as fill, none is read past the row), so no row is copied, and the
 * whole of a short row is a few instructions where the compiler's loops spend more setting up than pooling. */
static inline __mmask16 v_below(int64_t k) {
  return k <= 0 ? 0 : k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << k) - 1);
}
/* pool_max lane by lane: m >= v ? m : v, then m where m is nan */
static inline __m512 v_max(__m512 m, __m512 v) {
  __m512 t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m, v, _CMP_GE_OQ), v, m);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q), t, m);
}
/* row[start + l * sw] for lanes l (sw 1 or 2), fill where that column is outside [0, w) */
static inline __m512 v_taps(const float *row, int64_t start, int64_t w, int64_t sw, __m512 fill) {
  __mmask16 a = v_below(w - start) & (__mmask16)~v_below(-start);
  if (sw == 1) return _mm512_mask_loadu_ps(fill, a, row + start);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  __mmask16 b = v_below(w - start - 16) & (__mmask16)~v_below(-start - 16);
  return _mm512_permutex2var_ps(_mm512_mask_loadu_ps(fill, a, row + start), even,
                                _mm512_mask_loadu_ps(fill, b, row + start + 16));
}
static inline __attribute__((always_inline)) void pool_plane16(const int64_t *q, const float *plane, float *out,
                                                                float *cols, const float *count, int sum) {
  int64_t h = q[Q_H], w = q[Q_W], kh = q[Q_KH], kw = q[Q_KW], sh = q[Q_SH], sw = q[Q_SW], pt = q[Q_PT];
  int64_t pl = q[Q_PL], oh = q[Q_OH], ow = q[Q_OW], owp = (ow + LANES - 1) / LANES * LANES;
  const __m512 fill = _mm512_set1_ps(sum ? 0.0f : -INFINITY);
  for (int64_t y = 0; y < h; y++) { /* across each row's windows, in the reference's order of a window's columns */
    const float *row = plane + y * w;
    for (int64_t ox = 0; ox < owp; ox += 16) {
      int64_t start = ox * sw - pl;
      __m512 m = v_taps(row, start, w, sw, fill);
      for (int64_t j = 1; j < kw; j++) {
        __m512 v = v_taps(row, start + j, w, sw, fill);
        m = sum ? _mm512_add_ps(m, v) : v_max(m, v);
      }
      _mm512_store_ps(cols + y * owp + ox, m);
    }
  }
  const __m512 all = _mm512_set1_ps((float)(kh * kw));
  for (int64_t oy = 0; oy < oh; oy++) { /* down the rows of each output row's windows inside the image */
    int64_t y0 = oy * sh - pt, y1 = y0 + kh;
    y0 = y0 < 0 ? 0 : y0;
    y1 = y1 > h ? h : y1;
    const __m512 rows = _mm512_set1_ps((float)(y1 > y0 ? y1 - y0 : 0)); /* small integers: products exact */
    for (int64_t ox = 0; ox < owp; ox += 16) {
      __m512 m = fill;
      if (y1 > y0) {
        m = _mm512_load_ps(cols + y0 * owp + ox);
        if (sum) m = _mm512_add_ps(_mm512_setzero_ps(), m);
        for (int64_t y = y0 + 1; y < y1; y++) {
          __m512 v = _mm512_load_ps(cols + y * owp + ox);
          m = sum ? _mm512_add_ps(m, v) : v_max(m, v);
        }
      }
      if (sum)
        m = _mm512_div_ps(m, q[Q_EXCLUSIVE] ? _mm512_mul_ps(rows, _mm512_loadu_ps(count + ox)) : all);
      _mm512_mask_storeu_ps(out + oy * ow + ox, v_below(ow - ox), m);
    }
  }
}
/* Whether a plane holds no nan and no -0: then every window's maximum is one bit pattern wherever it lies, and any
 * order of taking it gives the reference's (whose first of equals and first nan are order's). */
static int plane_plain(const float *plane, int64_t n) {
  const __m512i negative_zero = _mm512_set1_epi32((int)0x80000000u);
  __mmask16 odd = 0;
  for (int64_t i = 0; i < n; i += 16) {
    __m512 v = _mm512_maskz_loadu_ps(v_below(n - i), plane + i);
    odd |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) | _mm512_cmpeq_epi32_mask(_mm512_castps_si512(v), negative_zero);
  }
  return odd == 0;
}
/* The maximum down rows [y0, y1) of the plane's columns [start, start + 16), -inf outside [0, w) (masked lanes are
 * not read: start may be negative or near the row's end). */
static inline __m512 v_down(const float *plane, int64_t w, int64_t y0, int64_t y1, int64_t start, __m512 fill) {
  __mmask16 in = v_below(w - start) & (__mmask16)~v_below(-start);
  const float *column = plane + start;
  __m512 m = _mm512_mask_loadu_ps(fill, in, column + y0 * w);
  for (int64_t y = y0 + 1; y < y1; y++) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(fill, in, column + y * w));
  return m;
}
/* Max pooling of a plain plane (plane_plain), strides 1 and 2, up to 16 columns, rows first: for each block of 16
 * outputs of a row, its window rows reduced column by column straight from the plane (whole vectors; the last
 * block's columns carried to the next), then its window's columns taken from those by permutes (stride 2: the even
 * and odd columns apart first), all in registers. pool_plane16 gathered and shuffled every tap of every input row. */
static void pool_max_rows(const int64_t *q, const float *plane, float *out) {
  int64_t h = q[Q_H], w = q[Q_W], kh = q[Q_KH], kw = q[Q_KW], sh = q[Q_SH], sw = q[Q_SW], pt = q[Q_PT];
  int64_t pl = q[Q_PL], oh = q[Q_OH], ow = q[Q_OW];
  const __m512 fill = _mm512_set1_ps(-INFINITY);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i evens = _mm512_add_epi32(lane, lane), odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
  __m512i shift[16]; /* lane l takes lane l + s of two vectors side by side */
  for (int64_t s = 0; s < 16; s++) shift[s] = _mm512_add_epi32(lane, _mm512_set1_epi32((int)s));
  for (int64_t oy = 0; oy < oh; oy++) {
    int64_t y0 = oy * sh - pt, y1 = y0 + kh;
    y0 = y0 < 0 ? 0 : y0;
    y1 = y1 > h ? h : y1;
    float *o = out + oy * ow;
    __m512 carried = fill;
    for (int64_t ox = 0; ox < ow; ox += LANES) {
      int64_t x0 = ox * sw - pl;
      __m512 m;
      if (y1 <= y0) { /* a window wholly in the padding */
        m = fill;
      } else if (sw == 1) {
        __m512 a = ox ? carried : v_down(plane, w, y0, y1, x0, fill), b = v_down(plane, w, y0, y1, x0 + 16, fill);
        m = a;
        for (int64_t j = 1; j < kw; j++) m = _mm512_max_ps(m, _mm512_permutex2var_ps(a, shift[j], b));
        carried = b;
      } else {
        __m512 a = ox ? carried : v_down(plane, w, y0, y1, x0, fill), b = v_down(plane, w, y0, y1, x0 + 16, fill);
        __m512 c = v_down(plane, w, y0, y1, x0 + 32, fill);
        __m512 e = _mm512_permutex2var_ps(a, evens, b), d = _mm512_permutex2var_ps(a, odds, b);
        __m512 e2 = _mm512_permutex2var_ps(c, evens, c), d2 = _mm512_permutex2var_ps(c, odds, c);
        m = e; /* tap j of lane l: column 2 l + j, the even or odd columns shifted by j / 2 */
        for (int64_t j = 1; j < kw; j++) {
          __m512 lo = j & 1 ? d : e, hi = j & 1 ? d2 : e2;
          m = _mm512_max_ps(m, j < 2 ? lo : _mm512_permutex2var_ps(lo, shift[j / 2], hi));
        }
        carried = c;
      }
      if (ox + LANES <= ow)
        _mm512_storeu_ps(o + ox, m);
      else
        _mm512_mask_storeu_ps(o + ox, v_below(ow - ox), m);
    }
  }
}
#define ROWS_FIRST(q) (!(q)[Q_SUM] && (q)[Q_KW] <= LANES)
#define POOL16(q) ((q)[Q_SW] <= 2)
#else
#define POOL16(q) 0
#define pool_plane16(q, plane, out, cols, count, sum)
#define ROWS_FIRST(q) 0
#define plane_plain(plane, n) 0
#define pool_max_rows(q, plane, out)
#endif

/* Planes [part * planes / parts, (part + 1) * planes / parts) of the call `q`: the crew's task (threads.py), or the
 * whole call with part 0 of 1. Sets Q_FAILED when its scratch cannot be allocated. */
void hwa_pool_task(const int64_t *q, int64_t part, int64_t parts) {
  int64_t planes = q[Q_PLANES], p0 = planes * part / parts, p1 = planes * (part + 1) / parts;
  int64_t h = q[Q_H], w = q[Q_W], oh = q[Q_OH], ow = q[Q_OW], owp = (ow + LANES - 1) / LANES * LANES;
  int64_t wp = ((owp - 1) * q[Q_SW] + q[Q_KW] + LANES - 1) / LANES * LANES; /* rows on whole vectors */
  void *buf = NULL;
  float *row = posix_memalign(&buf, 64, (size_t)(wp + (h + 2) * owp) * sizeof(float)) ? NULL : buf;
  if (!row) {
    __atomic_store_n((int64_t *)(intptr_t)q[Q_FAILED], 1, __ATOMIC_RELAXED);
    return;
  }
  const float *x = (const float *)(intptr_t)q[Q_X];
  float *out = (float *)(intptr_t)q[Q_OUT], *cols = row + wp, *acc = cols + h * owp, *count = acc + owp;
  for (int64_t ox = 0; ox < ow; ox++) { /* each output column's window: its columns inside the image */
    int64_t x0 = ox * q[Q_SW] - q[Q_PL], x1 = x0 + q[Q_KW], n = (x1 > w ? w : x1) - (x0 < 0 ? 0 : x0);
    count[ox] = (float)(n > 0 ? n : 0);
  }
  for (int64_t ox = ow; ox < owp; ox++) count[ox] = 1.0f; /* lanes past the row: divided, never stored */
  for (int64_t p = p0; p < p1; p++) {
    if (POOL16(q) && ROWS_FIRST(q) && plane_plain(x + p * h * w, h * w)) {
      pool_max_rows(q, x + p * h * w, out + p * oh * ow);
    } else if (POOL16(q)) {
      if (q[Q_SUM])
        pool_plane16(q, x + p * h * w, out + p * oh * ow, cols, count, 1);
      else
        pool_plane16(q, x + p * h * w, out + p * oh * ow, cols, count, 0);
    } else if (q[Q_SUM])
      pool_plane(q, x + p * h * w, out + p * oh * ow, row, cols, acc, count, 1);
    else
      pool_plane(q, x + p * h * w, out + p * oh * ow, row, cols, acc, count, 0);
  }
  free(row);
}

/* The gradient of max pooling (max_pool2d_grad, the reference's rule): each window's g goes to its first maximum
 * in row-major window order (padding is -inf, a nan beats any number and the first nan wins); a window whose
 * maximum is padding gives it to its first element inside the image. Sums in double (`acc`, h*w per plane), so
 * overlapping windows round once, as the reference's float64 bincount. */
int64_t hwa_max_pool_grad(const float *x, const float *g, float *out, int64_t planes, int64_t h, int64_t w,
                          int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t oh,
                          int64_t ow) {
  double *acc = malloc((size_t)(h * w) * sizeof(double));
  if (!acc) return 1;
  for (int64_t p = 0; p < planes; p++) {
    const float *xp = x + p * h * w;
    const float *gp = g + p * oh * ow;
    memset(acc, 0, (size_t)(h * w) * sizeof(double));
    for (int64_t oy = 0; oy < oh; oy++) {
      int64_t top = oy * sh - pt;
      for (int64_t ox = 0; ox < ow; ox++) {
        int64_t left = ox * sw - pl, at = -1;
        float best = -INFINITY;
        int first = 1;
        for (int64_t i = 0; i < kh; i++) {
          int64_t y = top + i;
          for (int64_t j = 0; j < kw; j++) {
            int64_t xx = left + j;
            int inside = y >= 0 && y < h && xx >= 0 && xx < w;
            float v = inside ? xp[y * w + xx] : -INFINITY;
            if (first || v > best || (v != v && best == best)) {
              first = 0;
              best = v;
              at = inside ? y * w + xx : -1;
            }
          }
        }
        if (at < 0) { /* padding was the maximum: its first element inside the image */
          int64_t y = top > 0 ? top : 0, xx = left > 0 ? left : 0;
          at = y * w + xx;
        }
        acc[at] += (double)gp[oy * ow + ox];
      }
    }
    float *op = out + p * h * w;
    for (int64_t q = 0; q < h * w; q++) op[q] = (float)acc[q];
  }
  free(acc);
  return 0;
}

/* Max pooling and its gradient where the windows tile the planes exactly (stride = kernel, no padding, the image a
 * whole number of windows: the common 2x2 pool), without branches so that the loop over a row's windows
 * vectorises: the first maximum of each window by selects (a nan beats any number, the first nan wins), as above. */
int64_t hwa_max_pool_tiled(const float *x, const float *g, float *out, int64_t planes, int64_t h, int64_t w,
                           int64_t kh, int64_t kw, int grad) {
  int64_t oh = h / kh, ow = w / kw;
  float *best = malloc((size_t)ow * sizeof(float));
  int32_t *at = malloc((size_t)ow * sizeof(int32_t));
  if (!best || !at) {
    free(best);
    free(at);
    return 1;
  }
  for (int64_t p = 0; p < planes; p++) {
    const float *xp = x + p * h * w;
    for (int64_t oy = 0; oy < oh; oy++) {
      const float *top = xp + oy * kh * w;
      for (int64_t ox = 0; ox < ow; ox++) {
        best[ox] = top[ox * kw];
        at[ox] = 0;
      }
      for (int64_t i = 0; i < kh; i++)
        for (int64_t j = (i == 0); j < kw; j++) {
          const float *row = top + i * w + j;
          int32_t pos = (int32_t)(i * kw + j);
          for (int64_t ox = 0; ox < ow; ox++) {
            float v = row[ox * kw], b = best[ox];
            int later = (v > b) | ((v != v) & (b == b));
            best[ox] = later ? v : b;
            at[ox] = later ? pos : at[ox];
          }
        }
      if (!grad) {
        memcpy(out + (p * oh + oy) * ow, best, (size_t)ow * sizeof(float));
        continue;
      }
      const float *gr = g + (p * oh + oy) * ow;
      float *o = out + p * h * w + oy * kh * w;
      for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++) {
          int32_t pos = (int32_t)(i * kw + j);
          float *orow = o + i * w + j;
          for (int64_t ox = 0; ox < ow; ox++) orow[ox * kw] = at[ox] == pos ? gr[ox] : 0.0f;
        }
    }
  }
  free(best);
  free(at);
  return 0;
}
