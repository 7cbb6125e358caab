/* Q4_K Q5_K Q6_K kernels at AVX2 width: AVX2+FMA+F16C, and the same with AVX-VNNI's vpdpwssd.
 * Compiled without -m flags: each function carries its own target attribute, and dispatch.c
 * only routes here on a CPU that has the ISA. */
#include "qk_impl.h"

#ifdef QK_X86
#include <immintrin.h>

/* Super-blocks ahead to prefetch, into L2 (see qk_avx512.c). */
#define QK_PF 32

/* Q6_K: the shuffle that broadcasts scales 2G and 2G+1 to the two 16-value halves of group G. */
static const uint8_t QK_Q6_SCALE_PAT[8][16] = {
#define P(g) {2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, \
              2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1}
    P(0), P(1), P(2), P(3), P(4), P(5), P(6), P(7)
#undef P
};

#define QK_TGT __attribute__((target("avx2,fma,f16c")))
#define QK_SFX avx2
#define QK_DPWSSD(a, p, s) _mm256_add_epi32((a), _mm256_madd_epi16((p), (s)))
#include "qk_avx2_body.h"
#undef QK_TGT
#undef QK_SFX
#undef QK_DPWSSD

#define QK_TGT __attribute__((target("avx2,fma,f16c,avxvnni")))
#define QK_SFX avxvnni
#define QK_DPWSSD(a, p, s) _mm256_dpwssd_avx_epi32((a), (p), (s))
#include "qk_avx2_body.h"
#undef QK_TGT
#undef QK_SFX
#undef QK_DPWSSD

#endif
