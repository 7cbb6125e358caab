"""What each supported GGUF architecture needs from the importer: one table, one metadata reader.

The graph builder (graph.py + graph_blocks.py) and the weight loader (arch_weights.py) ask
`ARCHS[spec.architecture]` what to do instead of testing architecture names. The per-model values
(soft-capping, sliding windows, attention scale, long-RoPE) come from the GGUF's metadata as
llama.cpp's own loader reads them (src/llama-model.cpp), into `ArchParams`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from . import gguf_scan as gs
from engine.onnx.errors import ModelImportError


class MetadataSource(Protocol):
    """What the architecture table reads of a GGUF (engine.convert.gguf_source.GGUFSource): typed,
    bounded metadata fields and which tensors exist."""
    path: Path
    layout: gs.GGUFLayout

    def int_field(self, key: str, default: int | None = None, *, lo: int = 0, hi: int = 2 ** 63 - 1,
                  required: bool = False) -> int | None: ...

    def require_int(self, key: str, *, lo: int = 0, hi: int = 2 ** 63 - 1) -> int: ...

    def float_field(self, key: str, default: float, *, lo: float, hi: float,
                    required: bool = False) -> float: ...

    def array_field(self, key: str, elem_ok: tuple[int, ...], want: str) -> list[Any] | None: ...

    def has_tensor(self, name: str) -> bool: ...


@dataclass(frozen=True)
class ArchInfo:
    """Structure of one architecture's decoder layer, as llama.cpp writes it into a GGUF."""
    hf_class: str                      # config.json "architectures"
    permute_qk: bool = False           # llama.cpp permutes Q/K rows for interleaved rotary (llama only)
    fused_qkv: bool = False            # attn_qkv.weight holds Q|K|V (phi3)
    fused_gate_up: bool = False        # ffn_up.weight holds gate|up, no ffn_gate (phi3)
    qk_norm: bool = False              # per-head RMSNorm of Q and K before rotary (qwen3, gemma3)
    post_norms: bool = False           # RMSNorm of the attention and MLP outputs (gemma2, gemma3)
    activation: Literal["silu", "gelu_tanh"] = "silu"
    embed_scale: bool = False          # embeddings times sqrt(n_embd) (gemma)
    # Sliding-window layers when the GGUF has a window: every layer i with i % period < period - 1
    # (llama.cpp's set_swa_pattern: gemma2 2, gemma3 6); 1 = every layer (phi3's window).
    swa_period: int = 0
    local_rope_theta: float | None = None   # rotary base of sliding layers (gemma3: 10000, unscaled)
    # Models whose attention scale is 1/sqrt(n_embd / n_head) rather than 1/sqrt(head_dim):
    # llama.cpp keys this on the layer count (gemma2 27B: 46 layers, gemma3 27B: 62).
    embd_per_head_scale_layers: int = 0


ARCHS: dict[str, ArchInfo] = {
    "llama": ArchInfo("LlamaForCausalLM", permute_qk=True),
    "qwen2": ArchInfo("Qwen2ForCausalLM"),
    "qwen3": ArchInfo("Qwen3ForCausalLM", qk_norm=True),
    "gemma2": ArchInfo("Gemma2ForCausalLM", post_norms=True, activation="gelu_tanh", embed_scale=True,
                       swa_period=2, embd_per_head_scale_layers=46),
    "gemma3": ArchInfo("Gemma3ForCausalLM", qk_norm=True, post_norms=True, activation="gelu_tanh",
                       embed_scale=True, swa_period=6, local_rope_theta=10000.0,
                       embd_per_head_scale_layers=62),
    "phi3": ArchInfo("Phi3ForCausalLM", fused_qkv=True, fused_gate_up=True, swa_period=1),
}
SUPPORTED_ARCHITECTURES = tuple(ARCHS)


@dataclass
class LongRope:
    """Phi-3 long-context RoPE: short factors up to `original_context` tokens, long ones beyond."""
    original_context: int
    attn_factor: float


@dataclass
class ArchParams:
    """Per-model values beyond the llama layout (all neutral by default)."""
    attn_scale: float | None = None          # None: 1/sqrt(head_dim)
    attn_softcap: float = 0.0                # 0: none
    final_softcap: float = 0.0
    sliding_window: int = 0                  # 0: none
    swa_layers: tuple[bool, ...] = ()        # per layer: uses the sliding window
    local_rope_theta: float | None = None    # rotary base of the sliding layers (None: rope_theta)
    longrope: LongRope | None = None
    config: dict[str, object] = field(default_factory=dict)   # extra config.json keys

    def window(self, layer: int) -> int:
        """GroupQueryAttention's local_window_size for `layer` (-1: full causal attention).

        ORT's CPU kernel lets a query see its own key and the window-1 before it, the same band
        as Hugging Face's and llama.cpp's sliding_window (checked by the tests)."""
        if self.sliding_window and layer < len(self.swa_layers) and self.swa_layers[layer]:
            return self.sliding_window
        return -1


