/* Direct depthwise conv2d (blasconv.py): groups == input channels, each output channel one input plane convolved
 * with its own kh x kw filter, float32, NCHW, any stride, padding and dilation, with the bias, residual and
 * activation fused. No BLAS: each channel is only kh*kw multiply-adds per output, far too thin for a product.
 *
 * Both layouts below copy the input, zero-padded, into scratch first: every output then reads all its taps with no
 * border cases, and a padded tap is 0 * w as in the reference kernel's product (inf and NaN weights included). The
 * padding is written once per call (every plane of a call has the same geometry); each plane copies only its inside.
 *
 * Wide planes, one at a time, vectorised along the output rows: the plane is split into `sh * sw` polyphase
 * components (component (a, b) holds the padded rows a, a + sh, ... and columns b, b + sw, ...), all Ws wide,
 * Ws = ow + (kw - 1) * dw / sw. There every tap (i, k) of every output (oy, ox) reads component
 * ((i*dh) % sh, (k*dw) % sw) at the flat index t + ((i*dh) / sh) * Ws + (k*dw) / sw, t = oy*Ws + ox: the
 * convolution is a sum of shifted flat arrays, one vectorised loop over t whatever the stride, and only the Ws - ow
 * columns past each row's end are computed and dropped.
 *
 * Small planes (7x7, 14x14: a row is less than a vector, and per-row work would dominate), and planes up to 64x64
 * under filters of 25 taps or more, sixteen at a time, vectorised across them: the sixteen planes interleaved pixel
 * by pixel (16 floats a pixel), each tap one aligned vector load and multiply-add with sixteen weights, whatever the
 * image width. */
#include <math.h>
#include <stdint.h>
#include <string.h>

/* the activation codes of P_ACT (blasconv.py's ACTIVATIONS) */
enum { ACT_NONE, ACT_RELU, ACT_SIGMOID, ACT_TANH, ACT_GELU, ACT_RELU6, ACT_SILU };

/* the lanes of the small-plane layout, and the vectors the wide-plane passes run whole (a plane's last partial
 * vector reads past its components, into the next or the zeroed slack, and writes past its sums, then is dropped) */
#define DW_LANES 16
/* at most this many floats of one wide plane's flat sums at a time: they stay in L1 across the passes */
#define DW_CHUNK 2048
/* output planes at most this wide take the small-plane layout: a row is at most one vector there */
#define DW_NARROW 16
/* ... and larger ones up to this many pixels may (hwa_depthwise_layout): its three buffers stay in L2 */
#define DW_WIDE 4096
/* narrow planes of more pixels than this (a tall strip) take the wide-plane layout: it copies one plane at a time */
#define DW_TALL 65536

static int64_t round16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* a*b + c in one rounding, as BLAS's products have, where the target has the instruction; elsewhere fmaf would be a
 * library call per tap, not a vector instruction */
#ifdef FP_FAST_FMAF
#define DW_FMA(a, b, c) fmaf(a, b, c)
#else
#define DW_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* ---- the fused activations ---- */

/* e^x for float32 lanes, vectorisable (libm's expf is a call per element): 2^n * e^r with n = round(x / ln 2),
 * |r| <= ln 2 / 2 (ln 2 split in two parts so that r is exact), e^r by its degree-7 Taylor polynomial (within an
 * ulp or two); 0 below -104, inf above 88.8, NaN stays NaN. */
