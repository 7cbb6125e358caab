/* The AVX2-width K-quant kernels, included once per ISA by qk_avx2.c with:
 *   QK_TGT              the function attribute (target ISA)
 *   QK_SFX              the name suffix
 *   QK_DPWSSD(a, p, s)  a + madd_epi16(p, s): one vpdpwssd with VNNI, madd + add without
 * Per 32 values: maddubs (u8 levels x s8 activations -> i16 pairs; at most 2*63*128, no
 * saturation), then the sub-block's scale multiplies the pairs into int32 lanes. A weight
 * super-block is decoded once and dotted with up to QK_TILE activation rows. */
#define QK_CAT2(a, b) a##b
#define QK_CAT(a, b) QK_CAT2(a, b)
#define QK_N(name) QK_CAT(name, QK_SFX)
#define QK_INL static inline __attribute__((always_inline)) QK_TGT

QK_INL float QK_N(half_)(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Q4_K/Q5_K's 12 scale bytes (read as 16: the block goes on) -> bytes 0-7 six-bit scales, 8-15
 * six-bit mins, in registers (a byte array on the stack read back as a vector stalls the
 * store-to-load forwarding on every super-block). */
QK_INL __m128i QK_N(scales_)(const uint8_t *p) {
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    const __m128i lo = _mm_and_si128(v, _mm_set1_epi32(0x3f3f3f3f));     /* [sc 0-3, mins 0-3] */
    const __m128i u2 = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2));
    const __m128i s = _mm_and_si128(_mm_srlv_epi32(u2, _mm_setr_epi32(0, 4, 0, 4)), _mm_set1_epi32(0x0f0f0f0f));
    const __m128i r = _mm_and_si128(_mm_srli_epi32(v, 6), _mm_set1_epi32(0x03030303));
    const __m128i hi = _mm_or_si128(s, _mm_slli_epi32(r, 4));            /* [sc 4-7, mins 4-7] */
    return _mm_unpacklo_epi32(lo, hi);
}

/* Lane i = the exact int32 total of v[i], 4 registers of 8 lanes (a transpose-add tree). */
QK_INL __m128i QK_N(sum4x8_)(const __m256i v[4]) {
    const __m256i s0 = _mm256_add_epi32(_mm256_unpacklo_epi32(v[0], v[1]), _mm256_unpackhi_epi32(v[0], v[1]));
    const __m256i s1 = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2], v[3]), _mm256_unpackhi_epi32(v[2], v[3]));
    const __m256i t = _mm256_add_epi32(_mm256_unpacklo_epi64(s0, s1), _mm256_unpackhi_epi64(s0, s1));
    return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

QK_INL __m128 QK_N(da4_)(const uint8_t *act, int64_t ab, const int mt) {
    float f[4];
    for (int i = 0; i < 4; i++) f[i] = i < mt ? qk_act_d(act + i * ab) : 0.f;
    return _mm_setr_ps(f[0], f[1], f[2], f[3]);
}

