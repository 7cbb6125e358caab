/* Q4_K Q5_K Q6_K kernels at AVX-512 width with AVX512-VNNI (+BW, VL): 64 values a register.
 * Per 64 values: the 32 packed bytes are broadcast to both halves and shifted per half
 * (vpsrlvq by 0 / 4), so one register holds the levels in order against one 64-byte load of the
 * activations; vpmaddubsw then vpdpwssd with the two sub-blocks' scales. Compiled without -m
 * flags: the functions carry target attributes, dispatch.c routes here only on such a CPU. */
#include "qk_impl.h"

#ifdef QK_X86
#include <immintrin.h>

#define QK_TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define QK_INL static inline __attribute__((always_inline)) QK_TGT
/* Super-blocks ahead to prefetch, into L2: about 5-7 KB, enough to cover DRAM latency at the
 * streaming rate (6 ahead into L1 measured up to 1.9x slower at m = 4, K = 8192). */
#define QK_PF 32
#define QK_PFH _MM_HINT_T1
/* the same for the m = 1 stream (rows1_qk) */
#ifndef QK_PF1
#define QK_PF1 32
#endif
#ifndef QK_PFH1
#define QK_PFH1 _MM_HINT_T1
#endif
/* Activation rows per decoded super-block: 32 registers hold 8 rows' accumulators. */
#define T512 8

QK_INL float half512(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Q4_K/Q5_K's 12 scale bytes (read as 16: the block goes on) -> bytes 0-7 six-bit scales, 8-15
 * six-bit mins, in registers (a byte array on the stack read back as a vector stalls the
 * store-to-load forwarding on every super-block). */
QK_INL __m128i scales512(const uint8_t *p) {
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    const __m128i lo = _mm_and_si128(v, _mm_set1_epi32(0x3f3f3f3f));     /* [sc 0-3, mins 0-3] */
    const __m128i u2 = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2));
    const __m128i s = _mm_and_si128(_mm_srlv_epi32(u2, _mm_setr_epi32(0, 4, 0, 4)), _mm_set1_epi32(0x0f0f0f0f));
    const __m128i r = _mm_and_si128(_mm_srli_epi32(v, 6), _mm_set1_epi32(0x03030303));
    const __m128i hi = _mm_or_si128(s, _mm_slli_epi32(r, 4));            /* [sc 4-7, mins 4-7] */
    return _mm_unpacklo_epi32(lo, hi);
}

/* int16 lane L of the scale register for 64-value chunk j: scale 2j + L/16 (Q4_K/Q5_K); for
 * values 64t.. of Q6_K's half h (s = 2h + t): scale 4s + L/8 */
static const short QK_SIDX45[4][32] = {
#define R(j) {2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, \
              2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, \
              2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1}
    R(0), R(1), R(2), R(3)
#undef R
};
static const short QK_SIDX6[4][32] = {
#define R(s) {4 * s, 4 * s, 4 * s, 4 * s, 4 * s, 4 * s, 4 * s, 4 * s, 4 * s + 1, 4 * s + 1, 4 * s + 1, 4 * s + 1, \
              4 * s + 1, 4 * s + 1, 4 * s + 1, 4 * s + 1, 4 * s + 2, 4 * s + 2, 4 * s + 2, 4 * s + 2, 4 * s + 2, \
              4 * s + 2, 4 * s + 2, 4 * s + 2, 4 * s + 3, 4 * s + 3, 4 * s + 3, 4 * s + 3, 4 * s + 3, 4 * s + 3, \
              4 * s + 3, 4 * s + 3}
    R(0), R(1), R(2), R(3)
#undef R
};

/* Lane i = the exact int32 total of v[i], for 8 registers of 16 lanes (a transpose-add tree:
 * 3 instructions a row instead of a full reduction each). */