static inline float dw_exp(float x) {
  float c = x < -104.0f ? -104.0f : (x > 88.8f ? 88.8f : x); /* NaN compares false: it stays, into r and p */
  /* round to nearest by adding and taking away 1.5 * 2^23 (rintf is a call without SSE4.1); 0 for NaN, whose
   * conversion to an integer is undefined */
  float n = ((c == c ? c : 0.0f) * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = DW_FMA(n, -0.693145751953125f, c); /* ln 2's high part has 16 bits: n times it is exact */
  r = DW_FMA(n, -1.428606765330187045e-06f, r);
  float p = 1.0f / 5040.0f;
  p = DW_FMA(p, r, 1.0f / 720.0f);
  p = DW_FMA(p, r, 1.0f / 120.0f);
  p = DW_FMA(p, r, 1.0f / 24.0f);
  p = DW_FMA(p, r, 1.0f / 6.0f);
  p = DW_FMA(p, r, 0.5f);
  p = DW_FMA(p, r, 1.0f);
  p = DW_FMA(p, r, 1.0f);
  /* 2^n in two halves, so that n down to -150 (subnormal results) and up to 128 stay representable */
  int32_t ni = (int32_t)n, n1 = ni / 2, n2 = ni - n1;
  union { int32_t i; float f; } s1, s2;
  s1.i = (n1 + 127) << 23;
  s2.i = (n2 + 127) << 23;
  float e = p * s1.f * s2.f;
  return x > 88.8f ? INFINITY : e;
}

/* the reference's sigmoid: 1 / (1 + e^-|x|) or e^-|x| / (1 + e^-|x|) */
static inline float dw_sigmoid(float x) {
  float e = dw_exp(-fabsf(x));
  return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

/* tanh: its odd Taylor polynomial near 0 (where 1 - 2 / (e^2x + 1) would cancel), that form elsewhere */
static inline float dw_tanh(float x) {
  float a = fabsf(x), x2 = x * x;
  float poly = x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315 + x2 * (62.0f / 2835 +
                                                                                      x2 * (-1382.0f / 155925))))));
  float big = 1.0f - 2.0f / (dw_exp(2.0f * a) + 1.0f);
  big = x < 0.0f ? -big : big;
  return a < 0.25f ? poly : big; /* NaN: big is NaN */
}

/* gelu: x * Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2, erfc(z) (z >= 0) by its Chebyshev fit t e^(-z^2 + P(t)),
 * t = 1 / (1 + z/2) (relative error under 1.2e-7); -inf gives -0.0 as the reference's does */
static inline float dw_gelu(float x) {
  float z = fabsf(x) * 0.70710678118654752f, t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = DW_FMA(p, t, -0.82215223f);
  p = DW_FMA(p, t, 1.48851587f);
  p = DW_FMA(p, t, -1.13520398f);
  p = DW_FMA(p, t, 0.27886807f);
  p = DW_FMA(p, t, -0.18628806f);
  p = DW_FMA(p, t, 0.09678418f);
  p = DW_FMA(p, t, 0.37409196f);
  p = DW_FMA(p, t, 1.00002368f);
  p = DW_FMA(p, t, -1.26551223f);
  float erfc = t * dw_exp(p - z * z);
  float phi = x >= 0.0f ? 1.0f - 0.5f * erfc : 0.5f * erfc;
  return x == -INFINITY ? -0.0f : x * phi;
}

/* out[q] = act(out[q]) for q < n, in place */
static void dw_act(float *restrict out, int64_t n, int64_t act) {
  switch (act) {
  case ACT_RELU: /* as np.maximum(v, 0): NaN and -0.0 stay */
    for (int64_t q = 0; q < n; q++) out[q] = out[q] < 0.0f ? 0.0f : out[q];
    break;
  case ACT_SIGMOID:
    for (int64_t q = 0; q < n; q++) out[q] = dw_sigmoid(out[q]);
    break;
  case ACT_TANH:
    for (int64_t q = 0; q < n; q++) out[q] = dw_tanh(out[q]);
    break;
  case ACT_GELU:
    for (int64_t q = 0; q < n; q++) out[q] = dw_gelu(out[q]);
    break;
  case ACT_RELU6: /* as np.clip(v, 0, 6): NaN and -0.0 stay */
    for (int64_t q = 0; q < n; q++) out[q] = out[q] < 0.0f ? 0.0f : (out[q] > 6.0f ? 6.0f : out[q]);
    break;
  case ACT_SILU: /* v * sigmoid(v), the sigmoid rounded first as the unfused ops round it */
    for (int64_t q = 0; q < n; q++) out[q] = out[q] * dw_sigmoid(out[q]);
    break;
  default:
    break;
  }
}

