"""GGUF tokenizer metadata → Hugging Face `tokenizer.json` + `tokenizer_config.json`."""
from __future__ import annotations

import json
from typing import Any

from tokenizers import Tokenizer

from engine.onnx.errors import ModelImportError
from .gguf_source import MAX_TOKEN_BYTES, GGUFSource

# Pre-tokenizer split patterns by `tokenizer.ggml.pre` (the same ones llama.cpp uses).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_PATTERNS: dict[str, tuple[str, bool]] = {   # pre -> (pattern, split digits one by one first)
    "default": (GPT2_PATTERN, False),
    "gpt2": (GPT2_PATTERN, False),
    "smollm": (GPT2_PATTERN, True),
    "llama3": (LLAMA3_PATTERN, False),
    "llama-bpe": (LLAMA3_PATTERN, False),
    "smaug-bpe": (LLAMA3_PATTERN, False),
    "qwen2": (QWEN2_PATTERN, False),
    "deepseek-r1-qwen": (QWEN2_PATTERN, False),
}
(TOKEN_TYPE_NORMAL, TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER, TOKEN_TYPE_UNUSED,
 TOKEN_TYPE_BYTE) = 1, 2, 3, 4, 5, 6


def _added(tok_id: int, content: str, special: bool) -> dict[str, Any]:
    return {"id": tok_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def _bos_post_processor(bos: str | None, bos_id: int | None, add_bos: bool) -> dict[str, Any] | None:
    if not add_bos or bos is None:
        return None
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}


def _gpt2_json(src: GGUFSource, tokens: list[str], types: list[int]) -> dict[str, Any]:
    merges = src.str_list("tokenizer.ggml.merges", MAX_TOKEN_BYTES * 2 + 1) or []
    pre = str(src.str_field("tokenizer.ggml.pre", "default"))
    pattern, digits = PRE_PATTERNS.get(pre, PRE_PATTERNS["default"])
    pretok: list[dict[str, Any]] = []
    if digits:
        pretok.append({"type": "Digits", "individual_digits": True})
    pretok.append({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False})
    pretok.append({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False})
    return {
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pretok},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [m.split(" ", 1) for m in merges]},
    }


def _spm_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[list[str]]:
    """SentencePiece BPE keeps scores, not merges: rebuild merges ranked by the merged piece's score."""
    vocab = {t: i for i, t in enumerate(tokens) if types[i] in (TOKEN_TYPE_NORMAL, TOKEN_TYPE_USER)}
    found: list[tuple[float, int, int, str, str]] = []
    for piece, pid in vocab.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                found.append((-scores[pid], vocab[left], vocab[right], left, right))
    found.sort()
    return [[left, right] for _, _, _, left, right in found]


def _spm_json(src: GGUFSource, tokens: list[str], types: list[int]) -> dict[str, Any]:
    scores = src.float_list("tokenizer.ggml.scores") or [0.0] * len(tokens)
    if len(scores) != len(tokens):
        raise ModelImportError(f"{src.path.name}: tokenizer.ggml.scores has {len(scores)} entries "
                               f"for {len(tokens)} tokens")
    add_prefix = src.bool_field("tokenizer.ggml.add_space_prefix", True)
    unk_id = src.token_id("tokenizer.ggml.unknown_token_id", len(tokens))
    normalizers: list[dict[str, Any]] = []
    if add_prefix:
        normalizers.append({"type": "Prepend", "prepend": "▁"})
    normalizers.append({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})
    decoders: list[dict[str, Any]] = [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]
    if add_prefix:
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": None,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {"type": "BPE", "dropout": None,
                  "unk_token": tokens[int(unk_id)] if unk_id is not None else None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
                  "byte_fallback": True, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": _spm_merges(tokens, scores, types)},
    }


def build_tokenizer_files(src: GGUFSource) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """Returns (tokenizer.json, tokenizer_config.json, chat template or None)."""
    model = src.str_field("tokenizer.ggml.model")
    tokens = src.str_list("tokenizer.ggml.tokens", MAX_TOKEN_BYTES)
    if model is None or not tokens:
        raise ModelImportError(f"{src.path.name}: no tokenizer in the GGUF metadata")
    types = src.int_list("tokenizer.ggml.token_type") or [TOKEN_TYPE_NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise ModelImportError(f"{src.path.name}: tokenizer.ggml.token_type has {len(types)} entries "
                               f"for {len(tokens)} tokens")
    if model == "gpt2":
        body = _gpt2_json(src, tokens, types)
    elif model == "llama":
        body = _spm_json(src, tokens, types)
    else:
        raise ModelImportError(f"{src.path.name}: unsupported tokenizer model '{model}' (supported: gpt2, llama)")

    bos_id = src.token_id("tokenizer.ggml.bos_token_id", len(tokens))
    eos_id = src.token_id("tokenizer.ggml.eos_token_id", len(tokens))
    default_add_bos = model == "llama"
    add_bos = src.bool_field("tokenizer.ggml.add_bos_token", default_add_bos)
    bos = tokens[bos_id] if bos_id is not None else None
    eos = tokens[eos_id] if eos_id is not None else None
    added = [_added(i, t, types[i] == TOKEN_TYPE_CONTROL) for i, t in enumerate(tokens)
             if types[i] in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER)]
    tok_json = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
                "post_processor": _bos_post_processor(bos, bos_id, add_bos), **body}
    # Let the tokenizers library validate what we wrote.
    try:
        Tokenizer.from_str(json.dumps(tok_json))
    except Exception as exc:  # noqa: BLE001 - the library's own check, any kind of error: one line
        raise ModelImportError(f"{src.path.name}: tokenizer metadata is inconsistent ({exc})") from None

    template = src.str_field("tokenizer.chat_template")
    pad_id = src.token_id("tokenizer.ggml.padding_token_id", len(tokens))
    unk_id = src.token_id("tokenizer.ggml.unknown_token_id", len(tokens))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos, "eos_token": eos,
        "pad_token": tokens[pad_id] if pad_id is not None else None,
        "unk_token": tokens[unk_id] if unk_id is not None else None,
        "add_bos_token": add_bos, "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": None,
    }
    if template:
        config["chat_template"] = str(template)
    return tok_json, config, (str(template) if template else None)


def eos_token_ids(src: GGUFSource, tokens: list[str]) -> list[int]:
    """EOS and end-of-turn ids: every one of them stops generation."""
    ids: list[int] = []
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        v = src.token_id(key, len(tokens))
        if v is not None and v not in ids:
            ids.append(v)
    for name in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "<end_of_turn>"):
        if name in tokens:
            i = tokens.index(name)
            if i not in ids:
                ids.append(i)
    return ids
