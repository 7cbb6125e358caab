"""Builders for tests and benches of the native op ai.amber.GgufMatMul.

`random_rows` writes N rows of real GGUF blocks (random quants, sane float16 scales), the
reference is gguf-py's own numpy dequantizer (independent of the code under test), and
`gguf_matmul_model` wraps one GgufMatMul node in an ONNX model. `kernel_matmul` runs the same
product through the library's C API (ctypes), the exact reference for the op's output.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import onnx
from gguf import GGMLQuantizationType, quants
from gguf.constants import GGML_QUANT_SIZES
from onnx import TensorProto, helper, numpy_helper

# Byte offsets of the float16 scale fields inside one block of each type (d, then dmin/m).
_F16_FIELDS = {2: (0,), 3: (0, 2), 6: (0,), 7: (0, 2), 8: (0,), 12: (0, 2), 13: (0, 2), 14: (208,)}
# Offsets inside a block whose bytes are signed 8-bit scales (Q6_K's 16 sub-block scales).
_I8_SCALES = {14: (192, 208)}
IR_VERSION = 10   # ONNX Runtime 1.23 reads up to 11, 1.31 up to 13


def block_of(ggml_type: int) -> tuple[int, int]:
    """(values per block, bytes per block)."""
    blk, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    return int(blk), int(size)


def row_bytes(ggml_type: int, k: int) -> int:
    blk, size = block_of(ggml_type)
    return k // blk * size


def random_rows(ggml_type: int, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """[n, row_bytes] uint8: random quants with float16 scales in +-[0.002, 0.03] (dmin/m >= 0)."""
    blk, size = block_of(ggml_type)
    blocks = rng.integers(0, 256, size=(n * (k // blk), size), dtype=np.uint8)
    for j, off in enumerate(_F16_FIELDS[ggml_type]):
        mag = rng.uniform(0.002, 0.03, size=blocks.shape[0])
        sign = np.where(rng.random(blocks.shape[0]) < 0.5, -1.0, 1.0) if j == 0 else 1.0
        blocks[:, off:off + 2] = (mag * sign).astype(np.float16).view(np.uint8).reshape(-1, 2)
    if ggml_type in _I8_SCALES:   # keep Q6_K's scales in llama.cpp's range (|s| <= 63 after quantize)
        a, b = _I8_SCALES[ggml_type]
        blocks[:, a:b] = rng.integers(-63, 64, size=(blocks.shape[0], b - a)).astype(np.int8).view(np.uint8)
    return blocks.reshape(n, k // blk * size)


def dequant(ggml_type: int, rows: np.ndarray, k: int) -> np.ndarray:
    """[n, k] float32 via gguf-py's dequantizer (the oracle)."""
    return np.asarray(quants.dequantize(rows, GGMLQuantizationType(ggml_type)), dtype=np.float32).reshape(-1, k)


def error_bound(ggml_type: int, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per output element, an upper bound of |op - x @ w.T| from quantizing x to int8 per block
    (at most amax/254 a value; a 256-value block for the K-quants covers either block size) plus
    float32 accumulation."""
    k = x.shape[-1]
    blk = 256 if ggml_type >= 12 else 32
    xb = x.reshape(-1, k // blk, blk)
    step = np.abs(xb).max(axis=2) / 254.0                       # [m, blocks]
    wb = np.abs(w).reshape(w.shape[0], k // blk, blk).sum(axis=2)   # [n, blocks]
    quant = step @ wb.T
    mag = np.abs(x.reshape(-1, k)) @ np.abs(w).T
    return (quant * 1.01 + mag * 2e-5 + 1e-6).reshape(*x.shape[:-1], w.shape[0])


def gguf_matmul_model(w: np.ndarray, *, ggml_type: int, k: int, n: int, x_rank: int = 3,
                      x_type: int = TensorProto.FLOAT, attrs: dict[str, Any] | None = None,
                      w_input: bool = False) -> bytes:
    """A model with one GgufMatMul node: input X (symbolic dims), initializer W (or, with
    w_input, a graph input W the caller feeds), output Y."""
    node_attrs: dict[str, Any] = {"ggml_type": ggml_type, "K": k, "N": n}
    node_attrs.update(attrs or {})
    node_attrs = {a: v for a, v in node_attrs.items() if v is not None}
    node = helper.make_node("GgufMatMul", ["X", "W"], ["Y"], domain="ai.amber", **node_attrs)
    dims: list[Any] = [f"d{i}" for i in range(x_rank)]
    inputs = [helper.make_tensor_value_info("X", x_type, dims)]
    if w_input:
        inputs.append(helper.make_tensor_value_info("W", TensorProto.UINT8, ["w0", "w1"]))
    graph = helper.make_graph(
        [node], "gguf_matmul", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [] if w_input else [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, ir_version=IR_VERSION,
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.amber", 1)])
    return bytes(model.SerializeToString())


def kernel_matmul(lib: ctypes.CDLL, ggml_type: int, x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """x @ dequant(rows).T through amber_quantize_act + one amber_gemm_rows over all of [0, N)."""
    k = x.shape[-1]
    n = rows.shape[0]
    xr = np.ascontiguousarray(x.reshape(-1, k), dtype=np.float32)
    m = xr.shape[0]
    ab = int(lib.amber_act_bytes(ggml_type, k))
    assert ab > 0
    act = np.zeros((m, ab), dtype=np.uint8)
    for i in range(m):
        assert lib.amber_quantize_act(ggml_type, xr[i].ctypes.data, k, act[i].ctypes.data) == 0
    y = np.zeros((m, n), dtype=np.float32)
    w = np.ascontiguousarray(rows)
    assert lib.amber_gemm_rows(ggml_type, act.ctypes.data, m, w.ctypes.data, k, 0, n, y.ctypes.data, n) == 0
    return y.reshape(*x.shape[:-1], n)


def check_model(data: bytes) -> None:
    """Raises if the ONNX checker rejects the model (custom domains are allowed)."""
    onnx.checker.check_model(onnx.load_from_string(data))
