/* Prefill (m >= QK_PACK_MIN) for Q4_K Q5_K Q6_K at AVX512-VNNI: 16 weight rows are decoded once
 * per call into an interleaved scratch layout, one output per 32-bit lane, and every activation
 * row is dotted with all 16 at once: one vpdpbusd per 4 values x 16 outputs (u8 levels x s8
 * activations, broadcast), the sub-block scales applied per sub-block with one vpmulld, the
 * float tail (d * d_act, the mins / -32 offset from bsums) once per super-block for 16 outputs.
 * In GGUF's own row layout (qk_avx512.c) each output has its own lanes, so that tail is paid per
 * output and dominates at m = 64. Same numerics as the other paths: exact int32 per super-block.
 * W itself is never modified; the scratch (~50 KB + 64 B an activation row) is malloc'ed per
 * call (NULL: the caller falls back to the row-layout kernels). */
#include <stdlib.h>

#include "qk_impl.h"

#ifdef QK_X86
#include <immintrin.h>

#define QK_TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define QK_INL static inline __attribute__((always_inline)) QK_TGT
#define PR 16        /* weight rows a pack: one per int32 lane */
#define KC 8         /* super-blocks a pack (scratch ~50 KB) */
#ifndef PT
#define PT 8         /* activation rows in flight: 8 independent vpdpbusd chains */
#endif

/* One packed super-block of PR rows. */
struct pk_sb {
    uint8_t lev[64][PR][4];    /* group g of 4 levels, row r */
    int32_t sc[16][PR];        /* sub-block scales (8 used by Q4_K/Q5_K) */
    int32_t mn[8][PR];         /* int16 pairs for vpdpwssd against the activation's bsums dword q:
                                * Q4_K/Q5_K {min q, min q} (sub-block q spans bsums 2q, 2q+1);
                                * Q6_K {scale 2q, scale 2q+1} (its -32 offset: 32 * sum sc * bsums) */
    float d[PR], dmin[PR];
};

/* The 256 levels of one super-block as 4 registers of 64 values in order (as in qk_avx512.c). */
QK_INL void pk_levels(int type, const uint8_t *x, __m512i q[4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    if (type == QK_Q6_K) {
        const __m512i m30 = _mm512_set1_epi8(0x30);
        const __m512i rot01 = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2);
        const __m512i rot23 = _mm512_setr_epi64(0, 0, 0, 0, 62, 62, 62, 62);
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512((const void *)(x + 64 * h));
            const __m512i hv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x + 128 + 32 * h)));
            q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_rolv_epi64(hv, rot01), m30));
            q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                           _mm512_and_si512(_mm512_rolv_epi64(hv, rot23), m30));
        }
        return;
    }
    const int five = type == QK_Q5_K;
    const uint8_t *qs = x + (five ? 48 : 16);
    const __m512i nib = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4), m10 = _mm512_set1_epi8(0x10);
    const __m512i qhv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x + 16)));
    for (int j = 0; j < 4; j++) {
        const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * j)));
        q[j] = _mm512_and_si512(_mm512_srlv_epi64(v, nib), m4);
        if (five) {
            const long long a = (4 - 2 * j) & 63, b = (3 - 2 * j) & 63;
            q[j] = _mm512_or_si512(q[j], _mm512_and_si512(_mm512_rolv_epi64(qhv, _mm512_setr_epi64(a, a, a, a, b, b, b, b)), m10));
        }
    }
}

/* 16x16 transpose of 32-bit elements: r[row] -> r[element]. */
QK_INL void pk_transpose(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {   /* r[4i+e], 128-bit lane L: rows 4i..4i+3 of element 4L+e */
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

/* Q4_K/Q5_K's 12 scale bytes (read as 16: the block goes on) -> bytes 0-7 scales, 8-15 mins. */
QK_INL __m128i pk_scales(const uint8_t *p) {
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    const __m128i lo = _mm_and_si128(v, _mm_set1_epi32(0x3f3f3f3f));
    const __m128i u2 = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2));
    const __m128i s = _mm_and_si128(_mm_srlv_epi32(u2, _mm_setr_epi32(0, 4, 0, 4)), _mm_set1_epi32(0x0f0f0f0f));
    const __m128i r = _mm_and_si128(_mm_srli_epi32(v, 6), _mm_set1_epi32(0x03030303));
    return _mm_unpacklo_epi32(lo, _mm_or_si128(s, _mm_slli_epi32(r, 4)));
}

