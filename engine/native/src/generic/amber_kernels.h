/* Amber's native matmul kernels over GGUF's own quantized blocks (no ONNX Runtime types here).
 *
 * A weight is N rows of K inputs, each row the GGUF's bytes for that row as ggml stores them
 * (amber_row_bytes(type, k) bytes a row, rows contiguous). Activations are float32 rows; they are
 * quantized once per call into the family's activation blocks (amber_act_bytes a row), then
 * dotted with the weight rows: y[i][n] = sum_k x[i][k] * w[n][k], with llama.cpp's numerics
 * (int8 activations per block, integer dot products, float32 accumulation).
 *
 * Types are GGML type ids: 2 Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0, 12 Q4_K, 13 Q5_K, 14 Q6_K.
 * Every function validates what it is given: an unsupported type or a K that is not a multiple
 * of the type's block returns -1 (or NULL) and touches nothing.
 */
#ifndef AMBER_KERNELS_H
#define AMBER_KERNELS_H
#include <stdint.h>

#ifdef _WIN32
#define AMBER_API __declspec(dllexport)
#else
#define AMBER_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of one weight row of `k` values, or -1. */
AMBER_API int64_t amber_row_bytes(int type, int64_t k);
/* Bytes of one quantized activation row of `k` values for weights of `type`, or -1. */
AMBER_API int64_t amber_act_bytes(int type, int64_t k);
/* Quantizes one float32 row x[k] into out[amber_act_bytes(type, k)]; 0 or -1. */
AMBER_API int amber_quantize_act(int type, const float *x, int64_t k, void *out);
/* y[i * ldy + n] = dot(act row i, weight row n) for i < m, n0 <= n < n1; `act` holds m rows of
 * amber_act_bytes(type, k) bytes, `w` all N rows from row 0; ldy >= n1 - n0 when m > 1 (y may point
 * n0 columns before a tile-sized buffer). 0 or -1. Thread-safe: callers split
 * [0, N) into ranges and run them in parallel. */
AMBER_API int amber_gemm_rows(int type, const void *act, int64_t m, const uint8_t *w, int64_t k,
                              int64_t n0, int64_t n1, float *y, int64_t ldy);
/* The instruction set the kernels use now: "avx512vnni", "avxvnni", "avx2" (x86-64), "i8mm",
 * "dotprod", "neon" (arm64) or "scalar". */
AMBER_API const char *amber_isa(void);
/* Forces a narrower instruction set (tests cover each path on one machine): 0, or -1 when the
 * name is unknown or this CPU lacks it. */
AMBER_API int amber_set_isa(const char *name);

/* y[i] = (g[i] * logistic(g[i])) * u[i] for i < n, bit for bit what ONNX Runtime's CPU EP gives for
 * Sigmoid/Mul (QuickGelu alpha = 1, i.e. MlasComputeSilu) then Mul on this CPU: MLAS's AVX-512F SiLU
 * kernel, else its FMA3 logistic (AVX2 + FMA), else its generic one. y may alias neither g nor u. */
AMBER_API void amber_silu_mul(const float *g, const float *u, float *y, int64_t n);
/* The MLAS kernel amber_silu_mul follows now: "avx512f", "fma3" or "generic". */
AMBER_API const char *amber_silu_path(void);
/* Forces one of those (tests cover each on one machine): 0, or -1 when unknown or beyond this CPU.
 * A kernel other than the one ORT runs here gives other bits than ORT: tests only. */
AMBER_API int amber_set_silu_path(const char *name);

#ifdef __cplusplus
}
#endif
#endif
