"""Crafted GGUF metadata and tensor tables get one clear `ModelImportError`.

Each file is a real tiny GGUF (`tiny_gguf.write_tiny_gguf`) with one field rewritten at the byte
level (`gguf_bytes`), so everything else about it is valid. Every call runs under `run_bounded`:
before the fix several of these looped for ever with memory growing, or tried to allocate GiB.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import gguf_bytes as gb
from tests.support.bounded import run_bounded
from engine.convert import ModelImportError, convert_gguf
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

REPO = Path(__file__).resolve().parents[3]
BASE = TinyConfig()


@pytest.fixture(scope="module")
def tiny_bytes(tmp_path_factory) -> bytes:
    return write_tiny_gguf(tmp_path_factory.mktemp("hostile") / "tiny.gguf", BASE).path.read_bytes()


def refused(tmp_path: Path, data: bytes, *, max_mb: float = 128) -> str:
    """Converting `data` fails with one line naming the file; nothing is left behind."""
    src = tmp_path / "crafted.gguf"
    src.write_bytes(data)
    dest = tmp_path / "out"
    with pytest.raises(ModelImportError) as err:
        run_bounded(lambda: convert_gguf(src, dest), seconds=60, max_mb=max_mb)
    msg = str(err.value)
    assert "\n" not in msg and "crafted.gguf" in msg, msg
    assert not dest.exists() and not [p for p in tmp_path.iterdir() if ".partial" in p.name]
    return msg


def with_field(data: bytes, key: str, vtype: int, raw: bytes) -> bytes:
    return gb.parse(data).set(key, vtype, raw).to_bytes()


def u32(v: int) -> bytes:
    return gb.scalar(gb.UINT32, v)


# ---- array counts and types that made gguf.GGUFReader loop for ever ---------------------------------
def _array_header(data: bytes, key: str, etype: int, count: int) -> bytes:
    parts = gb.parse(data)
    kv = parts.get(key)
    kv.raw = struct.pack("<IQ", etype, count) + kv.raw[12:]
    return parts.to_bytes()


@pytest.mark.parametrize("count", [2 ** 60, 2 ** 64 - 1, 2 ** 32, 10 ** 6])
def test_token_type_count_beyond_the_file(tmp_path, tiny_bytes, count):
    msg = refused(tmp_path, _array_header(tiny_bytes, "tokenizer.ggml.token_type", gb.INT32, count))
    assert "tokenizer.ggml.token_type" in msg


def test_token_type_array_of_arrays(tmp_path, tiny_bytes):
    msg = refused(tmp_path, _array_header(tiny_bytes, "tokenizer.ggml.token_type", gb.ARRAY, 420))
    assert "tokenizer.ggml.token_type" in msg and "array of arrays" in msg


def test_tokens_count_beyond_the_file(tmp_path, tiny_bytes):
    msg = refused(tmp_path, _array_header(tiny_bytes, "tokenizer.ggml.tokens", gb.STRING, 2 ** 60))
    assert "tokenizer.ggml.tokens" in msg


def test_unknown_array_element_type(tmp_path, tiny_bytes):
    msg = refused(tmp_path, _array_header(tiny_bytes, "tokenizer.ggml.token_type", 13, 420))
    assert "unknown element type 13" in msg


def test_unknown_value_type(tmp_path, tiny_bytes):
    parts = gb.parse(tiny_bytes)
    parts.get("llama.block_count").type = 99
    assert "unknown value type 99" in refused(tmp_path, parts.to_bytes())


def test_string_length_beyond_the_file(tmp_path, tiny_bytes):
    parts = gb.parse(tiny_bytes)
    kv = parts.get("general.name")
    kv.raw = struct.pack("<Q", 2 ** 63) + kv.raw[8:]
    assert "general.name" in refused(tmp_path, parts.to_bytes())


@pytest.mark.parametrize("n_kv", [2 ** 63, 2 ** 20, 23])
def test_metadata_count_beyond_the_file(tmp_path, tiny_bytes, n_kv):
    refused(tmp_path, gb.parse(tiny_bytes).to_bytes(n_kv=n_kv))


@pytest.mark.parametrize("n_tensors", [2 ** 64 - 1, 60000])
def test_tensor_count_beyond_the_file(tmp_path, tiny_bytes, n_tensors):
    parts = gb.parse(tiny_bytes)
    parts.n_tensors = n_tensors
    refused(tmp_path, parts.to_bytes())


def test_duplicate_metadata_key(tmp_path, tiny_bytes):
    parts = gb.parse(tiny_bytes)
    parts.kvs.append(gb.KV("llama.block_count", gb.UINT32, u32(2)))
    assert "appears twice" in refused(tmp_path, parts.to_bytes())


def test_key_not_utf8(tmp_path, tiny_bytes):
    parts = gb.parse(tiny_bytes)
    data = parts.to_bytes()
    at = data.index(b"general.name")
    data = data[:at] + b"\xff\xfe" + data[at + 2:]
    assert "UTF-8" in refused(tmp_path, data)


@pytest.mark.parametrize("version,words", [(1, "version 1 is not supported"), (7, "version 7"),
                                           (0x03000000, "big-endian")])
def test_unsupported_version(tmp_path, tiny_bytes, version, words):
    parts = gb.parse(tiny_bytes)
    parts.version = version
    assert words in refused(tmp_path, parts.to_bytes())


@pytest.mark.parametrize("raw,vtype", [(u32(0), gb.UINT32), (u32(48), gb.UINT32), (gb.string("32"), gb.STRING)],
                         ids=["zero", "not-a-power-of-two", "string"])
def test_bad_alignment(tmp_path, tiny_bytes, raw, vtype):
    assert "general.alignment" in refused(tmp_path, with_field(tiny_bytes, "general.alignment", vtype, raw))


# ---- absurd hyperparameters: refused before anything is sized from them ---------------------------
@pytest.mark.parametrize("key,value,words", [
    ("llama.block_count", 0, "llama.block_count = 0 is out of range"),
    ("llama.attention.head_count", 0, "llama.attention.head_count = 0 is out of range"),
    ("llama.attention.head_count_kv", 0, "head_count_kv = 0 is out of range"),
    ("llama.attention.head_count_kv", 3, "head_count_kv 3 does not divide llama.attention.head_count 4"),
    ("llama.attention.head_count_kv", 2 ** 32 - 1, "head_count_kv = 4294967295 is out of range"),
    ("llama.context_length", 10 ** 7, "llama.context_length = 10000000 is out of range"),
    ("llama.context_length", 2 ** 31, "llama.context_length = 2147483648 is out of range"),
    ("llama.context_length", 0, "llama.context_length = 0 is out of range"),
    ("llama.embedding_length", 2 ** 32 - 1, "llama.embedding_length = 4294967295 is out of range"),
    ("llama.embedding_length", 0, "llama.embedding_length = 0"),
    ("llama.feed_forward_length", 0, "llama.feed_forward_length = 0"),
    ("llama.rope.dimension_count", 0, "partial rotary"),
    ("llama.vocab_size", 2 ** 31, "llama.vocab_size = 2147483648 is out of range"),
])
def test_absurd_hyperparameter(tmp_path, tiny_bytes, key, value, words):
    msg = refused(tmp_path, with_field(tiny_bytes, key, gb.UINT32, u32(value)))
    assert words in msg, msg


def test_head_dim_zero(tmp_path, tiny_bytes):
    """embedding_length smaller than head_count gives head dimension 0 (0 % 16 == 0 passed before)."""
    data = with_field(tiny_bytes, "llama.embedding_length", gb.UINT32, u32(2))
    data = gb.parse(data).drop("llama.rope.dimension_count").to_bytes()
    assert "head dimension 0" in refused(tmp_path, data)


def test_context_times_head_dim_too_large(tmp_path, tiny_bytes):
    """Within each bound alone, but the rotary tables would need GiB."""
    data = with_field(tiny_bytes, "llama.context_length", gb.UINT32, u32(2 ** 21))
    data = with_field(data, "llama.attention.key_length", gb.UINT32, u32(2048))
    data = with_field(data, "llama.rope.dimension_count", gb.UINT32, u32(2048))
    assert "rotary tables" in refused(tmp_path, data)


@pytest.mark.parametrize("value", [10.0 ** 300, float("nan"), float("inf"), -1.0, 0.0])
def test_bad_floats(tmp_path, tiny_bytes, value):
    raw = gb.scalar(gb.FLOAT64, value)
    for field in ("llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon"):
        msg = refused(tmp_path, with_field(tiny_bytes, field, gb.FLOAT64, raw))
        assert field in msg and "out of range" in msg


# ---- wrong types ------------------------------------------------------------------------------------
@pytest.mark.parametrize("key,vtype,raw,want", [
    ("llama.block_count", gb.STRING, gb.string("abc"), "an integer"),
    ("llama.block_count", gb.FLOAT32, gb.scalar(gb.FLOAT32, 2.0), "an integer"),
    ("llama.context_length", gb.ARRAY, gb.array(gb.UINT32, [512, 512]), "an integer"),
    ("general.architecture", gb.UINT32, u32(1), "a string"),
    ("general.architecture", gb.ARRAY, gb.array(gb.STRING, ["llama"]), "a string"),
    ("general.name", gb.UINT32, u32(7), "a string"),
    ("llama.rope.freq_base", gb.STRING, gb.string("1e4"), "a number"),
    ("tokenizer.ggml.model", gb.UINT32, u32(2), "a string"),
    ("tokenizer.ggml.tokens", gb.STRING, gb.string("hello"), "an array of strings"),
    ("tokenizer.ggml.tokens", gb.ARRAY, gb.array(gb.UINT32, list(range(420))), "an array of strings"),
    ("tokenizer.ggml.token_type", gb.ARRAY, gb.array(gb.STRING, ["1"] * 420), "an array of integers"),
    ("tokenizer.ggml.merges", gb.ARRAY, gb.array(gb.INT32, [1, 2]), "an array of strings"),
    ("tokenizer.ggml.eos_token_id", gb.STRING, gb.string("x"), "an integer"),
    ("tokenizer.ggml.bos_token_id", gb.ARRAY, gb.array(gb.INT32, []), "an integer"),
    ("tokenizer.ggml.add_bos_token", gb.STRING, gb.string("yes"), "a boolean"),
    ("tokenizer.chat_template", gb.ARRAY, gb.array(gb.STRING, ["a", "b"]), "a string"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_wrong_metadata_type(tmp_path, tiny_bytes, key, vtype, raw, want):
    msg = refused(tmp_path, with_field(tiny_bytes, key, vtype, raw))
    assert f"metadata {key} should be {want}" in msg, msg


def test_token_type_length_disagrees_with_tokens(tmp_path, tiny_bytes):
    data = with_field(tiny_bytes, "tokenizer.ggml.token_type", gb.ARRAY, gb.array(gb.INT32, [1] * 10))
    assert "token_type has 10 entries for 420 tokens" in refused(tmp_path, data)


def test_empty_token_list(tmp_path, tiny_bytes):
    data = with_field(tiny_bytes, "tokenizer.ggml.tokens", gb.ARRAY, gb.array(gb.STRING, []))
    assert "no tokenizer" in refused(tmp_path, data)


def test_overlong_token(tmp_path, tiny_bytes):
    parts = gb.parse(tiny_bytes)
    tokens = [f"t{i}" for i in range(419)] + ["x" * 100_000]
    parts.set("tokenizer.ggml.tokens", gb.ARRAY, gb.array(gb.STRING, tokens))
    assert "tokenizer.ggml.tokens[419] is 100000 characters long" in refused(tmp_path, parts.to_bytes())


def test_more_tokens_than_embedding_rows(tmp_path, tiny_bytes):
    parts = gb.parse(tiny_bytes)
    tokens = gb.parse(tiny_bytes).get("tokenizer.ggml.tokens")
    count = struct.unpack_from("<Q", tokens.raw, 4)[0]
    extra = [f"extra{i}" for i in range(30)]
    parts.set("tokenizer.ggml.tokens", gb.ARRAY,
              struct.pack("<IQ", gb.STRING, count + 30) + tokens.raw[12:] + b"".join(gb.string(t) for t in extra))
    parts.set("tokenizer.ggml.token_type", gb.ARRAY, gb.array(gb.INT32, [1] * (count + 30)))
    parts.drop("llama.vocab_size")
    assert "450 tokens but token_embd.weight has only 420 rows" in refused(tmp_path, parts.to_bytes())


@pytest.mark.parametrize("key", ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id",
                                 "tokenizer.ggml.padding_token_id"])
def test_token_id_outside_the_vocabulary_is_ignored(tmp_path, tiny_bytes, key):
    """An id past the vocabulary (or llama.cpp's -1 'none') is treated as absent, not indexed."""
    src = tmp_path / "m.gguf"
    src.write_bytes(with_field(tiny_bytes, key, gb.INT32, gb.scalar(gb.INT32, -1)))
    out = run_bounded(lambda: convert_gguf(src, tmp_path / "out"), seconds=120)
    assert (out / "model.onnx").is_file()


# ---- the tensor table ---------------------------------------------------------------------------------
def _tensor_entry(parts: gb.GGUFParts, name: str) -> int:
    """Offset of tensor `name`'s dimension count inside parts.infos."""
    at = parts.infos.index(gb.string(name))
    return at + len(gb.string(name))


def _patch_info(data: bytes, name: str, fmt: str, offset: int, value: int) -> bytes:
    parts = gb.parse(data)
    at = _tensor_entry(parts, name) + offset
    infos = bytearray(parts.infos)
    struct.pack_into(fmt, infos, at, value)
    parts.infos = bytes(infos)
    return parts.to_bytes()


@pytest.mark.parametrize("n_dims", [0, 5, 2 ** 32 - 1])
def test_tensor_dimension_count(tmp_path, tiny_bytes, n_dims):
    msg = refused(tmp_path, _patch_info(tiny_bytes, "token_embd.weight", "<I", 0, n_dims))
    assert "token_embd.weight" in msg


@pytest.mark.parametrize("dim", [0, 2 ** 40, 2 ** 64 - 1])
def test_tensor_dimension(tmp_path, tiny_bytes, dim):
    msg = refused(tmp_path, _patch_info(tiny_bytes, "token_embd.weight", "<Q", 4, dim))
    assert "token_embd.weight" in msg


def test_tensor_type_unknown(tmp_path, tiny_bytes):
    msg = refused(tmp_path, _patch_info(tiny_bytes, "blk.0.attn_q.weight", "<I", 4 + 16, 1000))
    assert "blk.0.attn_q.weight has unknown type 1000" in msg


@pytest.mark.parametrize("offset", [2 ** 63, 4])
def test_tensor_offset(tmp_path, tiny_bytes, offset):
    msg = refused(tmp_path, _patch_info(tiny_bytes, "blk.0.attn_q.weight", "<Q", 4 + 16 + 4, offset))
    assert "blk.0.attn_q.weight" in msg


def test_norm_vector_of_the_wrong_size(tmp_path):
    import numpy as np
    m = write_tiny_gguf(tmp_path / "m.gguf", BASE, replace_tensors={"blk.0.attn_norm.weight": np.ones(32, np.float32)})
    (tmp_path / "crafted.gguf").write_bytes(m.path.read_bytes())
    assert "layer 0 attn_norm has 32 values, expected 64" in refused(tmp_path, m.path.read_bytes())


def test_rope_factors_of_the_wrong_size(tmp_path):
    import numpy as np
    m = write_tiny_gguf(tmp_path / "m.gguf", BASE, extra_tensors={"rope_freqs.weight": np.ones(3, np.float32)})
    assert "rope_freqs.weight has 3 values, expected 8" in refused(tmp_path, m.path.read_bytes())


def test_embedding_as_a_vector_without_vocab_size(tmp_path):
    import numpy as np
    m = write_tiny_gguf(tmp_path / "m.gguf", BASE, omit=("llama.vocab_size",),
                        replace_tensors={"token_embd.weight": np.ones(420 * 64, np.float32)})
    parts = gb.parse(m.path.read_bytes())
    parts.set("tokenizer.ggml.tokens", gb.ARRAY, gb.array(gb.STRING, []))   # vocab size falls back to the tensor
    msg = refused(tmp_path, parts.to_bytes())
    assert "no tokenizer" in msg or "expected a matrix" in msg


# ---- the command line -------------------------------------------------------------------------------
def test_cli_hostile_gguf_exits_2_with_one_line(tmp_path, tiny_bytes):
    src = tmp_path / "crafted.gguf"
    src.write_bytes(_array_header(tiny_bytes, "tokenizer.ggml.token_type", gb.INT32, 2 ** 60))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "engine", "convert", str(src), str(tmp_path / "out")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "tokenizer.ggml.token_type" in lines[0], r.stderr
    assert not (tmp_path / "out").exists()
