/* Internals of the K-quant family (qk.c, qk_avx2.c, qk_avx512.c): block layouts, helpers, and the
 * per-ISA kernels. Not part of the public API. */
#ifndef AMBER_QK_IMPL_H
#define AMBER_QK_IMPL_H
#include <stdint.h>
#include <string.h>

#include "family.h"

/* GGML type ids */
#define QK_Q4_K 12
#define QK_Q5_K 13
#define QK_Q6_K 14

/* Bytes of one super-block of 256 values. */
#define Q4K_BYTES 144   /* fp16 d, fp16 dmin, scales[12], qs[128] */
#define Q5K_BYTES 176   /* fp16 d, fp16 dmin, scales[12], qh[32], qs[128] */
#define Q6K_BYTES 210   /* ql[128], qh[64], int8 scales[16], fp16 d */

/* The activation block (llama.cpp's Q8_K): float d at 0, int8 q[256] at 4, int16 bsums[16] at
 * 260 (bsums[j] = sum of q[16j .. 16j+15]); x ~ d * q. */
#define Q8K_BYTES 292
#define Q8K_Q 4
#define Q8K_BSUMS 260

/* Rows of weights kept hot while every activation tile passes over them (m > 1). */
#define QK_ROW_BLOCK 16
/* Activation rows dotted per decoded weight super-block. */
#define QK_TILE 4

static inline float qk_half(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return amber_half_to_float(h);
}

/* Every path (scalar, row layout, packed; every ISA) ends a super-block with exactly these float
 * operations on the exact int32 sums, one statement each and never fused into an FMA (the
 * library is built -std=c11: GCC contracts nothing; clang: the pragma below), so a row's result
 * is the same bits whichever path, ISA or tiling computed it. */
#ifdef __clang__
#pragma clang fp contract(off)
#endif
static inline float qk_tail45(float acc, int32_t isum, int32_t msum, float d, float dmin, float da) {
    float t = (float)isum * d;
    float u = (float)msum * dmin;
    t = t - u;
    t = t * da;
    return acc + t;
}

static inline float qk_tail6(float acc, int32_t isum, float d, float da) {
    float t = (float)isum * d;
    t = t * da;
    return acc + t;
}

static inline float qk_act_d(const uint8_t *blk) {
    float d;
    memcpy(&d, blk, 4);
    return d;
}

/* Unpacks Q4_K/Q5_K's 12 scale bytes into out[0..7] = six-bit scales, out[8..15] = six-bit mins
 * (llama.cpp's utmp trick: four 32-bit words instead of sixteen byte extractions). */
static inline void qk_unpack_scales(const uint8_t *scales, uint8_t out[16]) {
    const uint32_t kmask1 = 0x3f3f3f3fu, kmask2 = 0x0f0f0f0fu, kmask3 = 0x03030303u;
    uint32_t u[4];
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
    uint32_t aux = u[1] & kmask1;
    u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
    u[2] = aux;
    u[0] &= kmask1;
    memcpy(out, u, 16);
}

/* One kernel per ISA: the same contract as qk_gemm_rows. */
typedef void (*qk_gemm_fn)(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                           int64_t n0, int64_t n1, float *y, int64_t ldy);

void qk_gemm_scalar(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                    int64_t n0, int64_t n1, float *y, int64_t ldy);
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define QK_X86 1
void qk_gemm_avx2(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                  int64_t n0, int64_t n1, float *y, int64_t ldy);
void qk_gemm_avxvnni(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                     int64_t n0, int64_t n1, float *y, int64_t ldy);
void qk_gemm_avx512vnni(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                        int64_t n0, int64_t n1, float *y, int64_t ldy);
/* qk_quant_x86.c: qk_quantize_act's bytes at AVX2 width. */
void qk_quantize_act_avx2(const float *x, int64_t k, uint8_t *o);
/* qk_pack512.c: rows [n0, n0 + 16 * tiles) through the packed prefill kernel; 0, or -1 (nothing
 * written) when its scratch cannot be allocated. */
int qk_gemm_packed512(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                      int64_t n0, int64_t tiles, float *y, int64_t ldy);
/* qk_pack256.c: the same at AVX2 width, 8 rows a tile. */
int qk_gemm_packed256_avx2(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                           int64_t n0, int64_t tiles, float *y, int64_t ldy);
int qk_gemm_packed256_avxvnni(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                              int64_t n0, int64_t tiles, float *y, int64_t ldy);
#ifndef QK_PACK256_MIN
#define QK_PACK256_MIN 16
#endif
#ifndef QK_PACK256_MIN_Q6
#define QK_PACK256_MIN_Q6 32
#endif
/* Activation rows from which the AVX-512 path packs weight rows (fewer: the row layout wins;
 * measured even at m = 16 for Q4_K and at m = 32 for Q6_K, 1.3-1.8x ahead at m = 64). */
#ifndef QK_PACK_MIN
#define QK_PACK_MIN 16
#endif
#ifndef QK_PACK_MIN_Q6
#define QK_PACK_MIN_Q6 32
#endif
#endif
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define QK_ARM64 1
/* qk_arm.c: plain NEON, SDOT and SMMLA; the scalar path's bits. */
void qk_gemm_neon(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                  int64_t n0, int64_t n1, float *y, int64_t ldy);
void qk_gemm_dotprod(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                     int64_t n0, int64_t n1, float *y, int64_t ldy);
void qk_gemm_i8mm(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t k,
                  int64_t n0, int64_t n1, float *y, int64_t ldy);
#endif

static inline int64_t qk_block_bytes(int type) {
    return type == QK_Q4_K ? Q4K_BYTES : type == QK_Q5_K ? Q5K_BYTES : Q6K_BYTES;
}
#endif
