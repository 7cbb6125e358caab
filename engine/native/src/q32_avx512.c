/* The q32 family's AVX512-VNNI path (+VL, BW): 512-bit vpdpbusd, up to 8 activation rows a tile
 * (32 vector registers hold 16 accumulators); Q4/Q5 in the row-pair form below, Q8_0 one pair of
 * blocks (64 values) an instruction.
 * Layouts: q32_layout.h, as q32_x86.h; the same integer dot products and float32 accumulation as
 * there, summed in another order (bits differ from the 256-bit paths at float rounding). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "q32_layout.h"
#include "q32_tile.h"

#if Q32_HAVE_X86
#include <immintrin.h>

#define TGT512 "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"
#define INL static inline __attribute__((always_inline, target(TGT512)))

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

INL void kq8_512(const int mt, const uint8_t *act, int64_t ab, const uint8_t *w, int64_t nb,
                 int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy) {
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
                tot[r] += _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
        }
        for (int r = 0; r < mt; r++)
            y[r * ldy + n] = tot[r];
    }
}

/* ---- Q4_0 Q4_1 Q5_0 Q5_1 at 1..8 rows: the row-pair form. Per pair of blocks (A, B) and
 * activation row, ONE 8-lane int32 vector sums the low- and high-nibble dot products (two
 * vpdpbusd into the same lanes: lanes 0-3 block A, 4-7 block B), so the float work (convert,
 * scale, accumulate) is one 8-lane step a row a pair. Two activation rows share a 512-bit
 * register (row 2i in lanes 0-7, 2i+1 in 8-15) against the pair's codes broadcast to both
 * halves; an odd last row (and m = 1) runs the same lane operations at 256 bits. So a row's bits
 * never depend on the rows beside it, its position, m, or which weight rows share its step. */

/* A pair's codes (B = A + bs) in both 256-bit halves: L = A[0:16]|B[0:16], H = A[16:32]|B[16:32]
 * (5th bits added); its d (and m) as {A x4, B x4} twice. The low halves are what a lone row uses. */
INL void wpair512(const int type, const uint8_t *A, __m512i *L, __m512i *H, __m512 *dw, __m512 *mw) {
    const int bs = q32_block_bytes(type), qo = q32_qs_off(type), ho = q32_qh_off(type);
    const uint8_t *B = A + bs;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i wab = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(A + qo))),
                                              0xF0F0, _mm_loadu_si128((const __m128i *)(B + qo)));
    __m512i lo = _mm512_and_si512(wab, m4), hi = _mm512_and_si512(_mm512_srli_epi16(wab, 4), m4);
    if (q32_is5(type)) {
        uint32_t hA = q32_ld32(A + ho), hB = q32_ld32(B + ho);
        const uint64_t bl = (hA & 0xFFFFu) | (hB << 16), bh = (hA >> 16) | (hB & 0xFFFF0000u);
        const __m512i b4 = _mm512_set1_epi8(0x10);
        lo = _mm512_mask_add_epi8(lo, (__mmask64)(bl | (bl << 32)), lo, b4);
        hi = _mm512_mask_add_epi8(hi, (__mmask64)(bh | (bh << 32)), hi, b4);
    }
    *L = lo;
    *H = hi;
    if (q32_has_min(type)) {   /* {d, m} of A then of B */
        __m512 v = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_set_epi32(0, 0, (int)q32_ld32(B), (int)q32_ld32(A))));
        *dw = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0, 2, 2, 2, 2), v);
        *mw = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 1, 1, 1, 1, 3, 3, 3, 3), v);
    } else {
        __m512 v = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)(q32_ld16(A) | ((uint32_t)q32_ld16(B) << 16)))));
        *dw = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1), v);
        *mw = _mm512_setzero_ps();
    }
}

INL __m512i join_i(const uint8_t *p0, const uint8_t *p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}
INL __m512 join_f(const uint8_t *p0, const uint8_t *p1) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_loadu_pd((const double *)(const void *)p0)),
                                               _mm256_loadu_pd((const double *)(const void *)p1), 1));
}

INL float hsum8_512(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The lone last block (natural order) of one weight row into one row's 8 lanes. */
INL __m256 lone256(const int type, const uint8_t *A, const uint8_t *a, int64_t nb, int64_t xo, int64_t ao, __m256 acc) {
    const int qo = q32_qs_off(type), ho = q32_qh_off(type);
    __m128i x = _mm_loadu_si128((const __m128i *)(A + qo));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m256i wv = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
    if (q32_is5(type))
        wv = _mm256_mask_add_epi8(wv, (__mmask32)q32_ld32(A + ho), wv, _mm256_set1_epi8(0x10));
    __m256 dw = _mm256_set1_ps(_cvtsh_ss(q32_ld16(A)));
    __m256i D = q32_has_min(type) ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(a + ao));
    D = _mm256_dpbusd_epi32(D, wv, _mm256_loadu_si256((const __m256i *)(a + (nb - 1) * 32)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(D), _mm256_mul_ps(dw, _mm256_loadu_ps((const float *)(a + xo))), acc);
    if (q32_has_min(type))
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(q32_ld16(A + 2))), _mm256_loadu_ps((const float *)(a + ao)), acc);
    return acc;
}

