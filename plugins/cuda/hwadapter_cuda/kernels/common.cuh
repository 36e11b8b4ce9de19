// Helpers shared by the handwritten kernels: float16 computed in float, lowest values, numpy's NaN rules.
#pragma once
#include <cuda_fp16.h>

namespace hwa {

// The register type: __half is loaded into float and rounded once when stored, as in the kernel primitives.
template <typename T> struct reg { typedef T type; };
template <> struct reg<__half> { typedef float type; };

template <typename T> __device__ __forceinline__ typename reg<T>::type load(const T* p, long long i) { return p[i]; }
template <> __device__ __forceinline__ float load<__half>(const __half* p, long long i) { return __half2float(p[i]); }

template <typename T> __device__ __forceinline__ void store(T* p, long long i, typename reg<T>::type v) { p[i] = v; }
template <> __device__ __forceinline__ void store<__half>(__half* p, long long i, float v) {
    p[i] = __float2half_rn(v);
}

template <typename R> __device__ __forceinline__ bool is_nan(R v) { return v != v; }  // never true for integers

// What padding holds in max pooling: -inf for floats, the minimum for integers (numpy's np.pad value).
template <typename R> __device__ __forceinline__ R lowest();
template <> __device__ __forceinline__ float lowest<float>() { return -__int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double lowest<double>() { return -__longlong_as_double(0x7ff0000000000000LL); }
template <> __device__ __forceinline__ signed char lowest<signed char>() { return -128; }
template <> __device__ __forceinline__ short lowest<short>() { return -32768; }
template <> __device__ __forceinline__ int lowest<int>() { return -2147483647 - 1; }
template <> __device__ __forceinline__ long long lowest<long long>() { return -9223372036854775807LL - 1; }
template <> __device__ __forceinline__ unsigned char lowest<unsigned char>() { return 0; }

// numpy.maximum: a NaN on either side wins.
template <typename R> __device__ __forceinline__ R nan_max(R a, R b) {
    return is_nan(a) ? a : (is_nan(b) || b > a) ? b : a;
}

}  // namespace hwa

// Grid-stride loop: any grid size covers all n items.
#define HWA_GRID_LOOP(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
