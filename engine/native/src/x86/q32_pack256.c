/* The q32 family's packed prefill path (m >= Q32_PACK_MIN_M) at 256-bit width, for AVX2+FMA+F16C
 * (maddubs + madd) and for AVX-VNNI (vpdpbusd): q32_pack256_body.h compiled twice. Function target
 * attributes, not -m flags: dispatch only calls a path this CPU has. GGUF's W is not changed: the
 * scratch lives on the stack for one call. */
#include <stdint.h>

#include "q32_layout.h"
#include "q32_tile.h"

#if Q32_HAVE_X86
#include <immintrin.h>

#define P8_ROWS 8                      /* weight rows a pack: one per int32 lane */
#define P8_SEG 32                      /* blocks a packed segment */
#define P8_MT 4                        /* activation rows in flight (16 registers) */
#define P8_SIGN 256                    /* AVX2 Q8_0: the weights' signs, transposed like the codes */
#define P8_D 512
#define P8_M 544
#define P8_BLK 576                     /* a block's scratch: 8 code vectors, 8 sign vectors, 8 d, 8 m */

#define P8_SFX avx2
#define P8_TGT "avx2,fma,f16c"
#define P8_VNNI 0
#include "q32_pack256_body.h"
#undef P8_SFX
#undef P8_TGT
#undef P8_VNNI

#define P8_SFX avxvnni
#define P8_TGT "avx2,fma,f16c,avxvnni"
#define P8_VNNI 1
#define P8_DOT(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#include "q32_pack256_body.h"
#undef P8_SFX
#undef P8_TGT
#undef P8_VNNI
#undef P8_DOT
#else
typedef int q32_pack256_unused;
#endif