/* Weight rows n + j*nstep (j < nw <= 4) against mt <= 8 activation rows, segments [s0, s1). */
INL void rows45r(const int type, const int mt, const int nw, const uint8_t *act, int64_t ab,
                 const uint8_t *sc, const uint8_t *w, int64_t nb, int64_t n, int64_t nstep, int64_t s0,
                 int64_t s1, float *y, int64_t ldy) {
    const int bs = q32_block_bytes(type), np2 = mt / 2, odd = mt & 1, mn = q32_has_min(type);
    const int64_t np = (nb + 1) / 2, rb = nb * bs, rs = nstep * rb;
    const int64_t xsec = q32_act_x_off(nb), asec = xsec + np * 32;
    const uint8_t *wr = w + n * rb;
    float tot[4][Q32_MT];
    for (int j = 0; j < nw; j++)
        for (int r = 0; r < mt; r++) tot[j][r] = s0 > 0 ? y[r * ldy + n + j * nstep] : 0.f;
    for (int64_t sg = s0; sg < s1; sg++) {
        const int64_t b1 = Q32_SEG_END(sg, nb), pe = (b1 - (b1 == nb && (nb & 1))) / 2;
        __m512 accp[4][Q32_MT / 2];
        __m256 accl[4];
        for (int j = 0; j < nw; j++) {
            for (int i = 0; i < np2; i++) accp[j][i] = _mm512_setzero_ps();
            accl[j] = _mm256_setzero_ps();
        }
        for (int64_t p = sg * Q32_SEG / 2; p < pe; p++) {
            const int64_t qoff = p * 64, xoff = xsec + p * 32, aoff = asec + p * 32;
            __m512i Lz[4], Hz[4];
            __m512 dwz[4], mwz[4];
            for (int j = 0; j < nw; j++) {
                const uint8_t *A = wr + j * rs + 2 * p * bs;
                _mm_prefetch((const char *)(A + 1536), _MM_HINT_T0);
                wpair512(type, A, &Lz[j], &Hz[j], &dwz[j], &mwz[j]);
            }
            if (np2 > 0) {
                for (int i = 0; i < np2; i++) {
                    __m512i LO, HI, BI;
                    __m512 DA, AX;
                    if (sc) {   /* the same vectors, joined once per call (rp_join) */
                        const uint8_t *v = sc + (i * (nb / 2) + p) * 256;
                        LO = _mm512_load_si512((const void *)v);
                        HI = _mm512_load_si512((const void *)(v + 64));
                        DA = _mm512_load_ps((const void *)(v + 128));
                        BI = mn ? _mm512_setzero_si512() : _mm512_load_si512((const void *)(v + 192));
                        AX = mn ? _mm512_load_ps((const void *)(v + 192)) : _mm512_setzero_ps();
                    } else {
                        const uint8_t *a0 = act + 2 * i * ab, *a1 = a0 + ab;
                        LO = join_i(a0 + qoff, a1 + qoff);
                        HI = join_i(a0 + qoff + 32, a1 + qoff + 32);
                        DA = join_f(a0 + xoff, a1 + xoff);
                        BI = mn ? _mm512_setzero_si512() : join_i(a0 + aoff, a1 + aoff);
                        AX = mn ? join_f(a0 + aoff, a1 + aoff) : _mm512_setzero_ps();
                    }
                    for (int j = 0; j < nw; j++) {
                        __m512i D = _mm512_dpbusd_epi32(BI, Lz[j], LO);
                        D = _mm512_dpbusd_epi32(D, Hz[j], HI);
                        __m512 c = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D), _mm512_mul_ps(dwz[j], DA), accp[j][i]);
                        accp[j][i] = mn ? _mm512_fmadd_ps(mwz[j], AX, c) : c;
                    }
                }
            }
            if (odd) {
                const uint8_t *a = act + (mt - 1) * ab;
                const __m256i LO = _mm256_loadu_si256((const __m256i *)(a + qoff));
                const __m256i HI = _mm256_loadu_si256((const __m256i *)(a + qoff + 32));
                const __m256 DA = _mm256_loadu_ps((const float *)(a + xoff));
                const __m256i BI = mn ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(a + aoff));
                const __m256 AX = mn ? _mm256_loadu_ps((const float *)(a + aoff)) : _mm256_setzero_ps();
                for (int j = 0; j < nw; j++) {
                    __m256i D = _mm256_dpbusd_epi32(BI, _mm512_castsi512_si256(Lz[j]), LO);
                    D = _mm256_dpbusd_epi32(D, _mm512_castsi512_si256(Hz[j]), HI);
                    __m256 c = _mm256_fmadd_ps(_mm256_cvtepi32_ps(D), _mm256_mul_ps(_mm512_castps512_ps256(dwz[j]), DA), accl[j]);
                    accl[j] = mn ? _mm256_fmadd_ps(_mm512_castps512_ps256(mwz[j]), AX, c) : c;
                }
            }
        }
        const int lone = b1 == nb && (nb & 1);
        const int64_t xo = xsec + (np - 1) * 32, ao = asec + (np - 1) * 32;
        for (int j = 0; j < nw; j++) {
            const uint8_t *A = wr + j * rs + (nb - 1) * bs;
            for (int r = 0; r < mt; r++) {
                __m256 v;
                if (r / 2 < np2) {
                    const __m512 z = accp[j][r / 2];
                    v = (r & 1) ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1))
                                : _mm512_castps512_ps256(z);
                } else {
                    v = accl[j];
                }
                if (lone)
                    v = lone256(type, A, act + r * ab, nb, xo, ao, v);
                tot[j][r] += hsum8_512(v);
            }
        }
    }
    for (int j = 0; j < nw; j++)
        for (int r = 0; r < mt; r++) y[r * ldy + n + j * nstep] = tot[j][r];
}

