"""Fuzzing the model-folder loader: generated config.json / generation_config.json /
tokenizer_config.json over a real tiny converted model.

Property: `load_model` ends in a loaded model or one `ModelLoadError` line; a model that loads
also generates two tokens (its config values reach the sampler and the KV cache) without any
other exception. Bounded in time and traced memory.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_util import loads_and_generates_or_is_refused, scaled
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

CFG = TinyConfig(n_layers=1, n_embd=32, n_head=2, n_head_kv=1, head_dim=16, n_ff=64, vocab_size=300)
FILES = ("config.json", "generation_config.json", "tokenizer_config.json")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from engine.convert import convert_gguf
    root = tmp_path_factory.mktemp("fuzz-config")
    src = write_tiny_gguf(root / "tiny.gguf", CFG)
    return convert_gguf(src.path, root / "model")


@pytest.fixture(scope="module")
def originals(model_dir) -> dict[str, dict]:
    return {name: json.loads((model_dir / name).read_text()) for name in FILES}


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 40, 2 ** 40),
                    st.sampled_from([0, 1, 2, -1, 2 ** 31, 2 ** 63, 10 ** 30]),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                    max_leaves=12)
KEYS = {
    "config.json": ["eos_token_id", "bos_token_id", "pad_token_id", "max_position_embeddings", "n_positions",
                    "num_key_value_heads", "num_attention_heads", "hidden_size", "head_dim", "num_hidden_layers",
                    "vocab_size"],
    "generation_config.json": ["eos_token_id", "bos_token_id", "pad_token_id", "do_sample", "temperature", "top_k",
                               "top_p", "min_p", "repetition_penalty"],
    "tokenizer_config.json": ["eos_token", "bos_token", "chat_template", "pad_token", "add_bos_token"],
}


@st.composite
def damaged_file(draw, name: str, original: dict) -> bytes | None:
    """None (leave the file), raw bytes, a generated JSON value, or the original with keys changed."""
    how = draw(st.sampled_from(["keep", "edit", "edit", "edit", "json", "bytes", "delete"]))
    if how == "keep":
        return None
    if how == "delete":
        return b""  if name == "config.json" and draw(st.booleans()) else b"\0delete"
    if how == "bytes":
        return draw(st.binary(max_size=64))
    if how == "json":
        return json.dumps(draw(JSON)).encode()
    data = dict(original)
    for key in draw(st.lists(st.one_of(st.sampled_from(KEYS[name]), st.text(max_size=8)), min_size=1, max_size=4)):
        if draw(st.integers(0, 5)) == 0:
            data.pop(key, None)
        else:
            data[key] = draw(JSON)
    return json.dumps(data).encode()


@settings(max_examples=scaled(0.5))
@given(data=st.data())
def test_model_folder_loads_or_is_refused(model_dir, tmp_path_factory, originals, data):
    folder = model_dir.parent / "fuzzed"
    if not folder.exists():
        shutil.copytree(model_dir, folder)
    for name in FILES:
        content = data.draw(damaged_file(name, originals[name]), label=name)
        path = folder / name
        if content == b"\0delete":
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(json.dumps(originals[name]).encode() if content is None else content)
    (folder / "amber_fingerprint.json").unlink(missing_ok=True)

    loads_and_generates_or_is_refused(folder)
