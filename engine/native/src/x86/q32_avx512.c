/* The q32 family's AVX512-VNNI path (+VL, BW): 512-bit vpdpbusd, one pair of blocks (64 values)
 * an instruction, up to 8 activation rows a tile (32 vector registers hold 16 accumulators).
 * Same numerics and layouts as q32_x86.h (q32_layout.h); the 5th bits come from mask registers. */
#include <stdint.h>

#include "q32_layout.h"
#include "q32_tile.h"

#if Q32_HAVE_X86
#include <immintrin.h>

#define TGT512 "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"
#define INL static inline __attribute__((always_inline, target(TGT512)))

/* 256-bit float load broadcast to both halves (vbroadcastf64x4: AVX512F, no DQ needed). */
INL __m512 bcast256(const uint8_t *p) {
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)(const void *)p)));
}

/* _mm512_reduce_add_ps's tree as GCC's header spells it (halves, quarters, then pairs), written out so
 * the transposed form below gives each row the same bits whatever the compiler's own tree is. */
INL float hsum512(__m512 v) {
    __m256 t3 = _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)),
                              _mm512_castps512_ps256(v));
    __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_add_ss(t8, _mm_movehdup_ps(t8)));
}

/* hsum512 of four vectors at once, {hsum(v0), hsum(v1), hsum(v2), hsum(v3)}: the same additions of
 * the same lanes, done for four rows per instruction (decode ends every short row with one). */
INL __m128 hsum512x4(__m512 v0, __m512 v1, __m512 v2, __m512 v3) {
    __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0xEE), _mm512_shuffle_f32x4(v0, v1, 0x44));
    __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, 0xEE), _mm512_shuffle_f32x4(v2, v3, 0x44));
    /* lane i of u: quarter-sums of row i */
    __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0xDD), _mm512_shuffle_f32x4(s01, s23, 0x88));
    u = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(1, 0, 3, 2)));
    u = _mm512_add_ps(u, _mm512_movehdup_ps(u));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), u));
}

/* A pair's codes of one weight row: zmm = A lo|B lo|A hi|B hi (B = A + bs); its d (and m) per lane. */
INL __m512i codes512(const int type, const uint8_t *A, __m512 *dw, __m512 *mw) {
    const int bs = q32_block_bytes(type), qo = q32_qs_off(type), ho = q32_qh_off(type);
    const uint8_t *B = A + bs;
    __m256i wab = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(A + qo))),
        _mm_loadu_si128((const __m128i *)(B + qo)), 1);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(wab), _mm256_srli_epi16(wab, 4), 1);
    z = _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
    if (q32_is5(type)) {
        uint32_t hA = q32_ld32(A + ho), hB = q32_ld32(B + ho);
        uint64_t bits = (uint64_t)((hA & 0xFFFFu) | (hB << 16)) |
                        ((uint64_t)((hA >> 16) | (hB & 0xFFFF0000u)) << 32);
        z = _mm512_mask_add_epi8(z, (__mmask64)bits, z, _mm512_set1_epi8(0x10));
    }
    if (q32_has_min(type)) {   /* {d, m} of A then of B: one 32-bit load each */
        __m128 v = _mm_cvtph_ps(_mm_set_epi32(0, 0, (int)q32_ld32(B), (int)q32_ld32(A)));
        *dw = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0, 2, 2, 2, 2),
                                    _mm512_castps128_ps512(v));
        *mw = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 1, 1, 1, 1, 3, 3, 3, 3),
                                    _mm512_castps128_ps512(v));
    } else {
        __m128 v = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(q32_ld16(A) | ((uint32_t)q32_ld16(B) << 16))));
        *dw = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1),
                                    _mm512_castps128_ps512(v));
        *mw = _mm512_setzero_ps();
    }
    return z;
}

/* One pair of blocks of nw weight rows (nw <= 4, `rb` bytes apart) against mt activation rows: each
 * activation vector is loaded once for both weight rows. acc[j * Q32_MT + r]. */
