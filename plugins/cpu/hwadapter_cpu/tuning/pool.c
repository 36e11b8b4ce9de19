/* float32 max and average pooling over planes (pool.py), separably: each input row reduced across its windows'
 * columns once, then the output rows across those rows' results. Loops over whole rows, which the compiler
 * vectorises; a 3x3 stride-2 pool reads each input element once instead of 2.25 times. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX(m, v) (((m) >= (v) || (m) != (m)) ? (m) : (v)) /* np.maximum: nan wins, then the first of equals */

/* Input row y of `plane` padded to wp columns with `fill` (pl of them on the left). */
static void padded_row(float *restrict row, const float *restrict plane, int64_t y, int64_t w, int64_t pl,
                       int64_t wp, float fill) {
  int64_t n = w < wp - pl ? w : wp - pl;
  n = n > 0 ? n : 0;
  for (int64_t q = 0; q < pl && q < wp; q++) row[q] = fill;
  memcpy(row + pl, plane + y * w, (size_t)n * sizeof(float));
  for (int64_t q = pl + n; q < wp; q++) row[q] = fill;
}

/* across[ox] = the max (or sum) of row[ox * sw + j] for j < kw; sw a constant where inlined, so it vectorises */
static inline __attribute__((always_inline)) void across(float *restrict dst, const float *restrict row, int64_t ow,
                                                          int64_t sw, int64_t kw, int sum) {
  for (int64_t ox = 0; ox < ow; ox++) dst[ox] = row[ox * sw];
  for (int64_t j = 1; j < kw; j++)
    for (int64_t ox = 0; ox < ow; ox++) dst[ox] = sum ? dst[ox] + row[ox * sw + j] : MAX(dst[ox], row[ox * sw + j]);
}

/* One plane: cols[y][ox] for every input row y, then out[oy][ox] from the rows of its window inside the image
 * (a window wholly in the padding gives fill: -inf for max, 0 for a sum). */
static void pool_plane(const float *plane, float *out, float *row, float *cols, int64_t h, int64_t w, int64_t kh,
                       int64_t kw, int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t oh, int64_t ow, int sum) {
  float fill = sum ? 0.0f : -INFINITY;
  int64_t wp = (ow - 1) * sw + kw;
  for (int64_t y = 0; y < h; y++) {
    padded_row(row, plane, y, w, pl, wp, fill);
    float *dst = cols + y * ow;
    if (sw == 1)
      across(dst, row, ow, 1, kw, sum);
    else if (sw == 2)
      across(dst, row, ow, 2, kw, sum);
    else
      across(dst, row, ow, sw, kw, sum);
  }
  for (int64_t oy = 0; oy < oh; oy++) {
    float *o = out + oy * ow;
    int64_t y0 = oy * sh - pt, y1 = y0 + kh;
    y0 = y0 < 0 ? 0 : y0;
    y1 = y1 > h ? h : y1;
    for (int64_t ox = 0; ox < ow; ox++) o[ox] = fill;
    for (int64_t y = y0; y < y1; y++) {
      const float *c = cols + y * ow;
      for (int64_t ox = 0; ox < ow; ox++) o[ox] = sum ? o[ox] + c[ox] : MAX(o[ox], c[ox]);
    }
  }
}

/* max (sum = 0) or sum pooling of `planes` planes; returns -1 when its scratch cannot be allocated */
static int64_t pool(const float *x, float *out, int64_t planes, int64_t h, int64_t w, int64_t kh, int64_t kw,
                    int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t oh, int64_t ow, int sum) {
  int64_t wp = (ow - 1) * sw + kw;
  float *row = malloc((size_t)(wp + h * ow) * sizeof(float));
  if (!row) return -1;
  for (int64_t p = 0; p < planes; p++)
    pool_plane(x + p * h * w, out + p * oh * ow, row, row + wp, h, w, kh, kw, sh, sw, pt, pl, oh, ow, sum);
  free(row);
  return 0;
}

/* out[p][oy][ox] = the largest of the window (nan if any is nan; -inf for a window wholly in the padding). */
int64_t hwa_max_pool(const float *x, float *out, int64_t planes, int64_t h, int64_t w, int64_t kh, int64_t kw,
                     int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t oh, int64_t ow) {
  return pool(x, out, planes, h, w, kh, kw, sh, sw, pt, pl, oh, ow, 0);
}

/* out[p][oy][ox] = the window's sum / its count: the elements inside the image when exclusive, else kh * kw (the
 * padding counted as zeros). */
int64_t hwa_avg_pool(const float *x, float *out, int64_t planes, int64_t h, int64_t w, int64_t kh, int64_t kw,
                     int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t oh, int64_t ow, int64_t exclusive) {
  if (pool(x, out, planes, h, w, kh, kw, sh, sw, pt, pl, oh, ow, 1)) return -1;
  for (int64_t p = 0; p < planes; p++)
    for (int64_t oy = 0; oy < oh; oy++) {
      int64_t y0 = oy * sh - pt, y1 = y0 + kh;
      int64_t rows = (y1 > h ? h : y1) - (y0 < 0 ? 0 : y0);
      float *o = out + (p * oh + oy) * ow;
      for (int64_t ox = 0; ox < ow; ox++) {
        int64_t x0 = ox * sw - pl, x1 = x0 + kw;
        int64_t cols = (x1 > w ? w : x1) - (x0 < 0 ? 0 : x0);
        o[ox] /= (float)(exclusive ? (rows > 0 ? rows : 0) * (cols > 0 ? cols : 0) : kh * kw);
      }
    }
  return 0;
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
