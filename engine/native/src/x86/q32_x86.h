/* The q32 family's SIMD tile kernel, written once and compiled per ISA: q32_x86.c includes this
 * file with SFX (name suffix), TGT (gcc/clang target string), DOT(acc, u8, s8) (int32 lanes +=
 * 4-byte dot products), DOT2(acc, u1, s1, u2, s2) (two DOTs, for 4/5-bit codes only) and BITS5(v, bits) (v + 16 where bit j of bits is set, byte j) defined,
 * and Q8_VNNI (1 when DOT takes full-range unsigned bytes: VNNI has no int16 saturation).
 * Layouts: q32_layout.h. 256-bit vectors: one pair of blocks is one [A lo|B lo] and one
 * [A hi|B hi] vector, which is how the activations of a pair are stored. */
#define Q32_CAT2(a, b) a##_##b
#define Q32_CAT(a, b) Q32_CAT2(a, b)
#define NM(x) Q32_CAT(x, SFX)
#define ATTR __attribute__((target(TGT)))
#define INL static inline __attribute__((always_inline, target(TGT)))

INL float NM(hsum)(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One pair of blocks (A, B = A + bs) of one weight row against mt activation rows. */
INL void NM(pair45)(const int type, const int mt, const uint8_t *A, const uint8_t *act, int64_t ab,
                    int64_t qoff, int64_t xoff, int64_t auxoff, __m256 *acc) {
    const int bs = q32_block_bytes(type), qo = q32_qs_off(type), ho = q32_qh_off(type);
    const uint8_t *B = A + bs;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i wab = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(A + qo))),
        _mm_loadu_si128((const __m128i *)(B + qo)), 1);
    __m256i lo = _mm256_and_si256(wab, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(wab, 4), m4);
    if (q32_is5(type)) {
        uint32_t hA = q32_ld32(A + ho), hB = q32_ld32(B + ho);
        lo = BITS5(lo, (hA & 0xFFFFu) | (hB << 16));
        hi = BITS5(hi, (hA >> 16) | (hB & 0xFFFF0000u));
    }
    __m256 dw, mw = _mm256_setzero_ps();
    if (q32_has_min(type)) {   /* {d, m} of A then of B: one 32-bit load each */
        __m128 v = _mm_cvtph_ps(_mm_set_epi32(0, 0, (int)q32_ld32(B), (int)q32_ld32(A)));
        dw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));
        mw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3));
    } else {
        __m128 v = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(q32_ld16(A) | ((uint32_t)q32_ld16(B) << 16))));
        dw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
    }
    for (int r = 0; r < mt; r++) {
        const uint8_t *a = act + r * ab;
        __m256i D = q32_has_min(type) ? _mm256_setzero_si256()
                                      : _mm256_loadu_si256((const __m256i *)(a + auxoff));
        D = DOT2(D, lo, _mm256_loadu_si256((const __m256i *)(a + qoff)),
                 hi, _mm256_loadu_si256((const __m256i *)(a + qoff + 32)));
        __m256 sc = _mm256_mul_ps(dw, _mm256_loadu_ps((const float *)(a + xoff)));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(D), sc, acc[r]);
        if (q32_has_min(type))
            acc[r] = _mm256_fmadd_ps(mw, _mm256_loadu_ps((const float *)(a + auxoff)), acc[r]);
    }
}

INL void NM(kq45)(const int type, const int mt, const uint8_t *act, int64_t ab, const uint8_t *w,
                  int64_t nb, int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy) {
    const int bs = q32_block_bytes(type), qo = q32_qs_off(type), ho = q32_qh_off(type);
    const int64_t np = (nb + 1) / 2, rb = nb * bs;
    const int64_t xsec = q32_act_x_off(nb), asec = xsec + np * 32;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *wr = w + n * rb;
        float tot[4];
        for (int r = 0; r < mt; r++) tot[r] = s0 > 0 ? y[r * ldy + n] : 0.f;
        for (int64_t sg = s0; sg < s1; sg++) {
            const int64_t b1 = Q32_SEG_END(sg, nb), pe = (b1 - (b1 == nb && (nb & 1))) / 2;
            __m256 acc0[4], acc1[4];
            for (int r = 0; r < mt; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
            int64_t p = sg * Q32_SEG / 2;
            /* two pairs a step into two accumulators (hides the FMA latency at m = 1); the same
             * for every tile height, so a row's result does not depend on the rows beside it */
            for (; p + 1 < pe; p += 2) {
                NM(pair45)(type, mt, wr + 2 * p * bs, act, ab, p * 64, xsec + p * 32, asec + p * 32, acc0);
                NM(pair45)(type, mt, wr + (2 * p + 2) * bs, act, ab, (p + 1) * 64, xsec + (p + 1) * 32,
                           asec + (p + 1) * 32, acc1);
            }
            for (; p < pe; p++)
                NM(pair45)(type, mt, wr + 2 * p * bs, act, ab, p * 64, xsec + p * 32, asec + p * 32, acc0);
            if (b1 == nb && (nb & 1)) {   /* the lone last block, natural order */
                const uint8_t *A = wr + (nb - 1) * bs;
                __m128i x = _mm_loadu_si128((const __m128i *)(A + qo));
                const __m128i m4 = _mm_set1_epi8(0x0F);
                __m256i wv = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
                if (q32_is5(type))
                    wv = BITS5(wv, q32_ld32(A + ho));
                __m256 dw = _mm256_set1_ps(_cvtsh_ss(q32_ld16(A)));
                __m256 mw = _mm256_set1_ps(q32_has_min(type) ? _cvtsh_ss(q32_ld16(A + 2)) : 0.f);
                for (int r = 0; r < mt; r++) {
                    const uint8_t *a = act + r * ab;
                    const int64_t xo = xsec + (np - 1) * 32, ao = asec + (np - 1) * 32;
                    __m256i D = q32_has_min(type) ? _mm256_setzero_si256()
                                                  : _mm256_loadu_si256((const __m256i *)(a + ao));
                    D = DOT(D, wv, _mm256_loadu_si256((const __m256i *)(a + (nb - 1) * 32)));
                    __m256 sc = _mm256_mul_ps(dw, _mm256_loadu_ps((const float *)(a + xo)));
                    acc0[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(D), sc, acc0[r]);
                    if (q32_has_min(type))
                        acc0[r] = _mm256_fmadd_ps(mw, _mm256_loadu_ps((const float *)(a + ao)), acc0[r]);
                }
            }
            for (int r = 0; r < mt; r++)
                tot[r] += NM(hsum)(_mm256_add_ps(acc0[r], acc1[r]));
        }
        for (int r = 0; r < mt; r++)
            y[r * ldy + n] = tot[r];
    }
}