INL void pair512(const int type, const int mt, const int nw, const uint8_t *A, int64_t rb,
                 const uint8_t *act, int64_t ab, int64_t qoff, int64_t xoff, int64_t auxoff,
                 __m512 *acc) {
    __m512i z[4];
    __m512 dw[4], mw[4];
    for (int j = 0; j < nw; j++) {
        /* several rows read side by side defeat the hardware prefetcher when W streams from
         * memory (measured: 4 rows a step 1.5x slower than 1 without this); 1.5 KiB ahead in
         * each row's stream is what the next steps read */
        _mm_prefetch((const char *)(A + j * rb + 1536), _MM_HINT_T0);
        z[j] = codes512(type, A + j * rb, &dw[j], &mw[j]);
    }
    for (int r = 0; r < mt; r++) {
        const uint8_t *a = act + r * ab;
        /* the bias (or the min's term) belongs to the low half only: 4 lanes a block */
        __m512i bias = q32_has_min(type) ? _mm512_setzero_si512()
                                         : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(a + auxoff)));
        __m512i q = _mm512_loadu_si512((const void *)(a + qoff));
        __m512 da = bcast256(a + xoff);
        __m512 aux = q32_has_min(type) ? _mm512_zextps256_ps512(_mm256_loadu_ps((const float *)(a + auxoff)))
                                       : _mm512_setzero_ps();
        for (int j = 0; j < nw; j++) {
            __m512i D = _mm512_dpbusd_epi32(bias, z[j], q);
            __m512 *c = &acc[j * Q32_MT + r];
            *c = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D), _mm512_mul_ps(dw[j], da), *c);
            if (q32_has_min(type))
                *c = _mm512_fmadd_ps(mw[j], aux, *c);
        }
    }
}

/* Weight rows n and n + nstep (nw of them) over the segments [s0, s1): one accumulator per (weight row,
 * activation row), pairs in order, then the lone block; the same for every mt and nw. */
INL void rows45_512(const int type, const int mt, const int nw, const uint8_t *act, int64_t ab,
                    const uint8_t *w, int64_t nb, int64_t n, int64_t nstep, int64_t s0, int64_t s1,
                    float *y, int64_t ldy) {
    const int bs = q32_block_bytes(type), qo = q32_qs_off(type), ho = q32_qh_off(type);
    const int64_t np = (nb + 1) / 2, rb = nb * bs, rs = nstep * rb;
    const int64_t xsec = q32_act_x_off(nb), asec = xsec + np * 32;
    const uint8_t *wr = w + n * rb;
    float tot[4 * Q32_MT];
    for (int j = 0; j < nw; j++)
        for (int r = 0; r < mt; r++) tot[j * Q32_MT + r] = s0 > 0 ? y[r * ldy + n + j * nstep] : 0.f;
    for (int64_t sg = s0; sg < s1; sg++) {
        const int64_t b1 = Q32_SEG_END(sg, nb), pe = (b1 - (b1 == nb && (nb & 1))) / 2;
        __m512 acc[4 * Q32_MT];
        for (int j = 0; j < nw; j++)
            for (int r = 0; r < mt; r++) acc[j * Q32_MT + r] = _mm512_setzero_ps();
        for (int64_t p = sg * Q32_SEG / 2; p < pe; p++)
            pair512(type, mt, nw, wr + 2 * p * bs, rs, act, ab, p * 64, xsec + p * 32, asec + p * 32, acc);
        if (b1 == nb && (nb & 1)) {   /* the lone last block, natural order, 256-bit */
            const int64_t xo = xsec + (np - 1) * 32, ao = asec + (np - 1) * 32;
            for (int j = 0; j < nw; j++) {
                const uint8_t *A = wr + j * rs + (nb - 1) * bs;
                __m128i x = _mm_loadu_si128((const __m128i *)(A + qo));
                const __m128i m4 = _mm_set1_epi8(0x0F);
                __m256i wv = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
                if (q32_is5(type))
                    wv = _mm256_mask_add_epi8(wv, (__mmask32)q32_ld32(A + ho), wv, _mm256_set1_epi8(0x10));
                __m256 dw = _mm256_set1_ps(_cvtsh_ss(q32_ld16(A)));
                __m256 mw = _mm256_set1_ps(q32_has_min(type) ? _cvtsh_ss(q32_ld16(A + 2)) : 0.f);
                for (int r = 0; r < mt; r++) {
                    const uint8_t *a = act + r * ab;
                    __m256i D = q32_has_min(type) ? _mm256_setzero_si256()
                                                  : _mm256_loadu_si256((const __m256i *)(a + ao));
                    D = _mm256_dpbusd_epi32(D, wv, _mm256_loadu_si256((const __m256i *)(a + (nb - 1) * 32)));
                    __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(D), _mm256_mul_ps(dw, _mm256_loadu_ps((const float *)(a + xo))));
                    if (q32_has_min(type))
                        t = _mm256_fmadd_ps(mw, _mm256_loadu_ps((const float *)(a + ao)), t);
                    acc[j * Q32_MT + r] = _mm512_add_ps(acc[j * Q32_MT + r], _mm512_zextps256_ps512(t));
                }
            }
        }
        if (mt == 1 && nw == 4) {
            __m128 h = hsum512x4(acc[0], acc[Q32_MT], acc[2 * Q32_MT], acc[3 * Q32_MT]);
            float hs[4];
            _mm_storeu_ps(hs, h);
            for (int j = 0; j < 4; j++) tot[j * Q32_MT] += hs[j];
        } else {
            for (int j = 0; j < nw; j++)
                for (int r = 0; r < mt; r++)
                    tot[j * Q32_MT + r] += hsum512(acc[j * Q32_MT + r]);
        }
    }
    for (int j = 0; j < nw; j++)
        for (int r = 0; r < mt; r++) y[r * ldy + n + j * nstep] = tot[j * Q32_MT + r];
}

