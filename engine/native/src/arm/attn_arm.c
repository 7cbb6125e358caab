/* The attention primitives (attn.h's attn_ops) with NEON, for every arm64 CPU: float16 <-> float32
 * by FCVTL/FCVTN (exact one way, round to nearest even the other, as attn.c's scalar ones), dot
 * products and the value accumulation four lanes at a time with fused multiply-adds; the exp stays
 * attn.c's expf loop. A query row's result depends only on its own keys, never on the thread
 * split. Without the whole-block kernels (NULL): attn.c converts and calls these per block. */
#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "cpu_arm.h"

#if AMBER_ARM64
#include <arm_neon.h>

static void to_float_neon(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))));
    if (i < n) {   /* the tail through a padded vector: the same conversion */
        uint16_t h[4] = {0, 0, 0, 0};
        float f[4];
        for (int64_t j = i; j < n; j++) h[j - i] = src[j];
        vst1q_f32(f, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h))));
        for (int64_t j = i; j < n; j++) dst[j] = f[j - i];
    }
}

static void to_half_neon(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    if (i < n) {
        float f[4] = {0.f, 0.f, 0.f, 0.f};
        uint16_t h[4];
        for (int64_t j = i; j < n; j++) f[j - i] = src[j];
        vst1_u16(h, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(f))));
        for (int64_t j = i; j < n; j++) dst[j] = h[j - i];
    }
}

static void dots_neon(const float *q, const float *k, int64_t n, int64_t d, float *out) {
    for (int64_t j = 0; j < n; j++, k += d) {
        float32x4_t acc = vdupq_n_f32(0.f);
        int64_t i = 0;
        for (; i + 4 <= d; i += 4)
            acc = vfmaq_f32(acc, vld1q_f32(q + i), vld1q_f32(k + i));
        float s = vaddvq_f32(acc);
        for (; i < d; i++)
            s += q[i] * k[i];
        out[j] = s;
    }
}

static void accum_neon(float *acc, float c, const float *p, const float *v, int64_t n, int64_t d) {
    int64_t i = 0;
    for (; i + 4 <= d; i += 4) {
        float32x4_t a = vmulq_n_f32(vld1q_f32(acc + i), c);
        for (int64_t j = 0; j < n; j++)
            a = vfmaq_n_f32(a, vld1q_f32(v + j * d + i), p[j]);
        vst1q_f32(acc + i, a);
    }
    for (; i < d; i++) {
        float a = acc[i] * c;
        for (int64_t j = 0; j < n; j++)
            a += p[j] * v[j * d + i];
        acc[i] = a;
    }
}

static const attn_ops NEON = {to_float_neon, to_half_neon, dots_neon, accum_neon, attn_exp_sum_scalar,
                              NULL, NULL, NULL};
const attn_ops *attn_ops_neon(void) { return &NEON; }
#else
const attn_ops *attn_ops_neon(void) { return 0; }
#endif
