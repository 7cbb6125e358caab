/* The packed prefill kernel at AVX2 width (see qk_pack512.c for the idea), included once per ISA
 * by qk_pack256.c with:
 *   QK_TGT                the function attribute (target ISA)
 *   QK_SFX                the name suffix
 *   QK_I16                1 on AVX2 (vpmaddubsw int16 pairs; see the second p8_block_), 0 with
 *   QK_DPBUSD(acc, w, a)  acc + the 4-byte dot products of u8 w and s8 a per 32-bit lane (one
 *                         vpdpbusd with AVX-VNNI)
 * 8 weight rows a pack, one per 32-bit lane of a 256-bit register. */
#define QK_CAT2(a, b) a##b
#define QK_CAT(a, b) QK_CAT2(a, b)
#define QK_N(name) QK_CAT(name, QK_SFX)
#define QK_INL static inline __attribute__((always_inline)) QK_TGT

/* The 256 levels of one super-block as 8 registers of 32 values in order. */
QK_INL void QK_N(p8_levels_)(int type, const uint8_t *x, __m256i q[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (type == QK_Q6_K) {
        const __m256i m03 = _mm256_set1_epi8(0x03), m0c = _mm256_set1_epi8(0x0C),
                      m30 = _mm256_set1_epi8(0x30), mc0 = _mm256_set1_epi8((char)0xC0);
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x + 64 * h + 32));
            const __m256i hv = _mm256_loadu_si256((const __m256i *)(x + 128 + 32 * h));
            q[4 * h] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(hv, m03), 4));
            q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_slli_epi16(_mm256_and_si256(hv, m0c), 2));
            q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(hv, m30));
            q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                           _mm256_srli_epi16(_mm256_and_si256(hv, mc0), 2));
        }
        return;
    }
    const int five = type == QK_Q5_K;
    const uint8_t *qs = x + (five ? 48 : 16);
    const __m256i b1 = _mm256_set1_epi8(1), b2 = _mm256_set1_epi8(2);
    __m256i qhv = _mm256_loadu_si256((const __m256i *)(x + 16));
    for (int j = 0; j < 4; j++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (five) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qhv, b1), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(qhv, b2), 3));
            qhv = _mm256_srli_epi16(qhv, 2);
        }
        q[2 * j] = lo;
        q[2 * j + 1] = hi;
    }
}

/* 8x8 transpose of 32-bit elements: r[row] -> r[element]. */
QK_INL void QK_N(p8_transpose_)(__m256i r[8]) {
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

QK_INL __m128i QK_N(p8_scales_)(const uint8_t *p) {
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    const __m128i lo = _mm_and_si128(v, _mm_set1_epi32(0x3f3f3f3f));
    const __m128i u2 = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2));
    const __m128i s = _mm_and_si128(_mm_srlv_epi32(u2, _mm_setr_epi32(0, 4, 0, 4)), _mm_set1_epi32(0x0f0f0f0f));
    const __m128i r = _mm_and_si128(_mm_srli_epi32(v, 6), _mm_set1_epi32(0x03030303));
    return _mm_unpacklo_epi32(lo, _mm_or_si128(s, _mm_slli_epi32(r, 4)));
}