QK_INL __m256i sum8x16(const __m512i v[8]) {
    __m512i s[4], t[2];
    for (int i = 0; i < 4; i++)
        s[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 2; i++)   /* 128-bit lane L: partial totals of rows 4i..4i+3 */
        t[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(s[2 * i], s[2 * i + 1]), _mm512_unpackhi_epi64(s[2 * i], s[2 * i + 1]));
    const __m512i u = _mm512_add_epi32(_mm512_shuffle_i32x4(t[0], t[1], 0x44), _mm512_shuffle_i32x4(t[0], t[1], 0xEE));
    const __m512i w = _mm512_add_epi32(_mm512_shuffle_i32x4(u, u, _MM_SHUFFLE(0, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(u, u, _MM_SHUFFLE(0, 0, 3, 1)));
    return _mm512_castsi512_si256(w);
}

/* The same for 8 registers of 8 lanes. */
QK_INL __m256i sum8x8(const __m256i v[8]) {
    __m256i s[4], t[2];
    for (int i = 0; i < 4; i++)
        s[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 2; i++)
        t[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(s[2 * i], s[2 * i + 1]), _mm256_unpackhi_epi64(s[2 * i], s[2 * i + 1]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(t[0], t[1], 0x20), _mm256_permute2x128_si256(t[0], t[1], 0x31));
}

/* d_act of the mt rows' blocks, 0 past mt */
QK_INL __m256 da8(const uint8_t *act, int64_t ab, const int mt) {
    float f[8];
    for (int i = 0; i < 8; i++) f[i] = i < mt ? qk_act_d(act + i * ab) : 0.f;
    return _mm256_setr_ps(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]);
}

QK_INL void tile_q45k(const uint8_t *x, const uint8_t *act, int64_t ab, const int mt, int64_t nb,
                      const int five, float *out) {
    const int64_t xb = five ? Q5K_BYTES : Q4K_BYTES;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    const __m512i nib = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    const __m128i dupmins = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m256 acc = _mm256_setzero_ps();   /* lane i: row i (T512 = 8) */
    /* mt = 1: the totals of 8 consecutive super-blocks share one reduction tree, then are added
     * to the row's sum one by one, in order (the same float operations as every other path) */
    __m512i biv[8];
    __m256i bmv[8];
    float bd[8], bdm[8], bda[8], acc1 = 0.f;   /* filled before each use: no per-call zeroing */
    int nbat = 0;
    for (int64_t b = 0; b < nb; b++, x += xb, act += Q8K_BYTES) {
        _mm_prefetch((const char *)x + QK_PF * xb, QK_PFH);
        _mm_prefetch((const char *)x + QK_PF * xb + 64, QK_PFH);
        _mm_prefetch((const char *)x + QK_PF * xb + 128, QK_PFH);
        const __m128i sm = scales512(x + 4);
        const float d = half512(x), dmin = half512(x + 2);
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dupmins));
        const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
        const uint8_t *qs = x + (five ? 48 : 16);
        const __m512i qhv = five ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x + 16)))
                                 : _mm512_setzero_si512();
        __m512i isum[T512];
        for (int i = 0; i < mt; i++) isum[i] = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * j)));
            __m512i q = _mm512_and_si512(_mm512_srlv_epi64(v, nib), m4);
            if (five) {   /* bit 2j (low half) / 2j+1 (high half) of each qh byte to bit 4:
                           * a rotate of the 64-bit lanes keeps each bit in its byte */
                const __m512i rot = _mm512_setr_epi64((4 - 2 * j) & 63, (4 - 2 * j) & 63, (4 - 2 * j) & 63,
                                                      (4 - 2 * j) & 63, (3 - 2 * j) & 63, (3 - 2 * j) & 63,
                                                      (3 - 2 * j) & 63, (3 - 2 * j) & 63);
                q = _mm512_or_si512(q, _mm512_and_si512(_mm512_rolv_epi64(qhv, rot), m10));
            }
            const __m512i sc = _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)QK_SIDX45[j]), sc16);
            for (int i = 0; i < mt; i++) {
                const uint8_t *a = act + i * ab + Q8K_Q + 64 * j;
                const __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512((const void *)a));
                isum[i] = _mm512_dpwssd_epi32(isum[i], p, sc);
            }
        }
        if (mt == 1) {
            biv[nbat] = isum[0];
            bmv[nbat] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(act + Q8K_BSUMS)), mins16);
            bd[nbat] = d;
            bdm[nbat] = dmin;
            bda[nbat] = qk_act_d(act);
            if (++nbat == 8 || b == nb - 1) {   /* qk_tail45 lane by lane, then in order */
                for (int c = nbat; c < 8; c++) {
                    biv[c] = _mm512_setzero_si512();
                    bmv[c] = _mm256_setzero_si256();
                    bd[c] = bdm[c] = bda[c] = 0.f;
                }
                __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(sum8x16(biv)), _mm256_loadu_ps(bd));
                const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(sum8x8(bmv)), _mm256_loadu_ps(bdm));
                t = _mm256_sub_ps(t, u);
                t = _mm256_mul_ps(t, _mm256_loadu_ps(bda));
                float tt[8];
                _mm256_storeu_ps(tt, t);
                for (int c = 0; c < nbat; c++) acc1 = acc1 + tt[c];
                nbat = 0;
            }
            continue;
        }
        __m512i iv[8];
        __m256i mv[8];
        for (int i = 0; i < 8; i++) {
            iv[i] = i < mt ? isum[i] : _mm512_setzero_si512();
            mv[i] = i < mt ? _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(act + i * ab + Q8K_BSUMS)), mins16)
                           : _mm256_setzero_si256();
        }
        /* qk_tail45 lane by lane */
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(sum8x16(iv)), _mm256_set1_ps(d));
        const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(sum8x8(mv)), _mm256_set1_ps(dmin));
        t = _mm256_sub_ps(t, u);
        t = _mm256_mul_ps(t, da8(act, ab, mt));
        acc = _mm256_add_ps(acc, t);
    }
    if (mt == 1) {
        out[0] = acc1;
        return;
    }
    float o[8];
    _mm256_storeu_ps(o, acc);
    for (int i = 0; i < mt; i++) out[i] = o[i];
}

