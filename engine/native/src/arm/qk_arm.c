/* The K-quant family's arm64 paths: qk_arm_body.h compiled for plain NEON (every arm64 CPU) and
 * for FEAT_DotProd (SDOT), and a FEAT_I8MM kernel (SMMLA over two weight columns by two activation
 * rows, the dotprod kernel's pieces for an odd last row or column). Target attributes, not -march flags: dispatch.c only calls a path
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
#undef QKA_FN
#undef QKA_TARGET
#undef QKA_DOT16

/* One super-block of a weight column, decoded: levels, the scale of each 16 values, and (Q4_K,
 * Q5_K) the unpacked scales and mins. */
typedef struct {
    int8_t lv[256];
    int32_t sc16[16];
    uint8_t sm[16];
} qk_col;

static inline AMBER_TARGET_I8MM void qk_decode_col(int type, const uint8_t *x, qk_col *c) {
    if (type == QK_Q6_K)
        decode6_dotprod(x, c->lv, c->sc16);
    else
        decode45_dotprod(x, type == QK_Q5_K, c->lv, c->sc16, c->sm);
}

/* The float tail of one output for one super-block: the same expression, in the same order, as
 * qk_arm_body.h's, so the result keeps the scalar path's bits. */
static inline float qk_tail(int type, float acc, int32_t isum, const qk_col *c, const uint8_t *x,
                            const uint8_t *a) {
    int16_t bs[16];
    memcpy(bs, a + Q8K_BSUMS, sizeof bs);
    if (type == QK_Q6_K) {
        int32_t off = 0;
        for (int s = 0; s < 16; s++) off += c->sc16[s] * bs[s];
        return qk_tail6(acc, isum - 32 * off, qk_half(x + 208), qk_act_d(a));
    }
    int32_t msum = 0;
    for (int j = 0; j < 8; j++) msum += c->sm[8 + j] * (bs[2 * j] + bs[2 * j + 1]);
    return qk_tail45(acc, isum, msum, qk_half(x), qk_half(x + 2), qk_act_d(a));
}

/* The 2x2 integer sums of activation rows (q0, q1) with weight columns (c0, c1), each 16 values
 * weighted by its column's scale: lanes [r0.c0, r0.c1, r1.c0, r1.c1]. Each SMMLA adds the four
 * 8-value dot products of its halves; every sum is exact in int32 (|sum| < 16 * 16 * 63 * 127). */
static inline AMBER_TARGET_I8MM int32x4_t qk_isum_2x2(const qk_col *c0, const qk_col *c1,
                                                      const int8_t *q0, const int8_t *q1) {
    int32x4_t acc = vdupq_n_s32(0);
    for (int c = 0; c < 16; c++) {
        int32x4_t p = vdupq_n_s32(0);
        for (int h = 0; h < 16; h += 8) {
            const int8x16_t a = vcombine_s8(vld1_s8(q0 + 16 * c + h), vld1_s8(q1 + 16 * c + h));
            const int8x16_t b = vcombine_s8(vld1_s8(c0->lv + 16 * c + h), vld1_s8(c1->lv + 16 * c + h));
            p = vmmlaq_s32(p, a, b);
        }
        const int32_t sv[4] = {c0->sc16[c], c1->sc16[c], c0->sc16[c], c1->sc16[c]};
        acc = vmlaq_s32(acc, p, vld1q_s32(sv));
    }
    return acc;
}

AMBER_TARGET_I8MM void qk_gemm_i8mm(int type, const uint8_t *act, int64_t m, const uint8_t *w,
                                    int64_t k, int64_t n0, int64_t n1, float *y, int64_t ldy) {
    const int64_t nb = k / QK_BLOCK, rb = qk_row_bytes(type, k), ab = qk_act_bytes(type, k);
    const int64_t xb = qk_block_bytes(type);
    if ((n1 - n0) & 1) {   /* an odd column: SDOT alone */
        qk_gemm_dotprod(type, act, m, w, k, n1 - 1, n1, y, ldy);
        n1--;
    }
    for (int64_t n = n0; n < n1; n += 2) {
        for (int64_t i = 0; i < m; i += QK_TILE) {
            const int mt = m - i < QK_TILE ? (int)(m - i) : QK_TILE;
            float acc0[QK_TILE] = {0.f}, acc1[QK_TILE] = {0.f};
            const uint8_t *x0 = w + n * rb, *x1 = w + (n + 1) * rb, *a0 = act + i * ab;
            for (int64_t b = 0; b < nb; b++, x0 += xb, x1 += xb, a0 += Q8K_BYTES) {
                qk_col c0, c1;
                qk_decode_col(type, x0, &c0);
                qk_decode_col(type, x1, &c1);
                int r = 0;
                for (; r + 1 < mt; r += 2) {
                    const uint8_t *ar = a0 + r * ab, *as = ar + ab;
                    int32_t s[4];
                    vst1q_s32(s, qk_isum_2x2(&c0, &c1, (const int8_t *)(ar + Q8K_Q), (const int8_t *)(as + Q8K_Q)));
                    acc0[r] = qk_tail(type, acc0[r], s[0], &c0, x0, ar);
                    acc1[r] = qk_tail(type, acc1[r], s[1], &c1, x1, ar);
                    acc0[r + 1] = qk_tail(type, acc0[r + 1], s[2], &c0, x0, as);
                    acc1[r + 1] = qk_tail(type, acc1[r + 1], s[3], &c1, x1, as);
                }
                if (r < mt) {   /* an odd last row: SDOT */
                    const uint8_t *ar = a0 + r * ab;
                    const int8_t *q = (const int8_t *)(ar + Q8K_Q);
                    acc0[r] = qk_tail(type, acc0[r], isum_dotprod(c0.lv, c0.sc16, q), &c0, x0, ar);
                    acc1[r] = qk_tail(type, acc1[r], isum_dotprod(c1.lv, c1.sc16, q), &c1, x1, ar);
                }
            }
            for (int r = 0; r < mt; r++) {
                y[(i + r) * ldy + n] = acc0[r];
                y[(i + r) * ldy + n + 1] = acc1[r];
            }
        }
    }
}
#endif
