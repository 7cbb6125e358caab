"""The architecture-specific pieces of the decoder graph (see arch.py for which model needs which).

`graph.build_graph` lays out the llama layer and calls these where architectures differ: rotary
tables per layer (gemma3's local/global bases, phi3's long-context factors), embedding scale,
per-head Q/K RMSNorm, GroupQueryAttention's scale / sliding window / soft-cap, post-norms, GeGLU,
and the final logit soft-cap.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import TensorProto

from .arch import ARCHS
from .gguf_source import ModelSpec

if TYPE_CHECKING:
    from engine.onnx.builder import GraphBuilder

    from .model_weights import LayerWeights, ModelWeights

MS = "com.microsoft"


def rope_angles(spec: ModelSpec, theta: float, factors: np.ndarray | None, linear: float) -> np.ndarray:
    """Rotary angles [context, head_dim/2]: position / linear * inv_freq / factors."""
    hd = spec.head_dim
    inv_freq = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    if factors is not None:
        inv_freq = inv_freq / factors.astype(np.float64)
    positions = np.arange(spec.context_length, dtype=np.float64) / linear
    return np.outer(positions, inv_freq)


def _tables(g: GraphBuilder, tag: str, angles: np.ndarray, mscale: float = 1.0) -> tuple[str, str]:
    cos = (np.cos(angles) * mscale).astype(np.float32)
    sin = (np.sin(angles) * mscale).astype(np.float32)
    return g.init(f"rotary{tag}.cos_cache", cos), g.init(f"rotary{tag}.sin_cache", sin)


def rope_inputs(g: GraphBuilder, spec: ModelSpec, weights: ModelWeights, total_len: str) -> list[tuple[str, str]]:
    """GroupQueryAttention's (cos_cache, sin_cache) for every layer."""
    p = spec.params
    linear = float(spec.rope_scaling["factor"]) if spec.rope_scaling.get("rope_type") == "linear" else 1.0
    if p.longrope is not None and weights.rope_long is not None and weights.rope_short is not None:
        # Hugging Face's longrope: short factors while the sequence fits the original context, long
        # ones beyond (chosen per run from the total length, as transformers does), both scaled by
        # the attention factor. One table holds the short rows [0, orig) then the long rows
        # [0, context); each run slices its total_len rows from the short or the long part, which
        # copies only as many rows as the sequence has (a Where over two full tables would copy
        # both on every decode step).
        lr = p.longrope
        short = rope_angles(spec, spec.rope_theta, weights.rope_short, 1.0)[:lr.original_context]
        long_ = rope_angles(spec, spec.rope_theta, weights.rope_long, 1.0)
        cos, sin = _tables(g, ".short_long", np.concatenate([short, long_]), lr.attn_factor)
        is_long = g.op1("Cast", [g.op1("Greater", [total_len, g.const(lr.original_context, np.int32)])],
                        to=TensorProto.INT64)
        start = g.op1("Reshape", [g.op1("Mul", [is_long, g.const(lr.original_context)]), g.const([1])])
        end = g.op1("Add", [start, g.op1("Cast", [total_len], to=TensorProto.INT64)])
        chosen = (g.op1("Slice", [cos, start, end, g.const([0])]), g.op1("Slice", [sin, start, end, g.const([0])]))
        return [chosen] * spec.n_layers
    main = _tables(g, "", rope_angles(spec, spec.rope_theta, weights.rope_factors, linear))
    if p.local_rope_theta is None or not any(p.swa_layers):
        return [main] * spec.n_layers
    # gemma3: sliding layers rotate with their own base and without the global layers' scaling.
    local = _tables(g, ".local", rope_angles(spec, p.local_rope_theta, None, 1.0))
    return [local if p.window(i) > 0 else main for i in range(spec.n_layers)]


def scale_embedding(g: GraphBuilder, spec: ModelSpec, h: str) -> str:
    """gemma: the embeddings times sqrt(n_embd) (the tied lm_head uses the unscaled table)."""
    if not ARCHS[spec.architecture].embed_scale:
        return h
    return g.op1("Mul", [h, g.const(np.sqrt(spec.n_embd), np.float32)])