/* ---- wide planes ---- */

/* The flat layout of one plane's components. */
typedef struct {
  int64_t hs, ws, size; /* rows and columns of a component; size: floats of all sh*sw components */
} dw_layout;

static dw_layout dw_plan(int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh,
                         int64_t dw) {
  dw_layout l;
  l.hs = oh + (kh - 1) * dh / sh;
  l.ws = ow + (kw - 1) * dw / sw;
  l.size = sh * sw * l.hs * l.ws;
  return l;
}

/* The inside of component (a, b) of input plane x: dst[r][j] = x[r*sh + a - pt][j*sw + b - pl] where that lies in
 * the image; the padding around it is left as it is. */
static void dw_component(const float *restrict x, float *restrict dst, int64_t h, int64_t iw, dw_layout l, int64_t sh,
                         int64_t sw, int64_t pt, int64_t pl, int64_t a, int64_t b) {
  /* the columns j whose input column j*sw + b - pl lies inside the image: lo <= j < hi */
  int64_t first = pl - b, last = iw - 1 + pl - b;
  int64_t lo = first > 0 ? (first + sw - 1) / sw : 0;
  int64_t hi = last >= 0 ? last / sw + 1 : 0;
  if (hi > l.ws) hi = l.ws;
  if (lo >= hi) return;
  /* and the rows r whose input row r*sh + a - pt does: r0 <= r < r1 */
  int64_t top = pt - a, bottom = h - 1 + pt - a;
  int64_t r0 = top > 0 ? (top + sh - 1) / sh : 0, r1 = bottom >= 0 ? bottom / sh + 1 : 0;
  if (r1 > l.hs) r1 = l.hs;
  for (int64_t r = r0; r < r1; r++) {
    float *restrict row = dst + r * l.ws;
    const float *restrict src = x + (r * sh + a - pt) * iw + b - pl;
    if (sw == 1)
      memcpy(row + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
    else if (sw == 2)
      for (int64_t j = lo; j < hi; j++) row[j] = src[2 * j];
    else
      for (int64_t j = lo; j < hi; j++) row[j] = src[j * sw];
  }
}

/* One pass over the flat sums s[t], t < n: R kernel rows of K taps each, stride SW along the rows (dilation 1).
 * Row r's tap k reads p[r*SW + k % SW][t + k / SW] (its component's row pointer) with weight w[r*wstride + k].
 * first: s starts at `init` (the bias) instead of its current value. Each row sums into its own accumulator: one
 * chain of R*K dependent multiply-adds would wait on the FMA's latency. ivdep: s never overlaps the components, and
 * the compiler cannot prove it for this many pointers. */
#define DW_PASS(K, R, SW)                                                                                           \
  static void dw_pass_##K##_##R##_##SW(float *restrict s, const float *const *p, const float *w, int64_t wstride,  \
                                        int64_t n, int first, float init) {                                        \
    float wt[R][K];                                                                                                 \
    const float *q[R][SW];                                                                                          \
    for (int r = 0; r < R; r++) {                                                                                   \
      for (int k = 0; k < K; k++) wt[r][k] = w[r * wstride + k];                                                    \
      for (int c = 0; c < SW; c++) q[r][c] = p[r * SW + c];                                                         \
    }                                                                                                               \
    _Pragma("GCC ivdep") for (int64_t t = 0; t < n; t++) {                                                          \
      float acc[R];                                                                                                 \
      _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                                         \
        acc[r] = wt[r][0] * q[r][0][t];                                                                             \
        _Pragma("GCC unroll 8") for (int k = 1; k < K; k++)                                                         \
          acc[r] = DW_FMA(wt[r][k], q[r][k % SW][t + k / SW], acc[r]);                                                \
      }                                                                                                             \
      float v = first ? init : s[t];                                                                                \
      _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) v += acc[r];                                              \
      s[t] = v;                                                                                                     \
    }                                                                                                               \
  }

