/* The q32 family's packed prefill path (AVX512-VNNI, m >= Q32_PACK_MIN_M): 16 weight rows are
 * decoded per K segment into a scratch with one output per lane (lane o = row n+o, 4 codes a
 * lane), so one vpdpbusd does 4 values x 16 outputs against one broadcast activation dword, the
 * block's exact int32 dot needs no horizontal sum, and the float tail (convert, d_w*d_a, FMA) is
 * paid once per 16 outputs instead of once per output. Weight rows go in pairs of packs (32
 * outputs, dot32) so each activation dword is broadcast once for two vpdpbusd (one pack: dot16,
 * for a last group of 16). GGUF's W is not changed: the scratch lives on the stack for one call. */
#include <stdint.h>

#include "q32_layout.h"
#include "q32_tile.h"

#if Q32_HAVE_X86
#include <immintrin.h>

#define TGT512 "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"
#define INL static inline __attribute__((always_inline, target(TGT512)))
#define PK_ROWS 16
#define PK_SEG 32                      /* blocks a packed segment */
#define PK_BLK (8 * 64 + 64 + 64)      /* a block's scratch: 8 code vectors, 16 d, 16 m */

/* 16x16 transpose of 32-bit elements: r[row] -> r[element] (as qk_pack512.c's). */
INL void pk_transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int e = 0; e < 4; e++) {
        const __m512i s0 = _mm512_shuffle_i32x4(r[e], r[4 + e], 0x44), s1 = _mm512_shuffle_i32x4(r[e], r[4 + e], 0xEE);
        const __m512i s2 = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0x44), s3 = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0xEE);
        t[e] = _mm512_shuffle_i32x4(s0, s2, 0x88);
        t[4 + e] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
        t[8 + e] = _mm512_shuffle_i32x4(s1, s3, 0x88);
        t[12 + e] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* The 32 codes of block `blk` (dwords 0-7) and, when `two`, of the next block (dwords 8-15) of
 * one row, as unsigned bytes in value order (Q8_0: biased by +128). */
INL __m512i row_codes2(const int type, const uint8_t *blk, const int two) {
    const int bs = q32_block_bytes(type);
    if (type == T_Q8_0) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(blk + 2));
        const __m256i b = two ? _mm256_loadu_si256((const __m256i *)(blk + bs + 2)) : _mm256_setzero_si256();
        return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1), _mm512_set1_epi8((char)0x80));
    }
    const int qo = q32_qs_off(type);
    const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + qo)));
    const __m256i b = two ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + bs + qo)))
                          : _mm256_setzero_si256();
    /* 128-bit lanes: low nibbles (values 0-15), high nibbles (16-31), the same for the next block */
    __m512i v = _mm512_and_si512(_mm512_srlv_epi64(_mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1),
                                                   _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                                 _mm512_set1_epi8(0x0F));
    if (q32_is5(type)) {
        const int ho = q32_qh_off(type);
        const uint64_t hb = (uint64_t)q32_ld32(blk + ho) | (two ? (uint64_t)q32_ld32(blk + bs + ho) << 32 : 0);
        v = _mm512_mask_add_epi8(v, (__mmask64)hb, v, _mm512_set1_epi8(0x10));
    }
    return v;
}

/* Blocks [b0, b1) of the 16 rows from `wr` (rb bytes apart) into scr: two blocks of all 16 rows
 * decoded into 16 registers (one a row) and transposed in registers to one register per 4-code
 * group (one row a lane). */
