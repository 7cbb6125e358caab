/* The packed prefill kernel (qk_pack512.c's idea) at AVX2 width: 8 weight rows a pack, for
 * AVX2+FMA+F16C and for AVX-VNNI (vpdpbusd). Compiled without -m flags (target attributes). */
#include <stdlib.h>

#include "qk_impl.h"

#ifdef QK_X86
#include <immintrin.h>

#define P8R 8        /* weight rows a pack: one per int32 lane */
#define P8KC 16      /* super-blocks a pack (scratch ~50 KB) */
#define P8T 4        /* activation rows in flight (16 registers) */

struct pk8_sb {
    uint8_t lev[64][P8R][4];   /* group g of 4 levels, row r */
    int32_t sc[16][P8R];       /* sub-block scales (8 used by Q4_K/Q5_K); on AVX2 as int16 pairs */
    int32_t mn[8][P8R];        /* Q4_K/Q5_K: sub-block mins; on AVX2 as int16 pairs, and there Q6_K's
                                * scales 2t, 2t+1 as one pair */
    float d[P8R], dmin[P8R];
};

#define QK_TGT __attribute__((target("avx2,fma,f16c")))
#define QK_SFX avx2
#define QK_I16 1
#include "qk_pack256_body.h"
#undef QK_TGT
#undef QK_SFX
#undef QK_I16

#define QK_TGT __attribute__((target("avx2,fma,f16c,avxvnni")))
#define QK_SFX avxvnni
#define QK_DPBUSD(acc, w, a) _mm256_dpbusd_avx_epi32((acc), (w), (a))
#define QK_I16 0
#include "qk_pack256_body.h"
#undef QK_TGT
#undef QK_SFX
#undef QK_DPBUSD
#undef QK_I16
#endif
