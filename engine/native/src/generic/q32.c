/* Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 (blocks of 32): the activation quantizer, the scalar kernel, and the
 * loop that tiles a call and hands tiles to the kernel of the current ISA (the dispatch table,
 * kernel_table.h: q32_x86.c, q32_avx512.c, q32_arm.c).
 * Layouts: q32_layout.h. Numerics are llama.cpp's: int8 activations per block of 32 (d = amax/127,
 * round to nearest), integer dot products per block, float32 accumulation. */
#include <string.h>

#include "family.h"
#include "kernel_table.h"
#include "q32_layout.h"
#include "q32_tile.h"

int q32_handles(int type) { return q32_block_bytes(type) > 0; }
int64_t q32_row_bytes(int type, int64_t k) { return k / 32 * q32_block_bytes(type); }
int64_t q32_act_bytes(int type, int64_t k) { return q32_act_row_bytes(type, k / 32); }

float q32_half_to_float(uint16_t h) { return amber_half_to_float(h); }

/* Round to nearest, ties to even, for |v| <= 127.5; NaN -> 0 (no UB on hostile inputs). */
static int8_t round_q(float v) {
    if (!(v == v))
        return 0;
    if (v > 127.f) v = 127.f;
    if (v < -127.f) v = -127.f;
    float t = v + 12582912.f;   /* 1.5 * 2^23: round to nearest even (no -ffast-math here) */
    return (int8_t)(int)(t - 12582912.f);
}

/* One block of 32: the codes in natural order, d and the sum of the codes. */
void q32_quant_block_scalar(const float *x, int8_t *q, float *d_out, int32_t *s_out) {
    float amax = 0;
    for (int i = 0; i < 32; i++) {
        float a = x[i] < 0 ? -x[i] : x[i];
        amax = a > amax ? a : amax;   /* a NaN never wins: it compares false */
    }
    float d = amax / 127.f, id = d > 0 ? 1.f / d : 0.f;
    int32_t s = 0;
    for (int i = 0; i < 32; i++) {
        q[i] = round_q(x[i] * id);
        s += q[i];
    }
    *d_out = d;
    *s_out = s;
}

void q32_quantize_act(int type, const float *x, int64_t k, void *out) {
    int64_t nb = k / 32, np = (nb + 1) / 2;
    uint8_t *o = out;
    uint8_t *dsec = o + q32_act_d_off(nb), *ssec = o + q32_act_s_off(nb), *xsec = o + q32_act_x_off(nb);
    int off = q32_offset(type), has_min = q32_has_min(type);
    q32_quant_fn quant = amber_kernels_now()->q32_quant;   /* every ISA's: the scalar bytes */
    for (int64_t b = 0; b < nb; b++, x += 32) {
        int8_t q[32];
        float d;
        int32_t s;
        quant(x, q, &d, &s);
        memcpy(o + q32_act_q_index(type, nb, b, 0), q, 16);
        memcpy(o + q32_act_q_index(type, nb, b, 16), q + 16, 16);
        memcpy(dsec + b * 4, &d, 4);
        memcpy(ssec + b * 4, &s, 4);
        if (type == T_Q8_0) {
            int32_t bias = -16 * s;
            memcpy(xsec + b * 4, &bias, 4);
            continue;
        }
        /* pair p = b/2: dexp[p][half*4 .. +4) and aux likewise; a lone last block spans all 8 */
        int64_t p = b >> 1;
        int half = (int)(b & 1), lone = (nb & 1) && b == nb - 1;
        uint8_t *dexp = xsec + p * 32, *aux = xsec + np * 32 + p * 32;
        for (int l = 0; l < (lone ? 8 : 4); l++)
            memcpy(dexp + (half * 4 + l) * 4, &d, 4);
        for (int l = 0; l < (lone ? 8 : 4); l++) {
            uint8_t *slot = aux + (half * 4 + l) * 4;
            if (l >= 4) {
                memset(slot, 0, 4);
            } else if (has_min) {
                float v = d * (float)s * 0.25f;
                memcpy(slot, &v, 4);
            } else {
                int32_t v = -(off / 4) * s;
                memcpy(slot, &v, 4);
            }
        }
    }
}

/* Integer dot of one weight block with its activation codes, in the weight's unsigned (or for
 * Q8_0 signed) codes; the caller removes the offset with the block's sum of codes. */
static inline int32_t block_dot(const int type, const uint8_t *blk, const int8_t *alo,
                                const int8_t *ahi) {
    int32_t dot = 0;
    if (type == T_Q8_0) {
        for (int j = 0; j < 16; j++)
            dot += (int8_t)blk[2 + j] * alo[j] + (int8_t)blk[18 + j] * ahi[j];
        return dot;
    }
    const uint8_t *qs = blk + q32_qs_off(type);
    uint32_t qh = q32_is5(type) ? q32_ld32(blk + q32_qh_off(type)) : 0;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
        int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        dot += lo * alo[j] + hi * ahi[j];
    }
    return dot;
}