INL void pack16(const int type, const uint8_t *wr, int64_t rb, int64_t b0, int64_t b1, uint8_t *scr) {
    const int bs = q32_block_bytes(type);
    for (int64_t b = b0; b < b1; b += 2) {
        const int two = b + 1 < b1;
        uint8_t *out = scr + (b - b0) * PK_BLK;
        __m512i r[PK_ROWS];
        for (int o = 0; o < PK_ROWS; o++) r[o] = row_codes2(type, wr + o * rb + b * bs, two);
        pk_transpose16(r);
        for (int g = 0; g < 8; g++) _mm512_storeu_si512((void *)(out + g * 64), r[g]);
        if (two)
            for (int g = 0; g < 8; g++) _mm512_storeu_si512((void *)(out + PK_BLK + g * 64), r[8 + g]);
        for (int h = 0; h <= two; h++) {
            __attribute__((aligned(64))) uint16_t dh[PK_ROWS], mh[PK_ROWS];
            const uint8_t *bp = wr + (b + h) * bs;
            for (int o = 0; o < PK_ROWS; o++) {
                dh[o] = q32_ld16(bp + o * rb);
                mh[o] = q32_has_min(type) ? q32_ld16(bp + o * rb + 2) : 0;
            }
            uint8_t *ob = out + h * PK_BLK;
            _mm512_storeu_ps((void *)(ob + 512), _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)dh)));
            if (q32_has_min(type))
                _mm512_storeu_ps((void *)(ob + 576), _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)mh)));
        }
    }
}

/* mt activation rows x the 16 packed rows over blocks [b0, b1): y[r][n .. n+16) (+)= ...
 * The mt rows' int32 dots run as mt independent vpdpbusd chains, 4-code group by group; the float
 * operations and their order per output are those of one row alone (so any mt gives the same bits). */
INL void dot16(const int type, const int mt, const uint8_t *act, int64_t ab, int64_t nb, int64_t b0,
               int64_t b1, const uint8_t *scr, int first, float *y, int64_t ldy) {
    const int off = type == T_Q8_0 ? 128 : q32_offset(type);
    __m512 acc[8];
    for (int r = 0; r < mt; r++)
        acc[r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + r * ldy);
    const uint8_t *as = act + q32_act_s_off(nb), *ad = act + q32_act_d_off(nb);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *blk = scr + (b - b0) * PK_BLK;
        /* where the block's values 0-15 and 16-31 sit in an activation row (act_q) */
        int64_t lo, hi;
        if (type == T_Q8_0 || ((nb & 1) && b == nb - 1)) {
            lo = b * 32;
            hi = lo + 16;
        } else {
            lo = (b >> 1) * 64 + (b & 1) * 16;
            hi = lo + 32;
        }
        __m512i D[8];
        for (int r = 0; r < mt; r++)
            D[r] = _mm512_set1_epi32(-off * (int32_t)q32_ld32(as + r * ab + b * 4));
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i W = _mm512_loadu_si512((const void *)(blk + g * 64));
            const int64_t qa = g < 4 ? lo + 4 * g : hi + 4 * (g - 4);
#pragma GCC unroll 8
            for (int r = 0; r < mt; r++)
                D[r] = _mm512_dpbusd_epi32(D[r], W, _mm512_set1_epi32((int)q32_ld32(act + r * ab + qa)));
        }
        const __m512 dw = _mm512_loadu_ps((const void *)(blk + 512));
        for (int r = 0; r < mt; r++) {
            const float da = q32_ldf(ad + r * ab + b * 4);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D[r]), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[r]);
            if (q32_has_min(type)) {
                const int32_t s = (int32_t)q32_ld32(as + r * ab + b * 4);
                acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps((const void *)(blk + 576)), _mm512_set1_ps(da * (float)s), acc[r]);
            }
        }
    }
    for (int r = 0; r < mt; r++)
        _mm512_storeu_ps(y + r * ldy, acc[r]);
}

/* Where block b's values 0-15 (*lo) and 16-31 (*hi) sit in an activation row (act_q). */
INL void act_lohi(const int type, int64_t nb, int64_t b, int64_t *lo, int64_t *hi) {
    if (type == T_Q8_0 || ((nb & 1) && b == nb - 1)) {
        *lo = b * 32;
        *hi = *lo + 16;
    } else {
        *lo = (b >> 1) * 64 + (b & 1) * 16;
        *hi = *lo + 32;
    }
}

