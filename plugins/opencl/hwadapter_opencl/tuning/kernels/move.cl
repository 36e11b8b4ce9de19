// Data movement, on element bits (E): every op here only moves elements, so one build per element size serves all
// dtypes. Shapes and strides come in small structs of up to MAXD axes (the host merges axes first).
#define MAXD 8
typedef struct { long rank, src_offset, dst_offset, shape[MAXD], src[MAXD], dst[MAXD]; } Strided;
typedef struct { long rank, shape[MAXD], in_shape[MAXD], before[MAXD], mode; } Pad;
#ifdef FIXED_Strided
__constant Strided fixed_Strided = FIXED_Strided;
#define GEOMETRY_Strided(arg) fixed_Strided
#else
#define GEOMETRY_Strided(arg) arg
#endif
#ifdef FIXED_Pad
__constant Pad fixed_Pad = FIXED_Pad;
#define GEOMETRY_Pad(arg) fixed_Pad
#else
#define GEOMETRY_Pad(arg) arg
#endif

// dst[dst_offset + i . dst] = src[src_offset + i . src] for every index i of shape: transpose, slice, expand (stride
// 0), concat and split (offsets into the bigger array).
__kernel void strided_copy(__global const E* src, __global E* dst, const Strided s_arg, const long total) {
  GEOMETRY(Strided, s, s_arg);
  const long i = get_global_id(0);
  if (i >= total) return;
  long r = i, from = s.src_offset, to = s.dst_offset;
#ifdef FIXED_Strided
#pragma unroll  // a constant rank: PoCL keeps the loop (and its divisions by the loaded sizes) unless told
#endif
  for (int d = s.rank - 1; d >= 0; d--) {
    const long k = r % s.shape[d];
    r /= s.shape[d];
    from += k * s.src[d];
    to += k * s.dst[d];
  }
  dst[to] = src[from];
}

// y[o][j][k] = x[o][index[j] (negative counts from the end)][k]. A kernel cannot raise: an index out of range is
// clamped and reported in status (found, index) for the host to raise.
__kernel void gather(__global const E* x, __global const long* index, __global E* y, __global long* status,
                     const long n, const long m, const long inner, const long total) {
  const long i = get_global_id(0);
  if (i >= total) return;
  const long k = i % inner, j = (i / inner) % m, o = i / (inner * m);
  long at = index[j];
  if (at < -n || at >= n) {
    status[0] = 1;
    status[1] = at;
    at = at < 0 ? 0 : n - 1;
  } else if (at < 0) {
    at += n;
  }
  y[i] = n ? x[(o * n + at) * inner + k] : (E)0;
}

// Pad, mode 0 constant (value), 1 reflect, 2 replicate, 3 circular; y is contiguous, x too.
__kernel void pad(__global const E* x, __global E* y, const Pad p_arg, const E value, const long total) {
  GEOMETRY(Pad, p, p_arg);
  const long i = get_global_id(0);
  if (i >= total) return;
  long r = i, from = 0, stride = 1;
  bool outside = false;
#ifdef FIXED_Pad
#pragma unroll
#endif
  for (int d = p.rank - 1; d >= 0; d--) {
    const long n = p.in_shape[d];
    long k = r % p.shape[d] - p.before[d];
    r /= p.shape[d];
    if (k < 0 || k >= n) {
      if (p.mode == 0 || n == 0) outside = true;
      else if (p.mode == 1) { const long period = 2 * (n - 1); k = period ? ((k % period) + period) % period : 0;
                              if (k >= n) k = period - k; }
      else if (p.mode == 2) k = clamp(k, 0L, n - 1);
      else k = ((k % n) + n) % n;
    }
    from += k * stride;
    stride *= n;
  }
  y[i] = outside ? value : x[from];
}
