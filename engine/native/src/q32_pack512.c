/* The q32 family's packed prefill path (AVX512-VNNI, m >= Q32_PACK_MIN_M): 16 weight rows are
 * decoded per K segment into a scratch with one output per lane (lane o = row n+o, 4 codes a
 * lane), so one vpdpbusd does 4 values x 16 outputs against one broadcast activation dword, the
 * block's exact int32 dot needs no horizontal sum, and the float tail (convert, d_w*d_a, FMA) is
 * paid once per 16 outputs instead of once per output. GGUF's W is not changed: the scratch lives
 * on the stack for one call. */
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

/* Where value j of block b sits in the activation row's q section (q32_layout.h). */
INL int64_t act_q(const int type, int64_t nb, int64_t b, int j) {
    if (type == T_Q8_0 || ((nb & 1) && b == nb - 1))
        return b * 32 + j;
    return (b >> 1) * 64 + (j < 16 ? (b & 1) * 16 + j : 32 + (b & 1) * 16 + (j - 16));
}

/* Blocks [b0, b1) of the 16 rows from `wr` (rb bytes apart) into scr. */
INL void pack16(const int type, const uint8_t *wr, int64_t rb, int64_t b0, int64_t b1, uint8_t *scr) {
    const int bs = q32_block_bytes(type), qo = q32_qs_off(type), ho = q32_qh_off(type);
    __attribute__((aligned(64))) uint8_t codes[PK_ROWS * 32];
    __attribute__((aligned(64))) uint16_t dh[PK_ROWS], mh[PK_ROWS];
    const __m512i gidx = _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
    for (int64_t b = b0; b < b1; b++) {
        uint8_t *out = scr + (b - b0) * PK_BLK;
        for (int o = 0; o < PK_ROWS; o++) {
            const uint8_t *blk = wr + o * rb + b * bs;
            __m256i v;
            if (type == T_Q8_0) {
                v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), _mm256_set1_epi8((char)0x80));
            } else {
                __m128i x = _mm_loadu_si128((const __m128i *)(blk + qo));
                const __m128i m4 = _mm_set1_epi8(0x0F);
                v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
                if (q32_is5(type))
                    v = _mm256_mask_add_epi8(v, (__mmask32)q32_ld32(blk + ho), v, _mm256_set1_epi8(0x10));
            }
            _mm256_store_si256((__m256i *)(void *)(codes + o * 32), v);
            dh[o] = q32_ld16(blk);
            mh[o] = q32_has_min(type) ? q32_ld16(blk + 2) : 0;
        }
        /* dword g of each row's 32 codes -> one vector of 16 rows (a 16 x 8 dword transpose) */
        for (int g = 0; g < 8; g++)
            _mm512_storeu_si512((void *)(out + g * 64), _mm512_i32gather_epi32(gidx, (const void *)(codes + 4 * g), 4));
        _mm512_storeu_ps((void *)(out + 512), _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)dh)));
        if (q32_has_min(type))
            _mm512_storeu_ps((void *)(out + 576), _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)mh)));
    }
}

/* mt activation rows x the 16 packed rows over blocks [b0, b1): y[r][n .. n+16) (+)= ... */
INL void dot16(const int type, const int mt, const uint8_t *act, int64_t ab, int64_t nb, int64_t b0,
               int64_t b1, const uint8_t *scr, int first, float *y, int64_t ldy) {
    const int off = type == T_Q8_0 ? 128 : q32_offset(type);
    __m512 acc[8];
    for (int r = 0; r < mt; r++)
        acc[r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + r * ldy);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *blk = scr + (b - b0) * PK_BLK;
        __m512i W[8];
        for (int g = 0; g < 8; g++) W[g] = _mm512_loadu_si512((const void *)(blk + g * 64));
        const __m512 dw = _mm512_loadu_ps((const void *)(blk + 512));
        const __m512 mw = q32_has_min(type) ? _mm512_loadu_ps((const void *)(blk + 576)) : _mm512_setzero_ps();
        for (int r = 0; r < mt; r++) {
            const uint8_t *a = act + r * ab;
            int32_t s = (int32_t)q32_ld32(a + q32_act_s_off(nb) + b * 4);
            float da = q32_ldf(a + q32_act_d_off(nb) + b * 4);
            __m512i D = _mm512_set1_epi32(-off * s);
            for (int g = 0; g < 8; g++)
                D = _mm512_dpbusd_epi32(D, W[g], _mm512_set1_epi32((int)q32_ld32(a + act_q(type, nb, b, 4 * g))));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[r]);
            if (q32_has_min(type))
                acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(da * (float)s), acc[r]);
        }
    }
    for (int r = 0; r < mt; r++)
        _mm512_storeu_ps(y + r * ldy, acc[r]);
}

INL int64_t packed(const int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t nb,
                   int64_t n0, int64_t n1, float *y, int64_t ldy) {
    __attribute__((aligned(64))) uint8_t scr[PK_SEG * PK_BLK];
    const int64_t rb = nb * q32_block_bytes(type), ab = q32_act_row_bytes(type, nb);
    int64_t n = n0;
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
