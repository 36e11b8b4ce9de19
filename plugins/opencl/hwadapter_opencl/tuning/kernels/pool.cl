// Pooling over NCHW planes, one output element per work item. ACC is the accumulator, LOWEST the
// identity of max (padding never wins), MAX selects max pooling, EXCLUSIVE averages over the unpadded elements.
typedef struct { long NC, H, W, OH, OW, KH, KW, SH, SW, PT, PL; } Pool;
#ifdef FIXED_Pool
__constant Pool fixed_Pool = FIXED_Pool;
#define GEOMETRY_Pool(arg) fixed_Pool
#define UNROLL _Pragma("unroll")  // constant trip counts: PoCL vectorises the work items once the loops are gone
#else
#define UNROLL
#define GEOMETRY_Pool(arg) arg
#endif

__kernel void pool2d(__global const T* x, __global T* y, const Pool p_arg) {
  GEOMETRY(Pool, p, p_arg);
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

// The flat position (h * W + w) of the first maximal element of rows [ha, hb) and columns [wa, wb) of a plane,
// row-major; NaN counts as the largest, the first NaN wins (numpy's argmax). The pooling gradients' argmax.
long first_max(__global const T* src, const long ha, const long hb, const long wa, const long wb, const long W) {
  long at = ha * W + wa;
  ACC best = LOAD(src, at);
  for (long h = ha; h < hb && !ISNAN(best); h++)
    for (long w = wa; w < wb; w++) {
      const ACC v = LOAD(src, h * W + w);
      if (v > best || (ISNAN(v) && !ISNAN(best))) { best = v; at = h * W + w; }
    }
  return at;
}

// The gradient of max pooling with respect to x, one work item per element of x: the sum of the grads g of the
// windows that hold it and whose first maximal element it is (padding never wins: only real elements are scanned).
__kernel void max_pool2d_grad(__global const T* x, __global const T* g, __global T* dx, const Pool p_arg) {
  GEOMETRY(Pool, p, p_arg);
  const long total = p.NC * p.H * p.W;
  const long i = get_global_id(0);
  if (i >= total) return;
  const long w = i % p.W, h = (i / p.W) % p.H, plane = i / (p.W * p.H);
  const long hp = h + p.PT, wp = w + p.PL;  // in padded coordinates: window oh covers [oh * SH, oh * SH + KH)
  const long oh0 = hp >= p.KH ? (hp - p.KH) / p.SH + 1 : 0, oh1 = min(hp / p.SH, p.OH - 1);
  const long ow0 = wp >= p.KW ? (wp - p.KW) / p.SW + 1 : 0, ow1 = min(wp / p.SW, p.OW - 1);
  __global const T* src = x + plane * p.H * p.W;
  __global const T* grad = g + plane * p.OH * p.OW;
  ACC sum = 0;
  if (p.SH >= p.KH && p.SW >= p.KW && p.OH > 0 && p.OW > 0) {
    // Windows that do not overlap (a constant test when FIXED_Pool): the element is in at most one, whose first
    // maximum is found without branches (clamped loads, selects), so the work items vectorise.
    const long oh = min(hp / p.SH, p.OH - 1), ow = min(wp / p.SW, p.OW - 1);
    const long h0 = oh * p.SH - p.PT, w0 = ow * p.SW - p.PL;
    long at = -1;
    ACC best = 0;
    UNROLL
    for (long kh = 0; kh < p.KH; kh++)
      UNROLL
      for (long kw = 0; kw < p.KW; kw++) {
        const long hh = h0 + kh, ww = w0 + kw;
        const bool inside = hh >= 0 && hh < p.H && ww >= 0 && ww < p.W;
        const ACC v = LOAD(src, clamp(hh, 0L, p.H - 1) * p.W + clamp(ww, 0L, p.W - 1));
        // first maximum, NaN the largest and the first NaN winning: as first_max
        const bool better = inside & ((at < 0) | (v > best) | (ISNAN(v) & !ISNAN(best)));  // no branches
        best = better ? v : best;
        at = better ? hh * p.W + ww : at;
      }
    const bool mine = hp - oh * p.SH < p.KH && wp - ow * p.SW < p.KW && at == h * p.W + w;
    const ACC gv = LOAD(grad, oh * p.OW + ow);
    STORE(dx, i, mine ? gv : (ACC)0);
    return;
  }
  for (long oh = oh0; oh <= oh1; oh++) {
    const long h0 = oh * p.SH - p.PT;
    const long ha = max(h0, 0L), hb = min(h0 + p.KH, p.H);
    for (long ow = ow0; ow <= ow1; ow++) {
      const long w0 = ow * p.SW - p.PL;
      if (first_max(src, ha, hb, max(w0, 0L), min(w0 + p.KW, p.W), p.W) == h * p.W + w)
        sum += LOAD(grad, oh * p.OW + ow);
    }
  }
  STORE(dx, i, sum);
}

// The gradient of adaptive max pooling, one work item per element of x: over the windows of adaptive_pool2d that
// hold it (rows [oh * H / OH, ceil((oh + 1) * H / OH)), columns alike), as max_pool2d_grad.
__kernel void adaptive_max_pool2d_grad(__global const T* x, __global const T* g, __global T* dx, const long NC,
                                       const long H, const long W, const long OH, const long OW) {
  const long total = NC * H * W;
  const long i = get_global_id(0);
  if (i >= total) return;
  const long w = i % W, h = (i / W) % H, plane = i / (W * H);
  // the windows that may hold row h: from the first whose end passes h to the last whose start is at most h
  const long oh0 = h * OH / H, oh1 = min(((h + 1) * OH + H - 1) / H - 1, OH - 1);
  const long ow0 = w * OW / W, ow1 = min(((w + 1) * OW + W - 1) / W - 1, OW - 1);
  __global const T* src = x + plane * H * W;
  __global const T* grad = g + plane * OH * OW;
  ACC sum = 0;
  for (long oh = oh0; oh <= oh1; oh++) {
    const long ha = oh * H / OH, hb = ((oh + 1) * H + OH - 1) / OH;
    if (h < ha || h >= hb) continue;
    for (long ow = ow0; ow <= ow1; ow++) {
      const long wa = ow * W / OW, wb = ((ow + 1) * W + OW - 1) / OW;
      if (w >= wa && w < wb && first_max(src, ha, hb, wa, wb, W) == h * W + w) sum += LOAD(grad, oh * OW + ow);
    }
  }
  STORE(dx, i, sum);
}
