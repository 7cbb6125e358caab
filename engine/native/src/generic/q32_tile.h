/* One tile of the q32 family's matmul: y[r*ldy + n] for r < mt (mt <= Q32_MT activation rows,
 * `ab` bytes apart) and n0 <= n < n1, over the K segments [s0, s1) of Q32_SEG blocks each (the
 * last one shorter). Each segment's partial dot is summed on its own and added to the row's total
 * in segment order; s0 > 0 continues the totals already in y. So splitting a call by segments
 * (prefill keeps a segment of activations in L1) gives the same bits as one call (decode).
 * One function per ISA. */
#ifndef AMBER_Q32_TILE_H
#define AMBER_Q32_TILE_H
#include <stdint.h>

#define Q32_MT 8
#define Q32_SEG 64   /* blocks: 2048 values; 8 activation rows of it are 32 KiB */
#define Q32_SEG_END(sg, nb) ((sg) * Q32_SEG + Q32_SEG < (nb) ? (sg) * Q32_SEG + Q32_SEG : (nb))
#define Q32_NSEG(nb) (((nb) + Q32_SEG - 1) / Q32_SEG)

typedef void (*q32_tile_fn)(int type, const uint8_t *act, int64_t ab, int mt, const uint8_t *w,
                            int64_t nb, int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy);

float q32_half_to_float(uint16_t h);

/* One activation block of 32 floats -> its codes (natural order), d and sum of codes. */
typedef void (*q32_quant_fn)(const float *x, int8_t *q, float *d, int32_t *s);
void q32_quant_block_scalar(const float *x, int8_t *q, float *d, int32_t *s);

/* -DQ32_HAVE_X86=0 builds the portable path only (what an arm64 build gets) */
#if !defined(Q32_HAVE_X86) && (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define Q32_HAVE_X86 1
#endif
/* Prefill with m >= Q32_PACK_MIN_M where the ISA has a packed path (the dispatch table's q32_packed). */
#define Q32_PACK_MIN_M 16
#if Q32_HAVE_X86
/* AVX512-VNNI (q32_pack512.c): whole groups of 16 weight rows from n0; returns the first row it
 * did not compute. Not bit-identical to the tile path. */
int64_t q32_packed_avx512vnni(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t nb,
                              int64_t n0, int64_t n1, float *y, int64_t ldy);
/* The same at 256-bit width (q32_pack256.c): whole groups of 8 weight rows; the same bits as the
 * AVX-512 packed path for the columns both pack. */
int64_t q32_packed_avx2(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t nb,
                        int64_t n0, int64_t n1, float *y, int64_t ldy);
int64_t q32_packed_avxvnni(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t nb,
                           int64_t n0, int64_t n1, float *y, int64_t ldy);
void q32_quant_block_avx2(const float *x, int8_t *q, float *d, int32_t *s);
void q32_tile_avx2(int type, const uint8_t *act, int64_t ab, int mt, const uint8_t *w, int64_t nb,
                   int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy);
void q32_tile_avxvnni(int type, const uint8_t *act, int64_t ab, int mt, const uint8_t *w,
                      int64_t nb, int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy);
void q32_tile_avx512vnni(int type, const uint8_t *act, int64_t ab, int mt, const uint8_t *w,
                         int64_t nb, int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy);
#endif
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
/* q32_arm.c: the tile on plain NEON, with SDOT and with SMMLA; the scalar path's bits. */
void q32_tile_neon(int type, const uint8_t *act, int64_t ab, int mt, const uint8_t *w, int64_t nb,
                   int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy);
void q32_tile_dotprod(int type, const uint8_t *act, int64_t ab, int mt, const uint8_t *w,
                      int64_t nb, int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy);
void q32_tile_i8mm(int type, const uint8_t *act, int64_t ab, int mt, const uint8_t *w, int64_t nb,
                   int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy);
#endif
#endif
