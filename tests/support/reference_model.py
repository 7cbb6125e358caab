"""The tiny converted models' reference: the model configurations the converter tests sweep, an
independent float64 numpy forward pass from the Hugging Face-order weights a tiny GGUF encodes
(no code shared with the importer), and a runner that drives a converted folder as the engine does.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

from tests.support.tiny_gguf import TinyConfig, TinyModel, variant

# ---- configurations ------------------------------------------------------------------------
BASE = TinyConfig()                                                     # llama, 64 wide, GQA 4/2, hd 16
Q4K = dict(n_embd=256, n_head=4, head_dim=64, n_ff=512)                 # Q4_K needs rows of 256
CONFIGS = [
    BASE,                                                               # llama F32 GQA tied
    variant(BASE, n_head_kv=4, tied=False, seed=1),                     # llama F32 MHA untied
    variant(BASE, arch="qwen2", bias=True, seed=2),                     # qwen2 F32 GQA tied + bias
    variant(BASE, head_dim=32, n_ff=160, seed=3),                       # head_dim != n_embd / n_head
    variant(BASE, bias=True, tied=False, seed=4),                       # llama + bias: bias rows permuted
    variant(BASE, wtype="F16", seed=5),
    variant(BASE, wtype="Q4_1", pre="smollm", seed=6),                  # SmolLM2's layout
    variant(BASE, wtype="Q4_1", n_head_kv=4, tied=False, seed=7),
    variant(BASE, wtype="Q4_1", arch="qwen2", bias=True, tied=False, seed=8),
    variant(BASE, wtype="Q4_K", tied=False, seed=9, **Q4K),
    variant(BASE, wtype="Q4_K", arch="qwen2", bias=True, seed=10, **Q4K),
    variant(BASE, wtype="Q4_K", n_head_kv=4, seed=11, **Q4K),
    variant(BASE, wtype="Q4_0", seed=12),
    variant(BASE, wtype="Q4_0", arch="qwen2", bias=True, n_head_kv=1, tied=False, seed=13),
    variant(BASE, wtype="Q8_0", tied=False, seed=14),
    variant(BASE, wtype="Q8_0", arch="qwen2", bias=True, n_head_kv=4, seed=15),
    # Mixed types as llama.cpp's _M/_S files have them: fused Q|K|V with Q4_0 + Q4_1 zero points,
    # then Q|K|V and gate|up that cannot be fused (q4 next to q8 / dense).
    variant(BASE, wtype="Q4_0", tied=False, seed=16,
            overrides=(("attn_k.weight", "Q4_1"), ("ffn_up.weight", "Q4_1"), ("ffn_down.weight", "Q8_0"))),
    variant(BASE, wtype="Q4_1", seed=17,
            overrides=(("attn_v.weight", "Q8_0"), ("ffn_up.weight", "F32"), ("output.weight", "Q8_0"))),
    variant(BASE, wtype="BF16", tied=False, seed=18),
    variant(BASE, wtype="Q4_1", rope_freqs=True, rope_theta=500000.0, seed=19),   # llama 3.x style
    variant(BASE, rope_linear=4.0, n_head_kv=4, seed=20),
    # Exact 5- and 6-bit forms (two 4-bit matmuls in the exact mode).
    variant(BASE, wtype="Q5_0", tied=False, seed=50),
    variant(BASE, wtype="Q5_1", arch="qwen2", bias=True, seed=51),
    variant(BASE, wtype="Q5_K", tied=False, seed=52, **Q4K),
    variant(BASE, wtype="Q6_K", arch="qwen2", bias=True, seed=53, **Q4K),
    # A Q4_K_M mix as llama.cpp writes it: Q4_K with Q6_K V/down/output, Q5_0 where rows are not
    # multiples of 256, Q8_0 elsewhere; and the fused forms that cannot fuse.
    variant(BASE, wtype="Q4_K", tied=False, seed=54, **Q4K,
            overrides=(("attn_v.weight", "Q6_K"), ("ffn_down.weight", "Q6_K"), ("output.weight", "Q6_K"),
                       ("token_embd.weight", "Q5_0"))),
    variant(BASE, wtype="Q5_0", seed=55,
            overrides=(("attn_v.weight", "Q8_0"), ("ffn_up.weight", "Q4_1"), ("ffn_down.weight", "Q8_0"))),
    # Architectures beyond llama/qwen2 (arch.py), each in float and in llama.cpp's quantized forms.
    variant(BASE, arch="qwen3", rms_eps=1e-6, seed=30),                               # per-head Q/K norms
    variant(BASE, arch="qwen3", wtype="Q4_K", tied=False, seed=31, **Q4K),
    variant(BASE, arch="qwen3", wtype="Q8_0", n_head_kv=1, seed=32),
    variant(BASE, arch="gemma2", rms_eps=1e-6, sliding_window=16, attn_softcap=50.0 / 25,
            final_softcap=30.0 / 10, seed=33),                                         # softcaps that bite
    variant(BASE, arch="gemma2", wtype="Q4_0", sliding_window=16, attn_softcap=2.0, final_softcap=3.0,
            head_dim=32, seed=34),
    variant(BASE, arch="gemma3", n_layers=6, sliding_window=16, rope_theta=1e6, rope_linear=8.0,
            rms_eps=1e-6, seed=35),                                                    # 5 local + 1 global
    variant(BASE, arch="gemma3", wtype="Q4_K", n_layers=6, sliding_window=24, rope_theta=1e6, seed=36, **Q4K),
    variant(BASE, arch="phi3", tied=False, longrope=64, seed=37),                     # fused QKV, gate|up
    variant(BASE, arch="phi3", wtype="Q4_1", tied=False, seed=38),
    variant(BASE, arch="phi3", wtype="Q8_0", tied=False, sliding_window=32, longrope=64, n_head_kv=4, seed=39),
]
IDS = [c.name for c in CONFIGS]
assert len(set(IDS)) == len(IDS), IDS

LOGIT_TOL = 1e-3          # converted model vs the float64 reference (exact weights)
CACHE_TOL = 5e-4          # cached vs one-shot runs of the same ONNX model: float32 kernels for one
                          # row and for many sum in different orders (measured up to 1.5e-4 on the
                          # 256-wide Q4_K models, ~2e-5 on the 64-wide ones)


# ---- the numpy reference -------------------------------------------------------------------
def _rms_norm(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def _rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def _sliding(c: TinyConfig, layer: int) -> bool:
    """Hugging Face's sliding layers: gemma2 the even ones, gemma3 all but every 6th, phi3 all."""
    if not c.sliding_window:
        return False
    return {"gemma2": layer % 2 == 0, "gemma3": (layer + 1) % 6 != 0}.get(c.arch, True)


