/* Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 (blocks of 32). PLACEHOLDER: scalar Q8_0 only, until the family lands. */
#include <string.h>

#include "family.h"

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {   /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 1024)) { man <<= 1; exp--; }
            bits = sign | (exp << 23) | ((man & 1023) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

int q32_handles(int type) { return type == 8; }
int64_t q32_row_bytes(int type, int64_t k) { (void)type; return k / 32 * 34; }
int64_t q32_act_bytes(int type, int64_t k) { (void)type; return k / 32 * 36; }

void q32_quantize_act(int type, const float *x, int64_t k, void *out) {
    (void)type;
    uint8_t *o = out;
    for (int64_t b = 0; b < k / 32; b++, x += 32, o += 36) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = x[i] > amax ? x[i] : (-x[i] > amax ? -x[i] : amax);
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        memcpy(o, &d, 4);
        for (int i = 0; i < 32; i++) {
            float v = x[i] * id;
            o[4 + i] = (uint8_t)(int8_t)(v >= 0 ? (int)(v + 0.5f) : -(int)(-v + 0.5f));
        }
    }
}

void q32_gemm_rows(int type, const void *act, int64_t m, const uint8_t *w, int64_t k,
                   int64_t n0, int64_t n1, float *y, int64_t ldy) {
    int64_t nb = k / 32, rb = q32_row_bytes(type, k), ab = q32_act_bytes(type, k);
    for (int64_t i = 0; i < m; i++) {
        const uint8_t *a = (const uint8_t *)act + i * ab;
        for (int64_t n = n0; n < n1; n++) {
            const uint8_t *wr = w + n * rb;
            float sum = 0;
            for (int64_t b = 0; b < nb; b++) {
                uint16_t dh;
                float da;
                memcpy(&dh, wr + b * 34, 2);
                memcpy(&da, a + b * 36, 4);
                int32_t s = 0;
                for (int j = 0; j < 32; j++)
                    s += (int8_t)wr[b * 34 + 2 + j] * (int8_t)a[b * 36 + 4 + j];
                sum += half_to_float(dh) * da * (float)s;
            }
            y[i * ldy + n] = sum;
        }
    }
}
