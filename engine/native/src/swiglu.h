/* silu(g) * u over float32 arrays, for GgufMatMul's SwiGLU epilogue (ort_op.c). */
#ifndef AMBER_SWIGLU_H
#define AMBER_SWIGLU_H
#include <stdint.h>

/* y[i] = g[i] / (1 + exp(-g[i])) * u[i] for i < n. With AVX2 (the ISA dispatch.c chose is not
 * scalar) exp is a Cephes-style polynomial, within 2 float32 ulp of exp (tests: float64 reference,
 * relative 2e-6); the scalar path calls expf. y may alias neither g nor u. */
void amber_silu_mul(const float *g, const float *u, float *y, int64_t n);

#endif
