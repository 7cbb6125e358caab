"""The weights a decoder graph is built from: one layer's, and the whole model's."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from engine.onnx.weights import Weight

@dataclass
class LayerWeights:
    attn_norm: np.ndarray
    ffn_norm: np.ndarray
    q: Weight
    k: Weight
    v: Weight
    o: Weight
    gate: Weight
    up: Weight
    down: Weight
    q_bias: np.ndarray | None = None
    k_bias: np.ndarray | None = None
    v_bias: np.ndarray | None = None
    q_norm: np.ndarray | None = None          # per-head Q/K RMSNorm (qwen3, gemma3)
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None  # gemma's norms of the attention / MLP outputs
    post_ffn_norm: np.ndarray | None = None

@dataclass
class ModelWeights:
    embedding: Weight
    output: Weight | None          # None: tied to the embedding
    final_norm: np.ndarray
    layers: list[LayerWeights] = field(default_factory=list)
    rope_factors: np.ndarray | None = None   # llama3 frequency factors (rope_freqs.weight)
    output_fn: Callable[[], Weight | None] | None = None   # loads `output` when the graph needs it
    rope_long: np.ndarray | None = None      # phi3 long-context factors (rope_factors_long/short.weight)
    rope_short: np.ndarray | None = None

