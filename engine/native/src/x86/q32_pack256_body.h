/* The q32 family's packed prefill path at 256-bit width, written once and compiled per ISA:
 * q32_pack256.c includes this file with P8_SFX (name suffix), P8_TGT (target string) and P8_VNNI
 * (1 for AVX-VNNI, which also defines P8_DOT(acc, u8, s8): int32 lanes += 4-byte dot products of
 * full-range unsigned bytes). q32_pack512.c's layout at half width: 8 weight rows decoded per K
 * segment into a scratch with one output per 32-bit lane; the float operations per output and
 * their order are q32_pack512.c's, and the int32 block dots are exact, so every packed path gives
 * the same bits. Without VNNI, maddubs + madd (Q8_0 with the sign trick, |w| x sign(a, w), so its
 * int16 pairs cannot overflow). */
#define P8_CAT2(a, b) a##_##b
#define P8_CAT(a, b) P8_CAT2(a, b)
#define P8_NM(x) P8_CAT(x, P8_SFX)
#define P8_INL static inline __attribute__((always_inline, target(P8_TGT)))

/* byte j + 16 where bit j of bits is set (llama.cpp's bytes_from_bits_32) */
P8_INL __m256i P8_NM(p8_bits5)(__m256i v, uint32_t bits) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    b = _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
    return _mm256_add_epi8(v, _mm256_and_si256(b, _mm256_set1_epi8(0x10)));
}

/* 8x8 transpose of 32-bit elements: r[row] -> r[element]. */
P8_INL void P8_NM(p8_transpose)(__m256i r[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {   /* u[4i+e], 128-bit lane L: rows 4i..4i+3 of element 4L+e */
        u[4 * i] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int e = 0; e < 4; e++) {
        r[e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x20);
        r[4 + e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x31);
    }
}

/* Blocks [b0, b1) of the 8 rows from `wr` (rb bytes apart) into scr. */
P8_INL void P8_NM(p8_pack)(const int type, const uint8_t *wr, int64_t rb, int64_t b0, int64_t b1, uint8_t *scr) {
    const int bs = q32_block_bytes(type), qo = q32_qs_off(type), ho = q32_qh_off(type);
    for (int64_t b = b0; b < b1; b++) {
        uint8_t *out = scr + (b - b0) * P8_BLK;
        __m256i r[P8_ROWS], sg[P8_ROWS];
        __attribute__((aligned(32))) uint16_t dh[P8_ROWS], mh[P8_ROWS];
        for (int o = 0; o < P8_ROWS; o++) {
            const uint8_t *blk = wr + o * rb + b * bs;
            if (type == T_Q8_0) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 2));
#if P8_VNNI
                r[o] = _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80));   /* w + 128, unsigned */
#else
                r[o] = _mm256_sign_epi8(v, v);   /* |w|; the sign goes onto the activation */
                sg[o] = v;
#endif
            } else {
                const __m128i x = _mm_loadu_si128((const __m128i *)(blk + qo));
                const __m128i m4 = _mm_set1_epi8(0x0F);
                r[o] = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
                if (q32_is5(type))
                    r[o] = P8_NM(p8_bits5)(r[o], q32_ld32(blk + ho));
            }
            dh[o] = q32_ld16(blk);
            mh[o] = q32_has_min(type) ? q32_ld16(blk + 2) : 0;
        }
        P8_NM(p8_transpose)(r);
        for (int g = 0; g < 8; g++) _mm256_storeu_si256((__m256i *)(void *)(out + g * 32), r[g]);
        if (type == T_Q8_0 && !P8_VNNI) {
            P8_NM(p8_transpose)(sg);
            for (int g = 0; g < 8; g++) _mm256_storeu_si256((__m256i *)(void *)(out + P8_SIGN + g * 32), sg[g]);
        }
        _mm256_storeu_ps((float *)(void *)(out + P8_D), _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)dh)));
        if (q32_has_min(type))
            _mm256_storeu_ps((float *)(void *)(out + P8_M), _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)mh)));
    }
}

