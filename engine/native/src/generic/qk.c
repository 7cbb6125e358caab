/* Q4_K Q5_K Q6_K (super-blocks of 256) against Q8_K activations: the activation quantizer, the
 * portable scalar kernels; the ISA kernels (qk_avx2.c, qk_avx512.c, qk_arm.c) come from the
 * dispatch table (kernel_table.h).
 *
 * Numerics are llama.cpp's: per super-block the integer dot products of the 4/5/6-bit levels with
 * the int8 activations, times the six-bit (Q4_K/Q5_K) or int8 (Q6_K) sub-block scales, exact in
 * int32; Q4_K/Q5_K's mins and Q6_K's -32 offset come from the activations' 16-value sums (bsums),
 * so the weights are read once. Float32 only for d * d_act per super-block. */
#include <math.h>   /* fabsf: a builtin, no libm needed */
#include <string.h>

#include "family.h"
#include "kernel_table.h"
#include "qk_impl.h"

int qk_handles(int type) { return type == QK_Q4_K || type == QK_Q5_K || type == QK_Q6_K; }

int64_t qk_row_bytes(int type, int64_t k) { return k / QK_BLOCK * qk_block_bytes(type); }

int64_t qk_act_bytes(int type, int64_t k) {
    (void)type;
    return k / QK_BLOCK * Q8K_BYTES;
}

void qk_quantize_act(int type, const float *x, int64_t k, void *out) {
    (void)type;
    amber_kernels_now()->qk_quant(x, k, out);   /* every ISA's: the scalar bytes (qk_quant_x86.c) */
}

void qk_quantize_act_scalar(const float *x, int64_t k, uint8_t *o) {
    for (int64_t b = 0; b < k / QK_BLOCK; b++, x += QK_BLOCK, o += Q8K_BYTES) {
        float amax = 0.f;
        for (int i = 0; i < QK_BLOCK; i++) {
            float a = fabsf(x[i]);
            amax = a > amax ? a : amax;   /* NaN compares false: ignored */
        }
        float d = amax / 127.f, id = d > 0.f ? 1.f / d : 0.f;
        memcpy(o, &d, 4);
        int8_t q[QK_BLOCK];
        for (int i = 0; i < QK_BLOCK; i++) {
            float v = x[i] * id;
            /* clamp first: NaN and values past +-127 (rounding, an infinite d) never reach the
             * float-to-int conversion out of range */
            v = v >= -127.f ? (v <= 127.f ? v : 127.f) : (v < -127.f ? -127.f : 0.f);
            q[i] = (int8_t)(v >= 0.f ? (int)(v + 0.5f) : -(int)(-v + 0.5f));   /* half away from 0 */
        }
        memcpy(o + Q8K_Q, q, QK_BLOCK);
        int16_t bs[16];
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += q[16 * j + i];
            bs[j] = (int16_t)s;
        }
        memcpy(o + Q8K_BSUMS, bs, sizeof bs);
    }
}

/* ---- scalar kernels: one weight row against one activation row ---- */

/* `five` is a constant in each caller: the compiler specialises (and vectorises) both copies. */
static inline float dot_q45k_scalar(const uint8_t *x, const uint8_t *a, int64_t nb, const int five) {
    const int64_t xb = five ? Q5K_BYTES : Q4K_BYTES;
    float sum = 0.f;
    for (int64_t b = 0; b < nb; b++, x += xb, a += Q8K_BYTES) {
        uint8_t sm[16];
        qk_unpack_scales(x + 4, sm);
        const uint8_t *qh = x + 16, *qs = x + (five ? 48 : 16);
        const int8_t *q8 = (const int8_t *)(a + Q8K_Q);
        int16_t bs[16];
        memcpy(bs, a + Q8K_BSUMS, sizeof bs);
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 4; j++) {   /* 64 values: low nibbles then high nibbles of 32 bytes */
            int32_t lo = 0, hi = 0;
            for (int l = 0; l < 32; l++) {
                int ql = qs[32 * j + l] & 15, qhi = qs[32 * j + l] >> 4;
                if (five) {
                    ql |= ((qh[l] >> (2 * j)) & 1) << 4;
                    qhi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
                }
                lo += ql * q8[64 * j + l];
                hi += qhi * q8[64 * j + 32 + l];
            }
            isum += lo * sm[2 * j] + hi * sm[2 * j + 1];
        }
        for (int j = 0; j < 8; j++) msum += sm[8 + j] * (bs[2 * j] + bs[2 * j + 1]);
        sum = qk_tail45(sum, isum, msum, qk_half(x), qk_half(x + 2), qk_act_d(a));
    }
    return sum;
}

