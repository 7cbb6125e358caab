/* The one dispatch table: for each instruction set (enum amber_isa) the kernel every op calls, and
 * for each MLAS SiLU path the SwiGLU epilogue's kernel. dispatch.c owns the CPU probes, the choice
 * (the best this CPU runs, or the one amber_set_isa / amber_set_silu_path forced) and the table
 * itself; the families (q32.c, qk.c, attn.c, swiglu.c) only ask it. Not part of the public API.
 *
 * Per ISA entry (scalar: every CPU; x86-64: avx2 < avxvnni < avx512vnni; arm64: neon < dotprod <
 * i8mm); a NULL slot means "the portable path" or "no such path at this ISA", as each says. */
#ifndef AMBER_KERNEL_TABLE_H
#define AMBER_KERNEL_TABLE_H
#include <stdint.h>

#include "attn.h"
#include "family.h"
#include "q32_tile.h"
#include "qk_impl.h"

/* q32's packed prefill (m >= Q32_PACK_MIN_M): the first column it did not compute. */
typedef int64_t (*q32_packed_fn)(int type, const uint8_t *act, int64_t m, const uint8_t *w, int64_t nb,
                                 int64_t n0, int64_t n1, float *y, int64_t ldy);
/* qk's Q8_K activation quantizer: k values (a multiple of 256) into out. */
typedef void (*qk_quant_fn)(const float *x, int64_t k, uint8_t *out);
/* SwiGLU's epilogue: y = silu(g) * u over n floats. */
typedef void (*amber_silu_fn)(const float *g, const float *u, float *y, int64_t n);

typedef struct {
    const char *name;                /* amber_isa()'s answer */
    q32_quant_fn q32_quant;          /* one activation block of 32 */
    q32_tile_fn q32_tile;            /* one tile of the q32 matmul */
    q32_packed_fn q32_packed;        /* NULL: no packed prefill at this ISA */
    qk_quant_fn qk_quant;            /* Q8_K activations */
    qk_gemm_fn qk_gemm;              /* the K-quant matmul */
    const attn_ops *(*attn)(void);   /* the attention primitives (NULL, or NULL returned: scalar) */
} amber_kernel_table;

/* The entry of the ISA the kernels use now (amber_current_isa()). */
const amber_kernel_table *amber_kernels_now(void);
/* The SwiGLU kernel of the SiLU path in use now (amber_silu_path()). */
amber_silu_fn amber_silu_kernel(void);

/* The portable kernels the table names (each family's file defines its own). */
void q32_tile_scalar(int type, const uint8_t *act, int64_t ab, int mt, const uint8_t *w, int64_t nb,
                     int64_t n0, int64_t n1, int64_t s0, int64_t s1, float *y, int64_t ldy);
void qk_quantize_act_scalar(const float *x, int64_t k, uint8_t *out);
const attn_ops *attn_ops_scalar(void);
#endif