/* The row pairs' vectors of every whole pair of blocks, joined once for all the weight rows of a
 * call: row pair i, pair p at (i * (nb/2) + p) * 256 bytes: LO, HI, d, bias or min term. NULL when
 * there is nothing to join or no memory (the kernel then joins as it goes: the same values). */
static uint8_t *rp_join(const int mt, const uint8_t *act, int64_t ab, int64_t nb, void **block) {
    const int64_t npw = nb / 2, np = (nb + 1) / 2;
    *block = NULL;
    if (mt < 2 || npw == 0)
        return NULL;
    const int64_t xsec = q32_act_x_off(nb), asec = xsec + np * 32;
    /* malloc + 63, aligned by hand (aligned_alloc is missing on some C runtimes) */
    *block = malloc((size_t)(mt / 2) * (size_t)npw * 256 + 63);
    if (*block == NULL)
        return NULL;
    uint8_t *sc = (uint8_t *)(((uintptr_t)*block + 63) & ~(uintptr_t)63);
    for (int i = 0; i < mt / 2; i++) {
        const uint8_t *a0 = act + 2 * i * ab, *a1 = a0 + ab;
        for (int64_t p = 0; p < npw; p++) {
            uint8_t *v = sc + (i * npw + p) * 256;
            const int64_t src[4] = {p * 64, p * 64 + 32, xsec + p * 32, asec + p * 32};
            for (int t = 0; t < 4; t++) {
                memcpy(v + 64 * t, a0 + src[t], 32);
                memcpy(v + 64 * t + 32, a1 + src[t], 32);
            }
        }
    }
    return sc;
}

/* Four weight rows a quarter of the range apart a step (mt <= 4; at mt 5..8 two rows half the
 * range apart): rows far apart are sequential streams the hardware prefetcher follows. */
INL void kq45r_512(const int type, const int mt, const uint8_t *act, int64_t ab, const uint8_t *w,
                   int64_t nb, int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy) {
    int64_t n = n0;
    const int64_t rbytes = nb * q32_block_bytes(type);
    const int64_t q = (n1 - n0) / 4;
    /* worth joining when several weight rows reuse it (prefill tiles of a few rows do not) */
    void *block = NULL;
    const uint8_t *sc = n1 - n0 >= 8 ? rp_join(mt, act, ab, nb, &block) : NULL;
    if (mt <= 4 && q > 0 && q * rbytes >= 1024) {
        for (; n < n0 + q; n++)
            rows45r(type, mt, 4, act, ab, sc, w, nb, n, q, s0, s1, y, ldy);
        n = n0 + 4 * q;
    }
    const int64_t h = (n1 - n) / 2;
    if (h * rbytes >= 4096) {
        const int64_t e = n + h;
        for (; n < e; n++)
            rows45r(type, mt, 2, act, ab, sc, w, nb, n, h, s0, s1, y, ldy);
        n += h;
    }
    for (; n < n1; n++)
        rows45r(type, mt, 1, act, ab, sc, w, nb, n, 0, s0, s1, y, ldy);
    free(block);
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
#define K40(M) kq45r_512(T_Q4_0, M, act, ab, w, nb, n0, n1, s0, s1, y, ldy)
#define K41(M) kq45r_512(T_Q4_1, M, act, ab, w, nb, n0, n1, s0, s1, y, ldy)
#define K50(M) kq45r_512(T_Q5_0, M, act, ab, w, nb, n0, n1, s0, s1, y, ldy)
#define K51(M) kq45r_512(T_Q5_1, M, act, ab, w, nb, n0, n1, s0, s1, y, ldy)
#define K80(M) kq8_512(M, act, ab, w, nb, n0, n1, s0, s1, y, ldy)
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