static inline void tile_scalar_t(const int type, const uint8_t *act, int64_t ab, int mt,
                                 const uint8_t *w, int64_t nb, int64_t n0, int64_t n1, int64_t s0,
                                 int64_t s1, float *y, int64_t ldy) {
    const int bs = q32_block_bytes(type), off = q32_offset(type), has_min = q32_has_min(type);
    const int64_t rb = nb * bs;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *wr = w + n * rb;
        for (int r = 0; r < mt; r++) {
            const uint8_t *a = act + r * ab;
            const int8_t *aq = (const int8_t *)a;
            float tot = s0 > 0 ? y[r * ldy + n] : 0.f;
            for (int64_t sg = s0; sg < s1; sg++) {
                float sum = 0;
                for (int64_t b = sg * Q32_SEG; b < Q32_SEG_END(sg, nb); b++) {
                    const uint8_t *blk = wr + b * bs;
                    const int8_t *alo = aq + q32_act_q_index(type, nb, b, 0), *ahi = aq + q32_act_q_index(type, nb, b, 16);
                    int32_t s = (int32_t)q32_ld32(a + q32_act_s_off(nb) + b * 4);
                    int32_t dot = block_dot(type, blk, alo, ahi);
                    float da = q32_ldf(a + q32_act_d_off(nb) + b * 4);
                    float dw = q32_half_to_float(q32_ld16(blk));
                    sum += dw * da * (float)(dot - off * s);
                    if (has_min)
                        sum += q32_half_to_float(q32_ld16(blk + 2)) * (da * (float)s);
                }
                tot += sum;
            }
            y[r * ldy + n] = tot;
        }
    }
}

/* The portable path (CPUs without a SIMD path), one instance per type. */
void q32_tile_scalar(int type, const uint8_t *act, int64_t ab, int mt, const uint8_t *w,
                        int64_t nb, int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y,
                        int64_t ldy) {
    switch (type) {
    case T_Q4_0: tile_scalar_t(T_Q4_0, act, ab, mt, w, nb, n0, n1, s0, s1, y, ldy); break;
    case T_Q4_1: tile_scalar_t(T_Q4_1, act, ab, mt, w, nb, n0, n1, s0, s1, y, ldy); break;
    case T_Q5_0: tile_scalar_t(T_Q5_0, act, ab, mt, w, nb, n0, n1, s0, s1, y, ldy); break;
    case T_Q5_1: tile_scalar_t(T_Q5_1, act, ab, mt, w, nb, n0, n1, s0, s1, y, ldy); break;
    default: tile_scalar_t(T_Q8_0, act, ab, mt, w, nb, n0, n1, s0, s1, y, ldy); break;
    }
}

/* The tile path over rows [0, m) x [n0, n1): a row's bits depend on neither m nor the range. */
static void gemm_tiled(int type, const uint8_t *a, int64_t m, const uint8_t *w, int64_t nb,
                       int64_t n0, int64_t n1, float *y, int64_t ldy) {
    int64_t ab = q32_act_row_bytes(type, nb), nseg = Q32_NSEG(nb);
    q32_tile_fn tile = amber_kernels_now()->q32_tile;
    if (m <= Q32_MT) {
        tile(type, a, ab, (int)m, w, nb, n0, n1, 0, nseg, y, ldy);
        return;
    }
    /* prefill: one K segment at a time (all rows' activations for it stay in L2, a tile's in
     * L1), a chunk of weight rows (~32 KiB of the segment, in L1/L2) against every tile of
     * Q32_MT activation rows; each weight byte comes from memory once per call */
    int64_t sb = (int64_t)Q32_SEG * q32_block_bytes(type), chunk = sb >= 32768 ? 1 : 32768 / sb;
    for (int64_t sg = 0; sg < nseg; sg++) {
        for (int64_t c0 = n0; c0 < n1; c0 += chunk) {
            int64_t c1 = n1 - c0 < chunk ? n1 : c0 + chunk;
            for (int64_t i = 0; i < m; i += Q32_MT) {
                int mt = m - i < Q32_MT ? (int)(m - i) : Q32_MT;
                tile(type, a + i * ab, ab, mt, w, nb, c0, c1, sg, sg + 1, y + i * ldy, ldy);
            }
        }
    }
}

void q32_gemm_rows(int type, const void *act, int64_t m, const uint8_t *w, int64_t k,
                   int64_t n0, int64_t n1, float *y, int64_t ldy) {
    int64_t nb = k / 32, ab = q32_act_bytes(type, k), mp = 0;
    const uint8_t *a = act;
    q32_packed_fn packed = amber_kernels_now()->q32_packed;
    if (m >= Q32_PACK_MIN_M && packed != NULL) {
        /* The packed path takes the first 16*floor(m/16) rows and whole groups of 16 (AVX-512)
         * or 8 (256-bit) columns from n0; the rest is tiled. So which arithmetic an output gets depends only on its row
         * and column positions modulo 16 and the call's bounds: splitting a call into row and
         * column tiles that are multiples of 16 (the op's 64 x 64) gives the same bits. */
        mp = m / Q32_PACK_MIN_M * Q32_PACK_MIN_M;
        int64_t nd = packed(type, a, mp, w, nb, n0, n1, y, ldy);
        if (nd < n1)
            gemm_tiled(type, a, mp, w, nb, nd, n1, y, ldy);
    }
    if (mp < m)
        gemm_tiled(type, a + mp * ab, m - mp, w, nb, n0, n1, y + mp * ldy, ldy);
}