def _head_norm(g: GraphBuilder, spec: ModelSpec, x: str, gamma: np.ndarray, name: str, heads: int) -> str:
    """RMSNorm over each head's head_dim values of a [B, S, heads * head_dim] tensor."""
    per_head = g.op1("Reshape", [x, g.const([0, 0, heads, spec.head_dim])])
    normed = g.op1("SimplifiedLayerNormalization", [per_head, g.init(name, gamma)], axis=-1,
                   epsilon=spec.rms_eps)
    return g.op1("Reshape", [normed, g.const([0, 0, heads * spec.head_dim])])


def qk_norm(g: GraphBuilder, spec: ModelSpec, lw: LayerWeights, prefix: str, qkv_inputs: list[str]) -> list[str]:
    """qwen3 / gemma3: per-head RMSNorm of Q and K (before GroupQueryAttention's rotary)."""
    if lw.q_norm is None or lw.k_norm is None:
        return qkv_inputs
    if qkv_inputs[1] == "":          # fused Q|K|V: split it to normalize Q and K
        sizes = [spec.n_head * spec.head_dim, spec.n_head_kv * spec.head_dim, spec.n_head_kv * spec.head_dim]
        qkv_inputs = g.op("Split", [qkv_inputs[0], g.const(sizes)], n_out=3, axis=-1)
    q, k, v = qkv_inputs
    return [_head_norm(g, spec, q, lw.q_norm, f"{prefix}.self_attn.q_norm.weight", spec.n_head),
            _head_norm(g, spec, k, lw.k_norm, f"{prefix}.self_attn.k_norm.weight", spec.n_head_kv), v]


def gqa_attrs(spec: ModelSpec, layer: int) -> dict[str, Any]:
    """GroupQueryAttention's scale, local_window_size and softcap for `layer`."""
    p = spec.params
    scale = p.attn_scale if p.attn_scale is not None else 1.0 / np.sqrt(spec.head_dim)
    attrs: dict[str, Any] = {"scale": float(scale), "local_window_size": p.window(layer)}
    if p.attn_softcap:
        attrs["softcap"] = float(p.attn_softcap)   # cap * tanh(scores / cap), after the scale
    return attrs


def post_norm(g: GraphBuilder, spec: ModelSpec, x: str, gamma: np.ndarray | None, name: str) -> str:
    """gemma: RMSNorm of a sublayer's output before it joins the residual."""
    if gamma is None:
        return x
    return g.op1("SimplifiedLayerNormalization", [x, g.init(name, gamma)], axis=-1, epsilon=spec.rms_eps)


def activation(g: GraphBuilder, spec: ModelSpec, gate: str, up: str) -> str:
    """act(gate) * up: SiLU (SwiGLU) or GELU with the tanh approximation (GeGLU)."""
    if ARCHS[spec.architecture].activation == "gelu_tanh":
        # gelu_tanh(x) = 0.5 x (1 + tanh(z)) = x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3):
        # the same function from ops every provider has in float16 too (ORT's CPU FastGelu is
        # float32 only, and the GPU variant is checked on the CPU provider).
        cube = g.op1("Mul", [g.op1("Mul", [gate, gate]), gate])
        inner = g.op1("Add", [gate, g.op1("Mul", [cube, g.const(0.044715, np.float32)])])
        z2 = g.op1("Mul", [inner, g.const(2.0 * np.sqrt(2.0 / np.pi), np.float32)])
        return g.op1("Mul", [g.op1("Mul", [gate, g.op1("Sigmoid", [z2])]), up])
    return g.op1("Mul", [g.op1("Mul", [gate, g.op1("Sigmoid", [gate])]), up])


def final_softcap(g: GraphBuilder, spec: ModelSpec) -> None:
    """gemma2: logits = cap * tanh(logits / cap), applied to the node that writes `logits`."""
    cap = spec.params.final_softcap
    if not cap:
        return
    raw = g.name("logits_uncapped")
    for node in g.nodes:
        for j, out in enumerate(node.output):
            if out == "logits":
                node.output[j] = raw
    # cap * tanh(l / cap) = 2 cap * sigmoid(2 l / cap) - cap (Sigmoid: a float16 kernel everywhere)
    sig = g.op1("Sigmoid", [g.op1("Mul", [raw, g.const(2.0 / cap, np.float32)])])
    g.op1("Sub", [g.op1("Mul", [sig, g.const(2.0 * cap, np.float32)]), g.const(cap, np.float32)],
          outputs=["logits"])
