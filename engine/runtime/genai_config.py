"""Reads `genai_config.json`, the one settings file of onnxruntime-genai's model builder folders.

The builder writes no `config.json` and no `generation_config.json`: the hyperparameters the loader
needs sit under `model` / `model.decoder`, the sampling defaults under `search`. This module turns
them into the two dictionaries a Hugging Face folder would have held, so the rest of the loader
(checks, KV layout, end-of-sequence ids, the sampler's defaults) reads them the same way. The
builder's graphs use the standard input/output names (input_ids, past_key_values.%d.key,
present.%d.key, logits); a file naming others is refused rather than half-understood.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .model_config import ConfigError, read_json_object

GENAI_CONFIG = "genai_config.json"

# genai_config.json keys -> config.json keys (the ones the loader reads)
_MODEL_KEYS = {"bos_token_id": "bos_token_id", "eos_token_id": "eos_token_id", "pad_token_id": "pad_token_id",
               "vocab_size": "vocab_size", "context_length": "max_position_embeddings", "type": "model_type"}
_DECODER_KEYS = {"head_size": "head_dim", "hidden_size": "hidden_size", "num_attention_heads": "num_attention_heads",
                 "num_hidden_layers": "num_hidden_layers", "num_key_value_heads": "num_key_value_heads"}
_SEARCH_KEYS = ("do_sample", "temperature", "top_k", "top_p", "repetition_penalty")
# The names Amber's runner binds; the builder writes these unless told otherwise.
_STANDARD_NAMES = {("inputs", "input_ids"): "input_ids", ("inputs", "attention_mask"): "attention_mask",
                   ("inputs", "position_ids"): "position_ids",
                   ("inputs", "past_key_names"): "past_key_values.%d.key",
                   ("inputs", "past_value_names"): "past_key_values.%d.value",
                   ("outputs", "logits"): "logits", ("outputs", "present_key_names"): "present.%d.key",
                   ("outputs", "present_value_names"): "present.%d.value"}


class GenaiFolder:
    """What a builder folder's genai_config.json says: the graph's file name and the two configs."""

    def __init__(self, path: Path, graph_file: str, config: dict[str, Any], generation: dict[str, Any]) -> None:
        self.path = path
        self.graph_file = graph_file
        self.config = config
        self.generation = generation


def _object(value: Any, path: Path, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {key} should be an object, found {type(value).__name__}")
    return value


def read_genai_config(model_dir: Path) -> GenaiFolder | None:
    """The folder's genai_config.json, or None when it has none; `ConfigError` when it is unusable."""
    path = model_dir / GENAI_CONFIG
    if not path.exists() and not path.is_symlink():
        return None
    data = read_json_object(path, required=True)
    model = _object(data.get("model"), path, "model")
    decoder = _object(model.get("decoder"), path, "model.decoder")
    search = _object(data.get("search"), path, "search")
    for (section, key), standard in _STANDARD_NAMES.items():
        names = _object(decoder.get(section), path, f"model.decoder.{section}")
        if key in names and names[key] != standard:
            raise ConfigError(f"{path}: model.decoder.{section}.{key} is {str(names[key])[:60]!r}; "
                              f"Amber reads graphs whose names are the builder's defaults ({standard!r})")
    graph_file = decoder.get("filename", "model.onnx")
    if not isinstance(graph_file, str) or not graph_file or "/" in graph_file or "\\" in graph_file \
            or graph_file in (".", ".."):
        raise ConfigError(f"{path}: model.decoder.filename should be a file name in the folder, "
                          f"found {str(graph_file)[:60]!r}")
    config = {dst: model[src] for src, dst in _MODEL_KEYS.items() if model.get(src) is not None}
    config.update({dst: decoder[src] for src, dst in _DECODER_KEYS.items() if decoder.get(src) is not None})
    generation = {key: search[key] for key in _SEARCH_KEYS if search.get(key) is not None}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if key in config:
            generation[key] = config[key]
    return GenaiFolder(path, graph_file, config, generation)
