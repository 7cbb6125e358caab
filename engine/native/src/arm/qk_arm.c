/* The K-quant family's arm64 paths: qk_arm_body.h compiled for plain NEON (every arm64 CPU) and
 * for FEAT_DotProd (SDOT). Target attributes, not -march flags: dispatch.c only calls a path
 * this CPU has. Empty on other architectures. */
#include <stdint.h>
#include <string.h>

#include "cpu_arm.h"
#include "qk_impl.h"

#if AMBER_ARM64
#include <arm_neon.h>

/* 16 products without SDOT: SMULL into int16 (|level * a| <= 63 * 127), pairwise into int32. */
static inline int32x4_t dot16_neon(int32x4_t acc, int8x16_t w, int8x16_t a) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(a)));
    return vpadalq_s16(acc, vmull_high_s8(w, a));
}

#define QKA_FN(name) name##_neon
#define QKA_TARGET
#define QKA_DOT16(acc, w, a) dot16_neon(acc, w, a)
#include "qk_arm_body.h"
#undef QKA_FN
#undef QKA_TARGET
#undef QKA_DOT16

#define QKA_FN(name) name##_dotprod
#define QKA_TARGET AMBER_TARGET_DOTPROD
#define QKA_DOT16(acc, w, a) vdotq_s32(acc, w, a)
#include "qk_arm_body.h"
#endif