/* Packs super-block x[r] of each of the 16 rows. */
static QK_TGT void pk_pack(int type, const uint8_t *const *x, struct pk_sb *p) {
    __m512i q[PR][4];
    for (int r = 0; r < PR; r++) pk_levels(type, x[r], q[r]);
    for (int c = 0; c < 4; c++) {   /* chunk c: groups 16c .. 16c+15 */
        __m512i t[PR];
        for (int r = 0; r < PR; r++) t[r] = q[r][c];
        pk_transpose(t);
        for (int g = 0; g < 16; g++) _mm512_storeu_si512((void *)p->lev[16 * c + g], t[g]);
    }
    /* scales: one register per row (lane j = sub-block j; Q4_K/Q5_K: lanes 8-15 the mins),
     * transposed to one register per sub-block (lane r = row r) */
    __m512i t[PR];
    float dh[PR], dm[PR];
    for (int r = 0; r < PR; r++) {
        uint16_t h;
        if (type == QK_Q6_K) {
            t[r] = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(x[r] + 192)));
            memcpy(&h, x[r] + 208, 2);
            dh[r] = _cvtsh_ss(h);
        } else {
            t[r] = _mm512_cvtepu8_epi32(pk_scales(x[r] + 4));
            memcpy(&h, x[r], 2);
            dh[r] = _cvtsh_ss(h);
            memcpy(&h, x[r] + 2, 2);
            dm[r] = _cvtsh_ss(h);
        }
    }
    pk_transpose(t);
    _mm512_storeu_ps(p->d, _mm512_loadu_ps(dh));
    if (type == QK_Q6_K) {
        for (int j = 0; j < 16; j++) _mm512_storeu_si512((void *)p->sc[j], t[j]);
        for (int q = 0; q < 8; q++)
            _mm512_storeu_si512((void *)p->mn[q], _mm512_or_si512(_mm512_and_si512(t[2 * q], _mm512_set1_epi32(0xFFFF)),
                                                                   _mm512_slli_epi32(t[2 * q + 1], 16)));
        _mm512_storeu_ps(p->dmin, _mm512_setzero_ps());   /* unused; never read uninitialised */
    } else {
        _mm512_storeu_ps(p->dmin, _mm512_loadu_ps(dm));
        for (int j = 0; j < 8; j++) {
            _mm512_storeu_si512((void *)p->sc[j], t[j]);
            _mm512_storeu_si512((void *)p->mn[j], _mm512_or_si512(t[8 + j], _mm512_slli_epi32(t[8 + j], 16)));
        }
    }
}

/* acc[i][0..15] += the super-block's dot of activation rows a[i] (Q8_K blocks) with the pack:
 * exact int32 sums per lane, then qk_tail45/qk_tail6's float operations lane by lane. Every step
 * is an exact integer rearrangement, so the int32 totals (and the bits) are those of the other paths:
 * - Q4_K: each 32-value sub-block is two 16-value halves A (groups 0-3) and B (4-7); with levels
 *   <= 15 and |q| <= 127 each half is within +-30480, an int16. One dpbusd chain makes
 *   X = A * 65536 + B (chain A, shift left 16, chain B on top) and one vpdpwssd against the
 *   pack's {sc, sc} word pairs adds sc * (A + B) (X's halves read as int16 are B and A exactly):
 *   no vpmulld, no separate add.
 * - Q5_K (levels <= 31) and Q6_K (<= 63): the sub-block sum with one vpmulld by the scale.
 * - The bsums terms (Q4_K/Q5_K's mins, Q6_K's -32 offset) are 8 vpdpwssd per row against the raw
 *   bsums dwords, after the levels (a register of their own, only live in the tail). */
