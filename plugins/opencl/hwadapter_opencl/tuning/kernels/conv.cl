// im2col for conv2d: col[n][g][(c * KH + kh) * KW + kw][oh * OW + ow] = x[n][g * CG + c][ih][iw] (0 in the padding),
// so each (n, g) is one GEMM: weight[g] (OG x CG*KH*KW) @ col[n][g] (CG*KH*KW x OH*OW) = y[n][g * OG:][OH*OW].
// Elements are copied as bits (E), whatever their type.
typedef struct { long N, G, CG, H, W, KH, KW, OH, OW, SH, SW, PT, PL, DH, DW; } Conv;
#ifdef FIXED_Conv
__constant Conv fixed_Conv = FIXED_Conv;
#define GEOMETRY_Conv(arg) fixed_Conv
#else
#define GEOMETRY_Conv(arg) arg
#endif

__kernel void im2col(__global const E* x, __global E* col, const Conv c_arg, const long total) {
  GEOMETRY(Conv, c, c_arg);
  const long i = get_global_id(0);
  if (i >= total) return;
  long r = i;
  const long ow = r % c.OW; r /= c.OW;
  const long oh = r % c.OH; r /= c.OH;
  const long kw = r % c.KW; r /= c.KW;
  const long kh = r % c.KH; r /= c.KH;
  const long ch = r % (c.G * c.CG), n = r / (c.G * c.CG);  // (g, c) flattened is x's channel
  const long ih = oh * c.SH - c.PT + kh * c.DH, iw = ow * c.SW - c.PL + kw * c.DW;
  const bool inside = ih >= 0 && ih < c.H && iw >= 0 && iw < c.W;
  col[i] = inside ? x[((n * c.G * c.CG + ch) * c.H + ih) * c.W + iw] : (E)0;
}