typedef void (*dw_pass_fn)(float *restrict, const float *const *, const float *, int64_t, int64_t, int, float);

#define DW_PASSES(K, SW) DW_PASS(K, 1, SW) DW_PASS(K, 2, SW) DW_PASS(K, 3, SW)
DW_PASSES(3, 1)
DW_PASSES(3, 2)
DW_PASSES(5, 1)
DW_PASSES(5, 2)
DW_PASSES(7, 1)
DW_PASSES(7, 2)

/* [kernel width 3, 5, 7][stride 1, 2][rows 1..3] */
static const dw_pass_fn dw_passes[3][2][3] = {
    {{dw_pass_3_1_1, dw_pass_3_2_1, dw_pass_3_3_1}, {dw_pass_3_1_2, dw_pass_3_2_2, dw_pass_3_3_2}},
    {{dw_pass_5_1_1, dw_pass_5_2_1, dw_pass_5_3_1}, {dw_pass_5_1_2, dw_pass_5_2_2, dw_pass_5_3_2}},
    {{dw_pass_7_1_1, dw_pass_7_2_1, dw_pass_7_3_1}, {dw_pass_7_1_2, dw_pass_7_2_2, dw_pass_7_3_2}}};

/* Any other tap: s[t] (first: init) + w * p[t]. */
static void dw_tap(float *restrict s, const float *restrict p, float w, int64_t n, int first, float init) {
  if (first)
    for (int64_t t = 0; t < n; t++) s[t] = DW_FMA(w, p[t], init);
  else
    for (int64_t t = 0; t < n; t++) s[t] = DW_FMA(w, p[t], s[t]);
}

/* out[y][x] = s[y][x] + res[y][x] for the rows y < rows of ow outputs (sums ws apart; res may be NULL) */
static void dw_store(float *restrict out, const float *restrict s, const float *restrict res, int64_t rows,
                     int64_t ow, int64_t ws) {
  for (int64_t y = 0; y < rows; y++) {
    float *restrict o = out + y * ow;
    const float *restrict v = s + y * ws;
    if (res)
      for (int64_t q = 0; q < ow; q++) o[q] = v[q] + res[y * ow + q];
    else
      memcpy(o, v, (size_t)ow * sizeof(float));
  }
}

static int64_t dw_flat_scratch(int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh,
                               int64_t dw) {
  dw_layout l = dw_plan(oh, ow, kh, kw, sh, sw, dh, dw);
  return round16(l.size + DW_LANES) + (l.ws > DW_CHUNK ? l.ws : DW_CHUNK) + DW_LANES;
}

