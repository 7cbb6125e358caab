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
 * never depends on its position or on the vector width. */
#include "family.h"
#include "q32_tile.h"   /* Q32_HAVE_X86 */
#include "swiglu.h"

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

enum { PATH_GENERIC = 0, PATH_FMA3 = 1, PATH_AVX512F = 2 };
static const char *const PATH_NAMES[] = {"generic", "fma3", "avx512f"};
static int path_forced = -1;   /* -1: not forced */

/* MlasLogisticKernel's scalar loop, then QuickGelu's g * s and Mul's * u. Separate statements and
 * no FMA target here, so the compiler cannot contract a multiply and an add into one rounding. */
static void silu_mul_generic(const float *g, const float *u, float *y, int64_t n) {
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

#if Q32_HAVE_X86
#include <immintrin.h>

#define TGT_AVX2 __attribute__((target("avx2,fma")))
#define TGT_AVX512 __attribute__((target("avx2,fma,avx512f")))

/* LogisticKernelFma3.S's loop body on 8 lanes: max(lo, x) and min(hi, .) in its operand order. */
static inline __attribute__((always_inline)) TGT_AVX2 __m256 logistic8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(LOGI_HI), _mm256_max_ps(_mm256_set1_ps(LOGI_LO), x));
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_fmadd_ps(x2, _mm256_set1_ps(LOGI_A9), _mm256_set1_ps(LOGI_A7));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(LOGI_A5));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(LOGI_A3));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(LOGI_A1));
    __m256 q = _mm256_fmadd_ps(x2, _mm256_set1_ps(LOGI_B10), _mm256_set1_ps(LOGI_B8));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(LOGI_B6));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(LOGI_B4));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(LOGI_B2));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(LOGI_B0));
    p = _mm256_mul_ps(x, p);
    __m256 s = _mm256_add_ps(_mm256_div_ps(p, q), _mm256_set1_ps(0.5f));
    return _mm256_max_ps(_mm256_setzero_ps(), s);
}

static TGT_AVX2 void silu_mul_avx2(const float *g, const float *u, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        __m256 silu = _mm256_mul_ps(gv, logistic8(gv));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    if (i < n) {   /* the tail through the same lanes (zeros padding: never NaN, never stored) */
        float gt[8] = {0}, ut[8] = {0}, yt[8];
        for (int64_t j = i; j < n; j++) {
            gt[j - i] = g[j];
            ut[j - i] = u[j];
        }
        silu_mul_avx2(gt, ut, yt, 8);
        for (int64_t j = i; j < n; j++)
            y[j] = yt[j - i];
    }
}

/* silu_avx512f.cpp's logistic: the FMA3 kernel's operations, its clamps in that file's order. */
static inline __attribute__((always_inline)) TGT_AVX512 __m512 logistic16(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(LOGI_HI)), _mm512_set1_ps(LOGI_LO));
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 p = _mm512_fmadd_ps(x2, _mm512_set1_ps(LOGI_A9), _mm512_set1_ps(LOGI_A7));
    p = _mm512_fmadd_ps(x2, p, _mm512_set1_ps(LOGI_A5));
    p = _mm512_fmadd_ps(x2, p, _mm512_set1_ps(LOGI_A3));
    p = _mm512_fmadd_ps(x2, p, _mm512_set1_ps(LOGI_A1));
    __m512 q = _mm512_fmadd_ps(x2, _mm512_set1_ps(LOGI_B10), _mm512_set1_ps(LOGI_B8));
    q = _mm512_fmadd_ps(x2, q, _mm512_set1_ps(LOGI_B6));
    q = _mm512_fmadd_ps(x2, q, _mm512_set1_ps(LOGI_B4));
    q = _mm512_fmadd_ps(x2, q, _mm512_set1_ps(LOGI_B2));
    q = _mm512_fmadd_ps(x2, q, _mm512_set1_ps(LOGI_B0));
    p = _mm512_mul_ps(x, p);
    __m512 s = _mm512_add_ps(_mm512_div_ps(p, q), _mm512_set1_ps(0.5f));
    return _mm512_min_ps(_mm512_max_ps(s, _mm512_setzero_ps()), _mm512_set1_ps(1.0f));   /* [0, 1] */
}

/* MlasSiluKernelAvx512F's g * s, a NaN gate passed through as it is. */
static inline __attribute__((always_inline)) TGT_AVX512 __m512 silu16(__m512 g) {
    __m512 silu = _mm512_mul_ps(g, logistic16(g));
    return _mm512_mask_mov_ps(silu, _mm512_cmp_ps_mask(g, g, _CMP_UNORD_Q), g);
}

static TGT_AVX512 void silu_mul_avx512(const float *g, const float *u, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 silu = silu16(_mm512_loadu_ps(g + i));
        _mm512_storeu_ps(y + i, _mm512_mul_ps(silu, _mm512_loadu_ps(u + i)));
    }
    if (i < n) {   /* masked lanes load zeros and are never stored */
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        __m512 silu = silu16(_mm512_maskz_loadu_ps(k, g + i));
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(k, u + i)));
    }
}
#endif

/* The kernel MLAS picks on this CPU (platform.cpp: AVX-512F -> MlasSiluKernelAvx512F, else AVX2 and
 * FMA -> the FMA3 logistic), whatever ISA the matmul kernels were forced to. __builtin_cpu_supports
 * checks the OS saves the registers too (XCR0), as platform.cpp does. */
static int best_path(void) {
#if Q32_HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return __builtin_cpu_supports("avx512f") ? PATH_AVX512F : PATH_FMA3;
#endif
    return PATH_GENERIC;
}

static int current_path(void) {
    static int best = -1;
    if (path_forced >= 0)
        return path_forced;
    if (best < 0)
        best = best_path();   /* a benign race: every thread computes the same value */
    return best;
}

const char *amber_silu_path(void) { return PATH_NAMES[current_path()]; }

int amber_set_silu_path(const char *name) {
    if (name == NULL)
        return -1;
    int best = best_path();
    for (int i = 0; i < 3; i++) {
        if (strcmp(name, PATH_NAMES[i]) != 0)
            continue;
        /* the generic kernel is always available; the others only up to what this CPU has */
        if (i > best)
            return -1;
        path_forced = i;
        return 0;
    }
    return -1;
}

void amber_silu_mul(const float *g, const float *u, float *y, int64_t n) {
    switch (current_path()) {
#if Q32_HAVE_X86
    case PATH_AVX512F:
        silu_mul_avx512(g, u, y, n);
        return;
    case PATH_FMA3:
        silu_mul_avx2(g, u, y, n);
        return;
#endif
    default:
        silu_mul_generic(g, u, y, n);
    }
}
