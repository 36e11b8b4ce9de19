// Pooling over NCHW planes, one output element per work item. ACC is the accumulator, LOWEST the
// identity of max (padding never wins), MAX selects max pooling, EXCLUSIVE averages over the unpadded elements.
typedef struct { long NC, H, W, OH, OW, KH, KW, SH, SW, PT, PL; } Pool;

__kernel void pool2d(__global const T* x, __global T* y, const Pool p) {
  const long total = p.NC * p.OH * p.OW;
  const long i = get_global_id(0);
  if (i >= total) return;
  const long ow = i % p.OW, oh = (i / p.OW) % p.OH, plane = i / (p.OW * p.OH);
  const long h0 = oh * p.SH - p.PT, w0 = ow * p.SW - p.PL;
  const long ha = max(h0, 0L), hb = min(h0 + p.KH, p.H), wa = max(w0, 0L), wb = min(w0 + p.KW, p.W);
  __global const T* src = x + plane * p.H * p.W;
#ifdef MAX
  ACC best = LOWEST;
  for (long h = ha; h < hb; h++)
    for (long w = wa; w < wb; w++) {
      const ACC v = LOAD(src, h * p.W + w);
      if (v > best || ISNAN(v)) best = v;  // nan wins, as in numpy
      if (ISNAN(best)) break;
    }
  STORE(y, i, best);
#else
  ACC sum = 0;
  for (long h = ha; h < hb; h++)
    for (long w = wa; w < wb; w++) sum += LOAD(src, h * p.W + w);
#ifdef EXCLUSIVE
  const long count = max((hb - ha) * (wb - wa), 1L);
#else
  const long count = p.KH * p.KW;
#endif
  STORE(y, i, sum / (ACC)count);
#endif
}

// Adaptive pooling: output (oh, ow) covers rows [oh * H / OH, ceil((oh + 1) * H / OH)), columns alike.
__kernel void adaptive_pool2d(__global const T* x, __global T* y, const long NC, const long H, const long W,
                              const long OH, const long OW) {
  const long total = NC * OH * OW;
  const long i = get_global_id(0);
  if (i >= total) return;
  const long ow = i % OW, oh = (i / OW) % OH, plane = i / (OW * OH);
  const long ha = oh * H / OH, hb = ((oh + 1) * H + OH - 1) / OH;
  const long wa = ow * W / OW, wb = ((ow + 1) * W + OW - 1) / OW;
  __global const T* src = x + plane * H * W;
#ifdef MAX
  ACC best = LOAD(src, ha * W + wa);
  for (long h = ha; h < hb; h++)
    for (long w = wa; w < wb; w++) {
      const ACC v = LOAD(src, h * W + w);
      if (v > best || ISNAN(v)) best = v;
      if (ISNAN(best)) break;
    }
  STORE(y, i, best);
#else
  ACC sum = 0;
  for (long h = ha; h < hb; h++)
    for (long w = wa; w < wb; w++) sum += LOAD(src, h * W + w);
  STORE(y, i, sum / (ACC)((hb - ha) * (wb - wa)));
#endif
}