def reference_logits(model: TinyModel, ids: list[int] | np.ndarray) -> np.ndarray:
    """A Hugging Face Llama/Qwen2/Qwen3/Gemma2/Gemma3/Phi3 forward pass in float64; the last
    position's logits [vocab]. Written from the transformers modelling code, not from the importer."""
    c, W = model.config, model.weights
    ids = np.asarray(ids)
    T, H, KV, hd = len(ids), c.n_head, c.n_head_kv, c.head_dim
    gemma = c.arch in ("gemma2", "gemma3")

    def norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return _rms_norm(x, 1.0 + w if gemma else w, c.rms_eps)    # Gemma's RMSNorm: x * (1 + w)

    def rotary(theta: float, linear: float) -> tuple[np.ndarray, np.ndarray]:
        inv_freq = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
        mscale = 1.0
        if "rope_factors" in W:                                      # llama3 frequency factors
            inv_freq = inv_freq / W["rope_factors"]
        if c.longrope:                                               # phi3 longrope, chosen by length
            inv_freq = inv_freq / (W["rope_long"] if T > c.longrope else W["rope_short"])
            factor = c.context_length / c.longrope
            mscale = np.sqrt(1 + np.log(factor) / np.log(c.longrope))
        positions = np.arange(T, dtype=np.float64) / linear          # linear position interpolation
        angles = np.outer(positions, inv_freq)
        emb = np.concatenate([angles, angles], axis=-1)              # [T, hd]: first half / second half
        return np.cos(emb)[:, None, :] * mscale, np.sin(emb)[:, None, :] * mscale

    rope_global = rotary(c.rope_theta, c.rope_linear or 1.0)
    rope_local = rotary(10000.0, 1.0) if c.arch == "gemma3" else rope_global   # rope_local_base_freq
    scale = 1.0 / np.sqrt(hd)                                        # query_pre_attn_scalar = head_dim
    causal = np.triu(np.full((T, T), -np.inf), k=1)
    band = causal + np.tril(np.full((T, T), -np.inf), k=-c.sliding_window) if c.sliding_window else causal
    x = W["embed"][ids]
    if gemma:
        x = x * np.sqrt(c.n_embd)
    for i in range(c.n_layers):
        p = f"layers.{i}."
        sliding = _sliding(c, i)
        cos, sin = rope_local if sliding else rope_global
        h = norm(x, W[p + "attn_norm"])
        q = h @ W[p + "q"].T + W.get(p + "q_bias", 0.0)
        k = h @ W[p + "k"].T + W.get(p + "k_bias", 0.0)
        v = h @ W[p + "v"].T + W.get(p + "v_bias", 0.0)
        q, k, v = q.reshape(T, H, hd), k.reshape(T, KV, hd), v.reshape(T, KV, hd)
        if p + "q_norm" in W:                                        # qwen3 / gemma3: per-head norms
            q, k = norm(q, W[p + "q_norm"]), norm(k, W[p + "k_norm"])
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        out = np.empty((T, H, hd))
        group = H // KV
        for head in range(H):
            kv = head // group
            scores = q[:, head] @ k[:, kv].T * scale
            if c.attn_softcap:
                scores = np.tanh(scores / c.attn_softcap) * c.attn_softcap
            scores = scores + (band if sliding else causal)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            out[:, head] = (scores / scores.sum(-1, keepdims=True)) @ v[:, kv]
        o = out.reshape(T, H * hd) @ W[p + "o"].T
        x = x + (norm(o, W[p + "post_attn_norm"]) if gemma else o)
        h = norm(x, W[p + "ffn_norm"])
        gate = h @ W[p + "gate"].T
        act = _gelu_tanh(gate) if gemma else gate / (1.0 + np.exp(-gate))
        mlp = (act * (h @ W[p + "up"].T)) @ W[p + "down"].T
        x = x + (norm(mlp, W[p + "post_ffn_norm"]) if gemma else mlp)
    last = norm(x[-1], W["final_norm"])
    logits = last @ W.get("lm_head", W["embed"]).T
    if c.final_softcap:
        logits = np.tanh(logits / c.final_softcap) * c.final_softcap
    return logits