/* Q6_K super-block x, half h (128 levels): the 6-bit levels of its groups 0|1 in q[0] and 2|3 in
 * q[1], one byte each (ql's nibble | qh's two bits at bits 4-5). */
QK_INL void q6k_levels(const uint8_t *x, const int h, __m512i q[2]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* qh bits of groups 0|1 (bits 0-1 | 2-3) and 2|3 (bits 4-5 | 6-7) rotated to bits 4-5 */
    const __m512i rot01 = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2);
    const __m512i rot23 = _mm512_setr_epi64(0, 0, 0, 0, 62, 62, 62, 62);
    const __m512i ql = _mm512_loadu_si512((const void *)(x + 64 * h));
    const __m512i hv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x + 128 + 32 * h)));
    q[0] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_rolv_epi64(hv, rot01), m30));
    q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                           _mm512_and_si512(_mm512_rolv_epi64(hv, rot23), m30));
}

QK_INL void tile_q6k(const uint8_t *x, const uint8_t *act, int64_t ab, const int mt, int64_t nb,
                     float *out) {
    __m256 acc = _mm256_setzero_ps();   /* lane i: row i (T512 = 8) */
    __m512i biv[8];   /* mt = 1: 8 super-blocks a reduction (see tile_q45k) */
    float bd[8], bda[8], acc1 = 0.f;
    int nbat = 0;
    for (int64_t b = 0; b < nb; b++, x += Q6K_BYTES, act += Q8K_BYTES) {
        _mm_prefetch((const char *)x + QK_PF * Q6K_BYTES, QK_PFH);
        _mm_prefetch((const char *)x + QK_PF * Q6K_BYTES + 64, QK_PFH);
        _mm_prefetch((const char *)x + QK_PF * Q6K_BYTES + 128, QK_PFH);
        _mm_prefetch((const char *)x + QK_PF * Q6K_BYTES + 192, QK_PFH);
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x + 192)));
        const __m512i s16w = _mm512_castsi256_si512(s16);
        const float d = half512(x + 208);
        __m512i isum[T512];
        for (int i = 0; i < mt; i++) isum[i] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512i q[2];
            q6k_levels(x, h, q);
            for (int t = 0; t < 2; t++) {
                const __m512i sc = _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)QK_SIDX6[2 * h + t]), s16w);
                for (int i = 0; i < mt; i++) {
                    const uint8_t *a = act + i * ab + Q8K_Q + 128 * h + 64 * t;
                    const __m512i p = _mm512_maddubs_epi16(q[t], _mm512_loadu_si512((const void *)a));
                    isum[i] = _mm512_dpwssd_epi32(isum[i], p, sc);
                }
            }
        }
        if (mt == 1) {
            const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(act + Q8K_BSUMS)), s16);
            biv[nbat] = _mm512_sub_epi32(isum[0], _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
            bd[nbat] = d;
            bda[nbat] = qk_act_d(act);
            if (++nbat == 8 || b == nb - 1) {   /* qk_tail6 lane by lane, then in order */
                for (int c = nbat; c < 8; c++) {
                    biv[c] = _mm512_setzero_si512();
                    bd[c] = bda[c] = 0.f;
                }
                __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(sum8x16(biv)), _mm256_loadu_ps(bd));
                t = _mm256_mul_ps(t, _mm256_loadu_ps(bda));
                float tt[8];
                _mm256_storeu_ps(tt, t);
                for (int c = 0; c < nbat; c++) acc1 = acc1 + tt[c];
                nbat = 0;
            }
            continue;
        }
        __m512i iv[8];
        for (int i = 0; i < 8; i++) {
            if (i < mt) {
                const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(act + i * ab + Q8K_BSUMS)), s16);
                iv[i] = _mm512_sub_epi32(isum[i], _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
            } else {
                iv[i] = _mm512_setzero_si512();
            }
        }
        /* qk_tail6 lane by lane */
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(sum8x16(iv)), _mm256_set1_ps(d));
        t = _mm256_mul_ps(t, da8(act, ab, mt));
        acc = _mm256_add_ps(acc, t);
    }
    if (mt == 1) {
        out[0] = acc1;
        return;
    }
    float o[8];
    _mm256_storeu_ps(o, acc);
    for (int i = 0; i < mt; i++) out[i] = o[i];
}