/* Output planes [q0, q1), one at a time (see the top). */
static void dw_flat(const float *x, const float *w, const float *bias, const float *res, float *out, float *scratch,
                    int64_t c, int64_t m, int64_t h, int64_t iw, int64_t oh, int64_t ow, int64_t kh, int64_t kw,
                    int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t dh, int64_t dw, int64_t act, int64_t q0,
                    int64_t q1) {
  dw_layout l = dw_plan(oh, ow, kh, kw, sh, sw, dh, dw);
  int64_t span = round16(l.size + DW_LANES), comp = l.hs * l.ws;
  float *comps = scratch, *s = scratch + span;
  memset(comps, 0, (size_t)span * sizeof(float)); /* the padding, and the slack the last vector reads */
  int64_t o = c * m, plane = oh * ow, taps = kh * kw;
  /* a fast pass takes whole kernel rows: a width of 3, 5 or 7, stride 1 or 2, no dilation */
  int fast = (kw == 3 || kw == 5 || kw == 7) && (sw == 1 || sw == 2) && dw == 1;
  const dw_pass_fn *passes = fast ? dw_passes[kw / 2 - 1][sw - 1] : NULL;
  int64_t rows = DW_CHUNK / l.ws; /* output rows per chunk: their flat sums stay in L1 */
  if (rows < 1) rows = 1;
  int64_t built = -1;
  for (int64_t q = q0; q < q1; q++) {
    int64_t in = q / m, ch = q % o;
    if (in != built) { /* the input plane's components, once for its m output channels */
      for (int64_t a = 0; a < sh; a++)
        for (int64_t b = 0; b < sw; b++)
          dw_component(x + in * h * iw, comps + (a * sw + b) * comp, h, iw, l, sh, sw, pt, pl, a, b);
      built = in;
    }
    const float *f = w + ch * taps;
    float init = bias ? bias[ch] : 0.0f;
    for (int64_t y0 = 0; y0 < oh; y0 += rows) {
      int64_t y1 = y0 + rows < oh ? y0 + rows : oh, t0 = y0 * l.ws;
      int64_t n = round16((y1 - y0 - 1) * l.ws + ow);
      int first = 1;
      for (int64_t i = 0; i < kh;) {
        if (fast) { /* up to three kernel rows per pass */
          int r = kh - i < 3 ? (int)(kh - i) : 3;
          const float *p[6];
          for (int j = 0; j < r; j++) {
            int64_t ri = (i + j) * dh, a = ri % sh, off = t0 + (ri / sh) * l.ws;
            for (int64_t b = 0; b < sw; b++) p[j * sw + b] = comps + (a * sw + b) * comp + off;
          }
          passes[r - 1](s, p, f + i * kw, kw, n, first, init);
          i += r;
        } else {
          int64_t ri = i * dh, a = ri % sh;
          for (int64_t k = 0; k < kw; k++) {
            int64_t ci = k * dw, b = ci % sw;
            dw_tap(s, comps + (a * sw + b) * comp + t0 + (ri / sh) * l.ws + ci / sw, f[i * kw + k], n, first, init);
            first = 0;
          }
          i++;
        }
        first = 0;
      }
      float *dst = out + q * plane + y0 * ow;
      dw_store(dst, s, res ? res + q * plane + y0 * ow : NULL, y1 - y0, ow, l.ws);
      dw_act(dst, (y1 - y0) * ow, act);
    }
  }
}

/* ---- small planes ---- */

/* The interleaved layout: padded planes hp x wp, DW_LANES floats a pixel; the padded extent of n outputs along an
 * axis of kernel size k, stride s and dilation d: */
static int64_t dwb_extent(int64_t n, int64_t k, int64_t s, int64_t d) { return (n - 1) * s + (k - 1) * d + 1; }

/* One pass over all outputs of sixteen planes: R kernel rows of K taps each (dilation 1 along the rows; wp16: the
 * floats from one kernel row to the next). s[(oy*ow + ox)*16 + l] (first: init[l]) plus, for row r and tap k,
 * wv[(r*K + k)*16 + l] * p[oy*rstride + ox*sw16 + r*wp16 + k*16 + l]. The lane loop is one vector; each row sums
 * into its own accumulator (see DW_PASS). */