/* acc + dpbusd(w, the int32 at p broadcast): in asm so that the broadcast stays folded into the
 * instruction (GCC otherwise hoists the broadcasts into registers and spills). */
QK_INL __m512i pk_dpb(__m512i acc, __m512i w, const uint8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)p));
    return acc;
}

QK_INL __m512i pk_dpw(__m512i acc, __m512i w, const uint8_t *p) {
    __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)p));
    return acc;
}

QK_INL void pk_block(const struct pk_sb *p, const uint8_t *const *a, const int mt, const int type,
                     float *acc) {
    const int q6 = type == QK_Q6_K;
    __m512i isum[PT];
    for (int i = 0; i < mt; i++) isum[i] = _mm512_setzero_si512();
    {
        const int ns = q6 ? 16 : 8, gps = q6 ? 4 : 8;   /* sub-blocks; 4-value groups a sub-block */
        for (int j = 0; j < ns; j++) {
            __m512i x[PT];
            for (int i = 0; i < mt; i++) x[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int u = 0; u < gps; u++) {
                const __m512i w = _mm512_loadu_si512((const void *)p->lev[gps * j + u]);
#pragma GCC unroll 16
                for (int i = 0; i < mt; i++)
                    x[i] = pk_dpb(x[i], w, a[i] + Q8K_Q + 4 * (gps * j + u));
            }
            const __m512i scv = _mm512_loadu_si512((const void *)p->sc[j]);
            for (int i = 0; i < mt; i++) isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(x[i], scv));
        }
    }
    const __m512 dv = _mm512_loadu_ps(p->d), dminv = _mm512_loadu_ps(p->dmin);
    for (int i = 0; i < mt; i++) {
        __m512i bsc = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++)
            bsc = pk_dpw(bsc, _mm512_loadu_si512((const void *)p->mn[q]), a[i] + Q8K_BSUMS + 4 * q);
        float *o = acc + (size_t)i * PR;
        if (q6)
            isum[i] = _mm512_sub_epi32(isum[i], _mm512_slli_epi32(bsc, 5));
        __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[i]), dv);
        if (!q6)
            t = _mm512_sub_ps(t, _mm512_mul_ps(_mm512_cvtepi32_ps(bsc), dminv));
        t = _mm512_mul_ps(t, _mm512_set1_ps(qk_act_d(a[i])));
        _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), t));
    }
}

static QK_TGT void pk_rows(const struct pk_sb *p, int kc, const uint8_t *act, int64_t ab, int64_t b0,
                           int mt, int type, float *acc) {
    const uint8_t *a[PT];
    for (int b = 0; b < kc; b++) {
        for (int i = 0; i < mt; i++) a[i] = act + i * ab + (b0 + b) * Q8K_BYTES;
#define PK_TYPES(t) \
    if (type == QK_Q4_K) pk_block(p + b, a, t, QK_Q4_K, acc); \
    else if (type == QK_Q5_K) pk_block(p + b, a, t, QK_Q5_K, acc); \
    else pk_block(p + b, a, t, QK_Q6_K, acc);
#define PK_CASE(t) case t: PK_TYPES(t) break;
        switch (mt) {
        PK_CASE(1) PK_CASE(2) PK_CASE(3) PK_CASE(4) PK_CASE(5) PK_CASE(6) PK_CASE(7)
#if PT > 8
        PK_CASE(8) PK_CASE(9)
#endif
#if PT > 10
        PK_CASE(10) PK_CASE(11)
#endif
#if PT > 12
#error "PT above 12: add cases"
#endif
        default: PK_TYPES(PT) break;
        }
#undef PK_CASE
#undef PK_TYPES
    }
}


/* Two packs at once (32 weight rows, p0 and p1 = p0 + KC2): each activation dword is broadcast
 * into a register once for two vpdpbusd (one per pack) instead of once per vpdpbusd as a memory
 * operand; a broadcast per vpdpbusd caps the loop at ~5.3 G vpdpbusd a second on this Xeon,
 * sharing it gives ~6.5 (16 chains, no scales). PT2 rows: 4 * PT2 accumulators + 5 registers.
 * Each output's integer sums and float tail are those of pk_block: the same bits. */