static float dot_q4k_scalar(const uint8_t *x, const uint8_t *a, int64_t nb) {
    return dot_q45k_scalar(x, a, nb, 0);
}

static float dot_q5k_scalar(const uint8_t *x, const uint8_t *a, int64_t nb) {
    return dot_q45k_scalar(x, a, nb, 1);
}

static float dot_q6k_scalar(const uint8_t *x, const uint8_t *a, int64_t nb) {
    float sum = 0.f;
    for (int64_t b = 0; b < nb; b++, x += Q6K_BYTES, a += Q8K_BYTES) {
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        const int8_t *q8 = (const int8_t *)(a + Q8K_Q);
        int16_t bs[16];
        memcpy(bs, a + Q8K_BSUMS, sizeof bs);
        int32_t isum = 0;
        for (int h = 0; h < 2; h++) {
            for (int t = 0; t < 2; t++) {   /* values 16t.. of each 32-value group: scale 8h+2G+t */
                int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                for (int l = 16 * t; l < 16 * t + 16; l++) {
                    int hb = qh[32 * h + l], lo = ql[64 * h + l], hi = ql[64 * h + 32 + l];
                    const int8_t *y = q8 + 128 * h + l;
                    s0 += ((lo & 15) | ((hb & 3) << 4)) * y[0];
                    s1 += ((hi & 15) | (((hb >> 2) & 3) << 4)) * y[32];
                    s2 += ((lo >> 4) | (((hb >> 4) & 3) << 4)) * y[64];
                    s3 += ((hi >> 4) | (((hb >> 6) & 3) << 4)) * y[96];
                }
                isum += sc[8 * h + t] * s0 + sc[8 * h + 2 + t] * s1 + sc[8 * h + 4 + t] * s2 +
                        sc[8 * h + 6 + t] * s3;
            }
        }
        int32_t off = 0;
        for (int s = 0; s < 16; s++) off += sc[s] * bs[s];
        isum -= 32 * off;
        sum = qk_tail6(sum, isum, qk_half(x + 208), qk_act_d(a));
    }
    return sum;
}

void qk_gemm_scalar(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                    int64_t n0, int64_t n1, float *y, int64_t ldy) {
    const int64_t nb = k / QK_BLOCK, rb = qk_row_bytes(type, k), ab = qk_act_bytes(type, k);
    for (int64_t i = 0; i < m; i++) {
        const uint8_t *a = act + i * ab;
        for (int64_t n = n0; n < n1; n++) {
            const uint8_t *x = w + n * rb;
            y[i * ldy + n] = type == QK_Q6_K   ? dot_q6k_scalar(x, a, nb)
                             : type == QK_Q5_K ? dot_q5k_scalar(x, a, nb)
                                               : dot_q4k_scalar(x, a, nb);
        }
    }
}

void qk_gemm_rows(int type, const void *act, int64_t m, const uint8_t *w, int64_t k,
                  int64_t n0, int64_t n1, float *y, int64_t ldy) {
    amber_kernels_now()->qk_gemm(type, (const uint8_t *)act, m, w, k, n0, n1, y, ldy);
}
