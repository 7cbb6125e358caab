"""Fuzzing genai_config.json (onnxruntime-genai builder folders, engine/genai_config.py) over a
real tiny builder-style folder (tests/support/genai_folder.py).

Property: `load_model` ends in a loaded model or one `ModelLoadError` line; a model that loads
also generates two tokens (the values read from the file reach the sampler and the KV cache)
without any other exception. Bounded in time and traced memory.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_util import loads_and_generates_or_is_refused, scaled
from tests.support.genai_folder import write_genai_folder
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

CFG = TinyConfig(n_layers=1, n_embd=32, n_head=2, n_head_kv=1, head_dim=16, n_ff=64, vocab_size=300)

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 40, 2 ** 40),
                    st.sampled_from([0, 1, 2, -1, 2 ** 31, 2 ** 63, 10 ** 30]),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                    max_leaves=12)
SECTIONS = {
    (): ["model", "search"],
    ("model",): ["bos_token_id", "eos_token_id", "pad_token_id", "vocab_size", "context_length", "type", "decoder"],
    ("model", "decoder"): ["filename", "head_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
                           "num_key_value_heads", "inputs", "outputs"],
    ("model", "decoder", "inputs"): ["input_ids", "past_key_names", "attention_mask"],
    ("search",): ["do_sample", "temperature", "top_k", "top_p", "repetition_penalty"],
}


@pytest.fixture(scope="module")
def genai_dir(tmp_path_factory) -> Path:
    from engine.convert import convert_gguf
    root = tmp_path_factory.mktemp("fuzz-genai")
    src = write_tiny_gguf(root / "tiny.gguf", CFG)
    return write_genai_folder(convert_gguf(src.path, root / "model"), root / "genai")


@st.composite
def damaged(draw, original: dict) -> bytes:
    how = draw(st.sampled_from(["edit", "edit", "edit", "json", "bytes"]))
    if how == "bytes":
        return draw(st.binary(max_size=64))
    if how == "json":
        return json.dumps(draw(JSON)).encode()
    data = json.loads(json.dumps(original))
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.sampled_from(sorted(SECTIONS)))
        node = data
        for part in where:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        key = draw(st.one_of(st.sampled_from(SECTIONS[where]), st.text(max_size=8)))
        if draw(st.integers(0, 5)) == 0:
            node.pop(key, None)
        else:
            node[key] = draw(JSON)
    return json.dumps(data).encode()


@settings(max_examples=scaled(0.5))
@given(data=st.data())
def test_genai_folder_loads_or_is_refused(genai_dir, data):
    folder = genai_dir.parent / "fuzzed"
    if not folder.exists():
        shutil.copytree(genai_dir, folder)
    original = json.loads((genai_dir / "genai_config.json").read_text())
    (folder / "genai_config.json").write_bytes(data.draw(damaged(original), label="genai_config.json"))
    (folder / "amber_fingerprint.json").unlink(missing_ok=True)

    loads_and_generates_or_is_refused(folder)
