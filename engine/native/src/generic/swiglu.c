/* silu(g) * u for GgufMatMul's SwiGLU epilogue, with ONNX Runtime's own bits.
 *
 * The split graph (GgufMatMul -> Split -> Sigmoid/Mul -> Mul) runs, after ORT's optimizer, as
 * com.microsoft.QuickGelu(alpha = 1) then Mul, and QuickGelu with alpha = 1 is MlasComputeSilu:
 * silu = g * logistic(g), y = silu * u. The model is chaotic (down_proj quantizes its input to int8,
 * outlier activations of ~3000), so a 1-ulp difference in silu changes the default model's answer:
 * this file computes exactly what MLAS computes (ORT 1.31.1: mlas/lib/logistic.cpp, silu.cpp,
 * silu_avx512f.cpp, x86_64/LogisticKernelFma3.S; platform.cpp picks the kernels).
 *
 * Every kernel is Eigen's rational approximation of the logistic on x clamped to [-18, 18]:
 *   x2 = x * x; p = x * ((((a9 x2 + a7) x2 + a5) x2 + a3) x2 + a1)
 *   q = ((((b10 x2 + b8) x2 + b6) x2 + b4) x2 + b2) x2 + b0;  s = p / q + 0.5
 * and they differ only in rounding and the final clamp:
 * - AVX-512F (SiluKernelRoutine = MlasSiluKernelAvx512F): each "a x2 + c" one fused multiply-add,
 *   s clamped to [0, 1], silu = g * s (NaN g gives g).
 * - AVX2 + FMA without AVX-512F (MlasSiluKernel: MlasComputeLogisticF32KernelFma3 then a multiply):
 *   fused multiply-adds, s = max(s, 0) only (s can be 1 + 2^-23 near x = 18).
 * - otherwise (MlasSiluKernel over MlasLogisticKernel): each "a x2 + c" a multiply then an add,
 *   s clamped to [0, 1].
 * Every step is one IEEE operation per lane (mul, fma, div, add, min, max), so a value's result
 * never depends on its position or on the vector width. The x86 kernels are in x86/swiglu_x86.c; the
 * dispatch table (kernel_table.h) picks the one MLAS runs here. */
#include "kernel_table.h"
#include "swiglu.h"

/* MlasLogisticKernel's scalar loop, then QuickGelu's g * s and Mul's * u. Separate statements and
 * no FMA target here, so the compiler cannot contract a multiply and an add into one rounding. */
void amber_silu_mul_generic(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        float t = x < LOGI_LO ? LOGI_LO : x;   /* MLAS's order: NaN passes through */
        x = t > LOGI_HI ? LOGI_HI : t;
        float x2 = x * x;
        float p = x2 * LOGI_A9;
        p = p + LOGI_A7;
        p = p * x2;
        p = p + LOGI_A5;
        p = p * x2;
        p = p + LOGI_A3;
        p = p * x2;
        p = p + LOGI_A1;
        p = p * x;
        float q = x2 * LOGI_B10;
        q = q + LOGI_B8;
        q = q * x2;
        q = q + LOGI_B6;
        q = q * x2;
        q = q + LOGI_B4;
        q = q * x2;
        q = q + LOGI_B2;
        q = q * x2;
        q = q + LOGI_B0;
        float s = p / q + 0.5f;
        s = s < 0.0f ? 0.0f : (1.0f < s ? 1.0f : s);   /* std::clamp(s, 0, 1) */
        y[i] = g[i] * s * u[i];                         /* (g * s) * u, left to right */
    }
}

void amber_silu_mul(const float *g, const float *u, float *y, int64_t n) { amber_silu_kernel()(g, u, y, n); }