#define DWB_PASS(K, R)                                                                                              \
  static void dwb_pass_##K##_##R(float *restrict s, const float *restrict p, int64_t wp16, int64_t rstride,        \
                                 int64_t sw16, const float *restrict wv, int64_t oh, int64_t ow, int first,        \
                                 const float *restrict init) {                                                     \
    for (int64_t oy = 0; oy < oh; oy++)                                                                             \
      for (int64_t ox = 0; ox < ow; ox++) {                                                                         \
        const float *b = p + oy * rstride + ox * sw16;                                                              \
        float *restrict o = s + (oy * ow + ox) * DW_LANES;                                                          \
        _Pragma("GCC ivdep") for (int l = 0; l < DW_LANES; l++) {                                                   \
          float acc[R];                                                                                             \
          _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                                     \
            acc[r] = wv[r * K * DW_LANES + l] * b[r * wp16 + l];                                                    \
            _Pragma("GCC unroll 8") for (int k = 1; k < K; k++)                                                     \
              acc[r] = DW_FMA(wv[(r * K + k) * DW_LANES + l], b[r * wp16 + k * DW_LANES + l], acc[r]);               \
          }                                                                                                         \
          float v = first ? init[l] : o[l];                                                                         \
          _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) v += acc[r];                                          \
          o[l] = v;                                                                                                 \
        }                                                                                                           \
      }                                                                                                             \
  }

typedef void (*dwb_pass_fn)(float *restrict, const float *restrict, int64_t, int64_t, int64_t, const float *restrict,
                            int64_t, int64_t, int, const float *restrict);

#define DWB_PASSES(K) DWB_PASS(K, 1) DWB_PASS(K, 2) DWB_PASS(K, 3)
DWB_PASSES(3)
DWB_PASSES(5)
DWB_PASSES(7)

/* [kernel width 3, 5, 7][rows 1..3] */
static const dwb_pass_fn dwb_passes[3][3] = {{dwb_pass_3_1, dwb_pass_3_2, dwb_pass_3_3},
                                             {dwb_pass_5_1, dwb_pass_5_2, dwb_pass_5_3},
                                             {dwb_pass_7_1, dwb_pass_7_2, dwb_pass_7_3}};

/* Any other tap, at p[oy*rstride + ox*sw16 + l] with weights wv[l]. */
static void dwb_tap(float *restrict s, const float *restrict p, int64_t rstride, int64_t sw16,
                    const float *restrict wv, int64_t oh, int64_t ow, int first, const float *restrict init) {
  for (int64_t oy = 0; oy < oh; oy++)
    for (int64_t ox = 0; ox < ow; ox++) {
      const float *b = p + oy * rstride + ox * sw16;
      float *restrict o = s + (oy * ow + ox) * DW_LANES;
      for (int l = 0; l < DW_LANES; l++) o[l] = DW_FMA(wv[l], b[l], first ? init[l] : o[l]);
    }
}

/* d[t*16 + l] = src[t + l*stride] for t < n: sixteen planes (`stride` apart) interleaved, vectorised along t with
 * the planes' vectors interleaved by permutes (a 16x16 transpose); several times faster than a strided store per
 * float. */
static void dwb_interleave(float *restrict d, const float *restrict src, int64_t stride, int64_t n) {
  for (int64_t t = 0; t < n; t++)
    for (int l = 0; l < DW_LANES; l++) d[t * DW_LANES + l] = src[t + l * stride];
}

/* The same for planes at any offsets from[l] (a multiplier's repeated planes, the last block's empty lanes). */
static void dwb_interleave_any(float *restrict d, const float *restrict src, const int64_t *from, int64_t n) {
  for (int l = 0; l < DW_LANES; l++)
    for (int64_t t = 0; t < n; t++) d[t * DW_LANES + l] = src[from[l] + t];
}

/* out[l*stride + t] = s[t*16 + l] for t < n: sixteen planes (`stride` apart) out of the interleaved layout,
 * vectorised along t with the lanes separated by permutes (a 16x16 transpose). ivdep: the planes never overlap,
 * which the compiler cannot know of a runtime stride (without it, it runs one lane at a time). */
static void dwb_unpack(float *restrict out, const float *restrict s, int64_t stride, int64_t n) {
  _Pragma("GCC ivdep") for (int64_t t = 0; t < n; t++)
    for (int l = 0; l < DW_LANES; l++) out[t + l * stride] = s[t * DW_LANES + l];
}

