"""Reads one decoder layer's tensors from a GGUF, whatever the architecture's tensor layout.

llama/qwen2/qwen3/gemma2/gemma3 store Q, K, V, gate and up as separate matrices; phi3 stores
Q|K|V as one `attn_qkv.weight` and gate|up as one `ffn_up.weight` (gate first), which are split
by rows here (exact for every storage form: whole rows of blocks). gemma's GGUF norm weights
already include Gemma's "1 +" (llama.cpp's converter adds it), so every norm is a plain RMSNorm.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from .arch import ARCHS
from engine.onnx.errors import ModelImportError
from .gguf_source import ModelSpec
from .model_weights import LayerWeights
from engine.onnx.weights import Weight


class _Loader(Protocol):
    def matrix(self, name: str) -> Weight: ...
    def vector(self, name: str) -> np.ndarray: ...
    def optional_vector(self, name: str) -> np.ndarray | None: ...


def split_rows(w: Weight, sizes: list[int], name: str) -> list[Weight]:
    """A weight stacked along N cut into parts of `sizes` rows: views, no copy (the graph joins them
    back into the fused weight itself, see weights.concat_rows)."""
    if sum(sizes) != w.n:
        raise ModelImportError(f"tensor {name} has {w.n} rows, expected {sum(sizes)} from the model's metadata")
    parts, start = [], 0
    for size in sizes:
        parts.append(w.row_range(start, start + size))
        start += size
    return parts


def load_layer(loader: _Loader, spec: ModelSpec, i: int) -> LayerWeights:
    """Layer `i`'s weights in Hugging Face order (before llama's Q/K row permutation is undone)."""
    info = ARCHS[spec.architecture]
    b = f"blk.{i}"
    q_rows, kv_rows = spec.n_head * spec.head_dim, spec.n_head_kv * spec.head_dim
    if info.fused_qkv:
        q, k, v = split_rows(loader.matrix(f"{b}.attn_qkv.weight"), [q_rows, kv_rows, kv_rows], f"{b}.attn_qkv.weight")
    else:
        q, k, v = (loader.matrix(f"{b}.attn_{x}.weight") for x in "qkv")
    attn_norm = loader.vector(f"{b}.attn_norm.weight")
    post_attn: np.ndarray | None
    post_ffn: np.ndarray | None
    if info.post_norms:
        post_attn = loader.vector(f"{b}.post_attention_norm.weight")
        ffn_norm = loader.vector(f"{b}.ffn_norm.weight")
        post_ffn = loader.vector(f"{b}.post_ffw_norm.weight")
    else:
        post_attn = post_ffn = None
        ffn_norm = loader.vector(f"{b}.ffn_norm.weight")
    o = loader.matrix(f"{b}.attn_output.weight")
    if info.fused_gate_up:
        gate, up = split_rows(loader.matrix(f"{b}.ffn_up.weight"), [spec.n_ff, spec.n_ff], f"{b}.ffn_up.weight")
    else:
        gate, up = loader.matrix(f"{b}.ffn_gate.weight"), loader.matrix(f"{b}.ffn_up.weight")
    down = loader.matrix(f"{b}.ffn_down.weight")
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    if info.qk_norm:
        q_norm, k_norm = loader.vector(f"{b}.attn_q_norm.weight"), loader.vector(f"{b}.attn_k_norm.weight")
    return LayerWeights(
        attn_norm=attn_norm, ffn_norm=ffn_norm, q=q, k=k, v=v, o=o, gate=gate, up=up, down=down,
        q_bias=loader.optional_vector(f"{b}.attn_q.bias"), k_bias=loader.optional_vector(f"{b}.attn_k.bias"),
        v_bias=loader.optional_vector(f"{b}.attn_v.bias"),
        q_norm=q_norm, k_norm=k_norm, post_attn_norm=post_attn, post_ffn_norm=post_ffn)


def extra_vector_sizes(spec: ModelSpec) -> dict[str, int]:
    """Expected sizes of the architecture-specific per-layer vectors (for the layer checks)."""
    return {"q_norm": spec.head_dim, "k_norm": spec.head_dim,
            "post_attn_norm": spec.n_embd, "post_ffn_norm": spec.n_embd}