QK_INL void QK_N(tile_q45k_)(const uint8_t *x, const uint8_t *act, int64_t ab, const int mt,
                             int64_t nb, const int five, float *out) {
    const int64_t xb = five ? Q5K_BYTES : Q4K_BYTES;
    const __m256i m4 = _mm256_set1_epi8(0x0F), b1 = _mm256_set1_epi8(1), b2 = _mm256_set1_epi8(2);
    const __m128i dupmins = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m128 acc = _mm_setzero_ps();   /* lane i: row i (QK_TILE = 4) */
    /* mt = 1: the totals of 4 consecutive super-blocks share one reduction tree, then are added
     * to the row's sum one by one, in order (the same float operations as every other path) */
    __m256i biv[4], bmv[4];
    float bd[4], bdm[4], bda[4], acc1 = 0.f;
    int nbat = 0;
    for (int64_t b = 0; b < nb; b++, x += xb, act += Q8K_BYTES) {
        _mm_prefetch((const char *)x + QK_PF * xb, _MM_HINT_T1);
        _mm_prefetch((const char *)x + QK_PF * xb + 64, _MM_HINT_T1);
        _mm_prefetch((const char *)x + QK_PF * xb + 128, _MM_HINT_T1);
        const __m128i sm = QK_N(scales_)(x + 4);
        const float d = QK_N(half_)(x), dmin = QK_N(half_)(x + 2);
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dupmins));
        /* the eight scales as int16, in both 128-bit halves: a byte shuffle broadcasts one */
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const uint8_t *qs = x + (five ? 48 : 16);
        __m256i qhv = five ? _mm256_loadu_si256((const __m256i *)(x + 16)) : _mm256_setzero_si256();
        __m256i isum[QK_TILE];
        for (int i = 0; i < mt; i++) isum[i] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if (five) {   /* bit 2j of qh[l] is value l's fifth bit, bit 2j+1 value 32+l's */
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qhv, b1), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(qhv, b2), 3));
                qhv = _mm256_srli_epi16(qhv, 2);
            }
            const __m256i slo = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0101 * (4 * j) + 0x0100)));
            const __m256i shi = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0101 * (4 * j + 2) + 0x0100)));
            for (int i = 0; i < mt; i++) {
                const uint8_t *a = act + i * ab + Q8K_Q + 64 * j;
                __m256i p = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)a));
                isum[i] = QK_DPWSSD(isum[i], p, slo);
                p = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(a + 32)));
                isum[i] = QK_DPWSSD(isum[i], p, shi);
            }
        }
        if (mt == 1) {
            biv[nbat] = isum[0];
            bmv[nbat] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(act + Q8K_BSUMS)), mins16);
            bd[nbat] = d;
            bdm[nbat] = dmin;
            bda[nbat] = qk_act_d(act);
            if (++nbat == 4 || b == nb - 1) {   /* qk_tail45 lane by lane, then in order */
                for (int c = nbat; c < 4; c++) {
                    biv[c] = bmv[c] = _mm256_setzero_si256();
                    bd[c] = bdm[c] = bda[c] = 0.f;
                }
                __m128 t = _mm_mul_ps(_mm_cvtepi32_ps(QK_N(sum4x8_)(biv)), _mm_loadu_ps(bd));
                const __m128 u = _mm_mul_ps(_mm_cvtepi32_ps(QK_N(sum4x8_)(bmv)), _mm_loadu_ps(bdm));
                t = _mm_sub_ps(t, u);
                t = _mm_mul_ps(t, _mm_loadu_ps(bda));
                float tt[4];
                _mm_storeu_ps(tt, t);
                for (int c = 0; c < nbat; c++) acc1 = acc1 + tt[c];
                nbat = 0;
            }
            continue;
        }
        __m256i iv[4], mv[4];
        for (int i = 0; i < 4; i++) {
            iv[i] = i < mt ? isum[i] : _mm256_setzero_si256();
            mv[i] = i < mt ? _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(act + i * ab + Q8K_BSUMS)), mins16)
                           : _mm256_setzero_si256();
        }
        /* qk_tail45 lane by lane */
        __m128 t = _mm_mul_ps(_mm_cvtepi32_ps(QK_N(sum4x8_)(iv)), _mm_set1_ps(d));
        const __m128 u = _mm_mul_ps(_mm_cvtepi32_ps(QK_N(sum4x8_)(mv)), _mm_set1_ps(dmin));
        t = _mm_sub_ps(t, u);
        t = _mm_mul_ps(t, QK_N(da4_)(act, ab, mt));
        acc = _mm_add_ps(acc, t);
    }
    if (mt == 1) {
        out[0] = acc1;
        return;
    }
    float o[4];
    _mm_storeu_ps(o, acc);
    for (int i = 0; i < mt; i++) out[i] = o[i];
}

