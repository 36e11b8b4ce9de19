/* The data movement around conv2d's BLAS products (blasconv.py), one image at a time, float32:
 * im2col patches, Winograd F(2x2,3x3) input and output transforms, and the bias + residual + activation epilogue
 * (`relu` below: depthwise.c's activation code, which comes first in the library).
 * Plain loops over contiguous rows so the compiler vectorises them; the products themselves stay in BLAS.
 * Each does a band of output rows (or of channels), so that threads can share one call's work. */
#include <stdint.h>
#include <string.h>

#define RELU(v) ((v) < 0.0f ? 0.0f : (v)) /* as np.maximum(v, 0): nan and -0.0 stay */

/* dst[q] = act(y[q] + res[q]) for q < n: one output row with the residual (res may be NULL) and the activation
 * (`relu`: depthwise.c's ACT_* code; relu inline, the others by its dw_act). */
static void store_row(float *dst, const float *y, const float *res, int64_t n, int64_t relu) {
  for (int64_t q = 0; q < n; q++) {
    float val = y[q] + (res ? res[q] : 0.0f);
    dst[q] = relu == ACT_RELU ? RELU(val) : val;
  }
  if (relu > ACT_RELU) dw_act(dst, n, relu);
}

/* cols[(ci*kh + i)*kw + j][(y - y0)*ow + x] = x[ci][y*sh - pt + i*dh][x*sw - pl + j*dw] for the output rows
 * y0 <= y < y1 (a band of the patches), zero outside the image. */
