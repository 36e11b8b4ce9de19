// argmax / argmin along the middle axis of an (outer, n, inner) view, as numpy: the first occurrence of the extreme
// wins, and NaN counts as the extreme. "rows" kernels give each output one thread (short axes); "blocks" kernels
// give it a block whose threads stride over the axis and then combine in shared memory (long axes).
#include "common.cuh"

namespace hwa {

// Does (v at index i) beat (best at index bi)? bi < 0 means "nothing yet".
template <bool MAX, typename R>
__device__ __forceinline__ bool wins(R v, long long i, R best, long long bi) {
    if (bi < 0) return i >= 0;
    if (i < 0) return false;
    if (is_nan(best)) return is_nan(v) && i < bi;
    if (is_nan(v)) return true;
    return (MAX ? v > best : v < best) || (v == best && i < bi);
}

template <bool MAX, typename T>
__device__ __forceinline__ void arg_rows(const T* x, long long* out, long long outer, long long n, long long inner) {
    typedef typename reg<T>::type R;
    HWA_GRID_LOOP(o, outer * inner) {
        const T* p = x + (o / inner) * n * inner + o % inner;
        R best = load(p, 0);
        long long bi = 0;
        for (long long k = 1; k < n && !is_nan(best); ++k) {
            const R v = load(p, k * inner);
            if (wins<MAX>(v, k, best, bi)) { best = v; bi = k; }
        }
        out[o] = bi;
    }
}

template <bool MAX, typename T>
__device__ __forceinline__ void arg_blocks(const T* x, long long* out, long long outer, long long n, long long inner) {
    typedef typename reg<T>::type R;
    __shared__ R vals[256];  // kernels.py launches these with 256 threads per block
    __shared__ long long idxs[256];
    for (long long o = blockIdx.x; o < outer * inner; o += gridDim.x) {
        const T* p = x + (o / inner) * n * inner + o % inner;
        R best = 0;
        long long bi = -1;
        for (long long k = threadIdx.x; k < n; k += blockDim.x) {
            const R v = load(p, k * inner);
            if (wins<MAX>(v, k, best, bi)) { best = v; bi = k; }
        }
        vals[threadIdx.x] = best;
        idxs[threadIdx.x] = bi;
        __syncthreads();
        for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s && wins<MAX>(vals[threadIdx.x + s], idxs[threadIdx.x + s], vals[threadIdx.x],
                                             idxs[threadIdx.x])) {
                vals[threadIdx.x] = vals[threadIdx.x + s];
                idxs[threadIdx.x] = idxs[threadIdx.x + s];
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) out[o] = idxs[0];
        __syncthreads();  // the next output reuses the shared arrays
    }
}

}  // namespace hwa

template <typename T>
__global__ void argmax_rows(const T* __restrict__ x, long long* __restrict__ out, long long outer, long long n,
                            long long inner) { hwa::arg_rows<true>(x, out, outer, n, inner); }
template <typename T>
__global__ void argmin_rows(const T* __restrict__ x, long long* __restrict__ out, long long outer, long long n,
                            long long inner) { hwa::arg_rows<false>(x, out, outer, n, inner); }
template <typename T>
__global__ void argmax_blocks(const T* __restrict__ x, long long* __restrict__ out, long long outer, long long n,
                              long long inner) { hwa::arg_blocks<true>(x, out, outer, n, inner); }
template <typename T>
__global__ void argmin_blocks(const T* __restrict__ x, long long* __restrict__ out, long long outer, long long n,
                              long long inner) { hwa::arg_blocks<false>(x, out, outer, n, inner); }