/* Decode (one activation row): pair512 for four weight rows `rs` bytes apart. The four rows' block
 * scales (d and m of A and B: 16 halves) are gathered by two vpermt2w into one vector, widened once
 * and multiplied by the activation's d once; each row then takes its lanes with one permute (two
 * with a min). Per row the same integers, products and fused adds as pair512, so the same bits. */
INL void pair512_m1x4(const int type, const uint8_t *A, int64_t rs, const uint8_t *a, int64_t qoff,
                      int64_t xoff, int64_t auxoff, __m512 *acc) {
    const int bs = q32_block_bytes(type), hb = bs / 2;   /* B's d (and m) in 16-bit words from A */
    __m512i z[4];
    __m256i sw[4];
    for (int j = 0; j < 4; j++) {
        const uint8_t *Aj = A + j * rs;
        _mm_prefetch((const char *)(Aj + 1536), _MM_HINT_T0);   /* as pair512 */
        __m512 dw_unused, mw_unused;
        z[j] = codes512(type, Aj, &dw_unused, &mw_unused);
        sw[j] = _mm256_loadu_si256((const __m256i *)(const void *)Aj);   /* a pair is >= 36 bytes */
    }
    /* words 4j..4j+3 = {dA, mA, dB, mB} of row j (mA, mB: whatever follows d without a min) */
    const __m256i i01 = _mm256_setr_epi16(0, 1, (short)hb, (short)(hb + 1), 16, 17, (short)(16 + hb), (short)(17 + hb),
                                          0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i i23 = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 1, (short)hb, (short)(hb + 1), 16, 17,
                                          (short)(16 + hb), (short)(17 + hb));
    const __m256i h16 = _mm256_mask_mov_epi16(_mm256_permutex2var_epi16(sw[0], i01, sw[1]), (__mmask16)0xFF00,
                                              _mm256_permutex2var_epi16(sw[2], i23, sw[3]));
    const __m512 v = _mm512_cvtph_ps(h16);
    /* the activation's d of A and B ({dA x4, dB x4}) at lanes 4j and 4j+2 */
    const __m512 dexp = _mm512_castps256_ps512(_mm256_loadu_ps((const float *)(a + xoff)));
    const __m512 prod = _mm512_mul_ps(v, _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4), dexp));
    const __m512i q = _mm512_loadu_si512((const void *)(a + qoff));
    const __m512i bias = q32_has_min(type) ? _mm512_setzero_si512()
                                           : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(a + auxoff)));
    const __m512 aux = q32_has_min(type) ? _mm512_zextps256_ps512(_mm256_loadu_ps((const float *)(a + auxoff)))
                                         : _mm512_setzero_ps();
    for (int j = 0; j < 4; j++) {
        const int e = 4 * j;
        const __m512 sc = _mm512_permutexvar_ps(
            _mm512_setr_epi32(e, e, e, e, e + 2, e + 2, e + 2, e + 2, e, e, e, e, e + 2, e + 2, e + 2, e + 2), prod);
        __m512i D = _mm512_dpbusd_epi32(bias, z[j], q);
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D), sc, acc[j]);
        if (q32_has_min(type)) {
            const __m512 mw = _mm512_permutexvar_ps(
                _mm512_setr_epi32(e + 1, e + 1, e + 1, e + 1, e + 3, e + 3, e + 3, e + 3, e + 1, e + 1, e + 1, e + 1,
                                  e + 3, e + 3, e + 3, e + 3), v);
            acc[j] = _mm512_fmadd_ps(mw, aux, acc[j]);
        }
    }
}

