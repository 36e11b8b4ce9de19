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
// GEOMETRY(type, name, arg) declares a kernel's geometry struct `name`: the constants of -DFIXED_<type>={...}
// (plans.fixing: a subgraph's launches never change shape), else the argument. As constants, the index arithmetic's
// divisions become multiplies, where PoCL would otherwise divide by a 64-bit value per element. Each file defines
// GEOMETRY_<type>(arg) as a __constant struct of FIXED_<type> when that is defined, else as arg.
#define GEOMETRY(type, name, arg) const type name = CAT(GEOMETRY_, type)(arg)
#define ISNAN(v) ((v) != (v))  // also compiles (as false) for integers
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
// The GEMMs' batch axes (gemm.cl, gemv.cl): sizes and element strides of A, B and the bias, right-aligned (plans.MAXB).
// BATCH_OFFSETS(bt, batch) adds batch entry `batch`'s offsets to ao, bo and biaso (and consumes `batch`).
#define MAXB 6
typedef struct { long shape[MAXB], a[MAXB], b[MAXB], bias[MAXB]; } Batch;
#define BATCH_OFFSETS(bt, batch) \
  for (int d_ = MAXB - 1; d_ >= 0; d_--) { \
    const long i_ = (batch) % (bt).shape[d_]; \
    (batch) /= (bt).shape[d_]; \
    ao += i_ * (bt).a[d_]; bo += i_ * (bt).b[d_]; biaso += i_ * (bt).bias[d_]; \
  }
// ROW_BIAS(m): what the GEMMs add to result row m: the bias (-DBIAS, at biaso in the batch entry), else 0.
#ifdef BIAS
#define ROW_BIAS(m) LOAD(bias, biaso + (m))
#else
#define ROW_BIAS(m) ((ACC)0)
#endif
// ACT: the epilogue of a fused conv2d + activation (-DACT_RELU etc.), applied by the GEMMs to each result (bias added)
// as it is stored; the identity without one.
#if defined(ACT_RELU)
#define ACT(v) ((v) < (ACC)0 ? (ACC)0 : (v))  // NaN stays NaN, as numpy.maximum(v, 0)
#elif defined(ACT_SIGMOID)
#define ACT(v) ((ACC)1 / ((ACC)1 + exp(-(v))))
#elif defined(ACT_TANH)
#define ACT(v) tanh(v)
#elif defined(ACT_GELU)
#define ACT(v) ((v) < (ACC)-40 ? (ACC)-0.0 : (ACC)0.5 * (v) * erfc(-(v) * (ACC)0.70710678118654752440))  // -0.0 at -inf
#else
#define ACT(v) (v)
#endif
