/* The CPU's tuned softmax, log_softmax and layer_norm over trailing axes, and batched float32 products: tasks for the
 * device's crew, task(params, part, parts), each part a contiguous block of rows (or of batch items). rows.py fills
 * the parameters; the source is compiled after the backend's prelude, which declares the C library's vector math
 * (libmvec's expf) where it has it, so these loops call expf vectorised, and after sgemm.c. */
#include <stdint.h>
#include <string.h>

#define PTR(type, i) ((type *)(intptr_t)p[i])

static void block(int64_t count, int64_t part, int64_t parts, int64_t *first, int64_t *last) {
  *first = count * part / parts;
  *last = count * (part + 1) / parts;
}

/* p: x, y, rows, cols, log. Per row: the largest value (NaN aside: a NaN's exp makes the sum and so every result
 * NaN, as the reference's), then exp(x - max) and its sum, then y = e / sum, or x - max - log(sum) for log. Sums
 * accumulate in double: a long row's float lanes would lose more than the reference's pairwise sum. */
void hwa_softmax_rows(const int64_t *p, int64_t part, int64_t parts) {
  const float *x = PTR(const float, 0);
  float *y = PTR(float, 1);
  const int64_t cols = p[3];
  int64_t first, last;
  block(p[2], part, parts, &first, &last);
  for (int64_t r = first; r < last; ++r) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    float m = -INFINITY;
    double s = 0.0;
#pragma omp simd reduction(max : m)
    for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
    if (p[4]) {
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < cols; ++c) s += expf(xr[c] - m);
      const float ls = logf((float)s);
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) - ls;
    } else {
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < cols; ++c) {
        const float e = expf(xr[c] - m);
        yr[c] = e;
        s += e;
      }
      const float sf = (float)s;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) yr[c] = yr[c] / sf;
    }
  }
}

/* p: x, y, weight, bias, rows, cols, epsilon (float bits). Per row: mean, variance (a second pass, as the
 * reference's; sums in double), then (x - mean) / sqrt(var + eps) * weight + bias. */
void hwa_layer_norm_rows(const int64_t *p, int64_t part, int64_t parts) {
  const float *x = PTR(const float, 0), *w = PTR(const float, 2), *b = PTR(const float, 3);
  float *y = PTR(float, 1);
  const int64_t cols = p[5];
  union { int64_t i; float f; } eps = {.i = p[6]};
  int64_t first, last;
  block(p[4], part, parts, &first, &last);
  for (int64_t r = first; r < last; ++r) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    double s = 0.0, v = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < cols; ++c) s += xr[c];
    /* the sums round to float before dividing, so a row whose float sum overflows is inf as the reference's */
    const float mu = (float)s / (float)cols;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < cols; ++c) v += (xr[c] - mu) * (xr[c] - mu);
    const float sd = sqrtf((float)v / (float)cols + eps.f);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mu) / sd * w[c] + b[c];
  }
}

/* p: sgemm, ilp64, x, y, out, batch, m, n, k, transa, transb, lda, ldb, x_step, y_step (elements per batch item;
 * 0: broadcast). out[i] (m x n) = op(x[i]) op(y[i]), one single-threaded BLAS call per batch item. */
void hwa_batched_matmul(const int64_t *p, int64_t part, int64_t parts) {
  const float *x = PTR(const float, 2), *y = PTR(const float, 3);
  float *out = PTR(float, 4);
  const int64_t m = p[6], n = p[7], k = p[8], lda = p[11], ldb = p[12];
  const int ta = p[9] ? 112 : 111, tb = p[10] ? 112 : 111; /* CblasTrans : CblasNoTrans */
  int64_t first, last;
  block(p[5], part, parts, &first, &last);
  for (int64_t i = first; i < last; ++i) {
    const float *a = x + i * p[13], *b = y + i * p[14];
    float *c = out + i * m * n;
    sgemm_call(p[0], p[1], ta, tb, m, n, k, a, lda, b, ldb, c, n);
  }
}

/* p: x, y, batch, m, n. y[b] (n x m) = x[b] (m x n) transposed, in 32 x 32 tiles (reading rows of one, writing
 * rows of the other, both within the cache); parts are blocks of the batch's tile rows. */
