// Prepended to every kernel source. Build options choose the types:
//   T    the element type in memory (half is storage-only without cl_khr_fp16, so it is read and written with
//        vload_half / vstore_half_rte and computed in float)
//   ACC  the type arithmetic runs in
//   E    an unsigned integer as wide as T: data movement copies bits and never needs the element type
#ifdef FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifdef HALF
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half_rte((v), (i), (p))
#else
#define LOAD(p, i) ((ACC)(p)[i])
#define STORE(p, i, v) ((p)[i] = (T)(v))
#endif
#define ISNAN(v) ((v) != (v))  // also compiles (as false) for integers
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