void hwa_im2col(const float *x, float *cols, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh,
                int64_t sw, int64_t pt, int64_t pl, int64_t dh, int64_t dw, int64_t ow, int64_t y0, int64_t y1) {
  int64_t band = (y1 - y0) * ow;
  for (int64_t ci = 0; ci < c; ci++) {
    const float *plane = x + ci * h * w;
    for (int64_t i = 0; i < kh; i++) {
      for (int64_t j = 0; j < kw; j++) {
        float *row = cols + ((ci * kh + i) * kw + j) * band;
        int64_t x0 = j * dw - pl;
        /* the output columns whose input column is inside the image: lo <= ox < hi */
        int64_t lo = x0 < 0 ? (-x0 + sw - 1) / sw : 0;
        int64_t hi = x0 < w ? (w - x0 + sw - 1) / sw : 0;
        if (lo > ow) lo = ow;
        if (hi > ow) hi = ow;
        if (hi < lo) hi = lo;
        for (int64_t y = y0; y < y1; y++) {
          float *dst = row + (y - y0) * ow;
          int64_t iy = y * sh - pt + i * dh;
          if (iy < 0 || iy >= h) {
            memset(dst, 0, (size_t)ow * sizeof(float));
            continue;
          }
          const float *src = plane + iy * w + x0;
          memset(dst, 0, (size_t)lo * sizeof(float));
          if (sw == 1) {
            memcpy(dst + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
          } else {
            for (int64_t ox = lo; ox < hi; ox++) dst[ox] = src[ox * sw];
          }
          memset(dst + hi, 0, (size_t)(ow - hi) * sizeof(float));
        }
      }
    }
  }
}

/* V[i*4 + j][ci][t] = (B^T d B)[i][j] for the 4x4 tile d at rows 2*ty - pt.., columns 2*tx - pl.. of channel ci
 * (zero outside the image), for the tile rows ty0 <= ty < ty1 (a band), t = (ty - ty0)*tw + tx.
 * B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. */
void hwa_winograd_input(const float *x, float *v, int64_t c, int64_t h, int64_t w, int64_t pt, int64_t pl,
                        int64_t tw, int64_t ty0, int64_t ty1) {
  int64_t wp = 2 * tw + 2, tiles = (ty1 - ty0) * tw;
  float rows[4][wp], s[4][wp];
  for (int64_t ci = 0; ci < c; ci++) {
    const float *plane = x + ci * h * w;
    for (int64_t ty = ty0; ty < ty1; ty++) {
      for (int a = 0; a < 4; a++) { /* the tile row's input row, padded with zeros to wp columns */
        int64_t iy = 2 * ty + a - pt;
        memset(rows[a], 0, sizeof(rows[a]));
        if (iy >= 0 && iy < h) {
          int64_t n = w < wp - pl ? w : wp - pl;
          memcpy(rows[a] + pl, plane + iy * w, (size_t)n * sizeof(float));
        }
      }
      for (int64_t k = 0; k < wp; k++) { /* B^T along the rows: whole rows at once */
        s[0][k] = rows[0][k] - rows[2][k];
        s[1][k] = rows[1][k] + rows[2][k];
        s[2][k] = rows[2][k] - rows[1][k];
        s[3][k] = rows[1][k] - rows[3][k];
      }
      for (int a = 0; a < 4; a++) { /* then B along the columns, two apart per tile */
        float *v0 = v + ((int64_t)(4 * a + 0) * c + ci) * tiles + (ty - ty0) * tw;
        float *v1 = v + ((int64_t)(4 * a + 1) * c + ci) * tiles + (ty - ty0) * tw;
        float *v2 = v + ((int64_t)(4 * a + 2) * c + ci) * tiles + (ty - ty0) * tw;
        float *v3 = v + ((int64_t)(4 * a + 3) * c + ci) * tiles + (ty - ty0) * tw;
        const float *r = s[a];
        for (int64_t tx = 0; tx < tw; tx++) {
          const float *d = r + 2 * tx;
          v0[tx] = d[0] - d[2];
          v1[tx] = d[1] + d[2];
          v2[tx] = d[2] - d[1];
          v3[tx] = d[1] - d[3];
        }
      }
    }
  }
}

/* out[ko][2*ty + a][2*tx + b] = act((A^T M A)[a][b] + bias[ko] + res[ko][..]) for the 16 products M[i*4 + j][ko][t]
 * of the tile rows ty0 <= ty < ty1 (t = (ty - ty0)*tw + tx), inside the oh x ow output. A^T = [1 1 1 0; 0 1 -1 -1].
 * bias, res and rep may be NULL; rep[ko] names the row of M that channel ko reads (the first of identical filters:
 * their channels come out bit-identical). */
void hwa_winograd_output(const float *m, float *out, const float *bias, const float *res, const int64_t *rep,
                         int64_t k, int64_t tw, int64_t oh, int64_t ow, int64_t relu, int64_t ty0, int64_t ty1) {
  int64_t tiles = (ty1 - ty0) * tw, plane = k * tiles;
  float p[2][4][tw], y[2][2 * tw];
  for (int64_t ko = 0; ko < k; ko++) {
    float b = bias ? bias[ko] : 0.0f;
    for (int64_t ty = ty0; ty < ty1; ty++) {
      const float *base = m + (rep ? rep[ko] : ko) * tiles + (ty - ty0) * tw;
      for (int j = 0; j < 4; j++) { /* A^T along the tile's rows */
        const float *m0 = base + (0 * 4 + j) * plane, *m1 = base + (1 * 4 + j) * plane;
        const float *m2 = base + (2 * 4 + j) * plane, *m3 = base + (3 * 4 + j) * plane;
        for (int64_t tx = 0; tx < tw; tx++) {
          p[0][j][tx] = m0[tx] + m1[tx] + m2[tx];
          p[1][j][tx] = m1[tx] - m2[tx] - m3[tx];
        }
      }
      for (int a = 0; a < 2; a++) { /* then A along its columns, interleaved into one output row */
        for (int64_t tx = 0; tx < tw; tx++) {
          y[a][2 * tx] = p[a][0][tx] + p[a][1][tx] + p[a][2][tx] + b;
          y[a][2 * tx + 1] = p[a][1][tx] - p[a][2][tx] - p[a][3][tx] + b;
        }
        int64_t oy = 2 * ty + a;
        if (oy < oh) store_row(out + (ko * oh + oy) * ow, y[a], res ? res + (ko * oh + oy) * ow : 0, ow, relu);
      }
    }
  }
}

/* out[ko][q] = act(out[rep[ko]][q] + bias[ko] + res[ko][q]) in place, for the columns c0 <= q < c1 of the rows
 * k0 <= ko < k1: the epilogue of products written straight into the output. bias, res and rep may be NULL
 * (rep[ko] = ko). rep[ko] <= ko (a filter's first copy), so going down the rows reads every row before it is
 * overwritten; rep must stay inside [k0, k1). */
void hwa_epilogue(float *out, const float *bias, const float *res, const int64_t *rep, int64_t points,
                  int64_t relu, int64_t k0, int64_t k1, int64_t c0, int64_t c1) {
  for (int64_t ko = k1 - 1; ko >= k0; ko--) {
    float b = bias ? bias[ko] : 0.0f;
    float *o = out + ko * points;
    const float *y = out + (rep ? rep[ko] : ko) * points;
    const float *r = res ? res + ko * points : 0;
    if (r) {
      for (int64_t q = c0; q < c1; q++) {
        float val = y[q] + b + r[q];
        o[q] = relu == ACT_RELU ? RELU(val) : val;
      }
    } else {
      for (int64_t q = c0; q < c1; q++) {
        float val = y[q] + b;
        o[q] = relu == ACT_RELU ? RELU(val) : val;
      }
    }
    if (relu > ACT_RELU) dw_act(o + c0, c1 - c0, relu);
  }
}

/* out[ko][c0 + q] = act(block[rep[ko]][q] + bias[ko] + res[ko][c0 + q]) for q < c1 - c0 and ko in [k0, k1): the
 * columns [c0, c1) of the product, computed into their own contiguous scratch (k rows of c1 - c0), stored into the
 * output with the epilogue. bias, res and rep may be NULL; rep[ko] names the row channel ko reads (see
 * hwa_winograd_output). */
void hwa_store(float *out, const float *block, const float *bias, const float *res, const int64_t *rep,
               int64_t points, int64_t c0, int64_t c1, int64_t k0, int64_t k1, int64_t relu) {
  int64_t width = c1 - c0;
  for (int64_t ko = k0; ko < k1; ko++) {
    float b = bias ? bias[ko] : 0.0f;
    float *o = out + ko * points + c0;
    const float *s = block + (rep ? rep[ko] : ko) * width;
    const float *r = res ? res + ko * points + c0 : 0;
    for (int64_t q = 0; q < width; q++) {
      float val = s[q] + b + (r ? r[q] : 0.0f);
      o[q] = relu == ACT_RELU ? RELU(val) : val;
    }
    if (relu > ACT_RELU) dw_act(o, width, relu);
  }
}

/* Winograd F(4x4,3x3): 6x6 input tiles four apart, 36 products, 4x4 outputs (4x fewer multiplications than direct;
 * for larger images, where its costlier transforms pay). Same layouts as F(2x2,3x3) above with 6 for 4.
 * B^T rows: [4 0 -5 0 1 0] [0 -4 -4 1 1 0] [0 4 -4 -1 1 0] [0 -2 -1 2 1 0] [0 2 -1 -2 1 0] [0 4 0 -5 0 1]. */
#define BT6(d, o)                                                      \
  do {                                                                    \
    o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];                            \
    o[1] = -4.0f * (d[1] + d[2]) + d[3] + d[4];                         \
    o[2] = 4.0f * (d[1] - d[2]) - d[3] + d[4];                          \
    o[3] = 2.0f * (d[3] - d[1]) - d[2] + d[4];                          \
    o[4] = 2.0f * (d[1] - d[3]) - d[2] + d[4];                          \
    o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];                            \
  } while (0)