QK_INL void QK_N(tile_q6k_)(const uint8_t *x, const uint8_t *act, int64_t ab, const int mt,
                            int64_t nb, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m03 = _mm256_set1_epi8(0x03),
                  m0c = _mm256_set1_epi8(0x0C), m30 = _mm256_set1_epi8(0x30),
                  mc0 = _mm256_set1_epi8((char)0xC0);
    __m128 acc = _mm_setzero_ps();   /* lane i: row i (QK_TILE = 4) */
    __m256i biv[4];   /* mt = 1: 4 super-blocks a reduction (see tile_q45k_) */
    float bd[4], bda[4], acc1 = 0.f;
    int nbat = 0;
    for (int64_t b = 0; b < nb; b++, x += Q6K_BYTES, act += Q8K_BYTES) {
        _mm_prefetch((const char *)x + QK_PF * Q6K_BYTES, _MM_HINT_T1);
        _mm_prefetch((const char *)x + QK_PF * Q6K_BYTES + 64, _MM_HINT_T1);
        _mm_prefetch((const char *)x + QK_PF * Q6K_BYTES + 128, _MM_HINT_T1);
        _mm_prefetch((const char *)x + QK_PF * Q6K_BYTES + 192, _MM_HINT_T1);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)(x + 192));
        const __m256i s16 = _mm256_cvtepi8_epi16(sc8);
        const float d = QK_N(half_)(x + 208);
        __m256i isum[QK_TILE];
        for (int i = 0; i < mt; i++) isum[i] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x + 64 * h + 32));
            const __m256i hv = _mm256_loadu_si256((const __m256i *)(x + 128 + 32 * h));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(hv, m03), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_slli_epi16(_mm256_and_si256(hv, m0c), 2));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(hv, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_srli_epi16(_mm256_and_si256(hv, mc0), 2));
            for (int g = 0; g < 4; g++) {
                const __m128i pat = _mm_loadu_si128((const __m128i *)QK_Q6_SCALE_PAT[4 * h + g]);
                const __m256i scv = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pat));
                for (int i = 0; i < mt; i++) {
                    const uint8_t *a = act + i * ab + Q8K_Q + 128 * h + 32 * g;
                    const __m256i p = _mm256_maddubs_epi16(q[g], _mm256_loadu_si256((const __m256i *)a));
                    isum[i] = QK_DPWSSD(isum[i], p, scv);
                }
            }
        }
        if (mt == 1) {
            const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(act + Q8K_BSUMS)), s16);
            biv[nbat] = _mm256_sub_epi32(isum[0], _mm256_slli_epi32(off, 5));
            bd[nbat] = d;
            bda[nbat] = qk_act_d(act);
            if (++nbat == 4 || b == nb - 1) {   /* qk_tail6 lane by lane, then in order */
                for (int c = nbat; c < 4; c++) {
                    biv[c] = _mm256_setzero_si256();
                    bd[c] = bda[c] = 0.f;
                }
                __m128 t = _mm_mul_ps(_mm_cvtepi32_ps(QK_N(sum4x8_)(biv)), _mm_loadu_ps(bd));
                t = _mm_mul_ps(t, _mm_loadu_ps(bda));
                float tt[4];
                _mm_storeu_ps(tt, t);
                for (int c = 0; c < nbat; c++) acc1 = acc1 + tt[c];
                nbat = 0;
            }
            continue;
        }
        __m256i iv[4];
        for (int i = 0; i < 4; i++) {
            if (i < mt) {   /* the -32 of every level */
                const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(act + i * ab + Q8K_BSUMS)), s16);
                iv[i] = _mm256_sub_epi32(isum[i], _mm256_slli_epi32(off, 5));
            } else {
                iv[i] = _mm256_setzero_si256();
            }
        }
        /* qk_tail6 lane by lane */
        __m128 t = _mm_mul_ps(_mm_cvtepi32_ps(QK_N(sum4x8_)(iv)), _mm_set1_ps(d));
        t = _mm_mul_ps(t, QK_N(da4_)(act, ab, mt));
        acc = _mm_add_ps(acc, t);
    }
    if (mt == 1) {
        out[0] = acc1;
        return;
    }
    float o[4];
    _mm_storeu_ps(o, acc);
    for (int i = 0; i < mt; i++) out[i] = o[i];
}

/* m = 1 (decode) over rows [n0, n1): the rows' super-blocks as one stream, 4 a reduction whatever
 * K is, each block's float tail added to its own row's sum in order: the same float operations as
 * tile_q45k_ / tile_q6k_ at mt = 1 (same bits), without a padded last batch a row (see qk_avx512.c). */