#define PT2 6
#define KC2 4        /* super-blocks a pack when paired: two packs ~46 KB */

/* x0 += dpbusd(w0, bcast *p), x1 += dpbusd(w1, bcast *p): one broadcast for both. */
#define PK_DPB2(x0, x1, w0, w1, p) do { \
        __m512i t_; \
        __asm__("vpbroadcastd %[m], %[t]\n\tvpdpbusd %[t], %[a], %[u]\n\tvpdpbusd %[t], %[b], %[v]" \
                : [u] "+v"(x0), [v] "+v"(x1), [t] "=&v"(t_) \
                : [a] "v"(w0), [b] "v"(w1), [m] "m"(*(const int32_t *)(const void *)(p))); \
    } while (0)
#define PK_DPW2(x0, x1, w0, w1, p) do { \
        __m512i t_; \
        __asm__("vpbroadcastd %[m], %[t]\n\tvpdpwssd %[t], %[a], %[u]\n\tvpdpwssd %[t], %[b], %[v]" \
                : [u] "+v"(x0), [v] "+v"(x1), [t] "=&v"(t_) \
                : [a] "v"(w0), [b] "v"(w1), [m] "m"(*(const int32_t *)(const void *)(p))); \
    } while (0)

QK_INL void pk_tail(const struct pk_sb *p, __m512i isum, __m512i bsc, const uint8_t *a, int q6, float *o) {
    if (q6)
        isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(bsc, 5));
    __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_loadu_ps(p->d));
    if (!q6)
        t = _mm512_sub_ps(t, _mm512_mul_ps(_mm512_cvtepi32_ps(bsc), _mm512_loadu_ps(p->dmin)));
    t = _mm512_mul_ps(t, _mm512_set1_ps(qk_act_d(a)));
    _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), t));
}

/* acc[i][0..15] += rows a[i] . pack p0, acc[i][16..31] += rows a[i] . pack p1 (acc rows of 32). */
QK_INL void pk_block2(const struct pk_sb *p0, const struct pk_sb *p1, const uint8_t *const *a, const int mt,
                      const int type, float *acc) {
    const int q6 = type == QK_Q6_K;
    const int ns = q6 ? 16 : 8, gps = q6 ? 4 : 8;
    __m512i s0[PT2], s1[PT2];
    for (int i = 0; i < mt; i++) s0[i] = s1[i] = _mm512_setzero_si512();
    for (int j = 0; j < ns; j++) {
        __m512i x0[PT2], x1[PT2];
        for (int i = 0; i < mt; i++) x0[i] = x1[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int u = 0; u < gps; u++) {
            const __m512i w0 = _mm512_loadu_si512((const void *)p0->lev[gps * j + u]);
            const __m512i w1 = _mm512_loadu_si512((const void *)p1->lev[gps * j + u]);
#pragma GCC unroll 16
            for (int i = 0; i < mt; i++) PK_DPB2(x0[i], x1[i], w0, w1, a[i] + Q8K_Q + 4 * (gps * j + u));
        }
        const __m512i c0 = _mm512_loadu_si512((const void *)p0->sc[j]), c1 = _mm512_loadu_si512((const void *)p1->sc[j]);
        for (int i = 0; i < mt; i++) {
            s0[i] = _mm512_add_epi32(s0[i], _mm512_mullo_epi32(x0[i], c0));
            s1[i] = _mm512_add_epi32(s1[i], _mm512_mullo_epi32(x1[i], c1));
        }
    }
    for (int i = 0; i < mt; i++) {
        __m512i b0 = _mm512_setzero_si512(), b1 = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++)
            PK_DPW2(b0, b1, _mm512_loadu_si512((const void *)p0->mn[q]), _mm512_loadu_si512((const void *)p1->mn[q]),
                    a[i] + Q8K_BSUMS + 4 * q);
        pk_tail(p0, s0[i], b0, a[i], q6, acc + (size_t)i * 2 * PR);
        pk_tail(p1, s1[i], b1, a[i], q6, acc + (size_t)i * 2 * PR + PR);
    }
}

