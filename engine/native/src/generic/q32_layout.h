/* The q32 family's block layouts (GGUF's, as ggml stores them) and its activation row layout.
 * Shared by q32.c (scalar path, quantizer) and q32_x86.h (the SIMD paths). Not public API.
 *
 * Weight blocks (32 values each; fp16 little-endian scales):
 *   Q4_0 (2)  {fp16 d; u8 qs[16]}               18 B  w = d*(q-8)
 *   Q4_1 (3)  {fp16 d; fp16 m; u8 qs[16]}       20 B  w = d*q + m
 *   Q5_0 (6)  {fp16 d; u32 qh; u8 qs[16]}       22 B  w = d*(q-16)
 *   Q5_1 (7)  {fp16 d; fp16 m; u32 qh; qs[16]}  24 B  w = d*q + m
 *   Q8_0 (8)  {fp16 d; i8 qs[32]}               34 B  w = d*q
 *   4-bit value j < 16 is the low nibble of qs[j], j >= 16 the high nibble of qs[j-16];
 *   the 5th bit of value j is bit j of qh.
 *
 * Activation row of K = 32*nb values (nb blocks, np = ceil(nb/2) pairs), all little-endian:
 *   [0, 32nb)            int8 q, |q| <= 127 (round-to-nearest of x/d, d = amax/127).
 *                        Q4_0/Q4_1/Q5_0/Q5_1: pair p (blocks A = 2p, B = 2p+1) is stored as
 *                        A[0:16] B[0:16] A[16:32] B[16:32] (the order the SIMD paths unpack
 *                        nibbles in); a lone last block stays in natural order. Q8_0: natural.
 *   [32nb, 36nb)         float32 d of each block
 *   [36nb, 40nb)         int32 S = sum(q) of each block
 *   [40nb, ...)          the SIMD paths' pre-expanded terms:
 *     Q8_0:  int32 bias[nb] = -16*S (8 lanes of it undo the +128 bias of unsigned weights)
 *     others: float32 dexp[np][8] = {dA x4, dB x4} (a lone block: {d x8}), then
 *             aux[np][8]: Q4_0/Q5_0 int32 {-c*S_A/4 x4, -c*S_B/4 x4} (c = 8 or 16; a lone
 *             block {-c*S/4 x4, 0 x4}); Q4_1/Q5_1 float32 {d*S/4 ...} laid out the same way.
 */
#ifndef AMBER_Q32_LAYOUT_H
#define AMBER_Q32_LAYOUT_H
#include <stdint.h>
#include <string.h>

enum { T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8 };

static inline int q32_block_bytes(int type) {
    switch (type) {
    case T_Q4_0: return 18;
    case T_Q4_1: return 20;
    case T_Q5_0: return 22;
    case T_Q5_1: return 24;
    case T_Q8_0: return 34;
    default: return 0;
    }
}

/* Offsets inside one weight block. */
static inline int q32_qs_off(int type) {
    switch (type) {
    case T_Q4_0: return 2;
    case T_Q4_1: return 4;
    case T_Q5_0: return 6;
    case T_Q5_1: return 8;
    default: return 2;
    }
}
static inline int q32_qh_off(int type) { return type == T_Q5_0 ? 2 : 4; }
static inline int q32_has_min(int type) { return type == T_Q4_1 || type == T_Q5_1; }
static inline int q32_is5(int type) { return type == T_Q5_0 || type == T_Q5_1; }
/* The value every unsigned weight code is offset by (Q4_0: 8, Q5_0: 16), 0 when there is a min. */
static inline int q32_offset(int type) { return type == T_Q4_0 ? 8 : type == T_Q5_0 ? 16 : 0; }

/* Activation row sections, in bytes from the row start. */
static inline int64_t q32_act_d_off(int64_t nb) { return nb * 32; }
static inline int64_t q32_act_s_off(int64_t nb) { return nb * 36; }
static inline int64_t q32_act_x_off(int64_t nb) { return nb * 40; }
static inline int64_t q32_act_row_bytes(int type, int64_t nb) {
    return nb * 40 + (type == T_Q8_0 ? nb * 4 : (nb + 1) / 2 * 64);
}

/* Where value j of block b sits in the activation row's q section. */
static inline int64_t q32_act_q_index(int type, int64_t nb, int64_t b, int j) {
    if (type == T_Q8_0 || ((nb & 1) && b == nb - 1))
        return b * 32 + j;
    int64_t p = b >> 1, half = b & 1;
    return p * 64 + (j < 16 ? half * 16 + j : 32 + half * 16 + (j - 16));
}

static inline uint16_t q32_ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t q32_ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline float q32_ldf(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }
#endif