QK_INL void QK_N(rows1_)(const int type, const uint8_t *w, const uint8_t *act, int64_t nb, int64_t n0,
                         int64_t n1, float *y) {
    const int six = type == QK_Q6_K, five = type == QK_Q5_K;
    const int64_t xb = six ? Q6K_BYTES : (five ? Q5K_BYTES : Q4K_BYTES);
    const __m256i m4 = _mm256_set1_epi8(0x0F), b1 = _mm256_set1_epi8(1), b2 = _mm256_set1_epi8(2);
    const __m256i m03 = _mm256_set1_epi8(0x03), m0c = _mm256_set1_epi8(0x0C), m30 = _mm256_set1_epi8(0x30),
                  mc0 = _mm256_set1_epi8((char)0xC0);
    const __m128i dupmins = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m256i biv[4], bmv[4];
    float bd[4], bdm[4], bda[4], acc = 0.f;
    int nbat = 0;
    int64_t row = n0, fb = 0;   /* the row, and its block, that the next flushed slot belongs to */
    const uint8_t *x = w + n0 * nb * xb;
    const int64_t total = (n1 - n0) * nb;
    for (int64_t g = 0, b = 0; g < total; g++, x += xb) {
        const uint8_t *a = act + b * Q8K_BYTES;
        _mm_prefetch((const char *)x + QK_PF * xb, _MM_HINT_T1);
        _mm_prefetch((const char *)x + QK_PF * xb + 64, _MM_HINT_T1);
        _mm_prefetch((const char *)x + QK_PF * xb + 128, _MM_HINT_T1);
        __m256i isum = _mm256_setzero_si256();
        if (six) {
            _mm_prefetch((const char *)x + QK_PF * Q6K_BYTES + 192, _MM_HINT_T1);
            const __m128i sc8 = _mm_loadu_si128((const __m128i *)(x + 192));
            const __m256i s16 = _mm256_cvtepi8_epi16(sc8);
            for (int h = 0; h < 2; h++) {
                const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x + 64 * h));
                const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x + 64 * h + 32));
                const __m256i hv = _mm256_loadu_si256((const __m256i *)(x + 128 + 32 * h));
                __m256i q[4];
                q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(hv, m03), 4));
                q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_slli_epi16(_mm256_and_si256(hv, m0c), 2));
                q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(hv, m30));
                q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                       _mm256_srli_epi16(_mm256_and_si256(hv, mc0), 2));
                for (int gg = 0; gg < 4; gg++) {
                    const __m128i pat = _mm_loadu_si128((const __m128i *)QK_Q6_SCALE_PAT[4 * h + gg]);
                    const __m256i scv = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pat));
                    const __m256i p = _mm256_maddubs_epi16(q[gg], _mm256_loadu_si256((const __m256i *)(a + Q8K_Q + 128 * h + 32 * gg)));
                    isum = QK_DPWSSD(isum, p, scv);
                }
            }
            const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(a + Q8K_BSUMS)), s16);
            biv[nbat] = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 5));
            bd[nbat] = QK_N(half_)(x + 208);
        } else {
            const __m128i sm = QK_N(scales_)(x + 4);
            const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dupmins));
            const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
            const uint8_t *qs = x + (five ? 48 : 16);
            __m256i qhv = five ? _mm256_loadu_si256((const __m256i *)(x + 16)) : _mm256_setzero_si256();
            for (int j = 0; j < 4; j++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
                __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                if (five) {   /* as in tile_q45k_ */
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qhv, b1), 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(qhv, b2), 3));
                    qhv = _mm256_srli_epi16(qhv, 2);
                }
                const __m256i slo = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0101 * (4 * j) + 0x0100)));
                const __m256i shi = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0101 * (4 * j + 2) + 0x0100)));
                const uint8_t *aj = a + Q8K_Q + 64 * j;
                __m256i p = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)aj));
                isum = QK_DPWSSD(isum, p, slo);
                p = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(aj + 32)));
                isum = QK_DPWSSD(isum, p, shi);
            }
            biv[nbat] = isum;
            bmv[nbat] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(a + Q8K_BSUMS)), mins16);
            bd[nbat] = QK_N(half_)(x);
            bdm[nbat] = QK_N(half_)(x + 2);
        }
        bda[nbat] = qk_act_d(a);
        if (++b == nb)
            b = 0;
        if (++nbat == 4 || g == total - 1) {   /* the tail lane by lane, then each row's sum in order */
            for (int c = nbat; c < 4; c++) {
                biv[c] = bmv[c] = _mm256_setzero_si256();
                bd[c] = bdm[c] = bda[c] = 0.f;
            }
            __m128 t = _mm_mul_ps(_mm_cvtepi32_ps(QK_N(sum4x8_)(biv)), _mm_loadu_ps(bd));
            if (!six) {
                const __m128 u = _mm_mul_ps(_mm_cvtepi32_ps(QK_N(sum4x8_)(bmv)), _mm_loadu_ps(bdm));
                t = _mm_sub_ps(t, u);
            }
            t = _mm_mul_ps(t, _mm_loadu_ps(bda));
            float tt[4];
            _mm_storeu_ps(tt, t);
            for (int c = 0; c < nbat; c++) {
                acc = acc + tt[c];
                if (++fb == nb) {
                    y[row++] = acc;
                    acc = 0.f;
                    fb = 0;
                }
            }
            nbat = 0;
        }
    }
}