static int64_t dwb_scratch(int64_t h, int64_t iw, int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh,
                           int64_t sw, int64_t dh, int64_t dw) {
  int64_t padded = dwb_extent(oh, kh, sh, dh) * dwb_extent(ow, kw, sw, dw);
  return (padded + h * iw + oh * ow + kh * kw + 1) * DW_LANES + DW_LANES;
}

/* Output planes [q0, q1), sixteen at a time (see the top). */
static void dw_blocked(const float *x, const float *w, const float *bias, const float *res, float *out,
                       float *scratch, int64_t c, int64_t m, int64_t h, int64_t iw, int64_t oh, int64_t ow, int64_t kh,
                       int64_t kw, int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t dh, int64_t dw,
                       int64_t act, int64_t q0, int64_t q1) {
  int64_t hp = dwb_extent(oh, kh, sh, dh), wp = dwb_extent(ow, kw, sw, dw), plane = oh * ow, taps = kh * kw, o = c * m;
  /* 64-byte aligned: a pixel's sixteen floats are one aligned vector */
  float *pad = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
  float *s = pad + hp * wp * DW_LANES, *wv = s + plane * DW_LANES, *init = wv + taps * DW_LANES;
  float *inter = init + DW_LANES; /* the sixteen input planes interleaved, before the padding */
  /* the input rows and columns inside the padded plane */
  int64_t y0 = pt < 0 ? -pt : 0, y1 = h < hp - pt ? h : hp - pt;
  int64_t x0 = pl < 0 ? -pl : 0, x1 = iw < wp - pl ? iw : wp - pl;
  for (int64_t r = 0; r < hp; r++) { /* the padding around them; every block writes the inside */
    float *row = pad + r * wp * DW_LANES;
    if (r < y0 + pt || r >= y1 + pt || x0 >= x1) {
      memset(row, 0, (size_t)(wp * DW_LANES) * sizeof(float));
    } else {
      memset(row, 0, (size_t)((x0 + pl) * DW_LANES) * sizeof(float));
      memset(row + (x1 + pl) * DW_LANES, 0, (size_t)((wp - x1 - pl) * DW_LANES) * sizeof(float));
    }
  }
  int fast = (kw == 3 || kw == 5 || kw == 7) && dw == 1;
  for (int64_t q = q0; q < q1; q += DW_LANES) {
    int64_t lanes = q1 - q < DW_LANES ? q1 - q : DW_LANES, first_in = q / m;
    /* the planes' filters and biases, interleaved (none for empty lanes) */
    for (int64_t l = 0, ch = q % o; l < DW_LANES; l++, ch = ch + 1 == o ? 0 : ch + 1) {
      for (int64_t t = 0; t < taps; t++) wv[t * DW_LANES + l] = l < lanes ? w[ch * taps + t] : 0.0f;
      init[l] = l < lanes && bias ? bias[ch] : 0.0f;
    }
    /* the planes interleaved whole (one long vectorised loop, whatever the width), then row by row into the padded
     * layout */
    const float *src = x + first_in * h * iw;
    if (m == 1 && lanes == DW_LANES) {
      dwb_interleave(inter, src, h * iw, h * iw);
    } else { /* where each lane's input plane starts; an empty lane copies the last plane again */
      int64_t from[DW_LANES];
      for (int64_t l = 0, in = 0, j = q % m; l < DW_LANES; l++) {
        from[l] = in * h * iw;
        if (l + 1 < lanes && ++j == m) j = 0, in++;
      }
      dwb_interleave_any(inter, src, from, h * iw);
    }
    for (int64_t y = y0; y < y1 && x0 < x1; y++)
      memcpy(pad + ((y + pt) * wp + x0 + pl) * DW_LANES, inter + (y * iw + x0) * DW_LANES,
             (size_t)((x1 - x0) * DW_LANES) * sizeof(float));
    int first = 1;
    for (int64_t i = 0; i < kh;) {
      const float *rows = pad + i * dh * wp * DW_LANES;
      if (fast) { /* up to three kernel rows per pass */
        int r = kh - i < 3 ? (int)(kh - i) : 3;
        dwb_passes[kw / 2 - 1][r - 1](s, rows, dh * wp * DW_LANES, sh * wp * DW_LANES, sw * DW_LANES,
                                      wv + i * kw * DW_LANES, oh, ow, first, init);
        i += r;
      } else {
        for (int64_t k = 0; k < kw; k++) {
          dwb_tap(s, rows + k * dw * DW_LANES, sh * wp * DW_LANES, sw * DW_LANES, wv + (i * kw + k) * DW_LANES, oh,
                  ow, first, init);
          first = 0;
        }
        i++;
      }
      first = 0;
    }
    /* each plane out of its lane, then the residual and the activation */
    if (lanes == DW_LANES) {
      dwb_unpack(out + q * plane, s, plane, plane);
    } else {
      for (int64_t l = 0; l < lanes; l++)
        for (int64_t t = 0; t < plane; t++) out[(q + l) * plane + t] = s[t * DW_LANES + l];
    }
    for (int64_t l = 0; l < lanes; l++) {
      float *restrict dst = out + (q + l) * plane;
      if (res) {
        const float *restrict r = res + (q + l) * plane;
        for (int64_t t = 0; t < plane; t++) dst[t] += r[t];
      }
      dw_act(dst, plane, act);
    }
  }
}

