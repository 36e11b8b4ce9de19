/* float32 batch normalisation for inference (norm.py): one pass, each element as the reference computes it,
 * ((x - mean) / sqrt(var + eps)) * weight + bias in float32 (no fused multiply-add), so results are bit-identical. */
#include <math.h>
#include <stdint.h>

/* `count` channels of x and out ((outer, stride channels, inner) contiguous, both starting at the first of them);
 * one channel's parameters for each run of `inner` elements. */
static void hwa_batch_norm_channels(const float *x, float *out, const float *mean, const float *var,
                                    const float *weight, const float *bias, float eps, int64_t outer, int64_t count,
                                    int64_t stride, int64_t inner) {
  for (int64_t c = 0; c < count; c++) {
    float m = mean[c], d = sqrtf(var[c] + eps), w = weight[c], b = bias[c];
    for (int64_t o = 0; o < outer; o++) {
      const float *src = x + (o * stride + c) * inner;
      float *dst = out + (o * stride + c) * inner;
      for (int64_t i = 0; i < inner; i++) dst[i] = (src[i] - m) / d * w + b;
    }
  }
}

/* x and out: (outer, channels, inner) contiguous. */
void hwa_batch_norm(const float *x, float *out, const float *mean, const float *var, const float *weight,
                    const float *bias, float eps, int64_t outer, int64_t channels, int64_t inner) {
  hwa_batch_norm_channels(x, out, mean, var, weight, bias, eps, outer, channels, channels, inner);
}

/* The same as a task of the device's crew (threads.py, segments.py): p: x, out, mean, var, weight, bias, eps (its
 * float32 bits), outer, channels, inner; parts are blocks of channels. */
void hwa_batch_norm_task(const int64_t *p, int64_t part, int64_t parts) {
  int64_t channels = p[8], c0 = channels * part / parts, c1 = channels * (part + 1) / parts, inner = p[9];
  union {
    int32_t i;
    float f;
  } eps = {(int32_t)p[6]};
  const float *x = (const float *)(intptr_t)p[0] + c0 * inner;
  float *out = (float *)(intptr_t)p[1] + c0 * inner;
  hwa_batch_norm_channels(x, out, (const float *)(intptr_t)p[2] + c0, (const float *)(intptr_t)p[3] + c0,
                          (const float *)(intptr_t)p[4] + c0, (const float *)(intptr_t)p[5] + c0, eps.f, p[7],
                          c1 - c0, channels, inner);
}