/* One weight row against mt activation rows, mt a constant in each specialised copy. */
static QK_TGT void QK_N(tile_)(int type, const uint8_t *x, const uint8_t *a, int64_t ab, int mt,
                               int64_t nb, float *out) {
#define QK_CASES(call_mt)                                                         \
    switch (mt) {                                                                 \
    case 1: call_mt(1); break;                                                    \
    case 2: call_mt(2); break;                                                    \
    case 3: call_mt(3); break;                                                    \
    default: call_mt(4); break;                                                   \
    }
#define QK_C6(t) QK_N(tile_q6k_)(x, a, ab, t, nb, out)
#define QK_C5(t) QK_N(tile_q45k_)(x, a, ab, t, nb, 1, out)
#define QK_C4(t) QK_N(tile_q45k_)(x, a, ab, t, nb, 0, out)
    if (type == QK_Q6_K) {
        QK_CASES(QK_C6)
    } else if (type == QK_Q5_K) {
        QK_CASES(QK_C5)
    } else {
        QK_CASES(QK_C4)
    }
#undef QK_C6
#undef QK_C5
#undef QK_C4
#undef QK_CASES
}

QK_TGT void QK_N(qk_gemm_)(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                           int64_t n0, int64_t n1, float *y, int64_t ldy) {
    if (m >= (type == QK_Q6_K ? QK_PACK256_MIN_Q6 : QK_PACK256_MIN) && n1 - n0 >= 8) {
        const int64_t tiles = (n1 - n0) / 8;
        if (QK_N(qk_gemm_packed256_)(type, act, m, w, k, n0, tiles, y, ldy) == 0)
            n0 += tiles * 8;   /* the rest (< 8 rows) below */
    }
    const int64_t nb = k / QK_BLOCK, rb = nb * qk_block_bytes(type), ab = nb * Q8K_BYTES;
    if (m == 1) {   /* decode: the rows' blocks as one stream */
        if (n1 <= n0)
            return;
        if (type == QK_Q6_K)   /* constant types: each inlined copy is specialised */
            QK_N(rows1_)(QK_Q6_K, w, act, nb, n0, n1, y);
        else if (type == QK_Q5_K)
            QK_N(rows1_)(QK_Q5_K, w, act, nb, n0, n1, y);
        else
            QK_N(rows1_)(QK_Q4_K, w, act, nb, n0, n1, y);
        return;
    }
    float out[QK_TILE];
    /* m > 1: a block of weight rows stays in cache while every activation tile passes over it */
    for (int64_t nblk = n0; nblk < n1; nblk += QK_ROW_BLOCK) {
        const int64_t nend = n1 - nblk < QK_ROW_BLOCK ? n1 : nblk + QK_ROW_BLOCK;
        for (int64_t i0 = 0; i0 < m; i0 += QK_TILE) {
            const int mt = m - i0 < QK_TILE ? (int)(m - i0) : QK_TILE;
            for (int64_t n = nblk; n < nend; n++) {
                QK_N(tile_)(type, w + n * rb, act + i0 * ab, ab, mt, nb, out);
                for (int i = 0; i < mt; i++) y[(i0 + i) * ldy + n] = out[i];
            }
        }
    }
}

#undef QK_INL
#undef QK_N
#undef QK_CAT
#undef QK_CAT2