/* Decode: rows45_512 at mt = 1, nw = 4 with pair512_m1x4 and one reduction for the four rows. */
INL void rows45_m1x4(const int type, const uint8_t *act, const uint8_t *w, int64_t nb, int64_t n, int64_t nstep,
                     int64_t s0, int64_t s1, float *y) {
    const int bs = q32_block_bytes(type), qo = q32_qs_off(type), ho = q32_qh_off(type);
    const int64_t np = (nb + 1) / 2, rb = nb * bs, rs = nstep * rb;
    const int64_t xsec = q32_act_x_off(nb), asec = xsec + np * 32;
    const uint8_t *wr = w + n * rb;
    __m128 tot = s0 > 0 ? _mm_setr_ps(y[n], y[n + nstep], y[n + 2 * nstep], y[n + 3 * nstep]) : _mm_setzero_ps();
    for (int64_t sg = s0; sg < s1; sg++) {
        const int64_t b1 = Q32_SEG_END(sg, nb), pe = (b1 - (b1 == nb && (nb & 1))) / 2;
        __m512 acc[4];
        for (int j = 0; j < 4; j++) acc[j] = _mm512_setzero_ps();
        for (int64_t p = sg * Q32_SEG / 2; p < pe; p++)
            pair512_m1x4(type, wr + 2 * p * bs, rs, act, p * 64, xsec + p * 32, asec + p * 32, acc);
        if (b1 == nb && (nb & 1)) {   /* the lone last block: rows45_512's code */
            const int64_t xo = xsec + (np - 1) * 32, ao = asec + (np - 1) * 32;
            for (int j = 0; j < 4; j++) {
                const uint8_t *A = wr + j * rs + (nb - 1) * bs;
                __m128i x = _mm_loadu_si128((const __m128i *)(A + qo));
                const __m128i m4 = _mm_set1_epi8(0x0F);
                __m256i wv = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
                if (q32_is5(type))
                    wv = _mm256_mask_add_epi8(wv, (__mmask32)q32_ld32(A + ho), wv, _mm256_set1_epi8(0x10));
                __m256 dw = _mm256_set1_ps(_cvtsh_ss(q32_ld16(A)));
                __m256 mw = _mm256_set1_ps(q32_has_min(type) ? _cvtsh_ss(q32_ld16(A + 2)) : 0.f);
                __m256i D = q32_has_min(type) ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(act + ao));
                D = _mm256_dpbusd_epi32(D, wv, _mm256_loadu_si256((const __m256i *)(act + (nb - 1) * 32)));
                __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(D), _mm256_mul_ps(dw, _mm256_loadu_ps((const float *)(act + xo))));
                if (q32_has_min(type))
                    t = _mm256_fmadd_ps(mw, _mm256_loadu_ps((const float *)(act + ao)), t);
                acc[j] = _mm512_add_ps(acc[j], _mm512_zextps256_ps512(t));
            }
        }
        tot = _mm_add_ps(tot, hsum512x4(acc[0], acc[1], acc[2], acc[3]));
    }
    float t[4];
    _mm_storeu_ps(t, tot);
    for (int j = 0; j < 4; j++) y[n + j * nstep] = t[j];
}

INL void kq45_512(const int type, const int mt, const uint8_t *act, int64_t ab, const uint8_t *w,
                  int64_t nb, int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy) {
    /* two weight rows a step (16 accumulators at mt = 8), row n with row n + h: two rows far
     * apart are two sequential streams the hardware prefetcher follows (adjacent rows read side
     * by side interleave inside one page, which it does not) */
    int64_t n = n0;
    /* mt <= 2 (without a min: mt <= 4): four weight rows a step (n + j*q), four dependency chains
     * a row and each activation vector loaded once for four weight rows; the rows stay a quarter of
     * the tile apart. At mt = 3..4 that is 12-16 accumulators: Q4_0 ran 1.07-1.17x faster than
     * two rows a step; with a min's registers as well (Q4_1), 0.94-0.97x, so those keep two. */
    const int64_t q = (n1 - n0) / 4;
    if (mt <= (q32_has_min(type) ? 2 : 4) && q > 0 && q * nb * q32_block_bytes(type) >= 1024) {
        for (; n < n0 + q; n++) {
            if (mt == 1)
                rows45_m1x4(type, act, w, nb, n, q, s0, s1, y);
            else
                rows45_512(type, mt, 4, act, ab, w, nb, n, q, s0, s1, y, ldy);
        }
        n = n0 + 4 * q;
    }
    const int64_t h = (n1 - n) / 2;
    if (h * nb * q32_block_bytes(type) >= 4096) {   /* else: one row at a time (same bits) */
        const int64_t e = n + h;
        for (; n < e; n++)
            rows45_512(type, mt, 2, act, ab, w, nb, n, h, s0, s1, y, ldy);
        n += h;
    }
    for (; n < n1; n++)
        rows45_512(type, mt, 1, act, ab, w, nb, n, 0, s0, s1, y, ldy);
}