/* ---- entry points ---- */

/* The layout a depthwise conv2d of `planes` output planes takes: DW_LANES (sixteen planes at a time) for small planes
 * (but a tall strip, whose sixteen interleaved copies would take megabytes), and for filters of 25 taps or more on
 * planes of up to DW_WIDE pixels when there are sixteen planes to fill the lanes (there the interleaved pixels'
 * aligned loads, one per tap, beat the wide layout's unaligned ones, which cross cache lines, and the interleaving's
 * cost is spread over many taps); 0 for the wide layout. */
int64_t hwa_depthwise_layout(int64_t planes, int64_t oh, int64_t ow, int64_t kh, int64_t kw) {
  if ((ow <= DW_NARROW && oh * ow <= DW_TALL) || (kh * kw >= 25 && planes >= DW_LANES && oh * ow <= DW_WIDE))
    return DW_LANES;
  return 0;
}

/* The floats of scratch hwa_depthwise needs for one call in `layout` (tasks.c keeps them per thread). */
int64_t hwa_depthwise_scratch(int64_t layout, int64_t h, int64_t iw, int64_t oh, int64_t ow, int64_t kh, int64_t kw,
                              int64_t sh, int64_t sw, int64_t dh, int64_t dw) {
  return layout ? dwb_scratch(h, iw, oh, ow, kh, kw, sh, sw, dh, dw) : dw_flat_scratch(oh, ow, kh, kw, sh, sw, dh, dw);
}

/* Output planes [q0, q1) of a depthwise conv2d over a batch in `layout` (hwa_depthwise_layout's): plane q is channel
 * q % (c*m) of image q / (c*m), read from input plane q / m (m = output channels per input channel) with filter
 * w[q % (c*m)] (kh x kw); bias and res (the output's shape) may be NULL; act: ACT_*. scratch:
 * hwa_depthwise_scratch() floats. */
void hwa_depthwise(int64_t layout, const float *x, const float *w, const float *bias, const float *res, float *out,
                   float *scratch, int64_t c, int64_t m, int64_t h, int64_t iw, int64_t oh, int64_t ow, int64_t kh,
                   int64_t kw, int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t dh, int64_t dw, int64_t act,
                   int64_t q0, int64_t q1) {
  (layout ? dw_blocked : dw_flat)(x, w, bias, res, out, scratch, c, m, h, iw, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw,
                                  act, q0, q1);
}
