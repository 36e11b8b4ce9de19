// argmax / argmin over the middle axis of x viewed as (outer, n, inner): the first best index, nan counting as best
// (numpy's rule). Built with -DARGMAX or -DARGMIN.
#ifdef ARGMIN
#define BETTER(v, best) ((v) < (best))
#else
#define BETTER(v, best) ((v) > (best))
#endif
__kernel void argbest(__global const T* x, __global long* y, const long outer, const long n, const long inner) {
  const long i = get_global_id(0);
  if (i >= outer * inner) return;
  __global const T* src = x + (i / inner) * n * inner + i % inner;
  ACC best = LOAD(src, 0);
  long at = 0;
  for (long k = 1; k < n && !ISNAN(best); k++) {
    const ACC v = LOAD(src, k * inner);
    if (BETTER(v, best) || ISNAN(v)) { best = v; at = k; }
  }
  y[i] = at;
}