/* Two Q8_0 blocks (b, b+1) of one weight row: zmm = the two blocks' 64 codes + 128 (unsigned);
 * lanes 0-7 are block b, 8-15 block b+1. */
INL void pair8(const int mt, const uint8_t *A, const uint8_t *act, int64_t ab, int64_t b, int64_t nb,
               __m512 *acc) {
    const uint8_t *B = A + 34;
    __m512i wz = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(A + 2))),
                                    _mm256_loadu_si256((const __m256i *)(B + 2)), 1);
    wz = _mm512_xor_si512(wz, _mm512_set1_epi8((char)0x80));
    __m128 dw = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(q32_ld16(A) | ((uint32_t)q32_ld16(B) << 16))));
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    for (int r = 0; r < mt; r++) {
        const uint8_t *a = act + r * ab;
        __m512i D = _mm512_permutexvar_epi32(
            idx, _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(a + q32_act_x_off(nb) + b * 4))));
        D = _mm512_dpbusd_epi32(D, wz, _mm512_loadu_si512((const void *)(a + b * 32)));
        __m128 s2 = _mm_mul_ps(dw, _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(a + q32_act_d_off(nb) + b * 4))));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D), _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s2)), acc[r]);
    }
}

/* Decode (one activation row): pair8 for four weight rows `rs` bytes apart. The activation's part
 * (codes, bias, d) is loaded once for the four; the four rows' d of A and B (8 halves: words 0 and
 * 17 of each row's pair) are gathered by two vpermt2w, widened and multiplied by the activation's d
 * once, and each row takes its two products with one permute. Per row the same integers, products
 * and fused adds as pair8, so the same bits. */
INL void pair8_m1x4(const uint8_t *A, int64_t rs, const uint8_t *act, int64_t b, int64_t nb, __m512 *acc) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i bias = _mm512_permutexvar_epi32(
        idx, _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(act + q32_act_x_off(nb) + b * 4))));
    const __m512i q = _mm512_loadu_si512((const void *)(act + b * 32));
    const __m128 da2 = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(act + q32_act_d_off(nb) + b * 4)));
    __m512i wz[4], sw[4];
    for (int j = 0; j < 4; j++) {
        const uint8_t *Aj = A + j * rs;
        _mm_prefetch((const char *)(Aj + 1536), _MM_HINT_T0);   /* as in pair512: 4 streams */
        wz[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(Aj + 2))),
                                   _mm256_loadu_si256((const __m256i *)(Aj + 36)), 1);
        wz[j] = _mm512_xor_si512(wz[j], _mm512_set1_epi8((char)0x80));
        sw[j] = _mm512_loadu_si512((const void *)Aj);   /* a pair is 68 bytes */
    }
    /* words 2j, 2j+1 = d of A, d of B of row j */
    const __m512i i01 = _mm512_setr_epi32(0x110000, 0x310020, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i i23 = _mm512_setr_epi32(0, 0, 0x110000, 0x310020, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i h8 = _mm512_mask_mov_epi16(_mm512_permutex2var_epi16(sw[0], i01, sw[1]), (__mmask32)0xF0,
                                             _mm512_permutex2var_epi16(sw[2], i23, sw[3]));
    const __m256 v = _mm256_cvtph_ps(_mm512_castsi512_si128(h8));
    /* lanes 2j: dA * the activation's dA, 2j+1: dB * its dB */
    const __m256 prod = _mm256_mul_ps(v, _mm256_permutexvar_ps(_mm256_setr_epi32(0, 1, 0, 1, 0, 1, 0, 1),
                                                               _mm256_castps128_ps256(da2)));
    for (int j = 0; j < 4; j++) {
        const __m512 sc = _mm512_permutexvar_ps(_mm512_add_epi32(idx, _mm512_set1_epi32(2 * j)),
                                                _mm512_castps256_ps512(prod));
        __m512i D = _mm512_dpbusd_epi32(bias, wz[j], q);
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D), sc, acc[j]);
    }
}

