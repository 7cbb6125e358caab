"""Reads a GGUF file into a `ModelSpec`: hyperparameters, tensors and tokenizer metadata."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, quants
from gguf.gguf_reader import ReaderTensor

from . import gguf_scan as gs
from .arch import ARCHS, SUPPORTED_ARCHITECTURES, ArchParams, read_arch_params
from engine.onnx.errors import ModelImportError

GGUF_MAGIC = b"GGUF"
_INT_TYPES = (gs.UINT8, gs.INT8, gs.UINT16, gs.INT16, gs.UINT32, gs.INT32, gs.UINT64, gs.INT64)
_FLOAT_TYPES = (gs.FLOAT32, gs.FLOAT64)

# Sane model bounds, checked before anything is sized from them. Far above real models (the
# largest have ~200 layers, 32k-wide embeddings, 256k vocabularies, 1M-token contexts).
MAX_LAYERS = 1024
MAX_EMBD = 1 << 17
MAX_FF = 1 << 20
MAX_HEADS = 1 << 12
MAX_HEAD_DIM = 1 << 11
MAX_VOCAB = 1 << 22
MAX_CONTEXT = 1 << 21
MAX_ROPE_TABLE = 1 << 27     # context_length * head_dim / 2: the cos/sin caches (512 MiB each)
MAX_TOKEN_BYTES = 1 << 12    # one vocabulary entry (rebuilding SentencePiece merges is quadratic in it)


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
    params: ArchParams = field(default_factory=ArchParams)   # architecture-specific (arch.py)

    def to_config(self) -> dict[str, Any]:
        """A Hugging Face style config.json for the converted model."""
        arch = ARCHS[self.architecture].hf_class
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
        cfg.update(self.params.config)
        return cfg


class GGUFSource:
    """An opened GGUF file. Every failure to read it becomes a `ModelImportError`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ModelImportError(f"{self.path}: no such file")
        try:
            # Amber's own bounded walk first: the reader loops for ever on crafted counts.
            self.layout = gs.scan_gguf(self.path)
        except OSError as exc:
            raise ModelImportError(f"{self.path.name}: cannot be read ({exc.strerror or exc})") from None
        try:
            self.reader = GGUFReader(self.path, "r")
        except Exception as exc:  # noqa: BLE001 - the reader raises many kinds on bad files
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
        """The raw value of a metadata key (any type); prefer the typed accessors below."""
        f = self.reader.fields.get(key)
        if f is None:
            return default
        try:
            return f.contents()
        except Exception as exc:  # noqa: BLE001 - untrusted file: the library raises any kind; reported as one line
            raise ModelImportError(f"{self.path.name}: metadata {key} is unreadable ({exc})") from None

    def require(self, key: str) -> Any:
        value = self.field(key)
        if value is None:
            raise ModelImportError(f"{self.path.name}: missing metadata key {key}")
        return value

    # ---- typed metadata: a wrong type or an out-of-range value is one clear error -------------
    def _typed(self, key: str, ok: bool, want: str) -> None:
        if not ok:
            found = self.layout.fields[key].describe()
            raise ModelImportError(f"{self.path.name}: metadata {key} should be {want}, found {found}")

    def _bad(self, key: str, value: Any, rule: str) -> ModelImportError:
        return ModelImportError(f"{self.path.name}: metadata {key} = {value!r} is out of range ({rule})")

    def int_field(self, key: str, default: int | None = None, *, lo: int = 0, hi: int = 2 ** 63 - 1,
                  required: bool = False) -> int | None:
        info = self.layout.fields.get(key)
        if info is None:
            if required:
                raise ModelImportError(f"{self.path.name}: missing metadata key {key}")
            return default
        self._typed(key, info.type in _INT_TYPES, "an integer")
        value = int(self.field(key))
        if not lo <= value <= hi:
            raise self._bad(key, value, f"{lo}..{hi}")
        return value

    def require_int(self, key: str, *, lo: int = 0, hi: int = 2 ** 63 - 1) -> int:
        value = self.int_field(key, lo=lo, hi=hi, required=True)
        assert value is not None
        return value

    def float_field(self, key: str, default: float, *, lo: float, hi: float, required: bool = False) -> float:
        """A finite number in (lo, hi]; integers are accepted too."""
        info = self.layout.fields.get(key)
        if info is None:
            if required:
                raise ModelImportError(f"{self.path.name}: missing metadata key {key}")
            return default
        self._typed(key, info.type in _FLOAT_TYPES + _INT_TYPES, "a number")
        value = float(self.field(key))
        if not (math.isfinite(value) and lo < value <= hi):
            raise self._bad(key, value, f"above {lo:g}, at most {hi:g}")
        return value

    def str_field(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        info = self.layout.fields.get(key)
        if info is None:
            if required:
                raise ModelImportError(f"{self.path.name}: missing metadata key {key}")
            return default
        self._typed(key, info.type == gs.STRING, "a string")
        return str(self.field(key))

    def bool_field(self, key: str, default: bool) -> bool:
        info = self.layout.fields.get(key)
        if info is None:
            return default
        self._typed(key, info.type == gs.BOOL or info.type in _INT_TYPES, "a boolean")
        return bool(self.field(key))

    def array_field(self, key: str, elem_ok: tuple[int, ...], want: str) -> list[Any] | None:
        info = self.layout.fields.get(key)
        if info is None:
            return None
        self._typed(key, info.type == gs.ARRAY and info.elem_type in elem_ok, want)
        value = self.field(key)
        return list(value) if info.count else []

    def str_list(self, key: str, max_bytes: int = gs.MAX_STRING_BYTES) -> list[str] | None:
        values = self.array_field(key, (gs.STRING,), "an array of strings")
        if values is not None:
            for i, v in enumerate(values):
                if len(v) > max_bytes:
                    raise ModelImportError(f"{self.path.name}: metadata {key}[{i}] is {len(v)} characters long, "
                                           f"more than {max_bytes}")
        return values

    def int_list(self, key: str) -> list[int] | None:
        return self.array_field(key, _INT_TYPES, "an array of integers")

    def float_list(self, key: str) -> list[float] | None:
        values = self.array_field(key, _FLOAT_TYPES + _INT_TYPES, "an array of numbers")
        return None if values is None else [float(v) for v in values]

    def token_id(self, key: str, n_tokens: int) -> int | None:
        """A token id, or None when absent or outside the vocabulary (e.g. a -1 'none' marker)."""
        info = self.layout.fields.get(key)
        if info is None:
            return None
        self._typed(key, info.type in _INT_TYPES, "an integer")
        value = int(self.field(key))
        return value if 0 <= value < n_tokens else None

    def tensor(self, name: str) -> ReaderTensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelImportError(f"{self.path.name}: missing tensor {name}") from None

    def has_tensor(self, name: str) -> bool:
        return name in self.tensors

    def spec(self) -> ModelSpec:
        arch = self.str_field("general.architecture", required=True)
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ModelImportError(
                f"{self.path.name}: unsupported architecture '{arch}' "
                f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
        name = self.path.name
        n_layers = self.require_int(f"{arch}.block_count", lo=1, hi=MAX_LAYERS)
        n_embd = self.require_int(f"{arch}.embedding_length", lo=1, hi=MAX_EMBD)
        n_ff = self.require_int(f"{arch}.feed_forward_length", lo=1, hi=MAX_FF)
        n_head = self.require_int(f"{arch}.attention.head_count", lo=1, hi=MAX_HEADS)
        n_head_kv = self.int_field(f"{arch}.attention.head_count_kv", n_head, lo=1, hi=n_head)
        assert n_head_kv is not None
        if n_head % n_head_kv:
            raise ModelImportError(f"{name}: {arch}.attention.head_count_kv {n_head_kv} does not divide "
                                   f"{arch}.attention.head_count {n_head}")
        head_dim = self.int_field(f"{arch}.attention.key_length", n_embd // n_head, lo=0, hi=MAX_HEAD_DIM)
        rope_dim = self.int_field(f"{arch}.rope.dimension_count", head_dim, lo=0, hi=MAX_HEAD_DIM)
        assert head_dim is not None and rope_dim is not None
        if rope_dim != head_dim:
            raise ModelImportError(f"{self.path.name}: partial rotary embeddings are not supported "
                                   f"(rope dimension {rope_dim}, head dimension {head_dim})")
        if head_dim % 16 != 0 or head_dim == 0:
            raise ModelImportError(f"{self.path.name}: head dimension {head_dim} is not a multiple of 16")
        tokens = self.str_list("tokenizer.ggml.tokens", MAX_TOKEN_BYTES)
        vocab_size = self.int_field(f"{arch}.vocab_size", len(tokens) if tokens is not None else 0,
                                    lo=0, hi=MAX_VOCAB)
        if vocab_size == 0:
            shape = self.tensor("token_embd.weight").shape
            if len(shape) != 2:
                raise ModelImportError(f"{name}: tensor token_embd.weight: expected a matrix, "
                                       f"found shape {list(shape)}")
            vocab_size = int(shape[1])
        context = self.int_field(f"{arch}.context_length", 2048, lo=1, hi=MAX_CONTEXT)
        assert vocab_size is not None and context is not None
        if context * (head_dim // 2) > MAX_ROPE_TABLE:
            raise ModelImportError(f"{name}: {arch}.context_length {context} with head dimension {head_dim} "
                                   f"needs rotary tables of more than {MAX_ROPE_TABLE} entries")
        scaling: dict[str, Any] = {}
        scaling_type = self.str_field(f"{arch}.rope.scaling.type")
        if scaling_type not in (None, "none"):
            if scaling_type != "linear":
                raise ModelImportError(f"{self.path.name}: rope scaling '{scaling_type}' is not supported "
                                       "(supported: none, linear, llama3 frequency factors)")
            scaling = {"rope_type": "linear",
                       "factor": self.float_field(f"{arch}.rope.scaling.factor", 1.0, lo=0.0, hi=1e6,
                                                  required=True)}
        if self.has_tensor("rope_freqs.weight"):
            scaling = {"rope_type": "llama3-factors"}
        params = read_arch_params(self, arch, n_layers, n_embd, n_head, head_dim, context)
        if params.longrope is not None:
            if scaling:
                raise ModelImportError(f"{name}: long-context RoPE factors together with rope scaling "
                                       f"'{scaling['rope_type']}'")
            scaling = {"rope_type": "longrope", "original_max_position_embeddings": params.longrope.original_context,
                       "attention_factor": params.longrope.attn_factor}
        return ModelSpec(
            architecture=arch,
            name=str(self.str_field("general.name", self.path.stem)),
            n_layers=n_layers,
            n_embd=n_embd,
            n_ff=n_ff,
            n_head=n_head,
            n_head_kv=n_head_kv,
            head_dim=head_dim,
            vocab_size=vocab_size,
            context_length=context,
            rms_eps=self.float_field(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6, lo=0.0, hi=1.0),
            rope_theta=self.float_field(f"{arch}.rope.freq_base", 10000.0, lo=0.0, hi=1e12),
            rope_scaling=scaling,
            tied_embeddings=not self.has_tensor("output.weight"),
            params=params,
        )

    def float_tensor(self, name: str) -> np.ndarray:
        """A small tensor (norm weights, biases, rope factors) as float32."""
        t = self.tensor(name)
        try:
            arr = quants.dequantize(np.asarray(t.data), t.tensor_type)
        except Exception as exc:  # noqa: BLE001 - untrusted file: the library raises any kind; reported as one line
            raise ModelImportError(f"{self.path.name}: tensor {name} of type {t.tensor_type.name} "
                                   f"cannot be read ({exc})") from None
        return np.ascontiguousarray(arr, dtype=np.float32)
