/* The one dispatch table (kernel_table.h): which CPU features this machine has, which instruction
 * set and SiLU path the kernels use, and the kernel of every op for each; then amber_kernels.h's
 * matmul API routed to the family that handles a type. */
#include <string.h>

#include "amber_kernels.h"
#include "cpu_arm.h"
#include "family.h"
#include "kernel_table.h"
#include "swiglu.h"

static int isa_forced = -1;   /* -1: not forced */

/* Whether this CPU runs instruction set `isa` (scalar: every CPU). */
static int cpu_runs(enum amber_isa isa) {
    switch (isa) {
    case ISA_SCALAR: return 1;
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
    case ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    /* AVX-VNNI and AVX512-VNNI are separate extensions: a CPU with one may lack the other */
    case ISA_AVXVNNI: return cpu_runs(ISA_AVX2) && __builtin_cpu_supports("avxvnni");
    case ISA_AVX512VNNI:
        return cpu_runs(ISA_AVX2) && __builtin_cpu_supports("avx512vnni") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
#endif
#if AMBER_ARM64
    case ISA_NEON: return 1;   /* Advanced SIMD is part of arm64 */
    case ISA_DOTPROD: return arm_has_dotprod();
    case ISA_I8MM: return arm_has_dotprod() && arm_has_i8mm();
#endif
    default: return 0;
    }
}

/* The widest instruction set first: the first one this CPU runs is the default. */
static const enum amber_isa BEST_FIRST[] = {ISA_AVX512VNNI, ISA_AVXVNNI, ISA_AVX2,
                                            ISA_I8MM, ISA_DOTPROD, ISA_NEON};

static enum amber_isa best_isa(void) {
    for (size_t i = 0; i < sizeof BEST_FIRST / sizeof BEST_FIRST[0]; i++)
        if (cpu_runs(BEST_FIRST[i]))
            return BEST_FIRST[i];
    return ISA_SCALAR;
}

enum amber_isa amber_current_isa(void) {
    static int best = -1;
    if (isa_forced >= 0)
        return (enum amber_isa)isa_forced;
    if (best < 0)
        best = (int)best_isa();   /* a benign race: every thread computes the same value */
    return (enum amber_isa)best;
}

/* ---- the table: one entry per enum amber_isa; an ISA this build lacks keeps the portable
 * kernels (cpu_runs never picks it, so they are never asked for at it) ---- */

#define PORTABLE(isa_name) {isa_name, q32_quant_block_scalar, q32_tile_scalar, NULL, \
                            qk_quantize_act_scalar, qk_gemm_scalar, NULL}

static const amber_kernel_table TABLE[] = {
    [ISA_SCALAR] = PORTABLE("scalar"),
#if Q32_HAVE_X86 && defined(QK_X86)
    [ISA_AVX2] = {"avx2", q32_quant_block_avx2, q32_tile_avx2, q32_packed_avx2,
                  qk_quantize_act_avx2, qk_gemm_avx2, attn_ops_avx2},
    [ISA_AVXVNNI] = {"avxvnni", q32_quant_block_avx2, q32_tile_avxvnni, q32_packed_avxvnni,
                     qk_quantize_act_avx2, qk_gemm_avxvnni, attn_ops_avx2},
    [ISA_AVX512VNNI] = {"avx512vnni", q32_quant_block_avx2, q32_tile_avx512vnni, q32_packed_avx512vnni,
                        qk_quantize_act_avx2, qk_gemm_avx512vnni, attn_ops_avx512},
#else
    [ISA_AVX2] = PORTABLE("avx2"),
    [ISA_AVXVNNI] = PORTABLE("avxvnni"),
    [ISA_AVX512VNNI] = PORTABLE("avx512vnni"),
#endif
#if AMBER_ARM64 && defined(QK_ARM64)
    /* the activations' quantizers stay the portable ones: the same bytes on every ISA */
    [ISA_NEON] = {"neon", q32_quant_block_scalar, q32_tile_neon, NULL,
                  qk_quantize_act_scalar, qk_gemm_neon, attn_ops_neon},
    [ISA_DOTPROD] = {"dotprod", q32_quant_block_scalar, q32_tile_dotprod, NULL,
                     qk_quantize_act_scalar, qk_gemm_dotprod, attn_ops_neon},
    [ISA_I8MM] = {"i8mm", q32_quant_block_scalar, q32_tile_i8mm, NULL,
                  qk_quantize_act_scalar, qk_gemm_i8mm, attn_ops_neon},
#else
    [ISA_NEON] = PORTABLE("neon"),
    [ISA_DOTPROD] = PORTABLE("dotprod"),
    [ISA_I8MM] = PORTABLE("i8mm"),
#endif
};
#define ISA_COUNT ((int)(sizeof TABLE / sizeof TABLE[0]))

const amber_kernel_table *amber_kernels_now(void) { return &TABLE[amber_current_isa()]; }

const char *amber_isa(void) { return amber_kernels_now()->name; }