/* dot16 for two packs at once (32 outputs: scratch sa for y[.. n .. n+16), sb for n+16 ..):
 * mt <= PK_RT activation rows, each activation dword broadcast once for both packs' vpdpbusd and
 * each packed code vector used by all mt rows. Per output the same int32 block dot and the same
 * float operations in the same order as dot16: the same bits. */
#define PK_RT 6
INL void dot32(const int type, const int mt, const uint8_t *act, int64_t ab, int64_t nb, int64_t b0,
               int64_t b1, const uint8_t *sa, const uint8_t *sb, int first, float *y, int64_t ldy) {
    const int off = type == T_Q8_0 ? 128 : q32_offset(type);
    __m512 acc0[PK_RT], acc1[PK_RT];
    const uint8_t *ar[PK_RT];
    for (int r = 0; r < mt; r++) {
        ar[r] = act + r * ab;
        acc0[r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + r * ldy);
        acc1[r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + r * ldy + 16);
    }
    const int64_t so = q32_act_s_off(nb), dof = q32_act_d_off(nb);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *ba = sa + (b - b0) * PK_BLK, *bb = sb + (b - b0) * PK_BLK;
        int64_t lo, hi;
        act_lohi(type, nb, b, &lo, &hi);
        __m512i D0[PK_RT], D1[PK_RT];
        for (int r = 0; r < mt; r++) {
            D0[r] = _mm512_set1_epi32(-off * (int32_t)q32_ld32(ar[r] + so + b * 4));
            D1[r] = D0[r];
        }
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i WA = _mm512_loadu_si512((const void *)(ba + g * 64));
            const __m512i WB = _mm512_loadu_si512((const void *)(bb + g * 64));
            const int64_t qa = g < 4 ? lo + 4 * g : hi + 4 * (g - 4);
#pragma GCC unroll 8
            for (int r = 0; r < mt; r++) {
                const __m512i A = _mm512_set1_epi32((int)q32_ld32(ar[r] + qa));
                D0[r] = _mm512_dpbusd_epi32(D0[r], WA, A);
                D1[r] = _mm512_dpbusd_epi32(D1[r], WB, A);
            }
        }
        const __m512 dwa = _mm512_loadu_ps((const void *)(ba + 512)), dwb = _mm512_loadu_ps((const void *)(bb + 512));
        for (int r = 0; r < mt; r++) {
            const float da = q32_ldf(ar[r] + dof + b * 4);
            acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D0[r]), _mm512_mul_ps(dwa, _mm512_set1_ps(da)), acc0[r]);
            acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D1[r]), _mm512_mul_ps(dwb, _mm512_set1_ps(da)), acc1[r]);
            if (q32_has_min(type)) {
                const __m512 ds = _mm512_set1_ps(da * (float)(int32_t)q32_ld32(ar[r] + so + b * 4));
                acc0[r] = _mm512_fmadd_ps(_mm512_loadu_ps((const void *)(ba + 576)), ds, acc0[r]);
                acc1[r] = _mm512_fmadd_ps(_mm512_loadu_ps((const void *)(bb + 576)), ds, acc1[r]);
            }
        }
    }
    for (int r = 0; r < mt; r++) {
        _mm512_storeu_ps(y + r * ldy, acc0[r]);
        _mm512_storeu_ps(y + r * ldy + 16, acc1[r]);
    }
}

/* dot32 over rows [0, m) in tiles of PK_RT (the last one shorter). */
_Static_assert(PK_RT == 6, "dot32_rows has remainder cases 1-5");
INL void dot32_rows(const int type, const uint8_t *act, int64_t m, int64_t ab, int64_t nb, int64_t b0,
                    int64_t b1, const uint8_t *sa, const uint8_t *sb, float *y, int64_t ldy) {
    const int first = b0 == 0;
    int64_t i = 0;
    for (; i + PK_RT <= m; i += PK_RT)
        dot32(type, PK_RT, act + i * ab, ab, nb, b0, b1, sa, sb, first, y + i * ldy, ldy);
    const uint8_t *a = act + i * ab;
    float *yy = y + i * ldy;
    switch (m - i) {
    case 0: break;
    case 1: dot32(type, 1, a, ab, nb, b0, b1, sa, sb, first, yy, ldy); break;
    case 2: dot32(type, 2, a, ab, nb, b0, b1, sa, sb, first, yy, ldy); break;
    case 3: dot32(type, 3, a, ab, nb, b0, b1, sa, sb, first, yy, ldy); break;
    case 4: dot32(type, 4, a, ab, nb, b0, b1, sa, sb, first, yy, ldy); break;
    default: dot32(type, 5, a, ab, nb, b0, b1, sa, sb, first, yy, ldy); break;
    }
}

