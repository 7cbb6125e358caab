/* silu(g) * u over float32 arrays, for GgufMatMul's SwiGLU epilogue (ort_op.c); declared in
 * amber_kernels.h (exported, so tests compare it with ONNX Runtime's own QuickGelu + Mul). The
 * kernels below are the dispatch table's (kernel_table.h): one per MLAS SiLU path. */
#ifndef AMBER_SWIGLU_H
#define AMBER_SWIGLU_H
#include <stdint.h>

#include "amber_kernels.h"
#include "q32_tile.h"   /* Q32_HAVE_X86 */

/* MlasLogisticConstants, the same decimal literals (so the same float32 values). */
#define LOGI_LO (-18.0f)
#define LOGI_HI 18.0f
#define LOGI_A9 4.37031012579801e-11f
#define LOGI_A7 1.15627324459942e-07f
#define LOGI_A5 6.08574864600143e-05f
#define LOGI_A3 8.51377133304701e-03f
#define LOGI_A1 2.48287947061529e-01f
#define LOGI_B10 6.10247389755681e-13f
#define LOGI_B8 5.76102136993427e-09f
#define LOGI_B6 6.29106785017040e-06f
#define LOGI_B4 1.70198817374094e-03f
#define LOGI_B2 1.16817656904453e-01f
#define LOGI_B0 9.93151921023180e-01f

/* swiglu.c: MLAS's generic logistic (a multiply then an add per step, s clamped to [0, 1]). */
void amber_silu_mul_generic(const float *g, const float *u, float *y, int64_t n);
#if Q32_HAVE_X86
/* x86/swiglu_x86.c: the FMA3 logistic (AVX2 + FMA) and MlasSiluKernelAvx512F (AVX-512F). */
void amber_silu_mul_fma3(const float *g, const float *u, float *y, int64_t n);
void amber_silu_mul_avx512f(const float *g, const float *u, float *y, int64_t n);
#endif
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
/* arm/swiglu_arm.c: MLAS's generic logistic with AArch64's fused multiply-adds. */
void amber_silu_mul_neon(const float *g, const float *u, float *y, int64_t n);
#endif
#endif