/* mt activation rows x the 8 packed rows over blocks [b0, b1): y[r][n .. n+8) (+)= ... */
P8_INL void P8_NM(p8_dot)(const int type, const int mt, const uint8_t *act, int64_t ab, int64_t nb, int64_t b0,
                          int64_t b1, const uint8_t *scr, int first, float *y, int64_t ldy) {
    const int off = type == T_Q8_0 ? (P8_VNNI ? 128 : 0) : q32_offset(type);
    __m256 acc[P8_MT];
    for (int r = 0; r < mt; r++)
        acc[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + r * ldy);
    const uint8_t *as = act + q32_act_s_off(nb), *ad = act + q32_act_d_off(nb);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *blk = scr + (b - b0) * P8_BLK;
        int64_t lo, hi;   /* where the block's values 0-15 and 16-31 sit in an activation row */
        if (type == T_Q8_0 || ((nb & 1) && b == nb - 1)) {
            lo = b * 32;
            hi = lo + 16;
        } else {
            lo = (b >> 1) * 64 + (b & 1) * 16;
            hi = lo + 32;
        }
        __m256i D[P8_MT];
        for (int r = 0; r < mt; r++)
            D[r] = _mm256_set1_epi32(-off * (int32_t)q32_ld32(as + r * ab + b * 4));
#if P8_VNNI
        for (int g = 0; g < 8; g++) {
            const __m256i W = _mm256_loadu_si256((const __m256i *)(const void *)(blk + g * 32));
            const int64_t qa = g < 4 ? lo + 4 * g : hi + 4 * (g - 4);
            for (int r = 0; r < mt; r++)
                D[r] = P8_DOT(D[r], W, _mm256_set1_epi32((int)q32_ld32(act + r * ab + qa)));
        }
#else
        /* vpmaddubsw's int16 pair sums of ch groups added as int16, then one vpmaddwd: a lane holds
         * 2*ch products of a code <= L and |q| <= 127, exact while 2*ch*L*127 <= 32767 (4-bit codes
         * L = 15: all 8 groups; 5-bit L = 31: 4; Q8_0's |w| <= 128: 1). The loop is bound by how many
         * instructions it issues: this drops a vpmaddwd and an add per group and row, for the same
         * int32 sums. */
        const int ch = type == T_Q8_0 ? 1 : q32_is5(type) ? 4 : 8;
        for (int g0 = 0; g0 < 8; g0 += ch) {
            __m256i s16[P8_MT];
            for (int r = 0; r < mt; r++) s16[r] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int g = g0; g < g0 + ch; g++) {
                const __m256i W = _mm256_loadu_si256((const __m256i *)(const void *)(blk + g * 32));
                const int64_t qa = g < 4 ? lo + 4 * g : hi + 4 * (g - 4);
                const __m256i S = type == T_Q8_0 ? _mm256_loadu_si256((const __m256i *)(const void *)(blk + P8_SIGN + g * 32))
                                                 : _mm256_setzero_si256();
                for (int r = 0; r < mt; r++) {
                    __m256i a = _mm256_set1_epi32((int)q32_ld32(act + r * ab + qa));
                    if (type == T_Q8_0)
                        a = _mm256_sign_epi8(a, S);
                    s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(W, a));
                }
            }
            for (int r = 0; r < mt; r++)
                D[r] = _mm256_add_epi32(D[r], _mm256_madd_epi16(s16[r], _mm256_set1_epi16(1)));
        }
#endif
        const __m256 dw = _mm256_loadu_ps((const float *)(const void *)(blk + P8_D));
        for (int r = 0; r < mt; r++) {
            const float da = q32_ldf(ad + r * ab + b * 4);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(D[r]), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[r]);
            if (q32_has_min(type)) {
                const int32_t s = (int32_t)q32_ld32(as + r * ab + b * 4);
                acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)(const void *)(blk + P8_M)),
                                         _mm256_set1_ps(da * (float)s), acc[r]);
            }
        }
    }
    for (int r = 0; r < mt; r++)
        _mm256_storeu_ps(y + r * ldy, acc[r]);
}

P8_INL int64_t P8_NM(p8_packed)(const int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t nb,
                                int64_t n0, int64_t n1, float *y, int64_t ldy) {
    __attribute__((aligned(32))) uint8_t scr[P8_SEG * P8_BLK];
    const int64_t rb = nb * q32_block_bytes(type), ab = q32_act_row_bytes(type, nb);
    int64_t n = n0;
    for (; n + P8_ROWS <= n1; n += P8_ROWS) {
        for (int64_t b0 = 0; b0 < nb; b0 += P8_SEG) {
            const int64_t b1 = nb - b0 < P8_SEG ? nb : b0 + P8_SEG;
            P8_NM(p8_pack)(type, w + n * rb, rb, b0, b1, scr);
            for (int64_t i = 0; i < m; i += P8_MT) {
                const int mt = m - i < P8_MT ? (int)(m - i) : P8_MT;
                const uint8_t *a = act + i * ab;
                float *yy = y + i * ldy + n;
                switch (mt) {
                case 1: P8_NM(p8_dot)(type, 1, a, ab, nb, b0, b1, scr, b0 == 0, yy, ldy); break;
                case 2: P8_NM(p8_dot)(type, 2, a, ab, nb, b0, b1, scr, b0 == 0, yy, ldy); break;
                case 3: P8_NM(p8_dot)(type, 3, a, ab, nb, b0, b1, scr, b0 == 0, yy, ldy); break;
                default: P8_NM(p8_dot)(type, P8_MT, a, ab, nb, b0, b1, scr, b0 == 0, yy, ldy); break;
                }
            }
        }
    }
    return n;
}

__attribute__((target(P8_TGT))) int64_t P8_NM(q32_packed)(int type, const uint8_t *act, int64_t m, const uint8_t *w,
                                                       int64_t nb, int64_t n0, int64_t n1, float *y, int64_t ldy) {
    switch (type) {
    case T_Q4_0: return P8_NM(p8_packed)(T_Q4_0, act, m, w, nb, n0, n1, y, ldy);
    case T_Q4_1: return P8_NM(p8_packed)(T_Q4_1, act, m, w, nb, n0, n1, y, ldy);
    case T_Q5_0: return P8_NM(p8_packed)(T_Q5_0, act, m, w, nb, n0, n1, y, ldy);
    case T_Q5_1: return P8_NM(p8_packed)(T_Q5_1, act, m, w, nb, n0, n1, y, ldy);
    default: return P8_NM(p8_packed)(T_Q8_0, act, m, w, nb, n0, n1, y, ldy);
    }
}

#undef P8_CAT2
#undef P8_CAT
#undef P8_NM
#undef P8_INL