# ---- running the converted model -----------------------------------------------------------
class Runner:
    """Drives a converted folder the way the engine does: empty past first, presents after."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        so.log_severity_level = 3
        self.session = ort.InferenceSession(str(folder / "model.onnx"), so, providers=["CPUExecutionProvider"])
        cfg = json.loads((folder / "config.json").read_text())
        self.n_layers, self.kv, self.hd = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]

    def empty(self) -> dict[str, np.ndarray]:
        z = np.zeros((1, self.kv, 0, self.hd), np.float32)
        return {f"{i}.{kind}": z for i in range(self.n_layers) for kind in ("key", "value")}

    def run(self, ids: list[int] | np.ndarray,
            past: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        past = past if past is not None else self.empty()
        ids = np.asarray(ids, np.int64).reshape(1, -1)
        n_past = past["0.key"].shape[2]
        feed = {"input_ids": ids,
                "attention_mask": np.ones((1, n_past + ids.shape[1]), np.int64),
                "position_ids": np.arange(n_past, n_past + ids.shape[1], dtype=np.int64)[None]}
        feed.update({f"past_key_values.{k}": v for k, v in past.items()})
        names = ["logits"] + [f"present.{k}" for k in past]
        outs = self.session.run(names, feed)
        logits = outs[0]
        assert logits.shape[:2] == (1, 1), logits.shape          # last position only
        return logits[0, -1].astype(np.float64), dict(zip(past, outs[1:], strict=True))


def prompt(model: TinyModel, n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(1000 + seed).integers(0, model.vocab_size, n)


def max_delta(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
