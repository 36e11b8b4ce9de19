/* numpy's cblas_sgemm as C calls it (blas.py finds it: its address, and whether its integers are 64-bit), shared by
 * tasks.c and rows.c, each library compiled with this first. */
#include <stdint.h>

typedef void (*sgemm64)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                        int64_t, float, float *, int64_t);
typedef void (*sgemm32)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                        int);

/* c (m x n, row stride ldc) = op(a) op(b), row-major (101: CblasRowMajor; ta, tb: 111 CblasNoTrans, 112 CblasTrans),
 * through the cblas_sgemm at `address` (64-bit integers where ilp64). */
static void sgemm_call(int64_t address, int64_t ilp64, int ta, int tb, int64_t m, int64_t n, int64_t k,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
  if (ilp64)
    ((sgemm64)(intptr_t)address)(101, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  else
    ((sgemm32)(intptr_t)address)(101, ta, tb, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, 0.0f, c,
                                 (int)ldc);
}
