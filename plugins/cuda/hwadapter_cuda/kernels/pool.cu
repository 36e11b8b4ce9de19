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

// The flat position (r * w + c) of the first maximal element of rows [r0, r1) and columns [c0, c1) of a plane,
// row-major; NaN counts as the largest and the first NaN wins (numpy's argmax): the pooling gradients' argmax.
template <typename T>
__device__ __forceinline__ long long first_max(const T* plane, long long r0, long long r1, long long c0, long long c1,
                                               long long w) {
    typedef typename hwa::reg<T>::type R;
    long long at = r0 * w + c0;
    R best = hwa::load(plane, at);
    for (long long r = r0; r < r1 && !hwa::is_nan(best); ++r)
        for (long long c = c0; c < c1; ++c) {
            const R v = hwa::load(plane, r * w + c);
            if (v > best || (hwa::is_nan(v) && !hwa::is_nan(best))) { best = v; at = r * w + c; }
        }
    return at;
}

// The gradient of max pooling with respect to x, one thread per element of x: the sum (in double, rounded once)
// of the grads of the windows that hold it and whose first maximal element it is; padding never wins.
template <typename T>
__global__ void max_pool2d_grad(const T* __restrict__ x, const T* __restrict__ g, T* __restrict__ dx,
                                long long planes, long long h, long long w, long long oh, long long ow, long long kh,
                                long long kw, long long sh, long long sw, long long pt, long long pl) {
    HWA_GRID_LOOP(i, planes * h * w) {
        const long long c = i % w, r = (i / w) % h, p = i / (w * h);
        const long long rp = r + pt, cp = c + pl;  // padded coordinates: window a covers [a * sh, a * sh + kh)
        const long long a0 = rp >= kh ? (rp - kh) / sh + 1 : 0, a1 = min(rp / sh, oh - 1);
        const long long b0 = cp >= kw ? (cp - kw) / sw + 1 : 0, b1 = min(cp / sw, ow - 1);
        const T* plane = x + p * h * w;
        const T* grad = g + p * oh * ow;
        double sum = 0;
        for (long long a = a0; a <= a1; ++a) {
            const long long r0 = a * sh - pt;
            for (long long b = b0; b <= b1; ++b) {
                const long long c0 = b * sw - pl;
                if (first_max(plane, max(r0, 0LL), min(r0 + kh, h), max(c0, 0LL), min(c0 + kw, w), w) == r * w + c)
                    sum += (double)hwa::load(grad, a * ow + b);
            }
        }
        hwa::store(dx, i, (typename hwa::reg<T>::type)sum);
    }
}

// The gradient of adaptive max pooling, one thread per element of x, over adaptive_max_pool2d's windows.
template <typename T>
__global__ void adaptive_max_pool2d_grad(const T* __restrict__ x, const T* __restrict__ g, T* __restrict__ dx,
                                         long long planes, long long h, long long w, long long oh, long long ow) {
    HWA_GRID_LOOP(i, planes * h * w) {
        const long long c = i % w, r = (i / w) % h, p = i / (w * h);
        const long long a0 = r * oh / h, a1 = min(((r + 1) * oh + h - 1) / h - 1, oh - 1);
        const long long b0 = c * ow / w, b1 = min(((c + 1) * ow + w - 1) / w - 1, ow - 1);
        const T* plane = x + p * h * w;
        const T* grad = g + p * oh * ow;
        double sum = 0;
        for (long long a = a0; a <= a1; ++a) {
            const long long r0 = a * h / oh, r1 = ((a + 1) * h + oh - 1) / oh;
            if (r < r0 || r >= r1) continue;
            for (long long b = b0; b <= b1; ++b) {
                const long long c0 = b * w / ow, c1 = ((b + 1) * w + ow - 1) / ow;
                if (c >= c0 && c < c1 && first_max(plane, r0, r1, c0, c1, w) == r * w + c)
                    sum += (double)hwa::load(grad, a * ow + b);
            }
        }
        hwa::store(dx, i, (typename hwa::reg<T>::type)sum);
    }
}