/* Packs super-block x[r] of each of the 8 rows. */
static QK_TGT void QK_N(p8_pack_)(int type, const uint8_t *const *x, struct pk8_sb *p) {
    __m256i q[P8R][8];
    for (int r = 0; r < P8R; r++) QK_N(p8_levels_)(type, x[r], q[r]);
    for (int c = 0; c < 8; c++) {   /* 32 values: groups 8c .. 8c+7 */
        __m256i t[P8R];
        for (int r = 0; r < P8R; r++) t[r] = q[r][c];
        QK_N(p8_transpose_)(t);
        for (int g = 0; g < 8; g++) _mm256_storeu_si256((__m256i *)p->lev[8 * c + g], t[g]);
    }
    __m256i s0[P8R], s1[P8R];
    float dh[P8R], dm[P8R];
    for (int r = 0; r < P8R; r++) {
        uint16_t h;
        __m128i b;
        if (type == QK_Q6_K) {
            b = _mm_loadu_si128((const __m128i *)(x[r] + 192));
            s0[r] = _mm256_cvtepi8_epi32(b);
            s1[r] = _mm256_cvtepi8_epi32(_mm_srli_si128(b, 8));
            memcpy(&h, x[r] + 208, 2);
            dh[r] = _cvtsh_ss(h);
        } else {
            b = QK_N(p8_scales_)(x[r] + 4);
            s0[r] = _mm256_cvtepu8_epi32(b);
            s1[r] = _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8));
            memcpy(&h, x[r], 2);
            dh[r] = _cvtsh_ss(h);
            memcpy(&h, x[r] + 2, 2);
            dm[r] = _cvtsh_ss(h);
        }
    }
    QK_N(p8_transpose_)(s0);
    QK_N(p8_transpose_)(s1);
    _mm256_storeu_ps(p->d, _mm256_loadu_ps(dh));
    _mm256_storeu_ps(p->dmin, type == QK_Q6_K ? _mm256_setzero_ps() : _mm256_loadu_ps(dm));   /* Q6_K: unused */
    for (int j = 0; j < 8; j++) {
#if QK_I16   /* int16 pairs for vpmaddwd: sc[j] = (sc_j, sc_j); mn[t] = (mn_t, mn_t) or Q6_K's (sc_2t, sc_2t+1) */
        const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
        if (type == QK_Q6_K) {
            _mm256_storeu_si256((__m256i *)p->sc[j], _mm256_or_si256(_mm256_and_si256(s0[j], lo16), _mm256_slli_epi32(s0[j], 16)));
            _mm256_storeu_si256((__m256i *)p->sc[8 + j], _mm256_or_si256(_mm256_and_si256(s1[j], lo16), _mm256_slli_epi32(s1[j], 16)));
            const __m256i *h = j < 4 ? s0 + 2 * j : s1 + 2 * j - 8;
            _mm256_storeu_si256((__m256i *)p->mn[j], _mm256_or_si256(_mm256_and_si256(h[0], lo16), _mm256_slli_epi32(h[1], 16)));
        } else {
            _mm256_storeu_si256((__m256i *)p->sc[j], _mm256_or_si256(s0[j], _mm256_slli_epi32(s0[j], 16)));
            _mm256_storeu_si256((__m256i *)p->mn[j], _mm256_or_si256(s1[j], _mm256_slli_epi32(s1[j], 16)));
        }
#else
        _mm256_storeu_si256((__m256i *)p->sc[j], s0[j]);
        if (type == QK_Q6_K)
            _mm256_storeu_si256((__m256i *)p->sc[8 + j], s1[j]);
        else
            _mm256_storeu_si256((__m256i *)p->mn[j], s1[j]);
#endif
    }
}

/* acc[i][0..7] += the super-block's dot of activation rows a[i] with the pack (exact int32 per
 * lane, then qk_tail45/qk_tail6's float operations lane by lane). */
