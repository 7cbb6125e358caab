/* The Q8_K activation quantizer (qk.c's qk_quantize_act) at AVX2 width: the same IEEE operations
 * per value (amax ignoring NaN, d = amax/127, id = 1/d, x*id, NaN -> 0, clamp to +-127, round half
 * away from zero as (int)(v + 0.5) does), so the same bytes. A prompt quantizes m x K values per
 * GgufMatMul node; in scalar code that was a third of a Q4_K node with N = 896 at m = 512. */
#include <string.h>

#include "qk_impl.h"

#ifdef QK_X86
#include <immintrin.h>

#define QTGT __attribute__((target("avx2")))

QTGT void qk_quantize_act_avx2(const float *x, int64_t k, uint8_t *o) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 signmask = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256 half = _mm256_set1_ps(0.5f), hi = _mm256_set1_ps(127.f), lo = _mm256_set1_ps(-127.f);
    for (int64_t b = 0; b < k / QK_BLOCK; b++, x += QK_BLOCK, o += Q8K_BYTES) {
        __m256 mx = _mm256_setzero_ps();
        for (int i = 0; i < QK_BLOCK; i += 8) {
            const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), absmask);
            mx = _mm256_max_ps(mx, _mm256_and_ps(a, _mm256_cmp_ps(a, a, _CMP_ORD_Q)));   /* NaN -> 0 */
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        const float d = amax / 127.f, id = d > 0.f ? 1.f / d : 0.f;
        memcpy(o, &d, 4);
        const __m256 vid = _mm256_set1_ps(id);
        int16_t bs[16];
        for (int j = 0; j < 16; j++) {   /* 16 values: two vectors, one bsum */
            __m256i q[2];
            for (int h2 = 0; h2 < 2; h2++) {
                __m256 t = _mm256_mul_ps(_mm256_loadu_ps(x + 16 * j + 8 * h2), vid);
                t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q));   /* NaN -> 0 before the clamp */
                t = _mm256_min_ps(_mm256_max_ps(t, lo), hi);
                /* (int)(v + 0.5) for v >= 0, -(int)(-v + 0.5) below: truncate v + copysign(0.5, v) */
                t = _mm256_add_ps(t, _mm256_or_ps(_mm256_and_ps(t, signmask), half));
                q[h2] = _mm256_cvttps_epi32(t);
            }
            __m256i s = _mm256_add_epi32(q[0], q[1]);
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
            bs[j] = (int16_t)_mm_cvtsi128_si32(s4);
            /* int32 -> int8 (|q| <= 127: no saturation), in order */
            __m256i p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8);
            __m128i p8 = _mm_packs_epi16(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1));
            _mm_storeu_si128((__m128i *)(void *)(o + Q8K_Q + 16 * j), p8);
        }
        memcpy(o + Q8K_BSUMS, bs, sizeof bs);
    }
}
#else
typedef int qk_quant_x86_unused;
#endif
