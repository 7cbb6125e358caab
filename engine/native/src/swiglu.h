/* silu(g) * u over float32 arrays, for GgufMatMul's SwiGLU epilogue (ort_op.c); declared in
 * amber_kernels.h (exported, so tests compare it with ONNX Runtime's own QuickGelu + Mul). */
#ifndef AMBER_SWIGLU_H
#define AMBER_SWIGLU_H
#include "amber_kernels.h"
#endif
