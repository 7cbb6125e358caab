/* What each quantization family implements (q32.c: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0; qk.c: Q4_K Q5_K
 * Q6_K); dispatch.c routes the public API to them. Not part of the public API. */
#ifndef AMBER_FAMILY_H
#define AMBER_FAMILY_H
#include <stdint.h>
#include <string.h>

/* x86-64: AVX2 < AVX-VNNI < AVX512-VNNI; arm64: NEON < dotprod (SDOT) < i8mm (SMMLA). */
enum amber_isa {
    ISA_SCALAR = 0, ISA_AVX2 = 1, ISA_AVXVNNI = 2, ISA_AVX512VNNI = 3,
    ISA_NEON = 4, ISA_DOTPROD = 5, ISA_I8MM = 6
};

/* The ISA chosen by dispatch.c (the best this CPU has, or the one forced by amber_set_isa). */
enum amber_isa amber_current_isa(void);

/* Each family: 1 when it handles `type`; then the same contracts as amber_kernels.h, with
 * type and k already validated (k a multiple of the family's block, k > 0). */
int q32_handles(int type);
int64_t q32_row_bytes(int type, int64_t k);
int64_t q32_act_bytes(int type, int64_t k);
void q32_quantize_act(int type, const float *x, int64_t k, void *out);
void q32_gemm_rows(int type, const void *act, int64_t m, const uint8_t *w, int64_t k,
                   int64_t n0, int64_t n1, float *y, int64_t ldy);

int qk_handles(int type);
int64_t qk_row_bytes(int type, int64_t k);
int64_t qk_act_bytes(int type, int64_t k);
void qk_quantize_act(int type, const float *x, int64_t k, void *out);
void qk_gemm_rows(int type, const void *act, int64_t m, const uint8_t *w, int64_t k,
                  int64_t n0, int64_t n1, float *y, int64_t ldy);

/* IEEE half -> float, portable (the scalar paths run on CPUs without F16C); exact for every
 * half, subnormals, infinities and NaNs included. Shared by both families. */
static inline float amber_half_to_float(uint16_t h) {
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

/* Block sizes: every q32 type has 32 values a block; every qk type 256. */
#define Q32_BLOCK 32
#define QK_BLOCK 256
#endif