/* One super-block at m = 1: the exact int32 sums (lane totals are the block's sum of q * scale * a;
 * Q6_K's -32 offset already taken off) and, Q4_K / Q5_K, the mins' term (lane totals: sum of
 * min * bsum). */
QK_INL void blk1_qk(const int type, const uint8_t *x, const uint8_t *a, __m512i *iv, __m256i *mv) {
    const int six = type == QK_Q6_K, five = type == QK_Q5_K;
    if (six) {
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x + 192)));
        const __m512i s16w = _mm512_castsi256_si512(s16);
        __m512i isum = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512i q[2];
            q6k_levels(x, h, q);
            for (int t = 0; t < 2; t++) {
                const __m512i sc = _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)QK_SIDX6[2 * h + t]), s16w);
                const __m512i p = _mm512_maddubs_epi16(q[t], _mm512_loadu_si512((const void *)(a + Q8K_Q + 128 * h + 64 * t)));
                isum = _mm512_dpwssd_epi32(isum, p, sc);
            }
        }
        const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(a + Q8K_BSUMS)), s16);
        *iv = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
        *mv = _mm256_setzero_si256();
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    const __m512i nib = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    const __m128i dupmins = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    const __m128i sm = scales512(x + 4);
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dupmins));
    const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
    const uint8_t *qs = x + (five ? 48 : 16);
    const __m512i qhv = five ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x + 16)))
                             : _mm512_setzero_si512();
    __m512i isum = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {
        const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * j)));
        __m512i q = _mm512_and_si512(_mm512_srlv_epi64(v, nib), m4);
        if (five) {   /* as in tile_q45k */
            const __m512i rot = _mm512_setr_epi64((4 - 2 * j) & 63, (4 - 2 * j) & 63, (4 - 2 * j) & 63,
                                                  (4 - 2 * j) & 63, (3 - 2 * j) & 63, (3 - 2 * j) & 63,
                                                  (3 - 2 * j) & 63, (3 - 2 * j) & 63);
            q = _mm512_or_si512(q, _mm512_and_si512(_mm512_rolv_epi64(qhv, rot), m10));
        }
        const __m512i sc = _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)QK_SIDX45[j]), sc16);
        const __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512((const void *)(a + Q8K_Q + 64 * j)));
        isum = _mm512_dpwssd_epi32(isum, p, sc);
    }
    *iv = isum;
    *mv = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(a + Q8K_BSUMS)), mins16);
}

