"""Reads a GGUF file into a `ModelSpec`: hyperparameters, tensors and tokenizer metadata."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.gguf_reader import ReaderTensor

from .errors import ModelImportError

SUPPORTED_ARCHITECTURES = ("llama", "qwen2")
GGUF_MAGIC = b"GGUF"


@dataclass
class ModelSpec:
    """Everything the graph builder needs to know about a decoder-only transformer."""
    architecture: str
    name: str
    n_layers: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    vocab_size: int
    context_length: int
    rms_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] = field(default_factory=dict)
    tied_embeddings: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_config(self) -> dict[str, Any]:
        """A Hugging Face style config.json for the converted model."""
        arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[self.architecture]
        cfg: dict[str, Any] = {
            "architectures": [arch],
            "model_type": self.architecture,
            "hidden_size": self.n_embd,
            "intermediate_size": self.n_ff,
            "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_head,
            "num_key_value_heads": self.n_head_kv,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.context_length,
            "rms_norm_eps": self.rms_eps,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tied_embeddings,
            "torch_dtype": "float32",
        }
        if self.rope_scaling:
            cfg["rope_scaling"] = self.rope_scaling
        return cfg


class GGUFSource:
    """An opened GGUF file. Every failure to read it becomes a `ModelImportError`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ModelImportError(f"{self.path}: no such file")
        with open(self.path, "rb") as f:
            magic = f.read(4)
        if magic != GGUF_MAGIC:
            raise ModelImportError(f"{self.path.name}: not a GGUF file (it does not start with 'GGUF')")
        try:
            self.reader = GGUFReader(self.path, "r")
        except Exception as exc:  # the reader raises many kinds on bad files
            raise ModelImportError(
                f"{self.path.name}: truncated or corrupt GGUF file ({type(exc).__name__}: {exc})") from None
        self._check_extent()
        self.tensors: dict[str, ReaderTensor] = {t.name: t for t in self.reader.tensors}

    def _check_extent(self) -> None:
        size = self.path.stat().st_size
        for t in self.reader.tensors:
            end = int(t.data_offset) + int(t.n_bytes)
            if end > size:
                raise ModelImportError(
                    f"{self.path.name}: truncated GGUF file (tensor {t.name} needs {end} bytes, file has {size})")

    def field(self, key: str, default: Any = None) -> Any:
        f = self.reader.fields.get(key)
        if f is None:
            return default
        try:
            if f.types and f.types[0] == GGUFValueType.ARRAY:
                return f.contents()
            return f.contents()
        except Exception as exc:
            raise ModelImportError(f"{self.path.name}: metadata {key} is unreadable ({exc})") from None

    def require(self, key: str) -> Any:
        value = self.field(key)
        if value is None:
            raise ModelImportError(f"{self.path.name}: missing metadata key {key}")
        return value

    def tensor(self, name: str) -> ReaderTensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelImportError(f"{self.path.name}: missing tensor {name}") from None

    def has_tensor(self, name: str) -> bool:
        return name in self.tensors

    def spec(self) -> ModelSpec:
        arch = self.require("general.architecture")
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ModelImportError(
                f"{self.path.name}: unsupported architecture '{arch}' "
                f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
        n_embd = int(self.require(f"{arch}.embedding_length"))
        n_head = int(self.require(f"{arch}.attention.head_count"))
        n_head_kv = int(self.field(f"{arch}.attention.head_count_kv", n_head))
        head_dim = int(self.field(f"{arch}.attention.key_length", n_embd // n_head))
        rope_dim = int(self.field(f"{arch}.rope.dimension_count", head_dim))
        if rope_dim != head_dim:
            raise ModelImportError(f"{self.path.name}: partial rotary embeddings are not supported "
                                   f"(rope dimension {rope_dim}, head dimension {head_dim})")
        if head_dim % 16 != 0:
            raise ModelImportError(f"{self.path.name}: head dimension {head_dim} is not a multiple of 16")
        tokens = self.field("tokenizer.ggml.tokens")
        vocab_size = int(self.field(f"{arch}.vocab_size", len(tokens) if tokens is not None else 0))
        if vocab_size == 0:
            vocab_size = int(self.tensor("token_embd.weight").shape[1])
        scaling: dict[str, Any] = {}
        scaling_type = self.field(f"{arch}.rope.scaling.type")
        if scaling_type not in (None, "none"):
            if scaling_type != "linear":
                raise ModelImportError(f"{self.path.name}: rope scaling '{scaling_type}' is not supported "
                                       "(supported: none, linear, llama3 frequency factors)")
            scaling = {"rope_type": "linear", "factor": float(self.require(f"{arch}.rope.scaling.factor"))}
        if self.has_tensor("rope_freqs.weight"):
            scaling = {"rope_type": "llama3-factors"}
        return ModelSpec(
            architecture=arch,
            name=str(self.field("general.name", self.path.stem)),
            n_layers=int(self.require(f"{arch}.block_count")),
            n_embd=n_embd,
            n_ff=int(self.require(f"{arch}.feed_forward_length")),
            n_head=n_head,
            n_head_kv=n_head_kv,
            head_dim=head_dim,
            vocab_size=vocab_size,
            context_length=int(self.field(f"{arch}.context_length", 2048)),
            rms_eps=float(self.field(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
            rope_theta=float(self.field(f"{arch}.rope.freq_base", 10000.0)),
            rope_scaling=scaling,
            tied_embeddings=not self.has_tensor("output.weight"),
        )

    def float_tensor(self, name: str) -> np.ndarray:
        """A small tensor (norm weights, biases, rope factors) as float32."""
        from gguf import quants
        t = self.tensor(name)
        try:
            arr = quants.dequantize(np.asarray(t.data), t.tensor_type)
        except Exception as exc:
            raise ModelImportError(f"{self.path.name}: tensor {name} of type {t.tensor_type.name} "
                                   f"cannot be read ({exc})") from None
        return np.ascontiguousarray(arr, dtype=np.float32)