/* One Q8_0 block of one weight row against mt activation rows. */
INL void NM(block8)(const int mt, const uint8_t *blk, const uint8_t *act, int64_t ab, int64_t b,
                    int64_t nb, __m256 *acc) {
    __m256i wv = _mm256_loadu_si256((const __m256i *)(blk + 2));
    float dw = _cvtsh_ss(q32_ld16(blk));
#if Q8_VNNI
    __m256i wu = _mm256_xor_si256(wv, _mm256_set1_epi8((char)0x80));   /* w + 128, unsigned */
#else
    __m256i wa = _mm256_sign_epi8(wv, wv);   /* |w|; the sign moves onto the activation */
#endif
    for (int r = 0; r < mt; r++) {
        const uint8_t *a = act + r * ab;
        __m256i av = _mm256_loadu_si256((const __m256i *)(a + b * 32));
#if Q8_VNNI
        __m256i D = _mm256_set1_epi32((int)q32_ld32(a + q32_act_x_off(nb) + b * 4));
        D = DOT(D, wu, av);
#else
        __m256i D = DOT(_mm256_setzero_si256(), wa, _mm256_sign_epi8(av, wv));
#endif
        __m256 sc = _mm256_set1_ps(dw * q32_ldf(a + q32_act_d_off(nb) + b * 4));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(D), sc, acc[r]);
    }
}

INL void NM(kq8)(const int mt, const uint8_t *act, int64_t ab, const uint8_t *w, int64_t nb,
                 int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy) {
    const int64_t rb = nb * 34;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *wr = w + n * rb;
        float tot[4];
        for (int r = 0; r < mt; r++) tot[r] = s0 > 0 ? y[r * ldy + n] : 0.f;
        for (int64_t sg = s0; sg < s1; sg++) {
            const int64_t b1 = Q32_SEG_END(sg, nb);
            __m256 acc0[4], acc1[4];
            for (int r = 0; r < mt; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
            int64_t b = sg * Q32_SEG;
            for (; b + 1 < b1; b += 2) {
                NM(block8)(mt, wr + b * 34, act, ab, b, nb, acc0);
                NM(block8)(mt, wr + (b + 1) * 34, act, ab, b + 1, nb, acc1);
            }
            if (b < b1)
                NM(block8)(mt, wr + b * 34, act, ab, b, nb, acc0);
            for (int r = 0; r < mt; r++)
                tot[r] += NM(hsum)(_mm256_add_ps(acc0[r], acc1[r]));
        }
        for (int r = 0; r < mt; r++)
            y[r * ldy + n] = tot[r];
    }
}

#define Q32_MT_CASES(CALL)                                                                   \
    switch (mt) {                                                                            \
    case 1: CALL(1); break;                                                                  \
    case 2: CALL(2); break;                                                                  \
    case 3: CALL(3); break;                                                                  \
    default: CALL(4); break;                                                                 \
    }

ATTR void NM(q32_tile)(int type, const uint8_t *act, int64_t ab, int mt, const uint8_t *w,
                       int64_t nb, int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y,
                       int64_t ldy) {
#define K45(T, M) NM(kq45)(T, M, act, ab, w, nb, n0, n1, s0, s1, y, ldy)
#define KQ40(M) K45(T_Q4_0, M)
#define KQ41(M) K45(T_Q4_1, M)
#define KQ50(M) K45(T_Q5_0, M)
#define KQ51(M) K45(T_Q5_1, M)
#define KQ80(M) NM(kq8)(M, act, ab, w, nb, n0, n1, s0, s1, y, ldy)
    if (mt > 4) {   /* 16 registers: at most 4 rows a pass */
        NM(q32_tile)(type, act, ab, 4, w, nb, n0, n1, s0, s1, y, ldy);
        NM(q32_tile)(type, act + 4 * ab, ab, mt - 4, w, nb, n0, n1, s0, s1, y + 4 * ldy, ldy);
        return;
    }
    switch (type) {
    case T_Q4_0: Q32_MT_CASES(KQ40) break;
    case T_Q4_1: Q32_MT_CASES(KQ41) break;
    case T_Q5_0: Q32_MT_CASES(KQ50) break;
    case T_Q5_1: Q32_MT_CASES(KQ51) break;
    default: Q32_MT_CASES(KQ80) break;
    }
#undef K45
#undef KQ40
#undef KQ41
#undef KQ50
#undef KQ51
#undef KQ80
}

#undef Q32_MT_CASES
#undef NM
#undef ATTR
#undef INL
