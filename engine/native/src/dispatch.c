/* Routes amber_kernels.h to the family that handles a type, and picks the instruction set once. */
#include <string.h>

#include "amber_kernels.h"
#include "family.h"

#include "cpu_arm.h"

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

/* Indexed by enum amber_isa. */
static const char *const ISA_NAMES[] = {"scalar", "avx2", "avxvnni", "avx512vnni",
                                        "neon", "dotprod", "i8mm"};
#define ISA_COUNT ((int)(sizeof ISA_NAMES / sizeof ISA_NAMES[0]))

const char *amber_isa(void) { return ISA_NAMES[amber_current_isa()]; }

int amber_set_isa(const char *name) {
    if (name == NULL)
        return -1;
    for (int i = 0; i < ISA_COUNT; i++) {
        if (strcmp(name, ISA_NAMES[i]) != 0)
            continue;
        if (!cpu_runs((enum amber_isa)i))
            return -1;
        isa_forced = i;
        return 0;
    }
    return -1;
}

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
