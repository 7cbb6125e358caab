/* The SwiGLU epilogue's SiLU (swiglu.c) as ONNX Runtime computes it on arm64: MLAS's generic
 * logistic kernel (logistic.cpp, four lanes at a time) where MlasMultiplyAddFloat32x4 is one fused
 * multiply-add (vfmaq_f32) on AArch64, s clamped to [0, 1]; then MlasSiluKernel's g * s and Mul's
 * * u. The same IEEE operations per lane as the x86 FMA3 logistic, except that clamp's upper end. */
#include <stdint.h>

#include "cpu_arm.h"
#include "swiglu.h"

#if AMBER_ARM64
#include <arm_neon.h>

/* MlasLogisticKernel's vector body: max(lo, x), min(hi, .), the two polynomials by fused steps. */
static inline float32x4_t logistic4(float32x4_t x) {
    x = vminq_f32(vdupq_n_f32(LOGI_HI), vmaxq_f32(vdupq_n_f32(LOGI_LO), x));
    const float32x4_t x2 = vmulq_f32(x, x);
    float32x4_t p = vfmaq_f32(vdupq_n_f32(LOGI_A7), x2, vdupq_n_f32(LOGI_A9));
    p = vfmaq_f32(vdupq_n_f32(LOGI_A5), p, x2);
    p = vfmaq_f32(vdupq_n_f32(LOGI_A3), p, x2);
    p = vfmaq_f32(vdupq_n_f32(LOGI_A1), p, x2);
    p = vmulq_f32(p, x);
    float32x4_t q = vfmaq_f32(vdupq_n_f32(LOGI_B8), x2, vdupq_n_f32(LOGI_B10));
    q = vfmaq_f32(vdupq_n_f32(LOGI_B6), q, x2);
    q = vfmaq_f32(vdupq_n_f32(LOGI_B4), q, x2);
    q = vfmaq_f32(vdupq_n_f32(LOGI_B2), q, x2);
    q = vfmaq_f32(vdupq_n_f32(LOGI_B0), q, x2);
    const float32x4_t s = vaddq_f32(vdivq_f32(p, q), vdupq_n_f32(0.5f));
    return vminq_f32(vmaxq_f32(s, vdupq_n_f32(0.0f)), vdupq_n_f32(1.0f));   /* MlasClampFloat32x4 */
}

void amber_silu_mul_neon(const float *g, const float *u, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t gv = vld1q_f32(g + i);
        const float32x4_t silu = vmulq_f32(gv, logistic4(gv));
        vst1q_f32(y + i, vmulq_f32(silu, vld1q_f32(u + i)));
    }
    if (i < n) {   /* the tail through the same lanes (MLAS's scalar tail contracts to the same FMAs) */
        float gt[4] = {0}, ut[4] = {0}, yt[4];
        for (int64_t j = i; j < n; j++) {
            gt[j - i] = g[j];
            ut[j - i] = u[j];
        }
        amber_silu_mul_neon(gt, ut, yt, 4);
        for (int64_t j = i; j < n; j++)
            y[j] = yt[j - i];
    }
}
#endif
