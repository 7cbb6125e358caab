/* The K-quant family's arm64 kernel (qk_gemm_rows's contract), included by qk_arm.c once per ISA:
 *   QKA_FN(name)          the name of a function of this ISA
 *   QKA_TARGET            its target attribute (empty for plain NEON)
 *   QKA_DOT16(acc, w, a)  acc (int32x4) plus the 16 products of int8 w and a, exactly
 *
 * A weight super-block is decoded once into its 256 levels (0..31 or 0..63, as int8) and the
 * scale of each 16 values, then dotted with up to QK_TILE activation rows. The integer sums are
 * exact and end in qk_tail45 / qk_tail6 like every other path, so every output has the scalar
 * path's bits. */

/* Q4_K/Q5_K: levels in value order and the scale of each 16 values (a sub-block of 32 has one). */
static inline QKA_TARGET void QKA_FN(decode45)(const uint8_t *x, const int five, int8_t lv[256],
                                                int32_t sc16[16], uint8_t sm[16]) {
    qk_unpack_scales(x + 4, sm);
    for (int c = 0; c < 16; c++)
        sc16[c] = sm[c / 2];
    const uint8_t *qh = x + 16, *qs = x + (five ? 48 : 16);
    const uint8x16_t m4 = vdupq_n_u8(15), b4 = vdupq_n_u8(16);
    const uint8x16_t h0 = vld1q_u8(qh), h1 = vld1q_u8(qh + 16);
    for (int j = 0; j < 4; j++) {   /* 64 values: low nibbles of 32 bytes, then their high ones */
        const uint8x16_t q0 = vld1q_u8(qs + 32 * j), q1 = vld1q_u8(qs + 32 * j + 16);
        uint8x16_t l0 = vandq_u8(q0, m4), l1 = vandq_u8(q1, m4);
        uint8x16_t u0 = vshrq_n_u8(q0, 4), u1 = vshrq_n_u8(q1, 4);
        if (five) {   /* bit 2j of qh[l] is the fifth bit of the low value, 2j + 1 the high's */
            const uint8x16_t bl = vdupq_n_u8((uint8_t)(1u << (2 * j))), bh = vdupq_n_u8((uint8_t)(2u << (2 * j)));
            l0 = vorrq_u8(l0, vandq_u8(vtstq_u8(h0, bl), b4));
            l1 = vorrq_u8(l1, vandq_u8(vtstq_u8(h1, bl), b4));
            u0 = vorrq_u8(u0, vandq_u8(vtstq_u8(h0, bh), b4));
            u1 = vorrq_u8(u1, vandq_u8(vtstq_u8(h1, bh), b4));
        }
        vst1q_s8(lv + 64 * j, vreinterpretq_s8_u8(l0));
        vst1q_s8(lv + 64 * j + 16, vreinterpretq_s8_u8(l1));
        vst1q_s8(lv + 64 * j + 32, vreinterpretq_s8_u8(u0));
        vst1q_s8(lv + 64 * j + 48, vreinterpretq_s8_u8(u1));
    }
}

/* Q6_K: levels 0..63 in value order; its int8 scales are already one per 16 values. */
static inline QKA_TARGET void QKA_FN(decode6)(const uint8_t *x, int8_t lv[256], int32_t sc16[16]) {
    const uint8_t *ql = x, *qh = x + 128;
    const int8_t *sc = (const int8_t *)(x + 192);
    for (int c = 0; c < 16; c++)
        sc16[c] = sc[c];
    const uint8x16_t m4 = vdupq_n_u8(15), m3 = vdupq_n_u8(3), m30 = vdupq_n_u8(0x30);
    for (int h = 0; h < 2; h++) {
        for (int t = 0; t < 2; t++) {
            const uint8x16_t lo = vld1q_u8(ql + 64 * h + 16 * t), hi = vld1q_u8(ql + 64 * h + 32 + 16 * t);
            const uint8x16_t hb = vld1q_u8(qh + 32 * h + 16 * t);
            int8_t *o = lv + 128 * h + 16 * t;
            vst1q_s8(o, vreinterpretq_s8_u8(vorrq_u8(vandq_u8(lo, m4), vshlq_n_u8(vandq_u8(hb, m3), 4))));
            vst1q_s8(o + 32, vreinterpretq_s8_u8(vorrq_u8(vandq_u8(hi, m4), vandq_u8(vshlq_n_u8(hb, 2), m30))));
            vst1q_s8(o + 64, vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(lo, 4), vandq_u8(hb, m30))));
            vst1q_s8(o + 96, vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(hi, 4), vandq_u8(vshrq_n_u8(hb, 2), m30))));
        }
    }
}

/* sum over c of sc16[c] * (levels . activations) of the c-th 16 values: exact in int32. */
static inline QKA_TARGET int32_t QKA_FN(isum)(const int8_t lv[256], const int32_t sc16[16],
                                               const int8_t *q8) {
    int32x4_t acc = vdupq_n_s32(0);
    for (int c = 0; c < 16; c++) {
        const int32x4_t p = QKA_DOT16(vdupq_n_s32(0), vld1q_s8(lv + 16 * c), vld1q_s8(q8 + 16 * c));
        acc = vmlaq_n_s32(acc, p, sc16[c]);
    }
    return vaddvq_s32(acc);
}

QKA_TARGET void QKA_FN(qk_gemm)(int type, const uint8_t *act, int64_t m, const uint8_t *w,
                                int64_t k, int64_t n0, int64_t n1, float *y, int64_t ldy) {
    const int64_t nb = k / QK_BLOCK, rb = qk_row_bytes(type, k), ab = qk_act_bytes(type, k);
    const int64_t xb = qk_block_bytes(type);
    const int five = type == QK_Q5_K;
    for (int64_t n = n0; n < n1; n++) {
        for (int64_t i = 0; i < m; i += QK_TILE) {
            const int mt = m - i < QK_TILE ? (int)(m - i) : QK_TILE;
            float acc[QK_TILE] = {0.f};
            const uint8_t *x = w + n * rb, *a0 = act + i * ab;
            for (int64_t b = 0; b < nb; b++, x += xb, a0 += Q8K_BYTES) {
                int8_t lv[256];
                int32_t sc16[16];
                uint8_t sm[16];
                if (type == QK_Q6_K)
                    QKA_FN(decode6)(x, lv, sc16);
                else
                    QKA_FN(decode45)(x, five, lv, sc16, sm);
                for (int r = 0; r < mt; r++) {
                    const uint8_t *a = a0 + r * ab;
                    int16_t bs[16];
                    memcpy(bs, a + Q8K_BSUMS, sizeof bs);
                    int32_t isum = QKA_FN(isum)(lv, sc16, (const int8_t *)(a + Q8K_Q));
                    if (type == QK_Q6_K) {
                        int32_t off = 0;
                        for (int s = 0; s < 16; s++) off += sc16[s] * bs[s];
                        isum -= 32 * off;
                        acc[r] = qk_tail6(acc[r], isum, qk_half(x + 208), qk_act_d(a));
                    } else {
                        int32_t msum = 0;
                        for (int j = 0; j < 8; j++) msum += sm[8 + j] * (bs[2 * j] + bs[2 * j + 1]);
                        acc[r] = qk_tail45(acc[r], isum, msum, qk_half(x), qk_half(x + 2), qk_act_d(a));
                    }
                }
            }
            for (int r = 0; r < mt; r++)
                y[(i + r) * ldy + n] = acc[r];
        }
    }
}