int amber_set_isa(const char *name) {
    if (name == NULL)
        return -1;
    for (int i = 0; i < ISA_COUNT; i++) {
        if (strcmp(name, TABLE[i].name) != 0)
            continue;
        if (!cpu_runs((enum amber_isa)i))
            return -1;
        isa_forced = i;
        return 0;
    }
    return -1;
}

/* ---- SwiGLU's SiLU: the kernel MLAS picks on this CPU (platform.cpp: AVX-512F ->
 * MlasSiluKernelAvx512F, else AVX2 and FMA -> the FMA3 logistic, else the generic one; on arm64
 * the generic logistic with NEON's fused multiply-adds), whatever ISA the matmul kernels were
 * forced to. __builtin_cpu_supports checks the OS saves the registers too (XCR0), as platform.cpp
 * does. ---- */

enum { PATH_GENERIC = 0, PATH_FMA3 = 1, PATH_AVX512F = 2, PATH_NEON = 3 };

static const struct {
    const char *name;
    amber_silu_fn fn;
} SILU[] = {
    [PATH_GENERIC] = {"generic", amber_silu_mul_generic},
#if Q32_HAVE_X86
    [PATH_FMA3] = {"fma3", amber_silu_mul_fma3},
    [PATH_AVX512F] = {"avx512f", amber_silu_mul_avx512f},
#else
    [PATH_FMA3] = {"fma3", amber_silu_mul_generic},
    [PATH_AVX512F] = {"avx512f", amber_silu_mul_generic},
#endif
#if AMBER_ARM64
    [PATH_NEON] = {"neon", amber_silu_mul_neon},
#else
    [PATH_NEON] = {"neon", amber_silu_mul_generic},
#endif
};
#define SILU_COUNT ((int)(sizeof SILU / sizeof SILU[0]))

static int silu_forced = -1;   /* -1: not forced */

static int best_silu_path(void) {
#if Q32_HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return __builtin_cpu_supports("avx512f") ? PATH_AVX512F : PATH_FMA3;
#endif
#if AMBER_ARM64
    return PATH_NEON;   /* every AArch64 CPU has NEON with fused multiply-adds */
#endif
    return PATH_GENERIC;
}

/* The generic kernel runs everywhere; x86's paths up to the best this CPU has; NEON on arm64. */
static int silu_path_runs(int path) {
    int best = best_silu_path();
    if (path == PATH_GENERIC || path == best)
        return 1;
    return best != PATH_NEON && path != PATH_NEON && path < best;
}

static int current_silu_path(void) {
    static int best = -1;
    if (silu_forced >= 0)
        return silu_forced;
    if (best < 0)
        best = best_silu_path();   /* a benign race: every thread computes the same value */
    return best;
}

amber_silu_fn amber_silu_kernel(void) { return SILU[current_silu_path()].fn; }

const char *amber_silu_path(void) { return SILU[current_silu_path()].name; }

int amber_set_silu_path(const char *name) {
    if (name == NULL)
        return -1;
    for (int i = 0; i < SILU_COUNT; i++) {
        if (strcmp(name, SILU[i].name) != 0)
            continue;
        if (!silu_path_runs(i))
            return -1;
        silu_forced = i;
        return 0;
    }
    return -1;
}

/* ---- amber_kernels.h's matmul API, routed to the family that handles a type ---- */

static int block_of(int type) {
    if (q32_handles(type))
        return Q32_BLOCK;
    if (qk_handles(type))
        return QK_BLOCK;
    return 0;
}

static int valid(int type, int64_t k) {
    int blk = block_of(type);
    return blk > 0 && k > 0 && k % blk == 0 && k <= ((int64_t)1 << 40);
}

int64_t amber_row_bytes(int type, int64_t k) {
    if (!valid(type, k))
        return -1;
    return q32_handles(type) ? q32_row_bytes(type, k) : qk_row_bytes(type, k);
}

int64_t amber_act_bytes(int type, int64_t k) {
    if (!valid(type, k))
        return -1;
    return q32_handles(type) ? q32_act_bytes(type, k) : qk_act_bytes(type, k);
}

int amber_quantize_act(int type, const float *x, int64_t k, void *out) {
    if (!valid(type, k) || x == NULL || out == NULL)
        return -1;
    if (q32_handles(type))
        q32_quantize_act(type, x, k, out);
    else
        qk_quantize_act(type, x, k, out);
    return 0;
}

int amber_gemm_rows(int type, const void *act, int64_t m, const uint8_t *w, int64_t k,
                    int64_t n0, int64_t n1, float *y, int64_t ldy) {
    if (!valid(type, k) || act == NULL || w == NULL || y == NULL || m < 0 || n0 < 0 || n1 < n0 ||
        (m > 1 && ldy < n1 - n0))   /* rows of the [n0, n1) tile must not overlap (ort_op.c's
                                        SwiGLU scratch tiles have ldy = n1 - n0) */
        return -1;
    if (m == 0 || n0 == n1)
        return 0;
    if (q32_handles(type))
        q32_gemm_rows(type, act, m, w, k, n0, n1, y, ldy);
    else
        qk_gemm_rows(type, act, m, w, k, n0, n1, y, ldy);
    return 0;
}