def read_arch_params(src: MetadataSource, arch: str, n_layers: int, n_embd: int, n_head: int,
                     head_dim: int, context: int) -> ArchParams:
    """The architecture-specific metadata of `src`, checked (one clear error per bad value)."""
    info = ARCHS[arch]
    p = ArchParams()
    scale = src.float_field(f"{arch}.attention.scale", 0.0, lo=0.0, hi=1e3)
    if scale:
        p.attn_scale = scale
    elif info.embd_per_head_scale_layers and n_layers == info.embd_per_head_scale_layers:
        p.attn_scale = 1.0 / math.sqrt(n_embd / n_head)
    p.attn_softcap = src.float_field(f"{arch}.attn_logit_softcapping", 0.0, lo=0.0, hi=1e6)
    p.final_softcap = src.float_field(f"{arch}.final_logit_softcapping", 0.0, lo=0.0, hi=1e6)
    window = src.int_field(f"{arch}.attention.sliding_window", 0, lo=0, hi=2 ** 31 - 1) or 0
    if window and info.swa_period == 0:
        raise ModelImportError(f"{src.path.name}: {arch}.attention.sliding_window is set, but {arch} "
                               "models have no sliding-window layers in Amber's importer")
    if window and window < context:       # a window as long as the context changes nothing
        p.sliding_window = window
        p.swa_layers = _swa_layers(src, arch, info.swa_period, n_layers)
    if info.local_rope_theta is not None:
        p.local_rope_theta = src.float_field(f"{arch}.rope.freq_base_swa", info.local_rope_theta,
                                             lo=0.0, hi=1e12)
    if src.has_tensor("rope_factors_long.weight") or src.has_tensor("rope_factors_short.weight"):
        if not (src.has_tensor("rope_factors_long.weight") and src.has_tensor("rope_factors_short.weight")):
            raise ModelImportError(f"{src.path.name}: long-context RoPE needs both rope_factors_long.weight "
                                   "and rope_factors_short.weight")
        orig = src.int_field(f"{arch}.rope.scaling.original_context_length", lo=1, hi=context, required=True)
        assert orig is not None
        factor = context / orig
        default_attn = math.sqrt(1 + math.log(factor) / math.log(orig)) if factor > 1 and orig > 1 else 1.0
        attn = src.float_field(f"{arch}.rope.scaling.attn_factor", default_attn, lo=0.0, hi=100.0)
        p.longrope = LongRope(original_context=orig, attn_factor=attn)
    # config.json in Hugging Face's spelling (informational: the engine reads the graph itself).
    if p.attn_softcap:
        p.config["attn_logit_softcapping"] = p.attn_softcap
    if p.final_softcap:
        p.config["final_logit_softcapping"] = p.final_softcap
    if p.sliding_window:
        p.config["sliding_window"] = p.sliding_window
    if p.attn_scale is not None:
        p.config["query_pre_attn_scalar"] = 1.0 / p.attn_scale ** 2
    if p.local_rope_theta is not None:
        p.config["rope_local_base_freq"] = p.local_rope_theta
    if p.longrope is not None:
        p.config["original_max_position_embeddings"] = p.longrope.original_context
    if info.activation == "gelu_tanh":
        p.config["hidden_activation"] = "gelu_pytorch_tanh"
    return p


def _swa_layers(src: MetadataSource, arch: str, period: int, n_layers: int) -> tuple[bool, ...]:
    """Which layers slide: {arch}.attention.sliding_window_pattern when the GGUF has it (a period,
    or one bool per layer, as llama.cpp reads it), else the architecture's own pattern."""
    key = f"{arch}.attention.sliding_window_pattern"
    info = src.layout.fields.get(key)
    if info is not None and info.type == gs.ARRAY:
        flags = src.array_field(key, (gs.BOOL,), "a period or an array of booleans") or []
        if len(flags) != n_layers:
            raise ModelImportError(f"{src.path.name}: {key} has {len(flags)} entries for {n_layers} layers")
        return tuple(bool(f) for f in flags)
    if info is not None:
        period = src.require_int(key, lo=0, hi=n_layers + 1)
        # llama.cpp's set_swa_pattern: 0 = every layer, n = all but every n-th
        return tuple(period == 0 or i % period < period - 1 for i in range(n_layers))
    return tuple(i % period < period - 1 if period > 1 else True for i in range(n_layers))