QK_INL uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

QK_INL uint16_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* m = 1 (decode) over rows [n0, n1): the rows are contiguous, so their super-blocks are one stream,
 * reduced 8 at a time whatever K is; each block's float tail is then added to its own row's sum
 * in order. The same float operations as tile_q45k / tile_q6k at mt = 1 (same bits), without
 * their padded last batch a row (K = 1536, 6 blocks a row: a quarter of each reduction wasted,
 * measured 0.75x the K = 2048 rate in cache). Whole batches of 8 blocks run unrolled with their
 * sums, scales and activation scales in registers (no per-block stores read back as vectors);
 * the last (total mod 8) blocks go through the per-block loop below. */
QK_INL void rows1_qk(const int type, const uint8_t *w, const uint8_t *act, int64_t nb, int64_t n0, int64_t n1,
                     float *y) {
    const int six = type == QK_Q6_K;
    const int64_t xb = qk_block_bytes(type);
    __m512i biv[8];
    __m256i bmv[8];
    float bd[8], bdm[8], bda[8], acc = 0.f;
    int nbat = 0;
    int64_t row = n0, fb = 0;   /* the row, and its block, that the next flushed slot belongs to */
    const uint8_t *x = w + n0 * nb * xb;
    /* Q6_K stays on the per-block loop: batched, it ran 1.07x in L2 but 0.87-0.91x streaming from
     * DRAM (the same prefetches, placed by the compiler among a batch's loads), so the batched
     * loop below is Q4_K / Q5_K only */
    const int64_t total = (n1 - n0) * nb, whole = six ? 0 : total & ~(int64_t)7;
    const uint8_t *ap = act, *const aend = act + nb * Q8K_BYTES;
    const __m512i dsplit = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    int64_t g = 0;
    for (; g < whole; g += 8, x += 8 * xb) {
        const uint8_t *a[8];
        for (int c = 0; c < 8; c++) {
            a[c] = ap;
            ap += Q8K_BYTES;
            if (ap == aend)
                ap = act;
        }
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            const uint8_t *xc = x + c * xb;
            _mm_prefetch((const char *)xc + QK_PF1 * xb, QK_PFH1);
            _mm_prefetch((const char *)xc + QK_PF1 * xb + 64, QK_PFH1);
            _mm_prefetch((const char *)xc + QK_PF1 * xb + 128, QK_PFH1);
            blk1_qk(type, xc, a[c], &biv[c], &bmv[c]);
            /* keeps each block's prefetches with its block (GCC would otherwise issue a batch's
             * 24-32 together: measured 0.77-0.90x streaming from DRAM) */
            __asm__ volatile("" ::: "memory");
        }
        const __m256 dav = _mm256_setr_ps(qk_act_d(a[0]), qk_act_d(a[1]), qk_act_d(a[2]), qk_act_d(a[3]),
                                          qk_act_d(a[4]), qk_act_d(a[5]), qk_act_d(a[6]), qk_act_d(a[7]));
        /* d | dmin of each block (Q4_K / Q5_K only here): one word each, 16 halves -> floats, split */
        const __m256i dw = _mm256_setr_epi32((int)ld32(x), (int)ld32(x + xb), (int)ld32(x + 2 * xb), (int)ld32(x + 3 * xb),
                                             (int)ld32(x + 4 * xb), (int)ld32(x + 5 * xb), (int)ld32(x + 6 * xb),
                                             (int)ld32(x + 7 * xb));
        const __m512 dd = _mm512_permutexvar_ps(dsplit, _mm512_cvtph_ps(dw));
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(sum8x16(biv)), _mm512_castps512_ps256(dd));
        const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(sum8x8(bmv)), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(dd), 1)));
        t = _mm256_sub_ps(t, u);
        t = _mm256_mul_ps(t, dav);
        float tt[8];
        _mm256_storeu_ps(tt, t);
        for (int c = 0; c < 8; c++) {
            acc = acc + tt[c];
            if (++fb == nb) {
                y[row++] = acc;
                acc = 0.f;
                fb = 0;
            }
        }
    }
    for (; g < total; g++, x += xb) {
        const uint8_t *a = ap;
        ap += Q8K_BYTES;
        if (ap == aend)
            ap = act;
        _mm_prefetch((const char *)x + QK_PF1 * xb, QK_PFH1);
        _mm_prefetch((const char *)x + QK_PF1 * xb + 64, QK_PFH1);
        _mm_prefetch((const char *)x + QK_PF1 * xb + 128, QK_PFH1);
        if (six)
            _mm_prefetch((const char *)x + QK_PF1 * xb + 192, QK_PFH1);
        blk1_qk(type, x, a, &biv[nbat], &bmv[nbat]);
        if (six) {
            bd[nbat] = half512(x + 208);
        } else {
            bd[nbat] = half512(x);
            bdm[nbat] = half512(x + 2);
        }
        bda[nbat] = qk_act_d(a);
        if (++nbat == 8 || g == total - 1) {   /* the tail lane by lane, then each row's sum in order */
            for (int c = nbat; c < 8; c++) {
                biv[c] = _mm512_setzero_si512();
                bmv[c] = _mm256_setzero_si256();
                bd[c] = bdm[c] = bda[c] = 0.f;
            }
            __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(sum8x16(biv)), _mm256_loadu_ps(bd));
            if (!six) {
                const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(sum8x8(bmv)), _mm256_loadu_ps(bdm));
                t = _mm256_sub_ps(t, u);
            }
            t = _mm256_mul_ps(t, _mm256_loadu_ps(bda));
            float tt[8];
            _mm256_storeu_ps(tt, t);
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

