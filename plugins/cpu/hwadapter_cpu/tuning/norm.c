/* float32 batch normalisation for inference (norm.py): one pass, each element as the reference computes it,
 * ((x - mean) / sqrt(var + eps)) * weight + bias in float32 (no fused multiply-add), so results are bit-identical. */
#include <math.h>
#include <stdint.h>

/* x and out: (outer, channels, inner) contiguous; one channel's parameters for each run of `inner` elements. */
void hwa_batch_norm(const float *x, float *out, const float *mean, const float *var, const float *weight,
                    const float *bias, float eps, int64_t outer, int64_t channels, int64_t inner) {
  for (int64_t c = 0; c < channels; c++) {
    float m = mean[c], d = sqrtf(var[c] + eps), w = weight[c], b = bias[c];
    for (int64_t o = 0; o < outer; o++) {
      const float *src = x + (o * channels + c) * inner;
      float *dst = out + (o * channels + c) * inner;
      for (int64_t i = 0; i < inner; i++) dst[i] = (src[i] - m) / d * w + b;
    }
  }
}
