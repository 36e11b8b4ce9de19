// 2-D pooling over NCHW, one thread per output element. kernels.py instantiates each template per dtype.
// Rows and columns outside the input (padding, and the extra room ceil_mode adds) never contribute.
#include "common.cuh"

template <typename T>
__global__ void max_pool2d(const T* __restrict__ x, T* __restrict__ out, long long planes, long long h, long long w,
                           long long oh, long long ow, long long kh, long long kw, long long sh, long long sw,
                           long long pt, long long pl) {
    typedef typename hwa::reg<T>::type R;
    HWA_GRID_LOOP(o, planes * oh * ow) {
        const long long j = o % ow, i = (o / ow) % oh;
        const T* plane = x + (o / (oh * ow)) * h * w;
        R m = hwa::lowest<R>();  // a window wholly in padding gives -inf, as numpy does
        for (long long a = 0; a < kh; ++a) {
            const long long r = i * sh - pt + a;
            if (r < 0 || r >= h) continue;
            for (long long b = 0; b < kw; ++b) {
                const long long c = j * sw - pl + b;
                if (c >= 0 && c < w) m = hwa::nan_max(m, hwa::load(plane, r * w + c));
            }
        }
        hwa::store(out, o, m);
    }
}

template <typename T>
__global__ void avg_pool2d(const T* __restrict__ x, T* __restrict__ out, long long planes, long long h, long long w,
                           long long oh, long long ow, long long kh, long long kw, long long sh, long long sw,
                           long long pt, long long pl, long long exclusive) {
    typedef typename hwa::reg<T>::type R;
    HWA_GRID_LOOP(o, planes * oh * ow) {
        const long long j = o % ow, i = (o / ow) % oh;
        const T* plane = x + (o / (oh * ow)) * h * w;
        R sum = 0;
        long long count = 0;
        for (long long a = 0; a < kh; ++a) {
            const long long r = i * sh - pt + a;
            if (r < 0 || r >= h) continue;
            for (long long b = 0; b < kw; ++b) {
                const long long c = j * sw - pl + b;
                if (c >= 0 && c < w) {
                    sum += hwa::load(plane, r * w + c);
                    ++count;
                }
            }
        }
        // exclusive (paddle's default) divides by the real elements; otherwise by the whole window
        hwa::store(out, o, sum / (R)(exclusive ? count : kh * kw));
    }
}

// Adaptive pooling: output cell (i, j) covers rows [i*h/oh, ceil((i+1)*h/oh)) and the same for columns.
template <typename T>
__global__ void adaptive_avg_pool2d(const T* __restrict__ x, T* __restrict__ out, long long planes, long long h,
                                    long long w, long long oh, long long ow) {
    typedef typename hwa::reg<T>::type R;
    HWA_GRID_LOOP(o, planes * oh * ow) {
        const long long j = o % ow, i = (o / ow) % oh;
        const T* plane = x + (o / (oh * ow)) * h * w;
        const long long r0 = i * h / oh, r1 = ((i + 1) * h + oh - 1) / oh;
        const long long c0 = j * w / ow, c1 = ((j + 1) * w + ow - 1) / ow;
        R sum = 0;
        for (long long r = r0; r < r1; ++r)
            for (long long c = c0; c < c1; ++c) sum += hwa::load(plane, r * w + c);
        hwa::store(out, o, sum / (R)((r1 - r0) * (c1 - c0)));
    }
}

template <typename T>
__global__ void adaptive_max_pool2d(const T* __restrict__ x, T* __restrict__ out, long long planes, long long h,
                                    long long w, long long oh, long long ow) {
    typedef typename hwa::reg<T>::type R;
    HWA_GRID_LOOP(o, planes * oh * ow) {
        const long long j = o % ow, i = (o / ow) % oh;
        const T* plane = x + (o / (oh * ow)) * h * w;
        const long long r0 = i * h / oh, r1 = ((i + 1) * h + oh - 1) / oh;
        const long long c0 = j * w / ow, c1 = ((j + 1) * w + ow - 1) / ow;
        R m = hwa::load(plane, r0 * w + c0);
        for (long long r = r0; r < r1; ++r)
            for (long long c = c0; c < c1; ++c) m = hwa::nan_max(m, hwa::load(plane, r * w + c));
        hwa::store(out, o, m);
    }
}
