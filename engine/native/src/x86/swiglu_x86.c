/* The SwiGLU epilogue's SiLU (swiglu.c) with MLAS's x86 kernels: the FMA3 logistic (AVX2 + FMA) and
 * silu_avx512f.cpp's (AVX-512F), each one IEEE operation per lane in MLAS's order. Function target
 * attributes, not -m flags: the dispatch table (kernel_table.h) calls one only where the CPU has it. */
#include "q32_tile.h"   /* Q32_HAVE_X86 */
#include "swiglu.h"

#if Q32_HAVE_X86
#include <immintrin.h>

#define TGT_AVX2 __attribute__((target("avx2,fma")))
#define TGT_AVX512 __attribute__((target("avx2,fma,avx512f")))

/* LogisticKernelFma3.S's loop body on 8 lanes: max(lo, x) and min(hi, .) in its operand order. */
static inline __attribute__((always_inline)) TGT_AVX2 __m256 logistic8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(LOGI_HI), _mm256_max_ps(_mm256_set1_ps(LOGI_LO), x));
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_fmadd_ps(x2, _mm256_set1_ps(LOGI_A9), _mm256_set1_ps(LOGI_A7));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(LOGI_A5));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(LOGI_A3));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(LOGI_A1));
    __m256 q = _mm256_fmadd_ps(x2, _mm256_set1_ps(LOGI_B10), _mm256_set1_ps(LOGI_B8));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(LOGI_B6));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(LOGI_B4));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(LOGI_B2));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(LOGI_B0));
    p = _mm256_mul_ps(x, p);
    __m256 s = _mm256_add_ps(_mm256_div_ps(p, q), _mm256_set1_ps(0.5f));
    return _mm256_max_ps(_mm256_setzero_ps(), s);
}

TGT_AVX2 void amber_silu_mul_fma3(const float *g, const float *u, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        __m256 silu = _mm256_mul_ps(gv, logistic8(gv));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    if (i < n) {   /* the tail through the same lanes (zeros padding: never NaN, never stored) */
        float gt[8] = {0}, ut[8] = {0}, yt[8];
        for (int64_t j = i; j < n; j++) {
            gt[j - i] = g[j];
            ut[j - i] = u[j];
        }
        amber_silu_mul_fma3(gt, ut, yt, 8);
        for (int64_t j = i; j < n; j++)
            y[j] = yt[j - i];
    }
}

/* silu_avx512f.cpp's logistic: the FMA3 kernel's operations, its clamps in that file's order. */
static inline __attribute__((always_inline)) TGT_AVX512 __m512 logistic16(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(LOGI_HI)), _mm512_set1_ps(LOGI_LO));
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 p = _mm512_fmadd_ps(x2, _mm512_set1_ps(LOGI_A9), _mm512_set1_ps(LOGI_A7));
    p = _mm512_fmadd_ps(x2, p, _mm512_set1_ps(LOGI_A5));
    p = _mm512_fmadd_ps(x2, p, _mm512_set1_ps(LOGI_A3));
    p = _mm512_fmadd_ps(x2, p, _mm512_set1_ps(LOGI_A1));
    __m512 q = _mm512_fmadd_ps(x2, _mm512_set1_ps(LOGI_B10), _mm512_set1_ps(LOGI_B8));
    q = _mm512_fmadd_ps(x2, q, _mm512_set1_ps(LOGI_B6));
    q = _mm512_fmadd_ps(x2, q, _mm512_set1_ps(LOGI_B4));
    q = _mm512_fmadd_ps(x2, q, _mm512_set1_ps(LOGI_B2));
    q = _mm512_fmadd_ps(x2, q, _mm512_set1_ps(LOGI_B0));
    p = _mm512_mul_ps(x, p);
    __m512 s = _mm512_add_ps(_mm512_div_ps(p, q), _mm512_set1_ps(0.5f));
    return _mm512_min_ps(_mm512_max_ps(s, _mm512_setzero_ps()), _mm512_set1_ps(1.0f));   /* [0, 1] */
}

/* MlasSiluKernelAvx512F's g * s, a NaN gate passed through as it is. */
static inline __attribute__((always_inline)) TGT_AVX512 __m512 silu16(__m512 g) {
    __m512 silu = _mm512_mul_ps(g, logistic16(g));
    return _mm512_mask_mov_ps(silu, _mm512_cmp_ps_mask(g, g, _CMP_UNORD_Q), g);
}

TGT_AVX512 void amber_silu_mul_avx512f(const float *g, const float *u, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 silu = silu16(_mm512_loadu_ps(g + i));
        _mm512_storeu_ps(y + i, _mm512_mul_ps(silu, _mm512_loadu_ps(u + i)));
    }
    if (i < n) {   /* masked lanes load zeros and are never stored */
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        __m512 silu = silu16(_mm512_maskz_loadu_ps(k, g + i));
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(k, u + i)));
    }
}
#else
typedef int amber_swiglu_x86_empty;   /* ISO C: a translation unit declares something */
#endif
