"""Amber's native kernels: matmuls over GGUF's own quantized blocks, as an ONNX Runtime custom op.

The C sources are in src/ (amber_kernels.h is the kernels' API; ort_op.c the ONNX Runtime op);
`python -m engine.native.build` compiles them into _build/. Everything here degrades to "not
available" when the library is missing or fails to load: Amber then uses ONNX Runtime's own ops.

Planned API (filled in by the native-op work):
  OP_DOMAIN, OP_NAME         the custom op's domain and name: "ai.amber", "GgufMatMul"
  library_path() -> Path | None
  available() -> bool        the library loads and AMBER_KERNELS is not "ort"
  register(so) -> bool       registers the op library on an onnxruntime.SessionOptions
  isa() -> str               the instruction set the kernels use
"""
from __future__ import annotations

OP_DOMAIN = "ai.amber"
OP_NAME = "GgufMatMul"