#if !QK_I16
QK_INL void QK_N(p8_block_)(const struct pk8_sb *p, const uint8_t *const *a, const int mt, const int q6,
                            const int ch, float *acc) {
    (void)ch;
    const int ns = q6 ? 16 : 8, gps = q6 ? 4 : 8;
    __m256i isum[P8T];
    for (int i = 0; i < mt; i++) isum[i] = _mm256_setzero_si256();
    for (int j = 0; j < ns; j++) {
        __m256i isub[P8T];
        for (int i = 0; i < mt; i++) isub[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int g = j * gps; g < (j + 1) * gps; g++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)p->lev[g]);
#pragma GCC unroll 4
            for (int i = 0; i < mt; i++) {
                int32_t v;
                memcpy(&v, a[i] + Q8K_Q + 4 * g, 4);
                isub[i] = QK_DPBUSD(isub[i], w, _mm256_set1_epi32(v));
            }
        }
        const __m256i scv = _mm256_loadu_si256((const __m256i *)p->sc[j]);
        for (int i = 0; i < mt; i++) {
            if (q6) {   /* the -32 of every level: 32 * bsums[j] */
                int16_t bj;
                memcpy(&bj, a[i] + Q8K_BSUMS + 2 * j, 2);
                isub[i] = _mm256_sub_epi32(isub[i], _mm256_set1_epi32(32 * (int32_t)bj));
            }
            isum[i] = _mm256_add_epi32(isum[i], _mm256_mullo_epi32(isub[i], scv));
        }
    }
    const __m256 dv = _mm256_loadu_ps(p->d), dminv = _mm256_loadu_ps(p->dmin);
    for (int i = 0; i < mt; i++) {
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[i]), dv);
        if (!q6) {
            const __m256i bsp = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(a[i] + Q8K_BSUMS)),
                                                  _mm256_set1_epi16(1));
            __m256i msum = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++)
                msum = _mm256_add_epi32(msum, _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i *)p->mn[j]),
                                                                 _mm256_permutevar8x32_epi32(bsp, _mm256_set1_epi32(j))));
            t = _mm256_sub_ps(t, _mm256_mul_ps(_mm256_cvtepi32_ps(msum), dminv));
        }
        t = _mm256_mul_ps(t, _mm256_set1_ps(qk_act_d(a[i])));
        float *o = acc + (size_t)i * P8R;
        _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), t));
    }
}
#else
/* The same int32 sums on AVX2 in fewer instructions (the loop is bound by how many it issues):
 * vpmaddubsw's int16 pair sums of ch groups are added as int16, then one vpmaddwd against the
 * sub-block scale as an int16 pair widens and scales them at once (instead of a vpmaddwd by 1 and
 * an add per group and row, and a vpmulld per sub-block and row). A lane holds 2*ch products of
 * a level <= L and an activation |q| <= 127: exact while 2*ch*L*127 <= 32767 (Q4_K L = 15: ch = 8,
 * a whole sub-block; Q5_K L = 31: 4; Q6_K L = 63: 2).
 * The mins (Q4_K/Q5_K) and Q6_K's -32 offset are vpmaddwd's of bsum pairs against pairs of mins or
 * scales; integer sums in another order are the same integers, so the bits are the same. */
QK_INL void QK_N(p8_block_)(const struct pk8_sb *p, const uint8_t *const *a, const int mt, const int q6,
                            const int ch, float *acc) {
    const int ns = q6 ? 16 : 8, gps = q6 ? 4 : 8;
    __m256i isum[P8T];
    for (int i = 0; i < mt; i++) isum[i] = _mm256_setzero_si256();
    for (int j = 0; j < ns; j++) {
        const __m256i scv = _mm256_loadu_si256((const __m256i *)p->sc[j]);
        for (int g0 = j * gps; g0 < (j + 1) * gps; g0 += ch) {
            __m256i s16[P8T];
            for (int i = 0; i < mt; i++) s16[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int g = g0; g < g0 + ch; g++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)p->lev[g]);
#pragma GCC unroll 4
                for (int i = 0; i < mt; i++) {
                    int32_t v;
                    memcpy(&v, a[i] + Q8K_Q + 4 * g, 4);
                    s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(w, _mm256_set1_epi32(v)));
                }
            }
            for (int i = 0; i < mt; i++) isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s16[i], scv));
        }
    }
    __m256i corr[P8T];   /* sum over 16-value groups t of bsum_t times its min (Q4_K/Q5_K) or scale (Q6_K) */
    for (int i = 0; i < mt; i++) corr[i] = _mm256_setzero_si256();
    for (int t = 0; t < 8; t++) {
        const __m256i mv = _mm256_loadu_si256((const __m256i *)p->mn[t]);
        for (int i = 0; i < mt; i++) {
            int32_t v;
            memcpy(&v, a[i] + Q8K_BSUMS + 4 * t, 4);
            corr[i] = _mm256_add_epi32(corr[i], _mm256_madd_epi16(mv, _mm256_set1_epi32(v)));
        }
    }
    const __m256 dv = _mm256_loadu_ps(p->d), dminv = _mm256_loadu_ps(p->dmin);
    for (int i = 0; i < mt; i++) {
        __m256 t;
        if (q6) {   /* the -32 of every level */
            t = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum[i], _mm256_slli_epi32(corr[i], 5))), dv);
        } else {
            t = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[i]), dv);
            t = _mm256_sub_ps(t, _mm256_mul_ps(_mm256_cvtepi32_ps(corr[i]), dminv));
        }
        t = _mm256_mul_ps(t, _mm256_set1_ps(qk_act_d(a[i])));
        float *o = acc + (size_t)i * P8R;
        _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), t));
    }
}
#endif

