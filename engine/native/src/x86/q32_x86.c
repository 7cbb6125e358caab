/* The q32 family's 256-bit x86 SIMD paths: q32_x86.h compiled for AVX2 (+FMA, F16C) and AVX-VNNI
 * (q32_avx512.c has the AVX512-VNNI path). Function target attributes, not -m flags: the
 * library runs on CPUs without these, and dispatch.c only calls a path this CPU has. */
#include <stdint.h>

#include "q32_layout.h"
#include "q32_tile.h"

#if Q32_HAVE_X86
#include <immintrin.h>

/* q32_quant_block_scalar with 8 lanes: the same IEEE operations in the same order (amax, d, 1/d,
 * x * (1/d), NaN -> 0, clamp to +-127, round to nearest even), so the same bytes. */
__attribute__((target("avx2,fma,f16c"))) void q32_quant_block_avx2(const float *x, int8_t *q,
                                                                     float *d_out, int32_t *s_out) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        __m256 a = _mm256_and_ps(v[i], absmask);
        m = _mm256_max_ps(m, _mm256_and_ps(a, _mm256_cmp_ps(a, a, _CMP_ORD_Q)));   /* NaN -> 0 */
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float amax = _mm_cvtss_f32(h);
    float d = amax / 127.f, id = d > 0 ? 1.f / d : 0.f;
    const __m256 vid = _mm256_set1_ps(id), hi = _mm256_set1_ps(127.f), lo = _mm256_set1_ps(-127.f);
    __m256i qi[4], sum = _mm256_setzero_si256();
    for (int i = 0; i < 4; i++) {
        __m256 t = _mm256_mul_ps(v[i], vid);
        t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q));
        t = _mm256_min_ps(_mm256_max_ps(t, lo), hi);
        qi[i] = _mm256_cvtps_epi32(t);   /* MXCSR's rounding: to nearest even */
        sum = _mm256_add_epi32(sum, qi[i]);
    }
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)(void *)q, p);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    *d_out = d;
    *s_out = _mm_cvtsi128_si32(s4);
}

/* ---- AVX2: maddubs (u8 x s8 -> int16 pairs) then madd to int32; no saturation for the
 * 4/5-bit codes (2*31*127 < 32767); Q8_0 uses the sign trick (|w| x sign(a, w)). ---- */
#define SFX avx2
#define TGT "avx2,fma,f16c"
#define Q8_VNNI 0
#define DOT(acc, u, s) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
/* Two 4/5-bit code vectors: their maddubs pairs summed as int16 first (|2 * 2*31*127| = 15748 < 32767:
 * exact), then ONE madd: the same int32 sums as two DOTs, a madd and an add less per activation row. */
#define DOT2(acc, u1, s1, u2, s2)                                                                          \
    _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16((u1), (s1)),           \
                                                               _mm256_maddubs_epi16((u2), (s2))),          \
                                              _mm256_set1_epi16(1)))
__attribute__((always_inline, target(TGT))) static inline __m256i bits5_avx2(__m256i v, uint32_t bits) {
    /* byte j = 0xFF where bit j is set (llama.cpp's bytes_from_bits_32) */
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    b = _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
    return _mm256_or_si256(v, _mm256_and_si256(b, _mm256_set1_epi8(0x10)));
}
#define BITS5(v, bits) bits5_avx2((v), (bits))
#include "q32_x86.h"
#undef SFX
#undef TGT
#undef Q8_VNNI
#undef DOT
#undef DOT2
#undef BITS5

/* ---- AVX-VNNI: vpdpbusd (VEX) ---- */
#define SFX avxvnni
#define TGT "avx2,fma,f16c,avxvnni"
#define Q8_VNNI 1
#define DOT(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#define DOT2(acc, u1, s1, u2, s2) DOT(DOT((acc), (u1), (s1)), (u2), (s2))
__attribute__((always_inline, target(TGT))) static inline __m256i bits5_avxvnni(__m256i v, uint32_t bits) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    b = _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
    return _mm256_or_si256(v, _mm256_and_si256(b, _mm256_set1_epi8(0x10)));
}
#define BITS5(v, bits) bits5_avxvnni((v), (bits))
#include "q32_x86.h"
#undef SFX
#undef TGT
#undef Q8_VNNI
#undef DOT
#undef DOT2
#undef BITS5

#else
typedef int q32_x86_unused;   /* ISO C: a translation unit must declare something */
#endif