/* Decode: weight rows n + j*nstep (j < 4) over segments [s0, s1), the loop and lanes of kq8_512's
 * row loop (pairs b, b+2 into two accumulators, then a pair, then a lone block) and its reduction
 * tree, four rows at a time: the same bits as one row at a time. */
INL void rows8_m1x4(const uint8_t *act, const uint8_t *w, int64_t nb, int64_t n, int64_t nstep,
                    int64_t s0, int64_t s1, float *y) {
    const int64_t rb = nb * 34, rs = nstep * rb;
    const uint8_t *wr = w + n * rb;
    __m128 tot = s0 > 0 ? _mm_setr_ps(y[n], y[n + nstep], y[n + 2 * nstep], y[n + 3 * nstep]) : _mm_setzero_ps();
    for (int64_t sg = s0; sg < s1; sg++) {
        const int64_t b1 = Q32_SEG_END(sg, nb);
        __m512 acc0[4], acc1[4];
        for (int j = 0; j < 4; j++) acc0[j] = acc1[j] = _mm512_setzero_ps();
        int64_t b = sg * Q32_SEG;
        for (; b + 3 < b1; b += 4) {
            pair8_m1x4(wr + b * 34, rs, act, b, nb, acc0);
            pair8_m1x4(wr + (b + 2) * 34, rs, act, b + 2, nb, acc1);
        }
        for (; b + 1 < b1; b += 2)
            pair8_m1x4(wr + b * 34, rs, act, b, nb, acc0);
        if (b < b1) {   /* a lone last block: kq8_512's code for each row */
            __m256i D0 = _mm256_set1_epi32((int)q32_ld32(act + q32_act_x_off(nb) + b * 4));
            __m256i av = _mm256_loadu_si256((const __m256i *)(act + b * 32));
            float da = q32_ldf(act + q32_act_d_off(nb) + b * 4);
            for (int j = 0; j < 4; j++) {
                const uint8_t *A = wr + j * rs + b * 34;
                __m256i wu = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(A + 2)), _mm256_set1_epi8((char)0x80));
                __m256i D = _mm256_dpbusd_epi32(D0, wu, av);
                __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(D), _mm256_set1_ps(_cvtsh_ss(q32_ld16(A)) * da));
                acc0[j] = _mm512_add_ps(acc0[j], _mm512_zextps256_ps512(t));
            }
        }
        tot = _mm_add_ps(tot, hsum512x4(_mm512_add_ps(acc0[0], acc1[0]), _mm512_add_ps(acc0[1], acc1[1]),
                                        _mm512_add_ps(acc0[2], acc1[2]), _mm512_add_ps(acc0[3], acc1[3])));
    }
    float t[4];
    _mm_storeu_ps(t, tot);
    for (int j = 0; j < 4; j++) y[n + j * nstep] = t[j];
}

INL void kq8_512(const int mt, const uint8_t *act, int64_t ab, const uint8_t *w, int64_t nb,
                 int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy) {
    if (mt == 1 && (n1 - n0) / 4 > 0) {
        /* four rows a quarter of the tile apart (four sequential streams, as kq45_512), the rest
         * one at a time below */
        const int64_t q = (n1 - n0) / 4;
        for (int64_t n = n0; n < n0 + q; n++)
            rows8_m1x4(act, w, nb, n, q, s0, s1, y);
        n0 += 4 * q;
    }
    const int64_t rb = nb * 34;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *wr = w + n * rb;
        float tot[Q32_MT];
        for (int r = 0; r < mt; r++) tot[r] = s0 > 0 ? y[r * ldy + n] : 0.f;
        for (int64_t sg = s0; sg < s1; sg++) {
            const int64_t b1 = Q32_SEG_END(sg, nb);
            __m512 acc0[Q32_MT], acc1[Q32_MT];
            for (int r = 0; r < mt; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
            int64_t b = sg * Q32_SEG;
            for (; b + 3 < b1; b += 4) {
                pair8(mt, wr + b * 34, act, ab, b, nb, acc0);
                pair8(mt, wr + (b + 2) * 34, act, ab, b + 2, nb, acc1);
            }
            for (; b + 1 < b1; b += 2)
                pair8(mt, wr + b * 34, act, ab, b, nb, acc0);
            if (b < b1) {   /* a lone last block */
                const uint8_t *A = wr + b * 34;
                __m256i wu = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(A + 2)), _mm256_set1_epi8((char)0x80));
                float dw = _cvtsh_ss(q32_ld16(A));
                for (int r = 0; r < mt; r++) {
                    const uint8_t *a = act + r * ab;
                    __m256i D = _mm256_set1_epi32((int)q32_ld32(a + q32_act_x_off(nb) + b * 4));
                    D = _mm256_dpbusd_epi32(D, wu, _mm256_loadu_si256((const __m256i *)(a + b * 32)));
                    __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(D), _mm256_set1_ps(dw * q32_ldf(a + q32_act_d_off(nb) + b * 4)));
                    acc0[r] = _mm512_add_ps(acc0[r], _mm512_zextps256_ps512(t));
                }
            }
            for (int r = 0; r < mt; r++)
                tot[r] += hsum512(_mm512_add_ps(acc0[r], acc1[r]));
        }
        for (int r = 0; r < mt; r++)
            y[r * ldy + n] = tot[r];
    }
}