/* p8_block_ with the type's constants: Q6_K, and on AVX2 each type's int16 groups (Q6_K 2, Q5_K 4, Q4_K 8). */
static QK_TGT void QK_N(p8_rows_)(const struct pk8_sb *p, int kc, const uint8_t *act, int64_t ab, int64_t b0,
                                  int mt, int type, float *acc) {
    const uint8_t *a[P8T];
    for (int b = 0; b < kc; b++) {
        for (int i = 0; i < mt; i++) a[i] = act + i * ab + (b0 + b) * Q8K_BYTES;
#define P8_TYPES(t)                                                                                 \
    if (type == QK_Q6_K) QK_N(p8_block_)(p + b, a, t, 1, 2, acc);                                   \
    else if (QK_I16 && type == QK_Q5_K) QK_N(p8_block_)(p + b, a, t, 0, 4, acc);                    \
    else QK_N(p8_block_)(p + b, a, t, 0, 8, acc);
        switch (mt) {
        case 1: P8_TYPES(1) break;
        case 2: P8_TYPES(2) break;
        case 3: P8_TYPES(3) break;
        default: P8_TYPES(P8T) break;
        }
#undef P8_TYPES
    }
}

QK_TGT int QK_N(qk_gemm_packed256_)(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                                    int64_t n0, int64_t tiles, float *y, int64_t ldy) {
    const int64_t nb = k / QK_BLOCK, rb = nb * qk_block_bytes(type), ab = nb * Q8K_BYTES;
    struct pk8_sb *pack = malloc(sizeof(struct pk8_sb) * P8KC);
    float *acc = malloc(sizeof(float) * P8R * (size_t)m);
    if (pack == NULL || acc == NULL) {
        free(pack);
        free(acc);
        return -1;
    }
    for (int64_t t = 0; t < tiles; t++) {
        const int64_t nt = n0 + t * P8R;
        memset(acc, 0, sizeof(float) * P8R * (size_t)m);
        for (int64_t b0 = 0; b0 < nb; b0 += P8KC) {
            const int kc = nb - b0 < P8KC ? (int)(nb - b0) : P8KC;
            for (int b = 0; b < kc; b++) {
                const uint8_t *x[P8R];
                for (int r = 0; r < P8R; r++) x[r] = w + (nt + r) * rb + (b0 + b) * qk_block_bytes(type);
                QK_N(p8_pack_)(type, x, pack + b);
            }
            for (int64_t i0 = 0; i0 < m; i0 += P8T) {
                const int mt = m - i0 < P8T ? (int)(m - i0) : P8T;
                QK_N(p8_rows_)(pack, kc, act + i0 * ab, ab, b0, mt, type, acc + i0 * P8R);
            }
        }
        for (int64_t i = 0; i < m; i++) memcpy(y + i * ldy + nt, acc + i * P8R, sizeof(float) * P8R);
    }
    free(pack);
    free(acc);
    return 0;
}

#undef QK_INL
#undef QK_N
#undef QK_CAT
#undef QK_CAT2