void hwa_winograd4_input(const float *x, float *v, int64_t c, int64_t h, int64_t w, int64_t pt, int64_t pl,
                         int64_t tw, int64_t ty0, int64_t ty1) {
  int64_t wp = 4 * tw + 2, tiles = (ty1 - ty0) * tw;
  float rows[6][wp], s[6][wp];
  for (int64_t ci = 0; ci < c; ci++) {
    const float *plane = x + ci * h * w;
    for (int64_t ty = ty0; ty < ty1; ty++) {
      for (int a = 0; a < 6; a++) {
        int64_t iy = 4 * ty + a - pt;
        memset(rows[a], 0, sizeof(rows[a]));
        if (iy >= 0 && iy < h) {
          int64_t n = w < wp - pl ? w : wp - pl;
          memcpy(rows[a] + pl, plane + iy * w, (size_t)n * sizeof(float));
        }
      }
      for (int64_t k = 0; k < wp; k++) { /* B^T along the rows, whole rows at once */
        float d[6] = {rows[0][k], rows[1][k], rows[2][k], rows[3][k], rows[4][k], rows[5][k]};
        float o[6];
        BT6(d, o);
        for (int a = 0; a < 6; a++) s[a][k] = o[a];
      }
      for (int a = 0; a < 6; a++) { /* then B along the columns, four apart per tile */
        float *vb[6];
        for (int b = 0; b < 6; b++) vb[b] = v + ((int64_t)(6 * a + b) * c + ci) * tiles + (ty - ty0) * tw;
        for (int64_t tx = 0; tx < tw; tx++) {
          const float *d = s[a] + 4 * tx;
          float o[6];
          BT6(d, o);
          for (int b = 0; b < 6; b++) vb[b][tx] = o[b];
        }
      }
    }
  }
}