INL int64_t packed(const int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t nb,
                   int64_t n0, int64_t n1, float *y, int64_t ldy) {
    __attribute__((aligned(64))) uint8_t scr[2 * PK_SEG * PK_BLK];
    const int64_t rb = nb * q32_block_bytes(type), ab = q32_act_row_bytes(type, nb);
    int64_t n = n0;
    /* pairs of packs: 32 weight rows a segment against every activation row */
    for (; n + 2 * PK_ROWS <= n1; n += 2 * PK_ROWS) {
        for (int64_t b0 = 0; b0 < nb; b0 += PK_SEG) {
            int64_t b1 = nb - b0 < PK_SEG ? nb : b0 + PK_SEG;
            pack16(type, w + n * rb, rb, b0, b1, scr);
            pack16(type, w + (n + PK_ROWS) * rb, rb, b0, b1, scr + PK_SEG * PK_BLK);
            dot32_rows(type, act, m, ab, nb, b0, b1, scr, scr + PK_SEG * PK_BLK, y + n, ldy);
        }
    }
    for (; n + PK_ROWS <= n1; n += PK_ROWS) {
        for (int64_t b0 = 0; b0 < nb; b0 += PK_SEG) {
            int64_t b1 = nb - b0 < PK_SEG ? nb : b0 + PK_SEG;
            pack16(type, w + n * rb, rb, b0, b1, scr);
            for (int64_t i = 0; i < m; i += 8) {
                int mt = m - i < 8 ? (int)(m - i) : 8;
                const uint8_t *a = act + i * ab;
                float *yy = y + i * ldy + n;
                switch (mt) {
                case 1: dot16(type, 1, a, ab, nb, b0, b1, scr, b0 == 0, yy, ldy); break;
                case 2: dot16(type, 2, a, ab, nb, b0, b1, scr, b0 == 0, yy, ldy); break;
                case 3: dot16(type, 3, a, ab, nb, b0, b1, scr, b0 == 0, yy, ldy); break;
                case 4: dot16(type, 4, a, ab, nb, b0, b1, scr, b0 == 0, yy, ldy); break;
                case 5: dot16(type, 5, a, ab, nb, b0, b1, scr, b0 == 0, yy, ldy); break;
                case 6: dot16(type, 6, a, ab, nb, b0, b1, scr, b0 == 0, yy, ldy); break;
                case 7: dot16(type, 7, a, ab, nb, b0, b1, scr, b0 == 0, yy, ldy); break;
                default: dot16(type, 8, a, ab, nb, b0, b1, scr, b0 == 0, yy, ldy); break;
                }
            }
        }
    }
    return n;
}

__attribute__((target(TGT512))) int64_t q32_packed_avx512vnni(int type, const uint8_t *act, int64_t m,
                                                             const uint8_t *w, int64_t nb, int64_t n0,
                                                             int64_t n1, float *y, int64_t ldy) {
    switch (type) {
    case T_Q4_0: return packed(T_Q4_0, act, m, w, nb, n0, n1, y, ldy);
    case T_Q4_1: return packed(T_Q4_1, act, m, w, nb, n0, n1, y, ldy);
    case T_Q5_0: return packed(T_Q5_0, act, m, w, nb, n0, n1, y, ldy);
    case T_Q5_1: return packed(T_Q5_1, act, m, w, nb, n0, n1, y, ldy);
    default: return packed(T_Q8_0, act, m, w, nb, n0, n1, y, ldy);
    }
}
#else
typedef int q32_pack512_unused;
#endif
