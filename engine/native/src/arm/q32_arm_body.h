/* The q32 family's arm64 tile (q32_tile.h's contract), included by q32_arm.c once per ISA with
 *   Q32A_FN(name)   the name of a function of this ISA
 *   Q32A_TARGET     its target attribute (empty for plain NEON)
 *   Q32A_DOT2(acc, wlo, alo, whi, ahi)   acc (int32x4) plus the 32 products, exactly
 *   Q32A_MMLA       defined: two activation rows at a time through SMMLA (FEAT_I8MM)
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

/* One block's float terms for 4 outputs of one activation row, the scalar path's operations:
 * sum += dw * da * (float)(dot - off * s), then (with a min) sum += m * (da * (float)s). */
static inline Q32A_TARGET float32x4_t Q32A_FN(fold)(float32x4_t sum, int32x4_t dot, float32x4_t dw,
                                                    float32x4_t mw, const uint8_t *a, int64_t nb,
                                                    int64_t b, const int off, const int has_min) {
    const int32_t s = (int32_t)q32_ld32(a + q32_act_s_off(nb) + b * 4);
    const float da = q32_ldf(a + q32_act_d_off(nb) + b * 4);
    float32x4_t t = vmulq_f32(dw, vdupq_n_f32(da));
    t = vmulq_f32(t, vcvtq_f32_s32(vsubq_s32(dot, vdupq_n_s32(off * s))));
    sum = vaddq_f32(sum, t);
    if (has_min)
        sum = vaddq_f32(sum, vmulq_f32(mw, vdupq_n_f32(da * (float)s)));
    return sum;
}

#ifdef Q32A_MMLA
/* The 4 weight rows' dots with two activation rows: SMMLA multiplies 2 x 8 codes of the two
 * rows by 8 codes of 2 weight rows; out0/out1 get rows 0/1's dots with weight rows 0..3. */
static inline Q32A_TARGET void Q32A_FN(dots2)(const int8x16_t lo[4], const int8x16_t hi[4],
                                              const int8_t *a0, const int8_t *a1, int64_t ilo,
                                              int64_t ihi, int32x4_t *out0, int32x4_t *out1) {
    const int8x16_t r0l = vld1q_s8(a0 + ilo), r0h = vld1q_s8(a0 + ihi);
    const int8x16_t r1l = vld1q_s8(a1 + ilo), r1h = vld1q_s8(a1 + ihi);
    /* rows 0 and 1, 8 values each: values 0-7, 8-15, 16-23, 24-31 */
    const int8x16_t ac[4] = {
        vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(r0l), vreinterpretq_s64_s8(r1l))),
        vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(r0l), vreinterpretq_s64_s8(r1l))),
        vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(r0h), vreinterpretq_s64_s8(r1h))),
        vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(r0h), vreinterpretq_s64_s8(r1h)))};
    int32x4_t p[2];
    for (int q = 0; q < 2; q++) {   /* weight rows 2q, 2q + 1: p[q] = {r0.w0, r0.w1, r1.w0, r1.w1} */
        const int64x2_t l0 = vreinterpretq_s64_s8(lo[2 * q]), l1 = vreinterpretq_s64_s8(lo[2 * q + 1]);
        const int64x2_t h0 = vreinterpretq_s64_s8(hi[2 * q]), h1 = vreinterpretq_s64_s8(hi[2 * q + 1]);
        int32x4_t acc = vdupq_n_s32(0);
        acc = vmmlaq_s32(acc, ac[0], vreinterpretq_s8_s64(vzip1q_s64(l0, l1)));
        acc = vmmlaq_s32(acc, ac[1], vreinterpretq_s8_s64(vzip2q_s64(l0, l1)));
        acc = vmmlaq_s32(acc, ac[2], vreinterpretq_s8_s64(vzip1q_s64(h0, h1)));
        p[q] = vmmlaq_s32(acc, ac[3], vreinterpretq_s8_s64(vzip2q_s64(h0, h1)));
    }
    *out0 = vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s32(p[0]), vreinterpretq_s64_s32(p[1])));
    *out1 = vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s32(p[0]), vreinterpretq_s64_s32(p[1])));
}
#endif

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
                int r = 0;
#ifdef Q32A_MMLA
                for (; r + 1 < mt; r += 2) {
                    const uint8_t *a0 = act + r * ab, *a1 = a0 + ab;
                    int32x4_t d0, d1;
                    Q32A_FN(dots2)(lo, hi, (const int8_t *)a0, (const int8_t *)a1, ilo, ihi, &d0, &d1);
                    sum[r] = Q32A_FN(fold)(sum[r], d0, dw, mw, a0, nb, b, off, has_min);
                    sum[r + 1] = Q32A_FN(fold)(sum[r + 1], d1, dw, mw, a1, nb, b, off, has_min);
                }
#endif
                for (; r < mt; r++) {
                    const uint8_t *a = act + r * ab;
                    const int8x16_t alo = vld1q_s8((const int8_t *)a + ilo);
                    const int8x16_t ahi = vld1q_s8((const int8_t *)a + ihi);
                    int32x4_t p[4];
                    for (int j = 0; j < 4; j++)
                        p[j] = Q32A_DOT2(vdupq_n_s32(0), lo[j], alo, hi[j], ahi);
                    const int32x4_t dot = vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3]));
                    sum[r] = Q32A_FN(fold)(sum[r], dot, dw, mw, a, nb, b, off, has_min);
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