static QK_TGT void tile512(int type, const uint8_t *x, const uint8_t *a, int64_t ab, int mt,
                           int64_t nb, float *out) {
#define QK_CASES(call_mt)            \
    switch (mt) {                    \
    case 1: call_mt(1); break;       \
    case 2: call_mt(2); break;       \
    case 3: call_mt(3); break;       \
    case 4: call_mt(4); break;       \
    case 5: call_mt(5); break;       \
    case 6: call_mt(6); break;       \
    case 7: call_mt(7); break;       \
    default: call_mt(8); break;      \
    }
#define QK_C6(t) tile_q6k(x, a, ab, t, nb, out)
#define QK_C5(t) tile_q45k(x, a, ab, t, nb, 1, out)
#define QK_C4(t) tile_q45k(x, a, ab, t, nb, 0, out)
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

QK_TGT void qk_gemm_avx512vnni(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                               int64_t n0, int64_t n1, float *y, int64_t ldy) {
    if (m >= (type == QK_Q6_K ? QK_PACK_MIN_Q6 : QK_PACK_MIN) && n1 - n0 >= 16) {
        const int64_t tiles = (n1 - n0) / 16;
        if (qk_gemm_packed512(type, act, m, w, k, n0, tiles, y, ldy) == 0)
            n0 += tiles * 16;   /* the rest (< 16 rows) below */
    }
    const int64_t nb = k / QK_BLOCK, rb = nb * qk_block_bytes(type), ab = nb * Q8K_BYTES;
    if (m == 1) {   /* decode: the rows' blocks as one stream */
        if (n1 <= n0)
            return;
        if (type == QK_Q6_K)   /* constant types: each inlined copy is specialised */
            rows1_qk(QK_Q6_K, w, act, nb, n0, n1, y);
        else if (type == QK_Q5_K)
            rows1_qk(QK_Q5_K, w, act, nb, n0, n1, y);
        else
            rows1_qk(QK_Q4_K, w, act, nb, n0, n1, y);
        return;
    }
    float out[T512];
    for (int64_t nblk = n0; nblk < n1; nblk += QK_ROW_BLOCK) {
        const int64_t nend = n1 - nblk < QK_ROW_BLOCK ? n1 : nblk + QK_ROW_BLOCK;
        for (int64_t i0 = 0; i0 < m; i0 += T512) {
            const int mt = m - i0 < T512 ? (int)(m - i0) : T512;
            for (int64_t n = nblk; n < nend; n++) {
                tile512(type, w + n * rb, act + i0 * ab, ab, mt, nb, out);
                for (int i = 0; i < mt; i++) y[(i0 + i) * ldy + n] = out[i];
            }
        }
    }
}
#endif