void hwa_transpose(const int64_t *p, int64_t part, int64_t parts) {
  const float *x = PTR(const float, 0);
  float *y = PTR(float, 1);
  const int64_t m = p[3], n = p[4], tiles = (m + 31) / 32;
  int64_t first, last;
  block(p[2] * tiles, part, parts, &first, &last);
  for (int64_t t = first; t < last; ++t) {
    const int64_t b = t / tiles, i0 = (t % tiles) * 32, i1 = i0 + 32 < m ? i0 + 32 : m;
    const float *xb = x + b * m * n;
    float *yb = y + b * m * n;
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
      const int64_t j1 = j0 + 32 < n ? j0 + 32 : n;
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t i = i0; i < i1; ++i) yb[j * m + i] = xb[i * n + j];
    }
  }
}

/* p: x, y, batch, m, n, bytes. The same swap of blocks of `bytes` bytes that stay together (the trailing axes that
 * do not move: a channel shuffle's planes): y[b][j][i] = x[b][i][j], one copy per block; parts are blocks of the
 * batch's output rows. */
void hwa_transpose_blocks(const int64_t *p, int64_t part, int64_t parts) {
  const char *x = PTR(const char, 0);
  char *y = PTR(char, 1);
  const int64_t m = p[3], n = p[4], bytes = p[5];
  int64_t first, last;
  block(p[2] * n, part, parts, &first, &last);
  for (int64_t r = first; r < last; ++r) {
    const int64_t b = r / n, j = r % n;
    const char *xb = x + (b * m * n + j) * bytes;
    char *yr = y + r * m * bytes;
    for (int64_t i = 0; i < m; ++i) memcpy(yr + i * bytes, xb + i * n * bytes, (size_t)bytes);
  }
}

/* calls.c's entry form (a0, a1, p, a3, a4; the others unused): p: out, outer, k, then k pairs (input, bytes). A
 * concatenation: for each of `outer` slices, each input's `bytes` in turn. */
int64_t hwa_concat(int64_t a0, int64_t a1, int64_t *p, int64_t a3, int64_t a4) {
  (void)a0, (void)a1, (void)a3, (void)a4;
  char *out = PTR(char, 0);
  for (int64_t o = 0; o < p[1]; o++)
    for (int64_t i = 0; i < p[2]; i++) {
      int64_t bytes = p[4 + 2 * i];
      memcpy(out, PTR(const char, 3 + 2 * i) + o * bytes, (size_t)bytes);
      out += bytes;
    }
  return 0;
}

/* p: x, y, rows, cols. y[r] = the mean of row r as the reference takes it, its float32 total divided by the count in
 * float32 (a total past float32's range is infinite), the total summed in double and rounded once (eight running
 * sums from +0, as numpy's sum starts: a row of -0 gives +0). */
void hwa_mean_rows(const int64_t *p, int64_t part, int64_t parts) {
  const float *x = PTR(const float, 0);
  float *y = PTR(float, 1);
  const int64_t cols = p[3];
  int64_t first, last;
  block(p[2], part, parts, &first, &last);
  for (int64_t r = first; r < last; ++r) {
    const float *xr = x + r * cols;
    double acc[8] = {0};
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8)
      for (int l = 0; l < 8; l++) acc[l] += (double)xr[c + l];
    for (int l = 0; c + l < cols; l++) acc[l] += (double)xr[c + l];
    double s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    y[r] = (float)s / (float)cols;
  }
}

/* p: x, y, n. y = np.maximum(x, 0): x where it is above 0 or nan, else +0 (as numpy's: -0 gives +0); parts are
 * blocks of elements. */
void hwa_relu(const int64_t *p, int64_t part, int64_t parts) {
  const float *x = PTR(const float, 0);
  float *y = PTR(float, 1);
  int64_t first, last;
  block(p[2], part, parts, &first, &last);
  for (int64_t i = first; i < last; ++i) y[i] = (x[i] > 0.0f || x[i] != x[i]) ? x[i] : 0.0f;
}
