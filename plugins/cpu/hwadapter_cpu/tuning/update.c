/* float32 optimizer updates (update.py): the reference kernels' arithmetic in the same order, one pass over the
 * elements instead of a numpy temporary per operation. Compiled without contraction (no fused multiply-add), so
 * every result equals the reference bit for bit. */
#include <math.h>
#include <stdint.h>

void hwa_sgd(const float *p, const float *g, float *out, int64_t n, float lr, float wd, int decay) {
  for (int64_t i = 0; i < n; i++) {
    float gi = decay ? g[i] + wd * p[i] : g[i];
    out[i] = p[i] - lr * gi;
  }
}

void hwa_momentum(const float *p, const float *g, const float *v, float *out_p, float *out_v, int64_t n, float lr,
                  float mu, float wd, int decay, int nesterov) {
  for (int64_t i = 0; i < n; i++) {
    float gi = decay ? g[i] + wd * p[i] : g[i];
    float vi = mu * v[i] + gi;
    float step = nesterov ? gi + mu * vi : vi;
    out_v[i] = vi;
    out_p[i] = p[i] - lr * step;
  }
}

/* One Adam pass; l2 and decoupled are constants where it is inlined, so each variant vectorises. */
static inline __attribute__((always_inline)) void adam(const float *restrict p, const float *restrict g,
                                                       const float *restrict m, const float *restrict v,
                                                       float *restrict out_p, float *restrict out_m,
                                                       float *restrict out_v, int64_t n, float lr, float b1, float c1,
                                                       float b2, float c2, float bias1, float bias2, float eps,
                                                       float wd, int l2, float shrink, int decoupled) {
  for (int64_t i = 0; i < n; i++) {
    float gi = l2 ? g[i] + wd * p[i] : g[i];
    float mi = b1 * m[i] + c1 * gi;
    float vi = b2 * v[i] + c2 * gi * gi;
    float pi = decoupled ? p[i] * shrink : p[i];
    out_m[i] = mi;
    out_v[i] = vi;
    out_p[i] = pi - lr * (mi / bias1) / (sqrtf(vi / bias2) + eps);
  }
}

void hwa_adam(const float *p, const float *g, const float *m, const float *v, float *out_p, float *out_m,
              float *out_v, int64_t n, float lr, float b1, float c1, float b2, float c2, float bias1, float bias2,
              float eps, float wd, int l2, float shrink, int decoupled) {
  /* c1 = 1 - beta1, c2 = 1 - beta2, bias1 = 1 - beta1_pow, bias2 = 1 - beta2_pow, shrink = 1 - lr * wd */
  if (l2)
    adam(p, g, m, v, out_p, out_m, out_v, n, lr, b1, c1, b2, c2, bias1, bias2, eps, wd, 1, shrink, 0);
  else if (decoupled)
    adam(p, g, m, v, out_p, out_m, out_v, n, lr, b1, c1, b2, c2, bias1, bias2, eps, wd, 0, shrink, 1);
  else
    adam(p, g, m, v, out_p, out_m, out_v, n, lr, b1, c1, b2, c2, bias1, bias2, eps, wd, 0, shrink, 0);
}
