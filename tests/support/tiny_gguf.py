"""Writes tiny random-weight GGUF files for the importer's tests.

`write_tiny_gguf` produces a llama.cpp-style GGUF (llama, qwen2, qwen3, gemma2, gemma3 or phi3, in
the tensor layout and metadata llama.cpp's convert_hf_to_gguf.py writes for each) and returns, next to it, the
Hugging Face-order float weights the file encodes (after the quantization round trip, i.e. exactly
the values a correct importer must reproduce) and the in-memory tokenizer the vocabulary came from.
Nothing here imports `engine.convert`: the reference is independent of the code under test.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT  # noqa: N814 - short, like ggml's own type tags
from gguf import quants
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}")
TRAINING_TEXT = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "The capital of France is Paris. What is the capital of Germany?",
    "def main():\n    print('hello')  # a comment\n    return 42\n",
    "for (int i = 0; i < n; ++i) { sum += x[i]; }",
    "東京は日本の首都です。你好，世界！안녕하세요",
    "Numbers 12345 and 2024-11-30, pi = 3.14159",
    "Emoji 🎉🙂👍🏽 and ünïcödé façade naïve",
    "   leading spaces, trailing spaces   \n\n\ttabs and\r\nnewlines",
]
# Chat templates and their special tokens per architecture, shaped like the real models' (shortened).
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
    "else message['role'] %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}")
PHI3_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}")
QWEN3_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}"
    "{% endif %}{% endif %}")
ARCH_CHAT: dict[str, tuple[str, tuple[str, ...], str]] = {   # arch -> (template, extra specials, end of turn)
    "gemma2": (GEMMA_TEMPLATE, ("<start_of_turn>", "<end_of_turn>"), "<end_of_turn>"),
    "gemma3": (GEMMA_TEMPLATE, ("<start_of_turn>", "<end_of_turn>"), "<end_of_turn>"),
    "phi3": (PHI3_TEMPLATE, ("<|user|>", "<|assistant|>", "<|end|>"), "<|end|>"),
    "qwen3": (QWEN3_TEMPLATE, ("<think>", "</think>"), "<|im_end|>"),
}
GEMMA_ARCHS = ("gemma2", "gemma3")
WEIGHT_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0", "I32")



@dataclass(frozen=True)
class TinyConfig:
    arch: str = "llama"
    n_layers: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 128
    tied: bool = True
    bias: bool = False                 # q/k/v biases (qwen2 has them)
    wtype: str = "F32"                 # type of every 2-D weight unless overridden below
    overrides: tuple[tuple[str, str], ...] = ()   # (tensor-name suffix, type), e.g. ("attn_v.weight", "Q8_0")
    context_length: int = 512
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    pre: str = "default"               # tokenizer.ggml.pre
    vocab_size: int = 420
    rope_freqs: bool = False           # llama3-style rope_freqs.weight frequency factors
    rope_linear: float = 0.0           # linear rope scaling factor (0 = none)
    sliding_window: int = 0            # {arch}.attention.sliding_window (gemma2/gemma3/phi3)
    attn_softcap: float = 0.0          # gemma2 attn_logit_softcapping (0 = none)
    final_softcap: float = 0.0         # gemma2 final_logit_softcapping
    longrope: int = 0                  # phi3 long-context RoPE: original context length (0 = none)
    seed: int = 0

    @property
    def name(self) -> str:
        parts = [self.arch, self.wtype, "gqa" if self.n_head_kv < self.n_head else "mha",
                 "tied" if self.tied else "untied"]
        if self.bias:
            parts.append("bias")
        if self.head_dim * self.n_head != self.n_embd:
            parts.append(f"hd{self.head_dim}")
        if self.overrides:
            parts.append("mixed")
        if self.rope_freqs:
            parts.append("ropefreqs")
        if self.rope_linear:
            parts.append(f"ropelinear{self.rope_linear:g}")
        if self.n_layers != 2:
            parts.append(f"L{self.n_layers}")
        if self.sliding_window:
            parts.append(f"swa{self.sliding_window}")
        if self.attn_softcap or self.final_softcap:
            parts.append(f"softcap{self.attn_softcap:g}-{self.final_softcap:g}")
        if self.longrope:
            parts.append(f"longrope{self.longrope}")
        return "-".join(parts)


@dataclass
class TinyModel:
    path: Path
    config: TinyConfig
    weights: dict[str, np.ndarray]     # HF names, float64, unpermuted, after the quantization round trip
                                       # (+ "rope_factors" when the file has rope_freqs.weight)
    tokenizer: Tokenizer               # the tokenizer the GGUF vocabulary was exported from
    tokens: list[str] = field(default_factory=list)
    bos_id: int = 1
    eos_id: int = 2

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)


@lru_cache(maxsize=None)
def _trained_tokenizer_json(vocab_size: int, pre: str, extra_specials: tuple[str, ...] = ()) -> str:
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":      # SmolLM's pre-tokenizer splits digits one by one first
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS + list(extra_specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TRAINING_TEXT * 4, trainer)
    return tok.to_str()


def trained_tokenizer(vocab_size: int = 420, pre: str = "default", extra_specials: tuple[str, ...] = ()) -> Tokenizer:
    """A tiny byte-level BPE trained in memory (ids 0..2 are the special tokens, then `extra_specials`)."""
    return Tokenizer.from_str(_trained_tokenizer_json(vocab_size, pre, extra_specials))


SPM_PIECES = ["▁", "e", "h", "l", "o", "t", "a", "r", "i", "s", "n", "d", "w", "H", "▁t", "he", "▁the", "ll",
              "llo", "▁he", "▁hello", "in", "is", "▁is", "▁a", "re", "er", "on", "an", "▁w", "or", "ld",
              "▁wor", "▁world", "▁H", "el", "▁Hel", "▁Hello", "日", "本", "▁▁", "▁▁▁▁"]


def spm_vocab() -> tuple[list[str], list[int], list[float]]:
    """A tiny SentencePiece-style vocabulary: <unk> <s> </s>, 256 byte tokens, scored pieces."""
    tokens, types, scores = ["<unk>", "<s>", "</s>"], [2, 3, 3], [0.0, 0.0, 0.0]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(6)
        scores.append(0.0)
    for i, piece in enumerate(SPM_PIECES):
        tokens.append(piece)
        types.append(1)
        scores.append(-float(i))
    return tokens, types, scores


def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert script: rows of Q/K reordered for interleaved rotary."""
    rows = w.shape[0]
    head_dim = rows // n_head
    rest = w.shape[1:]
    return (w.reshape(n_head, 2, head_dim // 2, *rest).swapaxes(1, 2).reshape(rows, *rest))


def _random_q4_k(rng: np.random.Generator, n: int, k: int, std: float) -> np.ndarray:
    """Random but valid Q4_K super-blocks (144 bytes per 256 values), scaled to about `std`."""
    assert k % 256 == 0, "Q4_K rows must be multiples of 256"
    nsb = k // 256
    scales = rng.integers(0, 256, (n, nsb, 12), dtype=np.uint8)
    qs = rng.integers(0, 256, (n, nsb, 128), dtype=np.uint8)
    d = rng.uniform(0.5, 1.5, (n, nsb)).astype(np.float32)
    dmin = d * 7.5 * rng.uniform(0.8, 1.2, (n, nsb)).astype(np.float32)   # w = d*sc*q - dmin*m, ~centred

    def pack(d_: np.ndarray, dmin_: np.ndarray) -> np.ndarray:
        head = np.concatenate([d_.astype(np.float16)[..., None].view(np.uint8),
                               dmin_.astype(np.float16)[..., None].view(np.uint8)], axis=-1)
        return np.ascontiguousarray(np.concatenate([head.reshape(n, nsb, 4), scales, qs], axis=-1)
                                    .reshape(n, nsb * 144))

    trial = quants.dequantize(pack(d, dmin), QT.Q4_K)
    factor = std / float(trial.std())
    return pack(d * factor, dmin * factor)


def _random_k_blocks(rng: np.random.Generator, n: int, k: int, std: float, qtype: QT) -> np.ndarray:
    """Random but valid Q5_K (176 bytes per 256 values) or Q6_K (210 bytes) super-blocks, scaled to
    about `std`; gguf's own dequantizer gives the values they encode."""
    assert k % 256 == 0, "K-quant rows must be multiples of 256"
    nsb = k // 256
    d = rng.uniform(0.5, 1.5, (n, nsb)).astype(np.float32)

    def f16(x: np.ndarray) -> np.ndarray:
        return x.astype(np.float16)[..., None].view(np.uint8)

    if qtype == QT.Q5_K:
        scales = rng.integers(0, 256, (n, nsb, 12), dtype=np.uint8)
        bits = rng.integers(0, 256, (n, nsb, 160), dtype=np.uint8)               # qh (32) + qs (128)
        dmin = d * 15.5 * rng.uniform(0.8, 1.2, (n, nsb)).astype(np.float32)
        def pack(f):
            return (np.ascontiguousarray(np.concatenate(
                    [f16(d * f), f16(dmin * f), scales, bits], axis=-1).reshape(n, nsb * 176)))
    else:
        bits = rng.integers(0, 256, (n, nsb, 192), dtype=np.uint8)               # ql (128) + qh (64)
        sc = rng.integers(-64, 64, (n, nsb, 16), dtype=np.int8).view(np.uint8)
        def pack(f):
            return (np.ascontiguousarray(np.concatenate(
                    [bits, sc, f16(d * f)], axis=-1).reshape(n, nsb * 210)))
    trial = quants.dequantize(pack(np.float32(1.0)), qtype)
    return pack(np.float32(std / float(trial.std())))


def encode_matrix(rng: np.random.Generator, n: int, k: int, wtype: str,
                  std: float) -> tuple[np.ndarray, np.ndarray, QT | None]:
    """A random [n, k] matrix as (bytes or array for the GGUF, dequantized float64 values, raw type)."""
    if wtype == "Q4_K":
        raw = _random_q4_k(rng, n, k, std)
        return raw, quants.dequantize(raw, QT.Q4_K).astype(np.float64), QT.Q4_K
    if wtype in ("Q5_K", "Q6_K"):
        raw = _random_k_blocks(rng, n, k, std, QT[wtype])
        return raw, quants.dequantize(raw, QT[wtype]).astype(np.float64), QT[wtype]
    w = (rng.standard_normal((n, k)) * std).astype(np.float32)
    if wtype == "F32":
        return w, w.astype(np.float64), None
    if wtype == "F16":
        w16 = w.astype(np.float16)
        return w16, w16.astype(np.float64), None
    if wtype == "I32":
        wi = rng.integers(-8, 8, (n, k)).astype(np.int32)
        return wi, wi.astype(np.float64), None
    qtype = QT[wtype]
    if wtype in ("Q4_1", "Q5_1") and k >= 64:
        w[0, 32:64] = 0.0625            # a constant block (scale 0): exercises the importer's special case
    raw = quants.quantize(w, qtype)
    return raw, quants.dequantize(raw, qtype).astype(np.float64), qtype


def write_tiny_gguf(path: Path | str, cfg: TinyConfig = TinyConfig(), *,
                    architecture: str | None = None, drop: tuple[str, ...] = (),
                    replace_tensors: dict[str, np.ndarray] | None = None,
                    extra_tensors: dict[str, np.ndarray] | None = None,
                    metadata: dict[str, Any] | None = None, omit: tuple[str, ...] = (),
                    tokenizer: bool | str = True) -> TinyModel:
    """Writes the GGUF; the knobs after `cfg` produce broken files for the error tests.

    architecture: value of general.architecture (metadata keys still use cfg.arch);
    drop: tensor names to leave out; replace_tensors: tensor name -> array written instead;
    extra_tensors: more tensors (name -> array) the importer has no use for;
    metadata: extra {key: int | float | str} written as-is; omit: metadata keys to leave out;
    tokenizer: False writes no tokenizer, "spm" a SentencePiece (`llama`) one from `spm_vocab()`.
    """
    path = Path(path)
    rng = np.random.default_rng(cfg.seed)
    chat = ARCH_CHAT.get(cfg.arch)
    tok = trained_tokenizer(cfg.vocab_size, cfg.pre, chat[1] if chat else ())
    specials = SPECIAL_TOKENS + list(chat[1] if chat else ())
    vocab = tok.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))
    if tokenizer == "spm":
        tokens, spm_types, spm_scores = spm_vocab()
    merges = [" ".join(m) if isinstance(m, list) else m for m in json.loads(tok.to_str())["model"]["merges"]]
    n_vocab = len(tokens)
    a = cfg.arch
    D, H, KV, hd, F = cfg.n_embd, cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_ff
    overrides = dict(cfg.overrides)

    w = gguf.GGUFWriter(str(path), architecture or a)
    w.add_name(f"tiny-{cfg.name}")
    def put(add: Any, key: str, value: Any) -> None:
        if key not in omit:
            add(key, value)

    put(w.add_uint32, f"{a}.block_count", cfg.n_layers)
    put(w.add_uint32, f"{a}.context_length", cfg.context_length)
    put(w.add_uint32, f"{a}.embedding_length", D)
    put(w.add_uint32, f"{a}.feed_forward_length", F)
    put(w.add_uint32, f"{a}.attention.head_count", H)
    put(w.add_uint32, f"{a}.attention.head_count_kv", KV)
    put(w.add_float32, f"{a}.rope.freq_base", cfg.rope_theta)
    put(w.add_float32, f"{a}.attention.layer_norm_rms_epsilon", cfg.rms_eps)
    put(w.add_uint32, f"{a}.rope.dimension_count", hd)
    put(w.add_uint32, f"{a}.vocab_size", n_vocab)
    if cfg.rope_linear:
        put(w.add_string, f"{a}.rope.scaling.type", "linear")
        put(w.add_float32, f"{a}.rope.scaling.factor", cfg.rope_linear)
    if cfg.sliding_window:
        put(w.add_uint32, f"{a}.attention.sliding_window", cfg.sliding_window)
    if cfg.attn_softcap:
        put(w.add_float32, f"{a}.attn_logit_softcapping", cfg.attn_softcap)
    if cfg.final_softcap:
        put(w.add_float32, f"{a}.final_logit_softcapping", cfg.final_softcap)
    if cfg.longrope:   # what convert_hf_to_gguf.py writes for Phi-3 longrope (attention factor as HF computes it)
        put(w.add_uint32, f"{a}.rope.scaling.original_context_length", cfg.longrope)
        put(w.add_float32, f"{a}.rope.scaling.attn_factor", float(np.sqrt(
            1 + np.log(cfg.context_length / cfg.longrope) / np.log(cfg.longrope))))
    if hd * H != D:
        put(w.add_uint32, f"{a}.attention.key_length", hd)
        put(w.add_uint32, f"{a}.attention.value_length", hd)
    if tokenizer == "spm":
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_types(spm_types)
        w.add_token_scores(spm_scores)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        if "tokenizer.ggml.unknown_token_id" not in omit:
            w.add_unk_token_id(0)
    elif tokenizer:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(cfg.pre)
        w.add_token_list(tokens)
        w.add_token_types([3 if t in specials else 1 for t in tokens])
        w.add_token_merges(merges)
        w.add_bos_token_id(vocab["<|im_start|>"])
        w.add_eos_token_id(vocab["<|im_end|>"])
        w.add_pad_token_id(vocab["<|endoftext|>"])
        if "tokenizer.ggml.add_bos_token" not in omit:
            w.add_add_bos_token(False)
        if "tokenizer.chat_template" not in omit:
            w.add_chat_template(chat[0] if chat else CHATML_TEMPLATE)
    for key, value in (metadata or {}).items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_string(key, str(value))

    ref: dict[str, np.ndarray] = {}
    pending: list[tuple[str, np.ndarray, QT | None]] = []

    def matrix(name: str, hf: str, n: int, k: int, permute_heads: int = 0) -> None:
        fused(name, [(hf, n)], k, permute_heads)

    def fused(name: str, parts: list[tuple[str, int]], k: int, permute_heads: int = 0) -> None:
        """One GGUF matrix holding the parts' rows one after the other (phi3's Q|K|V, gate|up);
        stacking whole rows of blocks is exact, so each part's reference values are too."""
        wtype = next((t for suffix, t in overrides.items() if name.endswith(suffix)), cfg.wtype)
        datas = []
        for hf, n in parts:
            data, deq, qtype = encode_matrix(rng, n, k, wtype, std=1.0 / np.sqrt(k))
            ref[hf] = deq
            datas.append(data)
        data = np.concatenate(datas) if len(datas) > 1 else datas[0]
        if permute_heads:
            # The reference keeps HF order; the file holds llama.cpp's permuted rows. Permuting
            # whole rows of quantized blocks is exact, so the reference is still exact.
            data = llama_permute(data, permute_heads)
        pending.append((name, data, qtype))

    gemma = a in GEMMA_ARCHS

    def vector(name: str, hf: str, values: np.ndarray, permute_heads: int = 0, norm: bool = False) -> None:
        values = values.astype(np.float32)
        ref[hf] = values.astype(np.float64)
        if norm and gemma:
            # Gemma's RMSNorm multiplies by (1 + w); llama.cpp's converter stores 1 + w. The
            # reference keeps Hugging Face's w.
            ref[hf] = (values - 1.0).astype(np.float64)
        pending.append((name, llama_permute(values, permute_heads) if permute_heads else values, None))

    matrix("token_embd.weight", "embed", n_vocab, D)
    if cfg.rope_freqs:   # llama3 style: low frequencies slowed down, high ones kept
        vector("rope_freqs.weight", "rope_factors", np.linspace(1.0, 8.0, hd // 2))
    if cfg.longrope:     # phi3: per-frequency factors for short and long contexts
        vector("rope_factors_long.weight", "rope_long", np.linspace(1.0, 12.0, hd // 2))
        vector("rope_factors_short.weight", "rope_short", np.linspace(1.0, 1.5, hd // 2))
    for i in range(cfg.n_layers):
        b, p = f"blk.{i}", f"layers.{i}."
        perm_q = H if a == "llama" else 0
        perm_k = KV if a == "llama" else 0
        vector(f"{b}.attn_norm.weight", p + "attn_norm", 1.0 + 0.1 * rng.standard_normal(D), norm=True)
        if a == "phi3":
            fused(f"{b}.attn_qkv.weight", [(p + "q", H * hd), (p + "k", KV * hd), (p + "v", KV * hd)], D)
        else:
            matrix(f"{b}.attn_q.weight", p + "q", H * hd, D, perm_q)
            matrix(f"{b}.attn_k.weight", p + "k", KV * hd, D, perm_k)
            matrix(f"{b}.attn_v.weight", p + "v", KV * hd, D)
        if a in ("qwen3", "gemma3"):
            vector(f"{b}.attn_q_norm.weight", p + "q_norm", 1.0 + 0.2 * rng.standard_normal(hd), norm=True)
            vector(f"{b}.attn_k_norm.weight", p + "k_norm", 1.0 + 0.2 * rng.standard_normal(hd), norm=True)
        if cfg.bias:
            vector(f"{b}.attn_q.bias", p + "q_bias", 0.3 * rng.standard_normal(H * hd), perm_q)
            vector(f"{b}.attn_k.bias", p + "k_bias", 0.3 * rng.standard_normal(KV * hd), perm_k)
            vector(f"{b}.attn_v.bias", p + "v_bias", 0.3 * rng.standard_normal(KV * hd))
        matrix(f"{b}.attn_output.weight", p + "o", D, H * hd)
        if gemma:
            vector(f"{b}.post_attention_norm.weight", p + "post_attn_norm", 1.0 + 0.1 * rng.standard_normal(D),
                   norm=True)
        vector(f"{b}.ffn_norm.weight", p + "ffn_norm", 1.0 + 0.1 * rng.standard_normal(D), norm=True)
        if a == "phi3":
            fused(f"{b}.ffn_up.weight", [(p + "gate", F), (p + "up", F)], D)
        else:
            matrix(f"{b}.ffn_gate.weight", p + "gate", F, D)
            matrix(f"{b}.ffn_up.weight", p + "up", F, D)
        matrix(f"{b}.ffn_down.weight", p + "down", D, F)
        if gemma:
            vector(f"{b}.post_ffw_norm.weight", p + "post_ffn_norm", 1.0 + 0.1 * rng.standard_normal(D), norm=True)
    vector("output_norm.weight", "final_norm", 1.0 + 0.1 * rng.standard_normal(D), norm=True)
    if not cfg.tied:
        matrix("output.weight", "lm_head", n_vocab, D)

    for name, data, qtype in pending:
        if name in drop:
            continue
        if replace_tensors and name in replace_tensors:
            data, qtype = replace_tensors[name], None
        if qtype is None:
            w.add_tensor(name, np.ascontiguousarray(data))
        else:
            w.add_tensor(name, np.ascontiguousarray(data), raw_dtype=qtype)
    for name, data in (extra_tensors or {}).items():
        w.add_tensor(name, np.ascontiguousarray(data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if tokenizer == "spm":
        return TinyModel(path=path, config=cfg, weights=ref, tokenizer=tok, tokens=tokens, bos_id=1, eos_id=2)
    return TinyModel(path=path, config=cfg, weights=ref, tokenizer=tok, tokens=tokens,
                     bos_id=vocab["<|im_start|>"], eos_id=vocab["<|im_end|>"])


def variant(cfg: TinyConfig, **changes: Any) -> TinyConfig:
    return replace(cfg, **changes)
