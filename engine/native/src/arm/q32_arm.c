/* The q32 family's arm64 paths: q32_arm_body.h compiled for plain NEON (every arm64 CPU), for
 * FEAT_DotProd (SDOT) and for FEAT_I8MM (SMMLA for pairs of activation rows, SDOT for a last one). Target attributes, not -march flags: dispatch.c only calls a path this
 * CPU has. Empty on other architectures. */
#include <stdint.h>

#include "cpu_arm.h"
#include "q32_layout.h"
#include "q32_tile.h"

#if AMBER_ARM64
#include <arm_neon.h>

/* 32 products without SDOT: SMULL into int16 (|a*b| <= 128*127), pairwise-added into int32. */
static inline int32x4_t dot2_neon(int32x4_t acc, int8x16_t wlo, int8x16_t alo, int8x16_t whi,
                                  int8x16_t ahi) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(wlo), vget_low_s8(alo)));
    acc = vpadalq_s16(acc, vmull_high_s8(wlo, alo));
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(whi), vget_low_s8(ahi)));
    return vpadalq_s16(acc, vmull_high_s8(whi, ahi));
}

#define Q32A_FN(name) name##_neon
#define Q32A_TARGET
#define Q32A_DOT2(acc, wlo, alo, whi, ahi) dot2_neon(acc, wlo, alo, whi, ahi)
#include "q32_arm_body.h"
#undef Q32A_FN
#undef Q32A_TARGET
#undef Q32A_DOT2

#define Q32A_FN(name) name##_dotprod
#define Q32A_TARGET AMBER_TARGET_DOTPROD
#define Q32A_DOT2(acc, wlo, alo, whi, ahi) vdotq_s32(vdotq_s32(acc, wlo, alo), whi, ahi)
#include "q32_arm_body.h"
#undef Q32A_FN
#undef Q32A_TARGET

#define Q32A_FN(name) name##_i8mm
#define Q32A_TARGET AMBER_TARGET_I8MM
#define Q32A_MMLA 1
#include "q32_arm_body.h"
#endif
