/* The q32 family's arm64 tile (q32_tile.h's contract), included by q32_arm.c once per ISA with
 *   Q32A_FN(name)   the name of a function of this ISA
 *   Q32A_TARGET     its target attribute (empty for plain NEON)
 *   Q32A_DOT2(acc, wlo, alo, whi, ahi)   acc (int32x4) plus the 32 products, exactly
 *
 * Four weight rows at a time, one per float lane: each block's integer dot is exact (SDOT, or
 * SMULL + SADALP), and its float terms are the scalar path's operations in the scalar path's
 * order, one lane per output and never fused. So every output has the scalar path's bits, for
 * any tile, column range or thread split. */

/* One weight block of `type` as its 32 codes: lo = values 0..15, hi = values 16..31. */
static inline Q32A_TARGET void Q32A_FN(codes)(const int type, const uint8_t *blk, int8x16_t *lo,
                                               int8x16_t *hi) {
    if (type == T_Q8_0) {
        *lo = vld1q_s8((const int8_t *)(blk + 2));
        *hi = vld1q_s8((const int8_t *)(blk + 18));
        return;
    }
    uint8x16_t qs = vld1q_u8(blk + q32_qs_off(type));
    uint8x16_t l = vandq_u8(qs, vdupq_n_u8(15)), h = vshrq_n_u8(qs, 4);
    if (q32_is5(type)) {   /* bit j of qh is the fifth bit of value j */
        static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
        const uint8x16_t bits = vld1q_u8(bit), b4 = vdupq_n_u8(16);
        uint32_t qh = q32_ld32(blk + q32_qh_off(type));
        uint8x16_t ql = vcombine_u8(vdup_n_u8((uint8_t)qh), vdup_n_u8((uint8_t)(qh >> 8)));
        uint8x16_t qhh = vcombine_u8(vdup_n_u8((uint8_t)(qh >> 16)), vdup_n_u8((uint8_t)(qh >> 24)));
        l = vorrq_u8(l, vandq_u8(vtstq_u8(ql, bits), b4));
        h = vorrq_u8(h, vandq_u8(vtstq_u8(qhh, bits), b4));
    }
    *lo = vreinterpretq_s8_u8(l);
    *hi = vreinterpretq_s8_u8(h);
}

static inline Q32A_TARGET void Q32A_FN(tile_t)(const int type, const uint8_t *act, int64_t ab,
                                                int mt, const uint8_t *w, int64_t nb, int64_t n0,
                                                int64_t n1, int64_t s0, int64_t s1, float *y,
                                                int64_t ldy) {
    const int bs = q32_block_bytes(type), off = q32_offset(type), has_min = q32_has_min(type);
    const int64_t rb = nb * bs;
    for (int64_t n = n0; n < n1; n += 4) {
        const int nc = n1 - n < 4 ? (int)(n1 - n) : 4;
        const uint8_t *wr[4];
        for (int j = 0; j < 4; j++)   /* lanes past the range repeat row n; never stored */
            wr[j] = w + (n + (j < nc ? j : 0)) * rb;
        float32x4_t tot[Q32_MT];
        for (int r = 0; r < mt; r++) {
            float t[4] = {0.f, 0.f, 0.f, 0.f};
            if (s0 > 0)
                for (int j = 0; j < nc; j++)
                    t[j] = y[r * ldy + n + j];
            tot[r] = vld1q_f32(t);
        }
        for (int64_t sg = s0; sg < s1; sg++) {
            float32x4_t sum[Q32_MT];
            for (int r = 0; r < mt; r++)
                sum[r] = vdupq_n_f32(0.f);
            for (int64_t b = sg * Q32_SEG; b < Q32_SEG_END(sg, nb); b++) {
                int8x16_t lo[4], hi[4];
                uint16_t dh[4], mh[4];
                for (int j = 0; j < 4; j++) {
                    const uint8_t *blk = wr[j] + b * bs;
                    Q32A_FN(codes)(type, blk, &lo[j], &hi[j]);
                    dh[j] = q32_ld16(blk);
                    mh[j] = has_min ? q32_ld16(blk + 2) : 0;
                }
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(dh)));
                const float32x4_t mw = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(mh)));
                const int64_t ilo = q32_act_q_index(type, nb, b, 0), ihi = q32_act_q_index(type, nb, b, 16);
                for (int r = 0; r < mt; r++) {
                    const uint8_t *a = act + r * ab;
                    const int8x16_t alo = vld1q_s8((const int8_t *)a + ilo);
                    const int8x16_t ahi = vld1q_s8((const int8_t *)a + ihi);
                    int32x4_t p[4];
                    for (int j = 0; j < 4; j++)
                        p[j] = Q32A_DOT2(vdupq_n_s32(0), lo[j], alo, hi[j], ahi);
                    int32x4_t dot = vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3]));
                    const int32_t s = (int32_t)q32_ld32(a + q32_act_s_off(nb) + b * 4);
                    const float da = q32_ldf(a + q32_act_d_off(nb) + b * 4);
                    /* scalar: sum += dw * da * (float)(dot - off * s) */
                    float32x4_t t = vmulq_f32(dw, vdupq_n_f32(da));
                    t = vmulq_f32(t, vcvtq_f32_s32(vsubq_s32(dot, vdupq_n_s32(off * s))));
                    sum[r] = vaddq_f32(sum[r], t);
                    if (has_min)   /* scalar: sum += m * (da * (float)s) */
                        sum[r] = vaddq_f32(sum[r], vmulq_f32(mw, vdupq_n_f32(da * (float)s)));
                }
            }
            for (int r = 0; r < mt; r++)
                tot[r] = vaddq_f32(tot[r], sum[r]);
        }
        for (int r = 0; r < mt; r++) {
            float t[4];
            vst1q_f32(t, tot[r]);
            for (int j = 0; j < nc; j++)
                y[r * ldy + n + j] = t[j];
        }
    }
}

/* One instance per type, so each type's branches fold away. */
Q32A_TARGET void Q32A_FN(q32_tile)(int type, const uint8_t *act, int64_t ab, int mt,
                                   const uint8_t *w, int64_t nb, int64_t n0, int64_t n1,
                                   int64_t s0, int64_t s1, float *y, int64_t ldy) {
    switch (type) {
    case T_Q4_0: Q32A_FN(tile_t)(T_Q4_0, act, ab, mt, w, nb, n0, n1, s0, s1, y, ldy); break;
    case T_Q4_1: Q32A_FN(tile_t)(T_Q4_1, act, ab, mt, w, nb, n0, n1, s0, s1, y, ldy); break;
    case T_Q5_0: Q32A_FN(tile_t)(T_Q5_0, act, ab, mt, w, nb, n0, n1, s0, s1, y, ldy); break;
    case T_Q5_1: Q32A_FN(tile_t)(T_Q5_1, act, ab, mt, w, nb, n0, n1, s0, s1, y, ldy); break;
    default: Q32A_FN(tile_t)(T_Q8_0, act, ab, mt, w, nb, n0, n1, s0, s1, y, ldy); break;
    }
}
