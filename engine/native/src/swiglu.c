/* silu(g) * u for GgufMatMul's SwiGLU epilogue: 8 lanes at a time with AVX2 + FMA, expf otherwise.
 * The scalar loop costs ~5 ns an element (the libm call); over a prefill chunk's 512 x 4864 gate
 * values that is longer than the three ONNX Runtime passes the epilogue replaces. */
#include <math.h>

#include "family.h"
#include "q32_tile.h"   /* Q32_HAVE_X86 */
#include "swiglu.h"

static void silu_mul_scalar(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

#if Q32_HAVE_X86
#include <immintrin.h>

#define TGT_AVX2 __attribute__((target("avx2,fma")))

/* exp(x) for x in [-87, 88] (clamped): 2^n * p(r), r = x - n ln 2 in two parts (Cephes expf). */
static inline __attribute__((always_inline)) TGT_AVX2 __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static TGT_AVX2 void silu_mul_avx2(const float *g, const float *u, float *y, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        __m256 d = _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, gv)));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_div_ps(gv, d), _mm256_loadu_ps(u + i)));
    }
    if (i < n) {   /* the tail through the same lanes, so a value's result never depends on where it sits */
        float gt[8] = {0}, ut[8] = {0}, yt[8];
        for (int64_t j = i; j < n; j++) {
            gt[j - i] = g[j];
            ut[j - i] = u[j];
        }
        silu_mul_avx2(gt, ut, yt, 8);
        for (int64_t j = i; j < n; j++)
            y[j] = yt[j - i];
    }
}
#endif

void amber_silu_mul(const float *g, const float *u, float *y, int64_t n) {
#if Q32_HAVE_X86
    if (amber_current_isa() != ISA_SCALAR) {
        silu_mul_avx2(g, u, y, n);
        return;
    }
#endif
    silu_mul_scalar(g, u, y, n);
}