/* A^T rows: [1 1 1 1 1 0] [0 1 -1 2 -2 0] [0 1 1 4 4 0] [0 1 -1 8 -8 1]. */
#define AT6(m, o)                                             \
  do {                                                        \
    float s12 = m[1] + m[2], d12 = m[1] - m[2];               \
    float s34 = m[3] + m[4], d34 = m[3] - m[4];               \
    o[0] = m[0] + s12 + s34;                                  \
    o[1] = d12 + 2.0f * d34;                                  \
    o[2] = s12 + 4.0f * s34;                                  \
    o[3] = d12 + 8.0f * d34 + m[5];                           \
  } while (0)

void hwa_winograd4_output(const float *m, float *out, const float *bias, const float *res, const int64_t *rep,
                          int64_t k, int64_t tw, int64_t oh, int64_t ow, int64_t relu, int64_t ty0, int64_t ty1) {
  int64_t tiles = (ty1 - ty0) * tw, plane = k * tiles;
  float p[4][6][tw], y[4][4 * tw];
  for (int64_t ko = 0; ko < k; ko++) {
    float b = bias ? bias[ko] : 0.0f;
    for (int64_t ty = ty0; ty < ty1; ty++) {
      const float *base = m + (rep ? rep[ko] : ko) * tiles + (ty - ty0) * tw;
      for (int j = 0; j < 6; j++) { /* A^T along the tile's rows */
        const float *mi[6];
        for (int i = 0; i < 6; i++) mi[i] = base + (6 * i + j) * plane;
        for (int64_t tx = 0; tx < tw; tx++) {
          float col[6] = {mi[0][tx], mi[1][tx], mi[2][tx], mi[3][tx], mi[4][tx], mi[5][tx]};
          float o[4];
          AT6(col, o);
          for (int a = 0; a < 4; a++) p[a][j][tx] = o[a];
        }
      }
      for (int a = 0; a < 4; a++) { /* then A along its columns, into one output row */
        for (int64_t tx = 0; tx < tw; tx++) {
          float row[6] = {p[a][0][tx], p[a][1][tx], p[a][2][tx], p[a][3][tx], p[a][4][tx], p[a][5][tx]};
          float o[4];
          AT6(row, o);
          for (int q = 0; q < 4; q++) y[a][4 * tx + q] = o[q] + b;
        }
        int64_t oy = 4 * ty + a;
        if (oy < oh) store_row(out + (ko * oh + oy) * ow, y[a], res ? res + (ko * oh + oy) * ow : 0, ow, relu);
      }
    }
  }
}
