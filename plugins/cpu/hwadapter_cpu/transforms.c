/* The data movement around conv2d's BLAS products (blasconv.py), one image at a time, float32:
 * im2col patches, Winograd F(2x2,3x3) input and output transforms, and the bias + residual + relu epilogue.
 * Plain loops over contiguous rows so the compiler vectorises them; the products themselves stay in BLAS.
 * Each does the channels [c0, c1) or [k0, k1) of the whole, so that threads can share one call's work. */
#include <stdint.h>
#include <string.h>

#define RELU(v) ((v) > 0.0f ? (v) : 0.0f)

/* cols[(ci*kh + i)*kw + j][y*ow + x] = x[ci][y*sh - pt + i*dh][x*sw - pl + j*dw], zero outside the image. */
void hwa_im2col(const float *x, float *cols, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                int64_t pt, int64_t pl, int64_t dh, int64_t dw, int64_t oh, int64_t ow, int64_t c0, int64_t c1) {
  for (int64_t ci = c0; ci < c1; ci++) {
    const float *plane = x + ci * h * w;
    for (int64_t i = 0; i < kh; i++) {
      for (int64_t j = 0; j < kw; j++) {
        float *row = cols + ((ci * kh + i) * kw + j) * oh * ow;
        int64_t x0 = j * dw - pl;
        /* the output columns whose input column is inside the image: lo <= ox < hi */
        int64_t lo = x0 < 0 ? (-x0 + sw - 1) / sw : 0;
        int64_t hi = x0 < w ? (w - x0 + sw - 1) / sw : 0;
        if (lo > ow) lo = ow;
        if (hi > ow) hi = ow;
        if (hi < lo) hi = lo;
        for (int64_t y = 0; y < oh; y++) {
          float *dst = row + y * ow;
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
 * (zero outside the image), t = ty*tw + tx. B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. */
void hwa_winograd_input(const float *x, float *v, int64_t c, int64_t h, int64_t w, int64_t pt, int64_t pl,
                        int64_t th, int64_t tw, int64_t c0, int64_t c1) {
  int64_t wp = 2 * tw + 2, tiles = th * tw;
  float rows[4][wp], s[4][wp];
  for (int64_t ci = c0; ci < c1; ci++) {
    const float *plane = x + ci * h * w;
    for (int64_t ty = 0; ty < th; ty++) {
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
        float *v0 = v + ((int64_t)(4 * a + 0) * c + ci) * tiles + ty * tw;
        float *v1 = v + ((int64_t)(4 * a + 1) * c + ci) * tiles + ty * tw;
        float *v2 = v + ((int64_t)(4 * a + 2) * c + ci) * tiles + ty * tw;
        float *v3 = v + ((int64_t)(4 * a + 3) * c + ci) * tiles + ty * tw;
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

/* out[ko][2*ty + a][2*tx + b] = act((A^T M A)[a][b] + bias[ko] + res[ko][..]) for the 16 products M[i*4 + j][ko][t],
 * inside the oh x ow output. A^T = [1 1 1 0; 0 1 -1 -1]. bias, res and rep may be NULL; rep[ko] names the row of M
 * that channel ko reads (the first of identical filters: their channels come out bit-identical). */
void hwa_winograd_output(const float *m, float *out, const float *bias, const float *res, const int64_t *rep,
                         int64_t k, int64_t th, int64_t tw, int64_t oh, int64_t ow, int64_t relu, int64_t k0,
                         int64_t k1) {
  int64_t tiles = th * tw, plane = k * tiles;
  float p[2][4][tw], y[2][2 * tw];
  for (int64_t ko = k0; ko < k1; ko++) {
    float b = bias ? bias[ko] : 0.0f;
    for (int64_t ty = 0; ty < th; ty++) {
      const float *base = m + (rep ? rep[ko] : ko) * tiles + ty * tw;
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
        if (oy >= oh) continue;
        float *dst = out + (ko * oh + oy) * ow;
        const float *r = res ? res + (ko * oh + oy) * ow : 0;
        for (int64_t ox = 0; ox < ow; ox++) {
          float val = y[a][ox] + (r ? r[ox] : 0.0f);
          dst[ox] = relu ? RELU(val) : val;
        }
      }
    }
  }
}

/* out[ko][p] = act(out[rep[ko]][p] + bias[ko] + res[ko][p]) in place, one pass; bias, res and rep may be NULL.
 * rep[ko] <= ko (the first of identical filters), so going down the channels reads every row before it is written
 * (with a rep, one call must do all the channels). */
void hwa_epilogue(float *out, const float *bias, const float *res, const int64_t *rep, int64_t points, int64_t relu,
                  int64_t k0, int64_t k1) {
  for (int64_t ko = k1 - 1; ko >= k0; ko--) {
    float b = bias ? bias[ko] : 0.0f;
    float *o = out + ko * points;
    const float *src = out + (rep ? rep[ko] : ko) * points;
    const float *r = res ? res + ko * points : 0;
    if (r) {
      for (int64_t q = 0; q < points; q++) {
        float val = src[q] + b + r[q];
        o[q] = relu ? RELU(val) : val;
      }
    } else {
      for (int64_t q = 0; q < points; q++) {
        float val = src[q] + b;
        o[q] = relu ? RELU(val) : val;
      }
    }
  }
}