/* Q8_0 at 2..4 activation rows: pair8 for nw weight rows (`rs` bytes apart) at once, the
 * activation's bias lanes, codes and da loaded (and the bias permuted) once for all of them. Each
 * (weight row, activation row) lane gets pair8's values through pair8's operations: the same bits.
 * acc[j * Q32_MT + r]. */
INL void pair8n(const int mt, const int nw, const uint8_t *A, int64_t rs, const uint8_t *act, int64_t ab,
                int64_t b, int64_t nb, __m512 *acc) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512i wz[4];
    __m128 dw[4];
    for (int j = 0; j < nw; j++) {
        const uint8_t *Aj = A + j * rs, *Bj = Aj + 34;
        _mm_prefetch((const char *)(Aj + 1536), _MM_HINT_T0);   /* several streams: as pair512 */
        wz[j] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(Aj + 2))),
                                                    _mm256_loadu_si256((const __m256i *)(Bj + 2)), 1),
                                 _mm512_set1_epi8((char)0x80));
        dw[j] = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(q32_ld16(Aj) | ((uint32_t)q32_ld16(Bj) << 16))));
    }
    for (int r = 0; r < mt; r++) {
        const uint8_t *a = act + r * ab;
        const __m512i bias = _mm512_permutexvar_epi32(
            idx, _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(a + q32_act_x_off(nb) + b * 4))));
        const __m512i q = _mm512_loadu_si512((const void *)(a + b * 32));
        const __m128 da = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(a + q32_act_d_off(nb) + b * 4)));
        for (int j = 0; j < nw; j++) {
            __m512i D = _mm512_dpbusd_epi32(bias, wz[j], q);
            __m128 s2 = _mm_mul_ps(dw[j], da);
            __m512 *c = &acc[j * Q32_MT + r];
            *c = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D), _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s2)), *c);
        }
    }
}

/* kq8_512's rows n + j * nstep (j < nw) at once: the same pairs into the same two accumulators,
 * the same lone block, the same reductions. */
INL void rows8n(const int mt, const int nw, const uint8_t *act, int64_t ab, const uint8_t *w, int64_t nb,
                int64_t n, int64_t nstep, int64_t s0, int64_t s1, float *y, int64_t ldy) {
    const int64_t rb = nb * 34, rs = nstep * rb;
    const uint8_t *wr = w + n * rb;
    float tot[4 * Q32_MT];
    for (int j = 0; j < nw; j++)
        for (int r = 0; r < mt; r++) tot[j * Q32_MT + r] = s0 > 0 ? y[r * ldy + n + j * nstep] : 0.f;
    for (int64_t sg = s0; sg < s1; sg++) {
        const int64_t b1 = Q32_SEG_END(sg, nb);
        __m512 acc0[4 * Q32_MT], acc1[4 * Q32_MT];
        for (int j = 0; j < nw; j++)
            for (int r = 0; r < mt; r++) acc0[j * Q32_MT + r] = acc1[j * Q32_MT + r] = _mm512_setzero_ps();
        int64_t b = sg * Q32_SEG;
        for (; b + 3 < b1; b += 4) {
            pair8n(mt, nw, wr + b * 34, rs, act, ab, b, nb, acc0);
            pair8n(mt, nw, wr + (b + 2) * 34, rs, act, ab, b + 2, nb, acc1);
        }
        for (; b + 1 < b1; b += 2)
            pair8n(mt, nw, wr + b * 34, rs, act, ab, b, nb, acc0);
        if (b < b1) {   /* a lone last block: kq8_512's code */
            for (int j = 0; j < nw; j++) {
                const uint8_t *A = wr + j * rs + b * 34;
                __m256i wu = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(A + 2)), _mm256_set1_epi8((char)0x80));
                float dw = _cvtsh_ss(q32_ld16(A));
                for (int r = 0; r < mt; r++) {
                    const uint8_t *a = act + r * ab;
                    __m256i D = _mm256_set1_epi32((int)q32_ld32(a + q32_act_x_off(nb) + b * 4));
                    D = _mm256_dpbusd_epi32(D, wu, _mm256_loadu_si256((const __m256i *)(a + b * 32)));
                    __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(D), _mm256_set1_ps(dw * q32_ldf(a + q32_act_d_off(nb) + b * 4)));
                    acc0[j * Q32_MT + r] = _mm512_add_ps(acc0[j * Q32_MT + r], _mm512_zextps256_ps512(t));
                }
            }
        }
        for (int j = 0; j < nw; j++)
            for (int r = 0; r < mt; r++)
                tot[j * Q32_MT + r] += _mm512_reduce_add_ps(_mm512_add_ps(acc0[j * Q32_MT + r], acc1[j * Q32_MT + r]));
    }
    for (int j = 0; j < nw; j++)
        for (int r = 0; r < mt; r++) y[r * ldy + n + j * nstep] = tot[j * Q32_MT + r];
}