static QK_TGT void pk_rows2(const struct pk_sb *p, int kc, const uint8_t *act, int64_t ab, int64_t b0,
                            int mt, int type, float *acc) {
    const uint8_t *a[PT2];
    for (int b = 0; b < kc; b++) {
        for (int i = 0; i < mt; i++) a[i] = act + i * ab + (b0 + b) * Q8K_BYTES;
#define PK_TYPES(t) \
    if (type == QK_Q4_K) pk_block2(p + b, p + KC2 + b, a, t, QK_Q4_K, acc); \
    else if (type == QK_Q5_K) pk_block2(p + b, p + KC2 + b, a, t, QK_Q5_K, acc); \
    else pk_block2(p + b, p + KC2 + b, a, t, QK_Q6_K, acc);
#define PK_CASE(t) case t: PK_TYPES(t) break;
        switch (mt) {
        PK_CASE(1) PK_CASE(2) PK_CASE(3) PK_CASE(4) PK_CASE(5)
        default: PK_TYPES(PT2) break;
        }
#undef PK_CASE
#undef PK_TYPES
    }
}

/* Rows [n0, n0 + 16 * tiles) for all m activation rows; 0, or -1 (nothing written) when the
 * scratch cannot be allocated. */
QK_TGT int qk_gemm_packed512(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                             int64_t n0, int64_t tiles, float *y, int64_t ldy) {
    const int64_t nb = k / QK_BLOCK, rb = nb * qk_block_bytes(type), ab = nb * Q8K_BYTES;
    struct pk_sb *pack = malloc(sizeof(struct pk_sb) * KC);
    float *acc = malloc(sizeof(float) * 2 * PR * (size_t)m);
    if (pack == NULL || acc == NULL) {
        free(pack);
        free(acc);
        return -1;
    }
    int64_t t = 0;
#ifndef QK_NO_PAIR
    for (; t + 2 <= tiles; t += 2) {   /* tiles in pairs: pk_block2 */
        const int64_t nt = n0 + t * PR;
        memset(acc, 0, sizeof(float) * 2 * PR * (size_t)m);
        for (int64_t b0 = 0; b0 < nb; b0 += KC2) {
            const int kc = nb - b0 < KC2 ? (int)(nb - b0) : KC2;
            for (int h = 0; h < 2; h++)
                for (int b = 0; b < kc; b++) {
                    const uint8_t *x[PR];
                    for (int r = 0; r < PR; r++) x[r] = w + (nt + h * PR + r) * rb + (b0 + b) * qk_block_bytes(type);
                    pk_pack(type, x, pack + h * KC2 + b);
                }
            for (int64_t i0 = 0; i0 < m; i0 += PT2) {
                const int mt = m - i0 < PT2 ? (int)(m - i0) : PT2;
                pk_rows2(pack, kc, act + i0 * ab, ab, b0, mt, type, acc + i0 * 2 * PR);
            }
        }
        for (int64_t i = 0; i < m; i++) memcpy(y + i * ldy + nt, acc + i * 2 * PR, sizeof(float) * 2 * PR);
    }
#endif
    for (; t < tiles; t++) {
        const int64_t nt = n0 + t * PR;
        memset(acc, 0, sizeof(float) * PR * (size_t)m);
        for (int64_t b0 = 0; b0 < nb; b0 += KC) {
            const int kc = nb - b0 < KC ? (int)(nb - b0) : KC;
            for (int b = 0; b < kc; b++) {
                const uint8_t *x[PR];
                for (int r = 0; r < PR; r++) x[r] = w + (nt + r) * rb + (b0 + b) * qk_block_bytes(type);
                pk_pack(type, x, pack + b);
            }
            for (int64_t i0 = 0; i0 < m; i0 += PT) {
                const int mt = m - i0 < PT ? (int)(m - i0) : PT;
                pk_rows(pack, kc, act + i0 * ab, ab, b0, mt, type, acc + i0 * PR);
            }
        }
        for (int64_t i = 0; i < m; i++) memcpy(y + i * ldy + nt, acc + i * PR, sizeof(float) * PR);
    }
    free(pack);
    free(acc);
    return 0;
}
#endif
