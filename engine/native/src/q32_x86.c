/* The q32 family's 256-bit x86 SIMD paths: q32_x86.h compiled for AVX2 (+FMA, F16C) and AVX-VNNI
 * (q32_avx512.c has the AVX512-VNNI path). Function target attributes, not -m flags: the
 * library runs on CPUs without these, and dispatch.c only calls a path this CPU has. */
#include <stdint.h>

#include "q32_layout.h"
#include "q32_tile.h"

#if Q32_HAVE_X86
#include <immintrin.h>

/* ---- AVX2: maddubs (u8 x s8 -> int16 pairs) then madd to int32; no saturation for the
 * 4/5-bit codes (2*31*127 < 32767); Q8_0 uses the sign trick (|w| x sign(a, w)). ---- */
#define SFX avx2
#define TGT "avx2,fma,f16c"
#define Q8_VNNI 0
#define DOT(acc, u, s) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
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
#undef BITS5

/* ---- AVX-VNNI: vpdpbusd (VEX) ---- */
#define SFX avxvnni
#define TGT "avx2,fma,f16c,avxvnni"
#define Q8_VNNI 1
#define DOT(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
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
#undef BITS5

#else
typedef int q32_x86_unused;   /* ISO C: a translation unit must declare something */
#endif