/* Q8_0 at 2..8 rows. kq8_512 loads each row's activation terms once per weight row, and that
 * (the load ports) bounds it at 2..4 rows: here 4 weight rows a step at mt = 2, two at 3..4 (16
 * accumulators either way, far apart as in kq45_512), one at 5..8. m = 1 stays kq8_512. */
INL void kq8m_512(const int mt, const uint8_t *act, int64_t ab, const uint8_t *w, int64_t nb,
                  int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy) {
    const int64_t rb = nb * 34;
    int64_t n = n0;
    if (mt <= 2) {
        const int64_t q = (n1 - n0) / 4;
        if (q > 0 && q * rb >= 1024) {
            for (; n < n0 + q; n++)
                rows8n(mt, 4, act, ab, w, nb, n, q, s0, s1, y, ldy);
            n = n0 + 4 * q;
        }
    }
    if (mt <= 4) {
        const int64_t h = (n1 - n) / 2;
        if (h * rb >= 4096) {
            const int64_t e = n + h;
            for (; n < e; n++)
                rows8n(mt, 2, act, ab, w, nb, n, h, s0, s1, y, ldy);
            n += h;
        }
    }
    for (; n < n1; n++)
        rows8n(mt, 1, act, ab, w, nb, n, 0, s0, s1, y, ldy);
}

#define MT_CASES(CALL)                                                                       \
    switch (mt) {                                                                            \
    case 1: CALL(1); break;                                                                  \
    case 2: CALL(2); break;                                                                  \
    case 3: CALL(3); break;                                                                  \
    case 4: CALL(4); break;                                                                  \
    case 5: CALL(5); break;                                                                  \
    case 6: CALL(6); break;                                                                  \
    case 7: CALL(7); break;                                                                  \
    default: CALL(8); break;                                                                 \
    }

__attribute__((target(TGT512))) void q32_tile_avx512vnni(int type, const uint8_t *act, int64_t ab, int mt,
                                                        const uint8_t *w, int64_t nb, int64_t n0,
                                                        int64_t n1, int64_t s0, int64_t s1, float *y,
                                                        int64_t ldy) {
#define K40(M) kq45_512(T_Q4_0, M, act, ab, w, nb, n0, n1, s0, s1, y, ldy)
#define K41(M) kq45_512(T_Q4_1, M, act, ab, w, nb, n0, n1, s0, s1, y, ldy)
#define K50(M) kq45_512(T_Q5_0, M, act, ab, w, nb, n0, n1, s0, s1, y, ldy)
#define K51(M) kq45_512(T_Q5_1, M, act, ab, w, nb, n0, n1, s0, s1, y, ldy)
#define K80(M) (M == 1 ? kq8_512(1, act, ab, w, nb, n0, n1, s0, s1, y, ldy) \
                       : kq8m_512(M, act, ab, w, nb, n0, n1, s0, s1, y, ldy))
    switch (type) {
    case T_Q4_0: MT_CASES(K40) break;
    case T_Q4_1: MT_CASES(K41) break;
    case T_Q5_0: MT_CASES(K50) break;
    case T_Q5_1: MT_CASES(K51) break;
    default: MT_CASES(K80) break;
    }
}
#else
typedef int q32_avx512_unused;
#endif
